#!/usr/bin/python3
"""Checks beam_reference.py: its search against exhaustive enumeration on toy score tables,
hand-computed cases of the end-token and early-stopping rules, and its cached model scorer
against the full-sequence forward of reference_forward.py.

The toy tables give each context (the tokens generated so far) a fixed distribution over a
vocabulary of four or five tokens, so that every sequence up to the maximum length can be
enumerated and scored directly: sum of log-probabilities / length ** length_penalty, where a
sequence ends at its first end token or at the maximum length.
"""

import math
import sys
import tempfile
import unittest

import numpy as np

sys.dont_write_bytecode = True  # keep the source tree clean when ctest runs this

import beam_reference as br  # noqa: E402
import make_numpy_model  # noqa: E402
import reference_forward  # noqa: E402


class TableScorer:
    """The scorer interface over a function of the generated tokens -> log-probabilities."""

    def __init__(self, table):
        self.table = table
        self.beams = [()]
        self.calls = 0

    def start(self):
        self.beams = [()]
        return self.table(())

    def advance(self, parents, tokens):
        self.calls += 1
        self.beams = [self.beams[p] + (int(t),) for p, t in zip(parents, tokens)]
        return np.stack([self.table(b) for b in self.beams])


def random_table(vocab, seed, end_boost=0.0, end_ids=(0,)):
    """A fixed pseudo-random distribution per context; end_boost raises the end tokens."""

    def table(context):
        rng = np.random.default_rng([seed, len(context)] + [int(t) for t in context])
        logits = rng.normal(size=vocab) * 1.5
        for e in end_ids:
            logits[e] += end_boost
        return br.log_softmax(logits)

    return table


def dict_table(probs):
    """{context tuple: {token: probability}} (each row complete) -> log-probability table."""

    def table(context):
        row = probs[tuple(context)]
        vocab = max(max(r) for r in probs.values()) + 1
        out = np.full(vocab, -np.inf)
        for token, p in row.items():
            out[token] = math.log(p)
        return out

    for context, row in probs.items():
        assert abs(sum(row.values()) - 1.0) < 1e-12, (context, row)
    return table


def exhaustive(table, vocab, max_len, ends, length_penalty):
    """Every sequence (ended by an end token or by max_len) with its score, best first."""
    out = []

    def walk(prefix, total):
        logp = table(prefix)
        for token in range(vocab):
            seq = prefix + (token,)
            s = total + float(logp[token])
            if token in ends or len(seq) == max_len:
                out.append((s / len(seq) ** length_penalty, seq))
            else:
                walk(seq, s)

    walk((), 0.0)
    out.sort(key=lambda x: -x[0])
    return out


class ExhaustiveSearch(unittest.TestCase):
    """Enough beams keep every prefix: the search must then rank every sequence exactly."""

    def check(self, vocab, max_len, eos, stops, ignore_eos, seeds, early_stopping):
        ends = br.end_tokens(eos, stops, ignore_eos)
        for seed in seeds:
            table = random_table(vocab, seed, end_boost=0.5, end_ids=sorted(ends))
            for lp in (1.0, 0.5, 2.0, 0.0, -0.5):
                with self.subTest(seed=seed, length_penalty=lp, early_stopping=early_stopping):
                    expected = exhaustive(table, vocab, max_len, ends, lp)
                    num_beams = len(expected) + 5
                    got = br.beam_search(TableScorer(table), num_beams, max_len, eos, stops,
                                         ignore_eos, early_stopping, lp, len(expected))
                    self.assertEqual([h.tokens for h in got.sequences],
                                     [seq for _, seq in expected])
                    np.testing.assert_allclose([h.score for h in got.sequences],
                                               [s for s, _ in expected], rtol=0, atol=1e-12)
                    for h in got.sequences:
                        last = h.tokens[-1]
                        if last in ends:
                            want = br.FINISH_EOS if (last in eos and not ignore_eos) \
                                else br.FINISH_STOP
                        else:
                            want = br.FINISH_LENGTH
                        self.assertEqual(h.finish_reason, want, h)
                        # No end token inside a sequence.
                        self.assertFalse(set(h.tokens[:-1]) & ends, h)

    def test_one_eos_never(self):
        self.check(4, 5, [0], [], False, range(3), br.EARLY_NEVER)

    def test_one_eos_false(self):
        # With capacity never reached, early_stopping=False never stops early either.
        self.check(4, 5, [0], [], False, range(3, 5), br.EARLY_FALSE)

    def test_eos_and_a_stop_token(self):
        self.check(5, 4, [0], [1], False, range(2), br.EARLY_NEVER)

    def test_ignore_eos_keeps_stop_tokens(self):
        self.check(4, 4, [0], [1], True, range(2), br.EARLY_NEVER)

    def test_without_end_tokens_the_best_path_is_the_most_likely_sequence(self):
        table = random_table(3, 11)
        got = br.beam_search(TableScorer(table), 27, 3, [], [], False, br.EARLY_NEVER, 1.0, 27)
        expected = exhaustive(table, 3, 3, set(), 1.0)
        self.assertEqual(len(expected), 27)
        self.assertEqual([h.tokens for h in got.sequences], [seq for _, seq in expected])


