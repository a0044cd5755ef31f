#!/usr/bin/python3
"""An independent numpy reference for the Gemma 2 and Gemma 3 (text) decoders.

Written from the Gemma 2 and Gemma 3 technical reports and Transformers' documented
Gemma2/Gemma3 configuration and modelling behaviour, sharing no code with kvserve (only the
safetensors reader of reference_forward.py, itself independent of kvserve):

- the token embeddings are multiplied by sqrt(hidden_size);
- every RMSNorm multiplies by (1 + weight);
- a layer is: h += N_post_attn(attention(N_in(h))); h += N_post_ff(mlp(N_pre_ff(h)));
- the MLP is GeGLU: down(gelu_tanh(gate(x)) * up(x));
- attention scores are scaled by query_pre_attn_scalar ** -0.5, soft-capped by
  cap * tanh(s / cap) (attn_logit_softcapping, Gemma 2) before the causal / sliding mask;
- sliding and full layers alternate (Gemma 2: sliding first; Gemma 3: every
  sliding_window_pattern-th layer is full) unless layer_types lists them; a sliding query at
  position p sees keys at positions in (p - sliding_window, p];
- Gemma 3 normalises each query and key head (q_norm, k_norm) before RoPE, rotates sliding
  layers with base rope_local_base_freq and no scaling and full layers with rope_theta and
  rope_scaling (linear here);
- the LM head is the embedding matrix (tied); the logits are soft-capped by
  final_logit_softcapping (Gemma 2).

Arithmetic is float64.

CLI: gemma_reference.py --model DIR --ids 1,2,3 --out FILE (the last position's logits).
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True

from reference_forward import ReferenceError, read_checkpoint  # noqa: E402

GEMMA_TYPES = ("gemma2", "gemma3_text")


class GemmaConfig:
    def __init__(self, raw):
        self.model_type = raw.get("model_type")
        if self.model_type not in GEMMA_TYPES:
            raise ReferenceError(f"model_type {self.model_type!r} is not a Gemma text model")
        g2 = self.model_type == "gemma2"
        act = raw.get("hidden_activation") or raw.get("hidden_act") or "gelu_pytorch_tanh"
        if act != "gelu_pytorch_tanh":
            raise ReferenceError(f"hidden_activation {act!r} is not gelu_pytorch_tanh")
        self.vocab = int(raw["vocab_size"])
        self.hidden = int(raw["hidden_size"])
        self.inter = int(raw["intermediate_size"])
        self.layers = int(raw["num_hidden_layers"])
        self.heads = int(raw["num_attention_heads"])
        self.kv_heads = int(raw.get("num_key_value_heads") or self.heads)
        self.head_dim = int(raw.get("head_dim") or 256)
        self.eps = float(raw.get("rms_norm_eps", 1e-6))
        self.query_scale = float(raw.get("query_pre_attn_scalar", 256)) ** -0.5
        # An explicit null disables a cap; an absent key takes Gemma 2's default.
        self.attn_cap = raw.get("attn_logit_softcapping", 50.0 if g2 else None)
        self.final_cap = raw.get("final_logit_softcapping", 30.0 if g2 else None)
        self.window = int(raw.get("sliding_window") or 4096)
        self.global_base = float(raw.get("rope_theta", 10000.0 if g2 else 1000000.0))
        self.local_base = None if g2 else float(raw.get("rope_local_base_freq", 10000.0))
        scaling = raw.get("rope_scaling") or {}
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind not in ("default", "linear"):
            raise ReferenceError(f"rope type {kind!r} is not implemented here")
        self.global_factor = float(scaling["factor"]) if kind == "linear" else 1.0
        self.qk_norm = not g2
        types = raw.get("layer_types")
        if types is None:
            pattern = 2 if g2 else int(raw.get("sliding_window_pattern", 6))
            types = [
                "sliding_attention" if (i + 1) % pattern else "full_attention"
                for i in range(self.layers)
            ]
        if len(types) != self.layers:
            raise ReferenceError("layer_types does not list every layer")
        self.sliding = [t == "sliding_attention" for t in types]


def norm(x, weight, eps):
    """Gemma's RMSNorm: x / sqrt(mean(x^2) + eps) * (1 + weight)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * (1.0 + weight)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def rope(x, positions, base, factor):
    """x: [heads, n, d]; rotates halves (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)."""
    d = x.shape[-1]
    inv_freq = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d) / factor
    angles = np.outer(positions.astype(np.float64), inv_freq)  # [n, d/2]
    cos, sin = np.cos(angles), np.sin(angles)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def softcap(x, cap):
    return x if cap is None else cap * np.tanh(x / cap)


