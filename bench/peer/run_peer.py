#!/usr/bin/python3
"""kvserve against llama.cpp on identical weights, side by side, several interleaved rounds.

For every model pair made by make_models.py (PEER/models/NAME-hf for kvserve, NAME.gguf for
llama.cpp) and every thread count, each round runs, in alternating order,
  llama-bench -m NAME.gguf -p 512 -n 128 -t T -r 1 -fa 0,1 -o json
    (prefill pp512 and decode tg128 tokens/s with flash attention off and on; its KV cache is
    f16, llama-bench offers no f32 one, where kvserve's is f32), and
  kvserve_model_bench --model NAME-hf --threads T --depths 32,512
    (BM_Prefill/model/T/512: a 512-token prompt; BM_Decode/model/T/32: 64 steps after 32
    tokens, about the same average depth as tg128's), both warmed up,
and prints per row the median (min-max) tokens/s of each side and the kvserve/llama.cpp ratio
of the medians. llama.cpp's row takes the flash-attention setting with the better median over
the rounds (taking the better of the two within each round would pick the luckier of two
noisy samples every round, a bias of several per cent in llama.cpp's favour on this machine).
--json FILE keeps every sample (side "llama.cpp fa=0" / "fa=1", and "llama.cpp": the chosen).

  bench/peer/run_peer.py --peer /work/peer --build build --rounds 3 \
      --models bench-small-f32,bench-small-bf16,bench-medium-f32,bench-medium-bf16 --threads 1,2
"""
import argparse
import json
import os
import statistics
import subprocess


def llama_bench(args, name, threads):
    cmd = [os.path.join(args.peer, "llama.cpp/build/bin/llama-bench"), "-m",
           os.path.join(args.peer, "models", name + ".gguf"), "-p", "512", "-n", "128", "-t",
           str(threads), "-r", "1", "-fa", "0,1", "-o", "json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    result = {}
    for record in json.loads(out):
        kind = "prefill" if record["n_prompt"] > 0 else "decode"
        flash = int(bool(record.get("flash_attn")))
        result[(kind, f"llama.cpp fa={flash}")] = float(record["avg_ts"])
    return result


def kvserve_bench(args, name, threads):
    cmd = [os.path.join(args.build, "bench/kvserve_model_bench"), "--model",
           os.path.join(args.peer, "models", name + "-hf"), "--threads", str(threads),
           "--depths", "32,512", "--benchmark_format=json", "--benchmark_min_time=1",
           f"--benchmark_filter=BM_Prefill/model/{threads}/512|BM_Decode/model/{threads}/32"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    result = {}
    for b in json.loads(out)["benchmarks"]:
        kind = "prefill" if b["name"].startswith("BM_Prefill") else "decode"
        result[(kind, "kvserve")] = float(b["tokens_per_s"])
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", required=True)
    parser.add_argument("--build", default="build")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", default="bench-small-f32,bench-small-bf16")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--json", help="write every sample here")
    args = parser.parse_args()
    models = args.models.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    samples = {}
    for rnd in range(args.rounds):
        for name in models:
            for t in threads:
                runs = [llama_bench, kvserve_bench]
                if rnd % 2:
                    runs.reverse()
                for run in runs:
                    for (kind, side), value in run(args, name, t).items():
                        samples.setdefault((name, t, kind, side), []).append(value)
    chosen = {}
    for name in models:
        for t in threads:
            for kind in ("prefill", "decode"):
                flash = max((0, 1), key=lambda f: statistics.median(
                    samples.get((name, t, kind, f"llama.cpp fa={f}"), [0.0])))
                chosen[(name, t, kind)] = flash
                samples[(name, t, kind, "llama.cpp")] = samples[(name, t, kind,
                                                                 f"llama.cpp fa={flash}")]
    print("| model | threads | kind | kvserve tokens/s | llama.cpp tokens/s | kvserve / llama.cpp |")
    print("|---|---:|---|---:|---:|---:|")
    for name in models:
        for kind in ("prefill", "decode"):
            for t in threads:
                k = samples[(name, t, kind, "kvserve")]
                l = samples[(name, t, kind, "llama.cpp")]
                mk, ml = statistics.median(k), statistics.median(l)
                flash = chosen[(name, t, kind)]
                print(f"| {name} | {t} | {kind} | {mk:,.0f} ({min(k):,.0f}-{max(k):,.0f}) | "
                      f"{ml:,.0f} ({min(l):,.0f}-{max(l):,.0f}), fa={flash} | {mk / ml:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"model": n, "threads": t, "kind": k, "side": s, "tokens_per_s": v}
                       for (n, t, k, s), v in samples.items()], f, indent=1)


if __name__ == "__main__":
    main()
