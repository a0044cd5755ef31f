#!/usr/bin/python3
"""Server rows against llama-server on identical weights, interleaved rounds.

Single requests: one kvserve (--threads T, --no-auto-prefix-cache) and one llama-server (-t T
-c 4096 -np 1, KV f32, flash attention off: its best configuration for these rows in
peer-llamacpp.md) on the same model pair (make_models.py). Per round and side, on the same
token ids for both sides:
  cold    a fresh prompt of 2,032 random token ids, one new token: kvserve's timings.ttft_ms;
          llama-server's timings.prompt_ms (its prompt processing, server side);
  cached  a 2,000-token prefix (fixed for the run) + 32 fresh ids, after the prefix was
          computed once: kvserve with the prefix registered as a named prefix; llama-server
          with cache_prompt (its slot keeps the previous prompt's KV).
Concurrent requests (then, on a second pair of servers: kvserve with its defaults, automatic
prefix caching on; llama-server with -np 8, 8 x 2,560 tokens of context, continuous
batching, cache_prompt):
  concurrent  8 streamed requests sent at once from 8 client processes, whose prompts share a
          fresh 2,000-token prefix (new every round, never seen by either server before) and
          end with 32 ids of their own; 32 new tokens each (greedy, EOS ignored). Both sides
          get the same ids. Reported: mean TTFT measured by the client (send to the first
          token message), mean TTFT from the servers' timings (llama-server's prompt_ms then
          leaves out the time a slot waits for the others' prompts: see servers.py), and the
          generated tokens/s (all 8 x 32 tokens / first send to last answer).
Prints median (min-max) per side and the kvserve/llama.cpp ratio of the medians, after
checking that both servers generate the same 8 greedy tokens for one prompt (the same
function). --json FILE keeps every sample (row, side, round, values).

  scripts/python.sh bench/peer/server_rows.py --peer /work/peer --build build \
      --model bench-small-f32 --rounds 5 \
      [--rows single,concurrent] [--json server_rows.json]
"""
import argparse

import servers  # noqa: E402  pylint: disable=wrong-import-position

PREFIX_TOKENS = 2000
OWN_TOKENS = 32
CONCURRENT = 8
CONCURRENT_NEW_TOKENS = 32


def single_rows(args, model_dir, gguf, fresh, samples):
    kv = servers.Kvserve(args.build, model_dir, args.threads, ["--no-auto-prefix-cache"])
    try:
        ll = servers.LlamaServer(args.peer, gguf, args.threads, parallel=1, ctx_per_slot=4096)
    except BaseException:
        kv.stop()
        raise
    try:
        servers.check_same_function(kv, ll)
        prefix = fresh(PREFIX_TOKENS)
        kv.register_prefix("peer", prefix)
        # Warm-ups: one cold prompt each.
        kv.generate(fresh(64))
        ll.completion(fresh(64))
        for rnd in range(args.rounds):
            cold, suffix, other = fresh(PREFIX_TOKENS + OWN_TOKENS), fresh(OWN_TOKENS), fresh(OWN_TOKENS)
            for side in servers.side_order(rnd):
                if side == servers.KVSERVE:
                    out = kv.generate(cold)
                    cold_values = {"ttft_s": kv.ttft_s(out),
                                   "prompt_tokens_computed": len(cold) - kv.cached_tokens(out)}
                    out = kv.generate(suffix, prefix="peer")
                    cached_values = {"ttft_s": kv.ttft_s(out),
                                     "prompt_tokens_computed": len(prefix) + len(suffix) - kv.cached_tokens(out)}
                else:
                    out = ll.completion(cold)
                    cold_values = {"ttft_s": ll.ttft_s(out),
                                   "prompt_tokens_computed": ll.computed_tokens(out)}
                    ll.completion(prefix + other)  # the slot now holds the prefix
                    out = ll.completion(prefix + suffix)
                    assert out["timings"]["prompt_n"] <= OWN_TOKENS + 8, out["timings"]
                    cached_values = {"ttft_s": ll.ttft_s(out),
                                     "prompt_tokens_computed": ll.computed_tokens(out)}
                samples.append({"row": "cold", "side": side, "round": rnd, "values": cold_values})
                samples.append({"row": "cached", "side": side, "round": rnd, "values": cached_values})
            print(f"round {rnd + 1}/{args.rounds}: single-request rows done", flush=True)
    finally:
        kv.stop()
        ll.stop()


