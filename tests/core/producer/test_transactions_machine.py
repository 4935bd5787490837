"""The transaction manager inside a ProducerMachine, driven by hand against the scripted
peer cluster (tests/_support/peer.py): no sockets, time stepped explicitly. The tests answer
FindCoordinator, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit,
EndTxn and Produce themselves."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from kafkastate.core.producer import RecordsAcknowledged, RecordsFailed
from kafkastate.core.producer.producer import ProducerFailed, ProducerMachine, ProducerState
from kafkastate.core.producer.transactions import (
    TRANSITIONS,
    TransactionOperationCompleted,
    TransactionState,
    group_metadata,
)
from kafkastate.core.protocol.records import iter_batches
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiKey, response_type
from kafkastate.errors import (
    IllegalOperation,
    IllegalStateError,
    LocalProtocolError,
    ProducerFenced,
    ProducerFencedError,
    TopicAuthorizationFailedError,
    TransactionAbortedError,
    TransactionFailedError,
    TransactionStateError,
    TransactionTimedOutError,
    UnsupportedVersionError,
)
from kafkastate.structs import ConsumerGroupMetadata
from tests._support.peer import Sent, response
from tests.core.producer.test_producer_machine import (
    PeerCluster,
    machine,
    ok,
    parts_of,
    produce_response,
)

S = TransactionState
TID = "txn-1"
PID = 4000
TS = 1_700_000_000_000
FIND, INIT, ADD_PARTS, ADD_OFFSETS, END, TXN_COMMIT = 10, 22, 24, 25, 26, 28
_T0 = datetime.timedelta(0)


class TxnPeer(PeerCluster):
    """The scripted cluster, with answers for the transaction coordinator's APIs."""

    def start(self) -> None:
        self.m.track_topics(sorted(self.topics))
        self.advance(0.0)

    def answer_find(self, *, node: int = 1, code: int = 0) -> Sent:
        sent = self.take(FIND)
        cls = response_type(FIND, sent.req.version)
        coord = nested_type(cls, "Coordinator")
        key = sent.req.body.coordinator_keys[0]
        host, port = {1: ("b1", 9092), 2: ("b2", 9092)}[node]
        self.answer(
            sent,
            build(
                cls,
                throttle_time=_T0,
                coordinators=(
                    build(
                        coord,
                        key=key,
                        node_id=node,
                        host=host,
                        port=port,
                        error_code=ErrorCode(code),
                        error_message=None,
                    ),
                ),
            ),
        )
        return sent

    def answer_code(self, api_key: int, code: int = 0, **fields: Any) -> Sent:
        sent = self.take(api_key)
        self.answer(
            sent,
            response(
                api_key,
                sent.req.version,
                throttle_time=_T0,
                error_code=ErrorCode(code),
                **fields,
            ),
        )
        return sent

    def answer_init_txn(self, *, pid: int = PID, epoch: int = 0, code: int = 0) -> Sent:
        return self.answer_code(INIT, code, producer_id=pid, producer_epoch=epoch)

    def answer_add(self, codes: dict[tuple[str, int], int] | None = None) -> Sent:
        sent = self.take(ADD_PARTS)
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
                        partition_error_code=ErrorCode((codes or {}).get((t.name, p), 0)),
                    )
                    for p in t.partitions
                ),
            )
            for t in sent.req.body.v3_and_below_topics
        )
        self.answer(sent, build(cls, throttle_time=_T0, results_by_topic_v3_and_below=topics))
        return sent

    def answer_txn_commit(self, code: int = 0) -> Sent:
        sent = self.take(TXN_COMMIT)
        cls = response_type(TXN_COMMIT, sent.req.version)
        topic_cls = nested_type(cls, "TxnOffsetCommitResponseTopic")
        part_cls = nested_type(cls, "TxnOffsetCommitResponsePartition")
        topics = tuple(
            build(
                topic_cls,
                name=t.name,
                partitions=tuple(
                    build(part_cls, partition_index=p.partition_index, error_code=ErrorCode(code))
                    for p in t.partitions
                ),
            )
            for t in sent.req.body.topics
        )
        self.answer(sent, build(cls, throttle_time=_T0, topics=topics))
        return sent

    def answer_produce(self, code: int = 0) -> Sent:
        sent = self.take(ApiKey.PRODUCE)
        offsets = {("t", 0): 10, ("t", 1): 20, ("u", 0): 30}
        if code:
            self.answer(sent, produce_response(sent, lambda _p: (code, -1), self.topic_ids()))
        else:
            self.answer(sent, produce_response(sent, ok(offsets), self.topic_ids()))
        return sent

    def send(self, value: bytes, *, topic: str = "t", **kw: Any) -> Any:
        kw.setdefault("partition", 0)
        rid = self.m.send(topic, value=value, timestamp_ms=TS, now=self.now, **kw)
        self.pump()
        return rid

    def ops(self) -> list[TransactionOperationCompleted]:
        return [e for e in self.events if isinstance(e, TransactionOperationCompleted)]

    def kinds(self) -> list[int]:
        return [s.req.api_key for s in self.pending]

    @property
    def txn_state(self) -> TransactionState:
        txn = self.m.transactions
        assert txn is not None
        return txn.state


