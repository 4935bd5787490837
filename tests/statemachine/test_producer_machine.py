"""A Hypothesis model of the ProducerMachine against a scripted two-broker cluster whose
brokers enforce idempotent sequences.

The broker model, per partition: it accepts a batch whose base sequence is the expected
one (appending its records), answers DUPLICATE_SEQUENCE_NUMBER for a re-sent copy of one of
the last five written batches (Kafka's ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``, the
most a producer has in flight), OUT_OF_ORDER_SEQUENCE_NUMBER otherwise; a new producer
id/epoch starts at sequence 0. The test also answers with retriable errors, or drops connections.

Promises checked after every step:
- every record id gets exactly one outcome;
- per partition, acknowledged offsets strictly increase in append order;
- the broker's log of every partition holds each acknowledged record exactly once and in
  append order (no duplicates through retries);
- after ``handle_timer(now)`` nothing is due any more (a past deadline makes drivers spin).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kafkastate.core.metadata import NodeId
from kafkastate.core.producer import RecordsAcknowledged, RecordsFailed
from kafkastate.core.protocol.versions import ApiKey
from kafkastate.errors import KafkaTimeoutError
from tests.core.producer.test_producer_machine import (
    PartBatch,
    PeerCluster,
    machine,
    parts_of,
    produce_response,
)


class _Log:
    def __init__(self) -> None:
        self.records: list[bytes | None] = []
        self.producer: tuple[int, int] = (-1, -1)
        self.next_seq = 0
        # (base sequence, base offset) of the last five batches, as a broker keeps them
        self.last: deque[tuple[int, int]] = deque(maxlen=5)


class ProducerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # jump_to_timer passes metadata refreshes at will: the topic must not go idle
        # (metadata_max_idle has its own tests, tests/core/producer/test_producer_idle_topics)
        self.peer = PeerCluster(
            machine(linger=0.01, delivery_timeout=60.0, request_timeout=5.0, metadata_max_idle=1e9)
        )
        self.peer.start()
        self.ids = self.peer.topic_ids()
        self.logs: dict[int, _Log] = {0: _Log(), 1: _Log()}
        self.appended: dict[int, list[int]] = {0: [], 1: []}  # partition -> record ids
        self.value_of: dict[int, bytes] = {}
        self.outcomes: dict[int, Any] = {}
        self.seen = 0
        self.next_pid = 2000

    # -------------------------------------------------------------- plumbing

    def _collect(self) -> None:
        for ev in self.peer.events[self.seen :]:
            if isinstance(ev, RecordsAcknowledged | RecordsFailed):
                for rid in ev.record_ids:
                    assert rid not in self.outcomes, f"record {rid} got two outcomes"
                    self.outcomes[rid] = ev
        self.seen = len(self.peer.events)

    def _broker(self, part: PartBatch) -> tuple[int, int]:
        log = self.logs[part.partition]
        if (part.producer_id, part.epoch) != log.producer:
            if part.base_sequence != 0:
                return 45, -1
            log.producer = (part.producer_id, part.epoch)
            log.next_seq = 0
            log.last.clear()
        for base_sequence, base_offset in log.last:
            if part.base_sequence == base_sequence:
                return 46, base_offset  # DUPLICATE_SEQUENCE_NUMBER
        if part.base_sequence != log.next_seq:
            return 45, -1  # OUT_OF_ORDER_SEQUENCE_NUMBER
        offset = len(log.records)
        log.records.extend(part.values)
        log.last.append((part.base_sequence, offset))
        log.next_seq += len(part.values)
        return 0, offset

    # ----------------------------------------------------------------- rules

    @rule(partition=st.sampled_from([0, 1]), n=st.integers(1, 3))
    def send(self, partition: int, n: int) -> None:
        for _ in range(n):
            value = f"r{len(self.value_of)}".encode()
            rid = self.peer.send(value, partition=partition)
            self.value_of[rid] = value
            self.appended[partition].append(rid)
        self._collect()

    @rule(data=st.data())
    @precondition(lambda self: bool(self.peer.pending))
    def broker_answers(self, data: st.DataObject) -> None:
        nodes = sorted({s.node for s in self.peer.pending})
        node = data.draw(st.sampled_from(nodes))
        sent = next(s for s in self.peer.pending if s.node == node)  # in order per connection
        if sent.req.api_key == ApiKey.INIT_PRODUCER_ID:
            self.next_pid += 1
            self.peer.answer_init(sent, pid=self.next_pid, epoch=0)
        else:
            how = data.draw(st.sampled_from(["ok", "ok", "ok", "retriable", "lost_write"]))
            if how == "ok":
                body = produce_response(sent, self._broker, self.ids)
            elif how == "retriable":
                body = produce_response(sent, lambda p: (6, -1), self.ids)
            else:  # written, but the answer says NOT_LEADER: the retry must deduplicate
                for part in parts_of(sent, self.ids):
                    self._broker(part)
                body = produce_response(sent, lambda p: (6, -1), self.ids)
            self.peer.answer(sent, body)
        self._collect()

    @rule(data=st.data())
    @precondition(lambda self: bool(self.peer.open - {-1}))
    def connection_drops(self, data: st.DataObject) -> None:
        node = data.draw(st.sampled_from(sorted(self.peer.open)))
        self.peer.open.discard(node)
        self.peer.pending = [s for s in self.peer.pending if s.node != node]
        self.peer.m.connection_lost(NodeId(node), now=self.peer.now, error=OSError("reset"))
        self.peer.pump()
        self._collect()

    @rule(dt=st.floats(0, 3))
    def time_passes(self, dt: float) -> None:
        self.peer.advance(self.peer.now + dt)
        self._collect()

    @rule()
    def jump_to_timer(self) -> None:
        if self.peer.m.get_timer() is not None:
            self.peer.advance()
        self._collect()

    # ------------------------------------------------------------ invariants

    @invariant()
    def offsets_increase_in_append_order(self) -> None:
        for partition, rids in self.appended.items():
            offsets = []
            for rid in rids:
                ev = self.outcomes.get(rid)
                if isinstance(ev, RecordsAcknowledged):
                    offsets.extend(o for r, o, _ in ev.results() if r == rid)
            assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), (
                partition,
                offsets,
            )

    @invariant()
    def logs_hold_acknowledged_records_once_in_order(self) -> None:
        for partition, log in self.logs.items():
            assert len(set(log.records)) == len(log.records), f"duplicate in {partition}"
            acked = [
                self.value_of[rid]
                for rid in self.appended[partition]
                if isinstance(self.outcomes.get(rid), RecordsAcknowledged)
            ]
            positions = [log.records.index(v) for v in acked]
            assert positions == sorted(positions)

    def teardown(self) -> None:
        # Let everything finish: every record gets exactly one outcome.
        for _ in range(400):
            if len(self.outcomes) == len(self.value_of):
                break
            if self.peer.pending:
                sent = self.peer.pending[0]
                if sent.req.api_key == ApiKey.INIT_PRODUCER_ID:
                    self.next_pid += 1
                    self.peer.answer_init(sent, pid=self.next_pid, epoch=0)
                else:
                    self.peer.answer(sent, produce_response(sent, self._broker, self.ids))
            elif self.peer.m.get_timer() is not None:
                self.peer.advance()
            self._collect()
        assert set(self.outcomes) == set(self.value_of)
        # A record the broker holds may only be reported failed when its fate was unknown
        # to the producer (delivery timeout); any other failure of a written record is a
        # lie to the application.
        written = {v for log in self.logs.values() for v in log.records}
        for rid, outcome in self.outcomes.items():
            if isinstance(outcome, RecordsFailed) and self.value_of[rid] in written:
                assert isinstance(outcome.error, KafkaTimeoutError), (rid, outcome.error)


TestProducerModel = ProducerModel.TestCase
TestProducerModel.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
