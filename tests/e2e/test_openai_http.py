"""The OpenAI-compatible HTTP API (--http-listen) of a real kvserve, through the official
`openai` npm package (tests/openai/, installed by its setup.sh; skipped without Node.js or the
package) and raw HTTP: chat and completions, streaming with usage, n, logprobs, stop, seeds,
errors (401, 400 naming the parameter, 404 model, 429 from a full queue and a full worker pool),
cached_tokens on a repeated system prompt and on a cache_control breakpoint, tenants, a curl
that aborts its stream, 100 concurrent streams of which 30 disconnect, hostile bodies. Run:
  test_openai_http.py --kvserve build/server/kvserve --make-model build/model/kvserve-make-model
"""
import argparse
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
from kvserve_fixtures import (  # noqa: E402  pylint: disable=wrong-import-position
    Certificates,
    write_api_keys_file,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
    refused_start,
)

PATHS = {}
SDK_DIR = os.path.join(SOURCE, "tests", "openai")
TEMPLATE = os.path.join(SOURCE, "tests", "tokenizer_reference", "llama2_chat_template.jinja")
KEYS = (("key-alpha", "alpha", "user"), ("key-beta", "beta", "user"))
WAIT_S = 30 * TIME_SCALE


def make_model(directory):
    subprocess.run([PATHS["make_model"], "--arch", "llama", "--preset", "tiny", "--out",
                    directory], check=True, stderr=subprocess.DEVNULL)
    path = os.path.join(directory, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    with open(TEMPLATE, encoding="utf-8") as f:
        config["chat_template"] = f.read()
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)


class Server(KvserveProcess):
    def __init__(self, model, keys_file, *flags):
        super().__init__(PATHS["kvserve"], ["--model", model, "--threads", "1", "--http-listen",
                                            "127.0.0.1:0", "--api-keys-file", keys_file,
                                            "--metrics-listen", "127.0.0.1:0", *flags])
        self.model = os.path.basename(model)

    def connection(self):
        return http.client.HTTPConnection("127.0.0.1", self.http_port, timeout=WAIT_S)

    def request(self, method, path, body=None, headers=None, key="key-alpha"):
        """(status, parsed JSON or text, headers) of one request on a new connection."""
        conn = self.connection()
        all_headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
        all_headers.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        conn.request(method, path, body=body, headers=all_headers)
        response = conn.getresponse()
        data = response.read()
        conn.close()
        try:
            data = json.loads(data)
        except ValueError:
            data = data.decode("utf-8", "replace")
        return response.status, data, dict(response.getheaders())

    def chat_body(self, content="Hello", **extra):
        return {"model": self.model, "messages": [{"role": "user", "content": content}],
                "max_tokens": 4, "temperature": 0, **extra}

    def wait_idle(self):
        """Waits until the engine runs and queues nothing; the last metrics."""
        deadline = time.monotonic() + WAIT_S
        while True:
            m = self.metrics()
            if (m.get("kvserve_num_requests_running", 1) == 0 and
                    m.get("kvserve_num_requests_waiting", 1) == 0):
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"requests still live: {m.get('kvserve_num_requests_running')}")
            time.sleep(0.05)


def open_stream(server, body, request_id=None):
    """A streaming request's connection and response, once its first event arrived."""
    conn = server.connection()
    # As the SDKs do: a stream must still come uncompressed, event by event.
    headers = {"Authorization": "Bearer key-alpha", "Content-Type": "application/json",
               "Accept-Encoding": "gzip, deflate, br"}
    if request_id:
        headers["x-request-id"] = request_id
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(), headers=headers)
    response = conn.getresponse()
    return conn, response


class OpenAiHttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="kvserve-openai-")
        cls.model = os.path.join(cls.dir, "tiny-chat")
        make_model(cls.model)
        cls.keys = write_api_keys_file(os.path.join(cls.dir, "keys.yaml"), KEYS)
        cls.server = Server(cls.model, cls.keys, "--http-workers", "160")

    @classmethod
    def tearDownClass(cls):
        cls.server.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def node(self, scenario, server):
        if shutil.which("node") is None or not os.path.isdir(
                os.path.join(SDK_DIR, "node_modules", "openai")):
            self.skipTest("Node.js or the openai package (tests/openai/setup.sh) is missing")
        env = dict(os.environ, KVSERVE_BASE_URL=f"http://127.0.0.1:{server.http_port}/v1",
                   KVSERVE_MODEL=server.model, KVSERVE_KEY_A="key-alpha", KVSERVE_KEY_B="key-beta")
        done = subprocess.run(["node", os.path.join(SDK_DIR, "sdk_checks.mjs"), scenario],
                              env=env, capture_output=True, text=True, timeout=120 * TIME_SCALE,
                              check=False)
        print(done.stdout, end="", file=sys.stderr)
        self.assertEqual(done.returncode, 0, done.stderr + "\n" + server.log_tail())

    def test_sdk(self):
        self.node("main", self.server)

    def test_sdk_cache_control_breakpoint(self):
        server = Server(self.model, self.keys, "--no-auto-prefix-cache")
        try:
            self.node("breakpoint", server)
        finally:
            server.close()

    def test_cache_control_retention_class(self):
        """A breakpoint's kvserve retention class is the registered prefix's; a bad one is a
        400 naming the parameter."""
        from kvserve_stubs import (  # pylint: disable=import-outside-toplevel
            auth_metadata,
            prefix_pb2,
            prefix_pb2_grpc,
        )
        system = "You answer briefly. " * 6
        body = {"model": self.server.model, "max_tokens": 2, "temperature": 0,
                "messages": [{"role": "system", "content": [
                    {"type": "text", "text": system,
                     "cache_control": {"type": "ephemeral", "retention": "low"}}]},
                             {"role": "user", "content": "Hi"}]}
        status, answer, _ = self.server.request("POST", "/v1/chat/completions", body,
                                                key="key-beta")
        self.assertEqual(status, 200, answer)
        stub = prefix_pb2_grpc.PrefixCacheStub(self.server.channel())
        listed = stub.ListPrefixes(prefix_pb2.ListPrefixesRequest(),
                                   metadata=auth_metadata("key-beta"), timeout=WAIT_S)
        classes = {p.name: (p.options.retention, p.options.pinned, p.options.ttl_seconds)
                   for p in listed.prefixes if p.name.startswith("cache-control-")}
        self.assertEqual(list(classes.values()), [("low", False, 300)], classes)
        body["messages"][0]["content"][0]["cache_control"]["retention"] = "forever"
        status, answer, _ = self.server.request("POST", "/v1/chat/completions", body,
                                                key="key-beta")
        self.assertEqual(status, 400, answer)
        self.assertEqual(answer["error"]["param"], "messages[0].content[0].cache_control.retention")

    def test_health_and_request_ids(self):
        status, body, headers = self.server.request("GET", "/health", key="")
        self.assertEqual((status, body), (200, {"status": "ok"}))
        status, body, headers = self.server.request("POST", "/v1/completions",
                                                    {"model": self.server.model, "prompt": "Hi",
                                                     "max_tokens": 2},
                                                    headers={"x-request-id": "my-id-1"})
        self.assertEqual(status, 200, body)
        self.assertEqual(headers["x-request-id"], "my-id-1")
        self.assertEqual(body["id"], "cmpl-my-id-1")
        self.assertIn("request_id=my-id-1", self.server.log_text())
        status, body, _ = self.server.request("POST", "/v1/chat/completions",
                                              self.server.chat_body(),
                                              headers={"x-kvserve-timeout-ms": "soon"})
        self.assertEqual(status, 400)
        self.assertEqual(body["error"]["param"], "x-kvserve-timeout-ms")
        # A deadline the generation cannot meet: 504, and nothing left running.
        status, body, _ = self.server.request(
            "POST", "/v1/chat/completions",
            self.server.chat_body(max_tokens=3000, kvserve={"ignore_eos": True}),
            headers={"x-kvserve-timeout-ms": "200"})
        self.assertEqual(status, 504, body)
        self.assertEqual(body["error"]["type"], "timeout_error")
        self.server.wait_idle()
        metrics = self.server.metrics()
        self.assertGreaterEqual(
            metrics.get('kvserve_http_requests_total{method="POST",path="/v1/completions",'
                        'status="200"}', 0), 1, [k for k in metrics if "http" in k])

    def test_tls_with_the_grpc_certificates(self):
        if shutil.which("openssl") is None:
            self.skipTest("openssl is not installed")
        folder = os.path.join(self.dir, "certs")
        os.makedirs(folder, exist_ok=True)
        certs = Certificates(folder)
        server = KvserveProcess(PATHS["kvserve"], ["--model", self.model, "--threads", "1",
                                                   "--http-listen", "127.0.0.1:0",
                                                   "--api-keys-file", self.keys],
                                tls=certs.tls())
        try:
            context = ssl.create_default_context(cafile=certs.path("ca.crt"))
            conn = http.client.HTTPSConnection("127.0.0.1", server.http_port, context=context,
                                               timeout=WAIT_S)
            body = {"model": os.path.basename(self.model), "prompt": "Hi", "max_tokens": 2}
            conn.request("POST", "/v1/completions", body=json.dumps(body),
                         headers={"Authorization": "Bearer key-beta",
                                  "Content-Type": "application/json"})
            response = conn.getresponse()
            answer = json.loads(response.read())
            self.assertEqual(response.status, 200, answer)
            self.assertEqual(answer["usage"]["completion_tokens"], 2)
            conn.close()
            self.assertIn("tenant=beta", server.log_text())
            # Plaintext on the TLS port is no HTTP answer.
            plain = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=WAIT_S)
            with self.assertRaises((http.client.HTTPException, OSError)):
                plain.request("GET", "/health")
                plain.getresponse().read()
        finally:
            server.close()

    def test_bad_flags_are_refused(self):
        for flags, message in (
                (["--http-listen", "nowhere"], "--http-listen 'nowhere' is not HOST:PORT"),
                (["--http-listen", "0.0.0.0:0"], "--http-listen '0.0.0.0:0' is not a loopback"),
                (["--http-workers", "0"], "--http-workers must be in [1, 4096]"),
                (["--http-max-body-bytes", "10"], "--http-max-body-bytes must be >= 4096"),
                (["--http-listen", f"127.0.0.1:{self.server.http_port}"], "--http-listen")):
            with self.subTest(flags=flags):
                done = refused_start(PATHS["kvserve"], ["--listen", "127.0.0.1:0", *flags])
                self.assertEqual(done.returncode, 2, done.stderr)
                self.assertIn(message, done.stderr)

    def test_hostile_bodies(self):
        cases = [
            ("malformed JSON", b'{"model": ', {}, 400),
            ("bad UTF-8", b'{"model": "\xff\xfe", "prompt": "x"}', {}, 400),
            ("wrong content type", b"model=x", {"Content-Type": "text/plain"}, 415),
            ("10 MB body", b'{"prompt": "' + b"a" * (10 << 20) + b'"}', {}, 413),
            ("not an object", b"[1, 2]", {}, 400),
        ]
        for name, body, headers, expected in cases:
            with self.subTest(name):
                status, answer, _ = self.server.request("POST", "/v1/completions", body, headers)
                self.assertEqual(status, expected, answer)
                self.assertIsInstance(answer["error"]["message"], str)
                self.assertIn("type", answer["error"])
        status, _, _ = self.server.request("GET", "/health")
        self.assertEqual(status, 200)

    def test_curl_abort_frees_its_request(self):
        body = self.server.chat_body(max_tokens=3000, kvserve={"ignore_eos": True}, stream=True)
        curl = subprocess.Popen(  # pylint: disable=consider-using-with
            ["curl", "-sN", "--noproxy", "*", "-H", "Authorization: Bearer key-alpha",
             "-H", "Content-Type: application/json", "-H", "x-request-id: curl-abort-1",
             "-d", json.dumps(body), f"http://127.0.0.1:{self.server.http_port}/v1/chat/completions"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        first = curl.stdout.readline()
        self.assertTrue(first.startswith(b"data: {"), first)
        curl.kill()
        curl.wait()
        curl.stdout.close()
        self.server.wait_idle()
        deadline = time.monotonic() + WAIT_S
        while "request_id=curl-abort-1" not in self.server.log_text():
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        line = [l for l in self.server.log_text().splitlines() if "request_id=curl-abort-1" in l][0]
        self.assertIn("code=499", line)

    def test_100_streams_30_percent_disconnect(self):
        errors = []

        def run(i):
            try:
                conn, response = open_stream(
                    self.server, self.server.chat_body(f"Stream {i}", max_tokens=40,
                                                       kvserve={"ignore_eos": True}, stream=True))
                if response.status != 200 or response.getheader("Content-Encoding"):
                    errors.append((i, response.status, response.getheader("Content-Encoding")))
                    return
                if i % 10 < 3:
                    response.readline()
                    conn.sock.close()
                    return
                text = response.read().decode()
                if not text.rstrip().endswith("data: [DONE]"):
                    errors.append((i, text[-200:]))
                conn.close()
            except Exception as error:  # pylint: disable=broad-except
                errors.append((i, repr(error)))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.server.wait_idle()
        status, body, _ = self.server.request("POST", "/v1/chat/completions",
                                              self.server.chat_body())
        self.assertEqual(status, 200, body)

    def test_429_full_queue_and_full_pool(self):
        server = Server(self.model, self.keys, "--max-batch-size", "1", "--max-queue", "1",
                        "--http-workers", "2")
        try:
            long = server.chat_body(max_tokens=3000, kvserve={"ignore_eos": True}, stream=True)
            running = open_stream(server, long)
            running[1].readline()
            queued = open_stream(server, long)
            self.assertEqual(queued[1].status, 200)
            # Both workers hold a stream: a third connection is refused by the pool.
            status, body, _ = server.request("POST", "/v1/chat/completions", server.chat_body())
            self.assertEqual(status, 429, body)
            self.assertEqual(body["error"]["type"], "rate_limit_error")
            self.assertIn("--http-workers", body["error"]["message"])
            # A refused request with a large body still reads its 429 (the body is read before
            # the answer: a connection closed with its body unread is reset instead).
            status, body, _ = server.request("POST", "/v1/chat/completions",
                                             server.chat_body("word " * 400_000))
            self.assertEqual(status, 429, body)
            for conn, _ in (running, queued):
                conn.sock.close()
            server.wait_idle()
        finally:
            server.close()
        server = Server(self.model, self.keys, "--max-batch-size", "1", "--max-queue", "1")
        try:
            long = server.chat_body(max_tokens=3000, kvserve={"ignore_eos": True}, stream=True)
            running = open_stream(server, long)
            running[1].readline()
            queued = open_stream(server, long)
            self.assertEqual(queued[1].status, 200)
            # The engine's queue is full.
            status, body, _ = server.request("POST", "/v1/chat/completions", server.chat_body())
            self.assertEqual(status, 429, body)
            self.assertEqual(body["error"]["code"], "rate_limit_exceeded")
            for conn, _ in (running, queued):
                conn.sock.close()
            server.wait_idle()
        finally:
            server.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--make-model", required=True)
    args, rest = parser.parse_known_args()
    PATHS["kvserve"] = args.kvserve
    PATHS["make_model"] = args.make_model
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