class GemmaModel:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = GemmaConfig(json.load(f))
        self.t = {k: v.astype(np.float64) for k, v in read_checkpoint(model_dir).items()}
        cfg = self.cfg
        expected = {"model.embed_tokens.weight", "model.norm.weight"}
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            names = ["input_layernorm", "post_attention_layernorm",
                     "pre_feedforward_layernorm", "post_feedforward_layernorm"]
            expected |= {p + n + ".weight" for n in names}
            expected |= {p + f"self_attn.{n}_proj.weight" for n in "qkvo"}
            expected |= {p + f"mlp.{n}_proj.weight" for n in ("gate", "up", "down")}
            if cfg.qk_norm:
                expected |= {p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"}
        if set(self.t) != expected:
            raise ReferenceError(
                f"tensors differ from a tied Gemma checkpoint: missing "
                f"{sorted(expected - set(self.t))[:3]}, extra {sorted(set(self.t) - expected)[:3]}"
            )

    def forward(self, ids):
        """Logits [n, vocab] for every position of `ids` (positions 0..n-1)."""
        cfg, t = self.cfg, self.t
        ids = np.asarray(ids, dtype=np.int64)
        n = len(ids)
        pos = np.arange(n)
        group = cfg.heads // cfg.kv_heads
        h = t["model.embed_tokens.weight"][ids] * math.sqrt(cfg.hidden)
        for i in range(cfg.layers):
            p = f"model.layers.{i}."
            w = lambda name: t[p + name + ".weight"]  # noqa: E731
            x = norm(h, w("input_layernorm"), cfg.eps)
            q = (x @ w("self_attn.q_proj").T).reshape(n, cfg.heads, cfg.head_dim).transpose(1, 0, 2)
            k = (x @ w("self_attn.k_proj").T).reshape(n, cfg.kv_heads, cfg.head_dim)
            k = k.transpose(1, 0, 2)
            v = (x @ w("self_attn.v_proj").T).reshape(n, cfg.kv_heads, cfg.head_dim)
            v = v.transpose(1, 0, 2)
            if cfg.qk_norm:
                q = norm(q, w("self_attn.q_norm"), cfg.eps)
                k = norm(k, w("self_attn.k_norm"), cfg.eps)
            local = cfg.sliding[i]
            if local and cfg.local_base is not None:
                base, factor = cfg.local_base, 1.0
            else:
                base, factor = cfg.global_base, cfg.global_factor
            q, k = rope(q, pos, base, factor), rope(k, pos, base, factor)
            k = np.repeat(k, group, axis=0)
            v = np.repeat(v, group, axis=0)
            scores = softcap(q @ k.transpose(0, 2, 1) * cfg.query_scale, cfg.attn_cap)
            visible = pos[None, :] <= pos[:, None]
            if local:
                visible &= pos[None, :] > pos[:, None] - cfg.window
            scores = np.where(visible[None], scores, -np.inf)
            probs = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs /= probs.sum(axis=-1, keepdims=True)
            attn = (probs @ v).transpose(1, 0, 2).reshape(n, cfg.heads * cfg.head_dim)
            h = h + norm(attn @ w("self_attn.o_proj").T, w("post_attention_layernorm"), cfg.eps)
            x = norm(h, w("pre_feedforward_layernorm"), cfg.eps)
            mlp = (gelu_tanh(x @ w("mlp.gate_proj").T) * (x @ w("mlp.up_proj").T))
            mlp = mlp @ w("mlp.down_proj").T
            h = h + norm(mlp, w("post_feedforward_layernorm"), cfg.eps)
        h = norm(h, t["model.norm.weight"], cfg.eps)
        return softcap(h @ t["model.embed_tokens.weight"].T, cfg.final_cap)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--ids", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    try:
        logits = GemmaModel(args.model).forward([int(x) for x in args.ids.split(",")])[-1]
    except (ReferenceError, ValueError, OSError, KeyError) as e:
        print(f"gemma_reference: {e}", file=sys.stderr)
        return 1
    with open(args.out, "w") as f:
        f.writelines(f"{x:.9g}\n" for x in logits.tolist())
    return 0


if __name__ == "__main__":
    sys.exit(main())
