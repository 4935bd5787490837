"""Consumer policy on every runtime: what a commit stores, bad commit arguments, auto-commit,
the rebalance listener's call order (eager and cooperative; the simulator too), a listener
that raises, a value deserializer that raises. Each scenario runs on every runtime and the
traces must be identical."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.errors import RebalanceListenerError
from kafkastate.structs import OffsetAndMetadata, TopicPartition
from tests.conformance.runtimes import (
    Consumer,
    Runtime,
    Trace,
    assert_same_traces,
    committed_by_reader,
    error,
    new_group,
    new_topic,
    poll_until,
    run_everywhere,
    write,
)
from tests.conformance.sim import sim_listener_calls

pytestmark = pytest.mark.integration

FAST = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 500}
"""Group timings: a rebalance is noticed within half a second."""


def _offsets(batch: dict[Any, list[Any]]) -> list[tuple[int, int]]:
    return [(r.partition, r.offset) for records in batch.values() for r in records]


def _read(consumer: Consumer, count: int, timeout: float = 20) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got.extend(_offsets(consumer.many(timeout_ms=500)))
    return got


# ------------------------------------------------------------------ 1. commit semantics

BAD_COMMITS: list[tuple[str, Any]] = [
    ("a list instead of a mapping", "list"),
    ("(offset, timestamp) tuple as the value", "tuple"),
    ("a negative offset", "negative"),
    ("a string as the offset", "string"),
]


def test_commit_semantics(kafka_cluster: Any) -> None:
    """commit() stores the offset after the last record handed out (getone/iteration, then
    getmany/poll), not what was prefetched; metadata is stored; bad arguments raise the same
    type everywhere and the consumer goes on."""
    bootstrap = kafka_cluster.bootstrap
    topic = new_topic(bootstrap)
    write(bootstrap, topic, [f"v{i}".encode() for i in range(10)])
    tp = TopicPartition(topic, 0)

    def scenario(rt: Runtime) -> Trace:
        group = new_group()
        trace: Trace = []
        c = rt.consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        c.assign([tp])
        for _ in range(3):
            trace.append(("one", c.one().offset))
        trace.append(("many", _offsets(c.many(timeout_ms=5000, max_records=4))))
        c.commit()
        trace.append(("committed after commit()", c.committed(tp), c.position(tp)))
        c.commit({tp: OffsetAndMetadata(5, "meta")})
        trace.append(("committed with metadata", c.committed(tp)))
        trace.append(("read by another client", committed_by_reader(bootstrap, group, tp)))
        bad = {
            "list": [tp],
            "tuple": {tp: (5, 1000)},
            "negative": {tp: -1},
            "string": {tp: "5"},
        }
        for label, key in BAD_COMMITS:
            try:
                c.commit(bad[key])
            except Exception as exc:
                trace.append(("refused", label, *error(exc, topic)))
            else:
                trace.append(("accepted", label))
        trace.append(("committed after refusals", c.committed(tp)))
        trace.append(("rest", _read(c, 3)))
        c.commit()
        trace.append(("committed at the end", c.committed(tp)))
        c.close()
        return trace

    traces = run_everywhere(scenario, name="commit semantics")
    assert_same_traces(traces, scenario="commit semantics")
    # and what they agree on is the documented behaviour
    first = next(iter(traces.values()))
    assert ("committed after commit()", 7, 7) in first
    assert ("read by another client", (5, "meta")) in first
    assert ("committed at the end", 10) in first


# -------------------------------------------------------------------- 2. auto-commit


def test_auto_commit(kafka_cluster: Any) -> None:
    """A member with auto-commit commits what was handed out each interval (seen by
    another client while the application reads nothing), and the final position on close."""
    bootstrap = kafka_cluster.bootstrap
    topic = new_topic(bootstrap)
    write(bootstrap, topic, [f"v{i}".encode() for i in range(10)])
    tp = TopicPartition(topic, 0)

    def scenario(rt: Runtime) -> Trace:
        group = new_group()
        trace: Trace = []
        c = rt.consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=True,
            auto_commit_interval_ms=200,
            **FAST,
        )
        c.subscribe([topic])
        trace.append(("one", [c.one().offset for _ in range(4)]))
        time.sleep(1.0)  # past the interval, reading nothing
        by_reader = committed_by_reader(bootstrap, group, tp)
        trace.append(("committed, read by another client", by_reader))
        trace.append(("committed()", c.committed(tp)))
        trace.append(("rest", _read(c, 6)))
        c.close()
        trace.append(("after close", committed_by_reader(bootstrap, group, tp)))
        return trace

    traces = run_everywhere(scenario, name="auto-commit")
    assert_same_traces(traces, scenario="auto-commit")
    first = next(iter(traces.values()))
    assert ("committed, read by another client", (4, "")) in first
    assert ("after close", (10, "")) in first


# --------------------------------------------------------------- 3. listener order

EMPTY_FIRST_GENERATION = """A member's first generation can come with nothing assigned (the leader
assigned from metadata that did not show the topic yet); it rejoins when the metadata
arrives. Its listener then starts with on_partitions_assigned(()) before the real
assignment. Whether that happens is timing (it was seen on every runtime, in some runs and
not others; the simulator, with 1 ms links, never shows it), so :func:`normalised` drops
such a leading empty assignment."""


class Recorder(ConsumerRebalanceListener):
    """Remembers every callback with its sorted partitions; raises from the ``fail``-th
    ``on_partitions_assigned``."""

    def __init__(self, fail: int = 0) -> None:
        self.calls: list[tuple[str, tuple[int, ...]]] = []
        self.fail = fail
        self.assigned = 0

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("on_partitions_revoked", tuple(sorted(tp.partition for tp in revoked))))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        parts = tuple(sorted(tp.partition for tp in assigned))
        self.calls.append(("on_partitions_assigned", parts))
        self.assigned += 1
        if self.assigned == self.fail:
            raise ValueError("listener bug")

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("on_partitions_lost", tuple(sorted(tp.partition for tp in lost))))


def normalised(calls: list[tuple[str, tuple[int, ...]]], partitions: int) -> Trace:
    """The callback names with their partitions where the split cannot vary (none or all of
    them); else how many (which half a member gets depends on the random member ids)."""
    out: Trace = []
    while calls and calls[0] == ("on_partitions_assigned", ()):  # EMPTY_FIRST_GENERATION
        calls = calls[1:]
    for name, parts in calls:
        if len(parts) in (0, partitions):
            out.append((name, parts))
        else:
            out.append((name, f"{len(parts)} of {partitions}"))
    return out


@pytest.mark.parametrize("assignor", ["range", "cooperative-sticky"])
def test_listener_order(kafka_cluster: Any, assignor: str) -> None:
    """Member A subscribes, B joins, B leaves, A closes: A's listener calls are the same on
    every runtime and, up to A's close, in the simulator."""
    bootstrap = kafka_cluster.bootstrap
    partitions = 4
    topic = new_topic(bootstrap, partitions=partitions)
    settle = 1.0  # seconds of reading after each step, for trailing calls

    def scenario(rt: Runtime) -> Trace:
        group = new_group()
        options = {
            "bootstrap_servers": bootstrap,
            "group_id": group,
            "partition_assignment_strategy": [assignor],
            **FAST,
        }
        listener = Recorder()
        a = rt.consumer(**options)
        a.subscribe([topic], listener=listener)
        poll_until(lambda: len(a.assignment()) == partitions, [a], what="A owns everything")
        b = rt.consumer(**options)
        b.subscribe([topic])

        def split() -> bool:
            mine, theirs = a.assignment(), b.assignment()
            return bool(mine and theirs) and len(mine | theirs) == partitions

        poll_until(split, [a, b], what="A and B share the partitions")
        _settle([a, b], settle)
        b.close()
        poll_until(lambda: len(a.assignment()) == partitions, [a], what="A owns all again")
        _settle([a], settle)
        before_close = list(listener.calls)
        a.close()
        return [
            *normalised(before_close, partitions),
            ("closed",),
            *normalised(listener.calls[len(before_close) :], partitions),
        ]

    traces = run_everywhere(scenario, name=f"listener order ({assignor})")
    assert_same_traces(traces, scenario=f"listener order ({assignor})")
    # The simulator's member runs the same ConsumerMachine; it does not close, so compare
    # what the first runtime saw before A closed.
    until_close = {name: trace[: trace.index(("closed",))] for name, trace in traces.items()}
    until_close["sim"] = normalised(sim_listener_calls(assignor, partitions), partitions)
    assert_same_traces(until_close, scenario=f"listener order ({assignor}), up to close")


