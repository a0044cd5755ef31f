"""Prefix snapshot tiers end to end: a prompt evicted from the device store comes back from the
host tier and from the disk tier with the tokens of a cold run, and after a restart the
automatic prefixes kept on disk are found again (a corrupt file beside them is refused with a
log line, not a crash); the tier metrics count each of these; a named prefix's retention class
is kept and a bad one refused naming the field; a named prefix demoted to disk is listed there
and still served by its name, and deleting it there removes it.

usage: scripts/python.sh tests/e2e/test_prefix_tiers.py \\
         --kvserve build/server/kvserve
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
import unittest

import grpc

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    prefix_pb2,
    prefix_pb2_grpc,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)

KVSERVE = None
STARTUP_TIMEOUT_S = 120 * TIME_SCALE
CALL_TIMEOUT_S = 60 * TIME_SCALE
PROMPT_TOKENS = 40


class PrefixTiersTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvserve-tiers-")
        self.server = None

    def tearDown(self):
        if self.server is not None:
            self.server.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, flags):
        self.server = KvserveProcess(KVSERVE, ["--threads", "1"] + flags,
                                     log_path=os.path.join(self.dir, "kvserve.log"),
                                     start_timeout_s=STARTUP_TIMEOUT_S)
        self.stub = gen_grpc.GenerationStub(self.server.channel())
        return self.stub.GetModelInfo(gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S)

    def generate(self, ids):
        response = self.stub.Generate(
            gen.GenerateRequest(token_ids=gen.TokenIds(ids=ids),
                                sampling=gen.SamplingParams(max_new_tokens=4)),
            timeout=CALL_TIMEOUT_S)
        return list(response.token_ids), response.usage.cached_tokens

    def await_metrics(self, expected):
        """The metrics page once every series in `expected` has at least its value (they are
        published after each engine step); fails with the last values otherwise."""
        deadline = time.monotonic() + 10 * TIME_SCALE
        while True:
            values = self.server.metrics()
            if all(values.get(k, -1) >= v for k, v in expected.items()):
                return values
            if time.monotonic() > deadline:
                self.fail("metrics %s; expected at least %s" %
                          ({k: values.get(k) for k in expected}, expected))
            time.sleep(0.05)

    def prompt(self, info, seed):
        special = set(info.eos_token_ids)
        if info.HasField("bos_token_id"):
            special.add(info.bos_token_id)
        ids, candidate = [], 5 + seed * 13
        while len(ids) < PROMPT_TOKENS:
            candidate = (candidate * 37 + 17) % info.vocab_size
            if candidate not in special:
                ids.append(candidate)
        return ids

    def test_host_disk_and_restart_hits_give_cold_tokens(self):
        # The snapshot of one prompt, from the model's shape (float32).
        info = self.start([])
        snapshot_bytes = (PROMPT_TOKENS * info.num_layers * 2 * info.num_kv_heads *
                          info.head_dim * 4)
        self.server.stop()
        disk_dir = os.path.join(self.dir, "prefixes")
        # The device store and the host tier each hold one prompt; the disk holds many.
        flags = ["--prefix-cache-bytes", str(snapshot_bytes + snapshot_bytes // 2),
                 "--prefix-host-bytes", str(snapshot_bytes + snapshot_bytes // 2),
                 "--prefix-disk-bytes", str(20 * snapshot_bytes),
                 "--prefix-disk-dir", disk_dir, "--auto-prefix-min-tokens", "8",
                 "--metrics-listen", "127.0.0.1:0"]
        info = self.start(flags)
        a, b, c = (self.prompt(info, seed) for seed in (1, 2, 3))
        cold = {}
        for name, ids in (("a", a), ("b", b), ("c", c)):
            tokens, cached = self.generate(ids)
            self.assertEqual(cached, 0, name)
            cold[name] = tokens
        # c is on the device, b on the host, a on disk.
        tokens, cached = self.generate(c)
        self.assertEqual((tokens, cached), (cold["c"], PROMPT_TOKENS - 1), "device hit")
        tokens, cached = self.generate(b)
        self.assertEqual((tokens, cached), (cold["b"], PROMPT_TOKENS - 1), "host hit")
        tokens, cached = self.generate(a)
        self.assertEqual((tokens, cached), (cold["a"], PROMPT_TOKENS - 1), "disk hit")
        # One hit per tier; a, b, c each left the device once or more, and one host entry moved
        # on to disk.
        values = self.await_metrics({
            'kvserve_prefix_tier_hits_total{tier="device"}': 1,
            'kvserve_prefix_tier_hits_total{tier="host"}': 1,
            'kvserve_prefix_tier_hits_total{tier="disk"}': 1,
            'kvserve_prefix_tier_demotions_total{from="device"}': 2,
            'kvserve_prefix_tier_demotions_total{from="host"}': 1,
            'kvserve_prefix_tier_entries{tier="device"}': 1,
            'kvserve_prefix_tier_bytes{tier="host"}': snapshot_bytes,
        })
        self.assertEqual(values['kvserve_prefix_tier_hits_total{tier="host"}'], 1)
        self.assertEqual(values['kvserve_prefix_tier_hits_total{tier="disk"}'], 1)
        self.assertEqual(values['kvserve_prefix_tier_disk_failures_total{op="load"}'], 0)
        self.assertEqual(values["kvserve_prefix_tier_drops_total"], 0)
        # A graceful stop keeps every automatic prefix on disk; a corrupt file joins them.
        self.server.stop()
        with open(os.path.join(disk_dir, "0123456789abcdef.kvsnap"), "wb") as f:
            f.write(b"KVSNAP1\n" + b"\x00" * 40)
        self.start(flags)
        for name, ids in (("a", a), ("b", b), ("c", c)):
            tokens, cached = self.generate(ids)
            self.assertEqual((tokens, cached), (cold[name], PROMPT_TOKENS - 1),
                             "%s after the restart" % name)
        self.assertFalse(os.path.exists(os.path.join(disk_dir, "0123456789abcdef.kvsnap")))
        self.await_metrics({'kvserve_prefix_tier_disk_failures_total{op="load"}': 1,
                            'kvserve_prefix_tier_entries{tier="disk"}': 3})
        self.server.stop()
        with open(os.path.join(self.dir, "kvserve.log"), encoding="utf-8") as log:
            self.assertIn("refusing prefix snapshot file", log.read())

    def test_a_named_prefixs_retention_class_is_kept_and_a_bad_one_refused(self):
        info = self.start([])
        prefixes = prefix_pb2_grpc.PrefixCacheStub(self.server.channel())
        ids = self.prompt(info, 4)
        registered = prefixes.RegisterPrefix(
            prefix_pb2.RegisterPrefixRequest(name="low", token_ids=gen.TokenIds(ids=ids),
                                             options=prefix_pb2.PrefixOptions(retention="low")),
            timeout=CALL_TIMEOUT_S)
        self.assertEqual(registered.options.retention, "low")
        self.assertFalse(registered.options.pinned)
        with self.assertRaises(grpc.RpcError) as refused:
            prefixes.RegisterPrefix(
                prefix_pb2.RegisterPrefixRequest(
                    name="bad", token_ids=gen.TokenIds(ids=ids),
                    options=prefix_pb2.PrefixOptions(retention="forever")),
                timeout=CALL_TIMEOUT_S)
        self.assertEqual(refused.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("options.retention", refused.exception.details())
        self.server.stop()

    def test_a_demoted_named_prefix_is_still_served_by_its_name(self):
        info = self.start([])
        snapshot_bytes = (PROMPT_TOKENS * info.num_layers * 2 * info.num_kv_heads *
                          info.head_dim * 4)
        self.server.stop()
        disk_dir = os.path.join(self.dir, "prefixes")
        # The device store holds one prompt, the host tier none: what leaves goes to disk.
        info = self.start(["--prefix-cache-bytes", str(snapshot_bytes + snapshot_bytes // 2),
                           "--prefix-disk-bytes", str(20 * snapshot_bytes),
                           "--prefix-disk-dir", disk_dir, "--auto-prefix-min-tokens", "8"])
        prefixes = prefix_pb2_grpc.PrefixCacheStub(self.server.channel())
        system = self.prompt(info, 5)
        prefixes.RegisterPrefix(
            prefix_pb2.RegisterPrefixRequest(name="sys", token_ids=gen.TokenIds(ids=system),
                                             options=prefix_pb2.PrefixOptions(retention="low")),
            timeout=CALL_TIMEOUT_S)
        own = self.prompt(info, 6)[:5]

        def by_name():
            response = self.stub.Generate(
                gen.GenerateRequest(prefix="sys", token_ids=gen.TokenIds(ids=own),
                                    sampling=gen.SamplingParams(max_new_tokens=4)),
                timeout=CALL_TIMEOUT_S)
            return list(response.token_ids), response.usage.cached_tokens

        on_device = by_name()
        self.assertEqual(on_device[1], PROMPT_TOKENS)
        self.assertEqual(prefixes.GetPrefix(prefix_pb2.GetPrefixRequest(name="sys"),
                                            timeout=CALL_TIMEOUT_S).tier, "device")
        # Another prompt takes the store's room: "sys" (class low) leaves for disk, still listed.
        self.generate(self.prompt(info, 7))
        deadline = time.monotonic() + 10 * TIME_SCALE
        while True:
            listed = prefixes.GetPrefix(prefix_pb2.GetPrefixRequest(name="sys"),
                                        timeout=CALL_TIMEOUT_S)
            if listed.tier == "disk" or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(listed.tier, "disk")
        self.assertEqual(listed.options.retention, "low")
        self.assertEqual(listed.num_tokens, PROMPT_TOKENS)
        # A request naming it brings it back: the same tokens, the prefix reused.
        self.assertEqual(by_name(), on_device)
        self.assertEqual(prefixes.GetPrefix(prefix_pb2.GetPrefixRequest(name="sys"),
                                            timeout=CALL_TIMEOUT_S).tier, "device")
        # Deleting it while it is on disk removes it there too.
        self.generate(self.prompt(info, 8))
        deadline = time.monotonic() + 10 * TIME_SCALE
        while prefixes.GetPrefix(prefix_pb2.GetPrefixRequest(name="sys"),
                                 timeout=CALL_TIMEOUT_S).tier != "disk":
            self.assertLess(time.monotonic(), deadline, "sys never left the device again")
            time.sleep(0.05)
        prefixes.DeletePrefix(prefix_pb2.DeletePrefixRequest(name="sys"), timeout=CALL_TIMEOUT_S)
        with self.assertRaises(grpc.RpcError) as gone:
            by_name()
        self.assertEqual(gone.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.server.stop()


def main():
    global KVSERVE
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    KVSERVE = args.kvserve
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
