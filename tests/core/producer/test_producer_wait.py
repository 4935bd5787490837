"""Sends that wait for ``buffer.memory`` in the core (``AccumulatorConfig.max_block``).

A send refused for a full buffer gets its record id at once and waits in the accumulator's
FIFO; ``max_block`` is a deadline of ``get_timer()``; waiting sends are admitted strictly in
send order as batches get their outcomes (``RecordsAdmitted``), or fail with
``KafkaTimeoutError`` at the deadline, or with ``ProducerClosedError`` on close and abort.
Driven by hand: the scripted peer cluster of test_producer_machine, time stepped with
``now=``; no sockets, no sleeps.
"""

from __future__ import annotations

import random
from typing import Any

import attrs
import pytest

from kafkastate.core.producer import (
    RECORD_OVERHEAD,
    Accumulator,
    AccumulatorConfig,
    BufferFullError,
    FlushCompleted,
    ProducerMachine,
    RecordsAcknowledged,
    RecordsAdmitted,
    RecordsFailed,
)
from kafkastate.core.protocol.versions import ApiKey
from kafkastate.errors import (
    KafkaConfigurationError,
    KafkaTimeoutError,
    MessageTooLargeError,
    ProducerClosedError,
)
from tests._support.peer import Sent
from tests.core.producer.test_producer_machine import TS, PeerCluster, machine, produce_response

MAX_BLOCK = 2.0


def waiting_peer(*, max_block: float = MAX_BLOCK, topics: Any = None, **kw: Any) -> PeerCluster:
    """A started producer whose sends wait up to ``max_block`` for buffer memory."""
    kw.setdefault("linger", 10.0)
    kw.setdefault("batch_size", 300)
    # room for six 100 B records and their RECORD_OVERHEAD, as 1000 bytes held without it
    kw.setdefault("buffer_memory", 1000 + 6 * RECORD_OVERHEAD)
    base = machine(**kw).config
    config = attrs.evolve(base, accumulator=attrs.evolve(base.accumulator, max_block=max_block))
    peer = PeerCluster(ProducerMachine(config, rng=random.Random(7)), topics=topics)
    peer.start()
    return peer


def send(peer: PeerCluster, value: bytes, **kw: Any) -> Any:
    kw.setdefault("partition", 0)
    rid = peer.m.send("t", value=value, timestamp_ms=TS, now=peer.now, **kw)
    peer.pump()
    return rid


def fill(peer: PeerCluster, **kw: Any) -> list[Any]:
    """Send 100-byte records until one waits; return their ids (the last one waits)."""
    rids = []
    while True:
        rids.append(send(peer, bytes(100), **kw))
        if peer.m.is_waiting(rids[-1]):
            return rids
        assert len(rids) < 50, "the buffer should have filled up"


def answer_all(peer: PeerCluster, offsets: dict[tuple[str, int], int], limit: int = 99) -> int:
    """Answer up to ``limit`` pending Produce requests (oldest first) with success."""
    ids = peer.topic_ids()

    def ok(part: Any) -> tuple[int, int]:
        key = (part.topic, part.partition)
        base = offsets.get(key, 0)
        offsets[key] = base + len(part.values)
        return 0, base

    done = 0
    while done < limit:
        produces = [s for s in peer.pending if s.req.api_key == ApiKey.PRODUCE and not s.auto]
        if not produces:
            break
        sent: Sent = produces[0]
        peer.answer(sent, produce_response(sent, ok, ids))
        done += 1
    return done


def of(peer: PeerCluster, kind: type) -> list[Any]:
    return [e for e in peer.events if isinstance(e, kind)]


def admitted_ids(peer: PeerCluster) -> list[Any]:
    return [rid for e in of(peer, RecordsAdmitted) for rid in e.record_ids]


# ---------------------------------------------------------------------------- waiting