def _settle(consumers: list[Consumer], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.many(timeout_ms=100)


# ----------------------------------------------------------- 4. a listener that raises


def test_listener_error(kafka_cluster: Any) -> None:
    """on_partitions_assigned raises: the next read raises RebalanceListenerError naming the
    callback, once; the assignment stands and reading goes on."""
    bootstrap = kafka_cluster.bootstrap
    topic = new_topic(bootstrap)
    write(bootstrap, topic, [f"v{i}".encode() for i in range(6)])

    def scenario(rt: Runtime) -> Trace:
        trace: Trace = []
        listener = Recorder(fail=1)
        c = rt.consumer(
            bootstrap_servers=bootstrap,
            group_id=new_group(),
            auto_offset_reset="earliest",
            **FAST,
        )
        c.subscribe([topic], listener=listener)
        got: list[tuple[int, int]] = []
        deadline = time.monotonic() + 20
        while len(got) < 6 and time.monotonic() < deadline:
            try:
                got.extend(_offsets(c.many(timeout_ms=300)))
            except RebalanceListenerError as exc:
                cause = type(exc.__cause__).__name__
                trace.append(("raised", type(exc).__name__, exc.callback, cause, len(got)))
        for _ in range(3):  # raised once only
            try:
                got.extend(_offsets(c.many(timeout_ms=200)))
            except RebalanceListenerError as exc:
                trace.append(("raised again", exc.callback))
        trace.append(("records", sorted(got)))
        trace.append(("assignment", sorted(tp.partition for tp in c.assignment())))
        c.close()
        trace.append(("listener calls", normalised(listener.calls, 1)))
        return trace

    traces = run_everywhere(scenario, name="listener error")
    assert_same_traces(traces, scenario="listener error")
    first = next(iter(traces.values()))
    raised = ("raised", "RebalanceListenerError", "on_partitions_assigned", "ValueError", 0)
    assert first[0] == raised


# ---------------------------------------------------- 8. a deserializer that raises


def _deserializer(value: bytes) -> str:
    if value == b"bad":
        raise ValueError("cannot decode")
    return value.decode()


@pytest.mark.parametrize("read", ["many", "one"])
def test_deserializer_error(kafka_cluster: Any, read: str) -> None:
    """A value_deserializer raises on one record: the same exception on every runtime and
    nothing lost -- the records before it are handed out, the read stops at it (again on
    the next read, its position unchanged) until the application seeks past it, then the
    rest follows."""
    bootstrap = kafka_cluster.bootstrap
    topic = new_topic(bootstrap)
    write(bootstrap, topic, [b"v0", b"v1", b"bad", b"v3", b"v4"])
    tp = TopicPartition(topic, 0)

    def scenario(rt: Runtime) -> Trace:
        trace: Trace = []
        c = rt.consumer(
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            value_deserializer=_deserializer,
        )
        c.assign([tp])
        errors = 0
        deadline = time.monotonic() + 15
        while c.position(tp) < 5 and time.monotonic() < deadline:
            try:
                if read == "one":
                    records = [c.one()]
                else:
                    records = [r for rs in c.many(timeout_ms=500).values() for r in rs]
            except Exception as exc:
                errors += 1
                trace.append(("raised", *error(exc), type(exc.__cause__).__name__))
                trace.append(("position", c.position(tp)))
                if errors == 2:  # stuck at the record: the application skips it
                    c.seek(tp, c.position(tp) + 1)
                continue
            trace.extend(("record", r.offset, r.value) for r in records)
        trace.append(("position at the end", c.position(tp)))
        c.close()
        return trace

    traces = run_everywhere(scenario, name=f"deserializer error ({read})")
    assert_same_traces(traces, scenario=f"deserializer error ({read})")
    first = next(iter(traces.values()))
    raised = [("raised", "ValueError", "cannot decode", "NoneType"), ("position", 2)]
    assert first == [
        ("record", 0, "v0"),
        ("record", 1, "v1"),
        *raised,
        *raised,  # the same record again: nothing was skipped behind the application's back
        ("record", 3, "v3"),
        ("record", 4, "v4"),
        ("position at the end", 5),
    ]
