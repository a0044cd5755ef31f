#!/usr/bin/python3
"""End-to-end test of beam search, several sequences and logprobs against real kvserve
processes, checked with the independent numpy reference (tests/reference/beam_reference.py).

Model folders come from kvserve-make-model (tiny llama, mistral with a 16-token sliding
window, qwen3 and phi3; the "small" llama, which has the 4 layers the out-of-memory case
needs). Inputs are token ids, so nothing depends on the tokenizer.

Every comparison with the reference uses a prompt whose reference search is well
conditioned: no decision (candidate cut-offs, end-token ranks, hypotheses kept, the done
check) hangs on two scores closer than MARGIN, far above the float32 engine's error; the
prompt (and stop tokens) are the first of a fixed list that qualify. Cases marked
"sensitive" also need a prompt where the option under test (early_stopping, length_penalty,
ignore_eos, the candidate count, ...) changes the reference's result, so that a server
ignoring it fails. Then the sequences, their finish reasons and their order must be the
reference's (final scores closer than MARGIN may swap) and the scores agree within
SCORE_ATOL. Run:
  test_beams.py --kvserve build/server/kvserve --make-model build/model/kvserve-make-model
through scripts/python.sh (ctest's PYTHONPATH).
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True  # keep the source tree clean when ctest runs this
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    prefix_pb2,
    prefix_pb2_grpc,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)
import beam_reference as br  # noqa: E402  pylint: disable=wrong-import-position
import reference_forward  # noqa: E402  pylint: disable=wrong-import-position

PATHS = {}
CALL_TIMEOUT_S = 120 * TIME_SCALE
# A reference decision closer than this is not compared (see the module docstring).
MARGIN = 1e-4
# Scores (sums of float32 log-probabilities over <= 16 tokens) and logprobs.
SCORE_ATOL = 1e-4
LOGPROB_ATOL = 1e-4
# Two reference log-probabilities this close may come out of a float32 engine in either order.
NEAR_TIE = 1e-5
ARCHS = ("llama", "mistral", "qwen3", "phi3")
SEEDS = {"llama": 0, "mistral": 1, "qwen3": 2, "phi3": 3}
FINISH = {br.FINISH_EOS: gen.FINISH_REASON_EOS, br.FINISH_STOP: gen.FINISH_REASON_STOP,
          br.FINISH_LENGTH: gen.FINISH_REASON_LENGTH}
EARLY = {None: br.EARLY_FALSE, gen.EARLY_STOPPING_UNSPECIFIED: br.EARLY_FALSE,
         gen.EARLY_STOPPING_FALSE: br.EARLY_FALSE, gen.EARLY_STOPPING_TRUE: br.EARLY_TRUE,
         gen.EARLY_STOPPING_NEVER: br.EARLY_NEVER}
WORKDIR = ""


def prompt_ids(k, n=24):
    """The k-th prompt of the fixed list: n byte-level ids (3..252)."""
    return [(k * 37 + i * 11 + (i * i) % 7) % 250 + 3 for i in range(n)]


# ----------------------------------------------------------------------------- models


class Model:
    """A model folder and its reference (float64 forward, eos ids)."""

    _cache = {}

    def __init__(self, arch, preset="tiny"):
        self.arch = arch
        self.preset = preset
        self.dir = os.path.join(WORKDIR, f"{arch}-{preset}")
        # A seed per architecture: llama and phi3 of one seed hold the same weights.
        subprocess.run([PATHS["make_model"], "--arch", arch, "--preset", preset, "--seed",
                        str(SEEDS[arch]), "--out", self.dir], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ref = reference_forward.Model(self.dir)
        self.eos = br.model_eos_ids(self.dir)
        self._results = {}

    @classmethod
    def get(cls, arch, preset="tiny"):
        if (arch, preset) not in cls._cache:
            cls._cache[(arch, preset)] = Model(arch, preset)
        return cls._cache[(arch, preset)]

    def greedy(self, prompt, max_new, stops=(), rp=1.0):
        key = ("greedy", tuple(prompt), max_new, tuple(stops), rp)
        if key not in self._results:
            self._results[key] = br.greedy(br.ModelScorer(self.ref, prompt), max_new, self.eos,
                                           stops, False, rp, prompt)
        return self._results[key]

    def beams(self, prompt, case):
        key = ("beams", tuple(prompt), tuple(sorted(case.items())))
        if key not in self._results:
            self._results[key] = br.beam_search(
                br.ModelScorer(self.ref, prompt), case["num_beams"], case["max_new"], self.eos,
                case.get("stops", ()), case.get("ignore_eos", False), EARLY[case.get("early")],
                case.get("lp", 1.0), case.get("n", 1), case.get("rp", 1.0), prompt,
                num_candidates=case.get("num_candidates"),
                end_rank_limit=case.get("end_rank_limit"))
        return self._results[key]


# Stop token ids for a case with stops="auto": the greedy path's tokens at these positions,
# tried in this order with each prompt (the search meets them, so beams finish at varied
# lengths).
STOP_VARIANTS = ((3, 6), (2,), (0, 2), (1, 3), (1,), (1, 2, 3), (0, 1, 2, 3, 4, 5))


def auto_stops(model, prompt, max_new, positions):
    tokens, _, _ = model.greedy(prompt, max_new)
    if max(positions) >= len(tokens):
        return None  # the greedy path ended before
    return tuple(sorted({tokens[i] for i in positions}))


def first_step_top(model, prompt, k):
    """The k most likely first tokens after the prompt (ties: lower id first)."""
    logp = br.log_softmax(model.ref.forward(prompt)[-1])
    return tuple(sorted(br.top_logprobs(logp, k)[0]))


def overridden(case, overrides):
    out = dict(case)
    for key, value in overrides.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def conditioned_beam_case(model, case, prompt_len=24, tries=16):
    """(prompt, case with stops resolved, reference result) for the first prompt of the list
    (and stop variant) whose reference search has a margin >= MARGIN. With case["sensitive"]
    (overrides of the case's fields), the result must also differ from that of the case with
    those overrides (as well conditioned): the option under test changes the outcome there."""
    case = dict(case)
    sensitive = case.pop("sensitive", None)
    rejected = []
    for k in range(tries):
        prompt = prompt_ids(k, prompt_len)
        variants = STOP_VARIANTS if case.get("stops") == "auto" else (None,)
        for positions in variants:
            resolved = dict(case)
            if case.get("stops") == "top3":
                resolved["stops"] = first_step_top(model, prompt, 3)
            elif positions is not None:
                resolved["stops"] = auto_stops(model, prompt, case["max_new"], positions)
                if resolved["stops"] is None:
                    continue
            result = model.beams(prompt, resolved)
            if result.search_margin < MARGIN:
                rejected.append((k, positions, f"margin {result.margin:.1e} {result.margin_where}"))
                continue
            if sensitive:
                alt = model.beams(prompt, overridden(resolved, sensitive))
                outcome = [(h.tokens, h.finish_reason) for h in result.sequences]
                if alt.search_margin < MARGIN or \
                        [(h.tokens, h.finish_reason) for h in alt.sequences] == outcome:
                    rejected.append((k, positions, f"same as with {sensitive}"))
                    continue
            return prompt, resolved, result
    raise AssertionError(f"{model.arch} {case}: no prompt of the list qualifies: {rejected}")


def conditioned_greedy(model, max_new, prompt_len=24, tries=16):
    for k in range(tries):
        prompt = prompt_ids(k, prompt_len)
        tokens, reason, margin = model.greedy(prompt, max_new)
        if margin >= MARGIN:
            return prompt, tokens, reason
    raise AssertionError(f"{model.arch}: no well-conditioned greedy prompt")


# ----------------------------------------------------------------------------- server


class Server(KvserveProcess):
    """A kvserve process on 127.0.0.1:0 (--threads 1, --no-auto-prefix-cache) serving
    `model_dir`, SERVING, with stubs for Generation and PrefixCache and its GetModelInfo."""

    def __init__(self, model_dir, *flags):
        super().__init__(PATHS["kvserve"], ["--model", model_dir, "--threads", "1",
                                            "--no-auto-prefix-cache", *flags])
        channel = self.channel()
        self.gen = gen_grpc.GenerationStub(channel)
        self.prefixes = prefix_pb2_grpc.PrefixCacheStub(channel)
        self.info = self.gen.GetModelInfo(gen.GetModelInfoRequest(), timeout=CALL_TIMEOUT_S)

    def generate(self, request):
        return self.gen.Generate(request, timeout=CALL_TIMEOUT_S)

    def stream(self, request):
        return list(self.gen.GenerateStream(request, timeout=CALL_TIMEOUT_S))


SERVERS = {}


def server_for(arch, preset="tiny"):
    if (arch, preset) not in SERVERS:
        SERVERS[(arch, preset)] = Server(Model.get(arch, preset).dir)
    return SERVERS[(arch, preset)]


def sampling_params(case):
    """SamplingParams for a beam case dict (keys as Model.beams reads them)."""
    s = gen.SamplingParams(max_new_tokens=case["max_new"])
    if case.get("num_beams") is not None:
        s.num_beams = case["num_beams"]
    if case.get("n") is not None:
        s.num_return_sequences = case["n"]
    if case.get("early") is not None:
        s.early_stopping = case["early"]
    if case.get("lp") is not None:
        s.length_penalty = case["lp"]
    if case.get("rp") is not None:
        s.repetition_penalty = case["rp"]
    s.stop_token_ids.extend(case.get("stops", ()))
    if case.get("ignore_eos"):
        s.ignore_eos = True
    return s


def beam_request(prompt, case, strategy="dynamic", prefix="", quantization=None, logprobs=0):
    cache = gen.CacheOptions(cache_implementation=strategy)
    if quantization:
        for field, value in quantization.items():
            setattr(cache.quantization, field, value)
    s = sampling_params(case)
    if logprobs:
        s.logprobs = True
        s.top_logprobs = logprobs
    return gen.GenerateRequest(token_ids=gen.TokenIds(ids=prompt), sampling=s, cache=cache,
                               prefix=prefix)


def describe(response):
    return [(list(s.token_ids), round(s.score, 6) if s.HasField("score") else None,
             gen.FinishReason.Name(s.finish_reason)) for s in response.sequences]


# ----------------------------------------------------------------------------- checks


class BeamCheck(unittest.TestCase):
    """Comparison helpers shared by the test classes."""

    def setUp(self):
        self._started = time.time()

    def tearDown(self):
        print(f"[{self.id().split('.', 1)[1]}: {time.time() - self._started:.1f} s]",
              file=sys.stderr)

    def assert_equals_reference(self, response, result, label):
        """The returned sequences are the reference's, in its order, with its scores and finish
        reasons. The reference's search decisions must be MARGIN apart; final scores closer
        than MARGIN (float32 may order them either way) may come out in either order, the
        boundary to the first sequence not returned included."""
        expected = [(list(h.tokens), round(h.score, 6),
                     gen.FinishReason.Name(FINISH[h.finish_reason])) for h in result.sequences]
        msg = f"{label}\n  server:    {describe(response)}\n  reference: {expected}"
        self.assertGreaterEqual(result.search_margin, MARGIN, msg)
        ranked = result.ranked
        group = [0]  # near-tie group of each reference rank
        for a, b in zip(ranked, ranked[1:]):
            group.append(group[-1] + (a.score - b.score >= MARGIN))
        rank_of = {h.tokens: i for i, h in enumerate(ranked)}
        self.assertEqual(len(response.sequences), len(result.sequences), msg)
        self.assertEqual(len({tuple(s.token_ids) for s in response.sequences}),
                         len(response.sequences), msg)
        for i, seq in enumerate(response.sequences):
            self.assertEqual(seq.index, i, msg)
            tokens = tuple(seq.token_ids)
            self.assertIn(tokens, rank_of, f"sequence {i} is none of the reference's: {msg}")
            hyp = ranked[rank_of[tokens]]
            self.assertEqual(group[rank_of[tokens]], group[i],
                             f"sequence {i} is the reference's {rank_of[tokens]}: {msg}")
            self.assertEqual(seq.finish_reason, FINISH[hyp.finish_reason], msg)
            self.assertTrue(seq.HasField("score"), msg)
            self.assertLessEqual(abs(seq.score - hyp.score), SCORE_ATOL, msg)
        self.assert_first_sequence_repeated(response, msg)

    def assert_first_sequence_repeated(self, response, msg=""):
        first = response.sequences[0]
        self.assertEqual(list(response.token_ids), list(first.token_ids), msg)
        self.assertEqual(response.text, first.text, msg)
        self.assertEqual(response.finish_reason, first.finish_reason, msg)

    def assert_same_response(self, a, b, label, score_atol=0.0):
        msg = f"{label}\n  a: {describe(a)}\n  b: {describe(b)}"
        self.assertEqual(len(a.sequences), len(b.sequences), msg)
        for x, y in zip(a.sequences, b.sequences):
            self.assertEqual(list(x.token_ids), list(y.token_ids), msg)
            self.assertEqual(x.text, y.text, msg)
            self.assertEqual(x.finish_reason, y.finish_reason, msg)
            self.assertEqual(x.HasField("score"), y.HasField("score"), msg)
            if x.HasField("score"):
                self.assertLessEqual(abs(x.score - y.score), score_atol, msg)

    def assert_logprobs(self, model, prompt, sequence, k, label):
        """sequence.logprobs against the reference's log_softmax of the raw logits."""
        tokens = list(sequence.token_ids)
        self.assertEqual(len(sequence.logprobs), len(tokens), label)
        expected = br.token_logprobs(model.ref, prompt, tokens, max(k, 1) + 1)
        for pos, (got, token, (chosen, top)) in enumerate(zip(sequence.logprobs, tokens, expected)):
            where = f"{label} position {pos}"
            self.assertEqual(got.chosen.token_id, token, where)
            self.assertLessEqual(abs(got.chosen.logprob - chosen), LOGPROB_ATOL,
                                 f"{where}: {got.chosen.logprob} vs {chosen}")
            self.assertEqual(len(got.top), k, where)
            ref_full = br.log_softmax(model.ref.forward(prompt + tokens[:pos])[-1])
            for rank, entry in enumerate(got.top):
                want_id, want = top[rank]
                if entry.token_id != want_id:
                    # Only a near tie of the reference may come out in the other order.
                    self.assertLessEqual(abs(ref_full[entry.token_id] - want), NEAR_TIE,
                                         f"{where} rank {rank}: id {entry.token_id} vs {want_id}"
                                         f" ({list(top)})")
                self.assertLessEqual(abs(entry.logprob - ref_full[entry.token_id]), LOGPROB_ATOL,
                                     f"{where} rank {rank}")

    def assert_rpc_error(self, call, code, fields):
        with self.assertRaises(grpc.RpcError) as e:
            call()
        self.assertEqual(e.exception.code(), code, e.exception.details())
        details = e.exception.details()
        self.assertTrue(any(details.startswith(f) for f in fields),
                        f"{details!r} does not start with one of {fields}")


# The beam cases every architecture runs (num_beams 2, 4, 8; early_stopping unset, TRUE,
# NEVER; length_penalty 0.5, 1, 2; num_return_sequences 1 .. num_beams; stop tokens; a
# repetition penalty). "stops": "auto" picks ids from the greedy path (STOP_VARIANTS);
# "sensitive": the prompt is one where the option changes the reference's result.
BEAM_CASES = [
    dict(num_beams=2, n=2, max_new=12),
    dict(num_beams=4, n=3, max_new=12, early=gen.EARLY_STOPPING_TRUE, lp=1.0, stops="auto",
         sensitive={"early": None}),
    dict(num_beams=8, n=8, max_new=10, early=gen.EARLY_STOPPING_NEVER, lp=2.0, stops="auto",
         sensitive={"lp": 1.0}),
    dict(num_beams=4, n=4, max_new=12, lp=2.0, stops="auto", rp=1.3, sensitive={"rp": None}),
    dict(num_beams=8, n=1, max_new=12, lp=0.5, sensitive={"num_beams": 2}),
    dict(num_beams=2, n=2, max_new=12, early=gen.EARLY_STOPPING_NEVER, stops="auto",
         sensitive={"early": None}),
    dict(num_beams=4, n=2, max_new=12, lp=0.5, stops="auto", sensitive={"lp": None}),
    # ignore_eos leaves stop_token_ids ending beams (as greedy decoding does).
    dict(num_beams=4, n=3, max_new=12, stops="auto", ignore_eos=True, sensitive={"stops": None}),
    # The first step's 3 likeliest tokens end beams: the candidates must be (1 + 4) * 2, not
    # 2 * 2, for two beams to run on.
    dict(num_beams=2, n=2, max_new=8, stops="top3", sensitive={"num_candidates": 4}),
    # length_penalty 0 (raw sums): an end token ranked num_beams or worse, which is skipped,
    # would have won.
    dict(num_beams=3, n=3, max_new=10, lp=0.0, stops="auto",
         sensitive={"end_rank_limit": 1 << 30}),
]
# Cases about the model's own end-of-sequence token, which the tiny mistral (seed 1) meets.
EOS_CASES = [
    dict(num_beams=4, n=4, max_new=12, sensitive={"ignore_eos": True}),
    dict(num_beams=4, n=4, max_new=12, ignore_eos=True, sensitive={"ignore_eos": None}),
]
COVERAGE = {"finished": 0, br.FINISH_EOS: 0, br.FINISH_STOP: 0, br.FINISH_LENGTH: 0}


class BeamsEqualTheReference(BeamCheck):
    def run_cases(self, arch, cases, strategies=("dynamic",)):
        model = Model.get(arch)
        server = server_for(arch)
        for case in cases:
            prompt, resolved, result = conditioned_beam_case(model, case)
            COVERAGE["finished"] += result.finished > 0
            for h in result.sequences:
                COVERAGE[h.finish_reason] += 1
            for strategy in strategies:
                label = f"{arch} {strategy} {resolved} prompt {prompt}"
                with self.subTest(arch=arch, strategy=strategy, case=case):
                    response = server.generate(beam_request(prompt, resolved, strategy))
                    self.assert_equals_reference(response, result, label)
                    self.assertEqual(response.cache_report.cache_implementation, strategy)

    def test_llama(self):
        self.run_cases("llama", BEAM_CASES)

    def test_mistral_sliding_window(self):
        # 24-token prompts and up to 12 new tokens against a 16-token window.
        self.run_cases("mistral", BEAM_CASES + EOS_CASES)

    def test_qwen3(self):
        self.run_cases("qwen3", BEAM_CASES)

    def test_phi3(self):
        self.run_cases("phi3", BEAM_CASES)

    def test_cache_strategies(self):
        strategies = ("static", "offloaded", "offloaded_static")
        self.run_cases("llama", BEAM_CASES, strategies)
        self.run_cases("mistral", BEAM_CASES + EOS_CASES, strategies)  # sliding windows
        self.run_cases("qwen3", BEAM_CASES[1:3], strategies)
        self.run_cases("phi3", BEAM_CASES[2:4], strategies)


class QuantizedCaches(BeamCheck):
    """Lossy caches, which the reference does not model: the prompt is quantized when it is
    prefilled (as Transformers' QuantizedCache does, whatever residual_length), so no result
    equals the exact one. Checked: the request runs and returns its sequences, best first; each
    score is the sequence's own reported log-probabilities over its length; those are the
    reference's for that sequence up to the quantization error (a beam continued on another
    beam's rows would be further off); the best score is near the dynamic cache's; the same
    request gives the same result again."""

    # Measured on these models (4-bit keys and values): per-token log-probabilities within
    # 0.51 of the exact ones (hqq, residual 4), fp8 within 0.11; the best score within 0.08 of
    # the dynamic run's. The bounds leave about twice that.
    TOLERANCES = {"quanto": (1.0, 0.2), "hqq": (1.0, 0.2), "fp8": (0.25, 0.2)}
    CONFIGS = [{"backend": "quanto", "residual_length": 128},
               {"backend": "quanto", "residual_length": 4},  # re-quantizes generated tokens
               {"backend": "hqq", "residual_length": 128},
               {"backend": "hqq", "residual_length": 4, "axis_key": 1, "axis_value": 1},
               {"backend": "fp8"}]

    def check(self, arch):
        model = Model.get(arch)
        server = server_for(arch)
        case = dict(num_beams=4, n=4, max_new=10, lp=1.0)
        prompt, resolved, result = conditioned_beam_case(model, case)
        dynamic = server.generate(beam_request(prompt, resolved, logprobs=1))
        self.assert_equals_reference(dynamic, result, f"{arch} dynamic with logprobs")
        for quantization in self.CONFIGS:
            with self.subTest(arch=arch, quantization=quantization):
                token_tol, score_tol = self.TOLERANCES[quantization["backend"]]
                request = beam_request(prompt, resolved, "quantized",
                                       quantization=quantization, logprobs=1)
                response = server.generate(request)
                label = f"{arch} quantized {quantization} prompt {prompt} {resolved}"
                self.assertEqual(response.cache_report.cache_implementation, "quantized", label)
                self.assertEqual(len(response.sequences), 4, label)
                self.assert_first_sequence_repeated(response, label)
                scores = [seq.score for seq in response.sequences]
                self.assertEqual(scores, sorted(scores, reverse=True), label)
                self.assertEqual(len({tuple(seq.token_ids) for seq in response.sequences}), 4,
                                 label)
                for i, seq in enumerate(response.sequences):
                    self.assertEqual(seq.index, i)
                    total = sum(p.chosen.logprob for p in seq.logprobs)
                    self.assertLessEqual(abs(seq.score - total / len(seq.token_ids)), SCORE_ATOL,
                                         label)
                    expected = br.token_logprobs(model.ref, prompt, list(seq.token_ids), 1)
                    worst = max(abs(p.chosen.logprob - c)
                                for p, (c, _) in zip(seq.logprobs, expected))
                    self.assertLessEqual(worst, token_tol, f"{label} sequence {i}: "
                                                           f"{describe(response)}")
                self.assertLessEqual(abs(response.sequences[0].score - dynamic.sequences[0].score),
                                     score_tol, f"{label}\n dynamic {describe(dynamic)}\n"
                                                f" quantized {describe(response)}")
                self.assert_same_response(server.generate(request), response, f"{label} again")

    def test_llama(self):
        self.check("llama")

    def test_qwen3(self):
        self.check("qwen3")

    def test_phi3(self):
        self.check("phi3")


class NamedPrefix(BeamCheck):
    def test_a_registered_prefix_gives_the_same_beams(self):
        model = Model.get("llama")
        server = server_for("llama")
        case = dict(num_beams=4, n=3, max_new=12, early=gen.EARLY_STOPPING_NEVER, lp=2.0,
                    stops="auto")
        full, resolved, result = conditioned_beam_case(model, case, prompt_len=40)
        head, tail = full[:24], full[24:]
        server.prefixes.RegisterPrefix(prefix_pb2.RegisterPrefixRequest(
            name="beam-prefix", token_ids=gen.TokenIds(ids=head)), timeout=CALL_TIMEOUT_S)
        for strategy in ("dynamic", "static"):
            with self.subTest(strategy=strategy):
                with_prefix = server.generate(beam_request(tail, resolved, strategy,
                                                           prefix="beam-prefix"))
                self.assertEqual(with_prefix.cache_report.prefix, "beam-prefix")
                self.assertEqual(with_prefix.usage.cached_tokens, len(head))
                self.assertEqual(with_prefix.usage.prompt_tokens, len(full))
                self.assert_equals_reference(with_prefix, result, f"prefix {strategy} {full}")
                plain = server.generate(beam_request(full, resolved, strategy))
                self.assert_same_response(with_prefix, plain, "prefix vs none", 1e-5)


class Greedy(BeamCheck):
    def test_one_beam_is_greedy(self):
        for arch in ("llama", "mistral"):
            model = Model.get(arch)
            server = server_for(arch)
            prompt, tokens, reason = conditioned_greedy(model, 16)
            plain = server.generate(gen.GenerateRequest(
                token_ids=gen.TokenIds(ids=prompt), sampling=gen.SamplingParams(max_new_tokens=16)))
            self.assertEqual(list(plain.token_ids), tokens, f"{arch} greedy vs reference")
            self.assertEqual(plain.finish_reason, FINISH[reason])
            for extra in ({"num_beams": 1}, {"num_beams": 1, "num_return_sequences": 1},
                          {"num_beams": 1, "early_stopping": gen.EARLY_STOPPING_TRUE},
                          {"num_beams": 1, "early_stopping": gen.EARLY_STOPPING_NEVER,
                           "length_penalty": 2.0}):
                with self.subTest(arch=arch, extra=extra):
                    one = server.generate(gen.GenerateRequest(
                        token_ids=gen.TokenIds(ids=prompt),
                        sampling=gen.SamplingParams(max_new_tokens=16, **extra)))
                    self.assertEqual(len(one.sequences), 1)
                    self.assertFalse(one.sequences[0].HasField("score"), "greedy has no score")
                    self.assert_same_response(one, plain, f"{arch} {extra}")
                    self.assert_first_sequence_repeated(one)

    def test_repetition_penalty_greedy_and_one_beam(self):
        # Greedy penalises logits (not log-probabilities as beam search does): one beam must
        # still be greedy decoding.
        model = Model.get("llama")
        server = server_for("llama")
        for k in range(16):
            prompt = prompt_ids(k)
            tokens, reason, margin = model.greedy(prompt, 16, rp=1.5)
            if margin >= MARGIN:
                break
        for extra in ({}, {"num_beams": 1}):
            one = server.generate(gen.GenerateRequest(
                token_ids=gen.TokenIds(ids=prompt),
                sampling=gen.SamplingParams(max_new_tokens=16, repetition_penalty=1.5, **extra)))
            self.assertEqual(list(one.token_ids), tokens, extra)


class Logprobs(BeamCheck):
    def test_greedy_logprobs_and_top5(self):
        for arch in ("llama", "qwen3"):
            model = Model.get(arch)
            server = server_for(arch)
            prompt, tokens, _ = conditioned_greedy(model, 12)
            response = server.generate(gen.GenerateRequest(
                token_ids=gen.TokenIds(ids=prompt),
                sampling=gen.SamplingParams(max_new_tokens=12, logprobs=True, top_logprobs=5)))
            self.assertEqual(list(response.token_ids), tokens)
            self.assertEqual(len(response.sequences), 1)
            self.assert_logprobs(model, prompt, response.sequences[0], 5, f"{arch} greedy")
            for p in response.sequences[0].logprobs:
                self.assertEqual(p.top[0].token_id, p.chosen.token_id)  # greedy: the top one

    def test_logprobs_without_top(self):
        model = Model.get("llama")
        server = server_for("llama")
        prompt, _, _ = conditioned_greedy(model, 8)
        response = server.generate(gen.GenerateRequest(
            token_ids=gen.TokenIds(ids=prompt),
            sampling=gen.SamplingParams(max_new_tokens=8, logprobs=True)))
        self.assert_logprobs(model, prompt, response.sequences[0], 0, "logprobs only")
        plain = server.generate(gen.GenerateRequest(
            token_ids=gen.TokenIds(ids=prompt), sampling=gen.SamplingParams(max_new_tokens=8)))
        self.assertEqual(len(plain.sequences[0].logprobs), 0)

    def test_beam_logprobs_and_scores(self):
        model = Model.get("mistral")
        server = server_for("mistral")
        case = dict(num_beams=4, n=3, max_new=12, lp=0.5, stops="auto")
        prompt, resolved, result = conditioned_beam_case(model, case)
        response = server.generate(beam_request(prompt, resolved, logprobs=3))
        self.assert_equals_reference(response, result, "beams with logprobs")
        for i, seq in enumerate(response.sequences):
            self.assert_logprobs(model, prompt, seq, 3, f"beam sequence {i}")
            total = sum(p.chosen.logprob for p in seq.logprobs)
            self.assertLessEqual(abs(seq.score - total / len(seq.token_ids) ** 0.5), SCORE_ATOL)

    def test_sampled_logprobs(self):
        model = Model.get("qwen3")
        server = server_for("qwen3")
        prompt = prompt_ids(0)
        response = server.generate(gen.GenerateRequest(
            token_ids=gen.TokenIds(ids=prompt),
            sampling=gen.SamplingParams(max_new_tokens=10, do_sample=True, temperature=1.5,
                                        top_k=0, seed=7, num_return_sequences=2, logprobs=True,
                                        top_logprobs=2)))
        for i, seq in enumerate(response.sequences):
            # Raw log_softmax, before temperature.
            self.assert_logprobs(model, prompt, seq, 2, f"sample {i}")


def sample_request(prompt, n, seed, max_new=12, **extra):
    return gen.GenerateRequest(token_ids=gen.TokenIds(ids=prompt), sampling=gen.SamplingParams(
        max_new_tokens=max_new, do_sample=True, temperature=1.5, top_k=0, seed=seed,
        num_return_sequences=n, **extra))


class Sampling(BeamCheck):
    def test_seeded_samples_repeat_and_differ(self):
        server = server_for("llama")
        prompt = prompt_ids(1)
        first = server.generate(sample_request(prompt, 4, 1234))
        again = server.generate(sample_request(prompt, 4, 1234))
        self.assertEqual(len(first.sequences), 4)
        self.assert_same_response(first, again, "same seed twice")
        self.assertEqual([s.index for s in first.sequences], [0, 1, 2, 3])
        distinct = {tuple(s.token_ids) for s in first.sequences}
        self.assertEqual(len(distinct), 4, describe(first))
        for s in first.sequences:
            self.assertFalse(s.HasField("score"))
        self.assert_first_sequence_repeated(first)
        # Sample i draws from seed + i (SamplingParams.num_return_sequences).
        for i in range(4):
            alone = server.generate(sample_request(prompt, 1, 1234 + i))
            self.assertEqual(list(alone.token_ids), list(first.sequences[i].token_ids),
                             f"sample {i} vs a single sample seeded {1234 + i}")
        other = server.generate(sample_request(prompt, 4, 99))
        self.assertNotEqual(describe(other), describe(first))


class Concurrency(BeamCheck):
    def test_beam_and_greedy_requests_at_once_equal_their_solo_runs(self):
        model = Model.get("llama")
        server = server_for("llama")
        requests = []
        for case in (BEAM_CASES[0], BEAM_CASES[1], BEAM_CASES[2]):
            prompt, resolved, _ = conditioned_beam_case(model, case)
            requests.append(beam_request(prompt, resolved))
        for k in range(3):
            prompt, _, _ = conditioned_greedy(model, 16 + k)
            requests.append(gen.GenerateRequest(token_ids=gen.TokenIds(ids=prompt),
                                                sampling=gen.SamplingParams(max_new_tokens=16 + k)))
        requests.append(sample_request(prompt_ids(2), 3, 5))
        solo = [server.generate(r) for r in requests]
        for _ in range(2):
            results = [None] * len(requests)
            errors = []
            barrier = threading.Barrier(len(requests))

            def run(i):
                try:
                    barrier.wait()
                    results[i] = server.generate(requests[i])
                except Exception as e:  # pylint: disable=broad-except
                    errors.append(e)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(len(requests))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(errors, [])
            for i, (a, b) in enumerate(zip(results, solo)):
                self.assert_same_response(a, b, f"request {i} concurrent vs solo", 1e-5)


class Validation(BeamCheck):
    def test_invalid_combinations_name_the_field(self):
        server = server_for("llama")
        prompt = prompt_ids(0)
        cases = [
            (dict(num_beams=2, num_return_sequences=3), ["sampling.num_return_sequences"]),
            (dict(num_beams=2, do_sample=True), ["sampling.num_beams", "sampling.do_sample"]),
            (dict(num_beams=4, num_beam_groups=2), ["sampling.num_beam_groups"]),
            (dict(logprobs=True, top_logprobs=21), ["sampling.top_logprobs"]),
            (dict(logprobs=True, top_logprobs=-1), ["sampling.top_logprobs"]),
            (dict(num_return_sequences=2), ["sampling.num_return_sequences"]),
            (dict(num_beams=1, num_return_sequences=2), ["sampling.num_return_sequences"]),
            (dict(num_beams=0), ["sampling.num_beams"]),
            (dict(num_beams=-2), ["sampling.num_beams"]),
            (dict(do_sample=True, num_return_sequences=0), ["sampling.num_return_sequences"]),
            (dict(num_beams=2, stop=["a"]), ["sampling.stop", "sampling.num_beams"]),
        ]
        for sampling, fields in cases:
            with self.subTest(sampling=sampling):
                request = gen.GenerateRequest(token_ids=gen.TokenIds(ids=prompt),
                                              sampling=gen.SamplingParams(max_new_tokens=4,
                                                                          **sampling))
                self.assert_rpc_error(lambda r=request: server.generate(r),
                                      grpc.StatusCode.INVALID_ARGUMENT, fields)
                self.assert_rpc_error(lambda r=request: server.stream(r),
                                      grpc.StatusCode.INVALID_ARGUMENT, fields)

    def test_accepted_edge_values(self):
        server = server_for("llama")
        prompt = prompt_ids(0)
        for sampling in (dict(num_beams=1, early_stopping=gen.EARLY_STOPPING_TRUE),
                         dict(num_beams=2, num_beam_groups=1),
                         dict(logprobs=True, top_logprobs=20),
                         dict(num_beams=3, num_return_sequences=3, length_penalty=-1.0)):
            with self.subTest(sampling=sampling):
                response = server.generate(gen.GenerateRequest(
                    token_ids=gen.TokenIds(ids=prompt),
                    sampling=gen.SamplingParams(max_new_tokens=4, **sampling)))
                self.assertEqual(len(response.sequences), sampling.get("num_return_sequences", 1))


class Streaming(BeamCheck):
    def test_several_samples_stream_per_index(self):
        server = server_for("llama")
        request = sample_request(prompt_ids(3), 3, 42, max_new=12, logprobs=True)
        unary = server.generate(request)
        for attempt in range(30):  # the interleaving of the sequences may vary between runs
            messages = server.stream(request)
            label = f"attempt {attempt}: " + "; ".join(
                f"#{j} index {m.index} tokens {list(m.token_ids)} finish "
                f"{gen.FinishReason.Name(m.finish_reason)} usage {m.HasField('usage')}"
                for j, m in enumerate(messages))
            tokens = {i: [] for i in range(3)}
            texts = {i: "" for i in range(3)}
            logprobs = {i: [] for i in range(3)}
            finished = {}
            for m in messages:
                self.assertIn(m.index, tokens, label)
                # finish_reason is on the last message of each sequence.
                self.assertNotIn(m.index, finished,
                                 f"a message of sequence {m.index} after its finish: {label}")
                tokens[m.index] += list(m.token_ids)
                texts[m.index] += m.text
                logprobs[m.index] += [p.chosen.logprob for p in m.logprobs]
                self.assertEqual(len(m.logprobs), len(m.token_ids), label)
                self.assertFalse(m.HasField("score"), label)
                if m.finish_reason != gen.FINISH_REASON_UNSPECIFIED:
                    finished[m.index] = m.finish_reason
            self.assertTrue(messages[-1].HasField("usage"), label)
            self.assertGreater(messages[-1].usage.completion_tokens, 0, label)
            for seq in unary.sequences:
                self.assertEqual(tokens[seq.index], list(seq.token_ids), label)
                self.assertEqual(texts[seq.index], seq.text, label)
                self.assertEqual(finished.get(seq.index), seq.finish_reason, label)
                self.assertEqual(logprobs[seq.index], [p.chosen.logprob for p in seq.logprobs],
                                 label)

    def test_beams_stream_each_final_sequence_once(self):
        model = Model.get("llama")
        server = server_for("llama")
        case = dict(num_beams=4, n=3, max_new=12, lp=2.0, stops="auto")
        prompt, resolved, result = conditioned_beam_case(model, case)
        request = beam_request(prompt, resolved, logprobs=2)
        unary = server.generate(request)
        self.assert_equals_reference(unary, result, "unary beams")
        messages = server.stream(request)
        by_index = {}
        for m in messages:
            if not m.token_ids and not m.HasField("score"):
                continue  # a bare closing message (usage only)
            self.assertNotIn(m.index, by_index, "a beam sequence streamed twice")
            by_index[m.index] = m
        self.assertEqual(sorted(by_index), [0, 1, 2])
        self.assertTrue(messages[-1].HasField("usage"))
        for seq in unary.sequences:
            m = by_index[seq.index]
            self.assertEqual(list(m.token_ids), list(seq.token_ids))
            self.assertEqual(m.text, seq.text)
            self.assertEqual(m.finish_reason, seq.finish_reason)
            self.assertTrue(m.HasField("score"))
            self.assertEqual(m.score, seq.score)
            self.assertEqual(list(m.logprobs), list(seq.logprobs))


class OutOfMemoryFallback(BeamCheck):
    """Transformers' num_beams=40 / num_return_sequences=20 / max_new_tokens=23 /
    early_stopping=True call on a 1000-token prompt, under a KV budget that holds the 1-row
    prompt cache and two layers of the 40-row cache (what an offloaded cache keeps on the
    device) but not every layer: the request must fall back to an offloaded cache and give the
    same beams as without a budget, and as the reference."""

    def test_forty_beams_fall_back_to_an_offloaded_cache(self):
        # The tiny preset has 2 layers, where "two layers fit, all do not" is empty: the small
        # preset (4 layers) is used.
        model = Model.get("llama", "small")
        cfg = model.ref.cfg
        self.assertGreaterEqual(cfg.num_layers, 3)
        # A prompt whose reference search is well conditioned (most are not, with 40 beams).
        prompt = [(i * 13 + (i * i) % 16) % 250 + 3 for i in range(1000)]
        case = dict(num_beams=40, n=20, max_new=23, early=gen.EARLY_STOPPING_TRUE)
        per_token_layer = 2 * cfg.num_kv_heads * cfg.head_dim * 4  # K and V, float32
        # 1022 tokens at the end: 1024 in 16- or 64-token granules.
        final_tokens = -(-(len(prompt) + case["max_new"] - 1) // 64) * 64
        row_layer = final_tokens * per_token_layer
        budget = 3 * 40 * row_layer  # two layers of the 40-row cache fit, four do not
        prompt_cache = cfg.num_layers * final_tokens * per_token_layer
        self.assertLess(2 * 40 * row_layer + prompt_cache, budget)
        self.assertLess(budget, cfg.num_layers * 40 * row_layer)
        request = beam_request(prompt, case)
        unbudgeted = server_for("llama", "small").generate(request)
        self.assertFalse(unbudgeted.cache_report.offload_fallback)
        self.assertEqual(unbudgeted.cache_report.cache_implementation, "dynamic")
        budgeted = Server(model.dir, "--kv-device-bytes", str(budget))
        try:
            fallback = budgeted.generate(request)
        finally:
            budgeted.stop()
        self.assertTrue(fallback.cache_report.offload_fallback,
                        f"--kv-device-bytes {budget}: {fallback.cache_report}")
        self.assertEqual(fallback.cache_report.cache_implementation, "offloaded")
        self.assertEqual(fallback.usage.prompt_tokens, len(prompt))
        self.assert_same_response(fallback, unbudgeted, "offload fallback vs unbudgeted", 1e-5)
        self.assert_equals_reference(unbudgeted, model.beams(prompt, case), "40 beams")


class Shutdown(BeamCheck):
    """A shutdown whose grace period is over ends running beam and sample requests with
    finish reason CANCELLED and what they have: beam search its best hypotheses so far (with
    scores), samples their partial sequences."""

    def test_shutdown_ends_beams_and_samples_with_their_partial_sequences(self):
        server = Server(Model.get("llama").dir, "--shutdown-grace-seconds", "0")
        results = {}

        def run(name, **sampling):
            request = gen.GenerateRequest(
                token_ids=gen.TokenIds(ids=prompt_ids(5)),
                sampling=gen.SamplingParams(max_new_tokens=4000, ignore_eos=True, **sampling))
            try:
                results[name] = server.gen.Generate(request, timeout=CALL_TIMEOUT_S)
            except grpc.RpcError as e:  # reported below
                results[name] = e

        threads = [threading.Thread(target=run, args=("beams",),
                                    kwargs=dict(num_beams=4, num_return_sequences=2)),
                   threading.Thread(target=run, args=("samples",),
                                    kwargs=dict(do_sample=True, num_return_sequences=3, seed=1))]
        try:
            for t in threads:
                t.start()
            # The tiny model decodes thousands of tokens a second: both are well into their
            # 4,000 tokens when the signal comes.
            time.sleep(2 * TIME_SCALE)
            server.terminate()
            for t in threads:
                t.join(timeout=CALL_TIMEOUT_S)
        finally:
            server.stop()
        beams, samples = results["beams"], results["samples"]
        self.assertIsInstance(beams, gen.GenerateResponse, str(beams))
        self.assertIsInstance(samples, gen.GenerateResponse, str(samples))
        self.assertEqual(beams.finish_reason, gen.FINISH_REASON_CANCELLED)
        self.assertEqual(len(beams.sequences), 2)
        for s in beams.sequences:
            self.assertEqual(s.finish_reason, gen.FINISH_REASON_CANCELLED)
            self.assertTrue(s.HasField("score"))
            self.assertGreater(len(s.token_ids), 0)
            self.assertLess(len(s.token_ids), 4000)
        self.assertGreaterEqual(beams.sequences[0].score, beams.sequences[1].score)
        self.assertEqual(len(samples.sequences), 3)
        for s in samples.sequences:
            self.assertEqual(s.finish_reason, gen.FINISH_REASON_CANCELLED)
            self.assertFalse(s.HasField("score"))
            self.assertGreater(len(s.token_ids), 0)
        self.assertEqual(samples.usage.completion_tokens,
                         sum(len(s.token_ids) for s in samples.sequences))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    parser.add_argument("--make-model", required=True)
    args, rest = parser.parse_known_args()
    PATHS.update(kvserve=args.kvserve, make_model=args.make_model)
    global WORKDIR  # pylint: disable=global-statement
    WORKDIR = tempfile.mkdtemp(prefix="kvserve-beams-")
    started = time.time()
    try:
        program = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    finally:
        for server in SERVERS.values():
            server.stop()
        shutil.rmtree(WORKDIR, ignore_errors=True)
    print(f"coverage of the reference runs: {COVERAGE}; {time.time() - started:.1f} s",
          file=sys.stderr)
    sys.exit(0 if program.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
