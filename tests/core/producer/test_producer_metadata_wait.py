"""Sends that wait for their topic's metadata in the core (``AccumulatorConfig.max_block``).

A send to a topic the metadata does not have yet -- or to an explicit partition the topic
does not have yet -- gets its record id at once and is held (Java ``waitOnMetadata``);
``max_block`` is a deadline of ``get_timer()``; held sends are routed in send order per
topic when the metadata names their partition (``RecordsAdmitted``), or fail with
``KafkaTimeoutError`` at the deadline, with the partitioner's error when it refuses for
good, or with ``ProducerClosedError`` on close. Other topics' sends go on meanwhile.
Driven by hand: the scripted peer cluster, time stepped with ``now=``.
"""

from __future__ import annotations

import datetime
import random
from typing import Any

import attrs
import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.producer import (
    FlushCompleted,
    MetadataPendingError,
    ProducerMachine,
    RecordsAcknowledged,
    RecordsAdmitted,
    RecordsFailed,
)
from kafkastate.core.producer.accumulator import RECORD_OVERHEAD
from kafkastate.core.protocol.versions import ApiKey
from kafkastate.errors import (
    AuthenticationFailedError,
    BufferFullError,
    KafkaTimeoutError,
    MessageTooLargeError,
    PartitionerError,
    ProducerClosedError,
    UnknownTopicOrPartitionError,
)
from tests._support.peer import response
from tests.core.producer.test_producer_machine import TS, PeerCluster, machine, parts_of
from tests.core.producer.test_producer_wait import (
    MAX_BLOCK,
    admitted_ids,
    answer_all,
    of,
    waiting_peer,
)


def send(peer: PeerCluster, topic: str, value: bytes, **kw: Any) -> Any:
    rid = peer.m.send(topic, value=value, timestamp_ms=TS, now=peer.now, **kw)
    peer.pump()
    return rid


def produced(peer: PeerCluster) -> list[tuple[str, int, list[Any]]]:
    """(topic, partition, values) of every pending Produce, oldest first."""
    ids = peer.topic_ids()
    return [
        (p.topic, p.partition, p.values)
        for s in peer.pending
        if s.req.api_key == ApiKey.PRODUCE
        for p in parts_of(s, ids)
    ]


def metadata_requests(peer: PeerCluster) -> int:
    return sum(1 for s in peer.pending if s.req.api_key == ApiKey.METADATA)


def test_a_send_to_an_unknown_topic_is_held_until_the_metadata_names_it() -> None:
    peer = waiting_peer(acks=1, linger=0.0)
    m = peer.m
    rid = send(peer, "new", b"x")
    assert m.is_waiting(rid)
    assert m.accumulator.waiting_sends == 1
    assert m.get_timer() is not None and m.get_timer() <= MAX_BLOCK
    assert not produced(peer)
    peer.topics["new"] = {0: (2, 0)}
    while m.is_waiting(rid):
        assert peer.now < MAX_BLOCK, "the topic appeared: the send must be routed"
        peer.advance()  # the metadata refreshes the send asked for
    (admitted,) = of(peer, RecordsAdmitted)
    assert admitted.record_ids == (rid,) and admitted.topic == "new"
    assert admitted.partition == 0
    assert produced(peer) == [("new", 0, [b"x"])]
    answer_all(peer, {})
    (acked,) = of(peer, RecordsAcknowledged)
    assert acked.record_ids == (rid,)


def test_held_sends_keep_their_order_and_other_topics_go_on() -> None:
    peer = waiting_peer(acks=1, linger=0.0, max_in_flight_requests_per_connection=1)
    m = peer.m
    first = send(peer, "new", b"1")
    second = send(peer, "new", b"2", key=b"k")
    third = send(peer, "new", b"3")
    other = send(peer, "t", b"other", partition=1)
    assert [m.is_waiting(r) for r in (first, second, third, other)] == [True, True, True, False]
    assert produced(peer) == [("t", 1, [b"other"])]  # not held behind the unknown topic
    answer_all(peer, {})  # (a broker answers in order: metadata waits behind it)
    peer.topics["new"] = {0: (1, 0)}  # one partition: the order is visible in it
    while m.is_waiting(third):
        peer.advance()
    assert [e.record_ids for e in of(peer, RecordsAdmitted)] == [(first,), (second,), (third,)]
    values: list[Any] = []
    while answer_all(peer, {}, limit=1):
        values.extend(v for t, _, vs in produced(peer) if t == "new" for v in vs)
    acked = [r for e in of(peer, RecordsAcknowledged) for r in e.record_ids if r != other]
    assert acked == [first, second, third]


