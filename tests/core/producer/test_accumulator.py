"""The record accumulator, driven by hand: exact linger deadlines, ready/drain, buffer-full
back-pressure, retries at the front, split, expiry, flush and outcomes."""

from __future__ import annotations

import itertools
import random
from typing import Any

import attrs
import pytest

from kafkastate.core.metadata import ClusterMetadata, NodeId, PartitionMetadata, TopicMetadata
from kafkastate.core.producer import (
    RECORD_OVERHEAD,
    Accumulator,
    AccumulatorConfig,
    AccumulatorEvent,
    BatchState,
    BufferFullError,
    BufferSpaceFreed,
    FlushCompleted,
    Partitioner,
    ProducerBatch,
    RecordId,
    RecordsAcknowledged,
    RecordsFailed,
)
from kafkastate.core.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    Compression,
    RecordBatch,
    estimate_record_size_upper_bound,
    iter_batches,
)
from kafkastate.errors import (
    IllegalStateError,
    KafkaConfigurationError,
    KafkaTimeoutError,
    LocalProtocolError,
    MessageTooLargeError,
    NotEnoughReplicasError,
)

N1 = NodeId(1)
N2 = NodeId(2)


def cluster(leaders: dict[tuple[str, int], int | None]) -> ClusterMetadata:
    topics: dict[str, dict[int, PartitionMetadata]] = {}
    for (topic, p), leader in leaders.items():
        topics.setdefault(topic, {})[p] = PartitionMetadata(
            partition=p,
            leader=None if leader is None else NodeId(leader),
            leader_epoch=0,
            replicas=(),
            isr=(),
        )
    return ClusterMetadata(
        topics={t: TopicMetadata(name=t, topic_id=None, partitions=ps) for t, ps in topics.items()}
    )


CLUSTER = cluster({("t", 0): 1, ("t", 1): 2, ("t", 2): 1, ("u", 0): 1})


def make(**overrides: Any) -> Accumulator:
    config = AccumulatorConfig(**{"batch_size": 1000, "linger": 0.005, **overrides})
    return Accumulator(config, rng=random.Random(0))


def add(
    acc: Accumulator,
    partition: int = 0,
    *,
    size: int = 100,
    now: float = 0.0,
    topic: str = "t",
    ts: int = 1_700_000_000_000,
    sticky: bool = False,
) -> RecordId:
    return acc.append(
        topic,
        partition,
        timestamp_ms=ts,
        key=None,
        value=b"v" * size,
        headers=(),
        now=now,
        sticky=sticky,
    )


def events(acc: Accumulator) -> list[AccumulatorEvent]:
    out = []
    while (e := acc.next_event()) is not None:
        out.append(e)
    return out


def decode(batch: ProducerBatch) -> RecordBatch:
    (decoded,) = list(iter_batches(batch.build()))
    assert isinstance(decoded, RecordBatch)
    return decoded


# --------------------------------------------------------------------------------- config


def test_config_defaults_follow_the_java_client() -> None:
    c = AccumulatorConfig()
    assert c.batch_size == 16384
    assert c.linger == 0.005  # KIP-1030: Kafka 4.0 changed linger.ms from 0 to 5
    assert c.buffer_memory == 32 * 1024 * 1024
    assert c.max_request_size == 1024 * 1024
    assert c.compression is Compression.NONE
    assert c.delivery_timeout == 120.0
    assert c.request_timeout == 30.0
    assert (c.retry_backoff, c.retry_backoff_max) == (0.1, 1.0)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        c.linger = 1.0  # type: ignore[misc]


def test_config_delivery_timeout_rule() -> None:
    AccumulatorConfig(delivery_timeout=31.0, linger=1.0, request_timeout=30.0)
    with pytest.raises(KafkaConfigurationError, match=r"delivery\.timeout\.ms.*linger\.ms"):
        AccumulatorConfig(delivery_timeout=30.0, linger=1.0, request_timeout=30.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("batch_size", -1),
        ("batch_size", True),
        ("batch_size", 1.5),
        ("linger", -0.1),
        ("buffer_memory", 0),
        ("max_request_size", 0),
        ("delivery_timeout", 0),
        ("retry_backoff", -1),
        ("compression", 9),
        ("compression_level", "high"),
    ],
)
def test_config_validation(field: str, value: Any) -> None:
    with pytest.raises(KafkaConfigurationError, match=field):
        AccumulatorConfig(**{field: value})