def test_a_refused_send_gets_an_id_and_a_max_block_deadline() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    steps = m.steps
    rids = fill(peer)
    waiting = rids[-1]
    assert m.steps != steps  # drivers notice: a new deadline
    assert m.accumulator.waiting_sends == 1
    assert m.get_timer() == 0.0 + MAX_BLOCK  # exact: the max_block deadline
    # memory is exhausted: every partition was sent without waiting for its linger
    assert peer.produces()
    answer_all(peer, {})
    (admitted,) = of(peer, RecordsAdmitted)
    assert admitted.record_ids == (waiting,) and admitted.partition == 0
    assert not m.is_waiting(waiting)
    assert m.get_timer() != MAX_BLOCK  # the deadline is gone with the wait
    answer_all(peer, {("t", 0): 100})  # linger: flush to see the waiting one through
    m.flush(now=peer.now)
    peer.pump()
    answer_all(peer, {("t", 0): 100})
    acked = [rid for e in of(peer, RecordsAcknowledged) for rid in e.record_ids]
    assert acked == rids  # same events as an admitted record: acknowledged in send order


def test_later_small_send_never_overtakes_an_earlier_big_one() -> None:
    peer = waiting_peer(acks=1, max_in_flight_requests_per_connection=1)
    m = peer.m
    fill(peer)
    peer.now = 0.5
    big = send(peer, bytes(600), partition=1)
    peer.now = 0.7
    small = send(peer, bytes(1), partition=1)
    assert m.is_waiting(big) and m.is_waiting(small)
    assert m.get_timer() == MAX_BLOCK  # the head's deadline, not the later ones'
    order: list[Any] = []
    while m.accumulator.waiting_sends and answer_all(peer, {}, limit=1):
        for rid in admitted_ids(peer):
            if rid not in order:
                order.append(rid)
        if m.is_waiting(big):
            # room for the small one may well be there: it still waits behind the big one
            assert m.is_waiting(small)
    assert order[-2:] == [big, small]
    assert order == sorted(order)  # admission order is send order
    admitted = {e.record_ids[0]: e for e in of(peer, RecordsAdmitted)}
    assert admitted[big].partition == admitted[small].partition == 1


def test_small_would_fit_while_the_big_head_waits() -> None:
    """The FIFO property at its sharpest: free memory for the small send but not the big
    one; the small one stays queued."""
    acc = Accumulator(
        AccumulatorConfig(
            batch_size=300, buffer_memory=1000 + 3 * RECORD_OVERHEAD, linger=10.0, max_block=5.0
        ),
        rng=random.Random(0),
    )
    for _ in range(3):
        acc.append("t", 0, timestamp_ms=TS, key=None, value=bytes(200), now=0.0)
    big = acc.append("t", 1, timestamp_ms=TS, key=None, value=bytes(700), now=1.0)
    small = acc.append("t", 1, timestamp_ms=TS, key=None, value=b"x", now=1.5)
    assert acc.is_waiting(big) and acc.is_waiting(small)
    assert acc.next_wait_deadline() == 6.0
    cluster = PeerCluster(machine()).m.client.cluster  # empty: explicit partitions only
    (first, *_rest) = acc.queued_batches("t", 0)
    acc.fail(first, KafkaConfigurationError("make room"), now=2.0)
    assert acc.buffer_available >= 100  # the small record would fit now...
    assert acc.admit_waiting(cluster, now=2.0) == []
    assert acc.is_waiting(small)  # ...but it does not overtake
    for batch in acc.queued_batches("t", 0):
        acc.fail(batch, KafkaConfigurationError("make room"), now=2.5)
    assert acc.admit_waiting(cluster, now=2.5) == [("t", 1), ("t", 1)]
    events = []
    while (event := acc.next_event()) is not None:
        events.append(event)
    assert [e.record_ids for e in events if isinstance(e, RecordsAdmitted)] == [
        (big,),
        (small,),
    ]


def test_max_block_fails_the_send_at_its_exact_deadline() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    first = fill(peer)[-1]
    peer.now = 0.25
    second = send(peer, bytes(100))
    assert m.get_timer() == MAX_BLOCK
    m.handle_timer(now=MAX_BLOCK - 0.001)  # early: nothing fails
    peer.pump()
    assert m.is_waiting(first) and not of(peer, RecordsFailed)
    peer.advance()  # to the exact deadline
    assert peer.now == MAX_BLOCK
    (failed,) = of(peer, RecordsFailed)
    assert failed.record_ids == (first,) and failed.partition == 0
    error = failed.error
    assert isinstance(error, KafkaTimeoutError)
    assert "max_block_ms (2000 ms)" in str(error) and "buffer_memory" in str(error)
    assert isinstance(error.__cause__, BufferFullError)
    assert m.is_waiting(second)
    assert m.get_timer() == 0.25 + MAX_BLOCK  # the next one's own deadline
    peer.advance()
    assert [e.record_ids for e in of(peer, RecordsFailed)] == [(first,), (second,)]
    assert m.accumulator.waiting_sends == 0
    assert m.accumulator.outstanding_records == len(m.accumulator.in_flight_batches()) * 2


