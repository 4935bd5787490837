"""A Hypothesis model of the record accumulator and a sender that keeps one batch in flight
per partition.

Random appends (some too large, some refused for buffer memory), time steps, leader loss,
drains, acknowledgements, failures, retries, splits, expiry and flushes. Promises checked:

- acknowledged records of each partition come in append order;
- every record id gets exactly one outcome, and after the final drain every one has one;
- buffer memory is never negative, equals what the live batches hold, and is 0 once every
  outcome is out;
- no batch, and no drained request (unless it is a single batch), exceeds max.request.size;
- a node that ``ready`` names yields at least one batch when drained, and after stepping to
  ``next_ready_at`` that deadline is no longer pending;
- a flush completes exactly when every record appended before it has its outcome.
"""

from __future__ import annotations

import random

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafkastate.core.metadata import ClusterMetadata, NodeId, PartitionMetadata, TopicMetadata
from kafkastate.core.producer import (
    Accumulator,
    AccumulatorConfig,
    BatchState,
    BufferFullError,
    BufferSpaceFreed,
    FlushCompleted,
    FlushId,
    ProducerBatch,
    RecordId,
    RecordsAcknowledged,
    RecordsFailed,
)
from kafkastate.core.protocol.records import (
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
    estimate_record_size_upper_bound,
    iter_batches,
)
from kafkastate.errors import KafkaTimeoutError, MessageTooLargeError, NotEnoughReplicasError

TP = tuple[str, int]
PARTS: list[TP] = [("t", 0), ("t", 1), ("u", 0)]
LEADERS: dict[TP, int] = {("t", 0): 1, ("t", 1): 2, ("u", 0): 1}
CONFIG = AccumulatorConfig(
    batch_size=300,
    linger=0.05,
    buffer_memory=1500,
    max_request_size=700,
    delivery_timeout=3.0,
    request_timeout=1.0,
    retry_backoff=0.1,
    retry_backoff_max=0.4,
)


def make_cluster(leaderless: bool) -> ClusterMetadata:
    topics: dict[str, dict[int, PartitionMetadata]] = {}
    for (topic, p), leader in LEADERS.items():
        lost = leaderless and (topic, p) == ("u", 0)
        topics.setdefault(topic, {})[p] = PartitionMetadata(
            partition=p,
            leader=None if lost else NodeId(leader),
            leader_epoch=0,
            replicas=(),
            isr=(),
        )
    return ClusterMetadata(
        topics={t: TopicMetadata(name=t, topic_id=None, partitions=ps) for t, ps in topics.items()}
    )


class AccumulatorModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.acc = Accumulator(CONFIG, rng=random.Random(0))
        self.now = 0.0
        self.leaderless = False
        self.appended: dict[TP, list[RecordId]] = {tp: [] for tp in PARTS}
        self.partition_of: dict[RecordId, TP] = {}
        self.outcomes: dict[RecordId, str] = {}
        self.acked: dict[TP, list[RecordId]] = {tp: [] for tp in PARTS}
        self.in_flight: list[ProducerBatch] = []
        self.flushes: dict[FlushId, set[RecordId]] = {}
        self.next_offset: dict[TP, int] = dict.fromkeys(PARTS, 0)

    # ------------------------------------------------------------------ helpers

    @property
    def cluster(self) -> ClusterMetadata:
        return make_cluster(self.leaderless)

    def muted(self) -> set[TP]:
        return {(b.topic, b.partition) for b in self.in_flight}

    def live_batches(self) -> list[ProducerBatch]:
        queued = [b for tp in PARTS for b in self.acc.queued_batches(*tp)]
        return queued + self.acc.in_flight_batches()

    def process_events(self) -> list[object]:
        seen: list[object] = []
        while (event := self.acc.next_event()) is not None:
            seen.append(event)
            match event:
                case RecordsAcknowledged():
                    tp = (event.topic, event.partition)
                    for rid in event.record_ids:
                        assert rid not in self.outcomes, f"second outcome for {rid}"
                        assert self.partition_of[rid] == tp
                        self.outcomes[rid] = "acked"
                        if self.acked[tp]:
                            assert rid > self.acked[tp][-1], "acknowledged out of append order"
                        self.acked[tp].append(rid)
                case RecordsFailed():
                    for rid in event.record_ids:
                        assert rid not in self.outcomes, f"second outcome for {rid}"
                        self.outcomes[rid] = "failed"
                case FlushCompleted():
                    waited = self.flushes.pop(event.flush_id)
                    assert all(rid in self.outcomes for rid in waited)
                case BufferSpaceFreed():
                    assert event.available == self.acc.buffer_available
        for fid, waited in self.flushes.items():
            assert not all(rid in self.outcomes for rid in waited), f"flush {fid} is late"
        return seen

    def pick(self, i: int) -> ProducerBatch:
        return self.in_flight.pop(i % len(self.in_flight))

    # -------------------------------------------------------------------- rules

    def try_append(self, tp: TP, size: int, keyed: bool) -> None:
        key = b"k" if keyed else None
        value = bytes(size)
        used = self.acc.buffer_used
        outstanding = self.acc.outstanding_records
        try:
            rid = self.acc.append(
                tp[0], tp[1], timestamp_ms=1000 + size, key=key, value=value, now=self.now
            )
        except MessageTooLargeError:
            alone = RECORD_BATCH_OVERHEAD + estimate_record_size_upper_bound(key, value)
            assert alone > CONFIG.max_request_size
            assert self.acc.outstanding_records == outstanding
        except BufferFullError as exc:
            assert used + exc.needed > CONFIG.buffer_memory
            assert exc.available == CONFIG.buffer_memory - used
            assert self.acc.outstanding_records == outstanding
            assert self.acc.buffer_used == used
        else:
            self.appended[tp].append(rid)
            self.partition_of[rid] = tp
        self.process_events()

    @rule(tp=st.sampled_from(PARTS), size=st.integers(0, 250), keyed=st.booleans())
    def append(self, tp: TP, size: int, keyed: bool) -> None:
        self.try_append(tp, size, keyed)

    @rule(tp=st.sampled_from(PARTS), sizes=st.lists(st.integers(0, 120), min_size=2, max_size=8))
    def append_burst(self, tp: TP, sizes: list[int]) -> None:
        for size in sizes:
            self.try_append(tp, size, False)

    @rule(tp=st.sampled_from(PARTS))
    def append_too_large(self, tp: TP) -> None:
        self.try_append(tp, 800, True)

    @rule(dt=st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.3, 1.0, 3.0]))
    def tick(self, dt: float) -> None:
        self.now += dt

    @rule()
    def step_to_next_deadline(self) -> None:
        r = self.acc.ready(self.cluster, now=self.now, muted=self.muted())
        if r.next_ready_at is None:
            return
        assert r.next_ready_at > self.now
        self.now = r.next_ready_at
        after = self.acc.ready(self.cluster, now=self.now, muted=self.muted())
        assert after.next_ready_at is None or after.next_ready_at > self.now
        assert after.nodes, "a deadline passed but nothing became sendable"

    @rule()
    def toggle_leader(self) -> None:
        self.leaderless = not self.leaderless

    @rule(node=st.sampled_from([1, 2]))
    def drain(self, node: int) -> None:
        muted = self.muted()
        ready = self.acc.ready(self.cluster, now=self.now, muted=muted)
        batches = self.acc.drain(self.cluster, NodeId(node), now=self.now, muted=muted)
        if NodeId(node) in ready.nodes:
            assert batches, "ready node drained nothing"
        seen: set[TP] = set()
        total = 0
        for b in batches:
            tp = (b.topic, b.partition)
            assert tp not in muted
            assert tp not in seen
            seen.add(tp)
            assert LEADERS[tp] == node and self.cluster.leader_for(*tp) == node
            assert b.state is BatchState.IN_FLIGHT
            data = b.build()
            assert len(data) <= CONFIG.max_request_size
            (decoded,) = list(iter_batches(data))
            assert isinstance(decoded, RecordBatch)
            assert decoded.record_count == b.record_count
            total += b.size_in_bytes
        assert len(batches) <= 1 or total <= CONFIG.max_request_size
        self.in_flight.extend(batches)

    @precondition(lambda self: self.in_flight)
    @rule(i=st.integers(0, 10))
    def complete(self, i: int) -> None:
        b = self.pick(i)
        tp = (b.topic, b.partition)
        self.acc.complete(b, base_offset=self.next_offset[tp], now=self.now)
        self.next_offset[tp] += b.record_count
        self.process_events()

    @precondition(lambda self: self.in_flight)
    @rule(i=st.integers(0, 10))
    def fail(self, i: int) -> None:
        self.acc.fail(self.pick(i), NotEnoughReplicasError("model"), now=self.now)
        self.process_events()

    @precondition(lambda self: self.in_flight)
    @rule(i=st.integers(0, 10))
    def retry(self, i: int) -> None:
        b = self.pick(i)
        self.acc.reenqueue(b, now=self.now)
        assert b.retry_at is not None
        assert self.now < b.retry_at <= self.now + CONFIG.retry_backoff_max

    @precondition(lambda self: any(b.record_count > 1 for b in self.in_flight))
    @rule(i=st.integers(0, 10))
    def split(self, i: int) -> None:
        candidates = [b for b in self.in_flight if b.record_count > 1]
        b = candidates[i % len(candidates)]
        self.in_flight.remove(b)
        pieces = self.acc.split(b, now=self.now)
        assert [rid for p in pieces for rid in p.record_ids] == list(b.record_ids)
        assert all(p.size_in_bytes <= max(b.size_in_bytes // 2, p.size_in_bytes) for p in pieces)
        assert all(p.record_count == 1 or p.size_in_bytes <= b.size_in_bytes // 2 for p in pieces)

    @rule()
    def expire(self) -> None:
        expected = []
        for tp in PARTS:
            for b in self.acc.queued_batches(*tp):
                if b.created + CONFIG.delivery_timeout > self.now:
                    break
                expected.append(b)
        expired = self.acc.expire(self.now)
        assert sorted(map(id, expired)) == sorted(map(id, expected))
        failures = [e for e in self.process_events() if isinstance(e, RecordsFailed)]
        assert len(failures) == len(expired)
        assert all(isinstance(e.error, KafkaTimeoutError) for e in failures)

    @rule()
    def flush(self) -> None:
        waiting = {rid for ids in self.appended.values() for rid in ids if rid not in self.outcomes}
        fid = self.acc.flush()
        if waiting:
            self.flushes[fid] = waiting
        else:
            assert self.acc.next_event() == FlushCompleted(flush_id=fid)
        self.process_events()

    # --------------------------------------------------------------- invariants

    @invariant()
    def memory_is_accounted(self) -> None:
        used = self.acc.buffer_used
        assert used >= 0
        assert used == sum(b.reserved_bytes for b in self.live_batches())
        appended = sum(len(ids) for ids in self.appended.values())
        assert self.acc.outstanding_records == appended - len(self.outcomes)
        if self.acc.outstanding_records == 0:
            assert used == 0

    @invariant()
    def batches_are_bounded_and_ordered(self) -> None:
        for tp in PARTS:
            queued = self.acc.queued_batches(*tp)
            firsts = [b.record_ids[0] for b in queued]
            assert firsts == sorted(firsts)
            assert all(b.state is BatchState.QUEUED for b in queued)
            assert all(b.size_in_bytes <= CONFIG.max_request_size for b in queued)
            assert all(b.is_open is False for b in queued[:-1])
        assert {id(b) for b in self.acc.in_flight_batches()} == {id(b) for b in self.in_flight}

    def teardown(self) -> None:
        """Deliver everything; then every record has its outcome and memory is free."""
        self.leaderless = False
        self.flush()
        for _ in range(500):
            for b in list(self.in_flight):
                self.in_flight.remove(b)
                tp = (b.topic, b.partition)
                self.acc.complete(b, base_offset=self.next_offset[tp], now=self.now)
                self.next_offset[tp] += b.record_count
                self.process_events()
            if not self.acc.has_undrained():
                break
            self.now += 0.5  # past any backoff or linger
            for node in (1, 2):
                self.drain(node)
        assert not self.acc.has_incomplete()
        assert self.acc.buffer_used == 0
        assert not self.flushes
        for ids in self.appended.values():
            assert all(rid in self.outcomes for rid in ids)


TestAccumulatorModel = AccumulatorModel.TestCase
TestAccumulatorModel.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
