"""The one launcher of kvserve processes for tests, benchmarks and supervisors.

KvserveProcess starts kvserve with given flags on 127.0.0.1:0 (or another address), reads the
address it bound from its first stdout line ("kvserve listening on HOST:PORT"), optionally
serves TLS and sends an API key, waits until gRPC health says SERVING, keeps its stderr in a
log file (whose tail every start-up error quotes), stops it by PID (SIGTERM, a grace period,
then SIGKILL), kills it (kill -9, for crash tests) and restarts it with the same flags (and
log). Beside it: free_port() for the few processes that cannot report their port,
refused_start() for starts that must fail; kvserve_fixtures.py (beside this file) makes API-key
files and test certificates.

This is the test harness (tests/harness), not a user example: ctest puts this folder,
client/python and <build>/proto/python on PYTHONPATH; scripts run by hand use
scripts/python.sh, which does the same.

Timeouts default to multiples of $KVSERVE_TEST_TIME_SCALE (sanitizer builds are slower).
Health checks and channels need grpcio and kvserve's Python stubs (<build>/proto/python on
PYTHONPATH) and client/python's kvserve_stubs, imported on first use: starting a process,
free_port() and refused_start() need neither.
"""
import dataclasses
import fcntl
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import weakref

# Sanitizer builds run several times slower: their ctest sets KVSERVE_TEST_TIME_SCALE.
TIME_SCALE = float(os.environ.get("KVSERVE_TEST_TIME_SCALE", "1"))
START_TIMEOUT_S = 60 * TIME_SCALE
STOP_GRACE_S = 30 * TIME_SCALE
LISTENING = re.compile(r"^kvserve listening on (.*):(\d+)$")
# "kvserve listening on unix:PATH" (--listen unix:PATH).
UNIX_LISTENING = re.compile(r"^kvserve listening on (unix:.+)$")
# "metrics on http://ADDR/metrics (port N)"; older binaries (A/B benchmarks) wrote the port in
# the URL only.
METRICS_PORT = re.compile(r"metrics on http://\S+ \(port (\d+)\)"
                          r"|metrics on http://[^\s:]*:(\d+)/")
# "OpenAI-compatible HTTP API on ADDR (port N)" (--http-listen).
HTTP_PORT = re.compile(r"OpenAI-compatible HTTP API on \S+ \(port (\d+)\)")
# Loopback calls never go through a proxy that the environment may name.
CHANNEL_OPTIONS = (("grpc.enable_http_proxy", 0),)
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class KvserveStartError(RuntimeError):
    """kvserve did not start: it exited, printed no listening line, or was not SERVING in time.
    The message ends with the tail of its stderr; returncode is its exit code (None when it
    was still running and was killed)."""

    def __init__(self, message, returncode=None):
        super().__init__(message)
        self.returncode = returncode


