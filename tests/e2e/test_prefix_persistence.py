"""kill -9 in the middle of a prefix registration: the state journal keeps every completed
registration in whole lines and every one of them is back after a restart.

usage: PYTHONPATH=build/proto/python /usr/bin/python3 tests/e2e/test_prefix_persistence.py \\
         --kvserve build/server/kvserve
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from kvserve.v1 import generation_pb2, prefix_pb2, prefix_pb2_grpc

KVSERVE = None
# Sanitizer builds run several times slower: their ctest sets KVSERVE_TEST_TIME_SCALE.
TIME_SCALE = float(os.environ.get("KVSERVE_TEST_TIME_SCALE", "1"))
STARTUP_TIMEOUT_S = 120 * TIME_SCALE


class Server:
    """A kvserve process on 127.0.0.1:0 with a state directory."""

    def __init__(self, state_dir):
        self.process = subprocess.Popen(
            [KVSERVE, "--listen", "127.0.0.1:0", "--threads", "1", "--state-dir", state_dir],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        match = re.match(r"^kvserve listening on (127\.0\.0\.1:\d+)$", line.strip())
        if not match:
            self.process.kill()
            raise RuntimeError("unexpected first line: %r" % line)
        self.target = match.group(1)
        self.channel = grpc.insecure_channel(self.target)
        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.time() + STARTUP_TIMEOUT_S
        while True:
            try:
                status = health.Check(health_pb2.HealthCheckRequest(), timeout=2).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError:
                pass
            if time.time() > deadline or self.process.poll() is not None:
                raise RuntimeError("kvserve did not become SERVING")
            time.sleep(0.05)
        self.prefixes = prefix_pb2_grpc.PrefixCacheStub(self.channel)

    def register(self, name, ids, timeout=60):
        return self.prefixes.RegisterPrefix(
            prefix_pb2.RegisterPrefixRequest(name=name, token_ids=generation_pb2.TokenIds(ids=ids)),
            timeout=timeout)

    def kill(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.channel.close()


class PrefixPersistenceTest(unittest.TestCase):
    def setUp(self):
        self.state_dir = tempfile.mkdtemp(prefix="kvserve-state-")
        self.servers = []

    def tearDown(self):
        for server in self.servers:
            server.kill()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def start(self):
        server = Server(self.state_dir)
        self.servers.append(server)
        return server

    def test_kill_during_registration_keeps_every_completed_one(self):
        server = self.start()
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

        restarted = self.start()
        listed = restarted.prefixes.ListPrefixes(prefix_pb2.ListPrefixesRequest(), timeout=10)
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