def txn_peer(**kw: Any) -> TxnPeer:
    kw.setdefault("transactional_id", TID)
    kw.setdefault("transaction_timeout", 30.0)
    peer = TxnPeer(machine(**kw), topics={"t": {0: (1, 0), 1: (2, 0)}, "u": {0: (2, 0)}})
    peer.start()
    return peer


def initialised(**kw: Any) -> TxnPeer:
    peer = txn_peer(**kw)
    peer.m.init_transactions(now=peer.now)
    peer.pump()
    peer.answer_find()
    peer.answer_init_txn()
    return peer


def in_transaction_with(peer: TxnPeer, *tps: tuple[str, int]) -> None:
    """begin, one record per partition, AddPartitionsToTxn answered, Produce answered."""
    peer.m.begin_transaction()
    for topic, partition in tps:
        peer.send(b"v", topic=topic, partition=partition)
    peer.answer_add()
    while ApiKey.PRODUCE in peer.kinds():
        peer.answer_produce()


# ------------------------------------------------------------------------ the table


def test_state_table_matches_the_java_client() -> None:
    # READY only after init or the end of a transaction; FATAL from anywhere.
    assert TRANSITIONS[S.READY] == {S.INITIALIZING, S.COMMITTING, S.ABORTING}
    assert TRANSITIONS[S.IN_TRANSACTION] == {S.READY}
    assert TRANSITIONS[S.COMMITTING] == {S.IN_TRANSACTION}
    assert TRANSITIONS[S.ABORTING] == {S.IN_TRANSACTION, S.ABORTABLE_ERROR}
    assert TRANSITIONS[S.FATAL_ERROR] == set(TransactionState)
    assert S.READY not in TRANSITIONS[S.ABORTABLE_ERROR]  # an abort is the only way out


def test_init_finds_the_transaction_coordinator_and_sends_the_transactional_id() -> None:
    peer = txn_peer()
    assert peer.txn_state is S.UNINITIALIZED
    op = peer.m.init_transactions(now=peer.now)
    peer.pump()
    assert peer.txn_state is S.INITIALIZING
    find = peer.answer_find(node=2)
    assert find.req.body.key_type == 1  # the transaction coordinator
    assert list(find.req.body.coordinator_keys) == [TID]
    init = peer.take(INIT)
    assert init.node == 2
    assert init.req.body.transactional_id == TID
    assert init.req.body.transaction_timeout == datetime.timedelta(seconds=30)
    assert (init.req.body.producer_id, init.req.body.producer_epoch) == (-1, -1)
    assert init.req.version <= 5
    peer.answer_init_txn(epoch=3)
    assert peer.txn_state is S.READY
    assert (peer.m.producer_id, peer.m.producer_epoch) == (PID, 3)
    assert peer.ops() == [
        TransactionOperationCompleted(operation_id=op, operation="init", error=None)
    ]


def test_init_retries_after_the_backoff_and_follows_a_moved_coordinator() -> None:
    peer = txn_peer()
    peer.m.init_transactions(now=peer.now)
    peer.pump()
    peer.answer_find()
    peer.answer_init_txn(code=ErrorCode.concurrent_transactions)
    assert peer.kinds() == [] and peer.m.get_timer() == pytest.approx(peer.now + 0.1)
    peer.advance()
    peer.answer_init_txn(code=ErrorCode.not_coordinator)
    assert peer.kinds() == []
    peer.advance()
    peer.answer_find(node=2, code=ErrorCode.coordinator_load_in_progress)
    peer.advance()
    peer.answer_find(node=2)
    assert peer.take(INIT).node == 2
    peer.answer_init_txn()
    assert peer.txn_state is S.READY


def test_a_full_transaction_commits_after_its_records() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    assert peer.txn_state is S.IN_TRANSACTION
    peer.send(b"a", partition=0)
    peer.send(b"b", partition=1)
    peer.send(b"c", topic="u", partition=0)
    # Nothing is produced before the coordinator added the partitions; partitions that
    # arrive while an AddPartitionsToTxn is in flight go together in the next one.
    assert peer.kinds() == [ADD_PARTS]
    add = peer.take(ADD_PARTS)
    body = add.req.body
    assert body.v3_and_below_transactional_id == TID
    assert (body.v3_and_below_producer_id, body.v3_and_below_producer_epoch) == (PID, 0)
    assert [(t.name, list(t.partitions)) for t in body.v3_and_below_topics] == [("t", [0])]
    op = peer.m.commit_transaction(now=peer.now)
    peer.pump()
    assert peer.txn_state is S.COMMITTING
    assert END not in peer.kinds()
    peer.answer_add()
    assert peer.kinds() == [ADD_PARTS, ApiKey.PRODUCE]
    add = peer.take(ADD_PARTS)
    assert {(t.name, p) for t in add.req.body.v3_and_below_topics for p in t.partitions} == {
        ("t", 1),
        ("u", 0),
    }
    peer.answer_add()
    produces = [s for s in peer.pending if s.req.api_key == ApiKey.PRODUCE]
    assert produces
    for sent in produces:
        assert sent.req.version <= 11  # transaction version 1
        assert sent.req.body.transactional_id == TID
        for t in sent.req.body.topic_data:
            for p in t.partition_data:
                (batch,) = iter_batches(bytes(p.records))
                assert batch.is_transactional
                assert (batch.producer_id, batch.producer_epoch) == (PID, 0)
    assert END not in peer.kinds()  # the data first, then the marker
    while ApiKey.PRODUCE in peer.kinds():
        peer.answer_produce()
    end = peer.take(END)
    assert end.req.body.committed is True
    assert end.req.version <= 4
    peer.answer_code(END)
    assert peer.txn_state is S.READY
    acked = [e for e in peer.events if isinstance(e, RecordsAcknowledged)]
    assert sum(len(e.results()) for e in acked) == 3
    assert peer.ops()[-1] == TransactionOperationCompleted(
        operation_id=op, operation="commit", error=None
    )
    # the next transaction adds its partitions again
    peer.m.begin_transaction()
    peer.send(b"d", partition=0)
    assert peer.kinds() == [ADD_PARTS]
    txn = peer.m.transactions
    assert txn is not None
    assert txn.transitions == [
        (S.UNINITIALIZED, S.INITIALIZING),
        (S.INITIALIZING, S.READY),
        (S.READY, S.IN_TRANSACTION),
        (S.IN_TRANSACTION, S.COMMITTING),
        (S.COMMITTING, S.READY),
        (S.READY, S.IN_TRANSACTION),
    ]


