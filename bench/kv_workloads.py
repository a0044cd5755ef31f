#!/usr/bin/python3
"""KV-memory workloads of the cache-manager refactor, A/B between two kvserve binaries.

Four workloads, each on a fresh kvserve process (127.0.0.1:0, --metrics-listen 127.0.0.1:0):

  burst         8 GenerateStream calls sent at once; each prompt is one fresh 2,000-token
                prefix shared by the 8, plus 32 tokens of its own; 16 new tokens (ignore_eos).
                Mean TTFT (client: call start to first token message; server: timings.ttft_ms),
                generated tokens/s over the burst (all completion tokens / first send to last
                message), prompt tokens computed (sum of usage.prompt_tokens -
                usage.cached_tokens, and kvserve_prompt_tokens_total -
                kvserve_prompt_tokens_cached_total over the burst), and how many of the 8
                computed the prefix. The ideal is prefix + 8 x 32 computed tokens. "At once":
                8 client processes with a connection each, released by one barrier (threads of
                one process send one after another under the GIL, and the engine, woken by the
                first, then sees it alone). --burst-background-streams N keeps N streams
                decoding meanwhile, so that the burst reaches an engine in mid-step.
  registration  4 stream slots keep a GenerateStream decoding (ignore_eos, max_new_tokens up to
                the context; a slot whose stream ends starts another), then RegisterPrefix of a
                fresh 2,000-token prefix and, when it fits the context, a 4,000-token one, with
                --reg-settle-s of decoding before, between and after. Every stream message's
                arrival time is kept; reported per registration: the longest gap between
                consecutive messages of one stream that overlaps the RegisterPrefix call, the
                call's duration, and the median gap of the gaps overlapping no registration.
  throughput    `kvctl bench --concurrency 16 --requests N --prompt-tokens P --max-new-tokens M
                --output json` (--kvctl, the same for both sides): output tokens/s, TTFT p50
                and p99, inter-token p50, errors.
  tight         kvserve with --kv-device-bytes = --tight-fit x one request's KV bytes (prompt +
                max_new_tokens tokens x 2 x layers x kv_heads x head_dim x dtype bytes, from
                GetModelInfo); rounds of 4 identical Generate calls sent at once with a ~600-token
                prompt (a fresh prompt per round unless --tight-same-prompt), from 4 client
                processes as in burst; --tight-rounds in all per binary. Counts failed
                requests by gRPC code (RESOURCE_EXHAUSTED is the defect), rounds with a failure,
                offload fallbacks and kvserve_oom_events_total.

With --kvserve-b the two binaries run interleaved: repetition 1 on A then B, repetition 2 on A
then B, ..., each workload on its own fresh server, both sides on the same prompts in the same
repetition (fresh prompts every repetition). The summary gives, per metric and side, the
median and the min-max range over the repetitions, and B's median over A's.

Exit status 1 when a workload run failed (its error is printed and kept in --json).

usage (PYTHONPATH: scripts/python.sh bench/kv_workloads.py ..., which
scripts/bench_kv_workloads.sh runs):
  scripts/python.sh bench/kv_workloads.py --kvserve /work/before15/kvserve \
      [--kvserve-b build/server/kvserve]
      [--model DIR | --make-model BIN --make-preset small] [--threads 2]
      [--workload all|burst|registration|throughput|tight] [--repeat 6] [--json out.json]
"""
import argparse
import json
import math
import os
import queue
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    prefix_pb2,
    prefix_pb2_grpc,
)
from kvserve_launch import KvserveProcess  # noqa: E402  pylint: disable=wrong-import-position

import servers as peer_servers  # noqa: E402  pylint: disable=wrong-import-position

WORKLOADS = ("burst", "registration", "throughput", "tight")
STARTUP_TIMEOUT_S = 180
CALL_TIMEOUT_S = 900
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


def log(message):
    print(message, file=sys.stderr, flush=True)


