#!/usr/bin/python3
"""End-to-end: what kvserve tells operators and tools about itself (embedded tiny model,
127.0.0.1, port 0, or a unix socket).

- with --log-format json every line of stderr is one JSON object, gRPC's own lines (a TLS
  handshake that fails, a port that is taken) and protobuf's (a request string that is not
  UTF-8) included;
- server reflection answers v1 and v1alpha alike, every service it lists resolves, and a
  client that knows nothing but reflection can call health; health answers for each kvserve
  service by name;
- --listen unix:PATH is reported by its path (first stdout line, replica id, trailer);
- the access log has the fields a method has, with their values (a request refused for
  memory keeps its prompt's tokens);
- the metrics: where K/V lives as one label, tenants bounded to the keys file, the process_*
  metrics, request histograms reaching the longest generation;
- kvserve --version agrees with kvserve_build_info and names the git revision.

Needs ctest's PYTHONPATH; run:
  scripts/python.sh tests/e2e/test_observability.py --kvserve build/server/kvserve
"""
import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # noqa: E402
from grpc_reflection.v1 import reflection_pb2  # noqa: E402  pylint: disable=wrong-import-position
from kvserve_launch import KvserveProcess, Tls  # noqa: E402  pylint: disable=wrong-import-position
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    health_pb2,
    health_pb2_grpc,
    prefix_pb2,
    prefix_pb2_grpc,
)

PATHS = {}
SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TIME_SCALE = float(os.environ.get("KVSERVE_TEST_TIME_SCALE", "1"))
STARTUP_TIMEOUT_S = 60 * TIME_SCALE
CALL_TIMEOUT_S = 60 * TIME_SCALE
REFLECTION = {
    "v1": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "v1alpha": "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
}
KVSERVE_SERVICES = ("kvserve.v1.Generation", "kvserve.v1.PrefixCache", "kvserve.v1.Sessions")


class Server:
    """A kvserve process (KvserveProcess) with the given flags (on 127.0.0.1:0 unless --listen
    is among them; over TLS when `tls`, a kvserve_launch.Tls, is given), SERVING before the
    constructor returns, with a channel and stubs to it."""

    def __init__(self, *flags, tls=None):
        flags = list(flags)
        listen = "127.0.0.1:0"
        if "--listen" in flags:
            at = flags.index("--listen")
            listen = flags[at + 1]
            del flags[at:at + 2]
        self.process = KvserveProcess(PATHS["kvserve"], ["--threads", "1", *flags],
                                      listen=listen, tls=tls,
                                      start_timeout_s=STARTUP_TIMEOUT_S)
        self.port, self.first_line = self.process.port, self.process.first_line
        self.target = self.process.target
        self.channel = self.process.channel()
        self.stub = gen_grpc.GenerationStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    def raw_stderr(self):
        return self.process.log_bytes()

    def stderr(self):
        return self.process.log_text()

    def metrics(self):
        return self.process.metrics_text(timeout_s=CALL_TIMEOUT_S)

    def stop(self):
        return self.process.stop()


def run_kvserve(*flags):
    """Runs kvserve to its end (a refused start, --version): (exit code, stdout, stderr)."""
    proc = subprocess.run([PATHS["kvserve"], "--threads", "1", *flags],
                          stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=120 * TIME_SCALE, check=False)
    return (proc.returncode, proc.stdout.decode("utf-8", "replace"),
            proc.stderr.decode("utf-8", "replace"))


def short_request(max_new_tokens=2):
    return gen.GenerateRequest(token_ids=gen.TokenIds(ids=[1, 2, 3]),
                               sampling=gen.SamplingParams(max_new_tokens=max_new_tokens,
                                                           ignore_eos=True))


