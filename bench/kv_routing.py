#!/usr/bin/python3
"""Cache-aware routing over 3 kvserve replicas: three policies on a drifting workload.

Policies (each request goes to one of 3 replicas):
  events  the longest prefix of the prompt a replica holds, from its KV events
          (vllm.grpc.engine.VllmEngine/SubscribeKvEvents, rebuilt by kvserve_kv_events);
          when no replica holds the prompt's first block: the replica a request with that
          first block was just sent to (its events not in yet), else the one holding the
          fewest chains (distinct first blocks); remaining ties go where a consistent-hash
          ring puts the first block
  hash    nginx's `hash $http_x_kvserve_route consistent` (ketama: 160 points per server on
          a CRC32 ring) over the request's group, as deploy/gateway routes
  rr      round robin

Workload: `--groups` groups (8), each a shared `--prefix-tokens` (1,000) token prefix; a request
is its group's prefix and `--suffix-tokens` (24) tokens of its own, generating 1 token over
VllmEngine Generate on token ids. The groups' popularity drifts: Zipf weights (s=1.2) whose
ranking rotates by 3 groups every quarter of the run. The request sequence is the same for
every policy (--seed). Each replica's prefix cache holds about --cache-prefixes (3) prompts,
so no replica can keep every group. `--concurrency` clients send at once.

Each run starts 3 fresh replicas (embedded model, --threads 1); runs go policy after policy,
round after round (interleaved). Printed: per run, and the median [min, max] over the rounds
of each policy's prefix-cache hit rate (cached prompt tokens / prompt tokens) and mean TTFT
(client-side: send to first response message).

Needs ctest's PYTHONPATH (scripts/python.sh sets it). Example (about 3 minutes on 2 busy cores):
  scripts/python.sh bench/kv_routing.py --kvserve build/server/kvserve
"""
import argparse
import concurrent.futures
import itertools
import random
import statistics
import struct
import threading
import time
import zlib

from kvserve_kv_events import (  # noqa: E402  pylint: disable=wrong-import-position
    BLOCK_SIZE,
    KvEventSubscriber,
    block_hashes,
    vllm_engine_pb2 as vpb,
    vllm_engine_pb2_grpc as vgrpc,
)
from kvserve_launch import KvserveProcess  # noqa: E402  pylint: disable=wrong-import-position

KV_BYTES_PER_TOKEN = 4096  # the embedded model: 4 layers x 4 KV heads x 32 x 2 x float32
TENANT = "default"  # without API keys every call is the default tenant's


def workload(args):
    """[(group, prompt)] in order."""
    rng = random.Random(args.seed)
    prefixes = [[rng.randrange(10, 500) for _ in range(args.prefix_tokens)]
                for _ in range(args.groups)]
    weights = [1 / (rank + 1) ** 1.2 for rank in range(args.groups)]
    requests = []
    for i in range(args.requests):
        phase = i * 4 // args.requests
        rotated = weights[-3 * phase % args.groups:] + weights[:-3 * phase % args.groups]
        group = rng.choices(range(args.groups), rotated)[0]
        suffix = [rng.randrange(10, 500) for _ in range(args.suffix_tokens)]
        requests.append((group, prefixes[group] + suffix))
    return requests


class Ketama:
    """nginx's consistent hash: 160 CRC32 points per server, the first point at or after the
    key's CRC32 (wrapping)."""

    def __init__(self, names):
        self.points = []
        for index, name in enumerate(names):
            base = zlib.crc32(name.encode())
            prev = 0
            for _ in range(160):
                prev = zlib.crc32(struct.pack("<II", base, prev))
                self.points.append((prev, index))
        self.points.sort()

    def pick(self, key, among=None):
        """The server of `key`; with `among`, the first of those servers on the ring from the
        key's point on."""
        h = zlib.crc32(key.encode())
        start = next((i for i, (point, _) in enumerate(self.points) if point >= h), 0)
        for i in range(len(self.points)):
            index = self.points[(start + i) % len(self.points)][1]
            if among is None or index in among:
                return index
        raise ValueError("no server among the candidates")


