#!/usr/bin/python3
"""TTFT and tokens/s of the same streamed work over the OpenAI-compatible HTTP API and over
gRPC, on one kvserve (started here with --http-listen), at concurrency 1 and 16.

Each request has 32 synthetic prompt tokens (different for every request, so that no prefix
is reused) and generates exactly 32 tokens (greedy, ignore_eos): GenerateStream with
token_ids over gRPC, POST /v1/completions with a token-id prompt and stream: true over HTTP
(both clients in this Python process, threads for concurrency). Runs alternate HTTP and gRPC
(A/B, B/A, ...) --reps times; each prints the median TTFT of its requests and its tokens/s
(generated tokens over the run's wall time); the summary gives medians and ranges.

  scripts/python.sh bench/http_vs_grpc.py --kvserve build/server/kvserve --model DIR [--reps 5] \
      [--threads 2]

through scripts/python.sh (ctest's PYTHONPATH). DIR: kvserve-make-model --arch llama --preset
bench-small --seed 1 --out DIR (what scripts/bench_server.sh uses).
"""
import argparse
import http.client
import json
import os
import statistics
import threading
import time

from kvserve_launch import KvserveProcess  # noqa: E402  pylint: disable=wrong-import-position
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
)

PROMPT_TOKENS = 32
NEW_TOKENS = 32


def prompt(i, vocab):
    return [(1000 + 7919 * i + 104729 * j) % (vocab - 300) + 300 for j in range(PROMPT_TOKENS)]


def grpc_request(stub, ids):
    """(ttft_s, tokens) of one streamed gRPC generation."""
    start = time.perf_counter()
    ttft = None
    tokens = 0
    request = gen.GenerateRequest(token_ids=gen.TokenIds(ids=ids), sampling=gen.SamplingParams(
        max_new_tokens=NEW_TOKENS, ignore_eos=True))
    for message in stub.GenerateStream(request, timeout=600):
        if message.token_ids and ttft is None:
            ttft = time.perf_counter() - start
        tokens += len(message.token_ids)
    return ttft, tokens


def http_request(port, model, ids):
    """(ttft_s, tokens) of one streamed HTTP completion (its usage counts the tokens)."""
    body = json.dumps({"model": model, "prompt": ids, "max_tokens": NEW_TOKENS, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True},
                       "kvserve": {"ignore_eos": True}}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    start = time.perf_counter()
    conn.request("POST", "/v1/completions", body=body,
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    ttft = None
    tokens = 0
    for line in response:
        if not line.startswith(b"data: {"):
            continue
        if ttft is None:
            ttft = time.perf_counter() - start
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    conn.close()
    return ttft, tokens


def run(kind, concurrency, requests, first_prompt, server, stub, vocab):
    """(median TTFT ms, tokens/s) of `requests` requests, `concurrency` at a time."""
    ttfts = []
    total = [0]
    lock = threading.Lock()
    next_i = [0]

    def worker():
        while True:
            with lock:
                if next_i[0] >= requests:
                    return
                i = next_i[0]
                next_i[0] += 1
            ids = prompt(first_prompt + i, vocab)
            if kind == "grpc":
                ttft, tokens = grpc_request(stub, ids)
            else:
                ttft, tokens = http_request(server.http_port, server.model_name, ids)
            with lock:
                ttfts.append(ttft)
                total[0] += tokens

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    assert total[0] == requests * NEW_TOKENS, (kind, total[0])
    return statistics.median(ttfts) * 1000, total[0] / wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", default="2")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    server = KvserveProcess(args.kvserve, ["--model", args.model, "--threads", args.threads,
                                           "--http-listen", "127.0.0.1:0", "--http-workers", "32",
                                           "--no-auto-prefix-cache"])
    server.model_name = os.path.basename(os.path.normpath(args.model))
    try:
        stub = gen_grpc.GenerationStub(server.channel())
        vocab = stub.GetModelInfo(gen.GetModelInfoRequest()).vocab_size
        grpc_request(stub, prompt(0, vocab))  # warm-up, both paths
        http_request(server.http_port, server.model_name, prompt(1, vocab))
        results = {}
        next_prompt = 10
        for concurrency, requests in ((1, 8), (16, 32)):
            for rep in range(args.reps):
                order = ("http", "grpc") if rep % 2 == 0 else ("grpc", "http")
                for kind in order:
                    ttft, tps = run(kind, concurrency, requests, next_prompt, server, stub, vocab)
                    next_prompt += requests
                    results.setdefault((kind, concurrency), []).append((ttft, tps))
                    print(f"c={concurrency} rep {rep} {kind:4}: TTFT p50 {ttft:7.1f} ms, "
                          f"{tps:6.1f} tokens/s", flush=True)
        print("\n| concurrency | protocol | TTFT p50 median (range) | tokens/s median (range) |")
        print("|---:|---|---:|---:|")
        for (kind, concurrency), values in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            ttfts = [v[0] for v in values]
            tpss = [v[1] for v in values]
            print(f"| {concurrency} | {kind} | {statistics.median(ttfts):.1f} ms "
                  f"({min(ttfts):.1f}-{max(ttfts):.1f}) | {statistics.median(tpss):.1f} "
                  f"({min(tpss):.1f}-{max(tpss):.1f}) |")
    finally:
        server.close()


if __name__ == "__main__":
    main()