def sample(text, name):
    """The value of Prometheus sample `name` (with its labels), or None."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line[len(name) + 1:])
    return None


def json_records(test, raw):
    """Every line of `raw` (stderr bytes) as a JSON object with time, level and msg; fails
    `test` on any other line."""
    records = []
    for line in raw.decode("utf-8").splitlines():  # strict: every byte is UTF-8
        try:
            record = json.loads(line)
        except ValueError:
            test.fail(f"not a JSON line: {line!r}")
        test.assertIsInstance(record, dict, line)
        test.assertEqual(sorted(set(record) & {"time", "level", "msg"}),
                         ["level", "msg", "time"], line)
        records.append(record)
    return records


class JsonLogTest(unittest.TestCase):
    """--log-format json: gRPC's and protobuf's lines are JSON objects like kvserve's."""

    def test_a_request_string_that_is_not_utf8(self):
        server = Server("--log-format", "json")
        try:
            # GenerateRequest.prompt (field 1, a string) holding bytes that are not UTF-8.
            generate = server.channel.unary_unary("/kvserve.v1.Generation/Generate",
                                                  request_serializer=None,
                                                  response_deserializer=None)
            with self.assertRaises(grpc.RpcError) as raised:
                generate(b"\x0a\x03\xff\xfe\x80", timeout=CALL_TIMEOUT_S)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        finally:
            self.assertEqual(server.stop(), 0, server.stderr())
        records = json_records(self, server.raw_stderr())
        protobuf = [r for r in records if r["msg"].startswith("protobuf: ")]
        self.assertTrue(any("invalid UTF-8" in r["msg"] and r["level"] == "error"
                            for r in protobuf), records)

    def test_a_port_that_is_taken(self):
        server = Server("--log-format", "json")
        try:
            code, _, stderr = run_kvserve("--log-format", "json", "--listen",
                                          f"127.0.0.1:{server.port}")
        finally:
            self.assertEqual(server.stop(), 0, server.stderr())
        self.assertEqual(code, 2, stderr)
        records = json_records(self, stderr.encode("utf-8"))
        self.assertTrue(any(r["msg"].startswith("grpc: ") for r in records), records)
        self.assertTrue(any(r["msg"].startswith(f"--listen '127.0.0.1:{server.port}': cannot "
                                                f"listen: Address already in use")
                            for r in records), records)

    @unittest.skipIf(shutil.which("openssl") is None, "needs the openssl command")
    def test_a_tls_handshake_that_fails(self):
        with tempfile.TemporaryDirectory() as folder:
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                            "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                            "-keyout", "server.key", "-out", "server.crt"],
                           cwd=folder, check=True, capture_output=True)
            certificate = os.path.join(folder, "server.crt")
            server = Server("--log-format", "json", tls=Tls(
                cert_file=certificate, key_file=os.path.join(folder, "server.key"),
                ca_file=certificate, server_name="localhost"))
            try:
                # A plaintext client: the server's handshake fails (gRPC logs it, then closes).
                with grpc.insecure_channel(server.target) as plaintext:
                    with self.assertRaises(grpc.RpcError):
                        gen_grpc.GenerationStub(plaintext).GetModelInfo(
                            gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S)
            finally:
                self.assertEqual(server.stop(), 0, server.stderr())
        records = json_records(self, server.raw_stderr())
        self.assertTrue(any(r["msg"].startswith("grpc: ") and "andshake" in r["msg"]
                            for r in records), records)


def reflect(channel, version, request):
    """One reflection request on a stream of its own (v1 and v1alpha share their messages)."""
    call = channel.stream_stream(REFLECTION[version],
                                 request_serializer=reflection_pb2.ServerReflectionRequest
                                 .SerializeToString,
                                 response_deserializer=reflection_pb2.ServerReflectionResponse
                                 .FromString)
    responses = list(call(iter([request]), timeout=CALL_TIMEOUT_S))
    assert len(responses) == 1, responses
    return responses[0]


class ReflectionAndHealthTest(unittest.TestCase):
    """Reflection v1 and v1alpha on the real binary; per-service health."""

    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0, cls.server.stderr()

    def listed(self, version):
        response = reflect(self.server.channel, version,
                           reflection_pb2.ServerReflectionRequest(list_services=""))
        self.assertFalse(response.HasField("error_response"), response)
        return {service.name for service in response.list_services_response.service}

    def test_v1_and_v1alpha_list_the_same_services(self):
        v1 = self.listed("v1")
        self.assertEqual(v1, self.listed("v1alpha"))
        self.assertTrue(set(KVSERVE_SERVICES) | {
            "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= v1, v1)

    def test_every_listed_service_resolves_in_both_versions(self):
        for service in self.listed("v1"):
            for version in REFLECTION:
                response = reflect(self.server.channel, version,
                                   reflection_pb2.ServerReflectionRequest(
                                       file_containing_symbol=service))
                self.assertTrue(response.HasField("file_descriptor_response"),
                                f"{version} {service}: {response.error_response}")
                file = descriptor_pb2.FileDescriptorProto.FromString(
                    response.file_descriptor_response.file_descriptor_proto[0])
                self.assertIn(service, {f"{file.package}.{s.name}" for s in file.service},
                              f"{version}: {file.name}")

    def test_a_reflection_only_client_can_check_health(self):
        # Everything this client knows about health comes from reflection.
        response = reflect(self.server.channel, "v1", reflection_pb2.ServerReflectionRequest(
            file_containing_symbol="grpc.health.v1.Health"))
        pool = descriptor_pool.DescriptorPool()
        for serialized in reversed(response.file_descriptor_response.file_descriptor_proto):
            pool.AddSerializedFile(serialized)
        method = pool.FindServiceByName("grpc.health.v1.Health").FindMethodByName("Check")
        factory = message_factory.MessageFactory(pool)
        make = getattr(factory, "GetMessageClass", None) or factory.GetPrototype
        request_class, response_class = make(method.input_type), make(method.output_type)
        check = self.server.channel.unary_unary(
            "/grpc.health.v1.Health/Check", request_serializer=request_class.SerializeToString,
            response_deserializer=response_class.FromString)
        for service in ("",) + KVSERVE_SERVICES:
            answer = check(request_class(service=service), timeout=CALL_TIMEOUT_S)
            status = answer.DESCRIPTOR.fields_by_name["status"].enum_type
            self.assertEqual(status.values_by_number[answer.status].name, "SERVING", service)

    def test_health_answers_for_each_kvserve_service(self):
        for service in KVSERVE_SERVICES:
            self.assertEqual(self.server.health.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=CALL_TIMEOUT_S).status,
                health_pb2.HealthCheckResponse.SERVING, service)
        with self.assertRaises(grpc.RpcError) as raised:
            self.server.health.Check(health_pb2.HealthCheckRequest(service="kvserve.v1.Nope"),
                                     timeout=CALL_TIMEOUT_S)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)