def test_config_compression_level_checked_against_codec() -> None:
    assert AccumulatorConfig(compression=1, compression_level=9).compression is Compression.GZIP
    with pytest.raises(KafkaConfigurationError, match="gzip compression level"):
        AccumulatorConfig(compression=Compression.GZIP, compression_level=42)


# ------------------------------------------------------------------------------ appending


def test_records_fill_a_batch_then_open_the_next() -> None:
    acc = make()
    ids = [add(acc) for _ in range(20)]
    assert ids == list(range(20))
    batches = acc.queued_batches("t", 0)
    assert len(batches) > 1
    assert [rid for b in batches for rid in b.record_ids] == ids
    assert all(b.size_in_bytes <= 1000 for b in batches)
    assert [b.is_open for b in batches] == [False] * (len(batches) - 1) + [True]
    assert acc.buffer_used == sum(b.reserved_bytes for b in batches)
    assert acc.outstanding_records == 20
    decoded = decode(batches[0])
    assert [r.value for r in decoded.records()] == [b"v" * 100] * batches[0].record_count
    assert decoded.producer_id == -1
    assert decoded.base_sequence == -1


def test_a_record_larger_than_batch_size_gets_its_own_batch() -> None:
    acc = make()
    add(acc, size=10)
    add(acc, size=3000)
    add(acc, size=10)
    batches = acc.queued_batches("t", 0)
    assert [b.record_count for b in batches] == [1, 1, 1]
    assert batches[1].size_in_bytes > 3000
    assert not batches[1].is_open  # full at once
    assert batches[2].is_open


@pytest.mark.parametrize(
    ("limits", "name", "limit"),
    [
        ({"max_request_size": 2000}, "max.request.size", 2000),
        # a record counts its RECORD_OVERHEAD in buffer.memory too
        ({"buffer_memory": 2000}, "buffer.memory", 2000 - RECORD_OVERHEAD),
    ],
)
def test_record_too_large_is_refused_at_once(limits: dict[str, int], name: str, limit: int) -> None:
    acc = make(**limits)
    upper = RECORD_BATCH_OVERHEAD + estimate_record_size_upper_bound(None, b"v" * 5000)
    with pytest.raises(MessageTooLargeError, match=rf"up to {upper} bytes.*{name}.* = {limit}"):
        add(acc, size=5000)
    assert acc.outstanding_records == 0
    assert acc.buffer_used == 0
    assert not acc.has_undrained()


def test_batch_size_is_capped_by_max_request_size() -> None:
    acc = make(batch_size=100_000, max_request_size=1000)
    for _ in range(30):
        add(acc)
    assert all(b.size_in_bytes <= 1000 for b in acc.queued_batches("t", 0))


def test_batch_size_zero_means_one_record_per_batch() -> None:
    acc = make(batch_size=0)
    for _ in range(3):
        add(acc, size=1)
    assert [b.record_count for b in acc.queued_batches("t", 0)] == [1, 1, 1]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"value": "text"},
        {"key": 5},
        {"timestamp_ms": 1.5},
        {"timestamp_ms": -1},
        {"timestamp_ms": 2**63},
        {"headers": [(b"bytes-key", b"v")]},
        {"headers": [("k", "str-value")]},
        {"partition": -1},
        {"partition": True},
        {"topic": ""},
    ],
)
def test_bad_arguments_are_typed_errors(kwargs: dict[str, Any]) -> None:
    acc = make()
    args: dict[str, Any] = {
        "topic": "t",
        "partition": 0,
        "timestamp_ms": 0,
        "key": None,
        "value": b"v",
        "headers": (),
        "now": 0.0,
        **kwargs,
    }
    with pytest.raises(KafkaConfigurationError):
        acc.append(args.pop("topic"), args.pop("partition"), **args)
    assert acc.outstanding_records == 0
    assert acc.buffer_used == 0


def test_headers_and_keys_reach_the_batch() -> None:
    acc = make()
    acc.append(
        "t",
        0,
        timestamp_ms=5,
        key=b"k",
        value=None,
        headers=[("h", b"1"), ("n", None)],
        now=0.0,
    )
    (record,) = decode(acc.queued_batches("t", 0)[0]).records()
    assert (record.key, record.value, record.timestamp) == (b"k", None, 5)
    assert record.headers == (("h", b"1"), ("n", None))


