#!/usr/bin/python3
"""End-to-end: tenants of a real kvserve process (embedded tiny model, 127.0.0.1, port 0).

Tenants come from --api-keys-file (alice and bob are users, ops is an admin) or, with mutual
TLS and --tenant-from-client-cert, from the client certificate's CN (--client-cert-admins
names the admins); a valid key decides over the certificate.

- a named prefix lives in its tenant's namespace: another tenant's GetPrefix, DeletePrefix,
  Generate and GenerateStream get the very NOT_FOUND of a name nobody registered, and its
  ListPrefixes does not show it; two tenants keep different content under one name;
- shared prefixes (RegisterPrefixRequest.shared): only admins register or delete them
  (PERMISSION_DENIED naming `shared`, counted in kvserve_rpcs_total); every tenant sees and
  uses them; a user's own prefix of the same name shadows the shared one for that user only;
- automatic prefix reuse never crosses tenants;
- a session belongs to its tenant: another tenant's Get/Close/Rollback/turn is NOT_FOUND;
- --tenant-max-prefix-bytes, --tenant-max-running-requests, --tenant-max-queued-requests
  limit one tenant without holding back another;
- with a keys file and none of those flags, fair shares (issue 27 item 15): a tenant asking
  for sessions with a 2^40 s TTL holds a quarter of --max-sessions, each capped to
  --session-max-ttl-seconds, and another tenant still gets one; a tenant filling the prefix
  cache is refused at its share, and another still registers as much;
- a keys file naming the tenant "default" is refused at start-up (exit 2, naming it);
- --state-dir keeps namespaces and shared prefixes across a restart;
- without keys everyone is the admin tenant "default" (as before);
- mutual TLS: certificate CNs are tenants, named in the access log; a certificate with two CNs
  is UNAUTHENTICATED (skipped without openssl).

Needs ctest's PYTHONPATH; run:
  scripts/python.sh tests/e2e/test_tenants.py --kvserve build/server/kvserve
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    auth_metadata,
    generation_pb2 as gen,
    generation_pb2_grpc as gen_grpc,
    grpc,
    open_channel,
    prefix_pb2,
    prefix_pb2_grpc,
    session_pb2 as ses,
    session_pb2_grpc as ses_grpc,
)
from kvserve_fixtures import (  # noqa: E402  pylint: disable=wrong-import-position
    Certificates,
    write_api_keys_file,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
    refused_start,
)

PATHS = {}
CALL_TIMEOUT_S = 60 * TIME_SCALE

KEYS = [("alice-secret", "alice", "user"), ("bob-secret", "bob", "user"),
        ("ops-secret", "ops", "admin")]
NOT_FOUND = grpc.StatusCode.NOT_FOUND
DENIED = grpc.StatusCode.PERMISSION_DENIED
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


def ids(seed, n):
    """n token ids in [10, 250) (the tiny model's eos is 257); different seeds differ from the
    first token on, so that no two prompts share an automatic prefix."""
    return [(31 * seed + 7 * t) % 240 + 10 for t in range(n)]


def rpc_error(call):
    """The RpcError of call(); AssertionError when it succeeds."""
    try:
        call()
    except grpc.RpcError as error:
        return error
    raise AssertionError("the call succeeded")


def start(*flags, tls=None):
    """kvserve on 127.0.0.1:0 (--threads 1) with the given flags, SERVING."""
    return KvserveProcess(PATHS["kvserve"], ["--threads", "1", *flags], tls=tls)


def stop(server, *channels):
    """Closes the clients' channels (or the shutdown waits for them; the launcher closes those
    of server.channel()), then stops the server."""
    for channel in channels:
        channel.close()
    code = server.stop()
    if code != 0:
        raise AssertionError(f"kvserve exited with {code}\n{server.log_text()}")


class Client:
    """One tenant's calls over `channel`, with the API key `key` when given."""

    def __init__(self, channel, key=None):
        self.metadata = auth_metadata(key)
        self.gen = gen_grpc.GenerationStub(channel)
        self.prefixes = prefix_pb2_grpc.PrefixCacheStub(channel)
        self.sessions = ses_grpc.SessionsStub(channel)

    def md(self, request_id=None):
        extra = (("x-request-id", request_id),) if request_id else ()
        return (self.metadata + extra) or None

    def register(self, name, token_ids, shared=False, request_id=None):
        request = prefix_pb2.RegisterPrefixRequest(name=name, token_ids=gen.TokenIds(ids=token_ids))
        if shared:
            request.shared = True
        return self.prefixes.RegisterPrefix(request, metadata=self.md(request_id),
                                            timeout=CALL_TIMEOUT_S)

    def get(self, name, request_id=None):
        return self.prefixes.GetPrefix(prefix_pb2.GetPrefixRequest(name=name),
                                       metadata=self.md(request_id), timeout=CALL_TIMEOUT_S)

    def delete(self, name, shared=False):
        request = prefix_pb2.DeletePrefixRequest(name=name)
        if shared:
            request.shared = True
        return self.prefixes.DeletePrefix(request, metadata=self.md(), timeout=CALL_TIMEOUT_S)

    def listed(self):
        """{(name, shared)} of ListPrefixes."""
        response = self.prefixes.ListPrefixes(prefix_pb2.ListPrefixesRequest(),
                                              metadata=self.md(), timeout=CALL_TIMEOUT_S)
        return {(p.name, p.shared) for p in response.prefixes}

    def request(self, token_ids, prefix="", session="", max_new=2):
        return gen.GenerateRequest(token_ids=gen.TokenIds(ids=token_ids), prefix=prefix,
                                   session=session, sampling=gen.SamplingParams(
                                       max_new_tokens=max_new, ignore_eos=True))

    def generate(self, token_ids, prefix="", session="", max_new=2):
        return self.gen.Generate(self.request(token_ids, prefix, session, max_new),
                                 metadata=self.md(), timeout=CALL_TIMEOUT_S)

    def stream(self, token_ids, prefix="", max_new=2):
        return self.gen.GenerateStream(self.request(token_ids, prefix, max_new=max_new),
                                       metadata=self.md(), timeout=CALL_TIMEOUT_S)


