"""``buffer.memory`` counts RECORD_OVERHEAD per record on top of the encoded bytes (issue 23):
a buffer full of small records must not hold several times its size in Python objects."""

from __future__ import annotations

import random

import pytest

from kafkastate.core.producer import (
    RECORD_OVERHEAD,
    Accumulator,
    AccumulatorConfig,
    BufferFullError,
    RecordsAcknowledged,
    RecordsFailed,
)
from kafkastate.errors import KafkaConfigurationError, KafkaTimeoutError
from tests.core.producer.test_accumulator import CLUSTER, N1
from tests.core.producer.test_producer_machine import TS
from tests.core.producer.test_producer_wait import answer_all, of, waiting_peer

BUFFER = 20_000


def fill(acc: Accumulator, partitions: int = 1) -> list[int]:
    """Append 1-byte records (round robin over ``partitions``) until one is refused."""
    ids = []
    with pytest.raises(BufferFullError) as info:
        for i in range(BUFFER):  # far more than fit even by bytes alone
            ids.append(
                acc.append("t", i % partitions, timestamp_ms=TS, key=None, value=b"x", now=0.0)
            )
    refused = info.value
    used = acc.buffer_used
    batches = [b for p in range(partitions) for b in acc.queued_batches("t", p)]
    # used = encoded bytes + the overhead of every record, and nothing else
    assert used == sum(b.size_in_bytes for b in batches) + RECORD_OVERHEAD * len(ids)
    assert used == sum(b.reserved_bytes for b in batches)
    # refused at the overhead-inclusive bound, where the bytes alone would still have fitted
    assert refused.needed > RECORD_OVERHEAD
    assert used + refused.needed > BUFFER >= used + refused.needed - RECORD_OVERHEAD
    assert refused.available == BUFFER - used == acc.buffer_available
    assert len(ids) == BUFFER // (RECORD_OVERHEAD + 8)  # 1 B values encode to 8 bytes
    return ids


def test_small_records_count_their_overhead_and_release_it_on_ack_and_failure() -> None:
    acc = Accumulator(
        AccumulatorConfig(batch_size=16_384, buffer_memory=BUFFER, linger=1.0),
        rng=random.Random(0),
    )
    ids = fill(acc, partitions=3)  # ("t", 0) and ("t", 2) lead on node 1, ("t", 1) on 2
    drained = acc.drain(CLUSTER, N1, now=0.0)
    assert len(drained) == 2
    acc.complete(drained[0], base_offset=0, now=0.0)
    acc.fail(drained[1], KafkaConfigurationError("failed"), now=0.0)
    (queued,) = acc.queued_batches("t", 1)
    assert acc.buffer_used == queued.reserved_bytes  # the other two released exactly
    (expired,) = acc.expire(now=1000.0)  # the delivery timeout
    assert expired is queued
    assert acc.buffer_used == 0 and acc.buffer_available == BUFFER
    events = list(iter(acc.next_event, None))
    done = [
        rid
        for e in events
        if isinstance(e, RecordsAcknowledged | RecordsFailed)
        for rid in e.record_ids
    ]
    assert sorted(done) == ids
    # and the full buffer's worth fits again
    acc.append("t", 0, timestamp_ms=TS, key=None, value=b"x", now=1000.0)


def test_a_split_moves_the_overhead_to_the_pieces() -> None:
    acc = Accumulator(
        AccumulatorConfig(batch_size=16_384, buffer_memory=BUFFER, linger=1.0),
        rng=random.Random(0),
    )
    ids = fill(acc)
    (batch,) = acc.drain(CLUSTER, N1, now=0.0)
    before = acc.buffer_used
    pieces = acc.split(batch, now=0.0)
    assert len(pieces) > 1
    # more batch headers; every record still counts its overhead once
    headers = sum(p.size_in_bytes for p in pieces) - batch.size_in_bytes
    assert acc.buffer_used == sum(p.reserved_bytes for p in pieces) == before + headers
    assert acc.buffer_used - RECORD_OVERHEAD * len(ids) == batch.size_in_bytes + headers
    for piece in pieces:
        (drained,) = acc.drain(CLUSTER, N1, now=1.0)
        assert drained is piece
        acc.complete(piece, base_offset=0, now=1.0)
    assert acc.buffer_used == 0
    acked = [
        rid
        for e in iter(acc.next_event, None)
        if isinstance(e, RecordsAcknowledged)
        for rid in e.record_ids
    ]
    assert acked == ids


@pytest.mark.usefixtures("implementation")  # the hot paths compiled and in Python
def test_the_hot_paths_count_the_overhead_and_max_block_waits_at_the_same_bound() -> None:
    peer = waiting_peer(acks=1, batch_size=16_384, buffer_memory=BUFFER, linger=10.0)
    m = peer.m
    acc = m.accumulator
    sent = []
    while True:  # keyless and keyed records take the hot paths while they fit
        key = None if len(sent) % 2 else b"k%d" % (len(sent) % 7)
        rid = m.send_plain("t", b"x", key, TS, peer.now)
        if rid is None:  # the general path decides: it makes the send wait
            rid = m.send("t", value=b"x", key=key, timestamp_ms=TS, now=peer.now)
            peer.pump()
            if m.is_waiting(rid):
                break
        sent.append(rid)
    batches = [*acc.in_flight_batches(), *(b for p in range(3) for b in acc.queued_batches("t", p))]
    assert acc.buffer_used == sum(b.size_in_bytes for b in batches) + RECORD_OVERHEAD * len(sent)
    assert acc.buffer_used <= BUFFER < acc.buffer_used + RECORD_OVERHEAD + 8 + 61 + 2
    assert len(sent) > 30
    peer.now = 2.0  # max_block: the waiting send fails, and nothing else changed
    m.handle_timer(now=peer.now)
    peer.pump()
    (failed,) = of(peer, RecordsFailed)
    assert failed.record_ids == (rid,) and isinstance(failed.error, KafkaTimeoutError)
    m.flush(now=peer.now)
    peer.pump()
    while answer_all(peer, {}):
        pass
    acked = [r for e in of(peer, RecordsAcknowledged) for r in e.record_ids]
    assert sorted(acked) == sent
    assert acc.buffer_used == 0 and not acc.has_incomplete()
