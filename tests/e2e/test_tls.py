#!/usr/bin/python3
"""End-to-end: TLS and mutual TLS of a real kvserve process (embedded tiny model, 127.0.0.1,
port 0), with certificates the test makes with the openssl command in a temporary folder.

- a CA; a server certificate for 127.0.0.1 (IP subject alternative name) and a client
  certificate it signs; another CA and a client certificate that one signs;
- TLS: Generate from Python and from kvctl (and the Python example) work; a plaintext client,
  and a client trusting another CA, fail; the metrics endpoint stays plaintext;
- mutual TLS (--tls-client-ca-file): no client certificate fails, one the CA signed works,
  one another CA signed fails;
- bad TLS flags exit 2 naming the flag: a missing file, a file that is not PEM, a key that
  does not match the certificate, a client CA without a certificate; kvctl's too;
- secure by default: --listen 0.0.0.0:0 without TLS and without --insecure exits 2 naming
  --listen, --tls-cert-file and --insecure; with --insecure it starts (and is stopped).

Exits 77 (skipped) without the openssl command. Needs ctest's PYTHONPATH
(scripts/python.sh sets it); run:
  test_tls.py --kvserve build/server/kvserve --kvctl build/client/kvctl
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

CLIENT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client",
                          "python")
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    open_channel,
)
from kvserve_fixtures import Certificates  # noqa: E402  pylint: disable=wrong-import-position
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)
import kvserve_launch  # noqa: E402  pylint: disable=wrong-import-position

PATHS = {}
CALL_TIMEOUT_S = 60 * TIME_SCALE
# A failing handshake ends a call at once; this only bounds a hang.
REFUSED_TIMEOUT_S = 20 * TIME_SCALE
CERTIFICATES = []  # the Certificates of the run, made in main()
CERTS = {}  # name -> path, filled by make_certificates


def make_certificates(folder):
    """A CA, another CA, a server certificate for 127.0.0.1 and two client certificates."""
    made = Certificates(folder, clients=("client",), foreign_clients=("rogue-client",))
    for name in ("ca", "other-ca", "server", "client", "rogue-client"):
        CERTS[name + ".crt"] = made.path(name + ".crt")
        CERTS[name + ".key"] = made.path(name + ".key")
    CERTS["not-pem"] = made.path("openssl.cnf")
    CERTIFICATES.append(made)


class Server(KvserveProcess):
    """A kvserve process on 127.0.0.1:0 (--threads 1) serving TLS with the server certificate
    and the given flags, SERVING before it returns (health is checked over TLS verified by the
    CA, with the client certificate `client` when given); `client_ca` requires client
    certificates signed by it."""

    def __init__(self, *flags, client=None, client_ca=None):
        super().__init__(PATHS["kvserve"], ["--threads", "1", *flags],
                         tls=CERTIFICATES[0].tls(client=client, client_ca=client_ca))

    def channel_as(self, ca=None, client=None):
        """A channel to the server: TLS trusting CERTS[ca] when ca is given, with the client
        certificate CERTS[client].crt/.key when client is given; else plaintext."""
        return open_channel(self.target, CERTS[ca + ".crt"] if ca else None,
                            CERTS[client + ".crt"] if client else None,
                            CERTS[client + ".key"] if client else None)

    def generate(self, ca=None, client=None, timeout=CALL_TIMEOUT_S):
        """The text of a short Generate over channel_as(ca, client)."""
        with self.channel_as(ca, client) as channel:
            request = gen.GenerateRequest(prompt="Hello", sampling=gen.SamplingParams(
                max_new_tokens=4, ignore_eos=True))
            return gen_grpc.GenerationStub(channel).Generate(request, timeout=timeout)

    def refused(self, ca=None, client=None):
        """The RpcError of a Generate that must fail (AssertionError when it succeeds)."""
        try:
            self.generate(ca, client, timeout=REFUSED_TIMEOUT_S)
        except grpc.RpcError as error:
            return error
        raise AssertionError(f"Generate over ca={ca} client={client} succeeded")

    def kvctl(self, *flags):
        """kvctl --target this server FLAGS generate ...: (exit code, stdout + stderr)."""
        proc = subprocess.run(
            [PATHS["kvctl"], "--target", self.target, "--timeout-ms",
             str(int(REFUSED_TIMEOUT_S * 1000)), *flags, "generate", "--prompt", "Hello",
             "--max-new-tokens", "4"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=120 * TIME_SCALE,
            check=False)
        return proc.returncode, (proc.stdout + proc.stderr).decode("utf-8", "replace")


def refused_start(*flags):
    """Runs kvserve expecting it to refuse to start: (exit code, stderr)."""
    done = kvserve_launch.refused_start(PATHS["kvserve"], ["--threads", "1", *flags])
    return done.returncode, done.stderr


def tls_flags(cert="server.crt", key="server.key"):
    return ["--tls-cert-file", CERTS.get(cert, cert), "--tls-key-file", CERTS.get(key, key)]


class TlsTest(unittest.TestCase):
    """One TLS server (with a plaintext metrics endpoint) for every test of the class."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server("--metrics-listen", "127.0.0.1:0")

    @classmethod
    def tearDownClass(cls):
        cls.assert_stopped(cls.server)

    @staticmethod
    def assert_stopped(server):
        code = server.stop()
        if code != 0:
            raise AssertionError(f"kvserve exited with {code}\n{server.log_text()}")

    def test_python_generate_over_tls(self):
        response = self.server.generate(ca="ca")
        self.assertEqual(response.usage.completion_tokens, 4)

    def test_kvctl_generate_over_tls(self):
        code, output = self.server.kvctl("--tls-ca-file", CERTS["ca.crt"])
        self.assertEqual(code, 0, output)
        code, output = self.server.kvctl("--tls-ca-file", CERTS["ca.crt"], "--tls-server-name",
                                         "127.0.0.1")
        self.assertEqual(code, 0, output)

    def test_python_example_over_tls(self):
        proc = subprocess.run(
            [sys.executable, os.path.join(CLIENT_DIR, "kvserve_client_example.py"), "--target",
             self.server.target, "--tls-ca-file", CERTS["ca.crt"], "--max-new-tokens", "4"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=120 * TIME_SCALE,
            check=False)
        output = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        self.assertEqual(proc.returncode, 0, output)
        self.assertIn("health: SERVING", output)

    def test_plaintext_client_fails(self):
        self.assertEqual(self.server.refused().code(), grpc.StatusCode.UNAVAILABLE)
        code, output = self.server.kvctl()
        self.assertEqual(code, 1, output)
        self.assertIn("UNAVAILABLE", output)

    def test_client_trusting_another_ca_fails(self):
        self.assertEqual(self.server.refused(ca="other-ca").code(), grpc.StatusCode.UNAVAILABLE)
        code, output = self.server.kvctl("--tls-ca-file", CERTS["other-ca.crt"])
        self.assertEqual(code, 1, output)

    def test_wrong_server_name_fails(self):
        code, output = self.server.kvctl("--tls-ca-file", CERTS["ca.crt"], "--tls-server-name",
                                         "elsewhere.example")
        self.assertEqual(code, 1, output)

    def test_a_client_certificate_is_not_needed_without_client_ca(self):
        response = self.server.generate(ca="ca", client="client")
        self.assertEqual(response.usage.completion_tokens, 4)

    def test_metrics_stay_plaintext(self):
        self.assertIsNotNone(self.server.metrics_port, self.server.log_text())
        self.assertIn("kvserve_", self.server.metrics_text(timeout_s=CALL_TIMEOUT_S))


class MutualTlsTest(unittest.TestCase):
    """A server requiring client certificates signed by the CA."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server(client="client", client_ca="ca")

    @classmethod
    def tearDownClass(cls):
        TlsTest.assert_stopped(cls.server)

    def test_client_certificate_signed_by_the_ca_works(self):
        self.assertEqual(self.server.generate(ca="ca", client="client").usage.completion_tokens,
                         4)
        code, output = self.server.kvctl("--tls-ca-file", CERTS["ca.crt"], "--tls-cert-file",
                                         CERTS["client.crt"], "--tls-key-file",
                                         CERTS["client.key"])
        self.assertEqual(code, 0, output)

    def test_client_without_certificate_fails(self):
        self.assertEqual(self.server.refused(ca="ca").code(), grpc.StatusCode.UNAVAILABLE)
        code, output = self.server.kvctl("--tls-ca-file", CERTS["ca.crt"])
        self.assertEqual(code, 1, output)

    def test_client_certificate_of_another_ca_fails(self):
        self.assertEqual(self.server.refused(ca="ca", client="rogue-client").code(),
                         grpc.StatusCode.UNAVAILABLE)
        code, output = self.server.kvctl("--tls-ca-file", CERTS["ca.crt"], "--tls-cert-file",
                                         CERTS["rogue-client.crt"], "--tls-key-file",
                                         CERTS["rogue-client.key"])
        self.assertEqual(code, 1, output)

    def test_plaintext_client_fails(self):
        self.assertEqual(self.server.refused().code(), grpc.StatusCode.UNAVAILABLE)


class FlagsTest(unittest.TestCase):
    """Refused TLS flags and the non-loopback rule."""

    def assert_refused(self, flags, *expected):
        code, stderr = refused_start(*flags)
        self.assertEqual(code, 2, stderr)
        for text in expected:
            self.assertIn(text, stderr)

    def test_bad_tls_files_name_their_flag(self):
        missing = CERTS["ca.crt"] + ".missing"
        self.assert_refused(["--listen", "127.0.0.1:0", *tls_flags(cert=missing)],
                            f"--tls-cert-file '{missing}': no such file")
        self.assert_refused(["--listen", "127.0.0.1:0", *tls_flags(key=CERTS["not-pem"])],
                            "--tls-key-file", "is not PEM")
        self.assert_refused(["--listen", "127.0.0.1:0", *tls_flags(), "--tls-client-ca-file",
                             missing], "--tls-client-ca-file", "no such file")
        self.assert_refused(["--listen", "127.0.0.1:0", "--tls-cert-file", CERTS["server.crt"]],
                            "--tls-cert-file needs --tls-key-file")
        self.assert_refused(["--listen", "127.0.0.1:0", "--tls-client-ca-file", CERTS["ca.crt"]],
                            "--tls-client-ca-file needs --tls-cert-file")

    def test_key_not_matching_the_certificate_is_refused(self):
        self.assert_refused(["--listen", "127.0.0.1:0", *tls_flags(key="client.key")],
                            "--tls-cert-file", "--tls-key-file", "does the key match")

    def test_kvctl_bad_tls_flags_exit_2(self):
        for flags, expected in (
                (["--tls-ca-file", CERTS["ca.crt"] + ".missing"], "--tls-ca-file"),
                (["--tls-ca-file", CERTS["not-pem"]], "is not PEM"),
                (["--tls-ca-file", CERTS["ca.crt"], "--tls-cert-file", CERTS["client.crt"]],
                 "--tls-key-file"),
                (["--tls-cert-file", CERTS["client.crt"], "--tls-key-file", CERTS["client.key"]],
                 "--tls-ca-file")):
            proc = subprocess.run([PATHS["kvctl"], *flags, "health"], stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=60, check=False)
            stderr = proc.stderr.decode("utf-8", "replace")
            self.assertEqual(proc.returncode, 2, stderr)
            self.assertIn(expected, stderr)

    def test_non_loopback_plaintext_needs_insecure(self):
        self.assert_refused(["--listen", "0.0.0.0:0"], "--listen '0.0.0.0:0'", "--tls-cert-file",
                            "--insecure")
        server = KvserveProcess(PATHS["kvserve"], ["--insecure", "--threads", "1"],
                                listen="0.0.0.0:0", wait=False)
        try:
            self.assertTrue(server.first_line.startswith("kvserve listening on 0.0.0.0:"),
                            server.first_line)
        finally:
            code = server.stop(grace_s=60 * TIME_SCALE)
        self.assertFalse(server.stopped_by_kill, "still running 60 s after SIGTERM")
        self.assertEqual(code, 0, server.log_text())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--kvctl", required=True)
    args, rest = parser.parse_known_args()
    if shutil.which("openssl") is None:
        print("test_tls: skipped: no openssl command to make the certificates with")
        sys.exit(77)
    PATHS["kvserve"] = args.kvserve
    PATHS["kvctl"] = args.kvctl
    with tempfile.TemporaryDirectory(prefix="kvserve-tls-") as folder:
        make_certificates(folder)
        program = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