def test_a_topic_that_never_appears_fails_the_send_at_its_max_block_deadline() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    peer.now = 1.25
    rid = send(peer, "missing", b"x")
    deadline = 1.25 + MAX_BLOCK
    while peer.now < deadline:
        assert m.is_waiting(rid)
        assert not of(peer, RecordsFailed)
        assert m.get_timer() is not None and m.get_timer() <= deadline
        peer.advance()
    assert peer.now == deadline  # exact: the max_block deadline is a timer
    (failed,) = of(peer, RecordsFailed)
    assert failed.record_ids == (rid,) and failed.topic == "missing"
    assert isinstance(failed.error, KafkaTimeoutError)
    assert "topic metadata" in str(failed.error) and "max_block_ms (2000 ms)" in str(failed.error)
    # what was missing: the broker's answer for the topic
    assert isinstance(failed.error.__cause__, UnknownTopicOrPartitionError)
    assert "'missing'" in str(failed.error)
    assert not m.is_waiting(rid) and m.accumulator.waiting_sends == 0
    assert not m.accumulator.has_incomplete()


def test_an_explicit_partition_the_topic_lacks_waits_and_refreshes_the_metadata() -> None:
    peer = waiting_peer(acks=1, linger=0.0)  # "t" has partitions 0 and 1
    m = peer.m
    rid = send(peer, "t", b"x", partition=3)
    assert m.is_waiting(rid)
    metadata_before = m.client.metadata.cluster
    peer.advance()  # the refresh it asked for (the topic itself is known)
    assert m.client.metadata.cluster is not metadata_before
    assert m.is_waiting(rid)
    later = send(peer, "t", b"later", partition=0)
    assert m.is_waiting(later)  # queued behind the held send to its topic
    peer.topics["t"] = {0: (1, 0), 1: (2, 0), 2: (1, 0), 3: (2, 0)}  # partitions added
    while m.is_waiting(rid):
        peer.advance()
    assert [e.partition for e in of(peer, RecordsAdmitted)] == [3, 0]
    assert not m.is_waiting(later)
    assert sorted(produced(peer)) == [("t", 0, [b"later"]), ("t", 3, [b"x"])]


def test_without_max_block_nothing_is_held() -> None:
    peer = waiting_peer(acks=1, max_block=None)  # type: ignore[arg-type]
    with pytest.raises(MetadataPendingError):
        peer.m.send("new", value=b"x", timestamp_ms=TS, now=peer.now)
    with pytest.raises(UnknownTopicOrPartitionError):
        peer.m.send("t", value=b"x", partition=5, timestamp_ms=TS, now=peer.now)
    assert peer.m.accumulator.waiting_sends == 0
    assert not peer.m.accumulator.has_incomplete()


def test_a_record_too_large_is_refused_at_once_even_for_an_unknown_topic() -> None:
    peer = waiting_peer(acks=1, max_request_size=500, buffer_memory=10_000)
    with pytest.raises(MessageTooLargeError):
        peer.m.send("new", value=bytes(600), timestamp_ms=TS, now=peer.now)
    assert peer.m.accumulator.waiting_sends == 0
    assert not peer.m.accumulator.has_incomplete()


def test_a_partitioner_that_refuses_for_good_fails_the_held_send_only() -> None:
    def partitioner(key: Any, all_partitions: Any, available: Any) -> int:
        if key == b"bad":
            raise ValueError("no partition for bad keys")
        return 0

    peer = waiting_peer(acks=1, linger=0.0, partitioner=partitioner)
    m = peer.m
    bad = send(peer, "new", b"x", key=b"bad")
    good = send(peer, "new", b"y", key=b"good")
    peer.topics["new"] = {0: (1, 0)}
    while m.is_waiting(good):
        peer.advance()
    (failed,) = of(peer, RecordsFailed)
    assert failed.record_ids == (bad,) and isinstance(failed.error, PartitionerError)
    assert [e.record_ids for e in of(peer, RecordsAdmitted)] == [(good,)]


def test_close_fails_held_sends_and_withdraw_takes_one_back() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    gone = send(peer, "new", b"1")
    kept = send(peer, "new", b"2")
    assert m.withdraw(gone, now=peer.now)
    assert not m.is_waiting(gone) and m.is_waiting(kept)
    assert not m.withdraw(gone, now=peer.now)  # once
    m.close(now=peer.now)
    peer.pump()
    (failed,) = of(peer, RecordsFailed)
    assert failed.record_ids == (kept,)
    assert isinstance(failed.error, ProducerClosedError)  # aiokafka's ProducerClosed
    assert "closed while the record waited for topic metadata" in str(failed.error)


def test_flush_waits_for_a_held_send() -> None:
    peer = waiting_peer(acks=1, linger=10.0)
    m = peer.m
    rid = send(peer, "new", b"x")
    fid = m.flush(now=peer.now)
    peer.pump()
    assert not of(peer, FlushCompleted)
    peer.topics["new"] = {0: (1, 0)}
    while m.is_waiting(rid):
        peer.advance()
    answer_all(peer, {})
    assert [e.flush_id for e in of(peer, FlushCompleted)] == [fid]