def test_a_partition_added_later_in_the_transaction_gets_its_own_add() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.answer_add()
    peer.answer_produce()
    peer.send(b"b", partition=0)  # already in the transaction: no AddPartitions
    assert peer.kinds() == [ApiKey.PRODUCE]
    peer.answer_produce()
    peer.send(b"c", partition=1)
    assert peer.kinds() == [ADD_PARTS]
    add = peer.take(ADD_PARTS)
    assert [(t.name, list(t.partitions)) for t in add.req.body.v3_and_below_topics] == [("t", [1])]


def test_empty_transaction_commits_without_requests() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.m.commit_transaction(now=peer.now)
    peer.pump()
    assert peer.kinds() == []
    assert peer.txn_state is S.READY
    assert peer.ops()[-1].error is None


# ------------------------------------------------------------------------- illegal


def test_illegal_calls_raise_typed_errors_and_change_nothing() -> None:
    peer = txn_peer()
    with pytest.raises(TransactionStateError, match="init_transactions"):
        peer.m.begin_transaction()
    with pytest.raises(TransactionStateError, match="begin_transaction"):
        peer.m.send("t", value=b"x", partition=0, timestamp_ms=TS, now=peer.now)
    peer.m.init_transactions(now=peer.now)
    with pytest.raises(TransactionStateError, match="already called"):
        peer.m.init_transactions(now=peer.now)
    peer.pump()
    peer.answer_find()
    peer.answer_init_txn()
    with pytest.raises(TransactionStateError, match="without an open transaction"):
        peer.m.commit_transaction(now=peer.now)
    with pytest.raises(TransactionStateError, match="without an open transaction"):
        peer.m.abort_transaction(now=peer.now)
    with pytest.raises(TransactionStateError, match="outside a transaction"):
        peer.m.send_offsets_to_transaction({("t", 0): 1}, "g", now=peer.now)
    peer.m.begin_transaction()
    with pytest.raises(TransactionStateError, match="already open"):
        peer.m.begin_transaction()
    with pytest.raises(ValueError, match="empty"):
        peer.m.send_offsets_to_transaction({}, "g", now=peer.now)
    with pytest.raises(ValueError, match="offset for"):
        peer.m.send_offsets_to_transaction({("t", 0): -1}, "g", now=peer.now)
    with pytest.raises(TypeError, match="group_id str"):
        peer.m.send_offsets_to_transaction({("t", 0): 1}, 42, now=peer.now)  # type: ignore[arg-type]
    assert peer.txn_state is S.IN_TRANSACTION
    assert peer.kinds() == []
    # the error's names: LocalProtocolError (machine), IllegalStateError (kafka-python),
    # IllegalOperation (aiokafka)
    assert issubclass(TransactionStateError, LocalProtocolError)
    assert issubclass(TransactionStateError, IllegalStateError)
    assert issubclass(TransactionStateError, IllegalOperation)
    assert ProducerFenced is ProducerFencedError


def test_transactional_calls_on_a_plain_producer_are_refused() -> None:
    peer = PeerCluster(machine())
    peer.start()
    for call in (
        peer.m.begin_transaction,
        lambda: peer.m.init_transactions(now=0.0),
        lambda: peer.m.commit_transaction(now=0.0),
    ):
        with pytest.raises(TransactionStateError, match="no transactional_id"):
            call()


def test_group_metadata_accepts_a_group_id_or_metadata() -> None:
    assert group_metadata("g") == ConsumerGroupMetadata("g", -1, "", None)
    meta = ConsumerGroupMetadata("g", 5, "m-1", "static-1")
    assert group_metadata(meta) is meta
    with pytest.raises(ValueError, match="non-empty"):
        group_metadata("")


# ------------------------------------------------------------------------ abort


def test_abort_fails_queued_records_and_ends_the_transaction() -> None:
    peer = initialised()
    in_transaction_with(peer, ("t", 0))
    peer.send(b"queued", partition=1)  # its partition is not added yet
    add = peer.take(ADD_PARTS)
    op = peer.m.abort_transaction(now=peer.now)
    peer.pump()
    failed = [e for e in peer.events if isinstance(e, RecordsFailed)]
    assert len(failed) == 1 and isinstance(failed[0].error, TransactionAbortedError)
    assert peer.txn_state is S.ABORTING
    assert END not in peer.kinds()  # the add in flight is answered first
    peer.answer(
        add,
        build(
            response_type(ADD_PARTS, add.req.version),
            throttle_time=_T0,
            results_by_topic_v3_and_below=(),
        ),
    )
    end = peer.take(END)
    assert end.req.body.committed is False
    peer.answer_code(END)
    assert peer.txn_state is S.READY
    assert peer.ops()[-1] == TransactionOperationCompleted(
        operation_id=op, operation="abort", error=None
    )
    assert ApiKey.PRODUCE not in peer.kinds()


