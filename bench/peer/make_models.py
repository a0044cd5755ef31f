#!/usr/bin/python3
"""Identical random weights for kvserve and the llama.cpp peer, from one seed.

Writes, for the bench-small or bench-medium shape, a Hugging Face folder (config.json and
model.safetensors, written here byte by byte) for kvserve and a GGUF (written with llama.cpp's
own gguf-py, PYTHONPATH=PEER/llama.cpp/gguf-py) for llama.cpp, holding the same values:

  rng = numpy.random.default_rng(seed); every matrix is rng.standard_normal(shape, float32) *
  0.02, drawn in the order embed_tokens, then per layer q, k, v, o, gate, up, down, then lm_head;
  every norm weight is 1. The GGUF's attn_q / attn_k rows are permuted as llama.cpp's converter
  does (its rotary embedding pairs neighbouring features, Hugging Face's the two halves). Its
  vocabulary is copied from llama.cpp's models/ggml-vocab-llama-spm.gguf (Llama 2, 32000
  tokens), which this shape's vocab_size matches; the HF folder has no tokenizer (the
  benchmarks send token ids).

--dtype bf16 stores both files in bfloat16 (the float32 draws rounded to nearest even).

  bench/peer/make_models.py --peer /work/peer --preset bench-small --dtype f32 --out /work/peer/models
"""
import argparse
import importlib.util
import json
import os
import struct
import sys

import numpy as np

SHAPES = {
    "bench-small": dict(hidden=512, layers=8, heads=8, kv_heads=4, inter=1408),
    "bench-medium": dict(hidden=1024, layers=16, heads=16, kv_heads=8, inter=2816),
}
VOCAB = 32000
HEAD_DIM = 64


def draw(seed, shape):
    """The tensors in Hugging Face names, float32, in drawing order."""
    rng = np.random.default_rng(seed)
    h, nh, nkv, inter = shape["hidden"], shape["heads"], shape["kv_heads"], shape["inter"]
    normal = lambda *dims: rng.standard_normal(dims, dtype=np.float32) * np.float32(0.02)
    tensors = {"model.embed_tokens.weight": normal(VOCAB, h)}
    for i in range(shape["layers"]):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.q_proj.weight"] = normal(nh * HEAD_DIM, h)
        tensors[p + "self_attn.k_proj.weight"] = normal(nkv * HEAD_DIM, h)
        tensors[p + "self_attn.v_proj.weight"] = normal(nkv * HEAD_DIM, h)
        tensors[p + "self_attn.o_proj.weight"] = normal(h, nh * HEAD_DIM)
        tensors[p + "mlp.gate_proj.weight"] = normal(inter, h)
        tensors[p + "mlp.up_proj.weight"] = normal(inter, h)
        tensors[p + "mlp.down_proj.weight"] = normal(h, inter)
        tensors[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        tensors[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
    tensors["model.norm.weight"] = np.ones(h, np.float32)
    tensors["lm_head.weight"] = normal(VOCAB, h)
    return tensors


def to_bf16_bits(a):
    """bfloat16 bit patterns (uint16) of float32 values, rounded to nearest even."""
    bits = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def write_safetensors(path, tensors, dtype):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name]
        data = (to_bf16_bits(a) if dtype == "bf16" else a.astype("<f4")).tobytes()
        header[name] = {"dtype": "BF16" if dtype == "bf16" else "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def write_config(folder, shape, dtype, context):
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": shape["hidden"], "intermediate_size": shape["inter"],
        "num_hidden_layers": shape["layers"], "num_attention_heads": shape["heads"],
        "num_key_value_heads": shape["kv_heads"], "head_dim": HEAD_DIM, "vocab_size": VOCAB,
        "max_position_embeddings": context, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "rope_scaling": None, "hidden_act": "silu", "tie_word_embeddings": False,
        "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "bfloat16" if dtype == "bf16" else "float32",
    }
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def permute(w, n_head):
    """llama.cpp's converter's q/k row order for heads of rotary pairs."""
    rows, cols = w.shape
    return w.reshape(n_head, 2, rows // n_head // 2, cols).swapaxes(1, 2).reshape(rows, cols)


def import_gguf(folder):
    """llama.cpp's gguf package from its checkout's gguf-py/gguf (no pip install, no sys.path
    edit): loaded from its __init__.py, its submodules found in `folder`."""
    spec = importlib.util.spec_from_file_location(
        "gguf", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["gguf"] = module
    spec.loader.exec_module(module)
    return module


def write_gguf(path, peer, tensors, shape, dtype, name, context):
    gguf = import_gguf(os.path.join(peer, "llama.cpp", "gguf-py", "gguf"))
    vocab = gguf.GGUFReader(os.path.join(peer, "llama.cpp", "models", "ggml-vocab-llama-spm.gguf"))
    def field(key):
        f = vocab.fields[key]
        return [f.parts[i] for i in f.data]
    tokens = [bytes(p).decode("utf-8") for p in field("tokenizer.ggml.tokens")]
    scores = [float(p[0]) for p in field("tokenizer.ggml.scores")]
    types = [int(p[0]) for p in field("tokenizer.ggml.token_type")]
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(name)
    w.add_block_count(shape["layers"])
    w.add_context_length(context)
    w.add_embedding_length(shape["hidden"])
    w.add_feed_forward_length(shape["inter"])
    w.add_head_count(shape["heads"])
    w.add_head_count_kv(shape["kv_heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16 if dtype == "bf16" else gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
                 "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    for hf_name, a in tensors.items():
        if hf_name in names:
            gg = names[hf_name]
        else:
            parts = hf_name.split(".")  # model.layers.N.<module...>.weight
            module = ".".join(parts[3:-1])
            gg = f"blk.{parts[2]}.{per_layer[module]}.weight"
            if module == "self_attn.q_proj":
                a = permute(a, shape["heads"])
            elif module == "self_attn.k_proj":
                a = permute(a, shape["kv_heads"])
        if dtype == "bf16" and a.ndim == 2:
            # gguf-py takes a BF16 tensor as its bytes, [rows, 2 x cols].
            w.add_tensor(gg, to_bf16_bits(np.ascontiguousarray(a)).view(np.uint8).reshape(a.shape[0], -1),
                         raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:
            w.add_tensor(gg, np.ascontiguousarray(a, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", required=True, help="the peer folder (PEER/llama.cpp)")
    parser.add_argument("--preset", choices=sorted(SHAPES), default="bench-small")
    parser.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--out", required=True)
    parser.add_argument("--context", type=int, default=4096,
                        help="max_position_embeddings and the GGUF's context length (16384 for "
                             "8,000-token prefixes)")
    args = parser.parse_args()
    shape = SHAPES[args.preset]
    tensors = draw(args.seed, shape)
    name = f"{args.preset}-{args.dtype}"
    folder = os.path.join(args.out, name + "-hf")
    os.makedirs(folder, exist_ok=True)
    write_config(folder, shape, args.dtype, args.context)
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors, args.dtype)
    write_gguf(os.path.join(args.out, name + ".gguf"), args.peer, tensors, shape, args.dtype, name,
               args.context)
    print(f"{folder} and {os.path.join(args.out, name + '.gguf')}")


if __name__ == "__main__":
    main()
