#!/usr/bin/python3
"""A 10-turn chat with and without a session, on one kvserve process (bench-small by default).

Each turn adds a user message of about --user-tokens tokens and generates --answer-tokens
tokens (ignore_eos, greedy). Four ways of running conversations of that shape (each run has
words of its own, so that no run is served from another's cached prompts), interleaved for
--rounds rounds (each round runs every way once, in turn):

  messages            no session: the whole conversation as `messages` each turn (automatic
                      prefix reuse on, as the server runs by default)
  messages+session    the same requests naming a session
  tokens              no session: the whole history as `token_ids` (earlier prompts and the
                      generated ids), then the new user message's ids
  tokens+session      a session, each turn appending only the new message's ids

Reported per way (median over rounds, with the range): prompt tokens computed over the 10
turns (sum of usage.prompt_tokens - usage.cached_tokens), and the last turn's TTFT (the
server's timings.ttft_ms). Needs ctest's PYTHONPATH (scripts/python.sh sets it). Example:
  scripts/python.sh bench/sessions_chat.py --kvserve build/server/kvserve \
      --make-model build/model/kvserve-make-model
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, ".."))
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    session_pb2 as ses,
    session_pb2_grpc as ses_grpc,
)
from kvserve_launch import KvserveProcess  # noqa: E402  pylint: disable=wrong-import-position

WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray").split()


def user_text(run, turn, n_words):
    # Each run's conversation is its own: the automatic prefix cache must not serve one run
    # from another.
    words = [WORDS[(run * 5 + turn * 7 + i * (run % 3 + 1)) % len(WORDS)] for i in range(n_words)]
    return f"Conversation {run}, turn {turn}: " + " ".join(words)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvserve", required=True)
    ap.add_argument("--make-model", required=True)
    ap.add_argument("--preset", default="bench-small")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--user-words", type=int, default=30, help="about 2 tokens per word")
    ap.add_argument("--answer-tokens", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="kvserve-sessions-bench-")
    model = os.path.join(work, "model")
    subprocess.run([args.make_model, "--arch", "llama", "--preset", args.preset, "--out", model],
                   check=True, stderr=subprocess.DEVNULL)
    config_path = os.path.join(model, "tokenizer_config.json")
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(SOURCE, "tests", "tokenizer_reference", "llama2_chat_template.jinja"),
              encoding="utf-8") as f:
        config["chat_template"] = f.read()
    with open(config_path, "w", encoding="utf-8") as f:
        json.dump(config, f)

    server = KvserveProcess(args.kvserve, ["--model", model, "--threads", str(args.threads)],
                            log_path=os.path.join(work, "kvserve.log"), start_timeout_s=120)
    channel = server.channel()
    g = gen_grpc.GenerationStub(channel)
    s = ses_grpc.SessionsStub(channel)
    sampling = gen.SamplingParams(max_new_tokens=args.answer_tokens, ignore_eos=True)
    system = "You are a helpful assistant. Answer briefly, precisely and politely."

    runs = [0]

    def run(way):
        runs[0] += 1
        conversation = runs[0]
        session = ""
        if way.endswith("+session"):
            session = s.CreateSession(ses.CreateSessionRequest(), timeout=60).id
        messages = [gen.ChatMessage(role="system", content=f"{conversation}. {system}")]
        history = []  # token ids (the "tokens" ways)
        computed = 0
        last_ttft = 0.0
        for t in range(args.turns):
            content = user_text(conversation, t, args.user_words)
            if way.startswith("messages"):
                messages.append(gen.ChatMessage(role="user", content=content))
                request = gen.GenerateRequest(messages=gen.ChatMessages(messages=messages),
                                              session=session, sampling=sampling)
            else:
                new_ids = list(g.Tokenize(gen.TokenizeRequest(
                    text=content, add_special_tokens=(t == 0)), timeout=60).token_ids)
                ids = new_ids if session else history + new_ids
                request = gen.GenerateRequest(token_ids=gen.TokenIds(ids=ids), session=session,
                                              sampling=sampling)
                history += new_ids
            reply = g.Generate(request, timeout=600)
            computed += reply.usage.prompt_tokens - reply.usage.cached_tokens
            last_ttft = reply.timings.ttft_ms
            if way.startswith("messages"):
                messages.append(gen.ChatMessage(role="assistant", content=reply.text))
            else:
                history += list(reply.token_ids)
        if session:
            s.CloseSession(ses.CloseSessionRequest(id=session), timeout=60)
        return computed, last_ttft, reply.usage.prompt_tokens

    ways = ["messages", "messages+session", "tokens", "tokens+session"]
    results = {w: [] for w in ways}
    try:
        run("messages")  # warm-up
        for _ in range(args.rounds):
            for w in ways:
                results[w].append(run(w))
    finally:
        server.close()

    print(f"{args.turns} turns, ~{args.user_words} words per user message, "
          f"{args.answer_tokens} answer tokens, {args.preset}, --threads {args.threads}, "
          f"{args.rounds} rounds")
    print(f"{'way':18} {'last prompt':>11} {'computed (median, range)':>26} "
          f"{'last-turn TTFT ms (median, range)':>36}")
    for w in ways:
        comp = [r[0] for r in results[w]]
        ttft = [r[1] for r in results[w]]
        print(f"{w:18} {results[w][-1][2]:>11} {statistics.median(comp):>10.0f} "
              f"({min(comp)}-{max(comp)}) {statistics.median(ttft):>14.1f} "
              f"({min(ttft):.1f}-{max(ttft):.1f})")


if __name__ == "__main__":
    main()
