"""The producer's hot paths must be invisible: ``Accumulator.append_sticky`` (a keyless
record to the sticky partition's open batch) and the quiet batch open
(``Accumulator.take_quiet_open``: a new batch that only waits for its linger costs no full
look at every partition). A machine that takes them and one that never does produce the
same requests, record ids and outcomes under any mix of operations. No sockets; the
scripted peer cluster of test_producer_machine answers."""

from __future__ import annotations

import asyncio
import random
import sys
from typing import Any

import pytest

from kafkastate.adapters.anyio.producer import _UNOBSERVED
from kafkastate.core.producer import RecordsAcknowledged, RecordsFailed
from kafkastate.core.producer.accumulator import Accumulator, ProducerBatch
from kafkastate.core.producer.partitioner import Partitioner
from kafkastate.core.protocol import records
from kafkastate.core.protocol.records import RecordBatchBuilder, iter_batches
from kafkastate.core.protocol.versions import ApiKey
from tests.core.producer.test_producer_machine import (
    TS,
    PeerCluster,
    machine,
    parts_of,
    produce_response,
)


def _script(seed: int, *, fast: bool) -> tuple[list[Any], int, int, int]:
    """Run one seeded mix of sends, leader moves, timers and answers; return what the
    machine did (record ids, requests as sent, outcomes) and how many records took the
    hot path, how many batches opened quietly and how many keyed records took theirs."""
    rng = random.Random(seed)
    peer = PeerCluster(
        machine(
            linger=rng.choice([0.0, 0.005, 0.05]),
            batch_size=rng.choice([300, 1500, 16384]),
            buffer_memory=rng.choice([48000, 1 << 20]),
            enable_idempotence=rng.random() < 0.5,
            acks=-1,
        ),
        topics={"t": {0: (1, 0), 1: (2, 0), 2: (1, 0)}, "u": {0: (2, 0)}},
    )
    acc = peer.m.accumulator
    counts = {"sticky": 0, "quiet": 0, "keyed": 0}

    def counted(name: str, method: Any) -> Any:
        # the hot path when fast, else "not taken" (None): the general path does it all
        def call(*args: Any) -> Any:
            result = method(*args) if fast else None
            counts[name] += result is not None
            return result

        return call

    acc.append_sticky = counted("sticky", acc.append_sticky)  # type: ignore[method-assign]
    acc.take_quiet_open = counted("quiet", acc.take_quiet_open)  # type: ignore[method-assign]
    acc.append_keyed = counted("keyed", acc.append_keyed)  # type: ignore[method-assign]
    # With the C accelerator the machine calls the compiled hot paths directly.
    compiled = records._c_lane_sticky, records._c_lane_hashed
    try:
        if compiled[0] is not None and compiled[1] is not None:
            records._c_lane_sticky = counted("sticky", compiled[0])
            records._c_lane_hashed = counted("keyed", compiled[1])
        log = _run_script(peer, rng, seed)
    finally:
        records._c_lane_sticky, records._c_lane_hashed = compiled
    return log, counts["sticky"], counts["quiet"], counts["keyed"]