def test_compressed_batches_build_and_decode() -> None:
    acc = make(compression=Compression.GZIP)
    for _ in range(5):
        add(acc)
    (batch,) = acc.drain(CLUSTER, N1, now=1.0)
    decoded = decode(batch)
    assert decoded.compression is Compression.GZIP
    assert decoded.record_count == 5
    assert batch.size_in_bytes == len(batch.build()) < 5 * 100


# ------------------------------------------------------------------------- ready / linger


def test_linger_deadline_is_exact() -> None:
    acc = make(linger=0.005)
    add(acc, now=10.0)
    r = acc.ready(CLUSTER, now=10.0)
    assert r.nodes == ()
    assert r.next_ready_at == 10.0 + 0.005
    assert acc.ready(CLUSTER, now=10.004999).nodes == ()
    r = acc.ready(CLUSTER, now=r.next_ready_at)
    assert r.nodes == (N1,)
    assert r.next_ready_at is None


def test_linger_zero_is_ready_at_once() -> None:
    acc = make(linger=0.0)
    add(acc, now=3.0)
    assert acc.ready(CLUSTER, now=3.0).nodes == (N1,)


def test_full_batch_is_ready_before_linger() -> None:
    acc = make(linger=10.0)
    add(acc, partition=1)
    assert acc.ready(CLUSTER, now=0.0).nodes == ()
    for _ in range(10):
        add(acc, partition=1)  # overflows into a second batch
    r = acc.ready(CLUSTER, now=0.0)
    assert r.nodes == (N2,)


def test_earliest_deadline_over_partitions() -> None:
    acc = make(linger=1.0)
    add(acc, partition=0, now=5.0)
    add(acc, partition=1, now=4.5)
    add(acc, topic="u", partition=0, now=4.75)
    r = acc.ready(CLUSTER, now=5.0)
    assert r.next_ready_at == 4.5 + 1.0
    r = acc.ready(CLUSTER, now=5.5)
    assert r.nodes == (N2,)
    assert r.next_ready_at == 4.75 + 1.0


def test_partitions_without_leader_are_reported() -> None:
    acc = make(linger=0.0)
    add(acc, topic="u", partition=0)
    add(acc, topic="x", partition=0)  # not in the metadata at all
    c = cluster({("t", 0): 1, ("u", 0): None})
    r = acc.ready(c, now=1.0)
    assert r.nodes == ()
    assert r.next_ready_at is None
    assert r.unknown_leader_topics == ("u", "x")


def test_muted_partitions_are_skipped() -> None:
    acc = make(linger=0.0)
    add(acc, partition=0)
    add(acc, partition=2)
    assert acc.ready(CLUSTER, now=0.0, muted={("t", 0), ("t", 2)}).nodes == ()
    (b,) = acc.drain(CLUSTER, N1, now=0.0, muted={("t", 0)})
    assert (b.topic, b.partition) == ("t", 2)


# ---------------------------------------------------------------------------------- drain


def test_drain_takes_one_batch_per_partition_of_the_node() -> None:
    acc = make(linger=0.0)
    for p in (0, 1, 2):
        for _ in range(12):  # two batches each
            add(acc, partition=p)
    drained = acc.drain(CLUSTER, N1, now=1.0)
    assert sorted((b.topic, b.partition) for b in drained) == [("t", 0), ("t", 2)]
    assert all(b.state is BatchState.IN_FLIGHT and not b.is_open for b in drained)
    assert all(b.drained_at == 1.0 for b in drained)
    assert len(acc.queued_batches("t", 0)) == 1
    assert acc.in_flight_batches() == drained
    assert acc.drain(CLUSTER, NodeId(9), now=1.0) == []


def test_drain_respects_max_request_size_and_rotates() -> None:
    acc = make(linger=0.0)
    parts = [("t", 0), ("t", 2), ("u", 0)]  # all led by node 1
    for topic, p in parts:
        for _ in range(30):
            add(acc, topic=topic, partition=p)
    first_size = acc.queued_batches("t", 0)[0].size_in_bytes
    order = []
    for _ in range(6):
        (b,) = acc.drain(CLUSTER, N1, now=1.0, max_request_size=first_size + 10)
        order.append((b.topic, b.partition))
    assert order == parts + parts  # the one that did not fit goes first next time
    both = acc.drain(CLUSTER, N1, now=1.0, max_request_size=2 * first_size)
    assert len(both) == 2


def test_a_batch_larger_than_the_budget_still_goes_alone() -> None:
    acc = make(linger=0.0)
    add(acc, size=900)
    (b,) = acc.drain(CLUSTER, N1, now=0.0, max_request_size=10)
    assert b.record_count == 1


