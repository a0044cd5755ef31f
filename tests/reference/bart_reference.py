#!/usr/bin/python3
"""An independent numpy reference for BART (Transformers' BartForConditionalGeneration).

Written from the BART paper (Lewis et al., "BART: Denoising Sequence-to-Sequence
Pre-training", a standard Transformer encoder-decoder with GELU and learned positions) and
Transformers' documented BartConfig / BartModel behaviour, sharing no code with kvserve (only
the safetensors reader of reference_forward.py, itself independent of kvserve):

- embeddings: shared[ids] * (sqrt(d_model) if scale_embedding else 1) plus the learned
  position table at rows position + 2 (BartLearnedPositionalEmbedding's offset), then
  layernorm_embedding; encoder and decoder each have their own position table and norm;
- attention: q, k, v, out projections with biases; q scaled by head_dim^-0.5; softmax over
  keys; heads concatenated; the decoder's self-attention causal, the encoder's and the
  decoder's cross-attention (keys and values from the encoder's last hidden state) not;
- post-LayerNorm layers (eps 1e-5): h = LN(h + attn(h)); decoder: h = LN(h + cross(h));
  h = LN(h + fc2(act(fc1(h)))), act = exact (erf) GELU for "gelu", tanh GELU for "gelu_new",
  relu; no final encoder or decoder norm (that is mBART);
- logits = h @ shared.T (lm_head tied unless tie_word_embeddings is false) + final_logits_bias.

Arithmetic is float64, every sequence computed whole (no cache).

CLI: bart_reference.py --model DIR --encoder-ids 1,2,3 --decoder-ids 257 --out FILE
writes the last decoder position's logits, one per line.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True

from reference_forward import ReferenceError, read_checkpoint  # noqa: E402

POSITION_OFFSET = 2
LAYER_NORM_EPS = 1e-5


class BartConfig:
    def __init__(self, raw):
        if raw.get("model_type") != "bart":
            raise ReferenceError(f"model_type {raw.get('model_type')!r} is not bart")
        self.vocab = int(raw.get("vocab_size", 50265))
        self.d = int(raw.get("d_model", 1024))
        self.encoder_layers = int(raw.get("encoder_layers", 12))
        self.decoder_layers = int(raw.get("decoder_layers", 12))
        self.encoder_heads = int(raw.get("encoder_attention_heads", 16))
        self.decoder_heads = int(raw.get("decoder_attention_heads", 16))
        self.act = raw.get("activation_function", "gelu")
        self.scale = math.sqrt(self.d) if raw.get("scale_embedding", False) else 1.0
        self.tied = bool(raw.get("tie_word_embeddings", True))
        self.decoder_start = int(raw.get("decoder_start_token_id", 2))


def gelu(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, weight, bias):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + LAYER_NORM_EPS) * weight + bias


class BartModel:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = BartConfig(json.load(f))
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in read_checkpoint(model_dir).items()}

    def _linear(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def _norm(self, x, name):
        return layer_norm(x, self.w[name + ".weight"], self.w[name + ".bias"])

    def _act(self, x):
        if self.cfg.act == "relu":
            return np.maximum(x, 0.0)
        if self.cfg.act == "gelu_new":
            return gelu_tanh(x)
        return gelu(x)

    def _attention(self, prefix, x, memory, heads, causal):
        """x [n, d] attends to memory [m, d]; returns [n, d]."""
        d = self.cfg.d
        hd = d // heads
        q = self._linear(x, prefix + "q_proj") * hd ** -0.5
        k = self._linear(memory, prefix + "k_proj")
        v = self._linear(memory, prefix + "v_proj")
        n, m = x.shape[0], memory.shape[0]
        out = np.zeros((n, d))
        for h in range(heads):
            cols = slice(h * hd, (h + 1) * hd)
            scores = q[:, cols] @ k[:, cols].T
            if causal:
                scores = np.where(np.tril(np.ones((n, m), dtype=bool)), scores, -np.inf)
            scores = scores - scores.max(axis=-1, keepdims=True)
            p = np.exp(scores)
            p = p / p.sum(axis=-1, keepdims=True)
            out[:, cols] = p @ v[:, cols]
        return self._linear(out, prefix + "out_proj")

    def _embed(self, side, ids):
        w = self.w
        tokens = w["model.shared.weight"][np.asarray(ids)] * self.cfg.scale
        positions = w[f"model.{side}.embed_positions.weight"][
            np.arange(len(ids)) + POSITION_OFFSET]
        return self._norm(tokens + positions, f"model.{side}.layernorm_embedding")

    def _feedforward(self, prefix, h):
        return self._linear(self._act(self._linear(h, prefix + "fc1")), prefix + "fc2")

    def encode(self, ids):
        c = self.cfg
        h = self._embed("encoder", ids)
        for i in range(c.encoder_layers):
            p = f"model.encoder.layers.{i}."
            h = self._norm(h + self._attention(p + "self_attn.", h, h, c.encoder_heads, False),
                           p + "self_attn_layer_norm")
            h = self._norm(h + self._feedforward(p, h), p + "final_layer_norm")
        return h

    def forward(self, encoder_ids, decoder_ids):
        """Logits [len(decoder_ids), vocab] of every decoder position."""
        c = self.cfg
        memory = self.encode(encoder_ids)
        h = self._embed("decoder", decoder_ids)
        for i in range(c.decoder_layers):
            p = f"model.decoder.layers.{i}."
            h = self._norm(h + self._attention(p + "self_attn.", h, h, c.decoder_heads, True),
                           p + "self_attn_layer_norm")
            h = self._norm(
                h + self._attention(p + "encoder_attn.", h, memory, c.decoder_heads, False),
                p + "encoder_attn_layer_norm")
            h = self._norm(h + self._feedforward(p, h), p + "final_layer_norm")
        w = self.w
        head = w["lm_head.weight"] if "lm_head.weight" in w and not c.tied else \
            w["model.shared.weight"]
        logits = h @ head.T
        if "final_logits_bias" in w:
            logits = logits + w["final_logits_bias"].reshape(-1)
        return logits


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--encoder-ids", required=True)
    parser.add_argument("--decoder-ids", help="default: decoder_start_token_id")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    model = BartModel(args.model)
    decoder = ([int(t) for t in args.decoder_ids.split(",")] if args.decoder_ids
               else [model.cfg.decoder_start])
    logits = model.forward([int(t) for t in args.encoder_ids.split(",")], decoder)[-1]
    with open(args.out, "w") as f:
        f.write("\n".join(f"{v:.9g}" for v in logits) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
