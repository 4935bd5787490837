"""ProducerMachine driven by hand against a scripted peer cluster: no sockets, time stepped
explicitly. The peer answers ApiVersions and Metadata by itself; tests answer Produce and
InitProducerId."""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.client import ClientConfig
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.metadata import MetadataConfig, NodeId
from kafkastate.core.producer import (
    AccumulatorConfig,
    BufferFullError,
    FlushCompleted,
    RecordsAcknowledged,
    RecordsFailed,
)
from kafkastate.core.producer.idempotence import increment_sequence, init_producer_id_request
from kafkastate.core.producer.producer import (
    MetadataPendingError,
    ProducerClosed,
    ProducerConfig,
    ProducerFailed,
    ProducerIdAssigned,
    ProducerMachine,
    ProducerState,
)
from kafkastate.core.protocol.records import iter_batches
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import (
    CLIENT_VERSIONS,
    ApiKey,
    ApiVersionTable,
    response_type,
)
from kafkastate.errors import (
    IllegalStateError,
    KafkaConfigurationError,
    KafkaTimeoutError,
    MessageTooLargeError,
    OutOfOrderSequenceNumberError,
    ProducerClosedError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
)
from tests._support.peer import (
    ScriptedCluster,
    Sent,
    response,
)

TS = 1_700_000_000_000


@dataclass
class PartBatch:
    """What one partition of a Produce request carried."""

    topic: str
    partition: int
    producer_id: int
    epoch: int
    base_sequence: int
    values: list[bytes | None]
    key: Any  # the request key to answer with (name or topic id)


class PeerCluster(ScriptedCluster):
    """The scripted cluster around one ProducerMachine; tests answer Produce and
    InitProducerId."""

    def produces(self) -> list[Sent]:
        return [s for s in self.pending if s.req.api_key == ApiKey.PRODUCE]

    def start(self) -> None:
        """Bootstrap: metadata, and (with idempotence) the InitProducerId answered."""
        self.m.track_topics(sorted(self.topics))
        self.advance(0.0)
        if self.m.idempotence is not None:
            self.answer_init(self.take(ApiKey.INIT_PRODUCER_ID))

    def answer_init(self, sent: Sent, *, pid: int = 1000, epoch: int = 0, code: int = 0) -> None:
        self.answer(
            sent,
            response(
                22,
                sent.req.version,
                throttle_time=datetime.timedelta(0),
                error_code=ErrorCode(code),
                producer_id=pid,
                producer_epoch=epoch,
            ),
        )

    def send(self, value: bytes, *, topic: str = "t", **kw: Any) -> Any:
        kw.setdefault("partition", 0)
        rid = self.m.send(topic, value=value, timestamp_ms=TS, now=self.now, **kw)
        self.pump()
        return rid

    def outcomes(self) -> list[Any]:
        out = [e for e in self.events if isinstance(e, RecordsAcknowledged | RecordsFailed)]
        return out


def parts_of(sent: Sent, ids: dict[Any, str]) -> list[PartBatch]:
    out = []
    for t in sent.req.body.topic_data:
        name = getattr(t, "name", None)
        key = name if name is not None else t.topic_id
        topic = name if name is not None else ids[t.topic_id]
        for p in t.partition_data:
            (batch,) = iter_batches(bytes(p.records))
            out.append(
                PartBatch(
                    topic=topic,
                    partition=int(p.index),
                    producer_id=batch.producer_id,
                    epoch=batch.producer_epoch,
                    base_sequence=batch.base_sequence,
                    values=[r.value for r in batch],
                    key=key,
                )
            )
    return out


def produce_response(
    sent: Sent,
    answer: Callable[[PartBatch], tuple[int, int]],
    ids: dict[Any, str],
) -> Any:
    """A ProduceResponse for ``sent``: ``answer(part) -> (error code, base offset)``."""
    rcls = response_type(0, sent.req.version)
    topic_cls = nested_type(rcls, "TopicProduceResponse")
    part_cls = nested_type(rcls, "PartitionProduceResponse")
    by_topic: dict[Any, list[Any]] = {}
    for part in parts_of(sent, ids):
        code, offset = answer(part)
        by_topic.setdefault(part.key, []).append(
            build(
                part_cls,
                index=part.partition,
                error_code=ErrorCode(code),
                base_offset=offset,
                log_append_time=None,
                log_start_offset=-1,
                record_errors=(),
                error_message=None,
            )
        )
    topics = tuple(
        build(
            topic_cls,
            name=key if isinstance(key, str) else None,
            topic_id=None if isinstance(key, str) else key,
            partition_responses=tuple(parts),
        )
        for key, parts in by_topic.items()
    )
    return build(rcls, responses=topics, throttle_time=datetime.timedelta(0), node_endpoints=())