class UnixSocketTest(unittest.TestCase):
    def test_a_unix_socket_is_reported_by_its_path(self):
        with tempfile.TemporaryDirectory() as folder:
            listen = f"unix:{folder}/grpc.sock"
            server = Server("--listen", listen)
            try:
                self.assertEqual(server.first_line, f"kvserve listening on {listen}")
                _, call = server.stub.Generate.with_call(short_request(1), timeout=CALL_TIMEOUT_S)
                replica = [v for k, v in call.trailing_metadata() if k == "x-kvserve-replica"]
                self.assertEqual(replica, [listen])
                info = server.stub.GetModelInfo(gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S)
                self.assertEqual(info.replica_id, listen)
            finally:
                self.assertEqual(server.stop(), 0, server.stderr())


def access_records(test, server):
    """The access-log records of `server`'s JSON stderr, by request id."""
    return {r["request_id"]: r for r in json_records(test, server.raw_stderr())
            if r["msg"] == "access"}


class AccessLogTest(unittest.TestCase):
    """Each access-log line has the fields its method has, with their real values."""

    def test_fields_follow_the_method(self):
        server = Server("--log-format", "json")
        try:
            prefixes = prefix_pb2_grpc.PrefixCacheStub(server.channel)
            prefixes.ListPrefixes(prefix_pb2.ListPrefixesRequest(),
                                  metadata=[("x-request-id", "list")], timeout=CALL_TIMEOUT_S)
            server.stub.Generate(short_request(2), metadata=[("x-request-id", "generate")],
                                 timeout=CALL_TIMEOUT_S)
            with self.assertRaises(grpc.RpcError):
                server.stub.Generate(gen.GenerateRequest(prefix="absent", prompt="x"),
                                     metadata=[("x-request-id", "unknown-prefix")],
                                     timeout=CALL_TIMEOUT_S)
        finally:
            self.assertEqual(server.stop(), 0, server.stderr())
        records = access_records(self, server)
        token_fields = {"prompt_tokens", "cached_tokens", "completion_tokens", "queue_ms",
                        "ttft_ms"}
        self.assertEqual(set(records["list"]) & token_fields, set(), records["list"])
        self.assertEqual(set(records["unknown-prefix"]) & token_fields, set(),
                         records["unknown-prefix"])
        generate = records["generate"]
        self.assertEqual((generate["prompt_tokens"], generate["cached_tokens"],
                          generate["completion_tokens"]), (3, 0, 2))
        self.assertGreater(generate["ttft_ms"], 0)
        self.assertGreaterEqual(generate["ttft_ms"], generate["queue_ms"])

    def test_a_request_refused_for_memory_keeps_its_prompt_tokens(self):
        server = Server("--log-format", "json", "--kv-device-bytes", "1024")
        try:
            with self.assertRaises(grpc.RpcError) as raised:
                server.stub.Generate(gen.GenerateRequest(
                    token_ids=gen.TokenIds(ids=[1, 2, 3, 4]),
                    sampling=gen.SamplingParams(max_new_tokens=100, ignore_eos=True)),
                    metadata=[("x-request-id", "too-big")], timeout=CALL_TIMEOUT_S)
            self.assertEqual(raised.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        finally:
            self.assertEqual(server.stop(), 0, server.stderr())
        record = access_records(self, server)["too-big"]
        self.assertEqual(record["prompt_tokens"], 4, record)
        self.assertNotIn("completion_tokens", record)
        self.assertNotIn("ttft_ms", record)


def keys_file_text(entries):
    """A --api-keys-file in YAML: (plaintext key, tenant) -> its SHA-256 entry."""
    return "".join(f"- key_sha256: {hashlib.sha256(key.encode()).hexdigest()}\n"
                   f"  tenant: {tenant}\n  role: user\n" for key, tenant in entries)


class MetricsTest(unittest.TestCase):
    def test_labels_tenants_process_and_buckets(self):
        with tempfile.TemporaryDirectory() as folder:
            keys = os.path.join(folder, "keys.yaml")
            with open(keys, "w", encoding="utf-8") as f:
                f.write(keys_file_text([("search-key", "search"), ("ads-key", "ads")]))
            server = Server("--metrics-listen", "127.0.0.1:0", "--api-keys-file", keys)
            try:
                start = server.metrics()
                server.stub.Generate(short_request(2), timeout=CALL_TIMEOUT_S,
                                     metadata=[("authorization", "Bearer search-key")])
                with self.assertRaises(grpc.RpcError):
                    server.stub.Generate(gen.GenerateRequest(), timeout=CALL_TIMEOUT_S,
                                         metadata=[("authorization", "Bearer ads-key")])
                with self.assertRaises(grpc.RpcError):
                    server.stub.Generate(short_request(2), timeout=CALL_TIMEOUT_S,
                                         metadata=[("authorization", "Bearer stolen")])
                page = server.metrics()
            finally:
                self.assertEqual(server.stop(), 0, server.stderr())
        for tenant in ("search", "ads", "default", "(other)"):
            for gauge in ("waiting", "running"):
                self.assertEqual(sample(start, f'kvserve_tenant_num_requests_{gauge}'
                                               f'{{tenant="{tenant}"}}'), 0, start)
        self.assertEqual(sample(page, 'kvserve_tenant_requests_total{outcome="length",'
                                      'tenant="search"}'), 1, page)
        self.assertEqual(sample(page, 'kvserve_tenant_requests_total{'
                                      'outcome="invalid_argument",tenant="ads"}'), 1, page)
        self.assertEqual(sample(page, 'kvserve_tenant_requests_total{'
                                      'outcome="unauthenticated",tenant="(other)"}'), 1, page)
        # Where K/V lives: one label, location="device"|"host", as for sessions.
        self.assertIsNotNone(sample(page, 'kvserve_kv_cache_bytes{location="device",'
                                          'strategy="dynamic"}'), page)
        self.assertNotIn('device="', page)
        self.assertIn('# HELP kvserve_sessions Open chat sessions: state="live" counts every '
                      'open session, offloaded and evicted ones included', page)
        # 4,096 tokens at 30 tokens/s end in a finite bucket.
        self.assertIsNotNone(sample(page, 'kvserve_e2e_request_latency_seconds_bucket{le="240"}'))
        now = time.time()
        started = sample(page, "process_start_time_seconds")
        self.assertTrue(now - 600 < started <= now + 1, (started, now))
        self.assertGreater(sample(page, "process_resident_memory_bytes"), 0)
        self.assertGreater(sample(page, "process_open_fds"), 2)
        self.assertGreater(sample(page, "process_cpu_seconds_total"), 0)


class VersionTest(unittest.TestCase):
    def test_version_names_the_build_as_its_metrics_do(self):
        code, stdout, stderr = run_kvserve("--version")
        self.assertEqual(code, 0, stderr)
        lines = stdout.splitlines()
        self.assertEqual(len(lines), 4, stdout)
        self.assertTrue(lines[0].startswith("kvserve "), stdout)
        self.assertTrue(lines[1].startswith("git revision "), stdout)
        revision = lines[1][len("git revision "):]
        head = subprocess.run(["git", "-C", SOURCE_DIR, "rev-parse", "HEAD"],
                              capture_output=True, text=True, check=False)
        if head.returncode == 0:  # a checkout: the build names its commit
            self.assertTrue(head.stdout.strip().startswith(revision.removesuffix("-dirty")),
                            (revision, head.stdout))
        server = Server("--metrics-listen", "127.0.0.1:0")
        try:
            page = server.metrics()
        finally:
            self.assertEqual(server.stop(), 0, server.stderr())
        version, torch, cuda = (lines[0][len("kvserve "):], lines[2][len("LibTorch "):],
                                lines[3][len("CUDA "):])
        self.assertEqual(sample(page, f'kvserve_build_info{{cuda="{cuda}",torch="{torch}",'
                                      f'version="{version}"}}'), 1, (stdout, page))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    PATHS["kvserve"] = args.kvserve
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