class Server(KvserveProcess):
    """A kvserve subprocess (metrics on 127.0.0.1:0, log in workdir), SERVING, with stubs for
    Generation and PrefixCache and its GetModelInfo."""

    def __init__(self, binary, model, threads, extra, workdir):
        flags = ["--metrics-listen", "127.0.0.1:0", "--threads", str(threads)]
        if model:
            flags += ["--model", model]
        super().__init__(binary, flags + list(extra), start_timeout_s=STARTUP_TIMEOUT_S,
                         stop_grace_s=40, log_path=os.path.join(
                             workdir, f"kvserve-{os.getpid()}-{time.monotonic_ns()}.log"))
        try:
            channel = self.channel()
            self.stub = gen_grpc.GenerationStub(channel)
            self.prefixes = prefix_pb2_grpc.PrefixCacheStub(channel)
            if not self.metrics_address:
                log("warning: no metrics port in kvserve's log; metric-based figures are missing")
            self.info = self.stub.GetModelInfo(gen.GetModelInfoRequest(), timeout=60)
        except BaseException:
            self.close()
            raise

    def metrics(self, timeout_s=10):
        """{'name{labels}': value} of every sample line, or {} without the endpoint."""
        if not self.metrics_address:
            return {}
        try:
            return super().metrics(timeout_s)
        except OSError as error:
            log(f"warning: metrics scrape failed: {error}")
            return {}


# Helpers.

def special_ids(info):
    special = set(info.eos_token_ids)
    if info.HasField("bos_token_id"):
        special.add(info.bos_token_id)
    return special


def random_ids(rng, n, info):
    """n token ids in [0, vocab) drawn from rng, none special."""
    special = special_ids(info)
    ids = []
    while len(ids) < n:
        candidate = rng.randrange(info.vocab_size)
        if candidate not in special:
            ids.append(candidate)
    return ids


def kv_bytes_per_token(info):
    return 2 * info.num_layers * info.num_kv_heads * info.head_dim * DTYPE_BYTES.get(info.dtype, 4)


def metric_delta(after, before, name):
    if name not in after:
        return None
    return after[name] - before.get(name, 0.0)


def stream_request(ids, max_new_tokens):
    return gen.GenerateRequest(token_ids=gen.TokenIds(ids=ids),
                               sampling=gen.SamplingParams(max_new_tokens=max_new_tokens,
                                                           ignore_eos=True))


# Sending "at once": a pool of client processes.

def sender_main(tasks, results, barrier):
    """A sender process: per task, connects its own channel to the server, waits at the
    barrier with the other senders, then sends one request and reads the answer."""
    while True:
        task = tasks.get()
        if task is None:
            return
        target, kind, ids, max_new_tokens = task
        channel = grpc.insecure_channel(target)
        out = {"ok": False, "code": "CLIENT", "details": "", "tokens": 0, "first": None}
        try:
            grpc.channel_ready_future(channel).result(timeout=60)
            stub = gen_grpc.GenerationStub(channel)
            request = stream_request(ids, max_new_tokens)
            barrier.wait(timeout=120)
            out["start"] = time.monotonic()
            final = None
            if kind == "stream":
                for message in stub.GenerateStream(request, timeout=CALL_TIMEOUT_S):
                    now = time.monotonic()
                    if message.token_ids and out["first"] is None:
                        out["first"] = now
                    out["tokens"] += len(message.token_ids)
                    if message.finish_reason != gen.FINISH_REASON_UNSPECIFIED:
                        final = message
            else:
                final = stub.Generate(request, timeout=CALL_TIMEOUT_S)
                out["tokens"] = len(final.token_ids)
            out["last"] = time.monotonic()
            out.update(ok=final is not None, code="OK",
                       prompt_tokens=final.usage.prompt_tokens,
                       cached_tokens=final.usage.cached_tokens,
                       ttft_ms=final.timings.ttft_ms,
                       offload_fallback=final.cache_report.offload_fallback)
        except grpc.RpcError as error:
            out.update(code=error.code().name, details=(error.details() or "")[:300],
                       last=time.monotonic())
        except Exception as error:  # pylint: disable=broad-except
            out.update(details=repr(error)[:300], last=time.monotonic())
        finally:
            channel.close()
        results.put(out)


