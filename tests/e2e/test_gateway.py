#!/usr/bin/python3
"""End-to-end test of the fleet: three kvserve replicas behind the nginx gateway.

Starts three kvserve processes on 127.0.0.1 (the embedded model, or --model DIR), each with
--replica-id and the shared prefixes file of the Kubernetes base, and one nginx on a loopback
port configured from deploy/gateway/nginx.conf.template by deploy/gateway/render.py; all are
stopped at the end. Then checks, through the gateway:
- routing by x-kvserve-route: 3 groups x 10 requests, each group sharing a long prompt and its
  own key, in random order: each group is served by one replica, >= 27 of 30 hit the cache;
- the same work without a key (round robin) hits less; both hit rates and mean TTFTs printed;
- a named prefix of the shared prefixes file is served, cached, by whichever replica a key picks;
- deadlines and cancellation reach the replica;
- the gateway hop's latency (kvctl bench through nginx against the same replica directly);
- kill -9 of one group's replica mid-run: that group moves to another replica (one miss, then
  hits) and no request fails.
Prints a report of the numbers. Exits 77 (ctest: skipped) with the reason when nginx, or its
gRPC module, is absent (scripts/setup.sh installs Debian's nginx).

  scripts/python.sh tests/e2e/test_gateway.py \\
      --kvserve build/server/kvserve --kvctl build/client/kvctl [--model DIR] [--prefix-tokens N]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    health_pb2,
    health_pb2_grpc,
    prefix_pb2,
    prefix_pb2_grpc,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
    free_port,
    channel_to,
)

RENDER = os.path.join(ROOT, "deploy", "gateway", "render.py")
PREFIXES_FILE = os.path.join(ROOT, "deploy", "k8s", "base", "prefixes.yaml")
ROUTE_KEY = "x-kvserve-route"
REPLICA_KEY = "x-kvserve-replica"
SKIP_EXIT_CODE = 77
STARTUP_TIMEOUT_S = 180 * TIME_SCALE
CALL_TIMEOUT_S = 120 * TIME_SCALE
GROUPS = 3
REQUESTS_PER_GROUP = 10
BENCH_ROUNDS = 3  # of the gateway hop measurement, each way
BENCH_REQUESTS = 40

ARGS = argparse.Namespace(kvserve=None, kvctl=None, nginx=None, model=None, prefix_tokens=512,
                          threads=1)
REPORT = []  # lines printed after the tests


# Loopback calls never go through a proxy that the environment may name.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def find_nginx(given):
    """The nginx binary, and why it cannot be used (None when it can)."""
    path = given or shutil.which("nginx") or (
        "/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)
    if not path or not os.access(path, os.X_OK):
        return None, "nginx is not installed (scripts/setup.sh installs Debian's nginx)"
    version = subprocess.run([path, "-V"], capture_output=True, text=True, check=False).stderr
    for module in ("http_grpc_module", "http_v2_module"):
        if f"--without-{module}" in version or (
                module == "http_v2_module" and "--with-http_v2_module" not in version):
            return None, f"{path} lacks ngx_{module}"
    return path, None


class Replica(KvserveProcess):
    """One kvserve process on 127.0.0.1:0 (metrics on 127.0.0.1:0), its stderr in a file of
    workdir; not yet SERVING when it returns (wait_until_serving())."""

    def __init__(self, replica_id, workdir):
        flags = ["--threads", str(ARGS.threads), "--replica-id", replica_id, "--prefixes-file",
                 PREFIXES_FILE, "--metrics-listen", "127.0.0.1:0"]
        if ARGS.model:
            flags += ["--model", ARGS.model]
        super().__init__(ARGS.kvserve, flags, log_path=os.path.join(workdir, f"{replica_id}.log"),
                         start_timeout_s=STARTUP_TIMEOUT_S, name=replica_id, wait=False)
        self.replica_id = replica_id

    def metric(self, name, labels=""):
        """The value of one series of the replica's /metrics (0 when absent)."""
        return self.metrics().get(name + ("{" + labels + "}" if labels else ""), 0.0)