def _run_script(peer: PeerCluster, rng: random.Random, seed: int) -> list[Any]:
    keys = random.Random(seed + 1000)  # its own draws: the main sequence stays as it was
    plain = random.Random(seed + 2000)  # send_plain first (as drivers call it), or send
    peer.start()
    ids = peer.topic_ids()
    offsets: dict[tuple[str, int], int] = {}
    log: list[Any] = []
    for _ in range(400):
        r = rng.random()
        topic = rng.choice(["t", "t", "u"])
        kw: dict[str, Any] = {}
        if r < 0.06:
            kw["key"] = b"k%d" % rng.randrange(5)
        elif r < 0.09:
            kw["headers"] = [("h", b"v")]
        elif r < 0.11:
            kw["partition"] = 0
        elif r < 0.14:
            p = rng.randrange(3)
            leader, epoch = peer.topics["t"][p]
            peer.topics["t"][p] = (3 - leader, epoch + 1)
            peer.m.client.request_metadata_update()
            peer.pump()
            log.append(("moved", p))
            continue
        elif r < 0.22:
            peer.now += rng.choice([0.001, 0.01, 0.1])
            peer.m.handle_timer(now=peer.now)
            peer.pump()
            continue
        elif r < 0.30:
            for sent in [s for s in peer.pending if s.req.api_key == ApiKey.PRODUCE]:

                def answer(part: Any) -> tuple[int, int]:
                    key = (part.topic, part.partition)
                    base = offsets.get(key, 0)
                    offsets[key] = base + len(part.values)
                    return 0, base

                log.append(("request", sent.node, [vars(p) for p in parts_of(sent, ids)]))
                peer.answer(sent, produce_response(sent, answer, ids))
            continue
        value = bytes([rng.randrange(256)]) * rng.choice([0, 1, 50, 63, 64, 100, 300, 9000])
        ts = TS + rng.randrange(-5, 50)
        if not kw and keys.random() < 0.3:  # keyed (the keyed hot path), keys of 1-70 bytes
            kw["key"] = b"k%d" % keys.randrange(20) + b"x" * keys.choice([0, 0, 8, 60])
        try:
            rid = None
            if kw.keys() <= {"key"} and plain.random() < 0.5:
                rid = peer.m.send_plain(topic, value, kw.get("key"), ts, peer.now)
            if rid is None:
                rid = peer.m.send(topic, value=value, timestamp_ms=ts, now=peer.now, **kw)
        except Exception as exc:  # BufferFullError, MessageTooLargeError: same on both
            log.append(("refused", type(exc).__name__))
        else:
            log.append(("sent", rid))
        peer.pump()
        # as a driver does: whatever is due runs at once
        while (due := peer.m.get_timer()) is not None and due <= peer.now:
            peer.m.handle_timer(now=peer.now)
            peer.pump()
    for event in peer.events:
        if isinstance(event, RecordsAcknowledged):
            log.append(("ack", event.topic, event.partition, event.record_ids, event.base_offset))
        elif isinstance(event, RecordsFailed):
            log.append(("failed", event.record_ids, type(event.error).__name__))
    return log


@pytest.mark.usefixtures("implementation")  # the C accelerator and the Python reference
@pytest.mark.parametrize("seed", range(12))
def test_hot_paths_change_nothing_observable(seed: int) -> None:
    fast, taken, quiet, keyed = _script(seed, fast=True)
    slow, none_taken, none_quiet, none_keyed = _script(seed, fast=False)
    assert none_taken == none_quiet == none_keyed == 0
    assert taken > 20, "the script should exercise the hot path"
    assert keyed > 5, "the script should exercise the keyed hot path"
    assert fast == slow
    if seed in (0, 5, 6):  # seeds with a linger (linger 0 sends every batch at once)
        assert quiet > 10, "the script should open batches quietly"


def test_hot_path_is_left_when_the_metadata_changes() -> None:
    peer = PeerCluster(machine(linger=10.0), topics={"t": {0: (1, 0)}})
    peer.start()
    m = peer.m
    m.send("t", value=b"a", timestamp_ms=TS, now=0.0)  # the general path opens the lane
    acc = m.accumulator
    assert acc.append_sticky("t", TS, b"b", m.client.cluster) is not None
    peer.topics["t"][0] = (2, 1)
    m.client.request_metadata_update()
    peer.advance()
    # a new snapshot: the sticky partition must be checked again by the general path
    assert acc.append_sticky("t", TS, b"c", m.client.cluster) is None
    m.send("t", value=b"c", timestamp_ms=TS, now=0.0)
    assert acc.append_sticky("t", TS, b"d", m.client.cluster) is not None
    # unusual arguments are left to the general path (which names what is wrong)
    assert acc.append_sticky("t", 1.5, b"e", m.client.cluster) is None  # type: ignore[arg-type]
    assert acc.append_sticky("t", TS, bytearray(b"e"), m.client.cluster) is None  # type: ignore[arg-type]
    assert acc.append_sticky("t", -1, b"e", m.client.cluster) is None


def test_a_future_nobody_holds_is_recognised() -> None:
    # AIOKafkaProducer.send's futures: one the caller dropped (no callback) is not resolved;
    # one the caller still holds must be.
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 14):
        assert _UNOBSERVED is None  # no reliable reference count: resolve every future
        return
    assert _UNOBSERVED is not None
    loop = asyncio.new_event_loop()
    try:
        held = loop.create_future()
        deliveries = {1: held, 2: loop.create_future()}
        sink = deliveries.pop(1)
        assert sys.getrefcount(sink) > _UNOBSERVED
        sink = deliveries.pop(2)
        assert sys.getrefcount(sink) <= _UNOBSERVED
        assert held is not sink
    finally:
        loop.close()