def test_abort_before_anything_reached_the_coordinator_sends_no_end_txn() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    assert peer.kinds() == [] and peer.txn_state is S.READY


def test_abort_waits_for_records_in_flight() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.answer_add()
    assert peer.kinds() == [ApiKey.PRODUCE]
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    assert END not in peer.kinds()
    peer.answer_produce()
    peer.answer_code(END)
    assert peer.txn_state is S.READY


def test_a_commit_or_abort_asked_again_while_under_way_is_resumed() -> None:
    # Its caller gave up waiting (a timeout, a cancellation) and asks again: the same
    # operation goes on (Java: safe to retry commitTransaction); nothing else may start.
    peer = initialised()
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.answer_add()
    commit = peer.m.commit_transaction(now=peer.now)
    peer.pump()
    assert peer.m.commit_transaction(now=peer.now) == commit
    with pytest.raises(TransactionStateError, match="COMMITTING"):
        peer.m.abort_transaction(now=peer.now)
    with pytest.raises(TransactionStateError, match="commit is still under way"):
        peer.m.begin_transaction()
    peer.answer_produce()
    peer.answer_code(END)
    assert peer.txn_state is S.READY
    assert [o.operation_id for o in peer.ops() if o.operation == "commit"] == [commit]
    peer.m.begin_transaction()
    peer.send(b"b", partition=0)
    abort = peer.m.abort_transaction(now=peer.now)
    peer.pump()
    assert peer.m.abort_transaction(now=peer.now) == abort
    assert abort != commit


# ------------------------------------------------------------ abortable vs fatal


def test_a_failed_record_makes_the_transaction_abortable_then_usable_after_abort() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.answer_add()
    peer.answer_produce(code=ErrorCode.topic_authorization_failed)
    assert peer.txn_state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionFailedError) as info:
        peer.m.commit_transaction(now=peer.now)
    assert isinstance(info.value.cause, TopicAuthorizationFailedError)
    with pytest.raises(TransactionFailedError):
        peer.send(b"b", partition=0)
    with pytest.raises(TransactionFailedError):
        peer.m.begin_transaction()
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    peer.answer_code(END)
    # the failed batch had a sequence: the broker's count has a gap, so the epoch is bumped
    # (same producer id, sequences from 0) before the next transaction
    peer.answer_init_txn(epoch=1)
    assert peer.txn_state is S.READY
    assert (peer.m.producer_id, peer.m.producer_epoch) == (PID, 1)
    in_transaction_with(peer, ("t", 0))
    assert peer.m.state is ProducerState.OPEN


def test_a_failure_while_committing_ends_the_commit_with_an_abortable_error() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.answer_add()
    op = peer.m.commit_transaction(now=peer.now)
    peer.pump()
    peer.answer_produce(code=ErrorCode.topic_authorization_failed)
    assert END not in peer.kinds()
    assert peer.txn_state is S.ABORTABLE_ERROR
    last = peer.ops()[-1]
    assert last.operation_id == op and isinstance(last.error, TransactionFailedError)
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    peer.answer_code(END)
    peer.answer_init_txn(epoch=1)
    assert peer.txn_state is S.READY


def test_a_sequence_error_aborts_then_bumps_the_epoch_kip_360() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.answer_add()
    peer.answer_produce(code=ErrorCode.out_of_order_sequence_number)
    assert peer.txn_state is S.ABORTABLE_ERROR
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    peer.answer_code(END)
    # a new epoch (same producer id) before the next transaction
    assert peer.txn_state is S.INITIALIZING
    init = peer.take(INIT)
    assert (init.req.body.producer_id, init.req.body.producer_epoch) == (PID, 0)
    with pytest.raises(TransactionStateError):
        peer.m.begin_transaction()
    peer.answer_init_txn(epoch=1)
    assert peer.txn_state is S.READY
    assert peer.ops()[-1].operation == "abort" and peer.ops()[-1].error is None
    peer.m.begin_transaction()
    peer.send(b"b", partition=0)
    peer.answer_add()
    (part,) = parts_of(peer.take(ApiKey.PRODUCE), peer.topic_ids())
    assert (part.producer_id, part.epoch, part.base_sequence) == (PID, 1, 0)


@pytest.mark.parametrize("code", [ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch])
def test_fenced_end_txn_is_fatal(code: ErrorCode) -> None:
    peer = initialised()
    in_transaction_with(peer, ("t", 0))
    op = peer.m.commit_transaction(now=peer.now)
    peer.pump()
    peer.answer_code(END, code)
    assert peer.txn_state is S.FATAL_ERROR
    assert peer.m.state is ProducerState.FAILED
    last = peer.ops()[-1]
    assert last.operation_id == op and isinstance(last.error, ProducerFencedError)
    assert any(isinstance(e, ProducerFailed) for e in peer.events)
    with pytest.raises(ProducerFencedError):
        peer.m.begin_transaction()
    with pytest.raises(ProducerFencedError):
        peer.send(b"x")
    # a failed producer still closes (and at once: nothing is pending)
    peer.m.close(now=peer.now)
    peer.pump()
    assert peer.m.state is ProducerState.CLOSED


