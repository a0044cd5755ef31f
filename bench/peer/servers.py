"""Helpers of server_rows.py and server_sweep.py: kvserve and llama-server on one model pair.

- Kvserve / LlamaServer start a server on a loopback port and wait until it serves (kvserve
  through tests/harness/kvserve_launch.py, on port 0; llama-server on a free port).
  Single requests go through kvctl (kvserve) and llama-server's /completion (non-streamed);
  their TTFT is server-side: kvserve's timings.ttft_ms (arrival to first token) and
  llama-server's timings.prompt_ms (its prompt processing; with one request and one slot there
  is no queue, so the two mean the same).
- Senders is a pool of N client processes, each with its own connection, released together by
  one barrier: the way N independent clients send "at once" (threads of one Python process
  would start their calls one after another under the GIL). run_batch sends one streamed
  request from each and measures, per request, the client TTFT (send to the first message
  carrying a token) and the server's own TTFT, and over the batch the generated tokens/s
  (all generated tokens / first send to last answer).

Under concurrency llama-server's timings.prompt_ms no longer is a TTFT: it starts when the
slot's first prompt tokens enter a batch, so a slot that waits while other slots' prompts fill
the batches does not count the wait. The client TTFT is the comparable figure there.

kvserve's Python stubs come from BUILD/proto/python (client/python/kvserve_stubs.py imports
them); llama-server is spoken to over HTTP with the standard library only.
"""
import http.client
import json
import multiprocessing
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request

from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    KvserveProcess,
    free_port,
)
CALL_TIMEOUT_S = 900
KVSERVE = "kvserve"
LLAMA = "llama.cpp"
SIDES = (KVSERVE, LLAMA)


def add_common_arguments(parser, rounds):
    """The options every server script takes: --peer, --build, --model, --threads, --rounds,
    --json."""
    parser.add_argument("--peer", required=True)
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", default="bench-small-f32")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--json", help="write every sample here")


def model_files(args):
    """(the Hugging Face folder for kvserve, the GGUF for llama.cpp) of --model under --peer."""
    models = os.path.join(args.peer, "models")
    return os.path.join(models, args.model + "-hf"), os.path.join(models, args.model + ".gguf")


def wait_until(check, what, timeout_s=300):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # pylint: disable=broad-except
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{what} did not start within {timeout_s} s")


def fresh_ids(seed):
    """A generator of random token ids in [3, 31000) (no BOS/EOS of the bench models): fresh(n)
    returns n of them; prompts drawn from it never repeat in practice."""
    rng = random.Random(seed)
    return lambda n: [rng.randrange(3, 31000) for _ in range(n)]


def side_order(rnd):
    """The sides of round rnd, alternating which goes first."""
    return list(SIDES) if rnd % 2 == 0 else list(reversed(SIDES))


def round_up(n, to):
    return (n + to - 1) // to * to