class Router:
    def __init__(self, policy, replicas, subscribers):
        self.policy = policy
        self.replicas = replicas
        self.subscribers = subscribers
        # Stable names, as a StatefulSet's pods have (kvserve-0, -1, -2): the same ring every run.
        self.ring = Ketama([f"kvserve-{i}" for i in range(len(replicas))])
        # Events policy: first blocks sent to each replica whose events have not come yet.
        self.pending = [{} for _ in replicas]
        self.rr = itertools.count()
        self.in_flight = [0] * len(replicas)
        self.lock = threading.Lock()

    def pick(self, group, prompt):
        with self.lock:
            if self.policy == "rr":
                choice = next(self.rr) % len(self.replicas)
            elif self.policy == "hash":
                choice = self.ring.pick(f"group-{group}")
            else:
                first = block_hashes(prompt[:BLOCK_SIZE], TENANT)[0]
                matched, held = [], []
                for sub in self.subscribers:
                    with sub.cond:
                        matched.append(sub.index.match_blocks(prompt, TENANT))
                        # Chains held: about how many prompts' groups share its cache.
                        held.append(sum(1 for parent, _ in sub.index.blocks.values()
                                        if parent is None))
                best = [i for i, m in enumerate(matched) if m == max(matched)]
                if max(matched) == 0:
                    # Nobody holds it yet: where one is being computed (its events are still
                    # to come), else the replica whose cache the fewest chains share.
                    sent = [i for i in best if self.pending[i].get(first)]
                    best = sent or [i for i in best if held[i] == min(held[j] for j in best)]
                choice = self.ring.pick(str(first), among=best)
                self.pending[choice][first] = self.pending[choice].get(first, 0) + 1
            self.in_flight[choice] += 1
            return choice

    def done(self, choice, prompt):
        with self.lock:
            self.in_flight[choice] -= 1
            if self.policy == "events":
                first = block_hashes(prompt[:BLOCK_SIZE], TENANT)[0]
                self.pending[choice][first] -= 1
                if not self.pending[choice][first]:
                    del self.pending[choice][first]


def run(policy, requests, args):
    flags = ["--threads", "1", "--prefix-cache-bytes",
             str(args.cache_prefixes * (args.prefix_tokens + args.suffix_tokens) *
                 KV_BYTES_PER_TOKEN + KV_BYTES_PER_TOKEN),
             "--auto-prefix-min-tokens", "16", "--max-batch-size", "4"]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        replicas = list(pool.map(lambda i: KvserveProcess(args.kvserve, flags, name=f"r{i}"),
                                 range(3)))
    subscribers = []
    try:
        stubs = [vgrpc.VllmEngineStub(r.channel()) for r in replicas]
        if policy == "events":
            subscribers = [KvEventSubscriber(r.channel()).start(0) for r in replicas]
        router = Router(policy, replicas, subscribers)
        results = []

        def send(item):
            group, prompt = item
            choice = router.pick(group, prompt)
            try:
                request = vpb.GenerateRequest(
                    stream=True, tokenized=vpb.TokenizedInput(input_ids=prompt),
                    sampling_params=vpb.SamplingParams(temperature=0, max_tokens=1,
                                                       ignore_eos=True))
                start = time.monotonic()
                ttft, complete = None, None
                for response in stubs[choice].Generate(request, timeout=300):
                    if ttft is None:
                        ttft = time.monotonic() - start
                    if response.WhichOneof("response") == "complete":
                        complete = response.complete
                return (complete.prompt_tokens, complete.cached_tokens, ttft, choice)
            finally:
                router.done(choice, prompt)

        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            results = list(pool.map(send, requests))
    finally:
        for sub in subscribers:
            sub.stop()
        for r in replicas:
            r.stop()
    prompt = sum(r[0] for r in results)
    cached = sum(r[1] for r in results)
    spread = [sum(1 for r in results if r[3] == i) for i in range(3)]
    return cached / prompt, statistics.mean(r[2] for r in results) * 1000, spread


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--policies", default="events,hash,rr")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=96)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--prefix-tokens", type=int, default=1000)
    parser.add_argument("--suffix-tokens", type=int, default=24)
    parser.add_argument("--cache-prefixes", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    requests = workload(args)
    policies = args.policies.split(",")
    runs = {p: [] for p in policies}
    for round_ in range(args.rounds):
        for policy in policies:
            hit, ttft, spread = run(policy, requests, args)
            runs[policy].append((hit, ttft))
            print(f"round {round_} {policy:6s} hit rate {hit:.3f}  mean TTFT {ttft:7.1f} ms  "
                  f"requests per replica {spread}", flush=True)
    print(f"\n{args.requests} requests, {args.groups} groups of {args.prefix_tokens} tokens "
          f"+ {args.suffix_tokens}, concurrency {args.concurrency}, {args.rounds} rounds: "
          "median [min, max]")
    for policy in policies:
        hits = [r[0] for r in runs[policy]]
        ttfts = [r[1] for r in runs[policy]]
        print(f"{policy:6s} hit rate {statistics.median(hits):.3f} [{min(hits):.3f}, "
              f"{max(hits):.3f}]  mean TTFT {statistics.median(ttfts):.1f} ms "
              f"[{min(ttfts):.1f}, {max(ttfts):.1f}]")


if __name__ == "__main__":
    main()
