#!/usr/bin/python3
"""The latency cost of TLS against plaintext: two kvserve servers of the same kind (embedded
tiny model, --threads N), one serving TLS (a certificate for 127.0.0.1 made here with openssl)
and one plaintext, measured in the same run with interleaved rounds:

- `kvctl bench` (one connection, the handshake in its warm-up): TTFT p50, inter-token
  latency mean and output tokens/s per round;
- a new kvctl process per call (`kvctl generate --max-new-tokens 1`, handshake included):
  wall time per call.

Prints the median and the range [min, max] over the rounds of each figure.

  scripts/bench_tls.py [--build build] [--rounds 7] [--threads 1] [--cold-calls 20]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_certificate(folder):
    """A self-signed certificate for IP 127.0.0.1 (it is its own CA): (cert, key)."""
    cert, key = os.path.join(folder, "server.crt"), os.path.join(folder, "server.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-subj", "/CN=kvserve bench", "-days", "1", "-addext",
                    "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def start(kvserve, threads, flags):
    proc = subprocess.Popen([kvserve, "--listen", "127.0.0.1:0", "--threads", str(threads),
                             *flags], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    first = proc.stdout.readline().decode().strip()
    prefix = "kvserve listening on 127.0.0.1:"
    if not first.startswith(prefix):
        proc.kill()
        sys.exit(f"kvserve did not start: {first!r}")
    return proc, f"127.0.0.1:{first[len(prefix):]}"


def kvctl(build, target, tls, *args):
    flags = ["--tls-ca-file", tls] if tls else []
    return [os.path.join(build, "client", "kvctl"), "--target", target, *flags, *args]


def wait_serving(build, target, tls):
    deadline = time.monotonic() + 120
    while subprocess.run(kvctl(build, target, tls, "health"), capture_output=True,
                         check=False).returncode != 0:
        if time.monotonic() > deadline:
            sys.exit(f"{target} not SERVING")
        time.sleep(0.2)


def spread(values, unit, digits=2):
    unit = f" {unit}" if unit else ""
    return (f"{statistics.median(values):.{digits}f}{unit} "
            f"[{min(values):.{digits}f}, {max(values):.{digits}f}]")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cold-calls", type=int, default=20)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()
    kvserve = os.path.join(args.build, "server", "kvserve")
    with tempfile.TemporaryDirectory(prefix="kvserve-bench-tls-") as folder:
        cert, key = make_certificate(folder)
        servers = {}
        try:
            servers["tls"] = start(kvserve, args.threads,
                                   ["--tls-cert-file", cert, "--tls-key-file", key])
            servers["plaintext"] = start(kvserve, args.threads, [])
            ca = {"tls": cert, "plaintext": None}
            for kind, (_, target) in servers.items():
                wait_serving(args.build, target, ca[kind])
            figures = {kind: {"ttft": [], "itl": [], "tps": [], "cold": []} for kind in servers}
            for round_number in range(args.rounds):
                # Alternate which kind goes first, so that neither always follows the other.
                order = list(servers) if round_number % 2 == 0 else list(servers)[::-1]
                for kind in order:
                    target = servers[kind][1]
                    out = subprocess.run(
                        kvctl(args.build, target, ca[kind], "--output", "json", "bench",
                              "--requests", str(args.requests), "--max-new-tokens",
                              str(args.max_new_tokens), "--prompt-tokens", "32", "--warmup",
                              "2", "--no-prefix-reuse"),
                        capture_output=True, check=True).stdout
                    result = json.loads(out)
                    if result["errors"]:
                        sys.exit(f"{kind}: {result['first_error']}")
                    figures[kind]["ttft"].append(result["ttft_ms"]["p50"])
                    figures[kind]["itl"].append(result["itl_ms"]["mean"])
                    figures[kind]["tps"].append(result["output_tokens_per_s"])
                    calls = []
                    for _ in range(max(1, args.cold_calls // args.rounds)):
                        began = time.monotonic()
                        subprocess.run(kvctl(args.build, target, ca[kind], "generate",
                                             "--prompt", "Hello", "--max-new-tokens", "1"),
                                       capture_output=True, check=True)
                        calls.append((time.monotonic() - began) * 1000)
                    figures[kind]["cold"].append(statistics.median(calls))
        finally:
            for proc, _ in servers.values():
                proc.send_signal(signal.SIGTERM)
                proc.wait()
    print(f"{args.rounds} interleaved rounds; bench: --requests {args.requests} "
          f"--max-new-tokens {args.max_new_tokens} --prompt-tokens 32 --concurrency 1; "
          f"kvserve --threads {args.threads}; median [min, max] over rounds")
    print("| server | TTFT p50 | inter-token mean | output tokens/s | new kvctl process, "
          "generate 1 token |")
    print("|---|---:|---:|---:|---:|")
    for kind, f in figures.items():
        print(f"| {kind} | {spread(f['ttft'], 'ms')} | {spread(f['itl'], 'ms')} | "
              f"{spread(f['tps'], '', 1)} | {spread(f['cold'], 'ms', 1)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
