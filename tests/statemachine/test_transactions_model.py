"""A Hypothesis model of the transaction manager inside a ProducerMachine, against the
scripted two-broker cluster (tests/_support/peer.py) playing partition leaders and both
coordinators.

Hypothesis issues transactional commands in any state (legal or not), sends records,
answers the oldest unanswered request of a connection (success, a retriable code, an
abortable one), lets time pass so that requests time out and connections drop (answers
lost: outcomes unknown), and rarely fences the producer.

Promises checked:
- an illegal command raises a typed error (TransactionStateError, TransactionFailedError,
  or the fatal error) and changes no state;
- every operation gets at most one TransactionOperationCompleted, every record at most one
  outcome; once everything is answered and every timer has run (teardown), exactly one;
- no Produce carries a partition the coordinator has not added to the current
  transaction; every produced batch is transactional and carries the current epoch;
- EndTxn is sent only when no Produce of the producer is unanswered;
- KIP-890 defence: a coordinator request of a later transaction never carries the epoch of
  an earlier transaction's request whose outcome was lost;
- after ``handle_timer(now)`` nothing is due any more.
"""

from __future__ import annotations

import datetime
from typing import Any

from hypothesis import event as note_event
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from kio.schema.errors import ErrorCode

from kafkastate.core.producer import RecordsAcknowledged, RecordsFailed
from kafkastate.core.producer.transactions import (
    TransactionOperationCompleted,
    TransactionState,
)
from kafkastate.core.protocol.records import iter_batches
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, response_type
from kafkastate.errors import (
    KafkaError,
    ProducerFencedError,
    TransactionFailedError,
    TransactionStateError,
)
from tests._support.peer import Sent, response
from tests.core.producer.test_producer_machine import parts_of, produce_response
from tests.core.producer.test_transactions_machine import TS, TxnPeer, txn_peer

FIND, INIT, ADD_PARTS, ADD_OFFSETS, END, TXN_COMMIT = 10, 22, 24, 25, 26, 28
COORDINATOR_APIS = (ADD_PARTS, ADD_OFFSETS, TXN_COMMIT, END)
PID = 7000
S = TransactionState


def _find_response(sent: Sent, node: int) -> Any:
    cls = response_type(FIND, sent.req.version)
    coord = nested_type(cls, "Coordinator")
    host = {1: "b1", 2: "b2"}[node]
    return build(
        cls,
        throttle_time=_zero(),
        coordinators=(
            build(
                coord,
                key=sent.req.body.coordinator_keys[0],
                node_id=node,
                host=host,
                port=9092,
                error_code=ErrorCode.none,
                error_message=None,
            ),
        ),
    )


def _zero() -> datetime.timedelta:
    return datetime.timedelta(0)


class TransactionModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.peer: TxnPeer = txn_peer(request_timeout=5.0, delivery_timeout=40.0)
        self.epoch = -1  # the coordinator's current epoch for our producer
        self.fenced = False
        self.added: set[tuple[str, int]] = set()  # coordinator: partitions in the txn
        self.txn_no = 0  # transactions begun so far
        self.lost: list[tuple[int, int]] = []  # (txn_no, epoch) of requests whose answer was lost
        self.sent_txn: dict[int, int] = {}  # id(Sent) -> txn_no when first seen
        self.ops: dict[int, int] = {}  # operation id -> completions
        self.outcomes: dict[int, int] = {}  # record id -> outcomes
        self.rids: set[int] = set()
        self.seen_events = 0
        self.seen: set[int] = set()  # ids of Sent already checked
        self._epochs: dict[int, int] = {}  # id(Sent) -> epoch of a coordinator request
        op = self.peer.m.init_transactions(now=self.peer.now)
        self.ops[op] = 0
        self.peer.pump()
        self._check_new_requests()
        # start READY: FindCoordinator and InitProducerId answered
        self._answer(self.peer.take(FIND), _find_response(self.peer.take(FIND), 1))
        self.epoch = 0
        init = self.peer.take(INIT)
        self._answer(
            init,
            response(
                INIT,
                init.req.version,
                throttle_time=_zero(),
                error_code=ErrorCode.none,
                producer_id=PID,
                producer_epoch=0,
            ),
        )

    # -------------------------------------------------------------- plumbing

    @property
    def m(self) -> Any:
        return self.peer.m

    @property
    def state(self) -> TransactionState:
        return self.peer.txn_state

    def _check_new_requests(self) -> None:
        """Check every request the machine wrote since the last look."""
        pending_ids = {id(s) for s in self.peer.pending}
        # requests that vanished unanswered (their connection dropped): outcome lost
        for sid, txn in list(self.sent_txn.items()):
            if sid not in pending_ids:
                epoch = self._epochs.pop(sid, None)
                if epoch is not None:
                    self.lost.append((txn, epoch))
                del self.sent_txn[sid]
        for sent in self.peer.pending:
            if id(sent) in self.seen or sent.auto is not None:
                continue
            self.seen.add(id(sent))
            key = sent.req.api_key
            if key == ApiKey.PRODUCE:
                for part in parts_of(sent, self.peer.topic_ids()):
                    assert (part.topic, part.partition) in self.added, (
                        f"Produce to {part.topic}-{part.partition} before AddPartitionsToTxn"
                    )
                    assert part.epoch == self.epoch and part.producer_id == PID
                for t in sent.req.body.topic_data:
                    for p in t.partition_data:
                        (batch,) = iter_batches(bytes(p.records))
                        assert batch.is_transactional
            if key == END:
                assert not any(s.req.api_key == ApiKey.PRODUCE for s in self.peer.pending), (
                    "EndTxn while a Produce is unanswered"
                )
            if key in COORDINATOR_APIS:
                epoch = self._epoch_of(sent)
                for txn, lost_epoch in self.lost:
                    if txn < self.txn_no:
                        assert epoch > lost_epoch, (
                            f"transaction {self.txn_no} reuses epoch {epoch} of a lost "
                            f"request of transaction {txn} (KIP-890)"
                        )
                self.sent_txn[id(sent)] = self.txn_no
                self._epochs[id(sent)] = epoch

    def _epoch_of(self, sent: Sent) -> int:
        body = sent.req.body
        value = getattr(body, "producer_epoch", None)
        if value is None:
            value = body.v3_and_below_producer_epoch
        return int(value)

    def _after(self) -> None:
        self.peer.pump()
        self._check_new_requests()
        for event in self.peer.events[self.seen_events :]:
            if isinstance(event, TransactionOperationCompleted):
                assert event.operation_id in self.ops, event
                self.ops[event.operation_id] += 1
            elif isinstance(event, RecordsAcknowledged | RecordsFailed):
                for rid in event.record_ids:
                    self.outcomes[rid] = self.outcomes.get(rid, 0) + 1
        self.seen_events = len(self.peer.events)

    def _command(self, fn: Any, *, op: bool = False) -> Any:
        before = self.state
        try:
            result = fn()
        except (TransactionStateError, TransactionFailedError, ProducerFencedError):
            assert self.state is before  # refused: nothing changed
            self._after()
            return None
        except KafkaError as exc:
            assert self.fenced or self.state is S.FATAL_ERROR, exc
            self._after()
            return None
        if op:
            self.ops[result] = 0  # before its completion event is looked at
        self._after()
        return result

    def _answer(self, sent: Sent, body: Any) -> None:
        if sent.req.api_key in COORDINATOR_APIS:
            self.sent_txn.pop(id(sent), None)
            self._epochs.pop(id(sent), None)
        self.peer.answer(sent, body)
        self._after()

    def _heads(self) -> list[Sent]:
        heads: dict[int, Sent] = {}
        for sent in self.peer.pending:
            if sent.auto is None and sent.node not in heads:
                heads[sent.node] = sent
        return list(heads.values())

    # ---------------------------------------------------------------- commands

    @rule()
    def begin(self) -> None:
        before = self.state
        self._command(self.m.begin_transaction)
        if before is not S.IN_TRANSACTION and self.state is S.IN_TRANSACTION:
            self.txn_no += 1

    @rule(partition=st.sampled_from([0, 1]))
    def send(self, partition: int) -> None:
        peer = self.peer

        def go() -> int:
            return int(
                self.m.send("t", value=b"v", partition=partition, timestamp_ms=TS, now=peer.now)
            )

        rid = self._command(go)
        if rid is not None:
            self.rids.add(rid)

    @rule()
    def commit(self) -> None:
        self._command(lambda: self.m.commit_transaction(now=self.peer.now), op=True)

    @rule()
    def abort(self) -> None:
        self._command(lambda: self.m.abort_transaction(now=self.peer.now), op=True)

    @rule(offset=st.integers(0, 100))
    def offsets(self, offset: int) -> None:
        self._command(
            lambda: self.m.send_offsets_to_transaction({("in", 0): offset}, "g", now=self.peer.now),
            op=True,
        )

    # ----------------------------------------------------------------- answers

    @precondition(lambda self: bool(self._heads()))
    @rule(data=st.data(), kind=st.sampled_from(["ok", "ok", "ok", "retry", "abortable"]))
    def answer(self, data: st.DataObject, kind: str) -> None:
        sent = data.draw(st.sampled_from(self._heads()))
        self._respond(sent, kind, data.draw(st.sampled_from([1, 2])))

    def _respond(self, sent: Sent, kind: str, node: int) -> None:
        key = sent.req.api_key
        version = sent.req.version
        zero = _zero()
        if key == FIND:
            self._answer(sent, _find_response(sent, node))
        elif key == INIT:
            if kind == "retry":
                code, pid, epoch = ErrorCode.concurrent_transactions, -1, -1
            else:
                self.epoch += 1  # and an open transaction is aborted
                self.added.clear()
                code, pid, epoch = ErrorCode.none, PID, self.epoch
            self._answer(
                sent,
                response(
                    INIT,
                    version,
                    throttle_time=zero,
                    error_code=code,
                    producer_id=pid,
                    producer_epoch=epoch,
                ),
            )
        elif key == ADD_PARTS:
            code = {
                "ok": ErrorCode.none,
                "retry": ErrorCode.concurrent_transactions,
                "abortable": ErrorCode.topic_authorization_failed,
            }[kind]
            cls = response_type(ADD_PARTS, version)
            topic_cls = nested_type(cls, "AddPartitionsToTxnTopicResult")
            part_cls = nested_type(cls, "AddPartitionsToTxnPartitionResult")
            body = sent.req.body
            if code == ErrorCode.none:
                for t in body.v3_and_below_topics:
                    self.added.update((t.name, p) for p in t.partitions)
            topics = tuple(
                build(
                    topic_cls,
                    name=t.name,
                    results_by_partition=tuple(
                        build(part_cls, partition_index=p, partition_error_code=code)
                        for p in t.partitions
                    ),
                )
                for t in body.v3_and_below_topics
            )
            self._answer(sent, build(cls, throttle_time=zero, results_by_topic_v3_and_below=topics))
        elif key in (ADD_OFFSETS, END):
            code = ErrorCode.none if kind != "retry" else ErrorCode.concurrent_transactions
            if key == END and code == ErrorCode.none:
                self.added.clear()
            self._answer(sent, response(key, version, throttle_time=zero, error_code=code))
        elif key == TXN_COMMIT:
            code = {
                "ok": ErrorCode.none,
                "retry": ErrorCode.coordinator_load_in_progress,
                "abortable": ErrorCode.illegal_generation,
            }[kind]
            cls = response_type(TXN_COMMIT, version)
            topic_cls = nested_type(cls, "TxnOffsetCommitResponseTopic")
            part_cls = nested_type(cls, "TxnOffsetCommitResponsePartition")
            topics = tuple(
                build(
                    topic_cls,
                    name=t.name,
                    partitions=tuple(
                        build(part_cls, partition_index=p.partition_index, error_code=code)
                        for p in t.partitions
                    ),
                )
                for t in sent.req.body.topics
            )
            self._answer(sent, build(cls, throttle_time=zero, topics=topics))
        elif key == ApiKey.PRODUCE:
            code = {
                "ok": 0,
                "retry": ErrorCode.not_leader_or_follower,
                "abortable": ErrorCode.topic_authorization_failed,
            }[kind]
            self._answer(
                sent,
                produce_response(
                    sent, lambda _p: (int(code), 0 if not code else -1), self.peer.topic_ids()
                ),
            )

    @precondition(lambda self: bool(self._heads()))
    @rule(data=st.data(), dice=st.integers(0, 9))
    def fence(self, data: st.DataObject, dice: int) -> None:
        sent = data.draw(st.sampled_from(self._heads()))
        if dice or sent.req.api_key not in (INIT, END, ADD_PARTS):
            return  # rare: it ends the interesting part
        self.fenced = True
        if sent.req.api_key == ADD_PARTS:
            cls = response_type(ADD_PARTS, sent.req.version)
            topic_cls = nested_type(cls, "AddPartitionsToTxnTopicResult")
            part_cls = nested_type(cls, "AddPartitionsToTxnPartitionResult")
            topics = tuple(
                build(
                    topic_cls,
                    name=t.name,
                    results_by_partition=tuple(
                        build(
                            part_cls,
                            partition_index=p,
                            partition_error_code=ErrorCode.producer_fenced,
                        )
                        for p in t.partitions
                    ),
                )
                for t in sent.req.body.v3_and_below_topics
            )
            self._answer(
                sent, build(cls, throttle_time=_zero(), results_by_topic_v3_and_below=topics)
            )
            return
        fields: dict[str, Any] = {"throttle_time": _zero(), "error_code": ErrorCode.producer_fenced}
        if sent.req.api_key == INIT:
            fields.update(producer_id=-1, producer_epoch=-1)
        self._answer(sent, response(sent.req.api_key, sent.req.version, **fields))

    @rule(seconds=st.sampled_from([0.1, 1.0, 6.0]))
    def time_passes(self, seconds: float) -> None:
        peer = self.peer
        timer = self.m.get_timer()
        target = peer.now + seconds
        if timer is not None and timer < target:
            target = timer
        peer.advance(max(target, peer.now))
        self._after()

    # --------------------------------------------------------------- invariants

    def teardown(self) -> None:
        # settle: answer everything, let every timer run; then every operation and record
        # must have its outcome
        for _ in range(300):
            heads = self._heads()
            if heads:
                self._respond(heads[0], "ok", 1)
            elif self.m.get_timer() is not None and self.peer.pending == []:
                self.peer.advance()
                self._after()
            else:
                break
        if not self.peer.pending:
            assert all(n == 1 for n in self.ops.values()), self.ops
            assert all(self.outcomes.get(rid) == 1 for rid in self.rids), self.outcomes
        txn = self.m.transactions
        for source, target in set(txn.transitions):
            note_event(f"{source.name} -> {target.name}")
        if self.lost:
            note_event("a coordinator request's answer was lost")

    @invariant()
    def at_most_one_completion(self) -> None:
        assert all(n <= 1 for n in self.ops.values()), self.ops
        assert all(n <= 1 for n in self.outcomes.values()), self.outcomes

    @invariant()
    def fatal_only_when_fenced(self) -> None:
        if self.state is S.FATAL_ERROR:
            assert self.fenced


TestTransactionModel = TransactionModel.TestCase
TestTransactionModel.settings = settings(max_examples=100, stateful_step_count=60, deadline=None)