@dataclasses.dataclass(frozen=True)
class Tls:
    """TLS of one kvserve: the server's certificate and key (--tls-cert-file, --tls-key-file),
    the CA its clients verify it with; for mutual TLS the CA it verifies clients with
    (--tls-client-ca-file) and the client certificate and key the launcher's own calls
    present; server_name, when set, is the name the server's certificate is checked for
    instead of the target's host."""
    cert_file: str
    key_file: str
    ca_file: str
    client_ca_file: str = None
    client_cert_file: str = None
    client_key_file: str = None
    server_name: str = None

    def server_flags(self):
        flags = ["--tls-cert-file", self.cert_file, "--tls-key-file", self.key_file]
        if self.client_ca_file:
            flags += ["--tls-client-ca-file", self.client_ca_file]
        return flags

    def credentials(self):
        """grpc.ChannelCredentials trusting ca_file, presenting the client certificate when
        one is set."""
        return _stubs().grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca_file),
            private_key=_read(self.client_key_file) if self.client_key_file else None,
            certificate_chain=_read(self.client_cert_file) if self.client_cert_file else None)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def free_port(host="127.0.0.1"):
    """A TCP port of `host` that was free a moment ago. Only for processes that cannot report
    the port they bound (nginx, llama-server) or a test that needs the port before the start;
    kvserve itself reports its ports (listen on port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def refused_start(binary, flags, timeout_s=None, env=None):
    """Runs `binary` (kvserve, or another kvserve program) with `flags`, expecting it to end by
    itself, as a refused start does: the subprocess.CompletedProcess, stdout and stderr as text
    (UTF-8, errors replaced). subprocess.TimeoutExpired after timeout_s (default 120 s scaled)."""
    done = subprocess.run([binary, *flags], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=120 * TIME_SCALE if timeout_s is None else timeout_s,
                          env=_environment(env), check=False)
    done.stdout = done.stdout.decode("utf-8", "replace")
    done.stderr = done.stderr.decode("utf-8", "replace")
    return done


def _environment(extra):
    return None if extra is None else {**os.environ, **extra}


def _stubs():
    """kvserve_stubs (grpc, the health stubs), imported on first use."""
    import kvserve_stubs  # pylint: disable=import-outside-toplevel
    return kvserve_stubs


def channel_to(target, tls=None, options=()):
    """A channel to `target`, over TLS when `tls` (a Tls) is given, that ignores proxy
    settings."""
    grpc = _stubs().grpc
    options = CHANNEL_OPTIONS + tuple(options)
    if tls is None:
        return grpc.insecure_channel(target, options=options)
    if tls.server_name:
        options += (("grpc.ssl_target_name_override", tls.server_name),)
    return grpc.secure_channel(target, tls.credentials(), options=options)


def wait_until_serving(target, timeout_s, tls=None, process=None):
    """Polls grpc.health.v1 Check of `target` (over TLS when `tls` is given) until SERVING.
    KvserveStartError when `process` (a subprocess.Popen) exits first or timeout_s passes,
    naming the last answer."""
    stubs = _stubs()
    health_pb2 = stubs.health_pb2
    channel = channel_to(target, tls)
    health = stubs.health_pb2_grpc.HealthStub(channel)
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    try:
        while True:
            if process is not None and process.poll() is not None:
                raise KvserveStartError(f"exited with {process.returncode} before SERVING",
                                        process.returncode)
            try:
                status = health.Check(health_pb2.HealthCheckRequest(), timeout=2).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
            except stubs.grpc.RpcError as error:
                last = f"{error.code().name}: {error.details()}"
            if time.monotonic() >= deadline:
                raise KvserveStartError(f"{target} not SERVING after {timeout_s:.0f} s "
                                        f"(last answer: {last})")
            time.sleep(0.05)
    finally:
        channel.close()


def parse_metrics(text):
    """{'name{labels}': value} of every sample line of a Prometheus text page."""
    values = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        try:
            values[series] = float(value)
        except ValueError:
            pass
    return values


class _Lines:
    """The lines of a pipe, read on a daemon thread (so that the process never blocks on a
    full pipe), for whoever waits for them."""

    def __init__(self, pipe):
        self._lines = []
        self._closed = False
        self._changed = threading.Condition()
        threading.Thread(target=self._drain, args=(pipe,), daemon=True).start()

    def _drain(self, pipe):
        with pipe:
            for raw in pipe:
                with self._changed:
                    self._lines.append(raw.decode("utf-8", "replace").rstrip("\r\n"))
                    self._changed.notify_all()
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def first(self, timeout_s):
        """The first line; None when the pipe closed first or timeout_s passed."""
        with self._changed:
            self._changed.wait_for(lambda: self._lines or self._closed, timeout=timeout_s)
            return self._lines[0] if self._lines else None

    def all(self):
        with self._changed:
            return list(self._lines)

    @property
    def closed(self):
        with self._changed:
            return self._closed


class KvserveProcess:
    """One kvserve process: `binary --listen LISTEN [TLS flags] FLAGS`.

    The constructor starts it and, with wait=True, returns once health is SERVING (else
    KvserveStartError, the process killed). `target` is the HOST:PORT (or unix:PATH) clients
    dial (127.0.0.1 for a wildcard address), `port` the bound port. Its stderr goes to
    log_path (default: an anonymous temporary file), emptied first; restarts append to it and
    log_text() shows the current run. `env` adds environment variables. `tls` (a Tls) adds the
    server's TLS flags and makes the launcher's own calls and channel() use TLS; `api_key` is
    sent by call_metadata(). Not thread-safe: one owner starts, signals and stops it.
    """

    def __init__(self, binary, flags=(), *, listen="127.0.0.1:0", tls=None, api_key=None,
                 env=None, log_path=None, start_timeout_s=None, stop_grace_s=None,
                 name="kvserve", wait=True):
        self.binary = binary
        self.name = name
        self.listen = listen
        self.tls = tls
        self.api_key = api_key
        self.start_timeout_s = START_TIMEOUT_S if start_timeout_s is None else start_timeout_s
        self.stop_grace_s = STOP_GRACE_S if stop_grace_s is None else stop_grace_s
        self.command = [binary, *(["--listen", listen] if listen else []),
                        *(tls.server_flags() if tls else []), *flags]
        self.log_path = log_path
        # A plain descriptor in append mode (shared with the child: its writes go to the end
        # whatever the offset), closed when this object goes.
        if log_path:
            self._log_fd = os.open(log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND,
                                   0o644)
        else:
            self._log_fd, path = tempfile.mkstemp(prefix="kvserve-", suffix=".log")
            os.unlink(path)
            fcntl.fcntl(self._log_fd, fcntl.F_SETFL,
                        fcntl.fcntl(self._log_fd, fcntl.F_GETFL) | os.O_APPEND)
        self._close_log = weakref.finalize(self, os.close, self._log_fd)
        self._env = _environment(env)
        self._channels = []
        self.proc = None
        self.start(wait=wait)

    # Starting.

    def start(self, wait=True):
        """Starts the process (again, when it has ended: same command, same log) and reads its
        address; with wait, waits for SERVING. KvserveStartError (the process killed) when it
        fails."""
        if self.running:
            raise RuntimeError(f"{self.name} (pid {self.proc.pid}) is running")
        self._log_start = os.fstat(self._log_fd).st_size
        self._metrics_port = None
        self.port = self.target = self.first_line = None
        self.stopped_by_kill = False
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._log_fd,
            env=self._env)
        self._stdout = _Lines(self.proc.stdout)
        try:
            self._read_address()
            if wait:
                wait_until_serving(self.target, self.start_timeout_s, self.tls, self.proc)
        except KvserveStartError as error:
            raise self._failed(str(error)) from None
        except BaseException:
            self.kill()
            raise
        return self

    def _read_address(self):
        first = self._stdout.first(self.start_timeout_s)
        self.first_line = first
        if first is None and not self._stdout.closed:
            raise KvserveStartError(f"no line on stdout after {self.start_timeout_s:.0f} s")
        if first is None:  # stdout closed: the process ends (its exit code comes a moment later)
            try:
                code = self.proc.wait(timeout=self.stop_grace_s)
            except subprocess.TimeoutExpired:
                raise KvserveStartError("closed its stdout without a line") from None
            raise KvserveStartError(f"exited with {code} before listening", code)
        if self.listen and self.listen.startswith("unix:"):
            if not UNIX_LISTENING.match(first):
                raise KvserveStartError(f"first stdout line {first!r}, not 'kvserve listening "
                                        f"on unix:PATH'")
            self.target = self.listen
            return
        match = LISTENING.match(first)
        if not match:
            raise KvserveStartError(f"first stdout line {first!r}, not 'kvserve listening on "
                                    f"HOST:PORT'")
        host, port = match.group(1), int(match.group(2))
        self.port = port
        host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "": "127.0.0.1"}.get(host, host)
        self.target = f"{host}:{port}"

    def _failed(self, why):
        """A KvserveStartError naming the command's flags and quoting the log's tail, after
        killing the process when it still runs."""
        returncode = self.proc.poll()
        if returncode is None:
            self.kill()
        return KvserveStartError(f"{self.name} did not start: {why}\ncommand: "
                                 f"{' '.join(self.command)}\n{self.log_tail()}", returncode)

    def wait_until_serving(self, timeout_s=None):
        """Waits until health says SERVING (after start(wait=False)); KvserveStartError (the
        process killed) when it exits first or timeout_s (default start_timeout_s) passes."""
        try:
            wait_until_serving(self.target, self.start_timeout_s if timeout_s is None
                               else timeout_s, self.tls, self.proc)
        except KvserveStartError as error:
            raise self._failed(str(error)) from None

    # Clients.

    def credentials(self):
        """The channel credentials of the server's TLS (a grpc.ChannelCredentials), None for
        plaintext."""
        return self.tls.credentials() if self.tls else None

    def channel(self, options=()):
        """A new channel to the server, TLS as the server serves it; stop() and kill() close
        it (an open connection would hold the graceful shutdown up)."""
        channel = channel_to(self.target, self.tls, options)
        self._channels.append(channel)
        return channel

    def call_metadata(self, *pairs):
        """The metadata of a call: the API key's ("authorization", "Bearer KEY") when one is
        set, then `pairs` ((key, value) tuples); None when empty."""
        return (_stubs().auth_metadata(self.api_key) + tuple(pairs)) or None

    # The process.

    @property
    def pid(self):
        return self.proc.pid

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self):
        return self.proc.poll()

    def stdout_lines(self):
        """Every stdout line so far (the first is the listening line)."""
        return self._stdout.all()

    def send_signal(self, sig):
        """Sends `sig` (SIGHUP reloads the API keys; SIGTERM starts the graceful shutdown)
        when it runs."""
        if self.running:
            self.proc.send_signal(sig)

    def terminate(self):
        """SIGTERM without waiting: the graceful shutdown begins."""
        self.send_signal(signal.SIGTERM)

    def wait(self, timeout_s=None):
        """Its exit code once it ends; subprocess.TimeoutExpired after timeout_s."""
        return self.proc.wait(timeout=timeout_s)

    def stop(self, grace_s=None):
        """Closes the channels of channel(), sends SIGTERM and waits grace_s (default
        stop_grace_s) for it to exit, then SIGKILL (stopped_by_kill is then True). Returns the
        exit code (negative: the signal that ended it)."""
        self._close_channels()
        if self.running:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=self.stop_grace_s if grace_s is None else grace_s)
            except subprocess.TimeoutExpired:
                self.stopped_by_kill = True
                self.proc.kill()
        return self.proc.wait()

    def kill(self):
        """kill -9 (SIGKILL) and wait, then closes the channels of channel() (a crash meets
        the connections open). Returns the exit code."""
        if self.running:
            self.proc.kill()
        code = self.proc.wait()
        self._close_channels()
        return code

    def restart(self, wait=True):
        """stop() when it runs, then start() with the same command (a persistence test's restart
        on the same --state-dir); the new run may have another port."""
        self.stop()
        return self.start(wait=wait)

    def _close_channels(self):
        for channel in self._channels:
            channel.close()
        self._channels = []

    def close(self):
        """stop(), then the log file closes (an anonymous one is gone)."""
        self.stop()
        self._close_log()

    # The log.

    def log_bytes(self, all_runs=False):
        """What the process wrote to stderr, from its current start (or from the first with
        all_runs)."""
        begin = 0 if all_runs else self._log_start
        # pread leaves the offset the child shares alone.
        return os.pread(self._log_fd, max(0, os.fstat(self._log_fd).st_size - begin), begin)

    def log_text(self, all_runs=False):
        return self.log_bytes(all_runs).decode("utf-8", "replace")

    def log_tail(self, lines=40):
        """The last `lines` lines of stderr under a heading naming the process."""
        tail = self.log_text().splitlines()[-lines:]
        return f"{self.name} stderr (last {len(tail)} lines):\n" + "\n".join(tail)

    def print_log_tail(self, lines=40, file=None):
        print(self.log_tail(lines), file=file or sys.stderr, flush=True)

    # Metrics (--metrics-listen; 127.0.0.1:0 works, the port is read from the log).

    @property
    def metrics_port(self):
        """The port of the metrics endpoint from the log, None without one."""
        if self._metrics_port is None:
            match = METRICS_PORT.search(self.log_text())
            if match:
                self._metrics_port = int(match.group(1) or match.group(2))
        return self._metrics_port

    @property
    def metrics_address(self):
        port = self.metrics_port
        return f"127.0.0.1:{port}" if port else None

    @property
    def http_port(self):
        """The port of the OpenAI-compatible HTTP API (--http-listen) from the log, None
        without one."""
        match = HTTP_PORT.search(self.log_text())
        return int(match.group(1)) if match else None

    def metrics_text(self, timeout_s=10):
        """The Prometheus page of the metrics endpoint (OSError when unreachable)."""
        if not self.metrics_port:
            raise OSError(f"{self.name} logged no metrics port (no --metrics-listen?)")
        with _HTTP.open(f"http://{self.metrics_address}/metrics", timeout=timeout_s) as page:
            return page.read().decode("utf-8")

    def metrics(self, timeout_s=10):
        """parse_metrics() of metrics_text()."""
        return parse_metrics(self.metrics_text(timeout_s))