class Gateway:
    """nginx in front of `replicas`, from the deployment's template, in a temporary prefix."""

    def __init__(self, nginx, replicas, workdir):
        self.dir = os.path.join(workdir, "nginx")
        os.makedirs(self.dir)
        # nginx's workers drop to an unprivileged user when the test runs as root.
        os.chmod(workdir, 0o755)
        os.chmod(self.dir, 0o755)
        self.port, self.health_port = free_port(), free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.conf = os.path.join(self.dir, "nginx.conf")
        self.error_log = os.path.join(self.dir, "error.log")
        self.access_log = os.path.join(self.dir, "access.log")
        render = [sys.executable, RENDER, "--listen", self.target,
                  "--health-listen", f"127.0.0.1:{self.health_port}", "--runtime-dir", self.dir,
                  "--access-log", self.access_log, "--error-log", self.error_log,
                  "--worker-processes", "1", "--out", self.conf]
        for replica in replicas:
            render += ["--replica", replica.target]
        subprocess.run(render, check=True)
        self.proc = subprocess.Popen(
            [nginx, "-p", self.dir, "-c", self.conf, "-e", self.error_log, "-g", "daemon off;"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                with HTTP.open(
                        f"http://127.0.0.1:{self.health_port}/healthz", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"nginx did not start\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines=30):
        if not os.path.exists(self.error_log):
            return "nginx wrote no error log"
        with open(self.error_log, encoding="utf-8", errors="replace") as f:
            text = f.read().splitlines()
        return "nginx error log (last lines):\n" + "\n".join(text[-lines:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Result:
    """What one streamed call through the gateway saw."""

    def __init__(self, group, replica, cached_tokens, ttft_ms, server_ttft_ms):
        self.group = group
        self.replica = replica
        self.cached_tokens = cached_tokens
        self.ttft_ms = ttft_ms
        self.server_ttft_ms = server_ttft_ms

    @property
    def hit(self):
        return self.cached_tokens > 0


class GatewayTest(unittest.TestCase):
    """One fleet for every test; the tests run in name order and the last one kills a replica."""

    replicas = []
    gateway = None
    workdir = None
    final_logs = ""  # the processes' last log lines, kept when the work directory goes

    @classmethod
    def setUpClass(cls):
        for name in ("kvserve", "kvctl"):
            path = getattr(ARGS, name)
            if not path or not os.access(path, os.X_OK):
                raise AssertionError(f"--{name} must name the built {name} binary, got {path!r}")
        cls.workdir = tempfile.mkdtemp(prefix="kvserve-gateway-test-")
        try:
            cls.replicas = []
            for name in "abc":
                cls.replicas.append(Replica(f"replica-{name}", cls.workdir))
            for replica in cls.replicas:
                replica.wait_until_serving()
            cls.gateway = Gateway(ARGS.nginx, cls.replicas, cls.workdir)
            cls.channel = channel_to(cls.gateway.target)
            cls.stub = gen_grpc.GenerationStub(cls.channel)
            cls.info = cls.stub.GetModelInfo(gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S)
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.gateway is not None:
            cls.channel.close()
            cls.gateway.stop()
            cls.final_logs += cls.gateway.log_tail() + "\n"
        for replica in cls.replicas:
            replica.kill()
            cls.final_logs += replica.log_tail(10) + "\n"
        if cls.workdir:
            shutil.rmtree(cls.workdir, ignore_errors=True)

    # Helpers.

    def by_id(self, replica_id):
        for replica in self.replicas:
            if replica.replica_id == replica_id:
                return replica
        self.fail(f"no replica is called {replica_id!r}")
        return None

    def random_ids(self, rng, length):
        """Token ids in the vocabulary, none of them special."""
        special = set(self.info.eos_token_ids)
        if self.info.HasField("bos_token_id"):
            special.add(self.info.bos_token_id)
        ids = []
        while len(ids) < length:
            candidate = rng.randrange(self.info.vocab_size)
            if candidate not in special:
                ids.append(candidate)
        return ids

    def workload(self, seed):
        """GROUPS x REQUESTS_PER_GROUP (group, prompt ids) in random order: each group's prompts
        share a long prefix (ARGS.prefix_tokens ids) followed by a few ids of their own."""
        rng = random.Random(seed)
        shared = [self.random_ids(rng, ARGS.prefix_tokens) for _ in range(GROUPS)]
        work = [(group, shared[group] + self.random_ids(rng, 8))
                for group in range(GROUPS) for _ in range(REQUESTS_PER_GROUP)]
        rng.shuffle(work)
        return work

    def stream(self, request, route=None, timeout=CALL_TIMEOUT_S):
        """Streams `request` through the gateway; (messages, client TTFT ms, replica id)."""
        metadata = ((ROUTE_KEY, route),) if route else None
        sent = time.monotonic()
        ttft_ms = None
        call = self.stub.GenerateStream(request, timeout=timeout, metadata=metadata)
        messages = []
        for message in call:
            if ttft_ms is None and message.token_ids:
                ttft_ms = (time.monotonic() - sent) * 1000
            messages.append(message)
        replicas = [value for key, value in call.trailing_metadata() or () if key == REPLICA_KEY]
        self.assertEqual(len(replicas), 1,
                         f"expected one {REPLICA_KEY} trailing metadata, got {replicas} "
                         f"(kvserve must name itself with --replica-id)")
        return messages, ttft_ms, replicas[0]

    def run_one(self, group, ids, route):
        request = gen.GenerateRequest(
            token_ids=gen.TokenIds(ids=ids),
            sampling=gen.SamplingParams(max_new_tokens=4, ignore_eos=True))
        messages, ttft_ms, replica = self.stream(request, route)
        last = messages[-1]
        self.assertEqual(last.usage.completion_tokens, 4)
        return Result(group, replica, last.usage.cached_tokens, ttft_ms, last.timings.ttft_ms)

    @staticmethod
    def summarize(name, results):
        hits = sum(r.hit for r in results)
        REPORT.append(
            f"{name}: hit rate {hits}/{len(results)} = {hits / len(results):.0%}, "
            f"mean TTFT {statistics.mean(r.ttft_ms for r in results):.2f} ms at the client "
            f"({statistics.mean(r.server_ttft_ms for r in results):.2f} ms in kvserve), "
            f"hits {statistics.mean([r.ttft_ms for r in results if r.hit] or [0]):.2f} ms, "
            f"misses {statistics.mean([r.ttft_ms for r in results if not r.hit] or [0]):.2f} "
            f"ms; replicas per group: "
            + ", ".join(f"{g}: {sorted({r.replica for r in results if r.group == g})}"
                        for g in range(GROUPS)))
        return hits

    def served_by(self, results, group):
        return {r.replica for r in results if r.group == group}

    # Tests, in name order.

    def test_10_health_and_identity_through_the_gateway(self):
        with HTTP.open(f"http://127.0.0.1:{self.gateway.health_port}/healthz",
                                    timeout=10) as response:
            self.assertEqual(response.status, 200)
        health = health_pb2_grpc.HealthStub(self.channel).Check(
            health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)
        self.assertEqual(health.status, health_pb2.HealthCheckResponse.SERVING)
        # GetModelInfo names the replica in its answer and in its trailing metadata.
        info, call = self.stub.GetModelInfo.with_call(
            gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S, metadata=((ROUTE_KEY, "who"),))
        trailing = dict(call.trailing_metadata() or ())
        self.assertIn(info.replica_id, [r.replica_id for r in self.replicas])
        self.assertEqual(trailing.get(REPLICA_KEY), info.replica_id)

    def test_20_routing_key_keeps_each_group_on_one_replica(self):
        results = [self.run_one(group, ids, f"group-{group}")
                   for group, ids in self.workload(seed=20)]
        hits = self.summarize("with x-kvserve-route", results)
        for group in range(GROUPS):
            self.assertEqual(len(self.served_by(results, group)), 1, f"group {group}")
        self.assertGreaterEqual(hits, 27)
        type(self).keyed_hits = hits

    def test_30_without_a_key_round_robin_hits_less(self):
        results = [self.run_one(group, ids, None) for group, ids in self.workload(seed=30)]
        hits = self.summarize("without a key (round robin)", results)
        self.assertEqual({r.replica for r in results}, {r.replica_id for r in self.replicas})
        for group in range(GROUPS):
            self.assertGreater(len(self.served_by(results, group)), 1, f"group {group}")
        self.assertLess(hits, getattr(self, "keyed_hits", GROUPS * REQUESTS_PER_GROUP))

    def test_40_a_named_prefix_is_served_cached_by_every_replica(self):
        with open(PREFIXES_FILE, encoding="utf-8") as f:
            name = re.search(r"^\s*- name:\s*(\S+)", f.read(), re.M).group(1)
        prefixes = prefix_pb2_grpc.PrefixCacheStub(self.channel)
        served = set()
        for i in range(60):
            request = gen.GenerateRequest(
                prefix=name, prompt=f" Question {i}: where is my order?",
                sampling=gen.SamplingParams(max_new_tokens=2))
            key = name if i == 0 else f"tenant-{i}"
            messages, _, replica = self.stream(request, route=key)
            # Every replica registered the same prefix from the shared file.
            registered, call = prefixes.GetPrefix.with_call(
                prefix_pb2.GetPrefixRequest(name=name), timeout=CALL_TIMEOUT_S,
                metadata=((ROUTE_KEY, key),))
            self.assertEqual(dict(call.trailing_metadata())[REPLICA_KEY], replica)
            # Its tokens come from the cache: from the named snapshot, or from an automatic
            # entry that an earlier request on this replica left, which extends it.
            last = messages[-1]
            self.assertGreaterEqual(last.usage.cached_tokens, registered.num_tokens,
                                    f"key {key} on {replica}")
            self.assertIn(last.cache_report.prefix, (name, ""))
            served.add(replica)
            if len(served) == len(self.replicas):
                break
        self.assertEqual(served, {r.replica_id for r in self.replicas})

    def test_50_deadlines_and_cancellation_reach_the_replica(self):
        def outcomes():
            return {outcome: sum(r.metric("kvserve_requests_total", f'outcome="{outcome}"')
                                 for r in self.replicas)
                    for outcome in ("length", "cancelled", "deadline_exceeded")}

        before = outcomes()
        prompt = self.random_ids(random.Random(50), 16)
        limit = self.info.max_position_embeddings - len(prompt)
        if self.info.max_new_tokens_limit > 0:
            limit = min(limit, self.info.max_new_tokens_limit)
        request = gen.GenerateRequest(
            token_ids=gen.TokenIds(ids=prompt),
            sampling=gen.SamplingParams(max_new_tokens=limit, ignore_eos=True))
        # Cancelled by the client after the first message.
        call = self.stub.GenerateStream(request, timeout=CALL_TIMEOUT_S,
                                        metadata=((ROUTE_KEY, "cancel"),))
        self.assertTrue(next(call).token_ids)
        call.cancel()
        # Ended by its deadline (grpc-timeout), long before the generation could finish.
        with self.assertRaises(grpc.RpcError) as raised:
            for _ in self.stub.GenerateStream(request, timeout=0.5,
                                              metadata=((ROUTE_KEY, "deadline"),)):
                pass
        self.assertEqual(raised.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        # Both end on their replica as cancelled or past their deadline, not by running to
        # their length.
        deadline = time.monotonic() + 60
        while True:
            after = outcomes()
            ended = sum(after[o] - before[o] for o in ("cancelled", "deadline_exceeded"))
            if ended >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assertEqual(ended, 2, f"before {before}, after {after}")
        self.assertEqual(after["length"], before["length"])

    def test_60_gateway_hop_latency(self):
        def bench(target, route):
            args = [ARGS.kvctl, "--target", target, "--output", "json", "--route", route,
                    "bench", "--concurrency", "1", "--requests", str(BENCH_REQUESTS),
                    "--prompt-tokens", "32", "--max-new-tokens", "8", "--warmup", "3",
                    # Every round sends the same prompts: none may find an earlier one cached.
                    "--no-prefix-reuse"]
            no_proxy = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
            done = subprocess.run(args, capture_output=True, text=True, timeout=600,
                                  check=False, env=no_proxy)
            self.assertEqual(done.returncode, 0, done.stderr)
            report = json.loads(done.stdout)
            self.assertEqual(report["errors"], 0, report)
            return report

        via = bench(self.gateway.target, "bench")
        (replica_id,) = via["requests_by_replica"]
        direct_target = self.by_id(replica_id).target
        # Alternated, so that the load of the machine weighs on both alike.
        rounds = {"gateway": [via], "direct": [bench(direct_target, "bench")]}
        for _ in range(BENCH_ROUNDS - 1):
            rounds["gateway"].append(bench(self.gateway.target, "bench"))
            rounds["direct"].append(bench(direct_target, "bench"))
        for report in rounds["gateway"]:
            self.assertEqual(report["requests_by_replica"], {replica_id: BENCH_REQUESTS})
        stat = {(path, key, part): statistics.median(r[key][part] for r in reports)
                for path, reports in rounds.items() for key in ("ttft_ms", "itl_ms")
                for part in ("mean", "p50")}
        REPORT.append(
            f"gateway hop (kvctl bench, {BENCH_ROUNDS} alternated rounds of {BENCH_REQUESTS} "
            f"requests each way, 32-token prompts, 8 new tokens, same replica {replica_id}; "
            f"medians of the rounds): TTFT mean {stat['gateway', 'ttft_ms', 'mean']:.3f} ms "
            f"through nginx vs {stat['direct', 'ttft_ms', 'mean']:.3f} ms direct ("
            f"{stat['gateway', 'ttft_ms', 'mean'] - stat['direct', 'ttft_ms', 'mean']:+.3f} ms), "
            f"p50 {stat['gateway', 'ttft_ms', 'p50']:.3f} vs {stat['direct', 'ttft_ms', 'p50']:.3f}"
            f" ms ({stat['gateway', 'ttft_ms', 'p50'] - stat['direct', 'ttft_ms', 'p50']:+.3f} "
            f"ms); inter-token mean {stat['gateway', 'itl_ms', 'mean']:.3f} vs "
            f"{stat['direct', 'itl_ms', 'mean']:.3f} ms")

    def test_70_kill_9_moves_one_group_after_one_miss(self):
        work = self.workload(seed=70)
        before, after = [], []
        killed = victim = None
        for i, (group, ids) in enumerate(work):
            if i == len(work) // 2:
                # Of the groups already served, the one with the most requests left loses its
                # replica.
                left = {g: sum(1 for g2, _ in work[i:] if g2 == g)
                        for g in range(GROUPS) if self.served_by(before, g)}
                victim = max(left, key=lambda g: (left[g], -g))
                (killed,) = self.served_by(before, victim)
                self.by_id(killed).kill()
            result = self.run_one(group, ids, f"kill-group-{group}")
            (after if killed else before).append(result)
        self.summarize("kill -9: before", before)
        self.summarize(f"kill -9 of {killed}: after", after)
        # Every request succeeded (run_one raises otherwise); none reached the dead replica.
        self.assertNotIn(killed, {r.replica for r in after})
        moved = [r for r in after if r.group == victim]
        self.assertGreaterEqual(len(moved), 2)
        self.assertEqual(len({r.replica for r in moved}), 1)
        self.assertEqual([r.hit for r in moved], [False] + [True] * (len(moved) - 1))
        # The groups whose replica lives stay where they were, and keep hitting.
        for group in range(GROUPS):
            if self.served_by(before, group) != {killed}:
                self.assertEqual(self.served_by(after, group), self.served_by(before, group))
                self.assertTrue(all(r.hit for r in after if r.group == group), f"group {group}")


def main():
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kvserve", default=os.environ.get("KVSERVE_BIN"))
    parser.add_argument("--kvctl", default=os.environ.get("KVCTL_BIN"))
    parser.add_argument("--nginx", help="nginx binary (default: nginx on PATH or /usr/sbin)")
    parser.add_argument("--model", help="model folder for the replicas (default: embedded)")
    parser.add_argument("--prefix-tokens", type=int, default=ARGS.prefix_tokens,
                        help="length of each group's shared prompt")
    parser.add_argument("--threads", type=int, default=ARGS.threads,
                        help="kvserve --threads of each replica")
    args, rest = parser.parse_known_args()
    nginx, why_not = find_nginx(args.nginx)
    if why_not:
        print(f"SKIPPED: {why_not}")
        return SKIP_EXIT_CODE
    vars(ARGS).update(vars(args), nginx=nginx)
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2).result
    if not result.wasSuccessful():
        print(GatewayTest.final_logs, file=sys.stderr)
    if REPORT:
        print("\n".join(["", "gateway report:"] + [f"  {line}" for line in REPORT]))
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
