#!/usr/bin/python3
"""End-to-end: kvctl's command line and the Python examples' TLS flags against real kvserve
processes (embedded tiny model, 127.0.0.1, port 0).

- kvctl --version names the version and the commit it was built from, and no LibTorch;
- a flag where a value belongs (`--prompt --ignore-eos`) is refused, `--prompt=--ignore-eos`
  is that text; each error names its help once; --pinned is a switch;
- --target without a port, or as a URL, is refused before any connection;
- --prompt-file - reads the prompt from stdin, and a prompt over the 128 KiB one argument may
  hold reaches the server;
- a failed connection says what most likely happened: a plaintext client on a TLS port, a TLS
  client on a plaintext one, a missing client certificate, one the server does not trust, a
  server certificate of another CA; from kvctl and from the Python examples, whose session and
  beams examples take the --tls-* flags too.

The certificates are tests/client/testdata's (no openssl needed). Needs
ctest's PYTHONPATH (scripts/python.sh sets it); run:
  test_kvctl_cli.py --kvserve build/server/kvserve --kvctl build/client/kvctl
"""
import argparse
import json
import os
import re
import subprocess
import sys
import unittest

from kvserve_launch import KvserveProcess, Tls

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CLIENT_DIR = os.path.join(ROOT, "client", "python")
CERTS = os.path.join(ROOT, "tests", "client", "testdata")

PATHS = {}
TIME_SCALE = float(os.environ.get("KVSERVE_TEST_TIME_SCALE", "1"))
STARTUP_TIMEOUT_S = 60 * TIME_SCALE
COMMAND_TIMEOUT_S = 120 * TIME_SCALE
# A failing handshake ends a call at once; this only bounds a hang.
REFUSED_TIMEOUT_MS = int(20_000 * TIME_SCALE)

HINT_TLS = "most likely the server requires TLS and this client spoke plaintext"
HINT_NOT_TLS = "the server does not serve TLS on this port (it answered in plaintext)"
HINT_CLIENT_CERT = "most likely the server requires a client certificate (mutual TLS)"
HINT_UNTRUSTED = "most likely the server does not trust the client certificate"
HINT_SERVER_CA = "the server's certificate is not signed by a CA of --tls-ca-file"


def cert(name):
    return os.path.join(CERTS, name)