class OneBeamIsGreedy(unittest.TestCase):
    def test_num_beams_1_equals_greedy(self):
        compared = ended = 0
        for seed in range(60):
            table = random_table(6, 100 + seed, end_boost=-1.5, end_ids=(0, 5))
            g_tokens, g_reason, _ = br.greedy(TableScorer(table), 7, [0], [5])
            for early in (br.EARLY_FALSE, br.EARLY_TRUE):
                for lp in (1.0, 0.5, 2.0, -1.0):
                    got = br.beam_search(TableScorer(table), 1, 7, [0], [5], False, early, lp, 1)
                    h = got.sequences[0]
                    self.assertEqual(list(h.tokens), g_tokens, (seed, early, lp))
                    self.assertEqual(h.finish_reason, g_reason)
                    total = sum(float(table(tuple(g_tokens[:i]))[t])
                                for i, t in enumerate(g_tokens))
                    self.assertAlmostEqual(h.score, total / len(g_tokens) ** lp, places=12)
                    compared += 1
            ended += g_reason != br.FINISH_LENGTH
        # The tables end some greedy runs early and let others run to the length limit.
        self.assertGreater(ended, 5)
        self.assertLess(ended, 55)
        self.assertEqual(compared, 60 * 8)


L = math.log


class EndTokenRules(unittest.TestCase):
    """Hand-computed cases; vocabulary {0 (eos), 1, 2, 3}."""

    def run_case(self, probs, num_beams, max_new, early, lp, n, stops=(), **rules):
        return br.beam_search(TableScorer(dict_table(probs)), num_beams, max_new, [0], stops,
                              False, early, lp, n, **rules)

    def assert_result(self, got, expected):
        self.assertEqual([(list(h.tokens), h.finish_reason) for h in got.sequences],
                         [(list(t), r) for t, _, r in expected])
        for h, (_, score, _) in zip(got.sequences, expected):
            self.assertAlmostEqual(h.score, score, places=12)

    def test_an_end_token_ranked_num_beams_or_worse_is_skipped(self):
        # eos 0, stop token 3. Step 1 ranks eos (.35, rank 0: finishes), 1 (.3, runs), stop 3
        # (.2, rank 2 >= num_beams: skipped), 2 (.15, runs). With length_penalty 0 the stop
        # token, had it finished, would have taken the second place (log .2 > log .15).
        probs = {(): {0: .35, 1: .3, 3: .2, 2: .15},
                 (1,): {2: .5, 1: .4, 0: .05, 3: .05},
                 (2,): {1: .5, 2: .4, 0: .05, 3: .05}}
        got = self.run_case(probs, 2, 2, br.EARLY_FALSE, 0.0, 2, stops=[3])
        self.assert_result(got, [((0,), L(.35), "eos"), ((1, 2), L(.15), "length")])
        self.assertEqual(got.finished, 1)
        # Without the rule (what test_beams.py's sensitivity check compares with).
        got = self.run_case(probs, 2, 2, br.EARLY_FALSE, 0.0, 2, stops=[3], end_rank_limit=99)
        self.assert_result(got, [((0,), L(.35), "eos"), ((3,), L(.2), "stop")])

    def test_the_walk_stops_at_num_beams_running_beams(self):
        # Step 1 ranks 1 (.4), 2 (.35), eos (.2): two beams run and the walk stops before the
        # eos. With length_penalty 0 it would have beaten both final beams (log .2 > log .16).
        probs = {(): {1: .4, 2: .35, 0: .2, 3: .05},
                 (1,): {0: .1, 1: .2, 2: .3, 3: .4},
                 (2,): {0: .1, 1: .25, 2: .3, 3: .35}}
        for rules in ({}, {"end_rank_limit": 99}):
            got = self.run_case(probs, 2, 2, br.EARLY_FALSE, 0.0, 2, **rules)
            self.assert_result(got, [((1, 3), L(.16), "length"),
                                     ((2, 3), L(.35 * .35), "length")])
            self.assertEqual(got.finished, 0)

    def test_an_eos_ranked_below_num_beams_finishes(self):
        # The same, with the eos ranked 1: it is kept and is the best result; the final beams
        # [1, 3] (log .16) and [1, 2] (log .12) compete for the second place.
        probs = {(): {1: .4, 0: .35, 2: .2, 3: .05},
                 (1,): {0: .1, 1: .2, 2: .3, 3: .4},
                 (2,): {0: .1, 1: .25, 2: .3, 3: .35}}
        got = self.run_case(probs, 2, 2, br.EARLY_FALSE, 0.0, 2)
        self.assert_result(got, [((0,), L(.35), "eos"), ((1, 3), L(.16), "length")])
        self.assertEqual(got.finished, 1)

    # Step 1: eos (.5) finishes at rank 0; beams [1] (.3), [2] (.15). Step 2: [1, 3] (.15),
    # [1, 0] (.12, rank 1: finishes, score log(.12)/2), [2, 3] (.06). Two hypotheses now.
    # Step 3: [1, 3, 0] (.135) finishes and replaces [1, 0]; [2, 3, 0] (.018) is rank 2.
    EARLY = {(): {0: .5, 1: .3, 2: .15, 3: .05},
             (1,): {3: .5, 0: .4, 1: .05, 2: .05},
             (2,): {3: .4, 1: .3, 2: .2, 0: .1},
             (1, 3): {0: .9, 1: .05, 2: .03, 3: .02},
             (2, 3): {1: .4, 0: .3, 2: .2, 3: .1}}

    def test_early_stopping_true_stops_at_num_beams_hypotheses(self):
        got = self.run_case(self.EARLY, 2, 3, br.EARLY_TRUE, 1.0, 2)
        self.assert_result(got, [((0,), L(.5), "eos"), ((1, 0), L(.12) / 2, "eos")])
        self.assertEqual(got.steps, 2)

    def test_early_stopping_false_continues_while_a_beam_may_do_better(self):
        # After step 2: worst log(.12)/2 = -1.060 < best log(.15)/2 = -0.949: not done.
        got = self.run_case(self.EARLY, 2, 3, br.EARLY_FALSE, 1.0, 2)
        self.assert_result(got, [((1, 3, 0), L(.135) / 3, "eos"), ((0,), L(.5), "eos")])
        self.assertEqual(got.steps, 3)

    # Step 1: eos (.6) finishes; beams [1] (.3), [2] (.08). Step 2: [1, 0] (.15) finishes at
    # rank 0, so the step's best is that eos: worst = log(.15)/2 equals best/2 and
    # early_stopping=False is done; "never" compares with best/3 and goes on, and step 3's
    # [1, 3, 0] (.09 * .95) scores log(.0855)/3 = -0.820 > log(.15)/2 = -0.949.
    NEVER = {(): {0: .6, 1: .3, 2: .08, 3: .02},
             (1,): {0: .5, 3: .3, 1: .12, 2: .08},
             (2,): {3: .6, 0: .2, 1: .15, 2: .05},
             (1, 3): {0: .95, 1: .03, 2: .01, 3: .01},
             (2, 3): {1: .5, 2: .3, 0: .15, 3: .05}}

    def test_early_stopping_false_stops_on_the_current_length_heuristic(self):
        for early in (br.EARLY_FALSE, br.EARLY_TRUE):
            got = self.run_case(self.NEVER, 2, 3, early, 1.0, 2)
            self.assert_result(got, [((0,), L(.6), "eos"), ((1, 0), L(.15) / 2, "eos")])
            self.assertEqual(got.steps, 2)

    def test_early_stopping_never_searches_to_max_new_tokens(self):
        got = self.run_case(self.NEVER, 2, 3, br.EARLY_NEVER, 1.0, 2)
        self.assert_result(got, [((0,), L(.6), "eos"), ((1, 3, 0), L(.3 * .3 * .95) / 3, "eos")])
        self.assertEqual(got.steps, 3)

    def test_the_done_check_uses_the_steps_top_candidate_even_when_it_finished(self):
        # Step 1: 1 (run), eos (rank 1, log .37 = -0.994), 2 (run). Step 2: [1, 0] (.25) is the
        # top candidate and finishes with log(.25)/2 = -0.693; worst -0.994 < -0.693: not
        # done (the best running candidate, [1, 3] at log(.125)/2 = -1.040, would say done).
        # Step 3: [1, 3, 0] (.075) scores -0.863 and replaces [0].
        probs = {(): {1: .5, 0: .37, 2: .1, 3: .03},
                 (1,): {0: .5, 3: .25, 1: .15, 2: .1},
                 (2,): {3: .4, 1: .3, 0: .2, 2: .1},
                 (1, 3): {0: .6, 1: .2, 2: .1, 3: .1},
                 (1, 1): {2: .5, 0: .3, 1: .1, 3: .1}}
        got = self.run_case(probs, 2, 3, br.EARLY_FALSE, 1.0, 2)
        self.assert_result(got, [((1, 0), L(.25) / 2, "eos"), ((1, 3, 0), L(.075) / 3, "eos")])
        self.assertEqual(got.steps, 3)

    def test_never_with_a_non_positive_length_penalty_is_false(self):
        for lp in (0.0, -1.0):
            a = self.run_case(self.NEVER, 2, 3, br.EARLY_NEVER, lp, 2)
            b = self.run_case(self.NEVER, 2, 3, br.EARLY_FALSE, lp, 2)
            self.assertEqual([(h.tokens, h.score) for h in a.sequences],
                             [(h.tokens, h.score) for h in b.sequences])
            self.assertEqual(a.steps, b.steps)

    def test_candidates_grow_with_the_number_of_end_tokens(self):
        # eos 0 and stop token 1: 3 * num_beams candidates. With one beam, step 1 ranks eos
        # (finishes), stop token 1 (rank 1: skipped) and 2, which must still run on; 2 * 1
        # candidates would leave no running beam and return [0] alone.
        probs = {(): {0: .4, 1: .3, 2: .2, 3: .1},
                 (2,): {3: .9, 0: .05, 1: .03, 2: .02}}
        got = self.run_case(probs, 1, 2, br.EARLY_NEVER, 1.0, 1, stops=[1])
        self.assert_result(got, [((2, 3), L(.18) / 2, "length")])
        got = self.run_case(probs, 1, 2, br.EARLY_NEVER, 1.0, 1, stops=[1], num_candidates=2)
        self.assert_result(got, [((0,), L(.4), "eos")])

    def test_exact_ties(self):
        # Step 1: 1 and 2 tie (.4): the lower id is beam 0. Step 2: beams 0 and 1 have the same
        # row, so [1, 3] ties [2, 3] and [1, 1] ties [2, 1] (.12) for the third place: the
        # lower flat index (beam 0) wins. At the end the tied [1, 3] and [2, 3] come out the
        # later added first.
        probs = {(): {1: .4, 2: .4, 3: .15, 0: .05},
                 (1,): {3: .5, 1: .3, 2: .15, 0: .05},
                 (2,): {3: .5, 1: .3, 2: .15, 0: .05},
                 (3,): {2: .5, 1: .2, 3: .2, 0: .1}}
        got = self.run_case(probs, 3, 2, br.EARLY_FALSE, 1.0, 3)
        self.assert_result(got, [((2, 3), L(.2) / 2, "length"), ((1, 3), L(.2) / 2, "length"),
                                 ((1, 1), L(.12) / 2, "length")])
        self.assertEqual(got.margin, 0.0)  # the result hangs on exact ties
        tokens, _, _ = br.greedy(TableScorer(dict_table(probs)), 1)
        self.assertEqual(tokens, [1])
        got = self.run_case(probs, 1, 1, br.EARLY_FALSE, 1.0, 1)
        self.assert_result(got, [((1,), L(.4), "length")])

    def test_finish_reasons_of_eos_and_stop_tokens(self):
        probs = {(): {1: .5, 0: .3, 2: .15, 3: .05},
                 (1,): {3: .6, 0: .2, 1: .12, 2: .08},
                 (2,): {0: .5, 1: .2, 2: .2, 3: .1}}
        got = self.run_case(probs, 2, 2, br.EARLY_NEVER, 1.0, 2, stops=[3])
        # Step 1: 1 (run), eos (rank 1: finishes, log .3), 2 (run). Step 2: [1, 3] (.3) is
        # the stop token at rank 0 (log(.3)/2); [1, 0] (.1, rank 1) scores log(.1)/2 = -1.151
        # > log .3 and drops [0]; [2, 0] (.075) is rank 2, skipped; [1, 1] and [1, 2] run
        # on and lose to both at the end.
        self.assert_result(got, [((1, 3), L(.3) / 2, "stop"), ((1, 0), L(.1) / 2, "eos")])
        self.assertEqual(got.finished, 3)