def concurrent_row(args, model_dir, gguf, fresh, samples):
    pools = servers.SenderPools()
    kv = ll = None
    try:
        kv = servers.Kvserve(args.build, model_dir, args.threads)
        ll = servers.LlamaServer(args.peer, gguf, args.threads, parallel=CONCURRENT,
                                 ctx_per_slot=servers.round_up(PREFIX_TOKENS + OWN_TOKENS +
                                                               CONCURRENT_NEW_TOKENS + 64, 512))
        by_side = {servers.KVSERVE: kv, servers.LLAMA: ll}
        # Warm-up: one batch of short distinct prompts each (first-use costs, the connections).
        for server in (kv, ll):
            servers.run_batch(pools, server, [fresh(64) for _ in range(CONCURRENT)], 4)
        for rnd in range(args.rounds):
            prefix = fresh(PREFIX_TOKENS)
            prompts = [prefix + fresh(OWN_TOKENS) for _ in range(CONCURRENT)]
            for side in servers.side_order(rnd):
                values = servers.run_batch(pools, by_side[side], prompts, CONCURRENT_NEW_TOKENS)
                samples.append({"row": "concurrent", "side": side, "round": rnd, "values": values})
            print(f"round {rnd + 1}/{args.rounds}: concurrent row done", flush=True)
    finally:
        pools.close()
        for server in (kv, ll):
            if server is not None:
                server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    servers.add_common_arguments(parser, rounds=5)
    parser.add_argument("--rows", default="single,concurrent",
                        help="single (cold and cached rows), concurrent, or both")
    args = parser.parse_args()
    rows = set(args.rows.split(","))
    if not rows or rows - {"single", "concurrent"}:
        parser.error("--rows takes single, concurrent or single,concurrent")
    model_dir, gguf = servers.model_files(args)
    fresh = servers.fresh_ids(11)
    samples = []
    if "single" in rows:
        single_rows(args, model_dir, gguf, fresh, samples)
    if "concurrent" in rows:
        concurrent_row(args, model_dir, gguf, fresh, samples)

    kv, ll = servers.KVSERVE, servers.LLAMA
    print(f"| {args.model}, {args.threads} threads | kvserve | llama-server | kvserve / llama.cpp |")
    print("|---|---:|---:|---:|")
    if "single" in rows:
        for row, label in (("cold", "cold TTFT, 2,032 tokens, s"),
                           ("cached", "TTFT, 2,000 cached + 32 new, s")):
            print(servers.ratio_row(label, servers.values_of(samples, kv, "ttft_s", row=row),
                                    servers.values_of(samples, ll, "ttft_s", row=row)))
    if "concurrent" in rows:
        what = f"{CONCURRENT} at once, fresh shared {PREFIX_TOKENS:,} + {OWN_TOKENS} own, {CONCURRENT_NEW_TOKENS} new"
        for key, label, digits in (
                ("ttft_client_mean_s", "mean TTFT (client, streamed), s", 3),
                ("ttft_server_mean_s", "mean TTFT (server timings), s", 3),
                ("tokens_per_s", "generated tokens/s", 1),
                ("prompt_tokens_computed", "prompt tokens computed", 0)):
            print(servers.ratio_row(f"{what}: {label}",
                                    servers.values_of(samples, kv, key, row="concurrent"),
                                    servers.values_of(samples, ll, key, row="concurrent"), digits))
    if args.json:
        servers.write_json(args.json, {"script": "server_rows", "model": args.model,
                                       "threads": args.threads, "rounds": args.rounds,
                                       "concurrent": CONCURRENT, "prefix_tokens": PREFIX_TOKENS,
                                       "own_tokens": OWN_TOKENS,
                                       "concurrent_new_tokens": CONCURRENT_NEW_TOKENS}, samples)


if __name__ == "__main__":
    main()
