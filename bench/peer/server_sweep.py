#!/usr/bin/python3
"""Sweeps of kvserve against llama-server on identical weights, interleaved rounds.

Part "ttft", TTFT against prompt length L (--lengths), on the single-request servers of
server_rows.py (kvserve --no-auto-prefix-cache; llama-server -np 1 -c 4096, KV f32, flash
attention off). Per round, L and side, on the same ids for both sides:
  cold        a fresh prompt of L token ids, one new token;
  prefix_hit  the prompt's first L-32 ids already cached, 32 new ids, one new token: kvserve
              with the L-32 ids registered as a named prefix (deleted afterwards); llama-server
              with cache_prompt after a request of those L-32 ids + 32 others (its one slot
              then holds them).
  TTFT is server-side, as in server_rows.py: kvserve's timings.ttft_ms, llama-server's
  timings.prompt_ms (one request, one slot: no queue on either side).
Part "concurrency", N concurrent requests (--concurrency) with distinct fresh prompts of
--prompt-tokens ids, --new-tokens each (greedy, EOS ignored), streamed from N client
processes released together, on the servers of server_rows.py's concurrent row (kvserve with
its defaults; llama-server with -np max(N), continuous batching). Per round, N and side:
generated tokens/s (all generated tokens / first send to last answer), the mean client TTFT
(send to the first token message) and the mean server-timings TTFT (see servers.py for why
llama-server's understates it under concurrency).

Prints median (min-max) per side and the kvserve/llama.cpp ratio of the medians. --json FILE
keeps every sample: {"row": "ttft_cold" | "ttft_prefix_hit" (with "length") | "concurrency"
(with "concurrency"), "side", "round", "values"}.

  scripts/python.sh bench/peer/server_sweep.py --peer /work/peer --build build \
      --model bench-small-f32 \
      --threads 2 --rounds 3 --lengths 128,512,1024,2032 --concurrency 1,2,4,8 \
      --json server_sweep.json
"""
import argparse

import servers  # noqa: E402  pylint: disable=wrong-import-position

NEW_IN_HIT = 32
SINGLE_CONTEXT = 4096


def ttft_part(args, model_dir, gguf, fresh, samples):
    kv = servers.Kvserve(args.build, model_dir, args.threads, ["--no-auto-prefix-cache"])
    try:
        ll = servers.LlamaServer(args.peer, gguf, args.threads, parallel=1,
                                 ctx_per_slot=SINGLE_CONTEXT)
    except BaseException:
        kv.stop()
        raise
    try:
        servers.check_same_function(kv, ll)
        kv.generate(fresh(64))  # warm-ups
        ll.completion(fresh(64))
        for rnd in range(args.rounds):
            for length in args.lengths:
                cold = fresh(length)
                cached, new, other = fresh(length - NEW_IN_HIT), fresh(NEW_IN_HIT), fresh(NEW_IN_HIT)
                for side in servers.side_order(rnd):
                    if side == servers.KVSERVE:
                        out = kv.generate(cold)
                        cold_values = {"ttft_s": kv.ttft_s(out),
                                       "prompt_tokens_computed": length - kv.cached_tokens(out)}
                        name = f"sweep-{rnd}-{length}"
                        kv.register_prefix(name, cached)
                        try:
                            out = kv.generate(new, prefix=name)
                        finally:
                            kv.delete_prefix(name)
                        hit_values = {"ttft_s": kv.ttft_s(out),
                                      "prompt_tokens_computed": length - kv.cached_tokens(out)}
                    else:
                        out = ll.completion(cold)
                        cold_values = {"ttft_s": ll.ttft_s(out),
                                       "prompt_tokens_computed": ll.computed_tokens(out)}
                        ll.completion(cached + other)  # the slot now holds the cached part
                        out = ll.completion(cached + new)
                        hit_values = {"ttft_s": ll.ttft_s(out),
                                      "prompt_tokens_computed": ll.computed_tokens(out)}
                    if hit_values["prompt_tokens_computed"] > NEW_IN_HIT + 8:
                        raise RuntimeError(f"{side}: no prefix hit at L={length}: {hit_values}")
                    for row, values in (("ttft_cold", cold_values), ("ttft_prefix_hit", hit_values)):
                        samples.append({"row": row, "length": length, "side": side,
                                        "round": rnd, "values": values})
            print(f"round {rnd + 1}/{args.rounds}: TTFT sweep done", flush=True)
    finally:
        kv.stop()
        ll.stop()