def machine(
    *,
    linger: float = 0.0,
    batch_size: int = 16384,
    delivery_timeout: float = 120.0,
    request_timeout: float = 30.0,
    buffer_memory: int = 32 * 1024 * 1024,
    max_request_size: int = 1024 * 1024,
    **kw: Any,
) -> ProducerMachine:
    config = ProducerConfig(
        client=ClientConfig(
            bootstrap_servers=[("boot", 9092)],
            connection=ConnectionConfig(request_timeout=request_timeout),
            metadata=MetadataConfig(retry_backoff=0.1),
        ),
        accumulator=AccumulatorConfig(
            linger=linger,
            batch_size=batch_size,
            delivery_timeout=delivery_timeout,
            request_timeout=request_timeout,
            buffer_memory=buffer_memory,
            max_request_size=max_request_size,
            retry_backoff=0.1,
            retry_backoff_max=1.0,
        ),
        **kw,
    )
    return ProducerMachine(config, rng=random.Random(7))


def started(**kw: Any) -> PeerCluster:
    peer = PeerCluster(machine(**kw))
    peer.start()
    return peer


def ok(offsets: dict[tuple[str, int], int]) -> Callable[[PartBatch], tuple[int, int]]:
    def answer(part: PartBatch) -> tuple[int, int]:
        return 0, offsets[(part.topic, part.partition)]

    return answer


# ------------------------------------------------------------------------------ config


def test_config_acks_and_idempotence_rules() -> None:
    client = ClientConfig(bootstrap_servers="h:1")
    assert ProducerConfig(client=client).idempotent  # Java 3+ default
    assert ProducerConfig(client=client, acks="all").acks == -1
    # left at default: idempotence quietly turns off with acks != all, like Java
    assert not ProducerConfig(client=client, acks=1).idempotent
    assert not ProducerConfig(client=client, max_in_flight_requests_per_connection=6).idempotent
    with pytest.raises(KafkaConfigurationError, match="requires acks='all'"):
        ProducerConfig(client=client, acks=1, enable_idempotence=True)
    with pytest.raises(KafkaConfigurationError, match="<= 5"):
        ProducerConfig(
            client=client, enable_idempotence=True, max_in_flight_requests_per_connection=6
        )
    with pytest.raises(KafkaConfigurationError, match="retries"):
        ProducerConfig(client=client, enable_idempotence=True, retries=0)
    with pytest.raises(KafkaConfigurationError, match="acks"):
        ProducerConfig(client=client, acks=2)
    assert ProducerConfig(client=client, transactional_id="tx").idempotent
    with pytest.raises(KafkaConfigurationError, match="transactional_id needs idempotence"):
        ProducerConfig(client=client, transactional_id="tx", enable_idempotence=False)
    with pytest.raises(KafkaConfigurationError, match="transactional_id"):
        ProducerConfig(client=client, transactional_id="tx", acks=1)
    with pytest.raises(KafkaConfigurationError, match="transactional_id must be"):
        ProducerConfig(client=client, transactional_id="")
    with pytest.raises(ValueError):  # KafkaConfigurationError is a ValueError
        ProducerConfig(client=client, max_in_flight_requests_per_connection=0)


def test_init_producer_id_needs_v3() -> None:
    old = ApiVersionTable({ApiKey.INIT_PRODUCER_ID: (0, 2)})
    with pytest.raises(UnsupportedVersionError) as info:
        init_producer_id_request(old)
    assert str(info.value) == (
        "the idempotent producer (KIP-360, Kafka 2.5+) needs InitProducerId v3+ (api_key 22); "
        "the broker (older than Kafka 3.0, by its API versions) offers v0..v2: "
        "set enable_idempotence=False"
    )
    assert info.value.feature is not None and info.value.broker_range == (0, 2)
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 5) == 3
    assert increment_sequence(10, 5) == 15