class Senders(peer_servers.Senders):
    """N sender processes released together (bench/peer/servers.py), running sender_main."""

    def __init__(self, n):
        super().__init__(n, sender_main)

    def send(self, target, kind, prompts, max_new_tokens):
        """Sends prompts[i] from sender i, all released together (once every sender has
        connected); returns (release time, the answers in any order)."""
        return self.release([(target, kind, prompt, max_new_tokens) for prompt in prompts])


SENDERS = {}


def senders(n):
    """The pool of n sender processes, started on first use and kept for the whole run."""
    if n not in SENDERS:
        SENDERS[n] = Senders(n)
    return SENDERS[n]


def drop_senders():
    """Ends every pool (after a failed workload a pool may hold a broken barrier or stale
    answers); the next use starts a fresh one."""
    for pool in SENDERS.values():
        for proc in pool.procs:
            proc.kill()
            proc.join(timeout=10)
    SENDERS.clear()


# Workload 1: 8 concurrent requests on a fresh shared prefix.

def run_burst(server, rng, args):
    info = server.info
    prefix = random_ids(rng, args.burst_prefix_tokens, info)
    prompts = [prefix + random_ids(rng, args.burst_own_tokens, info)
               for _ in range(args.burst_requests)]
    pool = senders(args.burst_requests)
    # Optional background streams: the engine is then mid-step when the burst arrives, as on
    # a server under load (off by default).
    stop = threading.Event()
    background = [StreamSlot(i, server, lambda: random_ids(rng, 32, info),
                             max(1, info.max_position_embeddings - 32), stop)
                  for i in range(args.burst_background_streams)]
    try:
        for slot in background:
            slot.start()
        started = time.monotonic()
        while any(slot.messages() < 5 for slot in background):
            if time.monotonic() - started > 120:
                raise RuntimeError("the background streams did not start within 120 s")
            time.sleep(0.02)
        before = server.metrics()
        released, answers = pool.send(server.target, "stream", prompts, args.burst_new_tokens)
        after = server.metrics()
    finally:
        for slot in background:
            slot.cancel()
        for slot in background:
            slot.join(timeout=30)
    burst_end = max(r["last"] for r in answers)
    ok = [r for r in answers if r["ok"]]
    failures = [f"{r['code']}: {r['details']}" for r in answers if not r["ok"]]
    computed_usage = sum(r["prompt_tokens"] - r["cached_tokens"] for r in ok)
    total = metric_delta(after, before, "kvserve_prompt_tokens_total")
    cached = metric_delta(after, before, "kvserve_prompt_tokens_cached_total")
    computed_metrics = None if total is None or cached is None else total - cached
    computing_prefix = sum(1 for r in ok if r["cached_tokens"] < args.burst_prefix_tokens // 2)
    generated = sum(r["tokens"] for r in answers)
    starts = [r["start"] for r in answers if "start" in r]
    return {
        "requests": args.burst_requests,
        "failed": len(failures),
        "failures": failures[:4],
        "ttft_client_mean_ms": statistics.mean((r["first"] - r["start"]) * 1e3 for r in ok)
        if ok else None,
        "ttft_server_mean_ms": statistics.mean(r["ttft_ms"] for r in ok) if ok else None,
        "generated_tokens_per_s": generated / (burst_end - released),
        "burst_s": burst_end - released,
        "send_spread_ms": (max(starts) - min(starts)) * 1e3 if starts else None,
        "prompt_tokens_computed_usage": computed_usage,
        "prompt_tokens_computed_metrics": computed_metrics,
        "prompt_tokens_computed_ideal": args.burst_prefix_tokens +
        args.burst_requests * args.burst_own_tokens,
        "requests_computing_prefix": computing_prefix,
        "cached_tokens": sorted(r["cached_tokens"] for r in ok),
    }


# Workload 2: inter-token gaps of running streams during a prefix registration.

class StreamSlot(threading.Thread):
    """Keeps one GenerateStream decoding: when a stream ends, starts another (fresh prompt)."""

    def __init__(self, index, server, prompt_fn, max_new_tokens, stop):
        super().__init__(name=f"slot-{index}", daemon=True)
        self.server, self.prompt_fn, self.max_new_tokens = server, prompt_fn, max_new_tokens
        self.stop = stop
        self.lock = threading.Lock()
        self.call = None
        self.streams = []  # per stream: list of message arrival times
        self.errors = []

    def run(self):
        while not self.stop.is_set():
            times = []
            with self.lock:
                if self.stop.is_set():
                    return
                self.streams.append(times)
                self.call = self.server.stub.GenerateStream(
                    stream_request(self.prompt_fn(), self.max_new_tokens), timeout=CALL_TIMEOUT_S)
                call = self.call
            try:
                for message in call:
                    if message.token_ids:
                        times.append(time.monotonic())
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.CANCELLED or not self.stop.is_set():
                    self.errors.append(f"{error.code().name}: {(error.details() or '')[:200]}")
                    time.sleep(0.05)

    def messages(self):
        return sum(len(s) for s in self.streams)

    def cancel(self):
        with self.lock:
            self.stop.set()
            if self.call is not None:
                self.call.cancel()


def run_registration(server, rng, args):
    info = server.info
    context = info.max_position_embeddings
    sizes = [s for s in args.reg_prefix_tokens if s < context]
    skipped = [s for s in args.reg_prefix_tokens if s >= context]
    prompt_len = args.reg_stream_prompt_tokens
    max_new = max(1, min(info.max_new_tokens_limit, context - prompt_len))
    rng_lock = threading.Lock()

    def prompt():
        with rng_lock:
            return random_ids(rng, prompt_len, info)

    stop = threading.Event()
    slots = [StreamSlot(i, server, prompt, max_new, stop) for i in range(args.reg_streams)]
    windows = []
    try:
        for slot in slots:
            slot.start()
        started = time.monotonic()
        while any(slot.messages() < 20 for slot in slots):
            if time.monotonic() - started > 120:
                raise RuntimeError("the streams did not start decoding within 120 s: "
                                   f"{[s.errors[:1] for s in slots]}")
            time.sleep(0.02)
        time.sleep(args.reg_settle_s)
        for size in sizes:
            ids = random_ids(rng, size, info)
            name = f"kvbench-{size}-{rng.randrange(1 << 30)}"
            t0 = time.monotonic()
            reply = server.prefixes.RegisterPrefix(
                prefix_pb2.RegisterPrefixRequest(name=name, token_ids=gen.TokenIds(ids=ids)),
                timeout=CALL_TIMEOUT_S)
            t1 = time.monotonic()
            windows.append((size, t0, t1, reply.num_tokens))
            time.sleep(args.reg_settle_s)
    finally:
        for slot in slots:
            slot.cancel()
        for slot in slots:
            slot.join(timeout=30)

    gaps = []  # (start, end) of consecutive messages of one stream
    for slot in slots:
        for times in slot.streams:
            gaps.extend(zip(times, times[1:]))

    def overlaps(gap, t0, t1):
        return gap[0] < t1 and gap[1] > t0

    outside = [(b - a) * 1e3 for a, b in gaps
               if not any(overlaps((a, b), t0, t1) for _, t0, t1, _ in windows)]
    out = {"streams": args.reg_streams, "stream_max_new_tokens": max_new,
           "median_gap_outside_ms": statistics.median(outside) if outside else None,
           "p99_gap_outside_ms": percentile(outside, 0.99),
           "max_gap_outside_ms": max(outside) if outside else None,
           "stream_errors": [e for slot in slots for e in slot.errors][:4],
           "skipped_prefix_sizes": skipped, "context": context}
    for size, t0, t1, num_tokens in windows:
        during = [(b - a) * 1e3 for a, b in gaps if overlaps((a, b), t0, t1)]
        out[f"prefix_{size}"] = {
            "num_tokens": num_tokens,
            "register_ms": (t1 - t0) * 1e3,
            "longest_gap_during_ms": max(during) if during else None,
            "gaps_during": len(during),  # 0: no stream message straddled the call
        }
    return out


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(math.ceil(q * len(ordered))) - 1)]