def lookups(client, name):
    """The four ways to name a prefix, each a call."""
    return {"GetPrefix": lambda: client.get(name),
            "DeletePrefix": lambda: client.delete(name),
            "Generate": lambda: client.generate([5, 6], prefix=name),
            "GenerateStream": lambda: list(client.stream([5, 6], prefix=name))}


class KeysServerTest(unittest.TestCase):
    """One server with API keys for alice, bob (users) and ops (admin)."""
    flags = ()

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="kvserve-tenants-")
        cls.keys = os.path.join(cls.dir.name, "keys.yaml")
        write_api_keys_file(cls.keys, KEYS)
        cls.server = start("--api-keys-file", cls.keys, *cls.flags)
        channel = cls.server.channel()
        cls.alice, cls.bob, cls.ops = (Client(channel, key) for key, _, _ in KEYS)

    @classmethod
    def tearDownClass(cls):
        stop(cls.server)
        cls.dir.cleanup()


class NamespacesTest(KeysServerTest):
    flags = ("--auto-prefix-min-tokens", "8", "--metrics-listen", "127.0.0.1:0")

    def test_a_named_prefix_lives_in_its_tenants_namespace(self):
        alice, bob = self.alice, self.bob
        # What bob hears about a name nobody registered, then about alice's: the same.
        absent = {method: rpc_error(call) for method, call in lookups(bob, "notes").items()}
        alice.register("notes", ids(1, 40))
        for method, call in lookups(bob, "notes").items():
            error = rpc_error(call)
            self.assertEqual((error.code(), error.details()),
                             (NOT_FOUND, absent[method].details()), method)
        self.assertEqual(absent["GetPrefix"].code(), NOT_FOUND)
        self.assertNotIn("notes", {name for name, _ in bob.listed()})
        # bob's DeletePrefix left it; alice sees, lists and uses it.
        self.assertEqual(alice.get("notes").num_tokens, 40)
        self.assertIn(("notes", False), alice.listed())
        # Both keep their own content under the name.
        bob.register("notes", ids(2, 24))
        self.assertEqual((alice.get("notes").num_tokens, bob.get("notes").num_tokens), (40, 24))
        for client, tokens in ((alice, 40), (bob, 24)):
            reply = client.generate([5, 6], prefix="notes")
            self.assertEqual(reply.usage.prompt_tokens, tokens + 2)
            self.assertGreaterEqual(reply.usage.cached_tokens, tokens)
            self.assertEqual(reply.cache_report.prefix, "notes")
        alice.delete("notes")
        self.assertEqual(rpc_error(lambda: alice.get("notes")).code(), NOT_FOUND)
        self.assertEqual(bob.get("notes").num_tokens, 24)
        bob.delete("notes")

    def test_shared_prefixes_are_seen_by_all_and_changed_by_admins(self):
        alice, bob, ops = self.alice, self.bob, self.ops
        before = self.server.metrics()
        self.assertTrue(ops.register("house-style", ids(3, 30), shared=True).shared)
        for client in (alice, bob):
            got = client.get("house-style")
            self.assertEqual((got.num_tokens, got.shared), (30, True))
            self.assertIn(("house-style", True), client.listed())
            reply = client.generate([7, 8], prefix="house-style")
            self.assertEqual(reply.usage.prompt_tokens, 32)
            self.assertGreaterEqual(reply.usage.cached_tokens, 30)
            self.assertEqual(reply.cache_report.prefix, "house-style")
        # Users can neither delete nor register shared prefixes.
        for call in (lambda: alice.delete("house-style"),
                     lambda: alice.delete("house-style", shared=True)):
            self.assertEqual(rpc_error(call).code(), DENIED)
        for call in (lambda: alice.register("house-style", ids(4, 10), shared=True),
                     lambda: bob.register("bobs-shared", ids(4, 10), shared=True)):
            error = rpc_error(call)
            self.assertEqual(error.code(), DENIED, error.details())
            self.assertIn("shared", error.details())
        self.assertEqual((bob.get("house-style").num_tokens, bob.get("house-style").shared),
                         (30, True))
        self.assertEqual(rpc_error(lambda: bob.get("bobs-shared")).code(), NOT_FOUND)
        self.assertNotIn("bobs-shared", {name for name, _ in ops.listed()})
        after = self.server.metrics()
        for method in ("DeletePrefix", "RegisterPrefix"):
            label = f'kvserve_rpcs_total{{code="PERMISSION_DENIED",method="{method}"}}'
            self.assertEqual(after.get(label, 0) - before.get(label, 0), 2, method)
        # alice's own prefix of that name is hers alone.
        self.assertFalse(alice.register("house-style", ids(5, 12)).shared)
        self.assertEqual((alice.get("house-style").num_tokens, alice.get("house-style").shared),
                         (12, False))
        self.assertEqual(alice.generate([7, 8], prefix="house-style").usage.prompt_tokens, 14)
        self.assertIn(("house-style", False), alice.listed())
        self.assertEqual((bob.get("house-style").num_tokens, bob.get("house-style").shared),
                         (30, True))
        self.assertEqual(bob.generate([7, 8], prefix="house-style").usage.prompt_tokens, 32)
        self.assertNotIn(("house-style", False), bob.listed())
        alice.delete("house-style")  # her own; the shared one shows through again
        self.assertEqual((alice.get("house-style").num_tokens, alice.get("house-style").shared),
                         (30, True))
        ops.delete("house-style", shared=True)
        for client in (alice, bob):
            self.assertEqual(rpc_error(lambda c=client: c.get("house-style")).code(), NOT_FOUND)
            self.assertNotIn("house-style", {name for name, _ in client.listed()})

    def test_automatic_prefix_reuse_stays_in_its_tenant(self):
        alice, bob = self.alice, self.bob
        prompt = ids(6, 120)
        self.assertEqual(alice.generate(prompt).usage.cached_tokens, 0)
        self.assertEqual(bob.generate(prompt).usage.cached_tokens, 0)
        self.assertGreaterEqual(alice.generate(prompt).usage.cached_tokens, len(prompt) - 1)
        self.assertGreaterEqual(bob.generate(prompt).usage.cached_tokens, len(prompt) - 1)
        # A longer prompt starting with another tenant's: nothing reused either.
        prompt = ids(7, 120)
        self.assertEqual(alice.generate(prompt).usage.cached_tokens, 0)
        self.assertEqual(bob.generate(prompt + [11, 12, 13]).usage.cached_tokens, 0)
        self.assertGreaterEqual(alice.generate(prompt + [14, 15]).usage.cached_tokens,
                                len(prompt))

    def test_a_session_belongs_to_its_tenant(self):
        alice, bob = self.alice, self.bob
        session = alice.sessions.CreateSession(ses.CreateSessionRequest(), metadata=alice.md(),
                                               timeout=CALL_TIMEOUT_S).id
        alice.generate(ids(8, 20), session=session)
        fake = "f" * 32

        def calls(client, sid):
            return {
                "Get": lambda: client.sessions.GetSession(
                    ses.GetSessionRequest(id=sid), metadata=client.md(), timeout=CALL_TIMEOUT_S),
                "Close": lambda: client.sessions.CloseSession(
                    ses.CloseSessionRequest(id=sid), metadata=client.md(),
                    timeout=CALL_TIMEOUT_S),
                "Rollback": lambda: client.sessions.RollbackSession(
                    ses.RollbackSessionRequest(id=sid, n=1), metadata=client.md(),
                    timeout=CALL_TIMEOUT_S),
                "Generate": lambda: client.generate([9], session=sid)}

        absent = {name: rpc_error(call) for name, call in calls(bob, fake).items()}
        for name, call in calls(bob, session).items():
            error = rpc_error(call)
            self.assertEqual(error.code(), NOT_FOUND, name)
            # The message is that of an id that never existed.
            self.assertEqual(error.details(), absent[name].details().replace(fake, session), name)

        def listed(client):
            return [s.id for s in client.sessions.ListSessions(
                ses.ListSessionsRequest(), metadata=client.md(), timeout=CALL_TIMEOUT_S).sessions]

        self.assertNotIn(session, listed(bob))
        self.assertIn(session, listed(alice))
        # Untouched by bob's calls: one turn, 22 tokens, and alice goes on.
        state = alice.sessions.GetSession(ses.GetSessionRequest(id=session), metadata=alice.md(),
                                          timeout=CALL_TIMEOUT_S)
        self.assertEqual((state.turns, state.num_tokens), (1, 22))
        reply = alice.generate([9, 10], session=session)
        self.assertEqual(reply.cache_report.session, session)
        self.assertGreater(reply.usage.cached_tokens, 0)
        alice.sessions.CloseSession(ses.CloseSessionRequest(id=session), metadata=alice.md(),
                                    timeout=CALL_TIMEOUT_S)