def test_invalid_producer_epoch_on_produce_is_fatal_for_a_transactional_producer() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.answer_add()
    peer.send(b"b", partition=0)
    peer.answer_produce(code=ErrorCode.invalid_producer_epoch)
    assert peer.txn_state is S.FATAL_ERROR
    failed = [e for e in peer.events if isinstance(e, RecordsFailed)]
    assert failed and all(isinstance(e.error, ProducerFencedError) for e in failed)
    assert ApiKey.PRODUCE not in peer.kinds() or peer.m.state is ProducerState.FAILED


def test_add_partitions_errors() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.answer_add({("t", 0): ErrorCode.concurrent_transactions})
    assert peer.kinds() == []
    peer.advance()
    peer.answer_add({("t", 0): ErrorCode.topic_authorization_failed})
    assert peer.txn_state is S.ABORTABLE_ERROR
    assert any(
        isinstance(e, RecordsFailed) and isinstance(e.error, TransactionFailedError)
        for e in peer.events
    )
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    assert peer.kinds() == [] and peer.txn_state is S.READY

    peer2 = initialised()
    peer2.m.begin_transaction()
    peer2.send(b"a", partition=0)
    peer2.answer_add({("t", 0): ErrorCode.transactional_id_authorization_failed})
    assert peer2.txn_state is S.FATAL_ERROR and peer2.m.state is ProducerState.FAILED


# ---------------------------------------------------------------------- offsets


def test_send_offsets_adds_the_group_then_commits_with_the_group_metadata() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    meta = ConsumerGroupMetadata("grp", 7, "member-7", "instance-a")
    op = peer.m.send_offsets_to_transaction({("in", 0): 42, ("in", 1): 5}, meta, now=peer.now)
    peer.pump()
    add = peer.take(ADD_OFFSETS)
    assert add.req.body.group_id == "grp" and add.req.body.transactional_id == TID
    peer.answer_code(ADD_OFFSETS)
    find = peer.answer_find(node=2)
    assert find.req.body.key_type == 0 and list(find.req.body.coordinator_keys) == ["grp"]
    commit = peer.take(TXN_COMMIT)
    body = commit.req.body
    assert commit.node == 2
    assert (body.generation_id, body.member_id, body.group_instance_id) == (
        7,
        "member-7",
        "instance-a",
    )
    assert (body.producer_id, body.producer_epoch) == (PID, 0)
    assert {
        (t.name, p.partition_index, p.committed_offset) for t in body.topics for p in t.partitions
    } == {("in", 0, 42), ("in", 1, 5)}
    peer.answer_txn_commit()
    assert peer.ops()[-1] == TransactionOperationCompleted(
        operation_id=op, operation="send_offsets", error=None
    )
    peer.m.commit_transaction(now=peer.now)
    peer.pump()
    end = peer.take(END)  # the offsets started the transaction: EndTxn goes
    assert end.req.body.committed is True


def test_send_offsets_with_a_plain_group_id_has_no_generation() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    peer.m.send_offsets_to_transaction({("in", 0): 1}, "grp", now=peer.now)
    peer.pump()
    peer.answer_code(ADD_OFFSETS)
    peer.answer_find()
    body = peer.take(TXN_COMMIT).req.body
    assert (body.generation_id, body.member_id, body.group_instance_id) == (-1, "", None)


def test_a_fenced_group_member_makes_the_transaction_abortable_kip_447() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    meta = ConsumerGroupMetadata("grp", 3, "old-member", None)
    op = peer.m.send_offsets_to_transaction({("in", 0): 1}, meta, now=peer.now)
    peer.pump()
    peer.answer_code(ADD_OFFSETS)
    peer.answer_find()
    peer.answer_txn_commit(ErrorCode.illegal_generation)
    assert peer.txn_state is S.ABORTABLE_ERROR
    last = peer.ops()[-1]
    assert last.operation_id == op and isinstance(last.error, TransactionFailedError)
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    assert peer.take(END).req.body.committed is False


def _offsets_fenced_after_a_bump(code: ErrorCode) -> tuple[TxnPeer, Any]:
    """The chaos run's sequence: the group coordinator (node 1) is known from a first
    transaction; the EndTxn of that transaction times out (node 1 paused), is retried at
    the new coordinator and the epoch is bumped (KIP-890 defence, epoch 1); in the next
    transaction TxnOffsetCommit still goes to node 1, which, running again, answers from
    its stale cache (epoch 0): fenced."""
    peer = initialised(request_timeout=5.0, delivery_timeout=30.0)
    peer.m.begin_transaction()
    peer.m.send_offsets_to_transaction({("in", 0): 1}, "grp", now=peer.now)
    peer.pump()
    peer.answer_code(ADD_OFFSETS)
    peer.answer_find(node=1)
    peer.answer_txn_commit()
    peer.m.commit_transaction(now=peer.now)
    peer.pump()
    peer.take(END)  # held: node 1 is paused
    peer.advance(peer.now + 5.0)
    peer.advance()
    peer.answer_find(node=2)
    peer.answer_code(END)
    peer.answer_init_txn(epoch=1)
    assert peer.txn_state is S.READY
    peer.m.begin_transaction()
    op = peer.m.send_offsets_to_transaction({("in", 0): 2}, "grp", now=peer.now)
    peer.pump()
    assert peer.take(ADD_OFFSETS).node == 2
    peer.answer_code(ADD_OFFSETS)
    stale = peer.answer_txn_commit(code)
    assert stale.node == 1 and stale.req.body.producer_epoch == 1  # the cached coordinator
    return peer, op