def test_old_broker_without_init_producer_id_v3_is_fatal() -> None:
    ranges = dict(CLIENT_VERSIONS)
    ranges[ApiKey.INIT_PRODUCER_ID] = (0, 2)
    peer = PeerCluster(machine(), api_ranges=ranges)
    peer.advance(0.0)
    failed = [e for e in peer.events if isinstance(e, ProducerFailed)]
    assert len(failed) == 1 and isinstance(failed[0].error, UnsupportedVersionError)
    assert peer.m.state is ProducerState.FAILED
    with pytest.raises(UnsupportedVersionError):
        peer.send(b"y")


# ------------------------------------------------------------------------ idempotence


def test_init_producer_id_comes_before_the_first_produce() -> None:
    peer = PeerCluster(machine())
    peer.m.track_topics(["t"])
    peer.advance(0.0)
    init = peer.take(ApiKey.INIT_PRODUCER_ID)
    assert init.req.version >= 3
    assert (init.req.body.producer_id, init.req.body.producer_epoch) == (-1, -1)
    assert init.req.body.transactional_id is None
    peer.send(b"a")
    assert peer.produces() == []  # no producer id yet
    peer.answer_init(init, pid=42, epoch=3)
    assert ProducerIdAssigned(producer_id=42, producer_epoch=3, bumped=False) in peer.events
    (sent,) = peer.produces()
    (part,) = parts_of(sent, peer.topic_ids())
    assert (part.producer_id, part.epoch, part.base_sequence) == (42, 3, 0)
    assert sent.req.body.acks == -1


def test_sequences_advance_per_record_count_and_offsets_are_reported() -> None:
    peer = started()
    ids = peer.topic_ids()
    r1 = peer.send(b"a")
    (first,) = peer.produces()
    peer.answer(first, produce_response(first, ok({("t", 0): 10}), ids))
    r2 = peer.send(b"b")
    r3 = peer.send(b"c")
    # up to five requests per connection: each send went out in its own request
    later = peer.produces()
    seqs = [parts_of(s, ids)[0].base_sequence for s in [first, *later]]
    assert seqs == [0, 1, 2]
    for offset, s in zip((11, 12), later, strict=True):
        peer.answer(s, produce_response(s, ok({("t", 0): offset}), ids))
    acks = peer.outcomes()
    assert [a.results() for a in acks] == [[(r1, 10, TS)], [(r2, 11, TS)], [(r3, 12, TS)]]


def test_a_partition_sends_one_batch_at_a_time_until_its_first_is_acknowledged() -> None:
    # KAFKA-15591: a broker with no state for the producer accepts any first sequence, so
    # a second batch must not overtake a first one refused while the topic is created.
    peer = started()
    ids = peer.topic_ids()
    peer.send(b"a")
    (first,) = peer.produces()
    peer.send(b"b")
    peer.send(b"c")
    assert peer.produces() == [first]  # b and c wait in one batch
    peer.answer(first, produce_response(first, lambda p: (6, -1), ids))  # NOT_LEADER
    while not peer.produces():
        peer.advance()
    (retry,) = peer.produces()
    assert [(p.base_sequence, p.values) for p in parts_of(retry, ids)] == [(0, [b"a"])]
    peer.answer(retry, produce_response(retry, ok({("t", 0): 0}), ids))
    (rest,) = peer.produces()
    assert [(p.base_sequence, p.values) for p in parts_of(rest, ids)] == [(1, [b"b", b"c"])]
    peer.send(b"d")  # acknowledged once: up to five in flight again
    assert len(peer.produces()) == 2


