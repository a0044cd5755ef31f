"""For programs that start kvserve themselves (tests, benchmarks, supervisors): the port a
kvserve started with `--listen 127.0.0.1:0` chose, read from its first stdout line."""
import queue
import re
import threading

LISTENING = re.compile(r"^kvserve listening on 127\.0\.0\.1:(\d+)$")


def listening_port(proc, timeout_s):
    """Returns (port, first_line) for a subprocess.Popen of kvserve with stdout=PIPE.

    Drains the process's stdout on a daemon thread from now on (so that it never blocks on a
    full pipe). port is None when the first line is not "kvserve listening on
    127.0.0.1:PORT", when stdout closed first, or when nothing came within timeout_s; first_line
    is the line read ("" if none), for the error message.
    """
    lines = queue.Queue()

    def drain():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    try:
        first = lines.get(timeout=timeout_s)
    except queue.Empty:
        first = None
    text = first.decode("utf-8", "replace").strip() if first else ""
    match = LISTENING.match(text)
    return (int(match.group(1)) if match else None), text
