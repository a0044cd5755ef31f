#!/usr/bin/python3
"""Beam search benchmarks on the engine alone (kvserve_engine_bench), rounds interleaved.

1. The reference's resilient_generate call: num_beams 40, num_return_sequences 20,
   max_new_tokens 23, early_stopping true, on a 1,000-token prompt of bench-small, with the
   dynamic, quantized (quanto int4) and offloaded caches, and dynamic under a KV device budget
   that forces the offloaded fallback: wall time and peak KV bytes (device and host).
2. Throughput: tokens per second over every beam at num_beams 4 and 8 against greedy decoding
   (ignore_eos, so every beam runs max_new_tokens steps).

Usage: bench/beams.py --bench build/bench/kvserve_engine_bench [--rounds 3] [--json OUT]
Prints medians and (min-max) ranges per row.
"""
import argparse
import json
import statistics
import subprocess
import sys

REFERENCE = ["--prompt-tokens", "1000", "--max-new-tokens", "23", "--num-beams", "40",
             "--num-return-sequences", "20", "--early-stopping", "true", "--ignore-eos", "false",
             "--requests", "1"]
REFERENCE_ROWS = [
    ("reference call, dynamic", ["--cache-implementation", "dynamic"]),
    ("reference call, quantized int4 (quanto)", ["--cache-implementation", "quantized"]),
    ("reference call, offloaded", ["--cache-implementation", "offloaded"]),
    ("reference call, dynamic, 200 MB budget (fallback)",
     ["--cache-implementation", "dynamic", "--kv-device-bytes", "200000000"]),
]
THROUGHPUT = ["--prompt-tokens", "32", "--max-new-tokens", "64", "--requests", "4"]
THROUGHPUT_ROWS = [
    ("greedy", []),
    ("num_beams 4", ["--num-beams", "4"]),
    ("num_beams 8", ["--num-beams", "8"]),
]


def run(bench, args, threads):
    out = subprocess.run([bench, "--preset", "bench-small", "--threads", str(threads)] + args,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def fmt(values, scale=1.0, digits=1):
    values = [v / scale for v in values]
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bench", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    a = parser.parse_args()
    results = {name: [] for name, _ in REFERENCE_ROWS + THROUGHPUT_ROWS}
    for r in range(a.rounds):
        for name, extra in REFERENCE_ROWS:
            results[name].append(run(a.bench, REFERENCE + extra, a.threads))
        for name, extra in THROUGHPUT_ROWS:
            results[name].append(run(a.bench, THROUGHPUT + extra, a.threads))
        print(f"round {r + 1} of {a.rounds} done", file=sys.stderr)
    print(f"bench-small, {a.threads} threads, {a.rounds} rounds interleaved: median (min-max)")
    print("| call | wall s | peak KV device MB | peak KV host MB | fallbacks |")
    print("|---|---|---|---|---|")
    for name, _ in REFERENCE_ROWS:
        rs = results[name]
        print(f"| {name} | {fmt([x['wall_s'] for x in rs], 1, 2)} | "
              f"{fmt([x['kv_device_peak_bytes'] for x in rs], 1e6)} | "
              f"{fmt([x['kv_host_peak_bytes'] for x in rs], 1e6)} | "
              f"{rs[0]['offload_fallbacks'] // 2} per call |")
    print()
    print("| decoding | tokens/s over every beam | sequences' tokens/s | wall s |")
    print("|---|---|---|---|")
    for name, _ in THROUGHPUT_ROWS:
        rs = results[name]
        print(f"| {name} | {fmt([x['row_tokens_per_s'] for x in rs])} | "
              f"{fmt([x['output_tokens_per_s'] for x in rs])} | "
              f"{fmt([x['wall_s'] for x in rs], 1, 2)} |")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
