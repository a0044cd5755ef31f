#!/usr/bin/python3
"""An independent numpy reference for kvserve's beam search, greedy decoding and logprobs.

The search follows the documented semantics of Transformers 4.4x (BeamSearchScorer and
BeamHypotheses), written again here without sharing code with kvserve:

- Each running beam's next-token scores are log_softmax of its last position's logits; a
  repetition penalty p != 1 is applied to those log-probabilities over the beam's context
  (prompt + its generated tokens, each distinct id once: a negative value is multiplied by p,
  a positive one divided). A candidate's score is that plus the beam's running score. The
  first step has one beam (the prompt) with score 0.
- The top max(2, 1 + number of end tokens) * num_beams candidates over beams x vocabulary
  are taken, best first (ties: lower beam * vocab + token first), and walked in rank order:
  an end token (end-of-sequence ids unless ignore_eos, and stop_token_ids) ranked below
  num_beams finishes a hypothesis, scored sum_logprobs / generated_len ** length_penalty
  (generated_len counts the end token); ranked num_beams or worse it is skipped. Other tokens
  become the next running beams until num_beams of them are chosen.
- Finished hypotheses are kept num_beams at most (the worst dropped, ties: the earliest
  added); the search is done once num_beams are kept and early_stopping says so (True: at
  once; False: when the worst kept beats the step's best candidate normalised at the current
  length; "never": normalised at max_new_tokens when length_penalty > 0).
- If not done after max_new_tokens, every running beam is added with its running score.
  The result is the hypotheses by score, best first (equal scores: the later added first).

The logits come from reference_forward.Model (float64) through an incremental key/value
cache kept here (the prompt's keys are shared by every beam; each beam keeps its generated
tokens' keys), which beam_self_test.py checks against the full-sequence forward.

CLI: beam_reference.py --model DIR --ids 1,2,3 --num-beams 4 --max-new-tokens 8 [...]
prints the result as JSON.
"""

import argparse
import json
import math
import os
import sys

import numpy as np

import reference_forward  # noqa: E402  pylint: disable=wrong-import-position
from reference_forward import ReferenceError  # noqa: E402  pylint: disable=wrong-import-position

# early_stopping values: Transformers' True, False and "never".
EARLY_TRUE = True
EARLY_FALSE = False
EARLY_NEVER = "never"

FINISH_EOS = "eos"
FINISH_STOP = "stop"
FINISH_LENGTH = "length"


