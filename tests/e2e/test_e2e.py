#!/usr/bin/python3
"""End-to-end test: a Python client and kvctl against a real kvserve process.

Starts `kvserve --listen 127.0.0.1:0 --threads 1` (the embedded tiny model) with
tests/harness/kvserve_launch.py, which reads the port and waits for health SERVING, then
checks unary and streamed generation, cancellation, bad requests, kvctl, and a clean exit on
SIGTERM. Needs ctest's PYTHONPATH (scripts/python.sh sets it); run:
  test_e2e.py --kvserve build/server/kvserve --kvctl build/client/kvctl
"""
import argparse
import json
import os
import subprocess
import sys
import unittest

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    health_pb2,
    health_pb2_grpc,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)

PATHS = {"kvserve": os.environ.get("KVSERVE_BIN"), "kvctl": os.environ.get("KVCTL_BIN")}
SHUTDOWN_TIMEOUT_S = 30 * TIME_SCALE
CALL_TIMEOUT_S = 60 * TIME_SCALE


class KvserveEndToEndTest(unittest.TestCase):
    """One server for every test; the tests run in name order and the last one stops it."""

    server = None

    @classmethod
    def setUpClass(cls):
        for name, path in PATHS.items():
            if not path or not os.access(path, os.X_OK):
                raise AssertionError(f"--{name} must name the built {name} binary, got {path!r}")
        cls.server = KvserveProcess(PATHS["kvserve"], ["--threads", "1"])
        try:
            cls.channel = cls.server.channel()
            cls.stub = gen_grpc.GenerationStub(cls.channel)
            cls.health = health_pb2_grpc.HealthStub(cls.channel)
            cls.info = cls.stub.GetModelInfo(gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S)
        except BaseException:
            cls.server.kill()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.kill()

    # Helpers.

    def prompt_ids(self, seed, length=6):
        """Deterministic token ids within the vocabulary, none of them special."""
        special = set(self.info.eos_token_ids)
        if self.info.HasField("bos_token_id"):
            special.add(self.info.bos_token_id)
        ids, candidate = [], 3 + seed * 7
        while len(ids) < length:
            candidate = (candidate * 31 + 11) % self.info.vocab_size
            if candidate not in special:
                ids.append(candidate)
        return ids

    def greedy_request(self, max_new_tokens=8, **input_field):
        return gen.GenerateRequest(
            sampling=gen.SamplingParams(max_new_tokens=max_new_tokens), **input_field)

    def stream(self, request):
        messages = list(self.stub.GenerateStream(request, timeout=CALL_TIMEOUT_S))
        self.assertTrue(messages, "the stream sent no message")
        return messages

    def check_generated(self, response, max_new_tokens):
        ids = list(response.token_ids)
        self.assertTrue(ids, "no token generated")
        self.assertLessEqual(len(ids), max_new_tokens)
        if response.finish_reason == gen.FINISH_REASON_LENGTH:
            self.assertEqual(len(ids), max_new_tokens)
        else:
            self.assertEqual(response.finish_reason, gen.FINISH_REASON_EOS)
            self.assertIn(ids[-1], list(self.info.eos_token_ids))
        self.assertEqual(response.usage.completion_tokens, len(ids))

    def kvctl(self, *args):
        return subprocess.run([PATHS["kvctl"], "--target", self.server.target, *args],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=CALL_TIMEOUT_S, check=False)

    # Tests, in name order.

    def test_10_health_and_model_info(self):
        status = self.health.Check(health_pb2.HealthCheckRequest(), timeout=CALL_TIMEOUT_S)
        self.assertEqual(status.status, health_pb2.HealthCheckResponse.SERVING)
        self.assertGreater(self.info.vocab_size, 0)
        self.assertGreater(self.info.max_position_embeddings, 0)
        self.assertEqual(len(self.info.layers), self.info.num_layers)

    def test_20_unary_generate_token_ids(self):
        ids = self.prompt_ids(1)
        response = self.stub.Generate(self.greedy_request(token_ids=gen.TokenIds(ids=ids)),
                                      timeout=CALL_TIMEOUT_S)
        self.check_generated(response, 8)
        self.assertEqual(response.usage.prompt_tokens, len(ids))

    def test_21_unary_generate_prompt(self):
        text = "Hello, my name is"
        tokenized = self.stub.Tokenize(gen.TokenizeRequest(text=text), timeout=CALL_TIMEOUT_S)
        self.assertTrue(tokenized.token_ids)
        response = self.stub.Generate(self.greedy_request(prompt=text), timeout=CALL_TIMEOUT_S)
        self.check_generated(response, 8)
        self.assertEqual(response.usage.prompt_tokens, len(tokenized.token_ids))

    def test_30_stream_equals_unary(self):
        for request in (self.greedy_request(token_ids=gen.TokenIds(ids=self.prompt_ids(2))),
                        self.greedy_request(prompt="The quick brown fox")):
            unary = self.stub.Generate(request, timeout=CALL_TIMEOUT_S)
            messages = self.stream(request)
            self.assertEqual("".join(m.text for m in messages), unary.text)
            self.assertEqual([t for m in messages for t in m.token_ids], list(unary.token_ids))
            last = messages[-1]
            self.assertEqual(last.finish_reason, unary.finish_reason)
            self.assertEqual(last.usage.prompt_tokens, unary.usage.prompt_tokens)
            self.assertEqual(last.usage.completion_tokens, unary.usage.completion_tokens)
            for message in messages[:-1]:
                self.assertEqual(message.finish_reason, gen.FINISH_REASON_UNSPECIFIED)

    def test_40_cancel_mid_stream_then_serve_again(self):
        ids = self.prompt_ids(3)
        limit = min(2000, self.info.max_position_embeddings - len(ids))
        if self.info.max_new_tokens_limit > 0:
            limit = min(limit, self.info.max_new_tokens_limit)
        request = gen.GenerateRequest(
            token_ids=gen.TokenIds(ids=ids),
            sampling=gen.SamplingParams(max_new_tokens=limit, ignore_eos=True))
        call = self.stub.GenerateStream(request, timeout=CALL_TIMEOUT_S)
        first = next(call)
        self.assertTrue(first.token_ids)
        call.cancel()
        with self.assertRaises(grpc.RpcError) as raised:
            for _ in call:
                pass
        self.assertEqual(raised.exception.code(), grpc.StatusCode.CANCELLED)

        response = self.stub.Generate(
            self.greedy_request(max_new_tokens=4, token_ids=gen.TokenIds(ids=ids)),
            timeout=CALL_TIMEOUT_S)
        self.check_generated(response, 4)

    def test_50_bad_requests_name_the_field(self):
        bad_temperature = gen.GenerateRequest(
            prompt="hi", sampling=gen.SamplingParams(do_sample=True, temperature=-1))
        cases = [(bad_temperature, "sampling.temperature"),
                 (gen.GenerateRequest(sampling=gen.SamplingParams(max_new_tokens=4)), "input")]
        for request, field in cases:
            for rpc in ("unary", "stream"):
                with self.subTest(field=field, rpc=rpc):
                    with self.assertRaises(grpc.RpcError) as raised:
                        if rpc == "unary":
                            self.stub.Generate(request, timeout=CALL_TIMEOUT_S)
                        else:
                            list(self.stub.GenerateStream(request, timeout=CALL_TIMEOUT_S))
                    self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                    self.assertIn(field, raised.exception.details())
        response = self.stub.Generate(self.greedy_request(max_new_tokens=2, prompt="still there"),
                                      timeout=CALL_TIMEOUT_S)
        self.check_generated(response, 2)

    def test_60_kvctl(self):
        health = self.kvctl("health")
        self.assertEqual(health.returncode, 0, health.stderr)
        self.assertEqual(health.stdout.strip(), "SERVING")

        generate = self.kvctl("--output", "json", "generate", "--prompt", "Hello",
                              "--max-new-tokens", "4")
        self.assertEqual(generate.returncode, 0, generate.stderr)
        response = json.loads(generate.stdout)
        self.assertIn(response["finishReason"], ("FINISH_REASON_LENGTH", "FINISH_REASON_EOS"))
        self.assertTrue(1 <= len(response["tokenIds"]) <= 4, response)

        stream = self.kvctl("--output", "json", "stream", "--prompt", "Hello",
                            "--max-new-tokens", "4")
        self.assertEqual(stream.returncode, 0, stream.stderr)
        messages = [json.loads(line) for line in stream.stdout.splitlines()]
        self.assertEqual([t for m in messages for t in m["tokenIds"]], response["tokenIds"])
        self.assertEqual("".join(m["text"] for m in messages), response["text"])

        bad = self.kvctl("generate", "--prompt", "x", "--do-sample", "--temperature", "-1")
        self.assertEqual(bad.returncode, 1)
        self.assertIn("INVALID_ARGUMENT", bad.stderr)
        self.assertIn("sampling.temperature", bad.stderr)

        bench = self.kvctl("--output", "json", "bench", "--concurrency", "2", "--requests", "3",
                           "--prompt-tokens", "4", "--max-new-tokens", "3", "--warmup", "0")
        self.assertEqual(bench.returncode, 0, bench.stderr)
        report = json.loads(bench.stdout)
        self.assertEqual(report["errors"], 0, report)
        self.assertEqual(report["succeeded"], 3)
        self.assertEqual(report["output_tokens"], 9)  # ignore_eos: exactly 3 each

    def test_90_sigterm_exits_cleanly(self):
        self.server.terminate()
        try:
            code = self.server.wait(SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.fail(f"kvserve still running {SHUTDOWN_TIMEOUT_S} s after SIGTERM\n"
                      f"{self.server.log_tail()}")
        self.assertEqual(code, 0, self.server.log_tail())


def main():
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kvserve", default=PATHS["kvserve"])
    parser.add_argument("--kvctl", default=PATHS["kvctl"])
    args, rest = parser.parse_known_args()
    PATHS.update(kvserve=args.kvserve, kvctl=args.kvctl)
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False).result
    server = KvserveEndToEndTest.server
    if not result.wasSuccessful() and server is not None:
        server.print_log_tail()
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
