"""Registrations and deletions racing on a few names, then a restart on the same --state-dir
(issue 27 item 13: a deleted prefix came back). Two clients register and two delete the same
names for about a second; then the server stops cleanly (SIGTERM) or is killed (kill -9, while
the clients still call). After the restart every name must be in the state its last
acknowledged operation left it in.

Each call is recorded with the client's monotonic times before it was sent and after its answer
came. An acknowledged operation (answered OK, or a delete answered NOT_FOUND, which saw the name
absent) took effect at one moment inside that interval. The last one to take effect may be any
operation that no other acknowledged operation began after the end of: the name must be in the
state of one of those. A call the kill cut off (no answer) may or may not have taken effect, at
any moment after it began: its state is allowed too. So an acknowledged delete that no
acknowledged or unanswered registration could follow leaves the name deleted.

usage: scripts/python.sh tests/e2e/test_prefix_race.py \\
         --kvserve build/server/kvserve
"""
import argparse
import random
import shutil
import sys
import tempfile
import threading
import time
import unittest

from kvserve_stubs import (  # noqa: E402  pylint: disable=wrong-import-position
    generation_pb2,
    grpc,
    prefix_pb2,
    prefix_pb2_grpc,
)
from kvserve_launch import (  # noqa: E402  pylint: disable=wrong-import-position
    TIME_SCALE,
    KvserveProcess,
)

KVSERVE = None
RACE_S = 1.0
# A lost deletion shows only when it is its name's last call: many names, many last calls.
NAMES_PER_TRIAL = 8
PRESENT, ABSENT = "present", "absent"


class Call:
    """One client call: what it did, when, and how it ended (ok, not_found or unanswered)."""

    def __init__(self, name, op, start, end, outcome):
        self.name, self.op, self.start, self.end, self.outcome = name, op, start, end, outcome

    @property
    def state(self):
        """The state this call leaves (or, a NOT_FOUND delete, observed) the name in."""
        return PRESENT if self.op == "register" else ABSENT

    def __repr__(self):
        return (f"{self.op} {self.outcome} [{self.start:.6f}, "
                f"{'-' if self.end is None else format(self.end, '.6f')}]")


def allowed_states(calls):
    """The states a name may be in once `calls` (all of its calls) are over."""
    # A delete answered NOT_FOUND acknowledges the state it saw (absent): kvserve answers it
    # only once the delete that emptied the name is durable.
    answered = [c for c in calls if c.outcome in ("ok", "not_found")]
    unanswered = [c for c in calls if c.outcome == "unanswered"]
    if not answered and not unanswered:
        return {ABSENT}
    allowed = {c.state for c in unanswered}
    if not answered:
        allowed.add(ABSENT)  # none of the unanswered ones may have happened
    for call in answered:
        if not any(other.start > call.end for other in answered):
            allowed.add(call.state)
    return allowed


class Server(KvserveProcess):
    def __init__(self, state_dir):
        super().__init__(KVSERVE, ["--threads", "1", "--state-dir", state_dir,
                                   "--shutdown-grace-seconds", "5"],
                         start_timeout_s=120 * TIME_SCALE)