def log_softmax(logits):
    """Along the last axis, in float64, max-shifted."""
    x = np.asarray(logits, dtype=np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def repetition_penalty(values, context, penalty):
    """Transformers' RepetitionPenaltyLogitsProcessor on one row: for each distinct id of
    `context`, a negative value is multiplied by `penalty`, a positive one divided."""
    if penalty == 1.0 or len(context) == 0:
        return values
    out = np.array(values, dtype=np.float64, copy=True)
    ids = np.unique(np.asarray(context, dtype=np.int64))
    picked = out[ids]
    out[ids] = np.where(picked < 0, picked * penalty, picked / penalty)
    return out


class Hypothesis:
    """A finished (or, at the end, still running) beam: its generated tokens and score."""

    __slots__ = ("tokens", "score", "sum_logprobs", "finish_reason")

    def __init__(self, tokens, score, sum_logprobs, finish_reason):
        self.tokens = tuple(int(t) for t in tokens)
        self.score = float(score)
        self.sum_logprobs = float(sum_logprobs)
        self.finish_reason = finish_reason

    def as_dict(self):
        return {"tokens": list(self.tokens), "score": self.score,
                "sum_logprobs": self.sum_logprobs, "finish_reason": self.finish_reason}

    def __repr__(self):
        return f"Hypothesis({list(self.tokens)}, {self.score:.6f}, {self.finish_reason})"


class _Margin:
    """The smallest gap between two numbers whose order decided the outcome: how far the
    inputs may move before the result changes (a check against a float32 engine needs it to
    exceed the engine's error)."""

    def __init__(self):
        self.value = math.inf
        self.where = ""

    def note(self, a, b, where):
        gap = abs(float(a) - float(b))
        if gap < self.value:
            self.value = gap
            self.where = where


class Hypotheses:
    """Transformers' BeamHypotheses: at most `capacity` finished beams, with worst_score."""

    def __init__(self, capacity, length_penalty, margin=None):
        self.capacity = capacity
        self.length_penalty = length_penalty
        self.beams = []  # Hypothesis, in insertion order
        self.worst_score = 1e9
        self._margin = margin if margin is not None else _Margin()

    def __len__(self):
        return len(self.beams)

    def add(self, tokens, sum_logprobs, generated_len, finish_reason, where=""):
        score = sum_logprobs / (generated_len ** self.length_penalty)
        if len(self.beams) >= self.capacity:
            self._margin.note(score, self.worst_score, f"{where}: against the worst kept")
        if len(self.beams) < self.capacity or score > self.worst_score:
            self.beams.append(Hypothesis(tokens, score, sum_logprobs, finish_reason))
            if len(self.beams) > self.capacity:
                # The lowest goes; among equal lowest, the first inserted (sorted by
                # (score, index)). worst_score becomes the second lowest.
                ranked = sorted((h.score, i) for i, h in enumerate(self.beams))
                self._margin.note(ranked[0][0], ranked[1][0], f"{where}: dropping the worst")
                del self.beams[ranked[0][1]]
                self.worst_score = ranked[1][0]
            else:
                self.worst_score = min(score, self.worst_score)
            return True
        return False

    def is_done(self, best_sum_logprobs, cur_len, max_new_tokens, early_stopping, where=""):
        """cur_len: tokens generated so far (this step's included)."""
        if len(self.beams) < self.capacity:
            return False
        if early_stopping is EARLY_TRUE:
            return True
        if early_stopping is EARLY_FALSE or self.length_penalty <= 0:
            denominator = cur_len ** self.length_penalty
        elif early_stopping == EARLY_NEVER:
            denominator = max_new_tokens ** self.length_penalty
        else:
            raise ValueError(f"early_stopping {early_stopping!r} is not True, False or 'never'")
        highest_attainable = best_sum_logprobs / denominator
        # When the worst kept hypothesis is the step's top candidate itself, finished at this
        # length, both sides are the same computation and the comparison cannot flip: no
        # margin to note.
        identity = any(h.score == self.worst_score and h.sum_logprobs == best_sum_logprobs
                       and len(h.tokens) ** self.length_penalty == denominator
                       for h in self.beams)
        if not identity:
            self._margin.note(self.worst_score, highest_attainable, f"{where}: done check")
        return self.worst_score >= highest_attainable

    def best(self, n):
        """The n best, best first; equal scores: the later added first (a stable ascending
        sort, then popped from the end)."""
        ranked = sorted(self.beams, key=lambda h: h.score)
        out = []
        for _ in range(min(n, len(ranked))):
            out.append(ranked.pop())
        return out


class BeamResult:
    def __init__(self, sequences, ranked, search_margin, final_margin, steps, finished):
        self.sequences = sequences  # [Hypothesis], best first
        self.ranked = ranked  # every kept hypothesis, best first (sequences is its head)
        # The closest decision (see _Margin): of the search (candidates, end-token ranks,
        # hypotheses kept, the done check), and of the final order of `sequences` (with the
        # boundary to the first one not returned).
        self.search_margin = search_margin.value
        margin = search_margin if search_margin.value <= final_margin.value else final_margin
        self.margin = margin.value
        self.margin_where = margin.where
        self.steps = steps  # decoding steps run
        self.finished = finished  # hypotheses added when an end token was chosen

    def as_dict(self):
        return {"sequences": [h.as_dict() for h in self.sequences], "margin": self.margin,
                "margin_where": self.margin_where, "search_margin": self.search_margin,
                "steps": self.steps, "finished": self.finished}


def _normalise_early_stopping(value):
    if value is None or value is False or value == "false":
        return EARLY_FALSE
    if value is True or value == "true":
        return EARLY_TRUE
    if value == "never":
        return EARLY_NEVER
    raise ValueError(f"early_stopping {value!r} is not True, False or 'never'")


def end_tokens(eos_ids=(), stop_ids=(), ignore_eos=False):
    """The ids that finish a sequence: eos ids (unless ignore_eos) and stop_token_ids."""
    ends = set() if ignore_eos else {int(t) for t in eos_ids}
    return ends | {int(t) for t in stop_ids}


def _finish_reason(token, eos_ids, stop_ids, ignore_eos):
    if not ignore_eos and token in eos_ids:
        return FINISH_EOS
    if token in stop_ids:
        return FINISH_STOP
    return FINISH_LENGTH


def beam_search(scorer, num_beams, max_new_tokens, eos_ids=(), stop_ids=(), ignore_eos=False,
                early_stopping=False, length_penalty=1.0, num_return_sequences=1,
                repetition_penalty_value=1.0, prompt=(), *, num_candidates=None,
                end_rank_limit=None):
    """Beam search over `scorer` (see ModelScorer for the interface). Returns a BeamResult.

    num_candidates (default max(2, 1 + end tokens) * num_beams) and end_rank_limit (default
    num_beams: an end token ranked there or worse is skipped) change those two rules, only so
    that a test can show that its case depends on them."""
    if num_beams < 1 or max_new_tokens < 1:
        raise ValueError("num_beams and max_new_tokens must be >= 1")
    if not 1 <= num_return_sequences <= num_beams:
        raise ValueError("num_return_sequences must be in [1, num_beams]")
    early_stopping = _normalise_early_stopping(early_stopping)
    eos_set = {int(t) for t in eos_ids}
    stop_set = {int(t) for t in stop_ids}
    ends = end_tokens(eos_set, stop_set, ignore_eos)
    keep = num_candidates or max(2, 1 + len(ends)) * num_beams
    end_rank_limit = end_rank_limit or num_beams
    margin = _Margin()
    hyps = Hypotheses(num_beams, length_penalty, margin)
    prompt = [int(t) for t in prompt]

    logits = np.asarray(scorer.start(), dtype=np.float64)[None, :]
    beams = [()]  # generated tokens of each running beam
    beam_scores = np.zeros(1)
    finished = 0
    done = False
    steps = 0
    for t in range(1, max_new_tokens + 1):
        steps = t
        logp = log_softmax(logits)
        if repetition_penalty_value != 1.0:
            logp = np.stack([repetition_penalty(row, prompt + list(beam), repetition_penalty_value)
                             for row, beam in zip(logp, beams)])
        vocab = logp.shape[1]
        flat = (logp + beam_scores[:, None]).ravel()
        order = np.argsort(-flat, kind="stable")  # descending; ties: lower flat index first
        k = min(keep, flat.size)
        ranked = flat[order]
        if k < flat.size:
            margin.note(ranked[k - 1], ranked[k], f"step {t}: candidate {k - 1} vs {k}")
        if num_beams < flat.size and (order[num_beams - 1] % vocab in ends
                                      or order[num_beams] % vocab in ends):
            margin.note(ranked[num_beams - 1], ranked[num_beams],
                        f"step {t}: an end token at rank {num_beams - 1} or {num_beams}")
        next_beams, next_scores, parents, tokens = [], [], [], []
        for rank in range(k):
            b, token = divmod(int(order[rank]), vocab)
            if token in ends:
                if rank >= end_rank_limit:
                    continue
                hyps.add(beams[b] + (token,), ranked[rank], t,
                         _finish_reason(token, eos_set, stop_set, ignore_eos), where=f"step {t}")
                finished += 1
            else:
                next_beams.append(beams[b] + (token,))
                next_scores.append(ranked[rank])
                parents.append(b)
                tokens.append(token)
                if len(next_beams) == num_beams:
                    if rank + 1 < flat.size:
                        margin.note(ranked[rank], ranked[rank + 1],
                                    f"step {t}: last running beam (rank {rank}) vs the next")
                    break
        done = hyps.is_done(ranked[0], t, max_new_tokens, early_stopping, where=f"step {t}")
        beams, beam_scores = next_beams, np.asarray(next_scores, dtype=np.float64)
        if done or t == max_new_tokens or not beams:
            break
        logits = np.asarray(scorer.advance(parents, tokens), dtype=np.float64)
    if not done:
        for beam, score in zip(beams, beam_scores):
            hyps.add(beam, score, steps, FINISH_LENGTH, where="final")
    ranked = hyps.best(len(hyps))
    final = _Margin()
    for a, b in zip(ranked[:num_return_sequences], ranked[1:]):
        final.note(a.score, b.score, "final order")
    return BeamResult(ranked[:num_return_sequences], ranked, margin, final, steps, finished)


def greedy(scorer, max_new_tokens, eos_ids=(), stop_ids=(), ignore_eos=False,
           repetition_penalty_value=1.0, prompt=()):
    """Greedy decoding (argmax of the penalised logits, ties: lower id). Returns
    (tokens, finish_reason, margin): margin is the smallest gap between the best and the
    second-best processed logit over the steps."""
    eos_set = {int(t) for t in eos_ids}
    stop_set = {int(t) for t in stop_ids}
    ends = end_tokens(eos_set, stop_set, ignore_eos)
    context = [int(t) for t in prompt]
    logits = np.asarray(scorer.start(), dtype=np.float64)
    tokens = []
    margin = math.inf
    while True:
        processed = repetition_penalty(logits, context, repetition_penalty_value)
        token = int(np.argmax(processed))
        top2 = np.sort(processed)[-2:]
        margin = min(margin, float(top2[1] - top2[0]))
        tokens.append(token)
        context.append(token)
        if token in ends:
            return tokens, _finish_reason(token, eos_set, stop_set, ignore_eos), margin
        if len(tokens) == max_new_tokens:
            return tokens, FINISH_LENGTH, margin
        logits = np.asarray(scorer.advance([0], [token]), dtype=np.float64)[0]


def top_logprobs(logp, k):
    """(ids, values) of the k largest entries, largest first; ties: lower id first."""
    order = np.lexsort((np.arange(len(logp)), -logp))[:k]
    return [int(i) for i in order], [float(logp[i]) for i in order]


def token_logprobs(model, prompt, tokens, k):
    """For each generated token: (chosen logprob, [(id, logprob)] of the top k), from the
    raw logits' log_softmax (no processing). Uses the full-sequence forward."""
    prompt = [int(t) for t in prompt]
    tokens = [int(t) for t in tokens]
    if not tokens:
        return []
    logits = model.forward(prompt + tokens[:-1])[len(prompt) - 1:]
    out = []
    for row, token in zip(log_softmax(logits), tokens):
        ids, values = top_logprobs(row, k)
        out.append((float(row[token]), list(zip(ids, values))))
    return out


# ----------------------------------------------------------------------------- model scorer


class ModelScorer:
    """Logits of running beams from reference_forward.Model, with a key/value cache.

    start() computes the prompt and returns its last position's logits [vocab]; advance(
    parents, tokens) makes new beam i = old beam parents[i] + tokens[i] and returns the new
    beams' logits [len(parents), vocab]. The prompt's keys and values are computed once and
    shared by every beam; each beam keeps the keys and values of its generated tokens.
    """

    def __init__(self, model, prompt):
        cfg = model.cfg
        if cfg.rope_type == "dynamic":
            # Dynamic NTK changes the frequencies with the length, which a cache of rotated
            # keys does not follow; the full-sequence forward does.
            raise ReferenceError("the cached scorer does not implement dynamic rope scaling")
        self.model = model
        self.cfg = cfg
        self.prompt = [int(t) for t in prompt]
        if not self.prompt:
            raise ReferenceError("the prompt must have at least one token")
        self.group = cfg.num_heads // cfg.num_kv_heads
        self.scale = 1.0 / math.sqrt(cfg.head_dim)
        kv_shape = (cfg.num_kv_heads, 0, cfg.head_dim)
        self.shared = [(np.zeros(kv_shape), np.zeros(kv_shape)) for _ in range(cfg.num_layers)]
        self.rows = None  # per layer (keys, values) [rows, kv_heads, generated, head_dim]

    def _project(self, layer, x, positions):
        """x [rows, m, hidden] -> q [rows, heads, m, d], k and v [rows, kv_heads, m, d]."""
        cfg = self.cfg
        rows, m, _ = x.shape
        q = x @ layer["q"].T + layer["q_bias"]
        k = x @ layer["k"].T + layer["k_bias"]
        v = x @ layer["v"].T + layer["v_bias"]
        q = q.reshape(rows, m, cfg.num_heads, cfg.head_dim).transpose(0, 2, 1, 3)
        k = k.reshape(rows, m, cfg.num_kv_heads, cfg.head_dim).transpose(0, 2, 1, 3)
        v = v.reshape(rows, m, cfg.num_kv_heads, cfg.head_dim).transpose(0, 2, 1, 3)
        if cfg.qk_norm:
            q = reference_forward.rms_norm(q, layer["q_norm"], cfg.rms_norm_eps)
            k = reference_forward.rms_norm(k, layer["k_norm"], cfg.rms_norm_eps)
        seq_len = int(positions[-1]) + 1
        q = reference_forward.apply_rope(q, positions, cfg, seq_len)
        k = reference_forward.apply_rope(k, positions, cfg, seq_len)
        return q, k, v

    @staticmethod
    def _allowed(kind, window, query_pos, key_pos):
        """[m, n] booleans: query position may attend to key position."""
        p = query_pos[:, None]
        k = key_pos[None, :]
        allowed = k <= p
        if kind == "sliding":
            allowed &= k > p - window
        elif kind == "chunked":
            allowed &= (k // window) == (p // window)
        return allowed

    def _run(self, ids):
        """ids [rows, m] at the positions after what is cached; appends their keys and
        values to the rows' cache; returns the last position's logits [rows, vocab]."""
        cfg = self.cfg
        rows, m = ids.shape
        n_shared = self.shared[0][0].shape[1]
        n_rows = self.rows[0][0].shape[2]
        start = n_shared + n_rows
        positions = np.arange(start, start + m)
        key_pos = np.arange(start + m)
        h = self.model.embed[ids]  # [rows, m, hidden]
        for i, (layer, (kind, window)) in enumerate(zip(self.model.layers, cfg.layer_windows)):
            x = reference_forward.rms_norm(h, layer["input_norm"], cfg.rms_norm_eps)
            q, k, v = self._project(layer, x, positions)
            row_k = np.concatenate([self.rows[i][0], k], axis=2)
            row_v = np.concatenate([self.rows[i][1], v], axis=2)
            self.rows[i] = (row_k, row_v)
            shared_k, shared_v = self.shared[i]
            # Query head j uses kv head j // group: [rows, kv_heads, group * m, d].
            qg = q.reshape(rows, cfg.num_kv_heads, self.group * m, cfg.head_dim)
            scores = np.concatenate(
                [np.broadcast_to(qg @ shared_k.transpose(0, 2, 1)[None],
                                 (rows, cfg.num_kv_heads, self.group * m, n_shared)),
                 qg @ row_k.transpose(0, 1, 3, 2)], axis=-1) * self.scale
            allowed = self._allowed(kind, window, positions, key_pos)  # [m, n]
            allowed = np.tile(allowed, (self.group, 1))  # rows of qg: group-major, then m
            scores = np.where(allowed, scores, -np.inf)
            scores = scores - scores.max(axis=-1, keepdims=True)
            probs = np.exp(scores)
            probs = probs / probs.sum(axis=-1, keepdims=True)
            attn = probs[..., :n_shared] @ shared_v[None] + probs[..., n_shared:] @ row_v
            attn = attn.reshape(rows, cfg.num_heads, m, cfg.head_dim).transpose(0, 2, 1, 3)
            attn = attn.reshape(rows, m, cfg.num_heads * cfg.head_dim)
            h = h + attn @ layer["o"].T + layer["o_bias"]
            x = reference_forward.rms_norm(h, layer["post_norm"], cfg.rms_norm_eps)
            h = h + (reference_forward.silu(x @ layer["gate"].T) * (x @ layer["up"].T)) \
                @ layer["down"].T
        last = reference_forward.rms_norm(h[:, -1], self.model.norm, cfg.rms_norm_eps)
        return last @ self.model.lm_head.T

    def start(self):
        cfg = self.cfg
        kv_shape = (cfg.num_kv_heads, 0, cfg.head_dim)
        self.shared = [(np.zeros(kv_shape), np.zeros(kv_shape)) for _ in range(cfg.num_layers)]
        self.rows = [(np.zeros((1,) + kv_shape), np.zeros((1,) + kv_shape))
                     for _ in range(cfg.num_layers)]
        logits = self._run(np.asarray([self.prompt], dtype=np.int64))
        # The prompt's keys become the part every beam shares.
        self.shared = [(k[0], v[0]) for k, v in self.rows]
        self.rows = [(k[:, :, :0], v[:, :, :0]) for k, v in self.rows]
        return logits[0]

    def advance(self, parents, tokens):
        parents = np.asarray(parents, dtype=np.int64)
        self.rows = [(k[parents], v[parents]) for k, v in self.rows]
        return self._run(np.asarray(tokens, dtype=np.int64)[:, None])


class FullForwardScorer:
    """The same interface, recomputing every beam's whole sequence with Model.forward (slow;
    for checking ModelScorer)."""

    def __init__(self, model, prompt):
        self.model = model
        self.prompt = [int(t) for t in prompt]
        self.beams = [[]]

    def start(self):
        self.beams = [[]]
        return self.model.forward(self.prompt)[-1]

    def advance(self, parents, tokens):
        self.beams = [self.beams[p] + [int(t)] for p, t in zip(parents, tokens)]
        return np.stack([self.model.forward(self.prompt + b)[-1] for b in self.beams])


def model_eos_ids(model_dir):
    """eos_token_id of generation_config.json if present, else of config.json, as a list."""
    for name in ("generation_config.json", "config.json"):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            with open(path) as f:
                value = json.load(f).get("eos_token_id")
            if value is not None:
                return [int(v) for v in value] if isinstance(value, list) else [int(value)]
    return []


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--ids", required=True, help="comma-separated prompt token ids")
    parser.add_argument("--num-beams", type=int, default=1, help="1: greedy decoding")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--num-return-sequences", type=int, default=1)
    parser.add_argument("--early-stopping", choices=("false", "true", "never"), default="false")
    parser.add_argument("--length-penalty", type=float, default=1.0)
    parser.add_argument("--repetition-penalty", type=float, default=1.0)
    parser.add_argument("--stop-token-ids", default="", help="comma-separated ids")
    parser.add_argument("--ignore-eos", action="store_true")
    parser.add_argument("--logprobs", type=int, default=-1,
                        help="also print each token's logprob and this many top ones")
    args = parser.parse_args(argv)
    try:
        prompt = [int(t) for t in args.ids.split(",") if t.strip()]
        stops = [int(t) for t in args.stop_token_ids.split(",") if t.strip()]
        model = reference_forward.Model(args.model)
        eos = model_eos_ids(args.model)
        scorer = ModelScorer(model, prompt)
        if args.num_beams == 1:
            tokens, reason, margin = greedy(scorer, args.max_new_tokens, eos, stops,
                                            args.ignore_eos, args.repetition_penalty, prompt)
            out = {"sequences": [{"tokens": tokens, "finish_reason": reason}], "margin": margin}
        else:
            out = beam_search(scorer, args.num_beams, args.max_new_tokens, eos, stops,
                              args.ignore_eos, args.early_stopping, args.length_penalty,
                              args.num_return_sequences, args.repetition_penalty,
                              prompt).as_dict()
        if args.logprobs >= 0:
            for seq in out["sequences"]:
                seq["logprobs"] = token_logprobs(model, prompt, seq["tokens"], args.logprobs)
    except (ReferenceError, ValueError, OSError, KeyError) as e:
        print(f"beam_reference: {e}", file=sys.stderr)
        return 1
    json.dump(out, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
