#!/usr/bin/python3
"""Random tiny Hugging Face model folders written with numpy, for testing the reference.

Independent of kvserve-make-model: the reference's self-test must not depend on the code it
is meant to check. Writes config.json and model.safetensors (or two shards plus
model.safetensors.index.json) in F32, F16 or BF16.
"""

import json
import os
import struct

import numpy as np

# A configuration small enough for a slow scalar implementation, with GQA (4 heads, 2 kv).
_BASE_CONFIG = {
    "vocab_size": 97,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 8,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "max_position_embeddings": 256,
    "tie_word_embeddings": False,
}


def _to_bf16_bits(values):
    """Round-to-nearest-even float32 -> bfloat16 bit patterns."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def write_safetensors(path, tensors, dtype="F32"):
    """tensors: {name: float ndarray}; stored as dtype (F32, F16 or BF16)."""
    header = {"__metadata__": {"format": "pt"}}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        values = np.ascontiguousarray(tensors[name], dtype=np.float32)
        if dtype == "F32":
            raw = values.astype("<f4").tobytes()
        elif dtype == "F16":
            raw = values.astype("<f2").tobytes()
        elif dtype == "BF16":
            raw = _to_bf16_bits(values).astype("<u2").tobytes()
        else:
            raise ValueError(f"unsupported dtype {dtype}")
        header[name] = {
            "dtype": dtype,
            "shape": list(values.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        chunks.append(raw)
        offset += len(raw)
    header_bytes = json.dumps(header).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header_bytes)))
        f.write(header_bytes)
        for raw in chunks:
            f.write(raw)


def make_weights(config, seed):
    """Random weights with Transformers' names for config's model_type."""
    rng = np.random.default_rng(seed)
    model_type = config["model_type"]
    hidden = config["hidden_size"]
    inter = config["intermediate_size"]
    head_dim = config["head_dim"]
    q_rows = config["num_attention_heads"] * head_dim
    kv_rows = config["num_key_value_heads"] * head_dim

    def normal(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm_weight(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": normal(config["vocab_size"], hidden, scale=1.0)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm_weight(hidden)
        w[p + "post_attention_layernorm.weight"] = norm_weight(hidden)
        q, k, v = normal(q_rows, hidden), normal(kv_rows, hidden), normal(kv_rows, hidden)
        gate, up = normal(inter, hidden), normal(inter, hidden)
        if model_type == "phi3":
            w[p + "self_attn.qkv_proj.weight"] = np.concatenate([q, k, v])
            w[p + "mlp.gate_up_proj.weight"] = np.concatenate([gate, up])
        else:
            w[p + "self_attn.q_proj.weight"] = q
            w[p + "self_attn.k_proj.weight"] = k
            w[p + "self_attn.v_proj.weight"] = v
            w[p + "mlp.gate_proj.weight"] = gate
            w[p + "mlp.up_proj.weight"] = up
        w[p + "self_attn.o_proj.weight"] = normal(hidden, q_rows)
        w[p + "mlp.down_proj.weight"] = normal(hidden, inter)
        if model_type == "qwen2" or config.get("attention_bias"):
            w[p + "self_attn.q_proj.bias"] = normal(q_rows)
            w[p + "self_attn.k_proj.bias"] = normal(kv_rows)
            w[p + "self_attn.v_proj.bias"] = normal(kv_rows)
        if config.get("attention_bias") and model_type in ("llama", "qwen3"):
            w[p + "self_attn.o_proj.bias"] = normal(hidden)
        if model_type == "qwen3":
            w[p + "self_attn.q_norm.weight"] = norm_weight(head_dim)
            w[p + "self_attn.k_norm.weight"] = norm_weight(head_dim)
    w["model.norm.weight"] = norm_weight(hidden)
    if not config.get("tie_word_embeddings"):
        w["lm_head.weight"] = normal(config["vocab_size"], hidden, scale=1.0)
    return w


def make_config(model_type, **overrides):
    config = dict(_BASE_CONFIG, model_type=model_type)
    if model_type == "mistral":
        config["sliding_window"] = 5
    config.update(overrides)
    return config


def write_model(out_dir, model_type, seed=0, dtype="F32", shards=1, **overrides):
    """Writes a model folder; returns its config dict."""
    config = make_config(model_type, **overrides)
    weights = make_weights(config, seed)
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), weights, dtype)
        return config
    names = sorted(weights)
    weight_map = {}
    for s in range(shards):
        shard = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: weights[n] for n in names[s::shards]}
        write_safetensors(os.path.join(out_dir, shard), part, dtype)
        weight_map.update({n: shard for n in part})
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f, indent=2)
    return config