def test_send_batch_to_an_unknown_topic_is_held_as_one_batch() -> None:
    peer = waiting_peer(acks=1, linger=0.0)
    m = peer.m
    records = [(TS, None, b"a", ()), (TS, None, b"b", ())]
    rids = m.send_batch("new", 1, records, now=peer.now)
    peer.pump()
    assert len(rids) == 2 and rids[1] == rids[0] + 1
    assert m.is_waiting(rids[0])
    peer.topics["new"] = {0: (1, 0), 1: (2, 0)}
    while m.is_waiting(rids[0]):
        peer.advance()
    (admitted,) = of(peer, RecordsAdmitted)
    assert admitted.record_ids == tuple(rids) and admitted.partition == 1
    assert produced(peer) == [("new", 1, [b"a", b"b"])]


def test_a_held_send_that_meets_a_full_buffer_waits_on_for_memory() -> None:
    peer = waiting_peer(acks=1, linger=10.0, max_in_flight_requests_per_connection=1)
    m = peer.m
    rid = send(peer, "new", bytes(100))
    while not m.is_waiting(send(peer, "t", bytes(100), partition=0)):
        pass  # fill buffer.memory with records to a known topic
    peer.topics["new"] = {0: (1, 0)}
    peer.advance(peer.now + 0.2)  # the refresh: routed, but the buffer is full
    assert m.is_waiting(rid)
    assert not [e for e in of(peer, RecordsAdmitted) if rid in e.record_ids]
    while m.is_waiting(rid):
        assert answer_all(peer, {}, limit=1), "memory frees as batches complete"
    (admitted,) = [e for e in of(peer, RecordsAdmitted) if rid in e.record_ids]
    assert admitted.topic == "new"


def test_an_authentication_refusal_fails_held_sends_at_once() -> None:
    """Fail closed, fast: metadata cannot come while the cluster refuses our credentials,
    so a held send fails with the refusal instead of waiting out ``max_block``."""
    base = machine(acks=1).config
    refused = ConnectionConfig(sasl_mechanism="PLAIN", sasl_username="u", sasl_password="bad")
    config = attrs.evolve(
        base,
        client=attrs.evolve(base.client, connection=refused),
        accumulator=attrs.evolve(base.accumulator, max_block=MAX_BLOCK),
    )
    peer = PeerCluster(ProducerMachine(config, rng=random.Random(7)))
    peer.start()
    rid = send(peer, "new", b"x")
    assert peer.m.is_waiting(rid)
    handshake = peer.take(ApiKey.SASL_HANDSHAKE)
    peer.answer(handshake, response(17, 1, error_code=ErrorCode.none, mechanisms=("PLAIN",)))
    auth = peer.take(ApiKey.SASL_AUTHENTICATE)
    refusal = response(
        36,
        auth.req.version,
        error_code=ErrorCode.sasl_authentication_failed,
        error_message="bad credentials",
        auth_bytes=b"",
        session_lifetime=datetime.timedelta(0),
    )
    peer.answer(auth, refusal)
    (failed,) = of(peer, RecordsFailed)
    assert failed.record_ids == (rid,)
    assert isinstance(failed.error, AuthenticationFailedError)
    assert "bad credentials" in str(failed.error)
    assert peer.now < MAX_BLOCK and not peer.m.is_waiting(rid)


def test_held_sends_count_against_buffer_memory_and_give_it_back_when_they_fail() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    acc = m.accumulator
    limit = acc.config.buffer_memory
    held: list[Any] = []
    with pytest.raises(BufferFullError):  # a fire-and-forget send meets the bound
        while len(held) < 50:
            held.append(send(peer, "new", bytes(100), block=False))
            assert acc.buffer_used <= limit
    assert 0 < len(held) < 50 and all(m.is_waiting(r) for r in held)
    # counted while they wait for the metadata, each with its RECORD_OVERHEAD
    assert acc.buffer_used > limit - 200 - RECORD_OVERHEAD
    peer.now += 0.5
    later = send(peer, "t", bytes(100), partition=0)
    assert m.is_waiting(later)  # backpressure: the held records hold the memory
    while any(m.is_waiting(r) for r in held):  # "new" never appears
        peer.advance()
    failed = {r for e in of(peer, RecordsFailed) for r in e.record_ids}
    assert failed == set(held)  # at max_block, and their memory is given back:
    assert not m.is_waiting(later)  # the send behind them goes in
    assert [e.record_ids for e in of(peer, RecordsAdmitted)] == [(later,)]


def test_a_routed_held_send_keeps_the_memory_it_counted() -> None:
    peer = waiting_peer(acks=1, linger=0.0)
    m = peer.m
    acc = m.accumulator
    rids = [send(peer, "new", bytes(100), block=False) for _ in range(3)]
    counted = acc.buffer_used
    assert counted >= 3 * 100
    peer.topics["new"] = {0: (1, 0)}
    while any(m.is_waiting(r) for r in rids):
        peer.advance()
    assert admitted_ids(peer) == rids  # in send order, none sent to the FIFO
    assert 0 < acc.buffer_used <= counted  # the batch's bytes, not counted twice
    while answer_all(peer, {}):
        pass
    assert {r for e in of(peer, RecordsAcknowledged) for r in e.record_ids} == set(rids)
    assert acc.buffer_used == 0