class HypothesesContainer(unittest.TestCase):
    def test_capacity_drops_the_worst_and_ties_the_earliest(self):
        h = br.Hypotheses(2, 1.0)
        self.assertTrue(h.add((1,), -2.0, 1, "eos"))
        self.assertEqual(h.worst_score, -2.0)
        self.assertTrue(h.add((2,), -2.0, 1, "eos"))
        self.assertTrue(h.add((3, 0), -2.0, 2, "eos"))  # -1.0: beats the worst
        # The two -2.0 tie: the first added, (1,), is dropped; worst is now -2.0 ((2,)).
        self.assertEqual([x.tokens for x in h.beams], [(2,), (3, 0)])
        self.assertEqual(h.worst_score, -2.0)
        self.assertFalse(h.add((4,), -2.0, 1, "eos"))  # not strictly better
        self.assertTrue(h.add((5,), -1.5, 1, "eos"))
        self.assertEqual([x.tokens for x in h.beams], [(3, 0), (5,)])
        self.assertEqual(h.worst_score, -1.5)

    def test_best_puts_the_later_of_equal_scores_first(self):
        h = br.Hypotheses(4, 1.0)
        h.add((1,), -1.0, 1, "eos")
        h.add((2,), -3.0, 1, "eos")
        h.add((3,), -1.0, 1, "eos")
        h.add((4, 0), -1.0, 2, "eos")  # -0.5
        self.assertEqual([x.tokens for x in h.best(4)], [(4, 0), (3,), (1,), (2,)])

    def test_length_penalty_orders_short_and_long(self):
        # A short hypothesis (sum -1.0 over 1 token) and a long one (sum -2.4 over 3).
        for lp, long_first in ((1.0, True), (2.0, True), (0.0, False), (-1.0, False),
                               (0.5, False)):
            h = br.Hypotheses(2, lp)
            h.add((0,), -1.0, 1, "eos")
            h.add((1, 2, 0), -2.4, 3, "eos")
            self.assertEqual(h.best(1)[0].tokens == (1, 2, 0), long_first, lp)
            self.assertAlmostEqual(h.best(2)[0 if long_first else 1].score, -2.4 / 3 ** lp)

    def test_done_checks(self):
        h = br.Hypotheses(2, 1.0)
        h.add((0,), -1.0, 1, "eos")
        self.assertFalse(h.is_done(-100.0, 1, 10, br.EARLY_TRUE))  # fewer than capacity
        h.add((1, 0), -3.0, 2, "eos")  # -1.5: the worst
        self.assertTrue(h.is_done(0.0, 2, 10, br.EARLY_TRUE))
        self.assertTrue(h.is_done(-3.0, 2, 10, br.EARLY_FALSE))  # -1.5 >= -1.5
        self.assertFalse(h.is_done(-2.9, 2, 10, br.EARLY_FALSE))
        self.assertFalse(h.is_done(-3.0, 2, 10, br.EARLY_NEVER))  # -1.5 < -0.3
        self.assertTrue(h.is_done(-15.0, 2, 10, br.EARLY_NEVER))  # -1.5 >= -1.5
        neg = br.Hypotheses(1, -1.0)
        neg.add((0,), -1.0, 1, "eos")
        # length_penalty <= 0: "never" judges at the current length, as False does.
        self.assertTrue(neg.is_done(-0.5, 2, 10, br.EARLY_NEVER))  # -1 >= -0.5 * 2
        self.assertFalse(neg.is_done(-0.4, 2, 10, br.EARLY_NEVER))