def test_out_of_order_for_a_batch_a_later_one_overtook_fails_it_without_resending() -> None:
    # A broker holding the producer's state writes sequence 2 only after 1, so a later
    # acknowledged batch means the earlier one was written and its acknowledgement lost; a
    # retry arriving after the broker's five-batch duplicate window is answered
    # OUT_OF_ORDER_SEQUENCE_NUMBER. Sending it again under a new epoch wrote it twice (the
    # chaos run of 2026-11-27: 14 duplicates); it fails, typed, and is not sent again.
    # (The timer steps below pass 1200 s: the topic must not go idle meanwhile.)
    peer = started(metadata_max_idle=3600.0)
    ids = peer.topic_ids()
    first_rid = peer.send(b"a")
    (first,) = peer.produces()
    peer.answer(first, produce_response(first, ok({("t", 0): 0}), ids))
    rids = [peer.send(b"b"), peer.send(b"c")]
    b, c = peer.produces()
    assert [parts_of(s, ids)[0].base_sequence for s in (b, c)] == [1, 2]
    peer.answer(b, produce_response(b, lambda p: (6, -1), ids))  # NOT_LEADER: b retries
    peer.answer(c, produce_response(c, ok({("t", 0): 2}), ids))  # c written after it
    while not peer.produces():
        peer.advance()
    (again,) = peer.produces()
    assert parts_of(again, ids)[0].base_sequence == 1
    peer.answer(again, produce_response(again, lambda p: (45, -1), ids))  # OUT_OF_ORDER
    outcomes = peer.outcomes()
    acked = {
        rid: offset
        for a in outcomes
        if isinstance(a, RecordsAcknowledged)
        for rid, offset, _ in a.results()
    }
    assert acked == {first_rid: 0, rids[1]: 2}
    failed = [o for o in outcomes if isinstance(o, RecordsFailed)]
    assert len(failed) == 1 and rids[0] in failed[0].record_ids
    assert isinstance(failed[0].error, OutOfOrderSequenceNumberError)
    assert "not sent again" in str(failed[0].error)
    inits = peer.requests[ApiKey.INIT_PRODUCER_ID]
    for _ in range(5):  # no new epoch, no second copy of b
        if peer.m.get_timer() is not None:
            peer.advance()
    assert peer.produces() == []
    assert peer.requests[ApiKey.INIT_PRODUCER_ID] == inits
    peer.send(b"d")  # the partition goes on under the same id/epoch, after c
    (d,) = peer.produces()
    (part,) = parts_of(d, ids)
    assert (part.epoch, part.base_sequence, part.values) == (0, 3, [b"d"])


def test_linger_deadline_is_exact_and_batches_fill() -> None:
    peer = started(linger=0.25)
    ids = peer.topic_ids()
    peer.now = 1.0
    peer.send(b"a")
    peer.now = 1.1
    peer.send(b"b")
    assert peer.produces() == []
    assert peer.m.get_timer() == pytest.approx(1.25)
    peer.advance()
    assert peer.now == pytest.approx(1.25)
    (sent,) = peer.produces()
    (part,) = parts_of(sent, ids)
    assert part.values == [b"a", b"b"] and part.base_sequence == 0
    peer.answer(sent, produce_response(sent, ok({("t", 0): 0}), ids))
    (ack,) = peer.outcomes()
    assert ack.base_offset == 0 and len(ack.record_ids) == 2


def test_appending_to_a_batch_with_room_does_not_step() -> None:
    # The hot path: only a new batch (a new linger deadline) or a full one makes the
    # machine re-examine its state, and drivers use `steps` to skip needless wake-ups.
    peer = started(linger=0.25, batch_size=200)
    peer.now = 1.0
    before = peer.m.steps
    peer.send(b"a" * 10)
    opened = peer.m.steps
    assert opened > before
    timer = peer.m.get_timer()
    peer.now = 1.1
    peer.m.send("t", value=b"b" * 10, partition=0, timestamp_ms=TS, now=peer.now)
    assert peer.m.steps == opened and peer.m.get_timer() == timer
    while peer.m.steps == opened:  # fill the batch: the append that fills it steps
        peer.m.send("t", value=b"c" * 10, partition=0, timestamp_ms=TS, now=peer.now)
    peer.pump()
    assert len(peer.produces()) == 1  # the full batch went out before its linger