def test_a_flush_waits_for_the_sends_that_wait() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    waiting = fill(peer)[-1]
    fid = m.flush(now=peer.now)
    peer.pump()
    while answer_all(peer, {}, limit=1):
        pass
    (done,) = of(peer, FlushCompleted)
    assert done.flush_id == fid
    outcomes = [e for e in peer.events if isinstance(e, RecordsAcknowledged | FlushCompleted)]
    assert outcomes[-1] == done  # after the last record's outcome...
    assert waiting in outcomes[-2].record_ids  # ...which is the one that waited


def test_withdraw_takes_back_a_waiting_send_only() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    rids = fill(peer)
    later = send(peer, bytes(100))
    assert m.withdraw(rids[-1], now=peer.now)
    assert not m.withdraw(rids[-1], now=peer.now)  # gone already
    assert not m.withdraw(rids[0], now=peer.now)  # appended: not a waiting send
    answer_all(peer, {})
    assert admitted_ids(peer) == [later]
    named = {rid for e in of(peer, RecordsAdmitted | RecordsFailed) for rid in e.record_ids}
    assert rids[-1] not in named


# ---------------------------------------------------------------------- refusals, close


def test_a_record_larger_than_buffer_memory_is_refused_at_once() -> None:
    peer = waiting_peer(acks=1, batch_size=300, buffer_memory=1000, max_request_size=5000)
    fill(peer)  # sends wait: a hopeless record must not join them
    waiting = peer.m.accumulator.waiting_sends
    with pytest.raises(MessageTooLargeError, match="buffer_memory"):
        send(peer, bytes(1200))
    with pytest.raises(MessageTooLargeError, match="max_request_size"):
        send(peer, bytes(6000))
    assert peer.m.accumulator.waiting_sends == waiting


def test_close_fails_the_waiting_sends() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    waiting = fill(peer)[-1]
    later = send(peer, b"x")
    m.close(now=peer.now)
    peer.pump()
    failed = of(peer, RecordsFailed)
    assert [e.record_ids for e in failed] == [(waiting,), (later,)]
    for event in failed:
        assert isinstance(event.error, ProducerClosedError)  # aiokafka's ProducerClosed
        assert "closed while the record waited" in str(event.error)
    assert m.accumulator.waiting_sends == 0 and m.get_timer() != MAX_BLOCK
    answer_all(peer, {})
    assert m.state.name == "CLOSED"  # the admitted records were delivered, then it closed


def test_abort_fails_the_waiting_sends() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    waiting = fill(peer)[-1]
    m.abort(now=peer.now)
    peer.pump()
    (failed,) = [e for e in of(peer, RecordsFailed) if waiting in e.record_ids]
    assert isinstance(failed.error, ProducerClosedError)
    assert "aborted while the record waited" in str(failed.error)
    assert m.state.name == "CLOSED"


def test_without_max_block_the_send_is_refused_as_before() -> None:
    peer = waiting_peer(acks=1, max_block=None)  # type: ignore[arg-type]
    with pytest.raises(BufferFullError):
        fill(peer)
    assert peer.m.accumulator.waiting_sends == 0


def test_send_batch_waits_in_the_same_fifo() -> None:
    peer = waiting_peer(acks=1)
    m = peer.m
    waiting = fill(peer)[-1]
    rids = m.send_batch("t", 1, [(TS, None, b"a", ()), (TS, None, b"b", ())], now=peer.now)
    peer.pump()
    assert m.is_waiting(rids[0]) and rids[0] > waiting
    answer_all(peer, {})
    assert admitted_ids(peer) == [waiting, *rids]