def test_drain_closes_the_open_batch() -> None:
    acc = make(linger=0.0)
    add(acc)
    (b,) = acc.drain(CLUSTER, N1, now=0.0)
    add(acc)
    (queued,) = acc.queued_batches("t", 0)
    assert queued is not b
    assert b.record_count == 1


# ------------------------------------------------------------------------------- outcomes


def test_complete_acknowledges_records_and_frees_memory() -> None:
    acc = make(linger=0.0)
    ids = [add(acc, ts=1000 + i) for i in range(3)]
    used = acc.buffer_used
    (b,) = acc.drain(CLUSTER, N1, now=1.0)
    assert acc.buffer_used == used  # in flight still counts
    acc.complete(b, base_offset=40, now=2.0)
    (ack,) = events(acc)
    assert ack == RecordsAcknowledged(
        topic="t",
        partition=0,
        record_ids=tuple(ids),
        base_offset=40,
        timestamps=(1000, 1001, 1002),
        log_append_time=-1,
    )
    assert ack.results() == [(0, 40, 1000), (1, 41, 1001), (2, 42, 1002)]
    assert acc.buffer_used == 0
    assert acc.outstanding_records == 0
    assert b.state is BatchState.DONE
    assert b.done_at == 2.0
    assert not acc.has_incomplete()


def test_log_append_time_and_acks_zero() -> None:
    acc = make(linger=0.0)
    add(acc)
    add(acc, partition=2)
    b0, b2 = acc.drain(CLUSTER, N1, now=0.0)
    acc.complete(b0, base_offset=7, log_append_time=99, now=0.0)
    acc.complete(b2, base_offset=-1, now=0.0)
    a0, a2 = events(acc)
    assert isinstance(a0, RecordsAcknowledged)
    assert isinstance(a2, RecordsAcknowledged)
    assert a0.results() == [(0, 7, 99)]
    assert a2.results() == [(1, -1, 1_700_000_000_000)]


def test_fail_in_flight_and_queued() -> None:
    acc = make(linger=0.0)
    add(acc)
    (b,) = acc.drain(CLUSTER, N1, now=0.0)
    add(acc)
    (queued,) = acc.queued_batches("t", 0)
    error = NotEnoughReplicasError("x")
    acc.fail(b, error, now=1.0)
    acc.fail(queued, error, now=1.0)
    assert events(acc) == [
        RecordsFailed(topic="t", partition=0, record_ids=(RecordId(0),), error=error),
        RecordsFailed(topic="t", partition=0, record_ids=(RecordId(1),), error=error),
    ]
    assert acc.buffer_used == 0
    assert acc.queued_batches("t", 0) == []
    add(acc)  # the partition goes on
    assert acc.queued_batches("t", 0)[0].record_ids == (2,)


def test_illegal_transitions_raise_local_protocol_error() -> None:
    acc = make(linger=0.0)
    add(acc)
    (queued,) = acc.queued_batches("t", 0)
    with pytest.raises(LocalProtocolError, match=r"cannot complete.*QUEUED"):
        acc.complete(queued, base_offset=0, now=0.0)
    with pytest.raises(LocalProtocolError, match="cannot reenqueue"):
        acc.reenqueue(queued, now=0.0)
    (b,) = acc.drain(CLUSTER, N1, now=0.0)
    acc.complete(b, base_offset=0, now=0.0)
    for call in (
        lambda: acc.complete(b, base_offset=0, now=0.0),
        lambda: acc.fail(b, NotEnoughReplicasError(), now=0.0),
        lambda: acc.reenqueue(b, now=0.0),
        lambda: acc.split(b, now=0.0),
        lambda: b.set_producer_state(1, 0, 0),
    ):
        with pytest.raises(LocalProtocolError):
            call()
    other = make(linger=0.0)
    add(other)
    (foreign,) = other.drain(CLUSTER, N1, now=0.0)
    with pytest.raises(LocalProtocolError, match="another accumulator"):
        acc.complete(foreign, base_offset=0, now=0.0)
    assert acc.buffer_used == 0


# ------------------------------------------------------------------------- buffer memory


