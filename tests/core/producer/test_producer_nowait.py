"""Sends that cannot wait (``ProducerMachine.send(block=False)``): the core's rule for the
fire-and-forget ``send_nowait`` of every face, and for confluent-kafka's ``produce()``.

Even with ``max_block`` set, a record that does not fit ``buffer.memory`` now -- or that
comes while earlier sends wait for it -- is refused at once with ``BufferFullError`` (a
builtin ``BufferError`` too): nothing is appended, nothing waits, and the sends that did
wait keep their place. A record whose topic metadata is pending is held as for a waiting
send: its outcome comes as events. Driven by hand: the scripted peer cluster, time stepped
with ``now=``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kafkastate.core.producer import (
    BufferFullError,
    RecordsAcknowledged,
    RecordsAdmitted,
    RecordsFailed,
)
from kafkastate.errors import KafkaTimeoutError
from tests.core.producer.test_producer_machine import TS, PeerCluster
from tests.core.producer.test_producer_wait import (
    MAX_BLOCK,
    admitted_ids,
    answer_all,
    fill,
    of,
    waiting_peer,
)


def nowait(peer: PeerCluster, value: bytes, *, topic: str = "t", **kw: Any) -> Any:
    rid = peer.m.send(topic, value=value, timestamp_ms=TS, now=peer.now, block=False, **kw)
    peer.pump()
    return rid


def test_a_full_buffer_refuses_a_nowait_send_at_once() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    sent = []
    with pytest.raises(BufferFullError) as info:
        for _ in range(50):
            sent.append(nowait(peer, bytes(100), partition=0))
    assert isinstance(info.value, BufferError)  # confluent-kafka's produce() raises that
    assert info.value.retriable
    assert sent, "the buffer had room for some records"
    assert m.accumulator.waiting_sends == 0  # refused, not queued
    outstanding = m.accumulator.outstanding_records
    assert outstanding == len(sent)  # nothing of the refused record stays
    # exhausted: every partition is sent without waiting for its linger (as Java)
    assert peer.produces()
    answer_all(peer, {})
    m.flush(now=peer.now)  # the linger of the last batch
    peer.pump()
    answer_all(peer, {})
    acked = [rid for e in of(peer, RecordsAcknowledged) for rid in e.record_ids]
    assert acked == sent
    # room again: the same call appends
    rid = nowait(peer, bytes(100), partition=0)
    assert not m.is_waiting(rid)


def test_a_nowait_send_never_overtakes_a_waiting_one() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    waiting = fill(peer)[-1]  # a blocking send waits in the FIFO
    with pytest.raises(BufferFullError):
        nowait(peer, b"x", partition=1)  # would fit, but must not jump the queue
    assert m.accumulator.waiting_sends == 1 and m.is_waiting(waiting)
    answer_all(peer, {})
    assert admitted_ids(peer) == [waiting]
    assert m.get_timer() != MAX_BLOCK  # the refused send left no deadline behind


def test_the_sticky_fast_path_refuses_the_same_way() -> None:
    """Keyless records with no partition take append_sticky until the buffer is nearly
    full; the general path then refuses the nowait send exactly."""
    peer = waiting_peer(acks=1, batch_size=16384, buffer_memory=2000, linger=10.0)
    m = peer.m
    sent = []
    with pytest.raises(BufferFullError):
        for _ in range(100):
            sent.append(nowait(peer, bytes(50)))
    assert m.accumulator.waiting_sends == 0
    assert m.accumulator.buffer_used <= 2000
    assert m.accumulator.outstanding_records == len(sent)


def test_a_nowait_send_to_an_unknown_topic_is_held_and_delivered() -> None:
    peer = waiting_peer(acks=1, linger=0.0)
    m = peer.m
    rid = nowait(peer, b"x", topic="new")
    assert m.is_waiting(rid)  # held for its metadata: the caller does not wait for it
    peer.topics["new"] = {0: (2, 0)}
    while m.is_waiting(rid):
        assert peer.now < MAX_BLOCK, "the topic appeared: the send must be routed"
        peer.advance()
    assert [e.record_ids for e in of(peer, RecordsAdmitted)] == [(rid,)]
    answer_all(peer, {})
    assert [e.record_ids for e in of(peer, RecordsAcknowledged)] == [(rid,)]


def test_a_held_nowait_send_fails_at_max_block_as_an_event() -> None:
    peer = waiting_peer(acks=1, linger=0.0)
    m = peer.m
    rid = nowait(peer, b"x", topic="never")
    deadline = m.get_timer()
    assert deadline is not None and deadline <= MAX_BLOCK
    peer.now = MAX_BLOCK
    m.handle_timer(now=peer.now)
    peer.pump()
    (failed,) = of(peer, RecordsFailed)
    assert failed.record_ids == (rid,)
    assert isinstance(failed.error, KafkaTimeoutError)
    assert not m.is_waiting(rid)


def test_a_refusal_sends_the_lingering_batches_at_once() -> None:
    """The pool is exhausted: every batch is sendable (Java), so the refused caller waits
    for an acknowledgement, not for a linger; ``steps`` moves so drivers look."""
    peer = waiting_peer(acks=1, linger=30.0, batch_size=16384, buffer_memory=2000)
    m = peer.m
    first = nowait(peer, bytes(1000))
    assert not peer.produces() and m.get_timer() == 30.0  # lingering
    steps = m.steps
    with pytest.raises(BufferFullError):
        m.send("t", value=bytes(1000), timestamp_ms=TS, now=peer.now, block=False)
    assert m.steps != steps
    peer.pump()
    assert len(peer.produces()) == 1
    answer_all(peer, {})
    assert [e.record_ids for e in of(peer, RecordsAcknowledged)] == [(first,)]
