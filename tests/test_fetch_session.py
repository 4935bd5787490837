"""KIP-227 fetch sessions: what each request carries and how the epoch moves."""

from __future__ import annotations

import uuid

import pytest

from kafkastate.core.consumer.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSession,
    PartitionFetchState,
    fetch_request_from_session,
)
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiKey, ApiVersionTable
from kafkastate.errors import LocalProtocolError

TID = uuid.UUID(int=7)


def st(
    partition: int, offset: int, *, topic: str = "t", tid: uuid.UUID | None = TID
) -> PartitionFetchState:
    return PartitionFetchState(topic=topic, topic_id=tid, partition=partition, fetch_offset=offset)


def parts(*states: PartitionFetchState) -> dict[tuple[str, int], PartitionFetchState]:
    return {(s.topic, s.partition): s for s in states}


def test_full_then_incremental_sends_only_changes() -> None:
    session = FetchSession()
    first = session.build(parts(st(0, 0), st(1, 0)))
    assert (first.session_id, first.epoch, first.is_full) == (0, INITIAL_EPOCH, True)
    assert [s.partition for s in first.to_send] == [0, 1] and first.to_forget == ()
    session.handle_response(0, 42)
    assert (session.session_id, session.epoch) == (42, 1)
    same = session.build(parts(st(0, 0), st(1, 0)))
    assert (same.session_id, same.epoch, same.to_send, same.to_forget) == (42, 1, (), ())
    session.handle_response(0, 42)
    changed = session.build(parts(st(0, 5), st(2, 0)))  # 0 moved, 1 dropped, 2 added
    assert changed.epoch == 2
    assert [(s.partition, s.fetch_offset) for s in changed.to_send] == [(0, 5), (2, 0)]
    assert [s.partition for s in changed.to_forget] == [1]
    session.handle_response(0, 42)
    assert session.epoch == 3 and sorted(session.partitions) == [("t", 0), ("t", 2)]


def test_errors_reset_the_session() -> None:
    session = FetchSession()
    session.build(parts(st(0, 0)))
    session.handle_response(0, 9)
    session.build(parts(st(0, 1)))
    session.handle_response(71, 0)  # INVALID_FETCH_SESSION_EPOCH: close it, start over
    assert (session.session_id, session.epoch) == (9, INITIAL_EPOCH)
    again = session.build(parts(st(0, 1)))
    assert again.is_full and [s.partition for s in again.to_send] == [0]
    session.handle_response(70, 0)  # FETCH_SESSION_ID_NOT_FOUND: forget it entirely
    assert (session.session_id, session.epoch) == (0, INITIAL_EPOCH)
    session.build(parts(st(0, 1)))
    session.handle_error()  # lost: the broker's view is unknown
    assert session.epoch == INITIAL_EPOCH and session.partitions == {}


def test_a_broker_without_sessions_keeps_full_fetches() -> None:
    session = FetchSession()
    session.build(parts(st(0, 0)))
    session.handle_response(0, 0)
    assert (session.session_id, session.epoch) == (0, INITIAL_EPOCH)
    assert session.build(parts(st(0, 3))).is_full


def test_epoch_wraps_to_one() -> None:
    session = FetchSession()
    session.build(parts(st(0, 0)))
    session.handle_response(0, 5)
    session.epoch = 2**31 - 1
    session.build(parts(st(0, 0)))
    session.handle_response(0, 5)
    assert session.epoch == 1


def test_topic_id_change_forgets_and_resends() -> None:
    session = FetchSession()
    session.build(parts(st(0, 0)))
    session.handle_response(0, 5)
    new_id = uuid.UUID(int=8)
    data = session.build(parts(st(0, 0, tid=new_id)))
    assert [s.topic_id for s in data.to_send] == [new_id]
    assert [s.topic_id for s in data.to_forget] == [TID]


def test_sessionless_and_close() -> None:
    session = FetchSession(sessionless=True)
    data = session.build(parts(st(0, 0)))
    assert (data.session_id, data.epoch) == (0, FINAL_EPOCH)
    session.handle_response(0, 0)
    assert session.build(parts(st(0, 1))).epoch == FINAL_EPOCH
    with pytest.raises(LocalProtocolError, match="one request in flight"):
        session.build(parts(st(0, 1)))
    live = FetchSession()
    live.build(parts(st(0, 0)))
    live.handle_response(0, 77)
    closing = live.close()
    assert (closing.session_id, closing.epoch, closing.to_send) == (77, FINAL_EPOCH, ())
    assert (live.session_id, live.epoch) == (0, INITIAL_EPOCH)


@pytest.mark.parametrize("version", [4, 7, 12, 13, CLIENT_VERSIONS[ApiKey.FETCH][1]])
def test_request_names_topics_by_name_or_id_by_version(version: int) -> None:
    table = ApiVersionTable({ApiKey.FETCH: (version, version)})
    session = FetchSession()
    session.build(parts(st(0, 0), st(1, 0)))
    session.handle_response(0, 3 if version >= 7 else 0)  # before v7 no broker has sessions
    data = session.build(parts(st(0, 4)))
    request = fetch_request_from_session(
        table, data, max_wait=0.5, min_bytes=1, max_bytes=1000, isolation_level=1
    )
    (topic,) = request.topics
    assert [p.fetch_offset for p in topic.partitions] == [4]
    assert data.is_full is (version < 7)
    if version >= 7:
        assert (request.session_id, request.session_epoch) == (3, 1)
        (forgotten,) = request.forgotten_topics_data
        assert list(forgotten.partitions) == [1]
    if version >= 13:
        assert topic.topic_id == TID and forgotten.topic_id == TID
    else:
        assert topic.topic == "t"