@pytest.mark.parametrize("code", [ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch])
def test_a_fenced_txn_offset_commit_is_put_to_the_transaction_coordinator_first(
    code: ErrorCode,
) -> None:
    peer, op = _offsets_fenced_after_a_bump(code)
    assert peer.txn_state is S.IN_TRANSACTION  # not fatal yet
    assert not [o for o in peer.ops() if o.operation_id == op]
    peer.advance()  # the backoff
    check = peer.take(ADD_OFFSETS)
    assert check.node == 2 and check.req.body.producer_epoch == 1
    peer.answer_code(ADD_OFFSETS)  # the transaction coordinator knows epoch 1: no fence
    find = peer.answer_find(node=2)  # the group coordinator is looked up again
    assert find.req.body.key_type == 0
    commit = peer.answer_txn_commit()
    assert commit.node == 2 and commit.req.body.producer_epoch == 1
    assert peer.ops()[-1] == TransactionOperationCompleted(
        operation_id=op, operation="send_offsets", error=None
    )
    peer.m.commit_transaction(now=peer.now)
    peer.pump()
    peer.answer_code(END)
    assert peer.txn_state is S.READY


def test_a_fenced_txn_offset_commit_confirmed_by_the_transaction_coordinator_is_fatal() -> None:
    peer, op = _offsets_fenced_after_a_bump(ErrorCode.producer_fenced)
    peer.advance()
    peer.answer_code(ADD_OFFSETS, ErrorCode.producer_fenced)  # a newer producer: real
    assert peer.txn_state is S.FATAL_ERROR
    last = peer.ops()[-1]
    assert last.operation_id == op and isinstance(last.error, ProducerFencedError)


def test_a_txn_offset_commit_fenced_again_after_the_check_is_fatal() -> None:
    peer, op = _offsets_fenced_after_a_bump(ErrorCode.producer_fenced)
    peer.advance()
    peer.answer_code(ADD_OFFSETS)
    peer.answer_find(node=2)
    peer.answer_txn_commit(ErrorCode.producer_fenced)  # asked once only
    assert peer.txn_state is S.FATAL_ERROR
    last = peer.ops()[-1]
    assert last.operation_id == op and isinstance(last.error, ProducerFencedError)
    assert "TxnOffsetCommit" in str(last.error)


# ------------------------------------------------------------- KIP-890 defence


def test_an_end_txn_with_unknown_outcome_is_retried_then_the_epoch_is_bumped() -> None:
    peer = initialised(request_timeout=5.0, delivery_timeout=30.0)
    in_transaction_with(peer, ("t", 0))
    op = peer.m.commit_transaction(now=peer.now)
    peer.pump()
    peer.take(END)  # held: never answered (the Jepsen case)
    peer.advance(peer.now + 5.0)  # the request times out
    peer.advance()  # backoff, then the coordinator is looked up again
    peer.answer_find()
    retry = peer.take(END)
    assert retry.req.body.committed is True
    assert (retry.req.body.producer_id, retry.req.body.producer_epoch) == (PID, 0)
    peer.answer_code(END)
    # not READY yet: a late copy of the first EndTxn could still land, so the producer
    # re-initialises (epoch + 1) before any next transaction
    assert peer.txn_state is S.INITIALIZING
    assert not [o for o in peer.ops() if o.operation_id == op]
    with pytest.raises(TransactionStateError):
        peer.m.begin_transaction()
    init = peer.take(INIT)
    assert (init.req.body.producer_id, init.req.body.producer_epoch) == (PID, 0)
    peer.answer_init_txn(epoch=1)
    assert peer.txn_state is S.READY
    assert peer.ops()[-1] == TransactionOperationCompleted(
        operation_id=op, operation="commit", error=None
    )
    peer.m.begin_transaction()
    peer.send(b"next", partition=0)
    add = peer.take(ADD_PARTS)
    assert add.req.body.v3_and_below_producer_epoch == 1


def test_an_add_partitions_with_unknown_outcome_bumps_the_epoch_after_the_transaction() -> None:
    peer = initialised(request_timeout=5.0, delivery_timeout=30.0)
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.take(ADD_PARTS)  # held
    peer.advance(peer.now + 5.0)
    peer.advance()
    peer.answer_find()
    peer.answer_add()
    peer.answer_produce()
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    peer.answer_code(END)
    assert peer.txn_state is S.INITIALIZING
    peer.answer_init_txn(epoch=1)
    assert peer.txn_state is S.READY
    assert peer.m.producer_epoch == 1