class _Process:
    """A llama-server subprocess whose stderr goes to a temporary file (shown if it fails)."""

    def _spawn(self, cmd, name):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,  # pylint: disable=consider-using-with
                                     stdout=subprocess.DEVNULL, stderr=self.log)

    def _alive(self):
        if self.proc.poll() is not None:
            raise SystemExit(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def log_tail(self, n=20):
        with open(self.log.name, "rb") as f:
            return b"".join(f.readlines()[-n:]).decode("utf-8", "replace")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


class Kvserve:
    """kvserve of BUILD on 127.0.0.1:0 (kvserve_launch.KvserveProcess), SERVING; requests go
    through kvctl."""
    side = KVSERVE

    def __init__(self, build, model_dir, threads, extra=()):
        self.build = build
        self.kvctl_bin = os.path.join(build, "client/kvctl")
        _kvserve_stubs(os.path.abspath(os.path.join(build, "proto/python")))  # health checks
        self.process = KvserveProcess(os.path.join(build, "server/kvserve"),
                                      ["--model", model_dir, "--threads", str(threads), *extra],
                                      start_timeout_s=300, stop_grace_s=60)
        self.target = self.process.target

    def log_tail(self, n=20):
        return self.process.log_tail(n)

    def stop(self):
        self.process.close()

    def kvctl(self, *rest):
        cmd = [self.kvctl_bin, "--target", self.target, "--output", "json", "--timeout-ms",
               str(CALL_TIMEOUT_S * 1000), *rest]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:8])} ...: {done.stderr.strip()[-500:]}")
        return json.loads(done.stdout) if done.stdout.strip() else {}

    def generate(self, ids, max_new_tokens=1, prefix=None, ignore_eos=False):
        """kvctl generate (unary): the response in the proto3 JSON mapping."""
        rest = ["generate", "--token-ids", ",".join(map(str, ids)), "--max-new-tokens",
                str(max_new_tokens)]
        if prefix:
            rest += ["--prefix", prefix]
        if ignore_eos:
            rest.append("--ignore-eos")
        return self.kvctl(*rest)

    @staticmethod
    def ttft_s(response):
        return float(response["timings"]["ttftMs"]) / 1000

    @staticmethod
    def cached_tokens(response):
        return int(response.get("usage", {}).get("cachedTokens", 0))

    def register_prefix(self, name, ids):
        self.kvctl("prefix", "register", "--name", name, "--token-ids", ",".join(map(str, ids)))

    def delete_prefix(self, name):
        self.kvctl("prefix", "delete", "--name", name)

    def task(self, ids, max_new_tokens):
        """A Senders task: one streamed request of ids (greedy, EOS ignored)."""
        return {"side": KVSERVE, "target": self.target, "ids": list(ids),
                "max_new_tokens": max_new_tokens,
                "stubs": os.path.abspath(os.path.join(self.build, "proto/python"))}


class LlamaServer(_Process):
    side = LLAMA

    def __init__(self, peer, gguf, threads, parallel=1, ctx_per_slot=4096):
        """llama-server with `parallel` slots of ctx_per_slot tokens each (-c is their sum; the
        KV is not unified), continuous batching, KV f32, flash attention off."""
        self.port = free_port()
        self.parallel = parallel
        self._spawn([os.path.join(peer, "llama.cpp/build/bin/llama-server"), "-m", gguf,
                     "--port", str(self.port), "-t", str(threads), "-tb", str(threads),
                     "-c", str(parallel * ctx_per_slot), "-np", str(parallel), "-cb",
                     "-fa", "off", "-ctk", "f32", "-ctv", "f32", "--no-warmup"], "llama-server")
        try:
            wait_until(self._healthy, "llama-server")
        except BaseException:
            self.stop()
            raise

    def _healthy(self):
        self._alive()
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
            return r.status == 200

    @staticmethod
    def body(ids, n_predict, ignore_eos, stream):
        return json.dumps({"prompt": list(ids), "n_predict": n_predict, "cache_prompt": True,
                           "temperature": 0, "top_k": 1, "return_tokens": True,
                           "ignore_eos": ignore_eos, "stream": stream}).encode()

    def completion(self, ids, n_predict=1, ignore_eos=False):
        """/completion, not streamed: the response (timings.prompt_ms, timings.prompt_n...)."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion",
                                         data=self.body(ids, n_predict, ignore_eos, False),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:
            return json.loads(response.read())

    @staticmethod
    def ttft_s(response):
        return response["timings"]["prompt_ms"] / 1000

    @staticmethod
    def computed_tokens(response):
        return int(response["timings"]["prompt_n"])

    def task(self, ids, max_new_tokens):
        return {"side": LLAMA, "port": self.port, "ids": list(ids),
                "max_new_tokens": max_new_tokens}


def check_same_function(kv, ll, probe=(1, 450, 4996, 17354, 1701, 29916), n=8):
    """Both servers' greedy tokens for one prompt (EOS ignored): equal when they hold one
    function. Prints the comparison and returns whether they are equal."""
    ours = [int(t) for t in kv.generate(probe, n, ignore_eos=True).get("tokenIds", [])]
    theirs = ll.completion(probe, n, ignore_eos=True).get("tokens", [])
    same = ours == theirs
    print(f"greedy tokens of {list(probe)}: kvserve {ours}, llama-server {theirs}: "
          f"{'equal' if same else 'DIFFERENT'}", flush=True)
    return same


# Requests "at once": a pool of client processes.

_STUBS = {}


def _kvserve_stubs(path):  # pylint: disable=unused-argument
    """client/python's kvserve_stubs, imported on first use (PYTHONPATH: scripts/python.sh)."""
    if not _STUBS:
        import kvserve_stubs  # pylint: disable=import-outside-toplevel
        _STUBS["m"] = kvserve_stubs
    return _STUBS["m"]


