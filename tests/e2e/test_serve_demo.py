#!/usr/bin/python3
"""`make serve`'s demo prints text: scripts/serve.sh is started as `make serve` starts it (on
127.0.0.1 port 0 instead of 50051), and every kvctl generate, stream and health command it
prints is run against it. Each generation must print text with letters in it: the embedded
model samples ids from its whole vocabulary, and ids its tokenizer lacks would decode to
nothing (issue 27: `generate --prompt 'Hello'` printed an empty line).

Needs ctest's PYTHONPATH (scripts/python.sh sets it); run:
  test_serve_demo.py --serve scripts/serve.sh --build-dir build
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import unittest

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    grpc,
    health_pb2,
    health_pb2_grpc,
)
from kvserve_launch import KvserveProcess  # noqa: E402  pylint: disable=wrong-import-position

ARGS = None
TIME_SCALE = float(os.environ.get("KVSERVE_TEST_TIME_SCALE", "1"))
STARTUP_TIMEOUT_S = 60 * TIME_SCALE
CALL_TIMEOUT_S = 120 * TIME_SCALE


class ServeDemoTest(unittest.TestCase):

    def test_printed_commands_show_text(self):
        # serve.sh is the program (it execs kvserve), started as `make serve` starts it:
        # BUILD_DIR, then kvserve's flags (listen=None: --listen is among them).
        server = KvserveProcess(ARGS.serve, [ARGS.build_dir, "--listen", "127.0.0.1:0",
                                             "--threads", "1"],
                                listen=None, wait=False, name="serve.sh",
                                start_timeout_s=STARTUP_TIMEOUT_S)
        try:
            port = server.port
            stderr = server.log_text()
            self.wait_until_serving(server.target)
            # serve.sh prints its hint before it starts kvserve, so it is all there now.
            kvctl = os.path.join(ARGS.build_dir, "client", "kvctl")
            commands = [shlex.split(line)[1:] for line in stderr.splitlines()
                        if line.startswith("  " + kvctl + " ")]
            names = [c[0] for c in commands]
            self.assertIn("generate", names, stderr[:2000])
            self.assertIn("stream", names, stderr[:2000])
            for args in commands:
                if args[0] not in ("generate", "stream", "health"):
                    continue  # bench prints numbers, not text
                with self.subTest(command=" ".join(args)):
                    self.check_command(kvctl, args, port)
            server.terminate()
            self.assertEqual(server.wait(timeout_s=STARTUP_TIMEOUT_S), 0)
        finally:
            server.kill()

    def wait_until_serving(self, target):
        # Health is NOT_SERVING while the model warms up: Watch streams each change.
        with grpc.insecure_channel(target) as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(),
                                                              timeout=STARTUP_TIMEOUT_S)
            for answer in watch:
                if answer.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            watch.cancel()

    def check_command(self, kvctl, args, port):
        result = subprocess.run([kvctl, *args, "--target", f"127.0.0.1:{port}"],
                                stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=CALL_TIMEOUT_S, check=False)
        stdout = result.stdout.decode("utf-8")  # kvserve sends valid UTF-8 only
        self.assertEqual(result.returncode, 0, result.stderr.decode("utf-8", "replace"))
        if args[0] == "health":
            self.assertEqual(stdout, "SERVING\n")
            return
        if "--output" in args and args[args.index("--output") + 1] == "json":
            text = "".join(json.loads(line).get("text", "") for line in stdout.splitlines())
        else:
            text = stdout
        self.assertTrue(any(c.isalpha() for c in text),
                        f"kvctl {' '.join(args)} printed no text: {stdout!r}")


def main():
    global ARGS  # pylint: disable=global-statement
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", required=True, help="scripts/serve.sh")
    parser.add_argument("--build-dir", required=True, help="the build folder serve.sh runs")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
