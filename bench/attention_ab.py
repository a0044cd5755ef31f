#!/usr/bin/python3
"""Time to first token through the server, A/B between kernel levels of one kvserve binary.

Two kvserve processes (127.0.0.1:0, --threads 2, --no-auto-prefix-cache) serve the same model
folder, one with KVSERVE_CPU_ISA=avx512 (the tiled attention kernel, where the CPU has
AVX-512) and one with KVSERVE_CPU_ISA=avx2 (attention by batched GEMMs over the whole score
matrix); rounds alternate between them. Per round and side:

  cold      a fresh random prompt of --prompt-tokens token ids, max_new_tokens 1: the server's
            timings.ttft_ms;
  prefix    a named prefix of --prefix-tokens random ids registered once per side, then a
            request with it and --suffix-tokens fresh ids: timings.ttft_ms (the deep copy of
            the snapshot and the prefill of the suffix over the cached context).

Prints the median (min-max) per side and the avx512/avx2 ratio of the medians.

  scripts/python.sh bench/attention_ab.py --build build --model /tmp/bench-small --rounds 5
(make the model with build/model/kvserve-make-model --preset bench-small --seed 1 --out DIR)
"""
import argparse
import json
import os
import random
import statistics
import subprocess

from kvserve_launch import KvserveProcess  # noqa: E402  pylint: disable=wrong-import-position


def kvctl(args, target, *rest):
    cmd = [os.path.join(args.build, "client/kvctl"), "--target", target, "--output", "json",
           "--timeout-ms", "300000", *rest]
    run = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(run.stdout) if run.stdout.strip() else {}


def start(args, isa):
    """kvserve with KVSERVE_CPU_ISA=isa, SERVING."""
    return KvserveProcess(os.path.join(args.build, "server/kvserve"),
                          ["--model", args.model, "--threads", "2", "--no-auto-prefix-cache"],
                          env={"KVSERVE_CPU_ISA": isa}, start_timeout_s=180,
                          name=f"kvserve ({isa})")


def ids(rng, n):
    return ",".join(str(rng.randrange(3, 31000)) for _ in range(n))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=2032)
    parser.add_argument("--prefix-tokens", type=int, default=2000)
    parser.add_argument("--suffix-tokens", type=int, default=32)
    args = parser.parse_args()
    rng = random.Random(7)
    sides = ["avx512", "avx2"]
    servers = {}
    results = {(isa, mode): [] for isa in sides for mode in ("cold", "prefix")}
    try:
        for isa in sides:
            servers[isa] = start(args, isa)
        prefix = ids(rng, args.prefix_tokens)
        for isa in sides:
            kvctl(args, servers[isa].target, "prefix", "register", "--name", "ab",
                  "--token-ids", prefix)
        for _ in range(args.rounds):
            for isa in sides:
                target = servers[isa].target
                cold = kvctl(args, target, "generate", "--token-ids",
                             ids(rng, args.prompt_tokens), "--max-new-tokens", "1")
                results[(isa, "cold")].append(float(cold["timings"]["ttftMs"]) / 1000)
                hit = kvctl(args, target, "generate", "--prefix", "ab", "--token-ids",
                            ids(rng, args.suffix_tokens), "--max-new-tokens", "1")
                results[(isa, "prefix")].append(float(hit["timings"]["ttftMs"]) / 1000)
    finally:
        for server in servers.values():
            server.close()
    for mode, what in (("cold", f"cold TTFT, {args.prompt_tokens} tokens"),
                       ("prefix", f"TTFT, {args.prefix_tokens} cached + {args.suffix_tokens} new")):
        medians = {}
        for isa in sides:
            v = results[(isa, mode)]
            medians[isa] = statistics.median(v)
            print(f"{what}: {isa} {medians[isa]:.3f} s ({min(v):.3f}-{max(v):.3f})")
        print(f"{what}: avx512/avx2 {medians['avx512'] / medians['avx2']:.2f}")


if __name__ == "__main__":
    main()
