#!/usr/bin/python3
"""`make serve`'s demo prints text: scripts/serve.sh is started as `make serve` starts it (on
127.0.0.1 port 0 instead of 50051, and the HTTP API on port 0 instead of 8000), and every kvctl
generate, stream and health command it prints, and its curl command to the OpenAI-compatible
HTTP API, is run against it. Each generation must print text with letters in it: the embedded
model samples ids from its whole vocabulary, and ids its tokenizer lacks would decode to
nothing (issue 27: `generate --prompt 'Hello'` printed an empty line). Without arguments
serve.sh turns the HTTP API on at 127.0.0.1:8000 (issue 46: the README's first curl works
after `make serve`), checked with a stand-in kvserve that prints its arguments.

Needs ctest's PYTHONPATH (scripts/python.sh sets it); run:
  test_serve_demo.py --serve scripts/serve.sh --build-dir build
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
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
                                             "--http-listen", "127.0.0.1:0", "--threads", "1"],
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
            stderr = server.log_text()
            http_port = re.search(r"OpenAI-compatible HTTP API on 127\.0\.0\.1:0 \(port (\d+)\)",
                                  stderr)
            self.assertIsNotNone(http_port, stderr[-4000:])
            curls = [shlex.split(line) for line in stderr.splitlines()
                     if line.startswith("  curl ")]
            self.assertEqual(len(curls), 1, stderr[:2000])
            self.check_curl(curls[0], http_port.group(1))
            server.terminate()
            self.assertEqual(server.wait(timeout_s=STARTUP_TIMEOUT_S), 0)
        finally:
            server.kill()

    def test_http_api_on_by_default(self):
        with tempfile.TemporaryDirectory() as build:
            os.makedirs(os.path.join(build, "server"))
            fake = os.path.join(build, "server", "kvserve")
            with open(fake, "w", encoding="utf-8") as f:
                f.write('#!/bin/sh\necho "$@"\n')
            os.chmod(fake, 0o755)
            for extra, http in (([], "127.0.0.1:8000"),
                                (["--http-listen", "127.0.0.1:9000"], "127.0.0.1:9000"),
                                (["--http-listen=127.0.0.1:9001"], "127.0.0.1:9001")):
                with self.subTest(args=extra):
                    result = subprocess.run([ARGS.serve, build, *extra], stdin=subprocess.DEVNULL,
                                            capture_output=True, text=True,
                                            timeout=CALL_TIMEOUT_S, check=True)
                    # kvserve takes a flag's last value: the caller's --http-listen wins.
                    self.assertEqual(result.stdout.split(),
                                     ["--http-listen", "127.0.0.1:8000", *extra])
                    self.assertIn(f"  curl -s http://{http}/v1/chat/completions ",
                                  result.stderr)

    def check_curl(self, args, http_port):
        self.assertEqual(args[:2], ["curl", "-s"])
        url = args[2]
        self.assertTrue(url.startswith("http://127.0.0.1:0/v1/"), url)
        args = args[:2] + [url.replace(":0/", f":{http_port}/", 1)] + args[3:]
        result = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True,
                                timeout=CALL_TIMEOUT_S, check=False)
        self.assertEqual(result.returncode, 0, result.stderr.decode("utf-8", "replace"))
        body = json.loads(result.stdout)
        text = body["choices"][0]["message"]["content"]
        self.assertTrue(any(c.isalpha() for c in text), f"curl printed no text: {body!r}")

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
