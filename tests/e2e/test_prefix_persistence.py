"""kill -9 in the middle of a prefix registration: the state journal keeps every completed
registration in whole lines and every one of them is back after a restart.

usage: scripts/python.sh tests/e2e/test_prefix_persistence.py \\
         --kvserve build/server/kvserve
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import unittest

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2,
    grpc,
    prefix_pb2,
    prefix_pb2_grpc,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)

KVSERVE = None
STARTUP_TIMEOUT_S = 120 * TIME_SCALE


class Server(KvserveProcess):
    """A kvserve process on 127.0.0.1:0 with a state directory, SERVING, with a PrefixCache
    stub (a new one after each start)."""

    def __init__(self, state_dir):
        super().__init__(KVSERVE, ["--threads", "1", "--state-dir", state_dir],
                         start_timeout_s=STARTUP_TIMEOUT_S)

    def start(self, wait=True):
        super().start(wait)
        self.prefixes = prefix_pb2_grpc.PrefixCacheStub(self.channel())
        return self

    def register(self, name, ids, timeout=60):
        return self.prefixes.RegisterPrefix(
            prefix_pb2.RegisterPrefixRequest(name=name, token_ids=generation_pb2.TokenIds(ids=ids)),
            timeout=timeout)


class PrefixPersistenceTest(unittest.TestCase):
    def setUp(self):
        self.state_dir = tempfile.mkdtemp(prefix="kvserve-state-")
        self.server = None

    def tearDown(self):
        if self.server is not None:
            self.server.kill()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def test_kill_during_registration_keeps_every_completed_one(self):
        server = self.server = Server(self.state_dir)
        completed = {}
        for i in range(3):
            ids = [(7 * i + 3 * t + 1) % 250 for t in range(20 + i)]
            prefix = server.register("done-%d" % i, ids)
            completed[prefix.name] = prefix.num_tokens
        # A long registration, killed while the server prefills it.
        long_ids = [(t * 13) % 250 for t in range(3000)]
        errors = []

        def register_long():
            try:
                server.register("in-flight", long_ids)
            except grpc.RpcError as error:
                errors.append(error.code())

        thread = threading.Thread(target=register_long)
        thread.start()
        time.sleep(0.2)
        server.kill()
        thread.join(timeout=30)

        # The journal holds every completed registration in whole lines; only a last line
        # cut by the kill may be torn (the restart skips it).
        state_file = os.path.join(self.state_dir, "prefixes.journal")
        with open(state_file) as f:
            lines = f.read().split("\n")
        records = []
        for i, line in enumerate(lines):
            if not line:
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                self.assertEqual(i, len(lines) - 1, "only the last line may be torn")
        # The journal names prefixes with their namespace: the caller's tenant ("default"
        # without API keys) before a slash.
        names = [r["request"]["name"] for r in records if r.get("op") == "put"]
        for name in completed:
            self.assertIn("default/" + name, names)

        server.restart()  # on the same --state-dir
        listed = server.prefixes.ListPrefixes(prefix_pb2.ListPrefixesRequest(), timeout=10)
        back = {p.name: p.num_tokens for p in listed.prefixes}
        for name, num_tokens in completed.items():
            self.assertEqual(back.get(name), num_tokens)


def main():
    global KVSERVE
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    KVSERVE = args.kvserve
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
