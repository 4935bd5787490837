"""Consumer groups against real Kafka: members in processes of their own (so one can be
SIGKILLed), mixing adapters and clients; rebalance listeners; KIP-848.

Each member is ``python -m tests.integration.group_member`` and reports what happened to it as
JSON lines (see that module); the checks here read those reports.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.sync import KafkaProducer

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SESSION_MS = 6000  # the broker's group.min.session.timeout.ms
_sequence = itertools.count()  # orders the reports of every member as they arrive


class Member:
    """One member process and what it reported, each report numbered in arrival order."""

    def __init__(self, adapter: str, bootstrap: str, topic: str, group: str, *args: str) -> None:
        self.adapter = adapter
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.group_member",
                adapter,
                bootstrap,
                topic,
                group,
                *args,
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        self.events: list[tuple[int, dict[str, Any]]] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            with self._lock:
                self.events.append((next(_sequence), event))

    def reports(self) -> list[tuple[int, dict[str, Any]]]:
        with self._lock:
            return list(self.events)

    def owned(self) -> set[int]:
        """What its listener says it owns now."""
        owned: set[int] = set()
        for _seq, event in self.reports():
            if event["event"] == "assigned":
                owned |= set(event["partitions"])
            elif event["event"] in ("revoked", "lost"):
                owned -= set(event["partitions"])
        return owned

    def count(self, kind: str) -> int:
        return sum(1 for _seq, e in self.reports() if e["event"] == kind)

    def stop(self, timeout: float = 30) -> None:
        """Ask it to close cleanly and wait for it."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout)
        self._reader.join(5)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._reader.join(5)

    def diagnose(self) -> str:
        alive = self.proc.poll() is None
        err = "" if alive or self.proc.stderr is None else self.proc.stderr.read()[-3000:]
        return f"{self.adapter} ({'alive' if alive else self.proc.returncode}): {err}"


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for m in started:
        if m.proc.poll() is None:
            m.proc.kill()
            m.proc.wait(10)


def _topic(bootstrap: str, partitions: int = 6) -> str:
    name = f"group-{uuid.uuid4().hex[:10]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def _produce(bootstrap: str, topic: str, per_partition: int, partitions: int = 6) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap) as producer:
        for i in range(per_partition):
            for p in range(partitions):
                producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
        producer.flush()