# Workload 3: throughput at concurrency 16 (kvctl bench).

def run_throughput(server, _rng, args):
    command = [args.kvctl, "--target", server.target, "bench", "--concurrency",
               str(args.tp_concurrency), "--requests", str(args.tp_requests), "--prompt-tokens",
               str(args.tp_prompt_tokens), "--max-new-tokens", str(args.tp_max_new_tokens),
               "--output", "json"]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=CALL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-500:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return {
        "output_tokens_per_s": report["output_tokens_per_s"],
        "ttft_p50_ms": report["ttft_ms"]["p50"],
        "ttft_p99_ms": report["ttft_ms"]["p99"],
        "itl_p50_ms": report["itl_ms"]["p50"],
        "errors": report["errors"],
        "first_error": report.get("first_error", ""),
        "wall_s": report["wall_s"],
    }


# Workload 4: four identical concurrent requests under a tight KV budget.

def tight_budget(info, args):
    per_request = (args.tight_prompt_tokens + args.tight_new_tokens) * kv_bytes_per_token(info)
    return per_request, int(args.tight_fit * per_request)


def run_tight(server, rng, args, rounds):
    info = server.info
    pool = senders(args.tight_requests)
    before = server.metrics()
    codes = {}
    failed_rounds = 0
    fallbacks = 0
    samples = []
    same_prompt = random_ids(rng, args.tight_prompt_tokens, info)
    for _ in range(rounds):
        ids = same_prompt if args.tight_same_prompt else random_ids(rng, args.tight_prompt_tokens,
                                                                    info)
        _, answers = pool.send(server.target, "unary", [ids] * args.tight_requests,
                               args.tight_new_tokens)
        round_failed = False
        for answer in answers:
            codes[answer["code"]] = codes.get(answer["code"], 0) + 1
            fallbacks += int(answer.get("offload_fallback", False))
            if not answer["ok"]:
                round_failed = True
                if len(samples) < 3:
                    samples.append(f"{answer['code']}: {answer['details']}")
        failed_rounds += int(round_failed)
    after = server.metrics()
    return {
        "rounds": rounds,
        "requests": rounds * args.tight_requests,
        "failed_requests": sum(n for code, n in codes.items() if code != "OK"),
        "resource_exhausted": codes.get("RESOURCE_EXHAUSTED", 0),
        "rounds_with_failure": failed_rounds,
        "codes": codes,
        "offload_fallbacks": fallbacks,
        "oom_events": metric_delta(after, before, "kvserve_oom_events_total"),
        "failure_samples": samples,
    }


