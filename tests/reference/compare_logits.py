#!/usr/bin/python3
"""Compares kvserve's logits with the numpy reference for every supported architecture.

For each architecture: kvserve-make-model writes a seeded tiny model, kvserve-generate
computes the prompt's last-position logits (--logits-out), reference_forward.py (gemma2 and
gemma3: gemma_reference.py; mamba: mamba_reference.py; bart: bart_reference.py) computes them
from the same files, and the two must agree to
--atol (max abs difference) with the same argmax. Gemma runs several prompt lengths, shorter
than, equal to and beyond its tiny sliding window (16); Mamba
runs several lengths around its convolution kernel; BART runs several encoder lengths, each
with a decoder input of another length (the prompt is the encoder input, --decoder-prompt-ids
the decoder's, the logits those of its last position). Prints a table; exits 1 if any
architecture disagrees or fails to run.

Usage: compare_logits.py --make-model BIN --generate BIN [--work-dir DIR] [--archs a,b]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean when ctest runs this

import bart_reference  # noqa: E402
import gemma_reference  # noqa: E402
import mamba_reference  # noqa: E402
import reference_forward  # noqa: E402

ARCHS = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "mamba", "bart")
# BART: (encoder length, decoder length) pairs: one encoder token with the start token alone,
# a short encoder with a few decoder tokens, and a long encoder with a longer decoder input.
BART_LENGTHS = ((1, 1), (5, 3), (40, 9))
GEMMA_LENGTHS = (5, 16, 40)
# Mamba: one token (the states start from zeros), a prompt within, and one far past, the
# convolution's kernel (4).
MAMBA_LENGTHS = (1, 3, 40)
# 24 ids below 256 (the tiny vocabulary is byte-level), longer than Mistral's tiny window,
# with a repeat so that identical tokens at different positions are exercised.
PROMPT_IDS = [5, 17, 42, 99, 3, 250, 128, 7, 64, 17, 200, 31, 8, 8, 77, 1, 145, 222, 13, 90,
              56, 180, 2, 111]


def _run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
        )
    return proc


def _read_logits(path):
    with open(path) as f:
        return np.array([float(line) for line in f if line.strip()], dtype=np.float64)


def compare_arch(arch, make_model, generate, work_dir, atol):
    """Returns a list of dicts of table fields; raises RuntimeError when a step fails."""
    model_dir = os.path.join(work_dir, arch)
    _run([make_model, "--arch", arch, "--preset", "tiny", "--seed", "7", "--out", model_dir])
    if arch.startswith("gemma"):
        model = gemma_reference.GemmaModel(model_dir)
        kinds = ",".join(sorted({"sliding" if s else "full" for s in model.cfg.sliding}))
        return [compare_prompt(arch, model, kinds, (PROMPT_IDS * 2)[:n], model_dir, generate, work_dir,
                               atol) for n in GEMMA_LENGTHS]
    if arch == "mamba":
        model = mamba_reference.MambaModel(model_dir)
        return [compare_prompt(arch, model, "mamba", (PROMPT_IDS * 2)[:n], model_dir, generate,
                               work_dir, atol) for n in MAMBA_LENGTHS]
    if arch == "bart":
        model = bart_reference.BartModel(model_dir)
        rows = [compare_bart(model, (PROMPT_IDS * 2)[:enc], (PROMPT_IDS[::-1] * 2)[:dec],
                             model_dir, generate, work_dir, atol, "bart")
                for enc, dec in BART_LENGTHS]
        # The same weights with the LM head tied to the shared embedding (BART's default; the
        # presets untie it, since random tied weights make greedy decoding repeat its input).
        config_path = os.path.join(model_dir, "config.json")
        with open(config_path) as f:
            config = json.load(f)
        config["tie_word_embeddings"] = True
        with open(config_path, "w") as f:
            json.dump(config, f)
        tied = bart_reference.BartModel(model_dir)
        rows.append(compare_bart(tied, PROMPT_IDS[:5], PROMPT_IDS[::-1][:3], model_dir, generate,
                                 work_dir, atol, "bart-tied"))
        return rows
    model = reference_forward.Model(model_dir)
    kinds = ",".join(sorted({kind for kind, _ in model.cfg.layer_windows}))
    return [compare_prompt(arch, model, kinds, PROMPT_IDS, model_dir, generate, work_dir, atol)]


def compare_bart(model, encoder, decoder, model_dir, generate, work_dir, atol, name):
    # The decoder input starts from decoder_start_token_id, as generate() starts it.
    decoder = [model.cfg.decoder_start] + decoder[:-1]
    kv_path = os.path.join(work_dir, f"{name}.{len(encoder)}.{len(decoder)}.kv")
    _run([generate, "--model", model_dir, "--prompt-ids", ",".join(map(str, encoder)),
          "--decoder-prompt-ids", ",".join(map(str, decoder)), "--max-new-tokens", "1",
          "--threads", "1", "--logits-out", kv_path])
    kvserve = _read_logits(kv_path)
    reference = model.forward(encoder, decoder)[-1]
    return _row(f"{name}/{len(encoder)}+{len(decoder)}", "enc-dec", kvserve, reference, atol)


def _row(name, kinds, kvserve, reference, atol):
    if kvserve.shape != reference.shape:
        raise RuntimeError(
            f"kvserve wrote {kvserve.size} logits, the reference has {reference.size}"
        )
    diff = np.abs(kvserve - reference)
    return {
        "arch": name,
        "vocab": reference.size,
        "layers": kinds,
        "max_abs_diff": float(diff.max()),
        "worst_id": int(diff.argmax()),
        "logit_std": float(reference.std()),
        "argmax_kv": int(kvserve.argmax()),
        "argmax_ref": int(reference.argmax()),
        "ok": bool(diff.max() <= atol and kvserve.argmax() == reference.argmax()),
    }


def compare_prompt(arch, model, kinds, prompt, model_dir, generate, work_dir, atol):
    ids = ",".join(map(str, prompt))
    kv_path = os.path.join(work_dir, f"{arch}.{len(prompt)}.kv")
    _run([generate, "--model", model_dir, "--prompt-ids", ids, "--max-new-tokens", "1",
          "--threads", "1", "--logits-out", kv_path])
    kvserve = _read_logits(kv_path)
    reference = model.forward(prompt)[-1]
    return _row(f"{arch}/{len(prompt)}", kinds, kvserve, reference, atol)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--make-model", required=True, help="path to kvserve-make-model")
    parser.add_argument("--generate", required=True, help="path to kvserve-generate")
    parser.add_argument("--work-dir", help="where models and logits go (default: a temp dir)")
    parser.add_argument("--archs", default=",".join(ARCHS))
    parser.add_argument("--atol", type=float, default=1e-4)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="kvserve-reference-") as tmp:
        work_dir = args.work_dir or tmp
        os.makedirs(work_dir, exist_ok=True)
        rows, failures = [], []
        for arch in args.archs.split(","):
            try:
                rows.extend(compare_arch(arch, args.make_model, args.generate, work_dir,
                                         args.atol))
            except (RuntimeError, reference_forward.ReferenceError, OSError) as e:
                failures.append(f"{arch}: {e}")
        print(f"prompt ids ({len(PROMPT_IDS)}): {','.join(map(str, PROMPT_IDS))}")
        print(f"{'arch':14} {'vocab':>6} {'layers':14} {'max|diff|':>10} {'at id':>6} "
              f"{'logit sd':>9} {'argmax kv/ref':>14}  result")
        for r in rows:
            print(f"{r['arch']:14} {r['vocab']:6d} {r['layers']:14} {r['max_abs_diff']:10.3g} "
                  f"{r['worst_id']:6d} {r['logit_std']:9.3f} "
                  f"{str(r['argmax_kv']) + '/' + str(r['argmax_ref']):>14}  "
                  f"{'ok' if r['ok'] else 'MISMATCH'}")
        for f in failures:
            print(f"FAILED {f}")
        bad = failures or [r for r in rows if not r["ok"]]
        if bad:
            print(f"reference comparison failed (tolerance {args.atol:g})")
            return 1
        print(f"all {len(rows)} architecture/prompt cases agree within {args.atol:g}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