def test_retriable_error_retries_with_the_same_sequence() -> None:
    peer = started()
    ids = peer.topic_ids()
    rid = peer.send(b"a")
    (sent,) = peer.produces()
    peer.answer(sent, produce_response(sent, lambda p: (6, -1), ids))  # NOT_LEADER_OR_FOLLOWER
    assert peer.produces() == [] and peer.outcomes() == []
    assert peer.m.client.metadata.update_due_at() is not None  # refresh requested
    peer.advance()  # retry backoff (and the metadata refresh)
    while not peer.produces():
        peer.advance()
    (again,) = peer.produces()
    (part,) = parts_of(again, ids)
    assert (part.producer_id, part.epoch, part.base_sequence) == (1000, 0, 0)
    peer.answer(again, produce_response(again, ok({("t", 0): 5}), ids))
    (ack,) = peer.outcomes()
    assert ack.results() == [(rid, 5, TS)]


def test_lost_connection_retries_and_duplicate_sequence_counts_as_success() -> None:
    peer = started()
    ids = peer.topic_ids()
    rid = peer.send(b"a")
    (sent,) = peer.produces()
    peer.m.connection_lost(NodeId(sent.node), now=peer.now, error=OSError("reset"))
    peer.open.discard(sent.node)
    peer.pending.clear()
    peer.pump()
    while not peer.produces():
        peer.advance()
    (again,) = peer.produces()
    assert parts_of(again, ids)[0].base_sequence == 0
    # the first attempt was written after all: the broker says DUPLICATE_SEQUENCE_NUMBER
    peer.answer(again, produce_response(again, lambda p: (46, 7), ids))
    (ack,) = peer.outcomes()
    assert ack.results() == [(rid, 7, TS)]


def test_out_of_order_for_the_next_sequence_bumps_the_epoch() -> None:
    peer = started()
    ids = peer.topic_ids()
    rid = peer.send(b"a")
    (sent,) = peer.produces()
    peer.answer(sent, produce_response(sent, lambda p: (45, -1), ids))  # OUT_OF_ORDER
    bump = peer.take(ApiKey.INIT_PRODUCER_ID)
    assert (bump.req.body.producer_id, bump.req.body.producer_epoch) == (1000, 0)  # KIP-360
    assert peer.produces() == []
    peer.answer_init(bump, pid=1000, epoch=1)
    assert ProducerIdAssigned(producer_id=1000, producer_epoch=1, bumped=True) in peer.events
    while not peer.produces():
        peer.advance()
    (again,) = peer.produces()
    (part,) = parts_of(again, ids)
    assert (part.producer_id, part.epoch, part.base_sequence) == (1000, 1, 0)
    peer.answer(again, produce_response(again, ok({("t", 0): 3}), ids))
    (ack,) = peer.outcomes()
    assert ack.record_ids == (rid,)


def test_unknown_producer_id_resets_every_partition_after_in_flight_resolve() -> None:
    peer = started()
    ids = peer.topic_ids()
    peer.send(b"a0", partition=0)
    peer.send(b"b0", partition=1)
    s0 = next(s for s in peer.produces() if s.node == 1)
    s1 = next(s for s in peer.produces() if s.node == 2)
    peer.answer(s0, produce_response(s0, ok({("t", 0): 0}), ids))
    peer.send(b"a1", partition=0)  # seq 1 on partition 0
    s0b = next(s for s in peer.produces() if s.node == 1)
    assert parts_of(s0b, ids)[0].base_sequence == 1
    peer.answer(s0b, produce_response(s0b, lambda p: (59, -1), ids))  # UNKNOWN_PRODUCER_ID
    bump = peer.take(ApiKey.INIT_PRODUCER_ID)
    # a broker without a transactional id hands out a new producer id
    peer.answer_init(bump, pid=2000, epoch=0)
    peer.send(b"b1", partition=1)  # partition 1 still has seq 0 of pid 1000 in flight
    while not any(s.node == 1 for s in peer.produces()):
        peer.advance()
    assert [s.node for s in peer.produces()] == [2, 1]
    retry = next(s for s in peer.produces() if s.node == 1)
    assert (parts_of(retry, ids)[0].producer_id, parts_of(retry, ids)[0].base_sequence) == (
        2000,
        0,
    )
    peer.answer(s1, produce_response(s1, ok({("t", 1): 0}), ids))  # old pid, still fine
    (p1,) = [s for s in peer.produces() if s.node == 2]
    (part,) = parts_of(p1, ids)
    assert (part.producer_id, part.base_sequence, part.values) == (2000, 0, [b"b1"])