def test_buffer_full_refuses_then_frees() -> None:
    acc = make(buffer_memory=1000, batch_size=300, linger=10.0)
    ids = []
    with pytest.raises(BufferFullError) as info:
        while True:
            ids.append(add(acc))
    err = info.value
    assert err.retriable
    assert err.buffer_memory == 1000
    assert err.available == 1000 - acc.buffer_used
    assert err.needed > err.available
    assert acc.outstanding_records == len(ids)  # the refused record is not there
    # exhausted: everything becomes sendable before linger
    assert acc.ready(CLUSTER, now=0.0).nodes == (N1,)
    (b,) = acc.drain(CLUSTER, N1, now=0.0)
    assert events(acc) == []
    acc.complete(b, base_offset=0, now=0.0)
    ack, freed = events(acc)
    assert isinstance(ack, RecordsAcknowledged)
    assert freed == BufferSpaceFreed(available=1000 - acc.buffer_used)
    ids.append(add(acc))  # the waiting append now fits
    # one event per refusal: with no append refused since, releases are silent
    while acc.has_undrained():
        for b in acc.drain(CLUSTER, N1, now=0.0):
            acc.complete(b, base_offset=0, now=0.0)
    assert {type(e) for e in events(acc)} == {RecordsAcknowledged}
    assert acc.buffer_used == 0
    add(acc)
    assert acc.ready(CLUSTER, now=0.0).nodes == ()  # not exhausted any more: linger rules


def test_buffer_full_with_an_empty_buffer_is_impossible() -> None:
    # any record that passes the too-large check fits an empty buffer
    acc = make(buffer_memory=1000, batch_size=10_000)
    rid = add(acc, size=1000 - RECORD_OVERHEAD - RECORD_BATCH_OVERHEAD - 30)
    assert rid == 0


# ------------------------------------------------------------------------------- retries


def test_retry_goes_back_to_the_front_with_backoff() -> None:
    acc = make(linger=0.0, retry_backoff=0.1, retry_backoff_max=1.0)
    first = [add(acc) for _ in range(3)]
    (b,) = acc.drain(CLUSTER, N1, now=1.0)
    built = b.build()
    later = [add(acc) for _ in range(3)]
    acc.reenqueue(b, now=2.0)
    assert b.state is BatchState.QUEUED
    assert b.attempts == 1
    assert b.retry_at is not None
    assert 2.0 + 0.08 <= b.retry_at <= 2.0 + 0.12
    queued = acc.queued_batches("t", 0)
    assert queued[0] is b
    assert [rid for q in queued for rid in q.record_ids] == first + later
    # backing off: not ready, the deadline is exact, drain skips it
    r = acc.ready(CLUSTER, now=2.05)
    assert r.nodes == ()
    assert r.next_ready_at == b.retry_at
    assert acc.drain(CLUSTER, N1, now=2.05) == []
    # even a flush does not cut a backoff short
    acc.flush()
    assert acc.ready(CLUSTER, now=2.05).nodes == ()
    r = acc.ready(CLUSTER, now=b.retry_at)
    assert r.nodes == (N1,)
    (again,) = acc.drain(CLUSTER, N1, now=b.retry_at)
    assert again is b
    assert again.retry_at is None
    assert again.build() is built  # same bytes, same sequence numbers


def test_retries_of_several_in_flight_batches_keep_append_order() -> None:
    acc = make(linger=0.0, batch_size=300)
    for _ in range(6):
        add(acc)  # three batches of two records
    b1 = acc.drain(CLUSTER, N1, now=0.0)[0]
    b2 = acc.drain(CLUSTER, N1, now=0.0)[0]
    b3 = acc.queued_batches("t", 0)[0]
    acc.reenqueue(b2, now=1.0)  # responses arrive out of order
    acc.reenqueue(b1, now=1.0)
    assert acc.queued_batches("t", 0) == [b1, b2, b3]


def test_backoff_doubles_up_to_the_maximum() -> None:
    acc = make(linger=0.0, retry_backoff=0.1, retry_backoff_max=0.5)
    add(acc)
    waits = []
    now = 0.0
    for _ in range(6):
        (b,) = acc.drain(CLUSTER, N1, now=now)
        acc.reenqueue(b, now=now)
        assert b.retry_at is not None
        waits.append(b.retry_at - now)
        now = b.retry_at
    for attempt, wait in enumerate(waits[:2]):
        assert 0.1 * 2**attempt * 0.8 <= wait <= 0.1 * 2**attempt * 1.2
    assert waits[-1] == 0.5
    assert all(w <= 0.5 for w in waits)


