#!/usr/bin/python3
"""An independent numpy reference for kvserve's decoder forward.

Reads a Hugging Face model folder (config.json + model.safetensors, or a sharded
model.safetensors.index.json) with nothing but the standard library and numpy, and computes
logits the way Transformers does for model_type llama, mistral, qwen2, qwen3 and phi3.

It shares no code with kvserve on purpose: the safetensors parser, the config defaults and
the math are written again from the Transformers definitions, so that agreement between the
two is evidence that both are right.

Arithmetic is float64 by default (weights are widened after loading), so the result is the
exact value of the math up to float64 rounding; --dtype float32 imitates a float32 engine.

CLI: reference_forward.py --model DIR --ids 1,2,3 --out FILE
writes the last position's logits, one per line ("%.9g").
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "phi3", "qwen2", "qwen3")

# safetensors dtype name -> (numpy dtype of the stored element, element size in bytes).
_STORED_DTYPES = {
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "F64": (np.dtype("<f8"), 8),
}


class ReferenceError(Exception):
    """A model folder this reference cannot (or refuses to) compute."""


# ----------------------------------------------------------------------------- safetensors


def _bf16_to_f32(raw):
    """bfloat16 is the top half of a float32: widen by shifting the bits up."""
    return (raw.astype(np.uint32) << 16).view(np.float32)


def read_safetensors(path):
    """Returns {name: float32 ndarray} for one .safetensors file; raises ReferenceError."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise ReferenceError(f"{path}: shorter than the 8-byte header length")
    (header_len,) = struct.unpack("<Q", blob[:8])
    if 8 + header_len > len(blob):
        raise ReferenceError(f"{path}: header length {header_len} runs past the end of the file")
    try:
        header = json.loads(blob[8 : 8 + header_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ReferenceError(f"{path}: header is not JSON: {e}") from e
    data = memoryview(blob)[8 + header_len :]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype_name = info.get("dtype")
        if dtype_name not in _STORED_DTYPES:
            raise ReferenceError(f"{path}: tensor {name} has unsupported dtype {dtype_name}")
        stored, size = _STORED_DTYPES[dtype_name]
        shape = [int(d) for d in info["shape"]]
        begin, end = (int(o) for o in info["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not (0 <= begin <= end <= len(data)) or end - begin != count * size:
            raise ReferenceError(
                f"{path}: tensor {name} has offsets [{begin}, {end}) that do not hold "
                f"{dtype_name} {shape} inside {len(data)} data bytes"
            )
        raw = np.frombuffer(data[begin:end], dtype=stored, count=count)
        if dtype_name == "BF16":
            values = _bf16_to_f32(raw)
        else:
            values = raw.astype(np.float32)
        tensors[name] = values.reshape(shape)
    return tensors


def read_checkpoint(model_dir):
    """All tensors of a model folder, single-file or sharded."""
    single = os.path.join(model_dir, "model.safetensors")
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(single):
        return read_safetensors(single)
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        tensors = {}
        for shard in sorted(set(weight_map.values())):
            tensors.update(read_safetensors(os.path.join(model_dir, shard)))
        missing = sorted(set(weight_map) - set(tensors))
        if missing:
            raise ReferenceError(f"{index}: tensors not found in their shards: {missing[:5]}")
        return tensors
    raise ReferenceError(f"{model_dir}: neither model.safetensors nor its index exists")


# ----------------------------------------------------------------------------- config


class Config:
    """The fields of config.json the forward needs, with Transformers' per-type defaults."""

    def __init__(self, raw):
        self.raw = raw
        self.model_type = raw.get("model_type")
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ReferenceError(
                f"model_type {self.model_type!r} is not supported; "
                f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        for field in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
        ):
            if field not in raw:
                raise ReferenceError(f"config.json lacks {field}")
        if raw.get("hidden_act", "silu") != "silu":
            raise ReferenceError(f"hidden_act {raw['hidden_act']!r} is not supported (silu is)")
        self.vocab_size = int(raw["vocab_size"])
        self.hidden_size = int(raw["hidden_size"])
        self.intermediate_size = int(raw["intermediate_size"])
        self.num_layers = int(raw["num_hidden_layers"])
        self.num_heads = int(raw["num_attention_heads"])
        self.num_kv_heads = int(raw.get("num_key_value_heads") or self.num_heads)
        if raw.get("head_dim"):
            self.head_dim = int(raw["head_dim"])
        elif self.model_type == "qwen3":
            self.head_dim = 128  # Qwen3Config's default, not hidden / heads
        else:
            self.head_dim = self.hidden_size // self.num_heads
        default_eps = 1e-5 if self.model_type == "phi3" else 1e-6
        self.rms_norm_eps = float(raw.get("rms_norm_eps", default_eps))
        self.tie_word_embeddings = bool(raw.get("tie_word_embeddings", False))
        self.partial_rotary_factor = float(raw.get("partial_rotary_factor", 1.0))

        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        self.rope_theta = float(
            raw.get("rope_theta", (raw.get("rope_parameters") or {}).get("rope_theta", 10000.0))
        )
        self.rope_type = rope.get("rope_type", rope.get("type", "default"))
        self.rope = rope
        if self.rope_type not in ("default", "linear", "llama3", "dynamic"):
            raise ReferenceError(
                f"rope type {self.rope_type!r} is not implemented by this reference "
                "(default, linear, llama3, dynamic are)"
            )
        self.max_position_embeddings = int(raw.get("max_position_embeddings", 4096))

        # Transformers: qwen2 always has q/k/v biases and no o_proj bias; llama and qwen3 put
        # attention_bias on all four projections; mistral and phi3 have none.
        wants_bias = bool(raw.get("attention_bias", False))
        self.qkv_bias = self.model_type == "qwen2" or (
            wants_bias and self.model_type in ("llama", "qwen3")
        )
        self.o_bias = wants_bias and self.model_type in ("llama", "qwen3")
        self.qk_norm = self.model_type == "qwen3"
        self.fused = self.model_type == "phi3"
        self.layer_windows = self._layer_windows()

    def _layer_windows(self):
        """Per layer: ("full", 0), ("sliding", window) or ("chunked", chunk)."""
        raw = self.raw
        sliding = raw.get("sliding_window")
        chunk = raw.get("attention_chunk_size")
        types = raw.get("layer_types")
        if types is not None:
            if len(types) != self.num_layers:
                raise ReferenceError(
                    f"layer_types has {len(types)} entries for {self.num_layers} layers"
                )
            windows = []
            for t in types:
                if t == "full_attention":
                    windows.append(("full", 0))
                elif t == "sliding_attention":
                    if not sliding:
                        raise ReferenceError("a sliding_attention layer needs sliding_window")
                    windows.append(("sliding", int(sliding)))
                elif t == "chunked_attention":
                    if not chunk:
                        raise ReferenceError("a chunked_attention layer needs attention_chunk_size")
                    windows.append(("chunked", int(chunk)))
                else:
                    raise ReferenceError(f"layer type {t!r} is not supported")
            return windows
        if self.model_type in ("mistral", "phi3"):
            if sliding:
                return [("sliding", int(sliding))] * self.num_layers
            return [("full", 0)] * self.num_layers
        if self.model_type in ("qwen2", "qwen3"):
            if raw.get("use_sliding_window") and sliding:
                first = int(raw.get("max_window_layers", self.num_layers))
                return [
                    ("sliding", int(sliding)) if i >= first else ("full", 0)
                    for i in range(self.num_layers)
                ]
            return [("full", 0)] * self.num_layers
        return [("full", 0)] * self.num_layers


def load_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        return Config(json.load(f))


# ----------------------------------------------------------------------------- math


def rms_norm(x, weight, eps):
    """x * rsqrt(mean(x^2) + eps) * weight over the last axis."""
    variance = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(variance + eps) * weight


def inv_frequencies(cfg, rotary_dim, seq_len, dtype):
    """inv_freq = 1 / theta^(arange(0, d, 2) / d), then the configured scaling."""
    base = cfg.rope_theta
    if cfg.rope_type == "dynamic":
        factor = float(cfg.rope["factor"])
        original = int(
            cfg.rope.get("original_max_position_embeddings") or cfg.max_position_embeddings
        )
        if seq_len > original:
            base = base * ((factor * seq_len / original) - (factor - 1)) ** (
                rotary_dim / (rotary_dim - 2)
            )
    exponents = np.arange(0, rotary_dim, 2, dtype=np.int64).astype(np.float64) / rotary_dim
    inv_freq = 1.0 / (base**exponents)
    if cfg.rope_type == "linear":
        inv_freq = inv_freq / float(cfg.rope["factor"])
    elif cfg.rope_type == "llama3":
        factor = float(cfg.rope["factor"])
        low = float(cfg.rope.get("low_freq_factor", 1.0))
        high = float(cfg.rope.get("high_freq_factor", 4.0))
        original = float(cfg.rope["original_max_position_embeddings"])
        low_wavelen = original / low
        high_wavelen = original / high
        wavelen = 2 * math.pi / inv_freq
        scaled = np.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (original / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv_freq = np.where(medium, smoothed, scaled)
    return inv_freq.astype(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply_rope(x, positions, cfg, seq_len):
    """x: [heads, seq, head_dim]; rotates the first partial_rotary_factor of head_dim."""
    rotary_dim = int(cfg.head_dim * cfg.partial_rotary_factor)
    inv_freq = inv_frequencies(cfg, rotary_dim, seq_len, x.dtype)
    freqs = np.outer(positions.astype(x.dtype), inv_freq)  # [seq, rotary_dim / 2]
    emb = np.concatenate([freqs, freqs], axis=-1)  # [seq, rotary_dim]
    cos, sin = np.cos(emb), np.sin(emb)
    rot, passthrough = x[..., :rotary_dim], x[..., rotary_dim:]
    rotated = rot * cos + rotate_half(rot) * sin
    return np.concatenate([rotated, passthrough], axis=-1)


def attention_mask(kind, window, seq_len):
    """[seq, seq] booleans: query p may attend to key k."""
    p = np.arange(seq_len)[:, None]
    k = np.arange(seq_len)[None, :]
    allowed = k <= p
    if kind == "sliding":
        allowed &= k > p - window
    elif kind == "chunked":
        allowed &= (k // window) == (p // window)
    return allowed


def silu(x):
    return x / (1.0 + np.exp(-x))


class Model:
    """Weights of one checkpoint, split and widened to `dtype`, and the forward over them."""

    def __init__(self, model_dir, dtype=np.float64):
        self.cfg = load_config(model_dir)
        self.dtype = dtype
        tensors = read_checkpoint(model_dir)
        self._used = set()
        self._tensors = tensors
        cfg = self.cfg
        self.embed = self._take("model.embed_tokens.weight", (cfg.vocab_size, cfg.hidden_size))
        q_rows = cfg.num_heads * cfg.head_dim
        kv_rows = cfg.num_kv_heads * cfg.head_dim
        self.layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            layer = {
                "input_norm": self._take(p + "input_layernorm.weight", (cfg.hidden_size,)),
                "post_norm": self._take(p + "post_attention_layernorm.weight", (cfg.hidden_size,)),
                "o": self._take(p + "self_attn.o_proj.weight", (cfg.hidden_size, q_rows)),
                "down": self._take(
                    p + "mlp.down_proj.weight", (cfg.hidden_size, cfg.intermediate_size)
                ),
            }
            if cfg.fused:
                qkv = self._take(
                    p + "self_attn.qkv_proj.weight", (q_rows + 2 * kv_rows, cfg.hidden_size)
                )
                layer["q"] = qkv[:q_rows]
                layer["k"] = qkv[q_rows : q_rows + kv_rows]
                layer["v"] = qkv[q_rows + kv_rows :]
                gate_up = self._take(
                    p + "mlp.gate_up_proj.weight", (2 * cfg.intermediate_size, cfg.hidden_size)
                )
                layer["gate"] = gate_up[: cfg.intermediate_size]
                layer["up"] = gate_up[cfg.intermediate_size :]
            else:
                layer["q"] = self._take(p + "self_attn.q_proj.weight", (q_rows, cfg.hidden_size))
                layer["k"] = self._take(p + "self_attn.k_proj.weight", (kv_rows, cfg.hidden_size))
                layer["v"] = self._take(p + "self_attn.v_proj.weight", (kv_rows, cfg.hidden_size))
                layer["gate"] = self._take(
                    p + "mlp.gate_proj.weight", (cfg.intermediate_size, cfg.hidden_size)
                )
                layer["up"] = self._take(
                    p + "mlp.up_proj.weight", (cfg.intermediate_size, cfg.hidden_size)
                )
            for name, rows in (("q", q_rows), ("k", kv_rows), ("v", kv_rows)):
                key = f"{p}self_attn.{name}_proj.bias"
                if cfg.qkv_bias:
                    layer[name + "_bias"] = self._take(key, (rows,))
                else:
                    layer[name + "_bias"] = np.zeros(rows, dtype=dtype)
            if cfg.o_bias:
                layer["o_bias"] = self._take(p + "self_attn.o_proj.bias", (cfg.hidden_size,))
            else:
                layer["o_bias"] = np.zeros(cfg.hidden_size, dtype=dtype)
            if cfg.qk_norm:
                layer["q_norm"] = self._take(p + "self_attn.q_norm.weight", (cfg.head_dim,))
                layer["k_norm"] = self._take(p + "self_attn.k_norm.weight", (cfg.head_dim,))
            self.layers.append(layer)
        self.norm = self._take("model.norm.weight", (cfg.hidden_size,))
        if cfg.tie_word_embeddings:
            self.lm_head = self.embed
        else:
            self.lm_head = self._take("lm_head.weight", (cfg.vocab_size, cfg.hidden_size))
        unused = sorted(set(tensors) - self._used)
        if unused:
            raise ReferenceError(f"checkpoint tensors this forward would ignore: {unused[:5]}")
        del self._tensors

    def _take(self, name, shape):
        if name not in self._tensors:
            raise ReferenceError(f"checkpoint lacks tensor {name}")
        t = self._tensors[name]
        if tuple(t.shape) != tuple(shape):
            raise ReferenceError(f"tensor {name} has shape {list(t.shape)}, expected {list(shape)}")
        self._used.add(name)
        return t.astype(self.dtype)

    def forward(self, ids):
        """ids: token ids at positions 0..n-1. Returns logits [n, vocab] for every position."""
        cfg = self.cfg
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or len(ids) == 0:
            raise ReferenceError("ids must be a non-empty list")
        if ids.min() < 0 or ids.max() >= cfg.vocab_size:
            raise ReferenceError(f"ids must be in [0, {cfg.vocab_size})")
        n = len(ids)
        positions = np.arange(n)
        group = cfg.num_heads // cfg.num_kv_heads
        scale = 1.0 / math.sqrt(cfg.head_dim)
        h = self.embed[ids]  # [n, hidden]
        for layer, (kind, window) in zip(self.layers, cfg.layer_windows):
            x = rms_norm(h, layer["input_norm"], cfg.rms_norm_eps)
            q = x @ layer["q"].T + layer["q_bias"]
            k = x @ layer["k"].T + layer["k_bias"]
            v = x @ layer["v"].T + layer["v_bias"]
            q = q.reshape(n, cfg.num_heads, cfg.head_dim).transpose(1, 0, 2)
            k = k.reshape(n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 0, 2)
            v = v.reshape(n, cfg.num_kv_heads, cfg.head_dim).transpose(1, 0, 2)
            if cfg.qk_norm:
                q = rms_norm(q, layer["q_norm"], cfg.rms_norm_eps)
                k = rms_norm(k, layer["k_norm"], cfg.rms_norm_eps)
            q = apply_rope(q, positions, cfg, n)
            k = apply_rope(k, positions, cfg, n)
            k = np.repeat(k, group, axis=0)  # query head j uses kv head j // group
            v = np.repeat(v, group, axis=0)
            scores = (q @ k.transpose(0, 2, 1)) * scale  # [heads, n, n]
            scores = np.where(attention_mask(kind, window, n)[None], scores, -np.inf)
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs = probs / probs.sum(axis=-1, keepdims=True)
            attn = (probs @ v).transpose(1, 0, 2).reshape(n, cfg.num_heads * cfg.head_dim)
            h = h + attn @ layer["o"].T + layer["o_bias"]
            x = rms_norm(h, layer["post_norm"], cfg.rms_norm_eps)
            h = h + (silu(x @ layer["gate"].T) * (x @ layer["up"].T)) @ layer["down"].T
        h = rms_norm(h, self.norm, cfg.rms_norm_eps)
        return h @ self.lm_head.T


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--ids", required=True, help="comma-separated token ids")
    parser.add_argument("--out", required=True, help="file for the last position's logits")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    args = parser.parse_args(argv)
    try:
        ids = [int(t) for t in args.ids.split(",") if t.strip()]
        model = Model(args.model, dtype=np.dtype(args.dtype).type)
        logits = model.forward(ids)[-1]
    except (ReferenceError, ValueError, OSError, KeyError) as e:
        print(f"reference_forward: {e}", file=sys.stderr)
        return 1
    with open(args.out, "w") as f:
        f.writelines(f"{x:.9g}\n" for x in logits.tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