def test_message_too_large_splits_and_keeps_the_sequence_range() -> None:
    peer = started(linger=1.0)
    ids = peer.topic_ids()
    rids = [peer.send(bytes([i]) * 100) for i in range(4)]
    peer.m.flush(now=peer.now)
    peer.pump()
    (sent,) = peer.produces()
    assert len(parts_of(sent, ids)[0].values) == 4
    peer.answer(sent, produce_response(sent, lambda p: (10, -1), ids))  # MESSAGE_TOO_LARGE
    seen: list[tuple[int, int]] = []
    offset = 0
    while not any(isinstance(e, FlushCompleted) for e in peer.events):
        if not peer.produces():
            peer.advance()
            continue
        (s,) = peer.produces()  # the pieces are retries: one at a time, in order
        (part,) = parts_of(s, ids)
        seen.append((part.base_sequence, len(part.values)))
        peer.answer(s, produce_response(s, ok({("t", 0): offset}), ids))
        offset += len(part.values)
    # the pieces take over the original's sequence range 0..3
    assert seen == [(0, 1), (1, 1), (2, 1), (3, 1)]
    acked = [rid for e in peer.outcomes() for rid in e.record_ids]
    assert acked == rids
    assert peer.m.idempotence is not None
    assert peer.m.idempotence.producer_epoch == 0  # no bump needed


def test_single_record_too_large_fails() -> None:
    peer = started()
    ids = peer.topic_ids()
    rid = peer.send(b"x" * 100)
    (sent,) = peer.produces()
    peer.answer(sent, produce_response(sent, lambda p: (10, -1), ids))
    (failed,) = peer.outcomes()
    assert isinstance(failed, RecordsFailed) and failed.record_ids == (rid,)
    assert isinstance(failed.error, MessageTooLargeError)
    assert "topic='t'" in str(failed.error)


def test_non_retriable_error_fails_with_the_typed_error() -> None:
    peer = started(enable_idempotence=False)
    ids = peer.topic_ids()
    rid = peer.send(b"x")
    (sent,) = peer.produces()
    peer.answer(sent, produce_response(sent, lambda p: (29, -1), ids))
    (failed,) = peer.outcomes()
    assert failed.record_ids == (rid,)
    assert isinstance(failed.error, TopicAuthorizationFailedError)
    assert failed.error.context == {"topic": "t", "partition": 0}


def test_producer_fenced_is_fatal_and_fails_everything() -> None:
    peer = started(linger=5.0)
    ids = peer.topic_ids()
    first = peer.send(b"a")
    peer.m.flush(now=peer.now)
    peer.pump()
    (sent,) = peer.produces()
    queued = peer.send(b"b")
    peer.answer(sent, produce_response(sent, lambda p: (90, -1), ids))
    failed = [e for e in peer.outcomes() if isinstance(e, RecordsFailed)]
    assert sorted(r for f in failed for r in f.record_ids) == [first, queued]
    assert any(isinstance(e, ProducerFailed) for e in peer.events)
    with pytest.raises(ProducerFencedError):
        peer.send(b"c")


# ------------------------------------------------------------------- without idempotence


def test_acks_zero_completes_at_once_with_offset_minus_one() -> None:
    peer = started(acks=0)
    ids = peer.topic_ids()
    rid = peer.send(b"a")
    assert peer.m.idempotence is None
    (sent,) = peer.produces()
    assert sent.req.body.acks == 0
    (part,) = parts_of(sent, ids)
    assert part.producer_id == -1
    (ack,) = peer.outcomes()
    assert ack.results() == [(rid, -1, TS)]


def test_max_in_flight_one_mutes_the_partition() -> None:
    peer = started(enable_idempotence=False, max_in_flight_requests_per_connection=1)
    ids = peer.topic_ids()
    peer.send(b"a")
    peer.send(b"b")
    (sent,) = peer.produces()
    assert parts_of(sent, ids)[0].values == [b"a"]
    peer.answer(sent, produce_response(sent, ok({("t", 0): 0}), ids))
    (second,) = peer.produces()
    assert parts_of(second, ids)[0].values == [b"b"]