# Driver.

def flatten(prefix, value, out):
    """Numeric leaves of nested dicts as 'a.b' -> number."""
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(f"{prefix}.{key}" if prefix else key, item, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[prefix] = value
    return out


SUMMARY_KEYS = {
    "burst": ("ttft_client_mean_ms", "ttft_server_mean_ms", "generated_tokens_per_s",
              "prompt_tokens_computed_usage", "prompt_tokens_computed_metrics",
              "requests_computing_prefix", "failed"),
    "registration": None,  # every numeric field
    "throughput": ("output_tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "errors"),
    "tight": ("failed_requests", "resource_exhausted", "rounds_with_failure",
              "offload_fallbacks", "oom_events"),
}
LIST_KEYS = {"burst": ("prompt_tokens_computed_usage", "requests_computing_prefix"),
             "tight": ("failed_requests",)}
SUM_KEYS = {"tight": ("rounds", "requests", "failed_requests", "resource_exhausted",
                      "rounds_with_failure", "offload_fallbacks", "oom_events")}


def fmt(x):
    if x is None:
        return "-"
    if abs(x) >= 100 or float(x).is_integer():
        return f"{x:,.0f}"
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"


def summarize(runs, sides):
    """{workload: {metric: {side: {median, min, max, n, (sum)}}}} over the repetitions."""
    summary = {}
    for workload in WORKLOADS:
        metrics = {}
        for side in sides:
            for run in runs:
                if run["side"] != side or run["workload"] != workload or "result" not in run:
                    continue
                values = flatten("", run["result"], {})
                keys = SUMMARY_KEYS[workload]
                for key, value in values.items():
                    if keys is not None and key not in keys:
                        continue
                    if key in ("streams", "stream_max_new_tokens", "context", "requests",
                               "rounds") or key.endswith(".num_tokens") or \
                            key.endswith(".gaps_during"):
                        continue
                    metrics.setdefault(key, {}).setdefault(side, []).append(value)
        table = {}
        for key, by_side in metrics.items():
            table[key] = {}
            for side, values in by_side.items():
                table[key][side] = {"median": statistics.median(values), "min": min(values),
                                    "max": max(values), "n": len(values), "values": values}
                if key in SUM_KEYS.get(workload, ()):
                    table[key][side]["sum"] = sum(values)
        if workload in SUM_KEYS:
            for key in ("rounds", "requests"):
                for side in sides:
                    values = [run["result"][key] for run in runs
                              if run["side"] == side and run["workload"] == workload and
                              "result" in run]
                    if values:
                        table.setdefault(key, {})[side] = {"sum": sum(values), "n": len(values)}
        if table:
            summary[workload] = table
    return summary


def print_summary(summary, sides, labels):
    print()
    for workload, table in summary.items():
        print(f"== {workload} ==")
        head = f"{'metric':44s}" + "".join(f"{labels[s] + ' median [min-max] (n)':>36s}"
                                            for s in sides)
        if len(sides) == 2:
            head += f"{'B/A':>8s}"
        print(head)
        for key, by_side in table.items():
            row = f"{key:44s}"
            for side in sides:
                cell = by_side.get(side)
                if cell is None:
                    row += f"{'-':>36s}"
                elif "median" not in cell:
                    row += f"{'total ' + fmt(cell['sum']) + ' (' + str(cell['n']) + ')':>36s}"
                else:
                    text = f"{fmt(cell['median'])} [{fmt(cell['min'])}-{fmt(cell['max'])}]"
                    if "sum" in cell:
                        text += f" sum {fmt(cell['sum'])}"
                    row += f"{text + ' (' + str(cell['n']) + ')':>36s}"
            if len(sides) == 2:
                a, b = by_side.get("A", {}).get("median"), by_side.get("B", {}).get("median")
                row += f"{(b / a):>8.2f}" if a and b is not None else f"{'-':>8s}"
            print(row)
        for key in LIST_KEYS.get(workload, ()):
            for side in sides:
                cell = table.get(key, {}).get(side)
                if cell and "values" in cell:
                    print(f"  {labels[side]} {key} per repetition: "
                          f"{', '.join(fmt(v) for v in cell['values'])}")
        print()


def sibling_or(binary, name, fallback):
    candidate = os.path.join(os.path.dirname(os.path.abspath(binary)), name)
    return candidate if os.access(candidate, os.X_OK) else fallback


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n", maxsplit=1)[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvserve", required=True, help="binary A")
    parser.add_argument("--kvserve-b", help="binary B (run interleaved with A)")
    parser.add_argument("--kvctl", help="kvctl for the throughput workload, used for both sides "
                        "(default: next to --kvserve, else build/client/kvctl)")
    parser.add_argument("--make-model", help="kvserve-make-model for the default model "
                        "(default: next to --kvserve, else build/model/kvserve-make-model)")
    parser.add_argument("--model", help="model folder (default: make one into a temp dir)")
    parser.add_argument("--make-preset", default="small")
    parser.add_argument("--make-arch", default="llama")
    parser.add_argument("--make-weights-dtype", default="f32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workload", choices=("all",) + WORKLOADS, action="append",
                        help="repeatable; default all")
    parser.add_argument("--repeat", type=int, default=6, help="repetitions per binary")
    parser.add_argument("--seed", type=int, default=1, help="prompts of repetition r: seed, r")
    parser.add_argument("--json", help="write every run and the summary here")
    parser.add_argument("--server-arg", action="append", default=[],
                        help="extra kvserve flag for every server (repeatable, e.g. "
                        "--server-arg=--max-batch-tokens=4096)")
    g = parser.add_argument_group("burst")
    g.add_argument("--burst-requests", type=int, default=8)
    g.add_argument("--burst-prefix-tokens", type=int, default=2000)
    g.add_argument("--burst-own-tokens", type=int, default=32)
    g.add_argument("--burst-new-tokens", type=int, default=16)
    g.add_argument("--burst-background-streams", type=int, default=0,
                   help="streams kept decoding during the burst (the engine is then busy when "
                   "it arrives); their prompts count in the metrics figure, not in usage's")
    g = parser.add_argument_group("registration")
    g.add_argument("--reg-streams", type=int, default=4)
    g.add_argument("--reg-prefix-tokens", type=int, nargs="+", default=[2000, 4000],
                   help="prefix sizes registered in turn (those not below the context skipped)")
    g.add_argument("--reg-stream-prompt-tokens", type=int, default=32)
    g.add_argument("--reg-settle-s", type=float, default=1.0,
                   help="decoding before, between and after the registrations")
    g = parser.add_argument_group("throughput")
    g.add_argument("--tp-concurrency", type=int, default=16)
    g.add_argument("--tp-requests", type=int, default=128)
    g.add_argument("--tp-prompt-tokens", type=int, default=256)
    g.add_argument("--tp-max-new-tokens", type=int, default=32)
    g = parser.add_argument_group("tight")
    g.add_argument("--tight-requests", type=int, default=4)
    g.add_argument("--tight-prompt-tokens", type=int, default=600)
    g.add_argument("--tight-new-tokens", type=int, default=16)
    g.add_argument("--tight-fit", type=float, default=1.5,
                   help="--kv-device-bytes in units of one request's KV bytes")
    g.add_argument("--tight-rounds", type=int, default=50,
                   help="rounds per binary in all, spread over the repetitions")
    g.add_argument("--tight-same-prompt", action="store_true",
                   help="one prompt for every round of a server (later rounds hit the "
                   "automatic prefix cache) instead of a fresh one per round")
    args = parser.parse_args()

    workloads = WORKLOADS if not args.workload or "all" in args.workload else \
        tuple(w for w in WORKLOADS if w in args.workload)
    binaries = {"A": os.path.abspath(args.kvserve)}
    if args.kvserve_b:
        binaries["B"] = os.path.abspath(args.kvserve_b)
    for side, path in binaries.items():
        if not os.access(path, os.X_OK):
            parser.error(f"{side}: {path} is not an executable")
    args.kvctl = args.kvctl or sibling_or(args.kvserve, "kvctl",
                                          os.path.join(REPO, "build", "client", "kvctl"))
    args.make_model = args.make_model or sibling_or(
        args.kvserve, "kvserve-make-model", os.path.join(REPO, "build", "model",
                                                         "kvserve-make-model"))
    sides = list(binaries)
    labels = {s: s for s in sides}

    workdir = tempfile.mkdtemp(prefix="kv_workloads-")
    try:
        model = args.model
        model_note = model
        if not model:
            model = os.path.join(workdir, "model")
            command = [args.make_model, "--arch", args.make_arch, "--preset", args.make_preset,
                       "--seed", "1", "--weights-dtype", args.make_weights_dtype, "--out", model]
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            model_note = " ".join(os.path.basename(c) if i == 0 else c
                                  for i, c in enumerate(command[:-2]))
        tight_rounds = [args.tight_rounds // args.repeat + (1 if r < args.tight_rounds %
                                                            args.repeat else 0)
                        for r in range(args.repeat)]
        # The model's shape (GetModelInfo of A on a short-lived server): the tight budget.
        probe = Server(binaries["A"], model, args.threads, args.server_arg, workdir)
        model_info = probe.info
        probe.close()
        i = model_info
        info_json = {"name": i.name, "model_type": i.model_type, "vocab_size": i.vocab_size,
                     "num_layers": i.num_layers, "num_kv_heads": i.num_kv_heads,
                     "head_dim": i.head_dim, "max_position_embeddings": i.max_position_embeddings,
                     "dtype": i.dtype, "weight_dtype": i.weight_dtype,
                     "kv_bytes_per_token": kv_bytes_per_token(i)}
        if "tight" in workloads:
            per_request, budget = tight_budget(model_info, args)
            info_json["tight_kv_bytes_per_request"] = per_request
            info_json["tight_kv_device_bytes"] = budget
        log(f"model {model_note}: {json.dumps(info_json)}")
        runs = []
        began = time.monotonic()
        for rep in range(args.repeat):
            for side in sides:
                for workload in workloads:
                    if workload == "tight" and tight_rounds[rep] == 0:
                        continue
                    rng = random.Random(f"{args.seed}/{rep}/{workload}")
                    extra = list(args.server_arg)
                    run = {"rep": rep, "side": side, "workload": workload,
                           "binary": binaries[side], "loadavg_1m": os.getloadavg()[0]}
                    server = None
                    try:
                        if workload == "tight":
                            per_request, budget = tight_budget(model_info, args)
                            run["kv_bytes_per_request"] = per_request
                            run["kv_device_bytes"] = budget
                            extra += ["--kv-device-bytes", str(budget)]
                        server = Server(binaries[side], model, args.threads, extra, workdir)
                        t = time.monotonic()
                        if workload == "burst":
                            run["result"] = run_burst(server, rng, args)
                        elif workload == "registration":
                            run["result"] = run_registration(server, rng, args)
                        elif workload == "throughput":
                            run["result"] = run_throughput(server, rng, args)
                        else:
                            run["result"] = run_tight(server, rng, args, tight_rounds[rep])
                        run["seconds"] = time.monotonic() - t
                        if not server.running:
                            run["error"] = f"kvserve exited with {server.returncode}"
                    except (RuntimeError, grpc.RpcError, subprocess.SubprocessError,
                            OSError, ValueError, KeyError, queue.Empty) as error:
                        run["error"] = f"{type(error).__name__}: {error}"[-2000:]
                        drop_senders()
                        if server is not None:
                            run["log_tail"] = server.log_tail()
                    finally:
                        if server is not None:
                            server.close()
                    runs.append(run)
                    shown = json.dumps(run.get("result", {"error": run.get("error")}))
                    log(f"[{time.monotonic() - began:7.1f} s] rep {rep + 1}/{args.repeat} "
                        f"{side} {workload} (load {run['loadavg_1m']:.1f}): {shown[:600]}")
        summary = summarize(runs, sides)
        print(f"model: {model_note} {json.dumps(info_json)}")
        for side in sides:
            print(f"{side}: {binaries[side]}")
        context = info_json["max_position_embeddings"]
        burst_prompt = args.burst_prefix_tokens + args.burst_own_tokens
        reg_sizes = ", ".join(f"{n} ({n / context:.0%}" + (", skipped)" if n >= context else ")")
                              for n in args.reg_prefix_tokens)
        print(f"sizes against the context of {context} tokens: burst prompt {burst_prompt} "
              f"({burst_prompt / context:.0%}); registered prefixes "
              f"{reg_sizes}; "
              f"throughput prompt {args.tp_prompt_tokens} + {args.tp_max_new_tokens} new; "
              f"tight prompt {args.tight_prompt_tokens} + {args.tight_new_tokens} new" +
              (f", --kv-device-bytes {info_json['tight_kv_device_bytes']} = {args.tight_fit} x "
               f"{info_json['tight_kv_bytes_per_request']} per request"
               if "tight_kv_device_bytes" in info_json else ""))
        print(f"threads {args.threads}, {args.repeat} repetitions, workloads "
              f"{', '.join(workloads)}, {time.monotonic() - began:.0f} s")
        errors = [r for r in runs if "error" in r]
        for r in errors:
            print(f"error: rep {r['rep'] + 1} {r['side']} {r['workload']}: {r['error'][:300]}")
        print_summary(summary, sides, labels)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as f:
                json.dump({"model": model_note, "model_info": info_json, "binaries": binaries,
                           "kvctl": args.kvctl, "options": vars(args), "runs": runs,
                           "summary": summary}, f, indent=1, default=str)
        return 1 if errors else 0
    finally:
        for pool in SENDERS.values():
            pool.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