def test_a_produce_with_unknown_outcome_failed_by_an_abort_bumps_the_epoch() -> None:
    # Found by the simulator (tests/sim/test_dst_txn.py, seed 244): a Produce times out (its
    # copy may still be on the wire), the batch waits for its retry, the application
    # aborts -- the abort fails the queued retry. A late copy of that Produce would land
    # in the *next* transaction at the same epoch (its sequence is the next one the broker
    # expects) and commit with it. Its sequence range is untrusted: bump first (KIP-360).
    peer = initialised(request_timeout=5.0, delivery_timeout=30.0)
    peer.m.begin_transaction()
    peer.send(b"a", partition=0)
    peer.answer_add()
    peer.take(ApiKey.PRODUCE)  # held: never answered
    peer.advance(peer.now + 5.0)  # times out; the batch is queued for its retry
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    failed = [e for e in peer.events if isinstance(e, RecordsFailed)]
    assert len(failed) == 1 and isinstance(failed[0].error, TransactionAbortedError)
    peer.advance()  # reconnect to the coordinator
    peer.answer_code(END)
    assert peer.txn_state is S.INITIALIZING
    init = peer.take(INIT)
    assert (init.req.body.producer_id, init.req.body.producer_epoch) == (PID, 0)
    peer.answer_init_txn(epoch=1)
    assert peer.txn_state is S.READY and peer.m.producer_epoch == 1


def test_an_abort_of_records_never_sent_does_not_bump() -> None:
    peer = initialised()
    in_transaction_with(peer, ("t", 0))
    peer.send(b"queued", partition=1)  # waits for its partition: never sent
    add = peer.take(ADD_PARTS)
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    empty = build(
        response_type(ADD_PARTS, add.req.version),
        throttle_time=_T0,
        results_by_topic_v3_and_below=(),
    )
    peer.answer(add, empty)
    peer.answer_code(END)
    assert peer.txn_state is S.READY and INIT not in peer.kinds()


def test_without_unknown_outcomes_no_epoch_bump() -> None:
    peer = initialised()
    for _ in range(3):
        in_transaction_with(peer, ("t", 0))
        peer.m.commit_transaction(now=peer.now)
        peer.pump()
        peer.answer_code(END)
        assert peer.txn_state is S.READY
    assert INIT not in peer.kinds() and peer.m.producer_epoch == 0


def test_close_with_an_open_transaction_aborts_it() -> None:
    peer = initialised()
    in_transaction_with(peer, ("t", 0))
    peer.m.close(now=peer.now)
    peer.pump()
    assert peer.take(END).req.body.committed is False
    assert peer.m.state is ProducerState.CLOSING
    peer.answer_code(END)
    assert peer.m.state is ProducerState.CLOSED


def test_machine_type_is_exported() -> None:
    assert isinstance(initialised().m, ProducerMachine)


def test_a_transaction_aborted_by_the_coordinator_after_its_timeout_is_recoverable() -> None:
    """KIP-588: the coordinator aborted the transaction after transaction_timeout_ms and
    bumped the epoch. The commit fails with TransactionTimedOutError; the abort sends no
    EndTxn (it would be refused) but InitProducerId with the old epoch, and goes on."""
    peer = initialised(delivery_timeout=120.0)  # transaction_timeout 30 s
    in_transaction_with(peer, ("t", 0))
    peer.advance(peer.now + 31.0)
    op = peer.m.commit_transaction(now=peer.now)
    peer.pump()
    peer.answer_code(END, ErrorCode.producer_fenced)
    last = peer.ops()[-1]
    assert last.operation_id == op and isinstance(last.error, TransactionTimedOutError)
    assert isinstance(last.error, TransactionFailedError)  # abort and go on
    assert isinstance(last.error.__cause__, ProducerFencedError)
    assert "transaction_timeout_ms" in str(last.error)
    assert peer.txn_state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionTimedOutError):
        peer.m.begin_transaction()
    abort = peer.m.abort_transaction(now=peer.now)
    peer.pump()
    assert END not in peer.kinds()
    init = peer.take(INIT)
    assert (init.req.body.producer_id, init.req.body.producer_epoch) == (PID, 0)
    peer.answer_init_txn(epoch=2)  # the coordinator's timeout abort took epoch 1
    assert peer.txn_state is S.READY
    assert peer.ops()[-1] == TransactionOperationCompleted(
        operation_id=abort, operation="abort", error=None
    )
    in_transaction_with(peer, ("t", 0))
    assert peer.m.producer_epoch == 2


def test_after_a_timeout_a_refused_reinit_is_fatal() -> None:
    peer = initialised(delivery_timeout=120.0)
    in_transaction_with(peer, ("t", 0))
    peer.advance(peer.now + 31.0)
    peer.send(b"late", partition=0)
    peer.answer_produce(code=ErrorCode.invalid_producer_epoch)
    failed = [e for e in peer.events if isinstance(e, RecordsFailed)]
    assert failed and isinstance(failed[-1].error, TransactionTimedOutError)
    assert peer.txn_state is S.ABORTABLE_ERROR
    abort = peer.m.abort_transaction(now=peer.now)
    peer.pump()
    peer.answer_init_txn(code=ErrorCode.producer_fenced)  # a newer producer took over
    assert peer.txn_state is S.FATAL_ERROR
    last = peer.ops()[-1]
    assert last.operation_id == abort and isinstance(last.error, ProducerFencedError)