class PrefixRaceTest(unittest.TestCase):
    def setUp(self):
        self.state_dir = tempfile.mkdtemp(prefix="kvserve-race-")
        self.server = Server(self.state_dir)
        # Names of earlier trials with the state the restart found them in.
        self.known = {}

    def tearDown(self):
        self.server.kill()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def race(self, trial, kill_mid_race):
        """Two registering and two deleting clients on this trial's names for RACE_S (with
        kill_mid_race, the server is killed -9 while they call). Returns every call."""
        names = [f"t{trial}-{i}" for i in range(NAMES_PER_TRIAL)]
        calls = []
        lock = threading.Lock()
        stop_at = time.monotonic() + RACE_S
        channel = self.server.channel()
        stub = prefix_pb2_grpc.PrefixCacheStub(channel)

        def client(op, seed):
            rng = random.Random(seed)
            while time.monotonic() < stop_at and self.server.running:
                name = rng.choice(names)
                # Content changes from call to call: a registration replaces as often as not.
                ids = [rng.randrange(1, 250) for _ in range(rng.randrange(4, 12))]
                start = time.monotonic()
                try:
                    if op == "register":
                        stub.RegisterPrefix(prefix_pb2.RegisterPrefixRequest(
                            name=name, token_ids=generation_pb2.TokenIds(ids=ids)), timeout=30)
                    else:
                        stub.DeletePrefix(prefix_pb2.DeletePrefixRequest(name=name), timeout=30)
                    outcome = "ok"
                except grpc.RpcError as error:
                    if op == "delete" and error.code() == grpc.StatusCode.NOT_FOUND:
                        outcome = "not_found"
                    elif kill_mid_race:
                        outcome = "unanswered"
                    else:
                        outcome = f"error {error.code()}: {error.details()}"
                except ValueError:  # the kill closed the channel before this call was sent
                    if not kill_mid_race:
                        raise
                    outcome = "unanswered"
                end = time.monotonic() if outcome != "unanswered" else None
                with lock:
                    calls.append(Call(name, op, start, end, outcome))
                if outcome == "unanswered":
                    return

        threads = [threading.Thread(target=client, args=(op, trial * 10 + i))
                   for i, op in enumerate(["register", "register", "delete", "delete"])]
        for thread in threads:
            thread.start()
        if kill_mid_race:
            time.sleep(RACE_S * rng_fraction(trial))
            self.server.kill()
        for thread in threads:
            thread.join(timeout=60)
        errors = [c for c in calls if c.outcome.startswith("error")]
        self.assertEqual(errors, [], "only OK and NOT_FOUND answers are expected")
        return names, calls

    def listed(self):
        stub = prefix_pb2_grpc.PrefixCacheStub(self.server.channel())
        return {p.name for p in stub.ListPrefixes(prefix_pb2.ListPrefixesRequest(),
                                                  timeout=30).prefixes}

    def check(self, trial, names, calls, listed, when):
        for name in names:
            own = [c for c in calls if c.name == name]
            allowed = allowed_states(own)
            state = PRESENT if name in listed else ABSENT
            self.assertIn(state, allowed,
                          f"trial {trial} ({when}): '{name}' is {state}; its calls, by start: "
                          f"{sorted(own, key=lambda c: c.start)}")
        for name, state in self.known.items():
            self.assertEqual(PRESENT if name in listed else ABSENT, state,
                             f"trial {trial} ({when}): '{name}' of an earlier trial changed")

    def test_restart_finds_each_name_as_its_last_acknowledged_call_left_it(self):
        # Trials alternate: a clean stop after the race, then kill -9 in the middle of one.
        summary = []
        for trial in range(4):
            kill = trial % 2 == 1
            names, calls = self.race(trial, kill_mid_race=kill)
            before = None
            if not kill:
                # The live catalog first, then the one a restart rebuilds from the journal.
                before = self.listed()
                self.check(trial, names, calls, before, "before the stop")
                self.server.stop()
            self.server.start()
            listed = self.listed()
            if before is not None:
                # Nothing changed between the stop and the restart.
                self.assertEqual(sorted(listed), sorted(before),
                                 f"trial {trial}: the restart lists other prefixes than the "
                                 f"server listed before its SIGTERM")
            self.check(trial, names, calls, listed, "after kill -9" if kill else "after SIGTERM")
            for name in names:
                self.known[name] = PRESENT if name in listed else ABSENT
            summary.append(f"trial {trial}: {len(calls)} calls, "
                           f"{sum(c.outcome == 'ok' and c.op == 'delete' for c in calls)} "
                           f"deletes acknowledged, {'kill -9' if kill else 'SIGTERM'}")
        print("\n".join(summary))


def rng_fraction(trial):
    """Where in the race kill -9 falls (0.4 to 0.9 of it), different from trial to trial."""
    return 0.4 + 0.5 * random.Random(trial).random()


def main():
    global KVSERVE
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--kvserve", required=True)
    args, rest = parser.parse_known_args()
    KVSERVE = args.kvserve
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
