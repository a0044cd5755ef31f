#!/usr/bin/python3
"""Concurrent requests on one shared prefix: --prefix-kv-mode copy vs shared, interleaved.

Two kvserve processes (127.0.0.1:0, --threads 2, --no-auto-prefix-cache, --max-batch-size 32)
serve the same model folder, one with --prefix-kv-mode copy and one with shared. Each registers
one named prefix of --prefix-tokens random ids. Then, per round and per N in --concurrency (the
two servers alternating, one at a time), N streamed requests are sent at once, each with the
prefix, --own-tokens ids of its own and --new-tokens new tokens (EOS ignored). Measured per run:
generated tokens / wall time (first send to last stream end), mean TTFT (send to the first
message with tokens), and, sampled every 20 ms from the metrics endpoint and /proc, the peak of
kvserve_kv_device_bytes_used (live caches + snapshots, what the KV budget counts) and the
peak RSS. Prints medians with (min-max) over rounds, and shared/copy ratios.

  scripts/python.sh bench/shared_prefix.py --build build --model /tmp/bench-small --rounds 3
(make the model with build/model/kvserve-make-model --arch llama --preset bench-small --seed 1
--out DIR; for --prefix-tokens 8000 raise max_position_embeddings in DIR/config.json)

With --peer PEER --gguf FILE (bench/peer/README.md: the llama.cpp peer and a GGUF of the very
weights of --model, from bench/peer/make_models.py) llama-server joins each round as a third
side: per N, one llama-server with -np N slots (continuous batching, KV f32, flash attention
off, cache_prompt on), every slot primed with the prefix before the rounds (unmeasured: its
prompt cache then holds the prefix, as kvserve's registered prefix does), then N streamed
/completion requests of prefix + own ids. Its KV is what it allocates at start (-c tokens x
layers x 2 x kv heads x head_dim x 4 bytes), its RSS sampled from /proc.
"""
import argparse
import os
import random
import statistics
import threading
import time

from kvserve_launch import KvserveProcess  # noqa: E402  pylint: disable=wrong-import-position


def start(args, mode):
    return KvserveProcess(os.path.join(args.build, "server/kvserve"),
                          ["--model", args.model, "--threads", "2", "--no-auto-prefix-cache",
                           "--max-batch-size", "32", "--prefix-kv-mode", mode,
                           "--prefix-cache-bytes", str(1 << 30),
                           "--metrics-listen", "127.0.0.1:0"],
                          start_timeout_s=300, name=f"kvserve ({mode})")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Sampler(threading.Thread):
    """Peaks of the KV bytes in use and of RSS while a run goes."""

    def __init__(self, server):
        super().__init__(daemon=True)
        self.server = server
        self.stop = threading.Event()
        self.kv_peak = 0
        self.rss_peak = 0

    def run(self):
        while not self.stop.is_set():
            try:
                used = self.server.metrics().get("kvserve_kv_device_bytes_used", 0)
                self.kv_peak = max(self.kv_peak, int(used))
                self.rss_peak = max(self.rss_peak, rss_bytes(self.server.pid))
            except OSError:
                pass
            self.stop.wait(0.02)


def llama_kv_bytes(args, slots, ctx_per_slot):
    import json  # pylint: disable=import-outside-toplevel
    with open(os.path.join(args.model, "config.json"), encoding="utf-8") as f:
        c = json.load(f)
    head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    return (slots * ctx_per_slot * c["num_hidden_layers"] * 2 * c["num_key_value_heads"] *
            head_dim * 4)


def run_together(n, one):
    """Runs one(0) .. one(n - 1) on n threads started together; the wall time in seconds."""
    start = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - start


