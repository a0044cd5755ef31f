#!/usr/bin/python3
"""End-to-end test: `--device cuda:0` on a build without CUDA is refused before anything starts.

Runs kvserve (and kvserve-generate) with --device cuda:0 and checks: exit status 2, exactly one
line on stderr that names the flag and the build ("built without CUDA (LibTorch X, CPU only)"),
and nothing on stdout (kvserve prints "kvserve listening on ..." as soon as it has bound, so an
empty stdout means it never listened). Registered only for builds without CUDA; run:
  test_device_refusal.py --kvserve build/server/kvserve --generate build/model/kvserve-generate
"""
import argparse
import re
import socket
import sys
import unittest

from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    free_port,
    refused_start,
)

PATHS = {}
REFUSAL = re.compile(r"^(kvserve|kvserve-generate): --device cuda:0: this binary was built "
                     r"without CUDA \(LibTorch \d+\.\d+\.\d+, CPU only\); use --device cpu or an "
                     r"image built with CUDA$")


class DeviceRefusalTest(unittest.TestCase):

    def check_refused(self, argv, program):
        proc = refused_start(argv[0], argv[1:], timeout_s=60)
        stderr = proc.stderr
        self.assertEqual(proc.returncode, 2, stderr)
        self.assertEqual(proc.stdout, "", "printed on stdout, so it got as far as listening")
        lines = stderr.splitlines()
        self.assertEqual(len(lines), 1, stderr)
        self.assertRegex(lines[0], REFUSAL)
        self.assertTrue(lines[0].startswith(program + ": "), lines[0])

    def test_kvserve_refuses_before_listening(self):
        port, metrics_port = free_port(), free_port()
        self.check_refused([PATHS["kvserve"], "--device", "cuda:0", "--listen",
                            f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{metrics_port}"],
                           "kvserve")
        # Nothing is left holding the ports either.
        for p in (port, metrics_port):
            with socket.socket() as s:
                s.bind(("127.0.0.1", p))

    def test_generate_refuses_before_loading(self):
        self.check_refused([PATHS["generate"], "--device", "cuda:0", "--max-new-tokens", "1"],
                           "kvserve-generate")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--generate", required=True)
    args, rest = parser.parse_known_args()
    PATHS["kvserve"] = args.kvserve
    PATHS["generate"] = args.generate
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
