#!/usr/bin/python3
"""End-to-end: request ids, access-log lines, outcome metrics and listening hygiene of a real
kvserve process (embedded tiny model, 127.0.0.1, port 0).

- a second kvserve on a taken port (gRPC or metrics) exits 2 naming the address;
- a port outside [0, 65535] is refused naming its flag;
- x-request-id comes back in the initial and trailing metadata, the client's or a fresh one;
- every call has one access-log line, in text and JSON, and every JSON line parses and is
  UTF-8 even when the error quotes control characters and a character cut in half;
- kvserve_requests_total counts refused requests (INVALID_ARGUMENT, NOT_FOUND) and not the
  start-up warm-up or the start-up prefixes; --log-level warn drops access lines;
- a request over --max-request-bytes is RESOURCE_EXHAUSTED and the server goes on;
- the launcher (tests/harness/kvserve_launch.py): a failed start quotes kvserve's stderr, a
  killed server restarts with the same flags.

Needs ctest's PYTHONPATH; run:
  scripts/python.sh tests/e2e/test_access.py --kvserve build/server/kvserve
"""
import argparse
import json
import os
import re
import signal
import sys
import tempfile
import time
import unittest

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    auth_metadata,
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    prefix_pb2,
    prefix_pb2_grpc,
)
import kvserve_launch  # noqa: E402  pylint: disable=wrong-import-position
from kvserve_fixtures import (  # noqa: E402  pylint: disable=wrong-import-position
    write_api_keys_file,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
    KvserveStartError,
    parse_metrics,
)

PATHS = {}
CALL_TIMEOUT_S = 60 * TIME_SCALE
HEX16 = re.compile(r"^[0-9a-f]{16}$")
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ")


class Server(KvserveProcess):
    """A kvserve process on 127.0.0.1:0 (--threads 1) with the given flags, SERVING before it
    returns, with stubs for Generation and PrefixCache."""

    def __init__(self, *flags):
        super().__init__(PATHS["kvserve"], ["--threads", "1", *flags])
        channel = self.channel()
        self.stub = gen_grpc.GenerationStub(channel)
        self.prefixes = prefix_pb2_grpc.PrefixCacheStub(channel)

    def generate(self, request, request_id=None):
        """(response, call) of a unary Generate."""
        metadata = [("x-request-id", request_id)] if request_id else None
        return self.stub.Generate.with_call(request, metadata=metadata, timeout=CALL_TIMEOUT_S)


def refused_start(*flags):
    """Runs kvserve expecting it to refuse to start: (exit code, stderr)."""
    done = kvserve_launch.refused_start(PATHS["kvserve"], ["--threads", "1", *flags])
    return done.returncode, done.stderr


def metadata_value(metadata, key):
    values = [value for k, value in (metadata or ()) if k == key]
    return values[0] if len(values) == 1 else None


def sample(text, name):
    """The value of Prometheus sample `name` (with its labels), or None."""
    return parse_metrics(text).get(name)


def short_request(max_new_tokens=2):
    return gen.GenerateRequest(token_ids=gen.TokenIds(ids=[1, 2, 3]),
                               sampling=gen.SamplingParams(max_new_tokens=max_new_tokens,
                                                           ignore_eos=True))


# A session id the NOT_FOUND error quotes: control characters, quotes and a backslash (15
# bytes), then a two-byte character at bytes 63-64 that the 64-byte quote cuts in half.
HOSTILE_SESSION = "ctl\n\r\t\x01\x1b[31m\"}\\" + "a" * 48 + "é" * 10
# A prefix name GetPrefix's NOT_FOUND quotes whole.
HOSTILE_PREFIX = "line1\nfake 2026-01-01 00:00:00.000 info  access request_id=forged\x7f\""