def _send_kvserve(task, barrier, out):
    stubs = _kvserve_stubs(task["stubs"])
    gen = stubs.generation_pb2
    channel = stubs.grpc.insecure_channel(task["target"])
    try:
        stubs.grpc.channel_ready_future(channel).result(timeout=60)
        stub = stubs.generation_pb2_grpc.GenerationStub(channel)
        request = gen.GenerateRequest(
            token_ids=gen.TokenIds(ids=task["ids"]),
            sampling=gen.SamplingParams(max_new_tokens=task["max_new_tokens"], ignore_eos=True))
        barrier.wait(timeout=300)
        out["start"] = time.monotonic()
        final = None
        for message in stub.GenerateStream(request, timeout=CALL_TIMEOUT_S):
            if message.token_ids and out["first"] is None:
                out["first"] = time.monotonic()
            out["tokens"] += len(message.token_ids)
            if message.HasField("usage"):
                final = message
        out["last"] = time.monotonic()
        if final is None:
            raise RuntimeError("the stream ended without usage")
        out.update(ok=True, server_ttft_s=final.timings.ttft_ms / 1000,
                   prompt_tokens=final.usage.prompt_tokens,
                   computed_tokens=final.usage.prompt_tokens - final.usage.cached_tokens)
    finally:
        channel.close()


def _send_llama(task, barrier, out):
    conn = http.client.HTTPConnection("127.0.0.1", task["port"], timeout=CALL_TIMEOUT_S)
    try:
        conn.connect()
        body = LlamaServer.body(task["ids"], task["max_new_tokens"], True, True)
        barrier.wait(timeout=300)
        out["start"] = time.monotonic()
        conn.request("POST", "/completion", body=body,
                     headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read()[:300]!r}")
        final = None
        for line in response:  # server-sent events: "data: {...}" lines
            if not line.startswith(b"data: "):
                continue
            chunk = json.loads(line[6:])
            if (chunk.get("tokens") or chunk.get("content")) and out["first"] is None:
                out["first"] = time.monotonic()
            out["tokens"] += len(chunk.get("tokens") or [])
            if chunk.get("stop"):
                final = chunk
                break
        out["last"] = time.monotonic()
        if final is None:
            raise RuntimeError("the stream ended without a final chunk")
        out["tokens"] = max(out["tokens"], int(final.get("tokens_predicted", 0)))
        timings = final["timings"]
        out.update(ok=True, server_ttft_s=timings["prompt_ms"] / 1000,
                   prompt_tokens=int(final.get("tokens_evaluated", 0)),
                   computed_tokens=int(timings["prompt_n"]))
    finally:
        conn.close()


def _sender_main(tasks, results, barrier):
    """One sender process: per task, connects, waits at the barrier with the others, sends one
    streamed request and reads it to the end."""
    while True:
        task = tasks.get()
        if task is None:
            return
        out = {"ok": False, "error": "", "first": None, "tokens": 0}
        try:
            (_send_kvserve if task["side"] == KVSERVE else _send_llama)(task, barrier, out)
        except BaseException as error:  # pylint: disable=broad-except
            out["error"] = repr(error)[:500]
            out.setdefault("last", time.monotonic())
            if "start" not in out:
                barrier.abort()  # never reached the barrier: release the others
        results.put(out)