def run(*args, stdin=b""):
    """Runs a command: (exit code, stdout, stderr), both decoded."""
    proc = subprocess.run(list(args), input=stdin, capture_output=True,
                          timeout=COMMAND_TIMEOUT_S, check=False)
    return (proc.returncode, proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"))


def kvctl(*args, stdin=b""):
    return run(PATHS["kvctl"], *args, stdin=stdin)


def example(name, *args):
    return run(sys.executable, os.path.join(CLIENT_DIR, name), *args)


class Server:
    """kvserve on 127.0.0.1:0 with `flags` and `tls` (a kvserve_launch.Tls: its server flags
    are added, and the launcher checks health over TLS with the test CA and client
    certificate), SERVING before the constructor returns."""

    def __init__(self, *flags, tls=None):
        self.process = KvserveProcess(PATHS["kvserve"], ["--threads", "1", *flags], tls=tls,
                                      start_timeout_s=STARTUP_TIMEOUT_S)
        self.target = self.process.target

    def kvctl(self, *args, stdin=b""):
        """kvctl --target this server ARGS: (exit code, stdout, stderr)."""
        return kvctl("--target", self.target, "--timeout-ms", str(REFUSED_TIMEOUT_MS), *args,
                     stdin=stdin)

    def stderr(self):
        return self.process.log_text()

    def stop(self):
        return self.process.stop()


def testdata_tls(client_ca=None):
    """The server certificate of tests/client/testdata, verified with its CA, the launcher's
    calls presenting its client certificate; `client_ca` ("ca.crt") requires client
    certificates that CA signs (mutual TLS)."""
    return Tls(cert_file=cert("server.crt"), key_file=cert("server.key"), ca_file=cert("ca.crt"),
               client_ca_file=cert(client_ca) if client_ca else None,
               client_cert_file=cert("client.crt"), client_key_file=cert("client.key"))


def ca_flags(ca="ca.crt"):
    return ["--tls-ca-file", cert(ca)]


def client_cert_flags(name="client"):
    return ["--tls-cert-file", cert(name + ".crt"), "--tls-key-file", cert(name + ".key")]


class ServerTestCase(unittest.TestCase):
    """One server, started with `flags` and `tls`, for every test of the class."""

    flags = ()
    tls = None

    @classmethod
    def setUpClass(cls):
        cls.server = Server(*cls.flags, tls=cls.tls)

    @classmethod
    def tearDownClass(cls):
        code = cls.server.stop()
        if code != 0:
            raise AssertionError(f"kvserve exited with {code}\n{cls.server.stderr()}")

    def assert_refused_with(self, result, *texts, code=1):
        exit_code, stdout, stderr = result
        self.assertEqual(exit_code, code, stdout + stderr)
        for text in texts:
            self.assertIn(text, stderr)


class CommandLineTest(ServerTestCase):
    """kvctl's flags against a plaintext server."""

    def test_version_names_the_build(self):
        code, stdout, stderr = kvctl("--version")
        self.assertEqual(code, 0, stderr)
        lines = stdout.splitlines()
        self.assertEqual(len(lines), 2, stdout)
        match = re.fullmatch(r"kvctl (\d+\.\d+\.\d+) \(git ([0-9a-f]{7,40}(-dirty)?|unknown)\)",
                             lines[0])
        self.assertIsNotNone(match, lines[0])
        self.assertTrue(lines[1].startswith("client: no LibTorch, no CUDA (gRPC "), lines[1])
        # Built from this checkout (the build comes before the tests): its commit.
        head = subprocess.run(["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True,
                              text=True, check=False)
        if head.returncode == 0:
            self.assertTrue(head.stdout.startswith(match.group(2).removesuffix("-dirty")),
                            f"{lines[0]} vs HEAD {head.stdout}")
        # Anywhere before the command; after it, it is no flag of the command.
        self.assertEqual(kvctl("--target", self.server.target, "--version")[1], stdout)

    def test_a_flag_where_a_value_belongs_is_refused(self):
        self.assert_refused_with(
            self.server.kvctl("generate", "--prompt", "--ignore-eos", "--max-new-tokens", "2"),
            "--prompt needs a value, but the next argument --ignore-eos is a flag "
            "(write --prompt=--ignore-eos to give it as the value)", code=2)
        self.assert_refused_with(kvctl("--target", "--output", "json", "health"),
                                 "--target needs a value, but the next argument --output is a "
                                 "flag", code=2)
        code, stdout, stderr = self.server.kvctl("generate", "--prompt=--ignore-eos",
                                                 "--max-new-tokens", "2", "--output", "json")
        self.assertEqual(code, 0, stderr)
        self.assertIn('"promptTokens"', stdout)

    def test_each_error_names_its_help_once(self):
        for args in (["generate", "--bogus"], ["generate", "stray"], ["prefix", "get", "--x"],
                     ["generate", "--max-new-tokens"]):
            code, _, stderr = self.server.kvctl(*args)
            self.assertEqual(code, 2, stderr)
            self.assertEqual(stderr.count("--help"), 1, stderr)

    def test_pinned_is_a_switch(self):
        code, stdout, stderr = self.server.kvctl("prefix", "register", "--name", "pinned-switch",
                                                 "--text", "You are terse.", "--pinned",
                                                 "--ttl-seconds", "600")
        self.assertEqual(code, 0, stderr)
        self.assertIn("pinned=true ttl=600s", stdout)
        code, stdout, stderr = self.server.kvctl("prefix", "register", "--name", "unpinned",
                                                 "--text", "You are terse.", "--pinned=false")
        self.assertEqual(code, 0, stderr)
        self.assertIn("pinned=false", stdout)
        self.assert_refused_with(
            self.server.kvctl("prefix", "register", "--name", "x", "--text", "y", "--pinned",
                              "false"),
            "--pinned is a switch; write --pinned=false", code=2)

    def test_a_target_without_port_or_as_url_is_refused(self):
        host_only = self.server.target.split(":")[0]
        self.assert_refused_with(kvctl("--target", host_only, "health"),
                                 f"--target '{host_only}': no port", code=2)
        url = "http://" + self.server.target
        self.assert_refused_with(kvctl("--target", url, "health"),
                                 f"--target '{url}': give HOST:PORT, not a URL", code=2)

    def test_the_prompt_from_stdin_is_the_prompt(self):
        args = ("generate", "--max-new-tokens", "6", "--output", "json")
        code, from_flag, stderr = self.server.kvctl(*args, "--prompt", "Hello there")
        self.assertEqual(code, 0, stderr)
        code, from_stdin, stderr = self.server.kvctl(*args, "--prompt-file", "-",
                                                     stdin=b"Hello there")
        self.assertEqual(code, 0, stderr)
        # Everything but the timings.
        from_flag, from_stdin = json.loads(from_flag), json.loads(from_stdin)
        for response in (from_flag, from_stdin):
            del response["timings"]
        self.assertEqual(from_stdin, from_flag)
        self.assertGreater(from_flag["usage"]["promptTokens"], 1)

    def test_a_prompt_larger_than_an_argument_reaches_the_server(self):
        # 200 KiB cannot be one argument (MAX_ARG_STRLEN, 128 KiB): it comes from stdin and the
        # server refuses it for the tiny model's context, which only it can know.
        code, _, stderr = self.server.kvctl("generate", "--prompt-file", "-",
                                            stdin=b"word " * (40 << 10))
        self.assertEqual(code, 1, stderr)
        self.assertIn("kvctl: INVALID_ARGUMENT: ", stderr)

    def test_a_tls_client_on_a_plaintext_port_is_told(self):
        self.assert_refused_with(self.server.kvctl(*ca_flags(), "health"), "UNAVAILABLE",
                                 HINT_NOT_TLS)


class TlsTest(ServerTestCase):
    """A TLS port without client certificates."""

    tls = testdata_tls()

    def test_kvctl_over_tls(self):
        code, stdout, stderr = self.server.kvctl(*ca_flags(), "health")
        self.assertEqual(code, 0, stderr)
        self.assertEqual(stdout, "SERVING\n")

    def test_kvctl_in_plaintext_is_told_to_use_tls(self):
        self.assert_refused_with(self.server.kvctl("health"), "kvctl: UNAVAILABLE: ",
                                 HINT_TLS + ": give --tls-ca-file")

    def test_kvctl_trusting_another_ca_is_told(self):
        self.assert_refused_with(self.server.kvctl(*ca_flags("other-ca.crt"), "health"),
                                 HINT_SERVER_CA)

    def test_the_examples_over_tls(self):
        target = ["--target", self.server.target]
        for name, extra in (("kvserve_client_example.py", ["--max-new-tokens", "2"]),
                            ("kvserve_session_example.py", ["--max-new-tokens", "2"]),
                            ("kvserve_beams_example.py", ["--max-new-tokens", "2"])):
            code, stdout, stderr = example(name, *target, *ca_flags(), *extra)
            self.assertEqual(code, 0, f"{name}: {stdout}{stderr}")
            code, stdout, stderr = example(name, *target, *extra)
            self.assertEqual(code, 1, f"{name}: {stdout}{stderr}")
            self.assertIn("error: UNAVAILABLE: ", stderr)
            self.assertIn(HINT_TLS, stderr, name)

    def test_the_examples_check_the_tls_flags(self):
        for name in ("kvserve_session_example.py", "kvserve_beams_example.py"):
            code, _, stderr = example(name, "--target", self.server.target, "--tls-cert-file",
                                      cert("client.crt"))
            self.assertEqual(code, 2, stderr)
            self.assertIn("--tls-cert-file and --tls-key-file go together", stderr)


class MutualTlsTest(ServerTestCase):
    """A TLS port requiring client certificates signed by the test CA."""

    tls = testdata_tls(client_ca="ca.crt")

    def test_kvctl_with_a_client_certificate(self):
        code, stdout, stderr = self.server.kvctl(*ca_flags(), *client_cert_flags(), "health")
        self.assertEqual(code, 0, stderr)
        self.assertEqual(stdout, "SERVING\n")

    def test_kvctl_without_a_client_certificate_is_told(self):
        self.assert_refused_with(self.server.kvctl(*ca_flags(), "health"),
                                 HINT_CLIENT_CERT + ": give --tls-cert-file and --tls-key-file")

    def test_kvctl_with_an_untrusted_client_certificate_is_told(self):
        self.assert_refused_with(
            self.server.kvctl(*ca_flags(), *client_cert_flags("rogue-client"), "health"),
            HINT_UNTRUSTED)

    def test_kvctl_in_plaintext_is_told_to_use_tls(self):
        self.assert_refused_with(self.server.kvctl("health"), HINT_TLS)

    def test_the_examples_with_and_without_a_client_certificate(self):
        target = ["--target", self.server.target, "--max-new-tokens", "2", *ca_flags()]
        for name in ("kvserve_client_example.py", "kvserve_session_example.py",
                     "kvserve_beams_example.py"):
            code, stdout, stderr = example(name, *target, *client_cert_flags())
            self.assertEqual(code, 0, f"{name}: {stdout}{stderr}")
            code, stdout, stderr = example(name, *target)
            self.assertEqual(code, 1, f"{name}: {stdout}{stderr}")
            self.assertIn(HINT_CLIENT_CERT, stderr, name)
            code, stdout, stderr = example(name, *target, *client_cert_flags("rogue-client"))
            self.assertEqual(code, 1, f"{name}: {stdout}{stderr}")
            self.assertIn(HINT_UNTRUSTED, stderr, name)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--kvctl", required=True)
    args, rest = parser.parse_known_args()
    PATHS["kvserve"] = args.kvserve
    PATHS["kvctl"] = args.kvctl
    program = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