def concurrency_part(args, model_dir, gguf, fresh, samples):
    pools = servers.SenderPools()
    kv = ll = None
    top = max(args.concurrency)
    try:
        kv = servers.Kvserve(args.build, model_dir, args.threads)
        ll = servers.LlamaServer(args.peer, gguf, args.threads, parallel=top,
                                 ctx_per_slot=servers.round_up(args.prompt_tokens +
                                                               args.new_tokens + 64, 256))
        by_side = {servers.KVSERVE: kv, servers.LLAMA: ll}
        for server in (kv, ll):  # warm-up: one batch at the top concurrency
            servers.run_batch(pools, server, [fresh(64) for _ in range(top)], 4)
        for rnd in range(args.rounds):
            for n in args.concurrency:
                prompts = [fresh(args.prompt_tokens) for _ in range(n)]
                for side in servers.side_order(rnd):
                    values = servers.run_batch(pools, by_side[side], prompts, args.new_tokens)
                    samples.append({"row": "concurrency", "concurrency": n, "side": side,
                                    "round": rnd, "values": values})
            print(f"round {rnd + 1}/{args.rounds}: concurrency sweep done", flush=True)
    finally:
        pools.close()
        for server in (kv, ll):
            if server is not None:
                server.stop()


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    servers.add_common_arguments(parser, rounds=3)
    parser.add_argument("--lengths", type=int_list, default=int_list("128,512,1024,2032"),
                        help="prompt lengths of the TTFT part (each > 32, <= 4,000)")
    parser.add_argument("--concurrency", type=int_list, default=int_list("1,2,4,8"),
                        help="requests at once in the concurrency part")
    parser.add_argument("--prompt-tokens", type=int, default=256,
                        help="prompt length of the concurrency part")
    parser.add_argument("--new-tokens", type=int, default=64,
                        help="tokens generated per request in the concurrency part")
    parser.add_argument("--parts", default="ttft,concurrency",
                        help="ttft, concurrency, or both")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    if not parts or parts - {"ttft", "concurrency"}:
        parser.error("--parts takes ttft, concurrency or ttft,concurrency")
    if any(l <= NEW_IN_HIT + 1 or l > SINGLE_CONTEXT - 96 for l in args.lengths):
        parser.error(f"--lengths must lie in ({NEW_IN_HIT + 1}, {SINGLE_CONTEXT - 96}]")
    if not args.concurrency or min(args.concurrency) < 1:
        parser.error("--concurrency needs positive counts")
    model_dir, gguf = servers.model_files(args)
    fresh = servers.fresh_ids(23)
    samples = []
    if "ttft" in parts:
        ttft_part(args, model_dir, gguf, fresh, samples)
    if "concurrency" in parts:
        concurrency_part(args, model_dir, gguf, fresh, samples)

    kv, ll = servers.KVSERVE, servers.LLAMA
    if "ttft" in parts:
        print(f"\n| {args.model}, {args.threads} threads, TTFT s | kvserve | llama-server | kvserve / llama.cpp |")
        print("|---|---:|---:|---:|")
        for length in args.lengths:
            for row, label in (("ttft_cold", f"cold, {length:,} tokens"),
                               ("ttft_prefix_hit", f"{length - NEW_IN_HIT:,} cached + {NEW_IN_HIT} new")):
                print(servers.ratio_row(
                    label, servers.values_of(samples, kv, "ttft_s", row=row, length=length),
                    servers.values_of(samples, ll, "ttft_s", row=row, length=length)))
    if "concurrency" in parts:
        print(f"\n| {args.model}, {args.threads} threads, N x {args.prompt_tokens} prompt + "
              f"{args.new_tokens} new | kvserve | llama-server | kvserve / llama.cpp |")
        print("|---|---:|---:|---:|")
        for n in args.concurrency:
            for key, label, digits in (("tokens_per_s", "generated tokens/s", 1),
                                       ("ttft_client_mean_s", "mean TTFT (client), s", 3),
                                       ("ttft_server_mean_s", "mean TTFT (server timings), s", 3)):
                print(servers.ratio_row(
                    f"N={n}: {label}",
                    servers.values_of(samples, kv, key, row="concurrency", concurrency=n),
                    servers.values_of(samples, ll, key, row="concurrency", concurrency=n), digits))
    if args.json:
        servers.write_json(args.json, {"script": "server_sweep", "model": args.model,
                                       "threads": args.threads, "rounds": args.rounds,
                                       "lengths": args.lengths, "new_in_hit": NEW_IN_HIT,
                                       "concurrency": args.concurrency,
                                       "prompt_tokens": args.prompt_tokens,
                                       "new_tokens": args.new_tokens}, samples)


if __name__ == "__main__":
    main()
