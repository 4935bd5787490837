"""FetcherMachine logic without sockets: read_committed filtering over crafted batches,
control records, positions, pause and reset policies."""

from __future__ import annotations

import random

import pytest

from kafkastate.core.client import ClientConfig
from kafkastate.core.consumer.fetcher import (
    FetcherConfig,
    FetcherMachine,
    PositionState,
    _Completed,
)
from kafkastate.core.protocol.records import (
    ControlRecordType,
    RecordBatchBuilder,
    build_control_batch,
)
from kafkastate.errors import KafkaConfigurationError, LocalProtocolError, NoOffsetForPartitionError
from kafkastate.structs import ConsumerRecord

TS = 1_700_000_000_000
TP = ("t", 0)


def machine(**kw: object) -> FetcherMachine:
    config = FetcherConfig(client=ClientConfig(bootstrap_servers="boot:9092"), **kw)  # type: ignore[arg-type]
    return FetcherMachine(config, rng=random.Random(0))


def data_batch(base: int, values: list[bytes], *, pid: int = -1, txn: bool = False) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=base if pid >= 0 else -1,
        is_transactional=txn,
        base_offset=base,
    )
    for v in values:
        builder.append(TS, None, v)
    return builder.build()


def marker(offset: int, pid: int, kind: ControlRecordType) -> bytes:
    return build_control_batch(
        kind,
        producer_id=pid,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp_ms=TS,
        base_offset=offset,
    )


def feed(m: FetcherMachine, records: bytes, aborted: list[tuple[int, int]], at: int) -> None:
    """Put fetched data for TP as a Fetch response would (position ``at``)."""
    m.seek(TP, at, now=0.0)
    m._completed[TP] = _Completed(
        tp=TP, fetch_offset=at, records=records, aborted=sorted(aborted), next_offset=at
    )


def test_read_committed_skips_aborted_transactions_and_markers() -> None:
    m = machine(isolation_level="read_committed")
    m.assign([TP], now=0.0)
    log = b"".join(
        [
            data_batch(0, [b"plain-0", b"plain-1"]),  # 0-1 non-transactional
            data_batch(2, [b"a-2", b"a-3"], pid=7, txn=True),  # 2-3 aborted txn of pid 7
            data_batch(4, [b"c-4"], pid=8, txn=True),  # 4 committed txn of pid 8
            marker(5, 7, ControlRecordType.ABORT),  # 5
            marker(6, 8, ControlRecordType.COMMIT),  # 6
            data_batch(7, [b"a-7"], pid=7, txn=True),  # 7 pid 7 again, a new txn: kept
        ]
    )
    feed(m, log, [(2, 7)], at=0)
    runs = m.poll(100, now=1.0)
    values = [r.value for _tp, records, _epoch in runs for r in records]
    assert values == [b"plain-0", b"plain-1", b"c-4", b"a-7"]
    assert m.position(TP) == 8  # past every batch, markers included


def test_read_uncommitted_returns_everything_but_control_records() -> None:
    m = machine()
    m.assign([TP], now=0.0)
    log = data_batch(0, [b"a", b"b"], pid=7, txn=True) + marker(2, 7, ControlRecordType.ABORT)
    feed(m, log, [(0, 7)], at=0)
    runs = m.poll(100, now=1.0)
    assert [r.value for _tp, rs, _e in runs for r in rs] == [b"a", b"b"]
    assert m.position(TP) == 3


def test_records_before_the_position_and_max_records() -> None:
    m = machine()
    m.assign([TP], now=0.0)
    feed(m, data_batch(10, [b"x%d" % i for i in range(6)]), [], at=12)  # batch starts before
    first = m.poll(2, now=1.0)
    assert [r.offset for _tp, rs, _e in first for r in rs] == [12, 13]
    second = m.poll(10, now=1.0)
    assert [r.offset for _tp, rs, _e in second for r in rs] == [14, 15]
    assert m.position(TP) == 16 and not m.has_records()


@pytest.mark.usefixtures("implementation")
def test_records_are_handed_out_as_the_consumer_records_the_application_gets() -> None:
    """One object per record: the runs hold ``ConsumerRecord``s decoded straight from the
    batches (C and pure Python), each with its own batch's leader epoch."""
    m = machine()
    m.assign([TP], now=0.0)
    first = RecordBatchBuilder(base_offset=0, partition_leader_epoch=3)
    first.append(TS, b"k", b"v0", [("h", b"x")])
    second = RecordBatchBuilder(base_offset=1, partition_leader_epoch=4)
    second.append(TS + 1, None, b"v1")
    feed(m, first.build() + second.build(), [], at=0)
    records = [r for _tp, rs, _e in m.poll(10, now=1.0) for r in rs]
    assert [type(r) for r in records] == [ConsumerRecord, ConsumerRecord]
    assert records == [
        ConsumerRecord("t", 0, 3, 0, TS, 0, b"k", b"v0", (("h", b"x"),), None, 1, 2, 2),
        ConsumerRecord("t", 0, 4, 1, TS + 1, 0, None, b"v1", (), None, -1, 2, -1),
    ]
    assert type(records[0].timestamp_type) is int


def test_pause_keeps_fetched_data_for_later() -> None:
    m = machine()
    m.assign([TP], now=0.0)
    feed(m, data_batch(0, [b"v"]), [], at=0)
    m.pause([TP])
    assert m.poll(10, now=1.0) == [] and m.paused() == (TP,)
    m.resume([TP], now=1.0)
    assert [r.value for _tp, rs, _e in m.poll(10, now=1.0) for r in rs] == [b"v"]


def test_a_seek_drops_data_fetched_for_the_old_position() -> None:
    m = machine()
    m.assign([TP], now=0.0)
    feed(m, data_batch(0, [b"old"]), [], at=0)
    m.seek(TP, 40, now=1.0)
    assert m.poll(10, now=1.0) == [] and m.position(TP) == 40


def test_reset_policy_none_fails_the_partition_until_a_seek() -> None:
    m = machine(auto_offset_reset="none")
    m.assign([TP], now=0.0)
    assert m.position_state(TP) is PositionState.FAILED
    with pytest.raises(NoOffsetForPartitionError, match="t-0"):
        m.poll(10, now=0.0)
    m.seek(TP, 3, now=0.0)
    assert m.position_state(TP) is PositionState.FETCHING and m.poll(10, now=0.0) == []


def test_reset_policies_ask_list_offsets() -> None:
    for policy, expected in (("earliest", -2), ("latest", -1)):
        m = machine(auto_offset_reset=policy)
        m.assign([TP], now=0.0)
        assert m.position_state(TP) is PositionState.AWAIT_RESET
        assert m._parts[TP].reset_to == expected
        assert m.position(TP) is None


def test_bad_arguments_are_typed() -> None:
    m = machine(group_id=None)
    with pytest.raises(KafkaConfigurationError):
        m.assign([("t", -1)], now=0.0)
    m.assign([TP], now=0.0)
    with pytest.raises(LocalProtocolError, match="not assigned"):
        m.seek(("u", 0), 1, now=0.0)
    with pytest.raises(LocalProtocolError, match="group_id"):
        m.commit({TP: 1}, now=0.0)
    with pytest.raises(KafkaConfigurationError, match="auto_offset_reset"):
        machine(auto_offset_reset="first")