class Senders:
    """n client processes (spawned, each with its own connection per request) that send one
    request each at the same moment: the way n independent clients send "at once". Threads of
    one Python process would start the calls one after another under the GIL, and a server
    woken by the first would often see it alone. `target(tasks, results, barrier)` is a
    sender's main loop (a module-level function, for spawn): per task from its queue (None
    ends it) it connects, waits at the barrier, sends, and puts one answer on results;
    bench/kv_workloads.py brings its own."""

    def __init__(self, n, target=None):
        context = multiprocessing.get_context("spawn")
        self.n = n
        self.tasks = [context.Queue() for _ in range(n)]
        self.results = context.Queue()
        self.barrier = context.Barrier(n + 1)
        self.procs = [context.Process(target=target or _sender_main, daemon=True,
                                      args=(self.tasks[i], self.results, self.barrier))
                      for i in range(n)]
        for proc in self.procs:
            proc.start()

    def release(self, tasks):
        """Sends tasks[i] from sender i, all released together once every sender is
        connected; returns (the release time, the answers in any order)."""
        if len(tasks) != self.n:
            raise ValueError(f"{self.n} senders need {self.n} tasks, got {len(tasks)}")
        for q, task in zip(self.tasks, tasks):
            q.put(task)
        try:
            self.barrier.wait(timeout=300)
        except Exception:  # pylint: disable=broad-except
            pass  # a sender failed before the barrier: its answer says why
        released = time.monotonic()
        return released, [self.results.get(timeout=CALL_TIMEOUT_S + 120) for _ in tasks]

    def send(self, tasks):
        """release() without the release time."""
        return self.release(tasks)[1]

    def close(self):
        for q in self.tasks:
            q.put(None)
        for proc in self.procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()
                proc.join()


class SenderPools:
    """Senders per n, started on first use and kept until close()."""

    def __init__(self):
        self.pools = {}

    def get(self, n):
        if n not in self.pools:
            self.pools[n] = Senders(n)
        return self.pools[n]

    def close(self):
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()


def run_batch(pools, server, prompts, max_new_tokens):
    """Sends the prompts to `server` at once (one sender process each, streamed, greedy, EOS
    ignored, max_new_tokens each) and returns the batch's figures:
      ttft_client_mean_s   mean over requests of (first token message - send)
      ttft_server_mean_s   mean of the server's TTFT (kvserve timings.ttft_ms; llama-server
                           timings.prompt_ms, which under concurrency leaves out slot waits)
      tokens_per_s         generated tokens of all requests / (last answer - first send)
      wall_s, generated_tokens, prompt_tokens_computed (kvserve: prompt - cached tokens;
      llama-server: timings.prompt_n), send_spread_ms (last send - first send)."""
    answers = pools.get(len(prompts)).send([server.task(p, max_new_tokens) for p in prompts])
    failed = [a["error"] for a in answers if not a["ok"]]
    if failed:
        raise RuntimeError(f"{server.side}: {len(failed)} of {len(answers)} requests failed: "
                           f"{failed[0]}")
    first_send = min(a["start"] for a in answers)
    wall = max(a["last"] for a in answers) - first_send
    generated = sum(a["tokens"] for a in answers)
    return {
        "ttft_client_mean_s": statistics.mean(a["first"] - a["start"] for a in answers),
        "ttft_server_mean_s": statistics.mean(a["server_ttft_s"] for a in answers),
        "tokens_per_s": generated / wall,
        "wall_s": wall,
        "generated_tokens": generated,
        "prompt_tokens_computed": sum(a["computed_tokens"] for a in answers),
        "send_spread_ms": (max(a["start"] for a in answers) - first_send) * 1e3,
    }


# Summaries and output.

def median_range(values):
    return statistics.median(values), min(values), max(values)


def fmt_cell(values, digits=3):
    m, lo, hi = median_range(values)
    return f"{m:,.{digits}f} ({lo:,.{digits}f}-{hi:,.{digits}f})"


def ratio_row(label, kv_values, ll_values, digits=3):
    """A markdown table row: median (min-max) of each side and kvserve/llama.cpp of medians."""
    mk, ml = statistics.median(kv_values), statistics.median(ll_values)
    ratio = f"{mk / ml:.2f}" if ml else "-"
    return f"| {label} | {fmt_cell(kv_values, digits)} | {fmt_cell(ll_values, digits)} | {ratio} |"


def values_of(samples, side, key, **match):
    """The `key` values of the samples of `side` whose fields equal `match`."""
    return [s["values"][key] for s in samples
            if s["side"] == side and all(s.get(k) == v for k, v in match.items())]


def write_json(path, meta, samples):
    with open(path, "w", encoding="utf-8") as f:
        json.dump({**meta, "samples": samples}, f, indent=1)
        f.write("\n")