def test_same_seed_same_backoffs() -> None:
    def run() -> list[float | None]:
        acc = make(linger=0.0)
        add(acc)
        out = []
        for i in range(5):
            (b,) = acc.drain(CLUSTER, N1, now=float(i * 10))
            acc.reenqueue(b, now=float(i * 10))
            out.append(b.retry_at)
        return out

    assert run() == run()


# --------------------------------------------------------------------------------- split


def test_split_rebatches_in_order_at_the_front() -> None:
    acc = make(linger=0.0, batch_size=1000)
    ids = [add(acc, now=3.0) for _ in range(8)]
    (big,) = acc.drain(CLUSTER, N1, now=4.0)
    later = add(acc, now=5.0)
    acc.reenqueue(big, now=5.0)
    (big,) = acc.drain(CLUSTER, N1, now=6.0)
    pieces = acc.split(big, now=7.0)
    assert big.state is BatchState.DONE
    assert len(pieces) >= 2
    assert all(p.size_in_bytes <= big.size_in_bytes // 2 for p in pieces)
    assert [rid for p in pieces for rid in p.record_ids] == ids
    assert all(p.created == 3.0 and p.attempts == 1 and p.retry_at is None for p in pieces)
    assert all(not p.is_open for p in pieces)
    queued = acc.queued_batches("t", 0)
    assert queued[: len(pieces)] == pieces
    assert queued[-1].record_ids == (later,)
    assert acc.buffer_used == sum(b.reserved_bytes for b in queued)
    assert acc.ready(CLUSTER, now=7.0).nodes == (N1,)  # sendable at once
    # send them all; acknowledgements come in append order
    acked: list[RecordId] = []
    while acc.has_undrained():
        (b,) = acc.drain(CLUSTER, N1, now=8.0)
        acc.complete(b, base_offset=len(acked), now=8.0)
        for e in events(acc):
            assert isinstance(e, RecordsAcknowledged)
            acked += e.record_ids
    assert acked == [*ids, later]
    assert acc.buffer_used == 0


def test_split_down_to_single_records() -> None:
    acc = make(linger=0.0)
    ids = [add(acc) for _ in range(5)]
    while True:
        (b,) = acc.drain(CLUSTER, N1, now=0.0)
        if b.record_count == 1:
            break
        acc.split(b, now=0.0)
    with pytest.raises(LocalProtocolError, match="one record"):
        acc.split(b, now=0.0)
    assert b.state is BatchState.IN_FLIGHT  # refused: unchanged, the sender fails it
    acc.fail(b, MessageTooLargeError(), now=0.0)
    rest = [rid for q in acc.queued_batches("t", 0) for rid in q.record_ids]
    assert [*b.record_ids, *rest] == ids


def test_split_drops_producer_state() -> None:
    acc = make(linger=0.0)
    add(acc)
    add(acc)
    (b,) = acc.drain(CLUSTER, N1, now=0.0)
    b.set_producer_state(5, 1, 10)
    pieces = acc.split(b, now=0.0)
    assert [p.base_sequence for p in pieces] == [-1, -1]


# ----------------------------------------------------------------------------- producer id


def test_producer_state_is_written_into_the_batch() -> None:
    acc = make(linger=0.0)
    add(acc)
    add(acc)
    (b,) = acc.drain(CLUSTER, N1, now=0.0)
    b.set_producer_state(1234, 3, 77, is_transactional=True)
    decoded = decode(b)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (1234, 3, 77)
    assert decoded.is_transactional
    assert [r.value for r in decoded.records()] == [b"v" * 100] * 2
    first = b.build()
    b.set_producer_state(1234, 3, 77, is_transactional=True)
    assert b.build() is first  # unchanged state keeps the bytes
    b.set_producer_state(1234, 4, 0, is_transactional=True)  # epoch bump (KIP-360)
    decoded = decode(b)
    assert (decoded.producer_epoch, decoded.base_sequence) == (4, 0)


# -------------------------------------------------------------------------------- expiry


def test_queued_batches_expire_exactly_at_delivery_timeout() -> None:
    acc = make(linger=10.0, delivery_timeout=60.0, request_timeout=30.0)
    add(acc, now=100.0)
    add(acc, partition=1, now=101.0)
    assert acc.next_expiry_at() == 160.0
    assert acc.expire(159.999) == []
    (expired,) = acc.expire(160.0)
    assert (expired.topic, expired.partition) == ("t", 0)
    (failed,) = events(acc)
    assert isinstance(failed, RecordsFailed)
    assert failed.record_ids == (0,)
    assert isinstance(failed.error, KafkaTimeoutError)
    assert "t-0" in str(failed.error)
    assert "delivery.timeout.ms" in str(failed.error)
    assert "60 s" in str(failed.error)
    assert acc.next_expiry_at() == 161.0


def test_in_flight_batches_do_not_expire_here() -> None:
    acc = make(linger=0.0, delivery_timeout=60.0, request_timeout=30.0)
    add(acc, now=0.0)
    (b,) = acc.drain(CLUSTER, N1, now=0.0)
    assert acc.expire(1000.0) == []
    assert acc.next_expiry_at() is None
    acc.reenqueue(b, now=1000.0)  # back in the deque: now it is the accumulator's
    assert acc.expire(1000.0) == [b]
    assert acc.buffer_used == 0


def test_expiry_stops_at_the_first_young_batch() -> None:
    acc = make(linger=0.0, batch_size=0, delivery_timeout=60.0, request_timeout=30.0)
    add(acc, now=0.0)
    add(acc, now=10.0)
    add(acc, now=20.0)
    assert [b.created for b in acc.expire(70.0)] == [0.0, 10.0]
    assert [b.created for b in acc.queued_batches("t", 0)] == [20.0]


# --------------------------------------------------------------------------------- flush


def test_flush_with_nothing_pending_completes_at_once() -> None:
    acc = make()
    fid = acc.flush()
    assert events(acc) == [FlushCompleted(flush_id=fid)]
    assert not acc.flush_in_progress


def test_flush_makes_everything_ready_and_waits_for_earlier_records() -> None:
    acc = make(linger=50.0)
    add(acc, partition=0)
    add(acc, partition=1)
    assert acc.ready(CLUSTER, now=0.0).nodes == ()
    fid = acc.flush()
    assert acc.flush_in_progress
    assert acc.ready(CLUSTER, now=0.0).nodes == (N1, N2)
    (b0,) = acc.drain(CLUSTER, N1, now=0.0)
    (b1,) = acc.drain(CLUSTER, N2, now=0.0)
    add(acc, partition=0)  # after the flush: not waited for
    acc.complete(b0, base_offset=0, now=1.0)
    assert [type(e) for e in events(acc)] == [RecordsAcknowledged]
    acc.fail(b1, NotEnoughReplicasError(), now=2.0)  # a failure is an outcome too
    failed, done = events(acc)
    assert isinstance(failed, RecordsFailed)
    assert done == FlushCompleted(flush_id=fid)
    assert not acc.flush_in_progress
    assert acc.outstanding_records == 1


def test_two_flushes() -> None:
    acc = make(linger=0.0)
    add(acc)
    f1 = acc.flush()
    add(acc, partition=2)
    f2 = acc.flush()
    b0, b2 = acc.drain(CLUSTER, N1, now=0.0)
    acc.complete(b2, base_offset=0, now=0.0)
    assert [type(e) for e in events(acc)] == [RecordsAcknowledged]
    acc.complete(b0, base_offset=0, now=0.0)
    assert events(acc)[1:] == [FlushCompleted(flush_id=f1), FlushCompleted(flush_id=f2)]


# ------------------------------------------------------------------------- abort / close


def test_abort_undrained_and_close() -> None:
    acc = make(linger=50.0)
    add(acc)
    add(acc, partition=1)
    add(acc, partition=2)
    (b,) = acc.drain(CLUSTER, N2, now=0.0)
    acc.close()
    assert acc.closed
    with pytest.raises(IllegalStateError):
        add(acc)
    assert acc.ready(CLUSTER, now=0.0).nodes == (N1,)  # closing: no more lingering
    error = IllegalStateError("producer closed")
    aborted = acc.abort_undrained(error, now=0.0)
    assert [(a.topic, a.partition) for a in aborted] == [("t", 0), ("t", 2)]
    assert all(isinstance(e, RecordsFailed) and e.error is error for e in events(acc))
    assert acc.in_flight_batches() == [b]
    acc.complete(b, base_offset=0, now=0.0)
    assert acc.buffer_used == 0
    assert not acc.has_incomplete()


# ------------------------------------------------------------------------ sticky feedback


def test_sticky_appends_move_the_partitioner_on() -> None:
    partitioner = Partitioner(rng=random.Random(11), batch_size=1000)
    acc = Accumulator(
        AccumulatorConfig(batch_size=1000, linger=1.0),
        rng=random.Random(0),
        partitioner=partitioner,
    )
    used = []
    for _ in range(60):
        p = partitioner.partition("t", None, CLUSTER)
        add(acc, partition=p, sticky=True)
        used.append(p)
    assert len(set(used)) > 1
    # each stay covers at least batch.size bytes: about 9 records of 100 bytes
    runs = [1]
    for a, b in itertools.pairwise(used):
        if a == b:
            runs[-1] += 1
        else:
            runs.append(1)
    assert all(run >= 9 for run in runs[:-1]), runs
    # keyed / explicit appends (sticky=False) do not count
    sticky = partitioner.sticky_partition("t")
    assert sticky is not None
    for _ in range(50):
        add(acc, partition=sticky)
    assert partitioner.sticky_partition("t") == sticky


def test_append_batch_is_its_own_batch_all_or_nothing() -> None:
    acc = make(batch_size=1000, buffer_memory=3000 + 12 * RECORD_OVERHEAD, max_request_size=2500)
    before = add(acc)  # an open batch: the appended batch must come after it
    ts = 1_700_000_000_000
    recs = [(ts + i, None, b"x" * 150, [("h", b"1")]) for i in range(10)]  # > batch.size
    ids = acc.append_batch("t", 0, recs, now=0.0)
    assert ids == list(range(before + 1, before + 11))
    assert acc.take_readiness_changed()
    first, own = acc.queued_batches("t", 0)
    assert not first.is_open and not own.is_open  # neither takes more records
    assert own.record_ids == tuple(ids) and own.size_in_bytes > 1000
    after = add(acc)
    assert after == ids[-1] + 1 and len(acc.queued_batches("t", 0)) == 3
    decoded = decode(own)
    assert [r.timestamp for r in decoded.records()] == [ts + i for i in range(10)]
    assert [r.headers for r in decoded.records()] == [(("h", b"1"),)] * 10
    used, outstanding = acc.buffer_used, acc.outstanding_records
    with pytest.raises(BufferFullError):
        acc.append_batch("t", 1, recs, now=0.0)
    with pytest.raises(MessageTooLargeError, match="max_request_size"):
        acc.append_batch("t", 1, recs * 2, now=0.0)
    with pytest.raises(KafkaConfigurationError, match="at least one"):
        acc.append_batch("t", 1, [], now=0.0)
    with pytest.raises(KafkaConfigurationError, match="value"):
        acc.append_batch("t", 1, [(ts, None, "str", ())], now=0.0)  # type: ignore[list-item]
    # nothing of the refused batches was kept, and ids are not skipped
    assert (acc.buffer_used, acc.outstanding_records) == (used, outstanding)
    assert add(acc, 1) == after + 1


def test_inlined_size_bound_matches_the_codec() -> None:
    # append() inlines the bound for a keyless, headerless small value; it must agree
    # with the codec's function everywhere it is used, or batches could overflow.
    from kafkastate.core.producer.accumulator import (  # noqa: PLC0415
        _SMALL_VALUE,
        _small_value_upper_bound,
    )
    from kafkastate.core.protocol.records import (  # noqa: PLC0415
        estimate_record_size_upper_bound,
    )

    for n in range(_SMALL_VALUE):
        assert _small_value_upper_bound(n) == estimate_record_size_upper_bound(None, b"x" * n)


def test_busy_topics_settled_times_and_forget_for_idle_topics() -> None:
    # What the producer's metadata.max.idle.ms needs: which topics have records pending,
    # when a topic's sends last got their outcome, and dropping an idle topic's queues.
    acc = make()
    add(acc, 0, topic="t", now=1.0)
    add(acc, 0, topic="u", now=1.0)
    assert acc.busy_topics() == {"t", "u"}
    drained = acc.drain(CLUSTER, N1, now=2.0)
    assert sorted(b.topic for b in drained) == ["t", "u"]
    assert acc.busy_topics() == {"t", "u"}  # in flight
    (t_batch,) = [b for b in drained if b.topic == "t"]
    acc.complete(t_batch, base_offset=0, now=3.5)
    assert acc.busy_topics() == {"u"}
    assert acc.take_settled() == {"t": 3.5}
    assert acc.take_settled() == {}  # cleared
    acc.forget(["t", "u"])  # u is busy: kept
    assert ("t", 0) not in acc._queues and ("u", 0) in acc._queues
    rid = add(acc, 0, topic="t", now=4.0)  # a later record starts a queue afresh
    assert [b.record_ids for b in acc.queued_batches("t", 0)] == [(rid,)]