# ---------------------------------------------------------------- timeouts and memory


def test_delivery_timeout_fails_in_flight_batch_and_ignores_the_late_answer() -> None:
    peer = started(delivery_timeout=40.0, request_timeout=30.0, enable_idempotence=False)
    ids = peer.topic_ids()
    peer.now = 10.0
    rid = peer.send(b"a")
    (sent,) = peer.produces()
    peer.answer(sent, produce_response(sent, lambda p: (7, -1), ids))  # REQUEST_TIMED_OUT
    peer.now = 29.0
    while not peer.produces():
        peer.advance()
    assert peer.now < 50.0
    (again,) = peer.produces()
    assert peer.m.get_timer() == pytest.approx(50.0)  # created + delivery timeout
    peer.advance()
    (failed,) = peer.outcomes()
    assert isinstance(failed, RecordsFailed) and failed.record_ids == (rid,)
    assert isinstance(failed.error, KafkaTimeoutError)
    assert "delivery.timeout.ms" in str(failed.error)
    if again in peer.pending:
        peer.answer(again, produce_response(again, ok({("t", 0): 0}), ids))
    assert len(peer.outcomes()) == 1


def test_unknown_topic_waits_for_metadata() -> None:
    peer = started()
    with pytest.raises(MetadataPendingError):
        peer.m.send("new", value=b"x", timestamp_ms=TS, now=peer.now)
    peer.topics["new"] = {0: (2, 0)}
    peer.advance()  # the refresh the send asked for
    rid = peer.send(b"x", topic="new")
    (sent,) = peer.produces()
    assert sent.node == 2
    assert rid is not None


def test_buffer_full_back_pressure() -> None:
    peer = started(linger=10.0, batch_size=300, buffer_memory=1000)
    with pytest.raises(BufferFullError):
        for _ in range(20):
            peer.send(bytes(100))


def test_close_drains_then_closes_connections() -> None:
    peer = started(linger=10.0)
    ids = peer.topic_ids()
    peer.send(b"a")
    peer.m.close(now=peer.now)
    peer.pump()
    (sent,) = peer.produces()
    assert not any(isinstance(e, ProducerClosed) for e in peer.events)
    peer.answer(sent, produce_response(sent, ok({("t", 0): 0}), ids))
    assert isinstance(peer.events[-1], ProducerClosed)
    assert peer.m.state is ProducerState.CLOSED
    assert peer.open == set()
    assert peer.m.get_timer() is None


def test_abort_fails_pending_records() -> None:
    peer = started(linger=10.0)
    rid = peer.send(b"a")
    peer.m.abort(now=peer.now)
    peer.pump()
    (failed,) = peer.outcomes()
    assert failed.record_ids == (rid,)
    assert isinstance(peer.events[-1], ProducerClosed)


def test_calls_on_a_closing_or_closed_producer_raise_producer_closed() -> None:
    # The one rule every face follows: ProducerClosedError (aiokafka's ProducerClosed, an
    # IllegalStateError as kafka-python raises), the call named; the closed check first.
    peer = started(linger=10.0)
    ids = peer.topic_ids()
    peer.send(b"a")
    peer.m.close(now=peer.now)
    assert peer.m.state is ProducerState.CLOSING
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("send", lambda: peer.send(b"b")),
        ("send_batch", lambda: peer.m.send_batch("t", 0, [(TS, None, b"c", ())], now=peer.now)),
        ("begin_transaction", peer.m.begin_transaction),  # (no transactional_id either)
        ("commit_transaction", lambda: peer.m.commit_transaction(now=peer.now)),
    ]
    for name, call in calls:
        with pytest.raises(ProducerClosedError, match=f"^{name}: the producer is closing$"):
            call()
    peer.pump()
    (sent,) = peer.produces()
    peer.answer(sent, produce_response(sent, ok({("t", 0): 0}), ids))
    assert peer.m.state is ProducerState.CLOSED
    for name, call in calls:
        with pytest.raises(IllegalStateError, match=f"^{name}: the producer is closed$"):
            call()
    with pytest.raises(ProducerClosedError, match=r"the producer is closed \(use it\)$"):
        peer.m.ensure_open("flush", advice=" (use it)")