def test_sticky_records_that_waited_take_the_sticky_partition_of_their_admission() -> None:
    peer = waiting_peer(acks=1, topics={"t": {p: (1 + p % 2, 0) for p in range(4)}})
    m = peer.m
    rids = fill(peer, partition=None)
    more = [send(peer, bytes(100), partition=None) for _ in range(6)]
    assert all(m.is_waiting(r) for r in more)
    while m.accumulator.waiting_sends and answer_all(peer, {}, limit=1):
        pass
    admitted = of(peer, RecordsAdmitted)
    assert [e.record_ids[0] for e in admitted] == [rids[-1], *more]
    # the partitioner switched as batches filled: they did not all go where the first
    # waiting record was headed
    assert len({e.partition for e in admitted}) > 1


# ------------------------------------------------------------------ seeded property test


def note_admitted(peer: PeerCluster, entered: list[Any]) -> None:
    seen = set(entered)
    for event in of(peer, RecordsAdmitted):
        for rid in event.record_ids:
            if rid not in seen:
                entered.append(rid)
                seen.add(rid)


def _run_mix(seed: int) -> tuple[int, int, int]:
    rng = random.Random(seed)
    topics = {"t": {0: (1, 0), 1: (2, 0), 2: (1, 0)}}
    peer = waiting_peer(
        acks=1,
        max_in_flight_requests_per_connection=rng.choice([1, 5]),
        linger=rng.choice([0.0, 0.01, 10.0]),
        batch_size=rng.choice([200, 300, 1000]),
        buffer_memory=rng.choice([700, 1000]),
        max_block=rng.choice([0.0, 0.05, 0.05, 1.0]),
        topics=topics,
    )
    m = peer.m
    sent: list[Any] = []  # send order
    entered: list[Any] = []  # the order records got into batches
    deadlines: dict[Any, float] = {}
    for _ in range(300):
        r = rng.random()
        if r < 0.7:
            kw: dict[str, Any] = {}
            pick = rng.random()
            if pick < 0.3:
                kw["key"] = b"k%d" % rng.randrange(4)
            elif pick < 0.5:
                kw["partition"] = rng.randrange(3)
            value = bytes(rng.choice([0, 10, 100, 300, 500]))
            try:
                rid = m.send("t", value=value, timestamp_ms=TS, now=peer.now, **kw)
            except MessageTooLargeError:
                continue
            sent.append(rid)
            if m.is_waiting(rid):
                deadlines[rid] = peer.now + m.config.accumulator.max_block  # type: ignore[operator]
            else:
                entered.append(rid)
        elif r < 0.85:
            answer_all(peer, {}, limit=rng.randrange(1, 3))
        elif r < 0.9:
            peer.now += rng.choice([0.001, 0.02, 0.3])
        peer.pump()
        while (due := m.get_timer()) is not None and due <= peer.now:
            m.handle_timer(now=peer.now)
            peer.pump()
        note_admitted(peer, entered)
        for event in of(peer, RecordsFailed):
            if isinstance(event.error, KafkaTimeoutError) and event.record_ids[0] in deadlines:
                # failed for max_block: never before its deadline
                assert peer.now >= deadlines[event.record_ids[0]]
    m.flush(now=peer.now)
    for _ in range(200):
        peer.pump()
        note_admitted(peer, entered)
        if not answer_all(peer, {}, limit=1):
            if m.get_timer() is None:
                break
            peer.advance()
    note_admitted(peer, entered)
    assert entered == sorted(entered), "a send overtook an earlier one"
    outcomes: dict[Any, int] = {}
    for event in of(peer, RecordsAcknowledged | RecordsFailed):
        for rid in event.record_ids:
            outcomes[rid] = outcomes.get(rid, 0) + 1
    assert outcomes == dict.fromkeys(sent, 1), "every send gets exactly one outcome"
    timed_out = [
        rid
        for e in of(peer, RecordsFailed)
        if isinstance(e.error, KafkaTimeoutError)
        for rid in e.record_ids
    ]
    admitted = [rid for rid in entered if rid in deadlines]
    assert set(timed_out) | set(admitted) == set(deadlines)
    return len(deadlines), len(admitted), len(timed_out)


@pytest.mark.parametrize("seed", range(16))
def test_admission_order_is_send_order(seed: int) -> None:
    waited, _admitted, _timed_out = _run_mix(seed)
    assert waited > 5, "the mix should make sends wait"