def test_a_quiet_open_is_not_urgent() -> None:
    # A batch that only waits for its linger moves `steps` (the driver must re-read the
    # timer) but not `urgent_steps` (an awaited send need not yield for it); a full batch,
    # sendable now, moves both.
    peer = PeerCluster(
        machine(linger=0.05, batch_size=400), topics={"t": {p: (1, 0) for p in range(4)}}
    )
    peer.start()
    m = peer.m
    moves = []
    for i in range(40):
        steps, urgent = m.steps, m.urgent_steps
        m.send("t", value=b"v" * 50, key=b"key-%d" % i, timestamp_ms=TS, now=peer.now)
        moves.append((m.steps - steps, m.urgent_steps - urgent))
    opened = [i for i, (s, u) in enumerate(moves) if s and not u]
    urgent = [i for i, (s, u) in enumerate(moves) if u]
    assert opened[:4] == [0, 1, 2, 3]  # keys 0-3: a new batch on each partition, quietly
    assert urgent[0] > 3, "then full batches, sendable now"
    assert all(s for s, u in moves if u)  # urgent implies a step
    peer.pump()
    assert peer.produces()  # the full batches went out, before any linger passed


@pytest.mark.usefixtures("implementation")
@pytest.mark.parametrize("key", [None, b"k"])
def test_a_tombstone_to_an_open_batch_takes_the_general_path(key: bytes | None) -> None:
    # A null value (a tombstone) to a partition whose open batch has room: the hot paths
    # leave it to the general path (they once raised TypeError asking for its length).
    peer = PeerCluster(machine(linger=10.0), topics={"t": {0: (1, 0)}})
    peer.start()
    m = peer.m
    first = m.send("t", value=b"a", key=key, timestamp_ms=TS, now=0.0)
    assert m.send("t", value=None, key=key, timestamp_ms=TS, now=0.0) == first + 1
    assert m.send("t", value=b"c", key=key, timestamp_ms=TS + 1, now=0.0) == first + 2
    (batch,) = m.accumulator.queued_batches("t", 0)
    (decoded,) = iter_batches(batch.build())
    assert [(r.key, r.value) for r in decoded.records()] == [
        (key, b"a"),
        (key, None),
        (key, b"c"),
    ]


@pytest.mark.usefixtures("c_accelerator")
def test_the_compiled_hot_paths_touch_only_the_registered_classes() -> None:
    from kafkastate.core.protocol import _speedups  # noqa: PLC0415 (only where built)

    class Other(Accumulator):
        pass

    peer = PeerCluster(machine(linger=10.0), topics={"t": {0: (1, 0)}})
    peer.start()
    m = peer.m
    m.send("t", value=b"a", timestamp_ms=TS, now=0.0)
    m.send("t", value=b"a", key=b"k", timestamp_ms=TS, now=0.0)
    cluster = m.client.cluster
    assert _speedups.lane_sticky(m.accumulator, "t", TS, b"b", cluster) is not None
    assert _speedups.lane_keyed(m.accumulator, "t", 0, TS, b"k", b"b") is not None
    other = Other(m.accumulator.config, rng=random.Random(0))
    assert _speedups.lane_sticky(other, "t", TS, b"b", cluster) is None
    assert _speedups.lane_keyed(other, "t", 0, TS, b"k", b"b") is None
    assert _speedups.lane_sticky(object(), "t", TS, b"b", cluster) is None
    partitioner = m._partitioner
    assert (
        _speedups.lane_hashed(m.accumulator, partitioner, "t", TS, b"k", b"b", cluster) is not None
    )
    assert _speedups.lane_hashed(other, partitioner, "t", TS, b"k", b"b", cluster) is None
    assert _speedups.lane_hashed(m.accumulator, object(), "t", TS, b"k", b"b", cluster) is None
    with pytest.raises(TypeError, match="not a slot"):
        _speedups.setup_lanes(Other, ProducerBatch, RecordBatchBuilder, PeerCluster, Partitioner)
    with pytest.raises(TypeError):
        _speedups.setup_lanes(Accumulator, ProducerBatch)  # type: ignore[call-arg]
    # a refused registration left the real one in place
    assert _speedups.lane_sticky(m.accumulator, "t", TS, b"b", cluster) is not None
