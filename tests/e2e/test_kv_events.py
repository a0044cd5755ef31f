#!/usr/bin/python3
"""End-to-end: the vLLM engine protocol and its KV events on a real kvserve (embedded model).

A client generated from kvserve's copy of the protocol (proto/vllm, proto/smg) subscribes to
vllm.grpc.engine.VllmEngine/SubscribeKvEvents and rebuilds the replica's blocks from the
events alone (client/python/kvserve_kv_events.py). After every phase -- named prefixes (a
tenant's and a shared one), automatic prefixes from Generate on token ids, evictions, a
deletion, a reconnect that replays from a sequence number, a reconnect past the replay buffer
(the gap is reported), a restart -- the blocks equal the whole 16-token blocks of what
kvserve.v1.CacheAdmin/ListCacheEntries says the store holds at the same batch number. A
user's subscription shows shared blocks only; GetLoads agrees with the vllm:* metrics.

Needs ctest's PYTHONPATH; run:
  scripts/python.sh tests/e2e/test_kv_events.py --kvserve build/server/kvserve
"""
import argparse
import os
import sys
import tempfile
import threading
import time
import unittest

from kvserve_kv_events import (  # noqa: E402  pylint: disable=wrong-import-position
    BLOCK_SIZE,
    BlockIndex,
    KvEventSubscriber,
    block_hashes,
    vllm_engine_pb2 as vpb,
    vllm_engine_pb2_grpc as vgrpc,
)
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    auth_metadata,
    generation_pb2 as gen,
    grpc,
    prefix_pb2,
    prefix_pb2_grpc,
)
from kvserve.v1 import cache_pb2, cache_pb2_grpc  # noqa: E402  pylint: disable=wrong-import-position
from kvserve_fixtures import (  # noqa: E402  pylint: disable=wrong-import-position
    write_api_keys_file,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)

PATHS = {}
TIMEOUT_S = 30 * TIME_SCALE
ADMIN = auth_metadata("ops-secret")
ALICE = auth_metadata("alice-secret")
BUFFER = 6  # --kv-events-buffer


def ids(seed, n):
    """n token ids in [10, 250) (the embedded model's vocabulary is 512); different seeds
    differ from the first token on."""
    return [(37 * seed + 11 * t + seed * t) % 240 + 10 for t in range(n)]


class KvEventsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
        keys = write_api_keys_file(os.path.join(cls.tmp.name, "keys.yaml"),
                                   [("ops-secret", "ops", "admin"),
                                    ("alice-secret", "alice", "user")])
        # 64-token prompts hold 64 * 4 KiB of K/V on the embedded model: the prefix cache
        # (1.2 MB) keeps about four of them, so that traffic evicts. The whole cache is open
        # to each tenant (no fair share): the phases below fill it from one tenant.
        cls.server = KvserveProcess(PATHS["kvserve"], [
            "--threads", "1", "--api-keys-file", keys, "--metrics-listen", "127.0.0.1:0",
            "--prefix-cache-bytes", "1200000", "--kv-device-bytes", "67108864",
            "--tenant-max-prefix-bytes", "0",
            "--auto-prefix-min-tokens", "16", "--kv-events-buffer", str(BUFFER),
            "--state-dir", os.path.join(cls.tmp.name, "state")])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.tmp.cleanup()

    # Helpers.

    def channel(self):
        return self.server.channel()

    def engine(self):
        return vgrpc.VllmEngineStub(self.channel())

    def register(self, name, tokens, metadata, shared=False):
        stub = prefix_pb2_grpc.PrefixCacheStub(self.channel())
        request = prefix_pb2.RegisterPrefixRequest(name=name, token_ids=gen.TokenIds(ids=tokens))
        request.shared = shared
        stub.RegisterPrefix(request, metadata=metadata, timeout=TIMEOUT_S)

    def delete(self, name, metadata):
        stub = prefix_pb2_grpc.PrefixCacheStub(self.channel())
        stub.DeletePrefix(prefix_pb2.DeletePrefixRequest(name=name), metadata=metadata,
                          timeout=TIMEOUT_S)

    def generate(self, tokens, metadata, max_tokens=2, stream=True):
        """[chunks], complete of one VllmEngine Generate on token ids."""
        request = vpb.GenerateRequest(
            request_id=f"r{time.monotonic_ns()}", stream=stream,
            tokenized=vpb.TokenizedInput(input_ids=tokens),
            sampling_params=vpb.SamplingParams(temperature=0, max_tokens=max_tokens,
                                               ignore_eos=True))
        chunks, complete = [], None
        for response in self.engine().Generate(request, metadata=metadata, timeout=TIMEOUT_S):
            if response.WhichOneof("response") == "chunk":
                chunks.append(response.chunk)
            else:
                complete = response.complete
        return chunks, complete

    def listing(self):
        stub = cache_pb2_grpc.CacheAdminStub(self.channel())
        return stub.ListCacheEntries(cache_pb2.ListCacheEntriesRequest(), metadata=ADMIN,
                                     timeout=TIMEOUT_S)

    @staticmethod
    def expected(entries):
        """{hash: prefix tokens} of the whole blocks of `entries`."""
        blocks = {}
        for entry in entries:
            tokens = list(entry.token_ids)
            for i, h in enumerate(block_hashes(tokens, entry.space)):
                blocks[h] = tuple(tokens[:(i + 1) * BLOCK_SIZE])
        return blocks

    def assert_in_sync(self, subscriber, shared_only=False):
        """The subscriber's blocks equal the listing's at the same batch number."""
        for _ in range(20):
            listed = self.listing()
            self.assertTrue(subscriber.wait_for(listed.sequence_number, TIMEOUT_S),
                            f"batch {listed.sequence_number} never came "
                            f"(last {subscriber.index.last_sequence}, {subscriber.error})")
            if subscriber.index.last_sequence != listed.sequence_number:
                continue  # the store moved on meanwhile: list again
            entries = [e for e in listed.entries if not shared_only or e.space == ""]
            want = self.expected(entries)
            index = subscriber.index
            self.assertEqual(set(index.blocks), set(want))
            for h, tokens in want.items():
                self.assertEqual(index.prefix_tokens(h), tokens)
            return listed
        raise AssertionError("the store kept changing")

    # The test: one replica's life, phase by phase.

    def test_events_rebuild_the_store(self):
        admin = KvEventSubscriber(self.channel(), ADMIN).start(0)
        user = KvEventSubscriber(self.channel(), ALICE).start(0)
        self.assert_in_sync(admin)

        # Named prefixes: a shared one (3 blocks) and alice's (2 blocks and 8 tokens more).
        self.register("common", ids(1, 48), ADMIN, shared=True)
        self.register("sys", ids(2, 40), ALICE)
        listed = self.assert_in_sync(admin)
        self.assertEqual({(e.space, e.name) for e in listed.entries if e.named},
                         {("", "common"), ("alice", "alice/sys")})
        self.assertEqual(len(admin.index.blocks), 5)
        self.assert_in_sync(user, shared_only=True)
        self.assertEqual(len(user.index.blocks), 3)

        # Automatic prefixes from the vLLM protocol's Generate; the same prompt again reuses
        # its cached blocks.
        chunks, complete = self.generate(ids(3, 64), ALICE, max_tokens=3)
        self.assertEqual(sum(len(c.token_ids) for c in chunks), 3)
        self.assertEqual(len(complete.output_ids), 3)
        self.assertEqual((complete.finish_reason, complete.prompt_tokens), ("length", 64))
        _, again = self.generate(ids(3, 64), ALICE, stream=False)
        self.assertGreaterEqual(again.cached_tokens, 48)
        self.generate(ids(1, 48) + ids(4, 20), ADMIN)  # extends the shared prefix
        listed = self.assert_in_sync(admin)
        self.assertTrue(any(not e.named for e in listed.entries))
        self.assert_in_sync(user, shared_only=True)

        # Evictions: more automatic prompts than the prefix cache holds.
        for seed in range(10, 16):
            self.generate(ids(seed, 64), ALICE)
        self.assert_in_sync(admin)
        self.assertGreater(self.server.metrics()["kvserve_prefix_cache_evictions_total"], 0)

        # A deletion.
        self.delete("sys", ALICE)
        listed = self.assert_in_sync(admin)
        self.assertNotIn("alice/sys", {e.name for e in listed.entries})

        # A reconnect replays from the last number it applied: nothing missed, nothing again.
        admin.stop()
        last = admin.index.last_sequence
        self.register("r1", ids(20, 32), ADMIN, shared=True)
        admin = KvEventSubscriber(self.channel(), ADMIN, admin.index).start(last)
        listed = self.assert_in_sync(admin)
        self.assertIsNone(admin.gap)
        self.assertEqual(admin.first_sequence, last + 1)

        # Past the replay buffer: reported (metadata, "cleared" first), and the state resent.
        admin.stop()
        last = admin.index.last_sequence
        for seed in range(30, 30 + BUFFER + 2):
            self.generate(ids(seed, 32), ALICE)
        admin = KvEventSubscriber(self.channel(), ADMIN, admin.index).start(last)
        self.assert_in_sync(admin)
        self.assertIsNotNone(admin.gap)
        self.assertEqual(admin.gap.split("-")[0], str(last + 1))
        self.assertEqual(admin.first_events[0], "cleared")

        # A user may not list the store.
        stub = cache_pb2_grpc.CacheAdminStub(self.channel())
        with self.assertRaises(grpc.RpcError) as denied:
            stub.ListCacheEntries(cache_pb2.ListCacheEntriesRequest(), metadata=ALICE,
                                  timeout=TIMEOUT_S)
        self.assertEqual(denied.exception.code(), grpc.StatusCode.PERMISSION_DENIED)

        # A restart (named prefixes come back from --state-dir, automatic ones do not): the old
        # number is an earlier process's, so the subscriber is resynced, "cleared" first.
        user.stop()
        admin.stop()
        last = admin.index.last_sequence
        self.server.restart()
        admin = KvEventSubscriber(self.channel(), ADMIN, admin.index).start(last)
        listed = self.assert_in_sync(admin)
        self.assertIsNotNone(admin.gap)
        self.assertEqual(admin.first_events[0], "cleared")
        self.assertEqual({e.name for e in listed.entries}, {"common", "r1"})
        admin.stop()

    def test_loads_agree_with_metrics(self):
        engine = self.engine()
        health = engine.HealthCheck(vpb.HealthCheckRequest(), metadata=ALICE, timeout=TIMEOUT_S)
        self.assertTrue(health.healthy)
        info = engine.GetModelInfo(vpb.GetModelInfoRequest(), metadata=ALICE, timeout=TIMEOUT_S)
        self.assertEqual(info.vocab_size, 512)
        self.generate(ids(50, 40), ALICE)

        # A long generation runs while loads and metrics are read.
        done = threading.Event()
        thread = threading.Thread(
            target=lambda: (self.generate(ids(51, 40), ALICE, max_tokens=400), done.set()))
        thread.start()
        try:
            deadline = time.monotonic() + TIMEOUT_S
            while True:
                loads = engine.GetLoads(vpb.GetLoadsRequest(), metadata=ALICE, timeout=TIMEOUT_S)
                metrics = self.server.metrics()
                load = loads.loads[0]
                running = [v for k, v in metrics.items()
                           if k.startswith("vllm:num_requests_running{")]
                if load.num_running_reqs == 1 and running == [1.0]:
                    break
                self.assertLess(time.monotonic(), deadline, (load, running))
        finally:
            thread.join(TIMEOUT_S)
        self.assertTrue(done.is_set())

        # Idle: every number the same in both.
        loads = engine.GetLoads(vpb.GetLoadsRequest(), metadata=ALICE, timeout=TIMEOUT_S)
        metrics = self.server.metrics()
        load = loads.loads[0]
        label = '{model_name="' + info.served_model_name + '"}'
        self.assertEqual((loads.dp_rank_count, len(loads.loads)), (1, 1))
        self.assertEqual(metrics["vllm:num_requests_waiting" + label], load.num_waiting_reqs)
        self.assertEqual(metrics["vllm:num_requests_running" + label], load.num_running_reqs)
        self.assertGreater(load.token_usage, 0)
        self.assertAlmostEqual(metrics["vllm:kv_cache_usage_perc" + label], load.token_usage)
        self.assertAlmostEqual(metrics["vllm:gpu_cache_usage_perc" + label], load.token_usage)
        self.assertEqual(metrics["vllm:prefix_cache_queries_total" + label],
                         metrics["kvserve_prompt_tokens_total"])
        self.assertEqual(metrics["vllm:prefix_cache_hits_total" + label],
                         metrics["kvserve_prompt_tokens_cached_total"])
        self.assertGreater(metrics["vllm:prefix_cache_queries_total" + label], 0)

    def test_refusals_name_the_protocol_field(self):
        request = vpb.GenerateRequest(tokenized=vpb.TokenizedInput(input_ids=[10, 11]),
                                      sampling_params=vpb.SamplingParams(n=2, max_tokens=1))
        with self.assertRaises(grpc.RpcError) as refused:
            list(self.engine().Generate(request, metadata=ALICE, timeout=TIMEOUT_S))
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("sampling_params.n", refused.exception.details())
        request = vpb.GenerateRequest(tokenized=vpb.TokenizedInput(input_ids=[10, 600]))
        with self.assertRaises(grpc.RpcError) as refused:
            list(self.engine().Generate(request, metadata=ALICE, timeout=TIMEOUT_S))
        self.assertIn("tokenized.input_ids", refused.exception.details())
        with self.assertRaises(grpc.RpcError) as unauthenticated:
            self.engine().GetLoads(vpb.GetLoadsRequest(), timeout=TIMEOUT_S)
        self.assertEqual(unauthenticated.exception.code(), grpc.StatusCode.UNAUTHENTICATED)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    PATHS["kvserve"] = args.kvserve
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