class AccessTest(unittest.TestCase):

    def test_a_second_server_on_a_taken_port_exits_2_naming_the_address(self):
        first = Server("--metrics-listen", "127.0.0.1:0")
        try:
            self.assertIsNotNone(first.metrics_port, first.log_text())
            code, stderr = refused_start("--listen", f"127.0.0.1:{first.port}")
            self.assertEqual(code, 2, stderr)
            self.assertIn(f"--listen '127.0.0.1:{first.port}': cannot listen: "
                          "Address already in use", stderr)
            code, stderr = refused_start("--listen", "127.0.0.1:0", "--metrics-listen",
                                         f"127.0.0.1:{first.metrics_port}")
            self.assertEqual(code, 2, stderr)
            self.assertIn(f"--metrics-listen '127.0.0.1:{first.metrics_port}': cannot bind "
                          "(Address already in use)", stderr)
            # The first one still serves every request itself.
            for _ in range(4):
                response, _ = first.generate(short_request())
                self.assertEqual(response.usage.completion_tokens, 2)
        finally:
            self.assertEqual(first.stop(), 0, first.log_text())

    def test_ports_out_of_range_are_refused_naming_the_flag(self):
        code, stderr = refused_start("--listen", "127.0.0.1:99999")
        self.assertEqual(code, 2, stderr)
        self.assertIn("--listen '127.0.0.1:99999' is not HOST:PORT with a port in [0, 65535]",
                      stderr)
        code, stderr = refused_start("--listen", "127.0.0.1:0",
                                     "--metrics-listen", "127.0.0.1:99999")
        self.assertEqual(code, 2, stderr)
        self.assertIn("--metrics-listen '127.0.0.1:99999'", stderr)
        code, stderr = refused_start("--listen", "not an address:1")
        self.assertEqual(code, 2, stderr)
        self.assertIn("--listen 'not an address:1'", stderr)

    def test_request_ids_round_trip(self):
        server = Server()
        try:
            _, call = server.generate(short_request(), request_id="e2e-id.7:x_y")
            self.assertEqual(metadata_value(call.initial_metadata(), "x-request-id"),
                             "e2e-id.7:x_y")
            self.assertEqual(metadata_value(call.trailing_metadata(), "x-request-id"),
                             "e2e-id.7:x_y")
            _, call = server.generate(short_request())
            generated = metadata_value(call.initial_metadata(), "x-request-id")
            self.assertRegex(generated, HEX16)
            self.assertEqual(metadata_value(call.trailing_metadata(), "x-request-id"), generated)
            # Not an acceptable id (a space, too long): replaced, on errors as well.
            for bad in ("has a space", "x" * 65):
                with self.assertRaises(grpc.RpcError) as raised:
                    server.generate(gen.GenerateRequest(), request_id=bad)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertRegex(
                    metadata_value(raised.exception.trailing_metadata(), "x-request-id"), HEX16)
            # A stream's first message already brings it.
            stream = server.stub.GenerateStream(short_request(4),
                                                metadata=[("x-request-id", "stream-1")],
                                                timeout=CALL_TIMEOUT_S)
            self.assertEqual(metadata_value(stream.initial_metadata(), "x-request-id"),
                             "stream-1")
            self.assertEqual(sum(len(m.token_ids) for m in stream), 4)
            self.assertEqual(metadata_value(stream.trailing_metadata(), "x-request-id"),
                             "stream-1")
        finally:
            self.assertEqual(server.stop(), 0, server.log_text())

    def hostile_calls(self, server, prefix):
        """An OK generation, two NOT_FOUND errors quoting hostile strings, a malformed request;
        returns the request ids sent."""
        server.generate(short_request(3), request_id=f"{prefix}-ok")
        with self.assertRaises(grpc.RpcError) as raised:
            server.generate(gen.GenerateRequest(session=HOSTILE_SESSION, prompt="hi"),
                            request_id=f"{prefix}-session")
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(grpc.RpcError) as raised:
            server.prefixes.GetPrefix(prefix_pb2.GetPrefixRequest(name=HOSTILE_PREFIX),
                                      metadata=[("x-request-id", f"{prefix}-prefix")],
                                      timeout=CALL_TIMEOUT_S)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
        with self.assertRaises(grpc.RpcError) as raised:
            server.generate(gen.GenerateRequest(prompt="x\x00\x01 \u2028",
                                                sampling=gen.SamplingParams(top_p=3)),
                            request_id=f"{prefix}-bad")
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        return [f"{prefix}-ok", f"{prefix}-session", f"{prefix}-prefix", f"{prefix}-bad"]

    def test_json_access_log_lines_are_valid_utf8_json(self):
        server = Server("--log-format", "json")
        try:
            ids = self.hostile_calls(server, "json")
        finally:
            self.assertEqual(server.stop(), 0, server.log_text())
        raw = server.log_bytes()
        text = raw.decode("utf-8")  # strict: every byte of the log is UTF-8
        access = {}
        for line in text.splitlines():
            if not line.startswith("{"):
                continue  # gRPC's own lines
            record = json.loads(line)
            self.assertIn("time", record)
            self.assertIn("level", record)
            if record["msg"] == "access":
                access[record["request_id"]] = record
        self.assertEqual(sorted(access), sorted(ids), text)
        ok = access["json-ok"]
        self.assertEqual((ok["tenant"], ok["method"], ok["outcome"], ok["code"], ok["level"]),
                         ("default", "Generate", "length", "OK", "info"))
        self.assertEqual((ok["prompt_tokens"], ok["cached_tokens"], ok["completion_tokens"]),
                         (3, 0, 3))
        self.assertGreater(ok["ttft_ms"], 0)
        self.assertGreaterEqual(ok["total_ms"], ok["ttft_ms"])
        self.assertGreaterEqual(ok["ttft_ms"], ok["queue_ms"])
        self.assertNotIn("error", ok)
        session = access["json-session"]
        self.assertEqual((session["outcome"], session["code"]), ("not_found", "NOT_FOUND"))
        # The quote keeps the control characters (escaped by JSON) and replaces the half
        # character it cut.
        self.assertIn("'ctl\n\r\t\x01\x1b[31m\"}\\" + "a" * 48 + "\ufffd... (83 bytes)",
                      session["error"])
        prefix = access["json-prefix"]
        self.assertEqual((prefix["method"], prefix["outcome"]), ("GetPrefix", "not_found"))
        self.assertIn(HOSTILE_PREFIX, prefix["error"])
        bad = access["json-bad"]
        self.assertEqual(bad["outcome"], "invalid_argument")
        self.assertTrue(bad["error"].startswith("sampling.top_p:"), bad)

    def test_text_access_log_keeps_one_line_per_record(self):
        server = Server("--log-format", "text")
        try:
            self.hostile_calls(server, "text")
        finally:
            self.assertEqual(server.stop(), 0, server.log_text())
        text = server.log_bytes().decode("utf-8")
        ours = [line for line in text.splitlines() if TEXT_LINE.match(line)]
        access = [line for line in ours if " access request_id=" in line]
        self.assertEqual(len(access), 4, text)
        # No forged line: the newline in the prefix name stayed inside its record.
        self.assertFalse(any(line.startswith("fake ") for line in text.splitlines()), text)
        ok = next(line for line in access if "request_id=text-ok " in line)
        self.assertIn(" tenant=default method=Generate ", ok)
        self.assertIn(" outcome=length code=OK prompt_tokens=3 cached_tokens=0 "
                      "completion_tokens=3 ", ok)
        session = next(line for line in access if "request_id=text-session " in line)
        self.assertIn(r'error="session: no open session ' + "'" + r'ctl\n\r\t\x01\x1b[31m\"}\\',
                      session)
        self.assertIn("a" * 48 + r"\xc3... (83 bytes)", session)

    def test_outcomes_are_counted_and_the_start_up_is_not(self):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as prefixes:
            json.dump({"prefixes": [{"name": "sys", "token_ids": {"ids": [1, 2, 3, 4]}}]},
                      prefixes)
        server = Server("--metrics-listen", "127.0.0.1:0", "--prefixes-file", prefixes.name)
        try:
            os.unlink(prefixes.name)
            start = server.metrics_text()
            self.assertNotIn("kvserve_requests_total{", start)  # warm-up and prefixes
            self.assertNotIn("kvserve_rpcs_total{", start)
            self.assertIn('kvserve_build_info{cuda="', start)
            self.assertEqual(sample(start, "kvserve_e2e_request_latency_seconds_count"), 0)
            server.generate(short_request(2))
            server.generate(gen.GenerateRequest(
                prefix="sys", token_ids=gen.TokenIds(ids=[5]),
                sampling=gen.SamplingParams(max_new_tokens=1, ignore_eos=True)))
            for request, code in (
                    (gen.GenerateRequest(), grpc.StatusCode.INVALID_ARGUMENT),
                    (gen.GenerateRequest(prompt="x", sampling=gen.SamplingParams(top_k=-2)),
                     grpc.StatusCode.INVALID_ARGUMENT),
                    (gen.GenerateRequest(prefix="absent", prompt="x"),
                     grpc.StatusCode.NOT_FOUND)):
                with self.assertRaises(grpc.RpcError) as raised:
                    server.generate(request)
                self.assertEqual(raised.exception.code(), code)
            with self.assertRaises(grpc.RpcError) as raised:
                list(server.stub.GenerateStream(gen.GenerateRequest(prefix="absent", prompt="x"),
                                                timeout=CALL_TIMEOUT_S))
            self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
            page = server.metrics_text()
            self.assertEqual(sample(page, 'kvserve_requests_total{outcome="length"}'), 2)
            self.assertEqual(sample(page, 'kvserve_requests_total{outcome="invalid_argument"}'), 2)
            self.assertEqual(sample(page, 'kvserve_requests_total{outcome="not_found"}'), 2)
            self.assertEqual(
                sample(page, 'kvserve_rpcs_total{code="NOT_FOUND",method="GenerateStream"}'), 1)
            self.assertEqual(sample(page, 'kvserve_rpcs_total{code="OK",method="Generate"}'), 2)
            self.assertEqual(sample(page, "kvserve_e2e_request_latency_seconds_count"), 2)
            self.assertEqual(sample(page, "kvserve_request_prefill_time_seconds_count"), 2)
            self.assertEqual(sample(page, "kvserve_kv_device_bytes_limit"), float("inf"))
            self.assertGreater(sample(page, "kvserve_kv_device_bytes_used"), 0)  # "sys"
        finally:
            self.assertEqual(server.stop(), 0, server.log_text())

    def test_log_level_warn_drops_access_lines(self):
        server = Server("--log-level", "warn")
        try:
            server.generate(short_request(), request_id="quiet")
        finally:
            self.assertEqual(server.stop(), 0, server.log_text())
        self.assertNotIn("request_id=quiet", server.log_text())
        self.assertNotIn(" info ", server.log_text())

    def test_a_request_over_max_request_bytes_is_resource_exhausted(self):
        server = Server("--max-request-bytes", "65536")
        try:
            with self.assertRaises(grpc.RpcError) as raised:
                server.generate(gen.GenerateRequest(prompt="a" * 70000))
            self.assertEqual(raised.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            response, _ = server.generate(short_request(1))
            self.assertEqual(response.usage.completion_tokens, 1)
        finally:
            self.assertEqual(server.stop(), 0, server.log_text())


class ApiKeysTest(unittest.TestCase):
    """--api-keys-file: every kvserve RPC needs a listed key (health does not); the key's tenant
    is in the access log; unauthenticated calls are counted; SIGHUP reloads the file and a
    broken file keeps the keys in force."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.keys = os.path.join(self.dir.name, "keys.yaml")
        write_api_keys_file(self.keys, [("alpha-secret", "alpha", "user"),
                                        ("ops-secret", "ops", "admin")])

    def tearDown(self):
        self.dir.cleanup()

    def assert_unauthenticated(self, call):
        with self.assertRaises(grpc.RpcError) as raised:
            call()
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAUTHENTICATED,
                         raised.exception.details())

    def test_keys_gate_every_rpc_and_name_the_tenant(self):
        server = Server("--api-keys-file", self.keys, "--log-format", "json",
                        "--metrics-listen", "127.0.0.1:0")
        try:
            request = short_request(1)
            self.assert_unauthenticated(
                lambda: server.stub.Generate(request, timeout=CALL_TIMEOUT_S))
            self.assert_unauthenticated(
                lambda: server.stub.Generate(request, metadata=auth_metadata("wrong"),
                                             timeout=CALL_TIMEOUT_S))
            self.assert_unauthenticated(lambda: server.stub.Generate(
                request, metadata=[("authorization", "Basic alpha-secret")],
                timeout=CALL_TIMEOUT_S))
            self.assert_unauthenticated(lambda: list(server.stub.GenerateStream(
                request, timeout=CALL_TIMEOUT_S)))
            self.assert_unauthenticated(lambda: server.stub.GetModelInfo(
                gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S))
            self.assert_unauthenticated(lambda: server.prefixes.ListPrefixes(
                prefix_pb2.ListPrefixesRequest(), timeout=CALL_TIMEOUT_S))
            self.assert_unauthenticated(lambda: server.prefixes.RegisterPrefix(
                prefix_pb2.RegisterPrefixRequest(name="p", text="hello"),
                timeout=CALL_TIMEOUT_S))
            response = server.stub.Generate(request, metadata=auth_metadata("alpha-secret"),
                                            timeout=CALL_TIMEOUT_S)
            self.assertEqual(response.usage.completion_tokens, 1)
            server.stub.GetModelInfo(gen.GetModelInfoRequest(),
                                     metadata=auth_metadata("ops-secret"), timeout=CALL_TIMEOUT_S)
            tenants = {}
            for line in server.log_text().splitlines():
                record = json.loads(line)
                if record.get("msg") == "access":
                    tenants.setdefault(record.get("method"), []).append(
                        (record.get("tenant"), record.get("code")))
            self.assertIn(("alpha", "OK"), tenants["Generate"])
            self.assertIn(("-", "UNAUTHENTICATED"), tenants["Generate"])
            self.assertIn(("ops", "OK"), tenants["GetModelInfo"])
            self.assertNotIn("alpha-secret", server.log_text())
            metrics = server.metrics_text()
            self.assertEqual(sample(metrics, 'kvserve_requests_total{outcome="unauthenticated"}'),
                             4.0)
        finally:
            self.assertEqual(server.stop(), 0, server.log_text())

    def test_sighup_reloads_and_a_broken_file_keeps_the_keys(self):
        server = Server("--api-keys-file", self.keys)
        try:
            request = short_request(1)
            server.stub.Generate(request, metadata=auth_metadata("alpha-secret"),
                                 timeout=CALL_TIMEOUT_S)
            write_api_keys_file(self.keys, [("beta-secret", "beta", "user")])
            server.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 30 * TIME_SCALE
            while "API keys reloaded" not in server.log_text():
                self.assertLess(time.monotonic(), deadline, server.log_text())
                time.sleep(0.05)
            self.assert_unauthenticated(lambda: server.stub.Generate(
                request, metadata=auth_metadata("alpha-secret"), timeout=CALL_TIMEOUT_S))
            server.stub.Generate(request, metadata=auth_metadata("beta-secret"),
                                 timeout=CALL_TIMEOUT_S)
            with open(self.keys, "w", encoding="utf-8") as f:
                f.write("- tenant: nobody\n")
            server.send_signal(signal.SIGHUP)
            while "were not reloaded" not in server.log_text():
                self.assertLess(time.monotonic(), deadline, server.log_text())
                time.sleep(0.05)
            self.assertIn("keys[0].key_sha256: is required", server.log_text())
            server.stub.Generate(request, metadata=auth_metadata("beta-secret"),
                                 timeout=CALL_TIMEOUT_S)
        finally:
            self.assertEqual(server.stop(), 0, server.log_text())

    def test_a_bad_keys_file_stops_the_start(self):
        with open(self.keys, "w", encoding="utf-8") as f:
            f.write("- key_sha256: 1234\n  tenant: a\n")
        code, stderr = refused_start("--listen", "127.0.0.1:0", "--api-keys-file", self.keys)
        self.assertEqual(code, 2, stderr)
        self.assertIn(f"--api-keys-file: {self.keys}: keys[0].key_sha256", stderr)


SERVING_LINE = re.compile(r" serving .* layers, vocab ")


class LauncherTest(unittest.TestCase):
    """tests/harness/kvserve_launch.py itself: a failed start quotes kvserve's stderr and exit
    code; kill -9, a restart with the same flags, the current run's log, a clean stop."""

    def test_a_failed_start_shows_the_log_tail(self):
        with self.assertRaises(KvserveStartError) as raised:
            KvserveProcess(PATHS["kvserve"], ["--threads", "1"], listen="127.0.0.1:99999")
        self.assertEqual(raised.exception.returncode, 2)
        message = str(raised.exception)
        self.assertIn("kvserve did not start: exited with 2 before listening", message)
        self.assertIn("kvserve stderr (last 1 lines):", message)
        self.assertIn("is not HOST:PORT with a port in [0, 65535]", message)

    def test_kill_then_restart_with_the_same_flags(self):
        server = Server("--replica-id", "launcher-self-check")
        try:
            self.assertEqual(server.stdout_lines(), [f"kvserve listening on {server.target}"])
            self.assertEqual(server.kill(), -signal.SIGKILL)
            self.assertFalse(server.running)
            server.restart()
            self.assertTrue(server.running)
            info = gen_grpc.GenerationStub(server.channel()).GetModelInfo(
                gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S)
            self.assertEqual(info.replica_id, "launcher-self-check")
            # One start in the current run's log, two in the whole file.
            self.assertEqual(len(SERVING_LINE.findall(server.log_text())), 1, server.log_text())
            self.assertEqual(len(SERVING_LINE.findall(server.log_text(all_runs=True))), 2)
        finally:
            self.assertEqual(server.stop(), 0, server.log_text())
        self.assertFalse(server.stopped_by_kill)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    PATHS["kvserve"] = args.kvserve
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
