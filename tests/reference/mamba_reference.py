#!/usr/bin/python3
"""An independent numpy reference for Mamba-1 (Transformers' MambaForCausalLM).

Written from the Mamba paper (Gu and Dao, "Mamba: Linear-Time Sequence Modeling with Selective
State Spaces", algorithm 2, the selective scan with zero-order-hold discretisation of A and the
simplified Euler step for B) and Transformers' documented MambaConfig / MambaMixer behaviour,
sharing no code with kvserve (only the safetensors reader of reference_forward.py, itself
independent of kvserve):

- h = embeddings[ids]; each layer: h = h + mixer(rmsnorm(h) * norm.weight); the logits are
  lm_head(rmsnorm(h) * norm_f.weight) (lm_head = the embeddings when tied);
- mixer(x): [u, z] = in_proj(x) split in halves of intermediate_size = expand * hidden_size;
  u = silu(causal depthwise conv1d(u)) (kernel conv_kernel, zero history, conv bias);
  [dt, B, C] = x_proj(u) split into time_step_rank, state_size, state_size;
  dt = softplus(dt_proj(dt)) (with its bias); A = -exp(A_log);
  for every channel d and token t: s_d <- exp(dt_t,d * A_d) * s_d + dt_t,d * B_t * u_t,d;
  y_t,d = C_t . s_d + D_d * u_t,d; out = out_proj(y * silu(z)).

Arithmetic is float64, the scan one token at a time (the recurrent form).

CLI: mamba_reference.py --model DIR --ids 1,2,3 --out FILE (the last position's logits).
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.dont_write_bytecode = True

from reference_forward import ReferenceError, read_checkpoint  # noqa: E402


class MambaConfig:
    def __init__(self, raw):
        if raw.get("model_type") != "mamba":
            raise ReferenceError(f"model_type {raw.get('model_type')!r} is not mamba")
        self.vocab = int(raw.get("vocab_size", 50280))
        self.hidden = int(raw.get("hidden_size", 768))
        self.state = int(raw.get("state_size", 16))
        self.layers = int(raw.get("num_hidden_layers", 32))
        self.eps = float(raw.get("layer_norm_epsilon", 1e-5))
        self.inner = int(raw.get("expand", 2)) * self.hidden
        self.kernel = int(raw.get("conv_kernel", 4))
        rank = raw.get("time_step_rank", "auto")
        self.rank = math.ceil(self.hidden / 16) if rank == "auto" else int(rank)
        self.use_bias = bool(raw.get("use_bias", False))
        self.use_conv_bias = bool(raw.get("use_conv_bias", True))
        self.tied = bool(raw.get("tie_word_embeddings", True))


def silu(x):
    return x / (1.0 + np.exp(-x))


def softplus(x):
    return np.where(x > 20, x, np.log1p(np.exp(np.minimum(x, 20))))


class MambaModel:
    def __init__(self, model_dir):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = MambaConfig(json.load(f))
        self.w = {k: np.asarray(v, dtype=np.float64) for k, v in read_checkpoint(model_dir).items()}

    def _norm(self, x, weight):
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.cfg.eps) * weight

    def _mixer(self, i, x):
        c, w = self.cfg, self.w
        p = f"backbone.layers.{i}.mixer."
        proj = x @ w[p + "in_proj.weight"].T
        if c.use_bias:
            proj = proj + w[p + "in_proj.bias"]
        u, z = proj[:, : c.inner], proj[:, c.inner:]
        n = x.shape[0]
        # Causal depthwise convolution: output t sees inputs t-K+1 .. t (zeros before 0).
        kernel = w[p + "conv1d.weight"][:, 0, :]  # [inner, K]
        padded = np.concatenate([np.zeros((c.kernel - 1, c.inner)), u], axis=0)
        conv = np.zeros((n, c.inner))
        for t in range(n):
            window = padded[t : t + c.kernel]  # [K, inner], oldest first
            conv[t] = np.sum(window.T * kernel, axis=1)
        if c.use_conv_bias:
            conv = conv + w[p + "conv1d.bias"]
        u = silu(conv)
        params = u @ w[p + "x_proj.weight"].T
        dt = softplus(params[:, : c.rank] @ w[p + "dt_proj.weight"].T + w[p + "dt_proj.bias"])
        b = params[:, c.rank : c.rank + c.state]
        cm = params[:, c.rank + c.state :]
        a = -np.exp(w[p + "A_log"])  # [inner, state]
        s = np.zeros((c.inner, c.state))
        y = np.zeros((n, c.inner))
        for t in range(n):
            s = np.exp(dt[t][:, None] * a) * s + (dt[t] * u[t])[:, None] * b[t][None, :]
            y[t] = s @ cm[t] + w[p + "D"] * u[t]
        out = (y * silu(z)) @ w[p + "out_proj.weight"].T
        if c.use_bias:
            out = out + w[p + "out_proj.bias"]
        return out

    def forward(self, ids):
        """Logits [len(ids), vocab] of every position."""
        c, w = self.cfg, self.w
        emb = w["backbone.embeddings.weight"]
        h = emb[np.asarray(ids)]
        for i in range(c.layers):
            h = h + self._mixer(i, self._norm(h, w[f"backbone.layers.{i}.norm.weight"]))
        head = emb if c.tied and "lm_head.weight" not in w else w["lm_head.weight"]
        return self._norm(h, w["backbone.norm_f.weight"]) @ head.T


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--ids", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    logits = MambaModel(args.model).forward([int(t) for t in args.ids.split(",")])[-1]
    with open(args.out, "w") as f:
        f.write("\n".join(f"{v:.9g}" for v in logits) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