def _wait(what: str, ready: Callable[[], bool], members: list[Member], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            states = "\n".join(f"{m.diagnose()} owns {sorted(m.owned())}" for m in members)
            pytest.fail(f"timed out waiting for {what}:\n{states}")
        time.sleep(0.1)


def _split(members: list[Member], partitions: int = 6) -> bool:
    """Every partition owned by exactly one member, each member owning its share."""
    owned = [m.owned() for m in members]
    every = [p for o in owned for p in o]
    share = partitions // len(members)
    return sorted(every) == list(range(partitions)) and all(
        share <= len(o) <= share + 1 for o in owned
    )


def _consumed(members: list[Member]) -> list[tuple[int, Member, int, int]]:
    """(sequence, member, partition, offset) of every record handed out, in order."""
    out = []
    for m in members:
        for seq, event in m.reports():
            if event["event"] == "records":
                out.extend((seq, m, p, o) for p, o in event["items"])
    return sorted(out, key=lambda r: r[0])


def _check_at_least_once(members: list[Member], per_partition: int, partitions: int = 6) -> None:
    """Every record was consumed; a record consumed again was not covered by a commit
    reported before it was consumed again (duplicates only after the last commit)."""
    consumed = _consumed(members)
    got = {(p, o) for _s, _m, p, o in consumed}
    missing = {(p, o) for p in range(partitions) for o in range(per_partition)} - got
    assert not missing, f"records never consumed: {sorted(missing)[:20]}"
    commits = sorted(
        (seq, p, o)
        for m in members
        for seq, event in m.reports()
        if event["event"] == "committed"
        for p, o in ((int(k), v) for k, v in event["offsets"].items())
    )
    first: dict[tuple[int, int], tuple[int, Member]] = {}
    for seq, member, p, o in consumed:
        if (p, o) not in first:
            first[(p, o)] = (seq, member)
            continue
        committed_before = max((c for s, cp, c in commits if cp == p and s < seq), default=0)
        assert o >= committed_before, (
            f"record {p}/{o} consumed again by {member.adapter} although offset "
            f"{committed_before} had been committed before"
        )


def _all_consumed(members: list[Member], per_partition: int, partitions: int = 6) -> bool:
    want = {(p, o) for p in range(partitions) for o in range(per_partition)}
    return want <= {(p, o) for _s, _m, p, o in _consumed(members)}


# ----------------------------------------------------------------------------- the tests


def test_members_of_every_adapter_share_rebalance_and_survive_a_kill(
    kafka_cluster: Any, members: list[Member]
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    for adapter in ("asyncio", "trio", "sync"):
        members.append(Member(adapter, bootstrap, topic, group, "--strategy", "range"))
    _wait("an even split over asyncio, trio and sync", lambda: _split(members), members, 60)
    _produce(bootstrap, topic, 50)
    _wait("the first records", lambda: _all_consumed(members, 50), members, 60)

    members.append(Member("anyio", bootstrap, topic, group, "--strategy", "range"))
    _wait("a fourth member to get its share", lambda: _split(members), members, 60)
    _produce(bootstrap, topic, 50)
    _wait("more records", lambda: _all_consumed(members, 100), members, 60)

    victim = members[1]  # the trio member
    lost = victim.owned()
    victim.kill()
    killed_at = time.monotonic()
    survivors = [m for m in members if m is not victim]
    _wait("the killed member's partitions to move", lambda: _split(survivors), members, 60)
    moved_in = time.monotonic() - killed_at
    assert lost, "the killed member owned nothing"
    assert moved_in < SESSION_MS / 1000 + 10, f"partitions moved only after {moved_in:.1f} s"
    _produce(bootstrap, topic, 50)
    _wait("every record", lambda: _all_consumed(members, 150), members, 60)
    _check_at_least_once(members, 150)
    for m in survivors:
        m.stop()
        assert m.count("closed") == 1, m.diagnose()


def test_cooperative_sticky_keeps_unaffected_partitions_owned(
    kafka_cluster: Any, members: list[Member]
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    args = ("--strategy", "cooperative-sticky")
    for adapter in ("asyncio", "trio"):
        members.append(Member(adapter, bootstrap, topic, group, *args))
    _wait("a split over two members", lambda: _split(members), members, 60)
    before = {id(m): m.owned() for m in members}
    revokes_before = {id(m): len(m.reports()) for m in members}
    _produce(bootstrap, topic, 20)
    members.append(Member("sync", bootstrap, topic, group, *args))
    _wait("a split over three members", lambda: _split(members), members, 60)
    _produce(bootstrap, topic, 20)
    _wait("every record", lambda: _all_consumed(members, 40), members, 60)
    for m in members[:2]:
        revoked = {
            p
            for _seq, e in m.reports()[revokes_before[id(m)] :]
            if e["event"] in ("revoked", "lost")
            for p in e["partitions"]
        }
        kept = before[id(m)] & m.owned()
        # only the partitions that moved to the newcomer were revoked; the rest stayed
        assert revoked == before[id(m)] - m.owned(), (m.adapter, revoked, before[id(m)])
        assert kept and not (revoked & kept)
    assert all(m.count("lost") == 0 for m in members)
    _check_at_least_once(members, 40)


def test_static_member_restart_within_session_causes_no_rebalance(
    kafka_cluster: Any, members: list[Member]
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    session = ("--session-ms", "20000")
    members.append(Member("asyncio", bootstrap, topic, group, "--instance-id", "a", *session))
    members.append(Member("trio", bootstrap, topic, group, "--instance-id", "b", *session))
    _wait("a split over two static members", lambda: _split(members), members, 60)
    steady = members[0]
    events_before = len(steady.reports())
    owned_b = members[1].owned()
    members[1].kill()
    restarted = Member("trio", bootstrap, topic, group, "--instance-id", "b", *session)
    members.append(restarted)
    _wait("the restarted member's partitions", lambda: restarted.owned() == owned_b, members, 30)
    _produce(bootstrap, topic, 10)
    _wait("every record", lambda: _all_consumed([steady, restarted], 10), members, 30)
    rebalance = [
        e
        for _s, e in steady.reports()[events_before:]
        if e["event"] != "records" and e["event"] != "committed"
    ]
    assert rebalance == [], f"the steady member saw a rebalance: {rebalance}"


def test_kafkastate_and_kafka_python_members_share_a_group(
    kafka_cluster: Any, members: list[Member]
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    for adapter in ("anyio", "kafka-python"):
        members.append(Member(adapter, bootstrap, topic, group, "--strategy", "roundrobin"))
    _wait("a split with kafka-python", lambda: _split(members), members, 60)
    _produce(bootstrap, topic, 30)
    _wait("every record", lambda: _all_consumed(members, 30), members, 60)
    _check_at_least_once(members, 30)
    for m in members:
        m.stop()


def test_kip848_group_of_kafkastate_members(kafka_cluster: Any, members: list[Member]) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    group = f"g-{uuid.uuid4().hex[:8]}"
    for adapter in ("asyncio", "trio"):
        members.append(Member(adapter, bootstrap, topic, group, "--protocol", "consumer"))
    _wait("a KIP-848 split", lambda: _split(members), members, 60)
    _produce(bootstrap, topic, 30)
    _wait("every record", lambda: _all_consumed(members, 30), members, 60)
    _check_at_least_once(members, 30)
    members[0].stop()
    _wait("the survivor to own everything", lambda: _split(members[1:]), members, 60)