def test_abort_supersedes_a_send_offsets_under_way() -> None:
    peer = initialised()
    peer.m.begin_transaction()
    offsets_op = peer.m.send_offsets_to_transaction({("in", 0): 1}, "grp", now=peer.now)
    peer.pump()
    add = peer.take(ADD_OFFSETS)
    abort_op = peer.m.abort_transaction(now=peer.now)
    peer.pump()
    first = peer.ops()[-1]
    assert first.operation_id == offsets_op
    assert isinstance(first.error, TransactionAbortedError)
    assert END not in peer.kinds()  # the AddOffsetsToTxn in flight is answered first
    peer.answer(
        add, response(ADD_OFFSETS, add.req.version, throttle_time=_T0, error_code=ErrorCode(0))
    )
    # it reached the coordinator: the transaction exists there and must be ended
    assert peer.take(END).req.body.committed is False
    peer.answer_code(END)
    assert peer.ops()[-1].operation_id == abort_op and peer.ops()[-1].error is None
    assert peer.txn_state is S.READY


def test_close_gives_up_an_init_under_way() -> None:
    peer = txn_peer()
    op = peer.m.init_transactions(now=peer.now)
    peer.pump()
    peer.answer_find()
    assert peer.kinds() == [INIT]
    peer.m.close(now=peer.now)
    peer.pump()
    assert peer.m.state is ProducerState.CLOSED
    last = peer.ops()[-1]
    assert last.operation_id == op and last.error is not None


def test_coordinator_lookup_errors() -> None:
    # the group's coordinator refused: only the offsets (the transaction) fail
    peer = initialised()
    peer.m.begin_transaction()
    op = peer.m.send_offsets_to_transaction({("in", 0): 1}, "grp", now=peer.now)
    peer.pump()
    peer.answer_code(ADD_OFFSETS)
    peer.answer_find(code=ErrorCode.group_authorization_failed)
    assert peer.txn_state is S.ABORTABLE_ERROR
    last = peer.ops()[-1]
    assert last.operation_id == op and isinstance(last.error, TransactionFailedError)
    assert peer.kinds() == []  # no lookup loop
    # the transaction coordinator refused: fatal
    peer2 = txn_peer()
    op2 = peer2.m.init_transactions(now=peer2.now)
    peer2.pump()
    peer2.answer_find(code=ErrorCode.transactional_id_authorization_failed)
    assert peer2.txn_state is S.FATAL_ERROR
    assert peer2.ops()[-1].operation_id == op2 and peer2.ops()[-1].error is not None
    assert peer2.kinds() == []


@pytest.mark.parametrize("defence", [True, False])
def test_the_kip_890_defence_can_be_switched_off_for_the_simulator(defence: bool) -> None:
    """Jepsen's case: EndTxn(abort) of transaction 1 is held, the client times out; without
    the defence transaction 2 runs under the same epoch, so the late EndTxn could end it."""
    peer = initialised(request_timeout=5.0, delivery_timeout=30.0, transaction_defence=defence)
    in_transaction_with(peer, ("t", 0))
    peer.m.abort_transaction(now=peer.now)
    peer.pump()
    held = peer.take(END)
    assert held.req.body.committed is False
    peer.advance(peer.now + 5.0)
    peer.advance()
    peer.answer_find()
    peer.answer_code(END)  # the retry
    if defence:
        peer.answer_init_txn(epoch=1)
    assert peer.txn_state is S.READY
    peer.m.begin_transaction()
    peer.send(b"t2", partition=0)
    add = peer.take(ADD_PARTS)
    epoch = add.req.body.v3_and_below_producer_epoch
    assert (epoch > held.req.body.producer_epoch) is defence


def test_after_a_timeout_a_pre_4_0_broker_fails_the_abort_naming_the_next_step() -> None:
    """Kafka 2.8-3.9 refuse InitProducerId with the epoch their coordinator fenced on a
    timeout (issue 25): the abort must not send it and then claim a newer producer fenced
    us; it fails with an error that names the feature, the broker and the next step."""
    old = {**CLIENT_VERSIONS, ApiKey.FETCH: (0, 12)}  # still offers Fetch v0-3: < 4.0
    peer = TxnPeer(
        machine(transactional_id=TID, transaction_timeout=30.0, delivery_timeout=120.0),
        topics={"t": {0: (1, 0), 1: (2, 0)}, "u": {0: (2, 0)}},
        api_ranges=old,
    )
    peer.start()
    peer.m.init_transactions(now=peer.now)
    peer.pump()
    peer.answer_find()
    peer.answer_init_txn()
    in_transaction_with(peer, ("t", 0))
    peer.advance(peer.now + 31.0)
    peer.m.commit_transaction(now=peer.now)
    peer.pump()
    peer.answer_code(END, ErrorCode.producer_fenced)
    assert isinstance(peer.ops()[-1].error, TransactionTimedOutError)
    abort = peer.m.abort_transaction(now=peer.now)
    peer.pump()
    assert INIT not in peer.kinds() and END not in peer.kinds()
    assert peer.txn_state is S.FATAL_ERROR
    last = peer.ops()[-1]
    error = last.error
    assert last.operation_id == abort and isinstance(error, UnsupportedVersionError)
    assert not isinstance(error, ProducerFencedError)
    assert error.feature == "recovering from a transaction timeout (KIP-588)"
    assert error.node_id == 1  # the transaction coordinator
    assert "no other producer took over" in str(error)
    assert "create a new one with the same transactional_id" in str(error)
    assert isinstance(error.__cause__, TransactionTimedOutError)
    with pytest.raises(UnsupportedVersionError):
        peer.m.begin_transaction()