class RepetitionPenalty(unittest.TestCase):
    # Logits 1: 0.2, 2: 0.0, 0: -3.0, 3: -3.5 with token 1 in the prompt, penalty 1.5.
    LOGITS = np.array([-3.0, 0.2, 0.0, -3.5])

    def scorer(self):
        return TableScorer(lambda context: self.LOGITS)

    def test_beam_search_penalises_log_probabilities(self):
        # log_softmax(1) * 1.5 = -0.930 < log_softmax(2) = -0.820: token 2 wins.
        lse = math.log(sum(math.exp(x) for x in self.LOGITS))
        got = br.beam_search(self.scorer(), 2, 1, [], [], False, br.EARLY_FALSE, 1.0, 2,
                             repetition_penalty_value=1.5, prompt=[1])
        self.assertEqual([h.tokens for h in got.sequences], [(2,), (1,)])
        self.assertAlmostEqual(got.sequences[0].score, 0.0 - lse, places=12)
        self.assertAlmostEqual(got.sequences[1].score, (0.2 - lse) * 1.5, places=12)

    def test_greedy_penalises_logits(self):
        # 0.2 / 1.5 = 0.133 > 0.0: token 1 stays the argmax.
        tokens, _, _ = br.greedy(self.scorer(), 1, repetition_penalty_value=1.5, prompt=[1])
        self.assertEqual(tokens, [1])
        tokens, _, _ = br.greedy(self.scorer(), 1, repetition_penalty_value=1.5, prompt=[2])
        self.assertEqual(tokens, [1])

    def test_generated_tokens_join_the_context(self):
        # Logits 1: 0.2, 2: 0.1. Step 1 picks 1; step 2 penalises the generated 1: greedy
        # 0.2 / 3 < 0.1, beam search log_softmax(1) * 1.5 = -1.017 < -0.778.
        scorer = lambda: TableScorer(lambda context: np.array([-3.0, 0.2, 0.1, -3.5]))
        tokens, _, _ = br.greedy(scorer(), 2, repetition_penalty_value=3.0)
        self.assertEqual(tokens, [1, 2])
        tokens, _, _ = br.greedy(scorer(), 2, repetition_penalty_value=1.5)
        self.assertEqual(tokens, [1, 1])  # 0.2 / 1.5 > 0.1
        got = br.beam_search(scorer(), 1, 2, [], [], False, br.EARLY_FALSE, 1.0, 1,
                             repetition_penalty_value=1.5)
        self.assertEqual(got.sequences[0].tokens, (1, 2))


