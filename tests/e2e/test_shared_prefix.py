#!/usr/bin/python3
"""End-to-end test of shared prefix segments (CacheOptions.prefix_kv_mode, --prefix-kv-mode).

One kvserve process per tiny model (llama; mistral with its sliding window; gemma2 with
soft-capped scores, sliding and global layers; made by kvserve-make-model; qwen3, phi3 and gemma3
are covered at the model level by tests/model/shared_prefix_test.cc) serves every request twice, with the prefix read in place ("shared") and
deep-copied ("copy"): greedy tokens are identical and log-probabilities within float32
summation error, with a named prefix, an automatic prefix, beams and a session's first turn on a
named prefix; cache_report.prefix_kv_mode says which mode served (strategies that keep the copy
say "copy"). On llama: a stream cancelled mid-way, and a named prefix deleted while a stream
reads it, leave the K/V bytes in use where they were; N concurrent streams on one prefix add
their tails to kvserve_kv_device_bytes_used in the shared mode, N copies in the copy mode. Run:
  test_shared_prefix.py --kvserve build/server/kvserve \
      --make-model build/model/kvserve-make-model
through scripts/python.sh (ctest's PYTHONPATH).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
import unittest

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    prefix_pb2,
    prefix_pb2_grpc,
    session_pb2 as ses,
    session_pb2_grpc as ses_grpc,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)

PATHS = {}
CALL_TIMEOUT_S = 60 * TIME_SCALE
LOGPROB_TOLERANCE = 1e-4
PREFIX = [(i * 37 + 11) % 250 + 3 for i in range(48)]
# What a dynamic cache's prefix becomes in the shared mode: read in place by every layer (the
# tiny mistral's sliding layers read the part of it their window keeps).
SHARED_REPORT = {"llama": "shared", "mistral": "shared", "gemma2": "shared"}
# Models with sliding layers keep no automatic prefix entries.
SLIDING = {"mistral", "gemma2"}


def own_tokens(salt, n=8):
    return [(i * 53 + salt * 101 + 7) % 250 + 3 for i in range(n)]


class Server(KvserveProcess):
    def __init__(self, arch, directory):
        model = os.path.join(directory, arch)
        subprocess.run([PATHS["make_model"], "--arch", arch, "--preset", "tiny", "--out", model],
                       check=True, stderr=subprocess.DEVNULL)
        super().__init__(PATHS["kvserve"], ["--model", model, "--threads", "1",
                                            "--auto-prefix-min-tokens", "16",
                                            "--session-idle-offload-seconds", "3600",
                                            "--metrics-listen", "127.0.0.1:0"])
        channel = self.channel()
        self.gen = gen_grpc.GenerationStub(channel)
        self.prefixes = prefix_pb2_grpc.PrefixCacheStub(channel)
        self.sessions = ses_grpc.SessionsStub(channel)

    def register(self, name, ids):
        self.prefixes.RegisterPrefix(prefix_pb2.RegisterPrefixRequest(
            name=name, token_ids=gen.TokenIds(ids=ids)), timeout=CALL_TIMEOUT_S)

    def request(self, mode, ids, prefix="", max_new=10, logprobs=True, **sampling):
        return gen.GenerateRequest(
            token_ids=gen.TokenIds(ids=ids), prefix=prefix,
            cache=gen.CacheOptions(prefix_kv_mode=mode),
            sampling=gen.SamplingParams(max_new_tokens=max_new, ignore_eos=True,
                                        logprobs=logprobs, **sampling))

    def generate(self, request):
        return self.gen.Generate(request, timeout=CALL_TIMEOUT_S)

    def kv_bytes_used(self):
        return self.metrics()["kvserve_kv_device_bytes_used"]

    def prefix_bytes(self, other_than=None):
        """The store's bytes; with other_than, once they differ from it (the metrics are
        published after the engine's step, a moment after a registration's answer)."""
        deadline = time.monotonic() + 10 * TIME_SCALE
        while True:
            value = self.metrics()["kvserve_prefix_cache_bytes"]
            if other_than is None or value != other_than or time.monotonic() > deadline:
                return value
            time.sleep(0.02)

    def other_bytes(self, m=None):
        """KV bytes in use outside the prefix store's entries (live caches, idle sessions,
        snapshots the store dropped that caches still read), from one scrape (`m`, else a new
        one)."""
        m = m or self.metrics()
        return m["kvserve_kv_device_bytes_used"] - m["kvserve_prefix_cache_bytes"]


class SharedPrefixTest(unittest.TestCase):
    directory = None
    servers = {}

    @classmethod
    def setUpClass(cls):
        cls.directory = tempfile.mkdtemp(prefix="kvserve_shared_prefix_")

    @classmethod
    def tearDownClass(cls):
        for server in cls.servers.values():
            server.stop()

    def server(self, arch):
        if arch not in self.servers:
            self.servers[arch] = Server(arch, self.directory)
            self.servers[arch].register("sys", PREFIX)
        return self.servers[arch]

    def assert_same(self, shared, copied, what):
        self.assertEqual(len(shared.sequences), len(copied.sequences), what)
        for a, b in zip(shared.sequences, copied.sequences):
            self.assertEqual(list(a.token_ids), list(b.token_ids), what)
            for x, y in zip(a.logprobs, b.logprobs):
                self.assertAlmostEqual(x.chosen.logprob, y.chosen.logprob,
                                       delta=LOGPROB_TOLERANCE, msg=what)

    def check_arch(self, arch):
        server = self.server(arch)
        # A named prefix.
        own = own_tokens(1)
        shared = server.generate(server.request("shared", own, prefix="sys"))
        copied = server.generate(server.request("copy", own, prefix="sys"))
        self.assertEqual(shared.usage.cached_tokens, len(PREFIX))
        self.assertEqual(shared.cache_report.prefix_kv_mode, SHARED_REPORT[arch])
        self.assertEqual(copied.cache_report.prefix_kv_mode, "copy")
        self.assert_same(shared, copied, f"{arch} named prefix")
        # An automatic prefix: a prompt kept by an earlier request (models with sliding layers
        # keep no automatic entries).
        head = [] if arch in SLIDING else own_tokens(2, 24)
        if head:
            server.generate(server.request("copy", head, max_new=1))
            tail = head + own_tokens(3, 6)
            shared = server.generate(server.request("shared", tail))
            copied = server.generate(server.request("copy", tail))
            self.assertEqual(shared.usage.cached_tokens, len(head))
            self.assertEqual(shared.cache_report.prefix_kv_mode, SHARED_REPORT[arch])
            self.assert_same(shared, copied, f"{arch} automatic prefix")
        # Beams: every row reads the one prefix.
        beams = dict(num_beams=3, num_return_sequences=2, logprobs=False)
        shared = server.generate(server.request("shared", own_tokens(4), prefix="sys", **beams))
        copied = server.generate(server.request("copy", own_tokens(4), prefix="sys", **beams))
        self.assertEqual(shared.cache_report.prefix_kv_mode, SHARED_REPORT[arch])
        self.assert_same(shared, copied, f"{arch} beams")
        # A session's first turn on the named prefix (the server's default mode: shared).
        session = server.sessions.CreateSession(
            ses.CreateSessionRequest(options=ses.SessionOptions(prefix="sys")),
            timeout=CALL_TIMEOUT_S)
        turn = server.generate(gen.GenerateRequest(
            session=session.id, token_ids=gen.TokenIds(ids=own_tokens(5)),
            sampling=gen.SamplingParams(max_new_tokens=10, ignore_eos=True)))
        self.assertEqual(turn.cache_report.prefix_kv_mode, SHARED_REPORT[arch])
        copied = server.generate(server.request("copy", own_tokens(5), prefix="sys"))
        self.assertEqual(list(turn.token_ids), list(copied.token_ids), f"{arch} session")

    def test_llama(self):
        self.check_arch("llama")

    def test_mistral(self):
        self.check_arch("mistral")

    def test_gemma2(self):
        self.check_arch("gemma2")

    def test_concurrent_requests_count_the_prefix_once(self):
        server = self.server("llama")
        n = 4
        before = server.prefix_bytes()
        server.register("long", [(i * 29 + 5) % 250 + 3 for i in range(1000)])
        prefix_bytes = server.prefix_bytes(other_than=before) - before
        self.assertGreater(prefix_bytes, 0)
        base = self.settled_other_bytes(server)
        grown = {}
        for mode in ("shared", "copy"):
            calls = [server.gen.GenerateStream(
                server.request(mode, own_tokens(20 + i), prefix="long", max_new=2500,
                               logprobs=False), timeout=CALL_TIMEOUT_S) for i in range(n)]
            for call in calls:  # every stream admitted and decoding
                self.assertTrue(next(call).token_ids)
            # The metrics are published after each step: scrapes while the streams run, until
            # the copies show (copy), or the first that sees the tails (shared: they grow by a
            # granule per 64 tokens, and a loaded machine scrapes slowly).
            deadline = time.monotonic() + 10 * TIME_SCALE
            grown[mode] = 0
            for scrape in range(1000):
                grown[mode] = max(grown[mode], server.other_bytes() - base)
                if mode == "shared" and grown[mode] > 0:
                    break
                if grown[mode] >= n * prefix_bytes or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            for call in calls:
                call.cancel()
            self.wait_for_other_bytes(server, base)
        # Shared: N tails of a few granules (under half of the N copies even when a loaded
        # machine scrapes late and the tails have grown past one prefix). Copy: N prefixes.
        self.assertGreater(grown["shared"], 0)
        self.assertLess(grown["shared"], n * prefix_bytes // 2)
        self.assertGreaterEqual(grown["copy"], n * prefix_bytes)

    def test_static_and_quantized_keep_the_copy(self):
        server = self.server("llama")
        for strategy in ("static", "quantized"):
            request = server.request("shared", own_tokens(6), prefix="sys")
            request.cache.cache_implementation = strategy
            response = server.generate(request)
            self.assertEqual(response.usage.cached_tokens, len(PREFIX))
            self.assertEqual(response.cache_report.prefix_kv_mode, "copy", strategy)
        bad = server.request("sideways", own_tokens(6), prefix="sys")
        with self.assertRaises(grpc.RpcError) as raised:
            server.generate(bad)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("cache.prefix_kv_mode", raised.exception.details())

    @staticmethod
    def await_other_bytes(server, done):
        """other_bytes() once done(value) holds, or the last value after 10 s."""
        deadline = time.monotonic() + 10 * TIME_SCALE
        value = server.other_bytes()
        while not done(value) and time.monotonic() < deadline:
            time.sleep(0.02)
            value = server.other_bytes()
        return value

    @staticmethod
    def settled_other_bytes(server):
        """other_bytes() once nothing runs or waits and two scrapes 0.2 s apart agree: a
        request's answer reaches its client before the engine publishes the step that freed
        its cache, so a scrape right after a call may still count it."""
        deadline = time.monotonic() + 10 * TIME_SCALE
        last = None
        while time.monotonic() < deadline:
            m = server.metrics()
            value = server.other_bytes(m)
            idle = m["kvserve_num_requests_running"] == 0 and m["kvserve_num_requests_waiting"] == 0
            if idle and value == last:
                return value
            last = value if idle else None
            time.sleep(0.2)
        raise AssertionError("the server's KV bytes did not settle in 10 s")

    def wait_for_other_bytes(self, server, expected):
        deadline = time.monotonic() + 10 * TIME_SCALE
        while server.other_bytes() != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(server.other_bytes(), expected)

    def test_cancel_and_delete_while_streaming(self):
        # Bytes outside the store's entries (live caches, snapshots the store dropped that
        # caches still read): none between requests. Copy runs keep automatic entries, which
        # count in the store's bytes.
        server = self.server("llama")
        server.generate(server.request("shared", own_tokens(7), prefix="sys", max_new=2))
        base = self.settled_other_bytes(server)
        # A stream cancelled mid-way lets go of the segment.
        call = server.gen.GenerateStream(server.request("shared", own_tokens(8), prefix="sys",
                                                        max_new=3000), timeout=CALL_TIMEOUT_S)
        self.assertTrue(next(call).token_ids)
        # (The metrics follow the engine's step: polled, as a loaded machine publishes late.)
        self.assertGreater(self.await_other_bytes(server, lambda v: v > base), base)
        call.cancel()
        with self.assertRaises(grpc.RpcError):
            for _ in call:
                pass
        self.wait_for_other_bytes(server, base)
        # A named prefix deleted while a stream reads it: the stream goes on as the copy run
        # does, the snapshot stays counted (once) while read and leaves once the stream is done.
        before = server.prefix_bytes()
        server.register("doomed", PREFIX[:40])
        doomed_bytes = server.prefix_bytes(other_than=before) - before
        self.assertGreater(doomed_bytes, 0)
        expected = server.generate(server.request("copy", own_tokens(10), prefix="doomed",
                                                  max_new=60, logprobs=False))
        call = server.gen.GenerateStream(server.request("shared", own_tokens(10), prefix="doomed",
                                                        max_new=3000, logprobs=False),
                                         timeout=CALL_TIMEOUT_S)
        tokens = list(next(call).token_ids)
        server.prefixes.DeletePrefix(prefix_pb2.DeletePrefixRequest(name="doomed"),
                                     timeout=CALL_TIMEOUT_S)
        # Out of the store, still in the budget: counted outside the store's entries.
        self.assertGreaterEqual(
            self.await_other_bytes(server, lambda v: v - base >= doomed_bytes) - base,
            doomed_bytes)
        for message in call:
            tokens += list(message.token_ids)
            if len(tokens) >= 60:
                break
        call.cancel()
        self.assertEqual(tokens[:60], list(expected.token_ids))
        self.wait_for_other_bytes(server, base)

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--make-model", required=True)
    args, rest = parser.parse_known_args()
    PATHS["kvserve"] = os.path.abspath(args.kvserve)
    PATHS["make_model"] = os.path.abspath(args.make_model)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
