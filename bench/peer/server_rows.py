#!/usr/bin/python3
"""Server rows against llama-server on identical weights, interleaved rounds.

One kvserve (--threads T, 127.0.0.1:0) and one llama-server (-t T -c 4096 -np 1, KV f32,
flash attention off: its best configuration for these rows in peer-llamacpp.md) on the same
model pair (make_models.py). Per round and side:
  cold    a fresh prompt of 2,032 random token ids, one new token: kvserve's timings.ttft_ms;
          llama-server's timings.prompt_ms (its prompt processing, server side);
  cached  a 2,000-token prefix (fixed for the run) + 32 fresh ids, after the prefix was
          computed once: kvserve with the prefix registered as a named prefix; llama-server
          with cache_prompt (its slot keeps the previous prompt's KV).
Prints median (min-max) seconds per side and the kvserve/llama.cpp ratio, after checking that
both servers generate the same 8 greedy tokens for one prompt (the same function).

  bench/peer/server_rows.py --peer /work/peer --build build --model bench-small-f32 --rounds 5
"""
import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kvctl(args, target, *rest):
    cmd = [os.path.join(args.build, "client/kvctl"), "--target", target, "--output", "json",
           "--timeout-ms", "300000", *rest]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out) if out.strip() else {}


def llama_completion(port, ids, n_predict=1):
    body = json.dumps({"prompt": ids, "n_predict": n_predict, "cache_prompt": True,
                       "temperature": 0, "top_k": 1, "return_tokens": True}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def wait_until(check, what):
    for _ in range(1200):
        try:
            if check():
                return
        except Exception:  # pylint: disable=broad-except
            pass
        time.sleep(0.25)
    raise SystemExit(f"{what} did not start")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", required=True)
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", default="bench-small-f32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(11)
    fresh = lambda n: [rng.randrange(3, 31000) for _ in range(n)]

    kv_port, ll_port = free_port(), free_port()
    kv = subprocess.Popen([os.path.join(args.build, "server/kvserve"), "--model",
                           os.path.join(args.peer, "models", args.model + "-hf"), "--listen",
                           f"127.0.0.1:{kv_port}", "--threads", str(args.threads),
                           "--no-auto-prefix-cache"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ll = subprocess.Popen([os.path.join(args.peer, "llama.cpp/build/bin/llama-server"), "-m",
                           os.path.join(args.peer, "models", args.model + ".gguf"), "--port",
                           str(ll_port), "-t", str(args.threads), "-tb", str(args.threads), "-c",
                           "4096", "-np", "1", "-fa", "off", "-ctk", "f32", "-ctv", "f32",
                           "--no-warmup"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = f"127.0.0.1:{kv_port}"
    results = {(side, row): [] for side in ("kvserve", "llama.cpp") for row in ("cold", "cached")}
    try:
        wait_until(lambda: subprocess.run([os.path.join(args.build, "client/kvctl"), "--target",
                                           target, "health"], capture_output=True).returncode == 0,
                   "kvserve")
        wait_until(lambda: urllib.request.urlopen(f"http://127.0.0.1:{ll_port}/health",
                                                  timeout=2).status == 200, "llama-server")
        # The two servers hold one function: the same greedy tokens for one prompt.
        probe = [1, 450, 4996, 17354, 1701, 29916]
        ours = kvctl(args, target, "generate", "--token-ids", ",".join(map(str, probe)),
                     "--max-new-tokens", "8", "--ignore-eos")
        ours_ids = [int(t) for t in ours.get("tokenIds", [])]
        theirs_ids = llama_completion(ll_port, probe, n_predict=8).get("tokens", [])
        print(f"greedy tokens of {probe}: kvserve {ours_ids}, llama-server {theirs_ids}: "
              f"{'equal' if ours_ids == theirs_ids else 'DIFFERENT'}")
        prefix = fresh(2000)
        kvctl(args, target, "prefix", "register", "--name", "peer",
              "--token-ids", ",".join(map(str, prefix)))
        # Warm-ups: one cold prompt each, and llama-server's first look at the prefix.
        kvctl(args, target, "generate", "--token-ids", ",".join(map(str, fresh(64))),
              "--max-new-tokens", "1")
        llama_completion(ll_port, fresh(64))
        for rnd in range(args.rounds):
            order = ["kvserve", "llama.cpp"] if rnd % 2 == 0 else ["llama.cpp", "kvserve"]
            for side in order:
                cold = fresh(2032)
                suffix = fresh(32)
                if side == "kvserve":
                    out = kvctl(args, target, "generate", "--token-ids", ",".join(map(str, cold)),
                                "--max-new-tokens", "1")
                    results[(side, "cold")].append(float(out["timings"]["ttftMs"]) / 1000)
                    out = kvctl(args, target, "generate", "--prefix", "peer", "--token-ids",
                                ",".join(map(str, suffix)), "--max-new-tokens", "1")
                    results[(side, "cached")].append(float(out["timings"]["ttftMs"]) / 1000)
                else:
                    out = llama_completion(ll_port, cold)
                    results[(side, "cold")].append(out["timings"]["prompt_ms"] / 1000)
                    llama_completion(ll_port, prefix + fresh(32))  # the slot now holds the prefix
                    out = llama_completion(ll_port, prefix + suffix)
                    assert out["timings"]["prompt_n"] <= 40, out["timings"]
                    results[(side, "cached")].append(out["timings"]["prompt_ms"] / 1000)
    finally:
        kv.send_signal(signal.SIGTERM)
        ll.send_signal(signal.SIGTERM)
        kv.wait()
        ll.wait()
    print(f"| {args.model}, {args.threads} threads | kvserve s | llama-server s | kvserve / llama.cpp |")
    print("|---|---:|---:|---:|")
    for row, what in (("cold", "cold TTFT, 2,032 tokens"), ("cached", "TTFT, 2,000 cached + 32 new")):
        k, l = results[("kvserve", row)], results[("llama.cpp", row)]
        mk, ml = statistics.median(k), statistics.median(l)
        print(f"| {what} | {mk:.3f} ({min(k):.3f}-{max(k):.3f}) | {ml:.3f} ({min(l):.3f}-{max(l):.3f}) "
              f"| {mk / ml:.2f} |")


if __name__ == "__main__":
    main()
