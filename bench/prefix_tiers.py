#!/usr/bin/python3
"""Prefix tiers benchmark: TTFT of a device, host and disk hit against a cold run; restart to
the first warm hit; a Zipf workload larger than the device's prefix budget with tiers on and
off (interleaved, two servers).

usage: scripts/python.sh bench/prefix_tiers.py \\
         --kvserve build/server/kvserve --model DIR [--tokens 2000] [--rounds 3] \\
         [--zipf-prefixes 200 --zipf-device 20 --zipf-tokens 2000 --zipf-requests 400]
Prints one line per measurement; figures are server-side timings.ttft_ms. The Zipf workload
also prints each server's hits per tier (kvserve_prefix_tier_hits_total) and the load average
before and after.
"""
import argparse
import os
import random
import shutil
import statistics
import tempfile
import time

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
)
from kvserve_launch import KvserveProcess  # noqa: E402  pylint: disable=wrong-import-position


class Server(KvserveProcess):
    def __init__(self, args, flags, workdir):
        super().__init__(args.kvserve, ["--model", args.model, "--threads", str(args.threads),
                                        "--max-batch-tokens", "8192",
                                        "--metrics-listen", "127.0.0.1:0"] + flags,
                         start_timeout_s=600, stop_grace_s=120,
                         log_path=os.path.join(workdir, "kvserve-%d.log" % time.monotonic_ns()))

    def start(self, wait=True):
        super().start(wait)
        self.stub = gen_grpc.GenerationStub(self.channel())
        self.info = self.stub.GetModelInfo(gen.GetModelInfoRequest(), timeout=60)
        return self

    def ttft(self, ids):
        """(ttft_ms, cached_tokens) of one greedy token."""
        r = self.stub.Generate(gen.GenerateRequest(token_ids=gen.TokenIds(ids=ids),
                                                   sampling=gen.SamplingParams(max_new_tokens=1)),
                               timeout=3600)
        return r.timings.ttft_ms, r.usage.cached_tokens


def snapshot_bytes(info, tokens):
    return tokens * info.num_layers * 2 * info.num_kv_heads * info.head_dim * 4


def ids_for(rng, info, n):
    return [rng.randrange(100, info.vocab_size) for _ in range(n)]


def med(values):
    return "%.0f ms (%.0f-%.0f, n=%d)" % (statistics.median(values), min(values), max(values),
                                          len(values))