PREFIX_LIMIT = 1 << 20


class LimitsTest(KeysServerTest):
    flags = ("--tenant-max-prefix-bytes", str(PREFIX_LIMIT), "--tenant-max-running-requests",
             "1", "--tenant-max-queued-requests", "1")

    def test_prefix_bytes_are_limited_per_tenant(self):
        alice, bob = self.alice, self.bob
        first = alice.register("budget-1", ids(10, 100))
        per_token = first.bytes / first.num_tokens
        self.assertLessEqual(first.bytes, PREFIX_LIMIT // 2)
        # Fits alone, not next to budget-1.
        n = int((PREFIX_LIMIT - first.bytes) / per_token) + 8
        self.assertLessEqual(n * per_token, PREFIX_LIMIT)
        error = rpc_error(lambda: alice.register("budget-2", ids(11, n)))
        self.assertEqual(error.code(), EXHAUSTED, error.details())
        self.assertIn("--tenant-max-prefix-bytes", error.details())
        self.assertEqual(alice.get("budget-1").num_tokens, 100)
        self.assertEqual(rpc_error(lambda: alice.get("budget-2")).code(), NOT_FOUND)
        self.assertEqual(bob.register("budget-2", ids(11, n)).num_tokens, n)
        alice.delete("budget-1")  # frees alice's budget
        self.assertEqual(alice.register("budget-2", ids(11, n)).num_tokens, n)
        alice.delete("budget-2")
        bob.delete("budget-2")

    def test_running_and_queued_requests_are_limited_per_tenant(self):
        alice, bob = self.alice, self.bob
        long_new = 1500
        first = alice.stream([1, 2, 3], max_new=long_new)
        messages = [next(first)]  # running now
        first_done = threading.Event()

        def drain():
            try:
                messages.extend(first)
            finally:
                first_done.set()

        threading.Thread(target=drain, daemon=True).start()
        results = []  # (reply or RpcError), in the order they came back

        def call():
            try:
                results.append(alice.generate([4, 5, 6], max_new=4))
            except grpc.RpcError as error:
                results.append(error)

        threads = [threading.Thread(target=call) for _ in range(2)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + CALL_TIMEOUT_S
        while not results:  # one is queued behind the first, the other refused at once
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)
        # bob is not held back by alice's queue: done while alice's first still runs.
        self.assertEqual(bob.generate([7, 8, 9], max_new=4).usage.completion_tokens, 4)
        self.assertFalse(first_done.is_set(), "alice's long request ended before bob's")
        for thread in threads:
            thread.join(CALL_TIMEOUT_S)
        self.assertTrue(first_done.wait(CALL_TIMEOUT_S))
        refused = [r for r in results if isinstance(r, grpc.RpcError)]
        replies = [r for r in results if not isinstance(r, grpc.RpcError)]
        self.assertEqual(len(refused), 1, [r.details() for r in refused])
        self.assertEqual(refused[0].code(), EXHAUSTED, refused[0].details())
        self.assertIn("--tenant-max-queued-requests", refused[0].details())
        self.assertIs(results[0], refused[0])
        self.assertEqual(sum(len(m.token_ids) for m in messages), long_new)
        self.assertEqual(replies[0].usage.completion_tokens, 4)
        # It waited for the first to finish (one running request per tenant).
        self.assertGreater(replies[0].timings.queue_ms, 0.5 * messages[-1].timings.decode_ms)


FAIR_PREFIX_CACHE = 8 << 20


class FairShareTest(KeysServerTest):
    """A keys file and no --tenant-max-* flag: each limit is a fair share, the global one / (3
    tenants + 1), so that no tenant can deny the others service (issue 27 item 15)."""
    flags = ("--max-sessions", "8", "--prefix-cache-bytes", str(FAIR_PREFIX_CACHE))

    def create(self, client, ttl_seconds=0):
        return client.sessions.CreateSession(
            ses.CreateSessionRequest(options=ses.SessionOptions(ttl_seconds=ttl_seconds)),
            metadata=client.md(), timeout=CALL_TIMEOUT_S).id

    def close(self, client, sid):
        client.sessions.CloseSession(ses.CloseSessionRequest(id=sid), metadata=client.md(),
                                     timeout=CALL_TIMEOUT_S)

    def test_one_tenant_cannot_hold_every_session(self):
        alice, bob, ops = self.alice, self.bob, self.ops
        held = []
        refusal = None
        for _ in range(8):  # --max-sessions: without a per-tenant limit alice takes all 8
            try:
                held.append(self.create(alice, ttl_seconds=1 << 40))
            except grpc.RpcError as error:
                refusal = error
                break
        self.assertEqual(len(held), 2, "a quarter of --max-sessions 8")
        self.assertIsNotNone(refusal)
        self.assertEqual(refusal.code(), EXHAUSTED, refusal.details())
        self.assertIn("--tenant-max-sessions 2", refusal.details())
        self.assertIn("this tenant has 2 sessions open", refusal.details())
        # The TTL asked for (2^40 s) is capped by --session-max-ttl-seconds (24 h).
        state = alice.sessions.GetSession(ses.GetSessionRequest(id=held[0]), metadata=alice.md(),
                                          timeout=CALL_TIMEOUT_S)
        self.assertEqual(state.options.ttl_seconds, 86400)
        # The others still get theirs.
        for client in (bob, ops):
            sid = self.create(client)
            self.close(client, sid)
        for sid in held:
            self.close(alice, sid)
        self.close(alice, self.create(alice))

    def test_one_tenant_cannot_fill_the_prefix_cache(self):
        alice, bob = self.alice, self.bob
        first = alice.register("fill-0", ids(40, 64))
        share = FAIR_PREFIX_CACHE // 4
        self.assertLess(first.bytes, share // 4)
        names = ["fill-0"]
        refusal = None
        for i in range(1, FAIR_PREFIX_CACHE // first.bytes + 2):
            try:
                names.append(alice.register(f"fill-{i}", ids(40 + i, 64)).name)
            except grpc.RpcError as error:
                refusal = error
                break
        self.assertIsNotNone(refusal, "alice filled the whole prefix cache")
        self.assertEqual(refusal.code(), EXHAUSTED, refusal.details())
        self.assertIn("--tenant-max-prefix-bytes", refusal.details())
        self.assertLessEqual(len(names) * first.bytes, share)
        # bob registers as much as alice could.
        for i in range(len(names)):
            bob.register(f"fill-{i}", ids(140 + i, 64))
        for i in range(len(names)):
            alice.delete(f"fill-{i}")
            bob.delete(f"fill-{i}")


class StateDirTest(unittest.TestCase):

    def test_a_restart_keeps_namespaces_and_shared_prefixes(self):
        with tempfile.TemporaryDirectory(prefix="kvserve-tenants-") as folder:
            keys = os.path.join(folder, "keys.yaml")
            write_api_keys_file(keys, KEYS)
            state = os.path.join(folder, "state")
            os.mkdir(state)
            server = start("--api-keys-file", keys, "--state-dir", state)
            channel = server.channel()
            alice, bob, ops = (Client(channel, key) for key, _, _ in KEYS)
            try:
                alice.register("kept", ids(20, 16))
                ops.register("kept-for-all", ids(21, 12), shared=True)
            finally:
                stop(server)
            server.restart()  # the same flags: the same --state-dir
            channel = server.channel()
            alice, bob, ops = (Client(channel, key) for key, _, _ in KEYS)
            try:
                self.assertEqual(rpc_error(lambda: bob.get("kept")).code(), NOT_FOUND)
                self.assertNotIn("kept", {name for name, _ in bob.listed()})
                kept = alice.get("kept")
                self.assertEqual((kept.num_tokens, kept.shared), (16, False))
                self.assertEqual(alice.generate([5], prefix="kept").cache_report.prefix, "kept")
                for client in (alice, bob):
                    shared = client.get("kept-for-all")
                    self.assertEqual((shared.num_tokens, shared.shared), (12, True))
                self.assertEqual(rpc_error(lambda: bob.delete("kept-for-all")).code(), DENIED)
            finally:
                stop(server)


class DefaultTenantTest(unittest.TestCase):

    def test_without_keys_everyone_is_the_admin_default_tenant(self):
        server = start()
        client = Client(server.channel())
        try:
            self.assertTrue(client.register("everyone", ids(30, 10), shared=True).shared)
            self.assertTrue(client.get("everyone").shared)
            client.register("mine", ids(31, 10))
            self.assertEqual(Client(server.channel()).get("mine").num_tokens, 10)
            client.delete("everyone", shared=True)
            self.assertEqual(rpc_error(lambda: client.get("everyone")).code(), NOT_FOUND)
        finally:
            stop(server)

    def test_a_keys_file_cannot_name_the_default_tenant(self):
        # What was registered without keys lives in the tenant "default": no key may own it.
        with tempfile.TemporaryDirectory(prefix="kvserve-default-tenant-") as folder:
            keys = write_api_keys_file(os.path.join(folder, "keys.yaml"),
                                       [("usurper-secret", "default", "user")])
            done = refused_start(PATHS["kvserve"], ["--threads", "1", "--listen", "127.0.0.1:0",
                                                    "--api-keys-file", keys])
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("keys[0].tenant: 'default' is reserved", done.stderr)


@unittest.skipIf(shutil.which("openssl") is None, "no openssl command to make certificates")
class CertificateTenantsTest(unittest.TestCase):
    """Mutual TLS with --tenant-from-client-cert (carol is an admin) and an API key for dave."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory(prefix="kvserve-tenants-tls-")
        # A CA, a server certificate for 127.0.0.1, client certificates CN=alice, bob, carol.
        cls.certs = Certificates(cls.dir.name, clients=("alice", "bob", "carol"))
        keys = write_api_keys_file(os.path.join(cls.dir.name, "keys.yaml"),
                                   [("dave-secret", "dave", "user")])
        cls.server = start(
            "--tenant-from-client-cert", "--client-cert-admins", "carol", "--api-keys-file", keys,
            "--log-format", "json", tls=cls.certs.tls(client="alice", client_ca="ca"))
        cls.channels = {name: open_channel(cls.server.target, cls.certs.path("ca.crt"),
                                           cls.certs.path(name + ".crt"),
                                           cls.certs.path(name + ".key"))
                        for name in ("alice", "bob", "carol")}

    @classmethod
    def tearDownClass(cls):
        stop(cls.server, *cls.channels.values())
        cls.dir.cleanup()

    def client(self, name, key=None):
        return Client(self.channels[name], key)

    def access_record(self, request_id):
        """The JSON access-log record of request_id (waiting for it a little)."""
        deadline = time.monotonic() + 10 * TIME_SCALE
        while True:
            for line in self.server.log_text().splitlines():
                if line.startswith("{"):
                    record = json.loads(line)
                    if record.get("msg") == "access" and record.get("request_id") == request_id:
                        return record
            self.assertLess(time.monotonic(), deadline, self.server.log_text())
            time.sleep(0.05)

    def test_the_certificate_names_the_tenant(self):
        alice, bob, carol = self.client("alice"), self.client("bob"), self.client("carol")
        alice.register("cert-notes", ids(40, 10), request_id="alice-register")
        error = rpc_error(lambda: bob.get("cert-notes", request_id="bob-get"))
        self.assertEqual(error.code(), NOT_FOUND)
        self.assertEqual(alice.get("cert-notes").num_tokens, 10)
        self.assertNotIn("cert-notes", {name for name, _ in bob.listed()})
        self.assertEqual(self.access_record("alice-register")["tenant"], "alice")
        record = self.access_record("bob-get")
        self.assertEqual((record["tenant"], record["code"]), ("bob", "NOT_FOUND"))
        # carol is an admin by --client-cert-admins; alice is not.
        self.assertTrue(carol.register("cert-shared", ids(41, 8), shared=True).shared)
        self.assertEqual(rpc_error(lambda: alice.register("x", ids(42, 8), shared=True)).code(),
                         DENIED)
        self.assertTrue(bob.get("cert-shared").shared)
        carol.delete("cert-shared", shared=True)
        alice.delete("cert-notes")

    def test_a_key_decides_over_the_certificate(self):
        dave_over_alice = self.client("alice", "dave-secret")
        dave_over_alice.register("dave-notes", ids(43, 10), request_id="dave-register")
        self.assertEqual(self.access_record("dave-register")["tenant"], "dave")
        self.assertEqual(rpc_error(lambda: self.client("alice").get("dave-notes")).code(),
                         NOT_FOUND)
        self.assertEqual(self.client("bob", "dave-secret").get("dave-notes").num_tokens, 10)
        dave_over_alice.delete("dave-notes")

    def test_a_certificate_with_two_cns_is_refused(self):
        # gRPC reports the first CN only ("alice"): which one names the tenant would be a guess.
        def openssl(*args):
            subprocess.run(["openssl", *args], cwd=self.certs.folder, check=True,
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=60)

        openssl("req", "-config", "openssl.cnf", "-new", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "two-cns.key", "-out",
                "two-cns.csr", "-subj", "/CN=alice/CN=mallory")
        openssl("x509", "-req", "-in", "two-cns.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", "two-cns.crt", "-days", "2", "-extfile",
                "openssl.cnf", "-extensions", "client")
        channel = open_channel(self.server.target, self.certs.path("ca.crt"),
                               self.certs.path("two-cns.crt"), self.certs.path("two-cns.key"))
        try:
            error = rpc_error(lambda: Client(channel).get("cert-notes"))
            self.assertEqual(error.code(), grpc.StatusCode.UNAUTHENTICATED, error.details())
            self.assertIn("more than one CN", error.details())
        finally:
            channel.close()

    def test_cert_tenants_need_a_client_ca(self):
        done = refused_start(PATHS["kvserve"], ["--threads", "1", "--listen", "127.0.0.1:0",
                                                *self.certs.tls().server_flags(),
                                                "--tenant-from-client-cert"])
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("--tenant-from-client-cert", done.stderr)
        self.assertIn("--tls-client-ca-file", done.stderr)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    PATHS["kvserve"] = args.kvserve
    unittest.main(argv=[sys.argv[0], "-v", *rest])


if __name__ == "__main__":
    main()