def run_llama_once(args, llama, n, rng, prefix, kv_bytes, new_tokens=None):
    """N streamed /completion requests at once on llama-server: the same figures as run_once."""
    import http.client  # pylint: disable=import-outside-toplevel
    import json  # pylint: disable=import-outside-toplevel
    new_tokens = args.new_tokens if new_tokens is None else new_tokens
    bodies = [json.dumps({"prompt": prefix + [rng.randrange(3, 31000)
                                              for _ in range(args.own_tokens)],
                          "n_predict": new_tokens, "cache_prompt": True, "temperature": 0,
                          "top_k": 1, "ignore_eos": True, "stream": True,
                          "return_tokens": True}).encode() for _ in range(n)]
    ttft = [None] * n
    tokens = [0] * n
    errors = []
    rss_peak = [0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                rss_peak[0] = max(rss_peak[0], rss_bytes(llama.proc.pid))
            except OSError:
                pass
            done.wait(0.02)

    def one(i):
        conn = http.client.HTTPConnection("127.0.0.1", llama.port, timeout=1800)
        try:
            sent = time.monotonic()
            conn.request("POST", "/completion", body=bodies[i],
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
            for line in response:
                if not line.startswith(b"data: "):
                    continue
                chunk = json.loads(line[6:])
                got = len(chunk.get("tokens") or [])
                if got and ttft[i] is None:
                    ttft[i] = time.monotonic() - sent
                tokens[i] += got
                if chunk.get("stop"):
                    break
        except Exception as e:  # pylint: disable=broad-except
            errors.append(repr(e))
        finally:
            conn.close()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    wall = run_together(n, one)
    done.set()
    sampler.join()
    if errors:
        raise RuntimeError(errors[0])
    return {"tok_s": sum(tokens) / wall, "ttft_s": statistics.mean(t or wall for t in ttft),
            "kv_peak": kv_bytes, "rss_peak": rss_peak[0], "mode": "llama-server"}


def run_once(args, server, stub, gen, n, rng):
    requests = [gen.GenerateRequest(
        prefix="shared-bench", token_ids=gen.TokenIds(ids=[rng.randrange(3, 31000)
                                                           for _ in range(args.own_tokens)]),
        sampling=gen.SamplingParams(max_new_tokens=args.new_tokens, ignore_eos=True))
        for _ in range(n)]
    ttft = [None] * n
    tokens = [0] * n
    modes = [""] * n
    errors = []
    sampler = Sampler(server)
    sampler.start()

    def one(i):
        try:
            sent = time.monotonic()
            for message in stub.GenerateStream(requests[i], timeout=1800):
                if message.token_ids and ttft[i] is None:
                    ttft[i] = time.monotonic() - sent
                tokens[i] += len(message.token_ids)
                if message.cache_report.prefix_kv_mode:
                    modes[i] = message.cache_report.prefix_kv_mode
        except Exception as e:  # pylint: disable=broad-except
            errors.append(repr(e))

    wall = run_together(n, one)
    sampler.stop.set()
    sampler.join()
    if errors:
        raise RuntimeError(errors[0])
    return {"tok_s": sum(tokens) / wall, "ttft_s": statistics.mean(ttft),
            "kv_peak": sampler.kv_peak, "rss_peak": sampler.rss_peak, "mode": modes[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--prefix-tokens", type=int, default=2000)
    parser.add_argument("--own-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--peer", help="the llama.cpp peer folder (bench/peer/README.md)")
    parser.add_argument("--gguf", help="the GGUF of --model's weights, for llama-server")
    parser.add_argument("--llama-concurrency", help="N for llama-server (default: --concurrency)")
    args = parser.parse_args()
    if bool(args.peer) != bool(args.gguf):
        parser.error("--peer and --gguf go together")
    from kvserve_stubs import (  # pylint: disable=import-outside-toplevel
        generation_pb2 as gen, generation_pb2_grpc as gen_grpc, prefix_pb2, prefix_pb2_grpc)
    rng = random.Random(7)
    modes = ["copy", "shared"]
    prefix = [rng.randrange(3, 31000) for _ in range(args.prefix_tokens)]
    servers, stubs = {}, {}
    results = {}
    try:
        for mode in modes:
            servers[mode] = start(args, mode)
            channel = servers[mode].channel()
            stubs[mode] = gen_grpc.GenerationStub(channel)
            prefix_pb2_grpc.PrefixCacheStub(channel).RegisterPrefix(
                prefix_pb2.RegisterPrefixRequest(name="shared-bench",
                                                 token_ids=gen.TokenIds(ids=prefix)), timeout=1800)
        llama_ns = {int(x) for x in (args.llama_concurrency or args.concurrency).split(",")}
        for n in (int(x) for x in args.concurrency.split(",")):
            for mode in modes:  # warm-up, unmeasured
                run_once(args, servers[mode], stubs[mode], gen, min(n, 2), rng)
            llama = None
            if args.peer and n in llama_ns:
                from servers import LlamaServer  # pylint: disable=import-outside-toplevel
                ctx = (args.prefix_tokens + args.own_tokens + args.new_tokens + 16 + 255) // 256 * 256
                llama = LlamaServer(args.peer, args.gguf, 2, parallel=n, ctx_per_slot=ctx)
                kv_bytes = llama_kv_bytes(args, n, ctx)
            try:
                if llama is not None:
                    # Every slot computes the prefix once (its prompt cache), unmeasured.
                    run_llama_once(args, llama, n, rng, prefix, kv_bytes, new_tokens=1)
                for _ in range(args.rounds):
                    for mode in modes + (["llama-server"] if llama else []):
                        if mode == "llama-server":
                            r = run_llama_once(args, llama, n, rng, prefix, kv_bytes)
                        else:
                            r = run_once(args, servers[mode], stubs[mode], gen, n, rng)
                        results.setdefault((n, mode), []).append(r)
                        print(f"N={n} {mode}: {r['tok_s']:.1f} tok/s, TTFT {r['ttft_s']:.2f} s, "
                              f"KV peak {r['kv_peak'] / 2**20:.1f} MiB, RSS peak "
                              f"{r['rss_peak'] / 2**20:.0f} MiB (served: {r['mode']})",
                              flush=True)
            finally:
                if llama is not None:
                    llama.stop()
    finally:
        for server in servers.values():
            server.close()
    print(f"\nprefix {args.prefix_tokens} + {args.own_tokens} own tokens, {args.new_tokens} new; "
          f"medians (min-max) of {args.rounds} interleaved rounds")
    for (n, mode), runs in sorted(results.items()):
        line = [f"N={n:>2} {mode:>6}:"]
        for key, unit, scale in (("tok_s", "tok/s", 1), ("ttft_s", "s TTFT", 1),
                                 ("kv_peak", "MiB KV", 2**-20), ("rss_peak", "MiB RSS", 2**-20)):
            v = [r[key] * scale for r in runs]
            line.append(f"{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f}) {unit}")
        print("  ".join(line))
    for n in sorted({n for n, _ in results}):
        c = statistics.median(r["tok_s"] for r in results[(n, "copy")])
        s = statistics.median(r["tok_s"] for r in results[(n, "shared")])
        kc = statistics.median(r["kv_peak"] for r in results[(n, "copy")])
        ks = statistics.median(r["kv_peak"] for r in results[(n, "shared")])
        print(f"N={n}: shared/copy tokens/s {s / c:.2f}x, KV peak {ks / kc:.2f}x")
        if (n, "llama-server") in results:
            ll = statistics.median(r["tok_s"] for r in results[(n, "llama-server")])
            print(f"N={n}: shared/llama-server tokens/s {s / ll:.2f}x")


if __name__ == "__main__":
    main()
