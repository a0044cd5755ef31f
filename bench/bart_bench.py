#!/usr/bin/python3
"""Prefill (encoder) and decode tokens/s of BART bench-small beside Llama bench-small.

Writes both presets with kvserve-make-model, then runs kvserve-generate on each, the two
families interleaved within each round: a PROMPT-token prompt (BART: its encoder input; the
decoder starts from decoder_start_token_id and forced_bos_token_id), NEW greedy tokens past
EOS, dynamic cache. Prefill tokens/s is prompt tokens over the first forward's time (BART: the
encoder, the cross-attention K/V and the decoder's start tokens); decode tokens/s the steps
after it. Prints each run and the medians with their ranges.

Usage: bart_bench.py --build build [--rounds 3] [--prompt 512] [--new 64] [--threads 2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    make = os.path.join(args.build, "model", "kvserve-make-model")
    generate = os.path.join(args.build, "model", "kvserve-generate")
    ids = ",".join(str((i * 37 + 11) % 250 + 3) for i in range(args.prompt))
    results = {"bart": [], "llama": []}
    with tempfile.TemporaryDirectory(prefix="kvserve-bart-bench-") as tmp:
        for arch in results:
            subprocess.run([make, "--arch", arch, "--preset", "bench-small", "--seed", "1",
                            "--out", os.path.join(tmp, arch)], check=True, capture_output=True)
        for r in range(args.rounds):
            for arch in results:
                out = subprocess.run(
                    [generate, "--model", os.path.join(tmp, arch), "--prompt-ids", ids,
                     "--max-new-tokens", str(args.new), "--ignore-eos", "--threads",
                     str(args.threads), "--output", "json"],
                    check=True, capture_output=True, text=True).stdout
                t = json.loads(out)["timings"]
                results[arch].append((t["prefill_tokens_per_s"], t["decode_tokens_per_s"]))
                print(f"round {r + 1} {arch:5} prefill {t['prefill_tokens_per_s']:8.1f} "
                      f"decode {t['decode_tokens_per_s']:6.1f} tokens/s", flush=True)
    print(f"\n| family | prefill ({args.prompt}) tokens/s | decode tokens/s |")
    print("|---|---:|---:|")
    for arch, runs in results.items():
        cells = []
        for k in (0, 1):
            values = [run[k] for run in runs]
            cells.append(f"{statistics.median(values):,.1f} [{min(values):,.1f}-"
                         f"{max(values):,.1f}]")
        print(f"| {arch} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