def tier_ttft(args, workdir):
    disk = os.path.join(workdir, "disk-ttft")
    probe = Server(args, [], workdir)
    info = probe.info
    probe.stop()
    one = snapshot_bytes(info, args.tokens)
    # The device store and the host tier hold one prompt each; the disk many.
    flags = ["--prefix-cache-bytes", str(one * 3 // 2), "--prefix-host-bytes", str(one * 3 // 2),
             "--prefix-disk-bytes", str(one * 50), "--prefix-disk-dir", disk]
    server = Server(args, flags, workdir)
    rng = random.Random(7)
    results = {"cold": [], "device": [], "host": [], "disk": []}
    for _ in range(args.rounds):
        p, q, r = (ids_for(rng, info, args.tokens) for _ in range(3))
        t, c = server.ttft(p)  # cold; kept on the device
        assert c == 0, c
        results["cold"].append(t)
        t, c = server.ttft(p)
        assert c == args.tokens - 1, c
        results["device"].append(t)
        server.ttft(q)  # p to the host
        t, c = server.ttft(p)
        assert c == args.tokens - 1, c
        results["host"].append(t)
        server.ttft(r)  # p to the host, q to disk
        time.sleep(2)  # let the background write finish (a hit on a file being written reads memory)
        t, c = server.ttft(q)
        assert c == args.tokens - 1, c
        results["disk"].append(t)
    for kind in ("cold", "device", "host", "disk"):
        print("ttft %d-token prefix, %s: %s" % (args.tokens, kind, med(results[kind])), flush=True)
    # Restart: from launch to the first warm hit (a prefix on disk after the graceful stop).
    server.stop()
    t0 = time.monotonic()
    server.start()
    serving = time.monotonic() - t0
    ttft, cached = server.ttft(p)
    total = time.monotonic() - t0
    print("restart: SERVING after %.2f s; first warm hit (cached %d) TTFT %.0f ms; launch to "
          "first warm token %.2f s" % (serving, cached, ttft, total), flush=True)
    server.stop()


def zipf(args, workdir):
    probe = Server(args, [], workdir)
    info = probe.info
    probe.stop()
    one = snapshot_bytes(info, args.zipf_tokens)
    base = ["--prefix-cache-bytes", str(one * args.zipf_device + one // 2)]
    tiers = base + ["--prefix-host-bytes", str(one * args.zipf_host + one // 2),
                    "--prefix-disk-bytes", str(one * (args.zipf_prefixes + 2)),
                    "--prefix-disk-dir", os.path.join(workdir, "disk-zipf")]
    servers = {"off": Server(args, base, workdir), "on": Server(args, tiers, workdir)}
    rng = random.Random(11)
    prefixes = [ids_for(rng, info, args.zipf_tokens) for _ in range(args.zipf_prefixes)]
    weights = [1.0 / (k + 1) ** args.zipf_s for k in range(args.zipf_prefixes)]
    picks = rng.choices(range(args.zipf_prefixes), weights=weights, k=args.zipf_requests)
    stats = {name: {"hits": 0, "ttft": []} for name in servers}
    print("zipf: load average before %.2f %.2f %.2f" % os.getloadavg(), flush=True)
    started = time.monotonic()
    for i, k in enumerate(picks):
        # The prefix itself: a hit reuses all but its last token.
        prompt = prefixes[k]
        # Interleaved: A then B on even requests, B then A on odd ones.
        order = ("off", "on") if i % 2 == 0 else ("on", "off")
        for name in order:
            t, c = servers[name].ttft(prompt)
            stats[name]["ttft"].append(t)
            stats[name]["hits"] += 1 if c >= args.zipf_tokens - 1 else 0
    print("zipf: %.0f s; load average after %.2f %.2f %.2f" %
          ((time.monotonic() - started,) + os.getloadavg()), flush=True)
    for name in ("off", "on"):
        values = servers[name].metrics()
        print("zipf tiers %s: hits by tier %s; demotions %s; drops %d" % (
            name, {t: int(values.get('kvserve_prefix_tier_hits_total{tier="%s"}' % t, 0))
                   for t in ("device", "host", "disk")},
            {f: int(values.get('kvserve_prefix_tier_demotions_total{from="%s"}' % f, 0))
             for f in ("device", "host")},
            int(values.get("kvserve_prefix_tier_drops_total", 0))), flush=True)
    for name in ("off", "on"):
        s = stats[name]
        print("zipf tiers %s: %d prefixes x %d tokens, device budget %d, %d requests: hit rate "
              "%.1f %%, mean TTFT %.0f ms, median %.0f ms" %
              (name, args.zipf_prefixes, args.zipf_tokens, args.zipf_device, args.zipf_requests,
               100.0 * s["hits"] / len(s["ttft"]), statistics.mean(s["ttft"]),
               statistics.median(s["ttft"])), flush=True)
    for server in servers.values():
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-ttft", action="store_true")
    parser.add_argument("--zipf-prefixes", type=int, default=0, help="0: no Zipf workload")
    parser.add_argument("--zipf-device", type=int, default=20)
    parser.add_argument("--zipf-host", type=int, default=40)
    parser.add_argument("--zipf-tokens", type=int, default=2000)
    parser.add_argument("--zipf-requests", type=int, default=400)
    parser.add_argument("--zipf-s", type=float, default=1.0)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="kvserve-tiers-bench-")
    try:
        if not args.skip_ttft:
            tier_ttft(args, workdir)
        if args.zipf_prefixes:
            zipf(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