class TopLogprobs(unittest.TestCase):
    def test_order_and_ties(self):
        logp = np.array([-2.0, -1.0, -3.0, -1.0, -0.5])
        self.assertEqual(br.top_logprobs(logp, 3), ([4, 1, 3], [-0.5, -1.0, -1.0]))
        self.assertEqual(br.top_logprobs(logp, 0), ([], []))


class CachedScorer(unittest.TestCase):
    """ModelScorer (shared prompt cache + per-beam caches) equals the full forward."""

    CASES = [("llama", {}), ("mistral", {}),  # mistral: sliding window 5
             ("qwen2", {}), ("qwen3", {}), ("phi3", {"sliding_window": 6}),
             ("llama", {"layer_types": ["sliding_attention", "chunked_attention"],
                        "sliding_window": 4, "attention_chunk_size": 5}),
             ("llama", {"rope_scaling": {"rope_type": "llama3", "factor": 4.0,
                                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                         "original_max_position_embeddings": 16}})]
    PROMPT = [5, 17, 42, 3, 96, 0, 11, 64, 8]

    def test_beam_steps_equal_the_full_forward(self):
        for model_type, overrides in self.CASES:
            with self.subTest(model_type=model_type, overrides=overrides), \
                    tempfile.TemporaryDirectory() as tmp:
                make_numpy_model.write_model(tmp, model_type, seed=4, **overrides)
                model = reference_forward.Model(tmp)
                cached = br.ModelScorer(model, self.PROMPT)
                full = br.FullForwardScorer(model, self.PROMPT)
                np.testing.assert_allclose(cached.start(), full.start(), rtol=0, atol=1e-10)
                rng = np.random.default_rng(1)
                rows = 1
                for _ in range(7):  # beams split, merge and reorder
                    new_rows = int(rng.integers(1, 5))
                    parents = rng.integers(0, rows, size=new_rows)
                    tokens = rng.integers(0, model.cfg.vocab_size, size=new_rows)
                    np.testing.assert_allclose(cached.advance(parents, tokens),
                                               full.advance(parents, tokens), rtol=0, atol=1e-10)
                    rows = new_rows
                r1 = br.beam_search(br.ModelScorer(model, self.PROMPT), 3, 6, [1], [], False,
                                    br.EARLY_NEVER, 1.0, 3)
                r2 = br.beam_search(br.FullForwardScorer(model, self.PROMPT), 3, 6, [1], [],
                                    False, br.EARLY_NEVER, 1.0, 3)
                self.assertEqual([h.tokens for h in r1.sequences],
                                 [h.tokens for h in r2.sequences])

    def test_token_logprobs_are_the_forward_log_softmax(self):
        with tempfile.TemporaryDirectory() as tmp:
            make_numpy_model.write_model(tmp, "llama", seed=2)
            model = reference_forward.Model(tmp)
            tokens, _, _ = br.greedy(br.ModelScorer(model, self.PROMPT), 5)
            out = br.token_logprobs(model, self.PROMPT, tokens, 3)
            self.assertEqual(len(out), 5)
            seq = self.PROMPT + tokens
            for i, (chosen, top) in enumerate(out):
                logits = model.forward(seq[: len(self.PROMPT) + i])[-1]
                logp = logits - np.log(np.exp(logits - logits.max()).sum()) - logits.max()
                self.assertAlmostEqual(chosen, logp[tokens[i]], places=10)
                self.assertEqual(top[0][0], tokens[i])  # greedy picks the top token
                self.assertEqual([t for t, _ in top], list(np.argsort(-logp)[:3]))


class Margin(unittest.TestCase):
    def test_margin_is_the_closest_decision(self):
        # Two final beams whose scores differ by log(.5) - log(.4995): the final order.
        probs = {(): {1: .5, 2: .4995, 3: .0005}}
        got = br.beam_search(TableScorer(dict_table(probs)), 2, 1, [], [], False,
                             br.EARLY_FALSE, 1.0, 2)
        self.assertEqual([h.tokens for h in got.sequences], [(1,), (2,)])
        self.assertAlmostEqual(got.margin, L(.5) - L(.4995), places=12)
        self.assertEqual(got.margin_where, "final order")


if __name__ == "__main__":
    unittest.main(verbosity=1)
