"""KIP-227 fetch sessions: what each request carries and how the epoch moves."""

from __future__ import annotations

import datetime
import io
import uuid
from typing import Any

import attrs
import pytest
from kio.serial import entity_reader, entity_writer

from kafkastate.core.consumer.fetch.request import fetch_request_from_session
from kafkastate.core.consumer.fetch.session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchRequestData,
    FetchSession,
    PartitionFetchState,
    next_epoch,
    response_partitions,
)
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiKey, ApiVersionTable
from kafkastate.errors import LocalProtocolError, UnsupportedVersionError
from kafkastate.structs import TopicPartition

TID = uuid.UUID(int=7)
UID = uuid.UUID(int=9)
WID = uuid.UUID(int=10)
NEW_TID = uuid.UUID(int=8)
MAX_FETCH = CLIENT_VERSIONS[ApiKey.FETCH][1]

SESSION_ID_NOT_FOUND = 70
INVALID_EPOCH = 71
TOPIC_ID_ERROR = 106
UNKNOWN_SERVER_ERROR = -1


def st(
    partition: int, offset: int = 0, *, topic: str = "t", tid: uuid.UUID | None = TID
) -> PartitionFetchState:
    return PartitionFetchState(topic=topic, topic_id=tid, partition=partition, fetch_offset=offset)


def parts(*states: PartitionFetchState) -> dict[tuple[str, int], PartitionFetchState]:
    return {(s.topic, s.partition): s for s in states}


def keys(states: tuple[PartitionFetchState, ...]) -> list[tuple[str, int]]:
    return [(s.topic, s.partition) for s in states]


def established(
    *states: PartitionFetchState, session_id: int = 42
) -> tuple[FetchSession, dict[tuple[str, int], PartitionFetchState]]:
    """A session the broker created holding ``states`` (next request: epoch 1)."""
    session = FetchSession()
    held = parts(*states)
    session.build(held)
    assert session.handle_response(0, session_id)
    assert (session.session_id, session.epoch) == (session_id, 1)
    return session, held


def table(version: int, *, low: int | None = None) -> ApiVersionTable:
    return ApiVersionTable({ApiKey.FETCH: (version if low is None else low, version)})


def request(versions: ApiVersionTable, data: FetchRequestData) -> Any:
    """Build the kio request and take it through kio's encoder and decoder."""
    entity = fetch_request_from_session(
        versions,
        data,
        max_wait=0.25,
        min_bytes=1,
        max_bytes=1000,
        isolation_level=1,
        rack_id="rack-a",
    )
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    decoded, size = entity_reader(type(entity))(memoryview(buf.getvalue()), 0)
    assert size == len(buf.getvalue())
    assert decoded == entity
    return decoded


# -- building: full, incremental, adds / alters / removes


def test_full_then_incremental_sends_only_changes() -> None:
    session = FetchSession()
    first = session.build(parts(st(0), st(1)))
    assert (first.session_id, first.epoch, first.is_full) == (0, INITIAL_EPOCH, True)
    assert keys(first.to_send) == [("t", 0), ("t", 1)]
    assert (first.to_forget, first.replaced) == ((), ())
    assert session.partitions == {}  # pending until the broker answers
    assert session.handle_response(0, 42, now=3.0)
    assert (session.session_id, session.epoch, session.last_response) == (42, 1, 3.0)
    assert session.partitions == parts(st(0), st(1))
    same = session.build(parts(st(0), st(1)))
    assert (same.session_id, same.epoch, same.is_full) == (42, 1, False)
    assert (same.to_send, same.to_forget) == ((), ())
    assert same.session_partitions == parts(st(0), st(1))
    assert session.handle_response(0, 42)
    changed = session.build(parts(st(0, 5), st(2)))  # 0 moved, 1 dropped, 2 added
    assert changed.epoch == 2
    assert changed.to_send == (st(0, 5), st(2))
    assert changed.to_forget == (st(1),)
    assert session.handle_response(0, 42)
    assert session.epoch == 3 and list(session.partitions) == [("t", 0), ("t", 2)]


def test_incremental_adds_alters_and_removes_exactly() -> None:
    base = [
        st(0, 10),
        st(1, 10),
        st(2, 10),
        st(3, 10),
        st(4, 10),
        st(0, 3, topic="u", tid=UID),
        st(1, 3, topic="u", tid=UID),
    ]
    session, _ = established(*base)
    wanted = parts(
        st(1, 10),  # unchanged
        st(0, 11),  # fetch offset
        attrs.evolve(st(2, 10), log_start_offset=4),
        attrs.evolve(st(3, 10), current_leader_epoch=6),
        attrs.evolve(st(4, 10), partition_max_bytes=512),
        st(1, 3, topic="u", tid=UID),  # unchanged
        st(2, 0, topic="u", tid=UID),  # new
        st(0, 0, topic="v", tid=None),  # new
    )
    data = session.build(wanted)
    assert not data.is_full
    assert keys(data.to_send) == [
        ("t", 0),
        ("t", 2),
        ("t", 3),
        ("t", 4),
        ("u", 2),
        ("v", 0),
    ]
    assert data.to_send[0].fetch_offset == 11
    assert data.to_forget == (st(0, 3, topic="u", tid=UID),)
    assert data.replaced == ()
    assert data.session_partitions == wanted
    assert list(data.session_partitions) == list(wanted)  # the caller's order is kept
    assert not data.uses_topic_ids  # ("v", 0) has none
    assert session.handle_response(0, 42)
    assert session.partitions == wanted and session.epoch == 2


@pytest.mark.parametrize(
    "change",
    [
        {"fetch_offset": 1},
        {"log_start_offset": 1},
        {"current_leader_epoch": 1},
        {"partition_max_bytes": 1},
        {"topic_id": None},
    ],
    ids=lambda c: next(iter(c)),
)
def test_every_field_counts_as_an_alteration(change: dict[str, Any]) -> None:
    session, _ = established(st(0), st(1))
    altered = attrs.evolve(st(1), **change)
    data = session.build(parts(st(0), altered))
    assert data.to_send == (altered,)
    assert (data.to_forget, data.replaced) == ((), ())


def test_keys_may_be_topic_partitions_and_must_match() -> None:
    session = FetchSession()
    data = session.build({TopicPartition("t", 0): st(0)})
    assert session.handle_response(0, 5)
    assert session.build({TopicPartition("t", 0): st(0)}).to_send == ()
    session.handle_error()
    assert data.session_partitions == {("t", 0): st(0)}
    with pytest.raises(LocalProtocolError, match="does not match"):
        session.build({("t", 1): st(0)})
    assert session.pending is None  # nothing was built


def test_one_request_in_flight() -> None:
    session = FetchSession()
    data = session.build(parts(st(0)))
    assert session.pending == data
    with pytest.raises(LocalProtocolError, match="one request in flight"):
        session.build(parts(st(0)))
    assert session.handle_response(0, 1)
    assert session.pending is None


# -- epochs


def test_next_epoch() -> None:
    assert [next_epoch(e) for e in (0, 1, 41, 2**31 - 2, 2**31 - 1, -1)] == [
        1,
        2,
        42,
        2**31 - 1,
        1,
        FINAL_EPOCH,
    ]


def test_epoch_wraps_to_one() -> None:
    session, held = established(st(0), session_id=5)
    session.epoch = 2**31 - 2  # as after ~2**31 round trips
    assert session.build(held).epoch == 2**31 - 2
    assert session.handle_response(0, 5)
    assert session.epoch == 2**31 - 1
    assert session.build(held).epoch == 2**31 - 1
    assert session.handle_response(0, 5)
    assert session.epoch == 1  # never 0: that would ask for a new session
    data = session.build(held)
    assert (data.epoch, data.is_full) == (1, False)


# -- responses and errors


def test_session_id_not_found_starts_afresh() -> None:
    session, _ = established(st(0), st(1), session_id=9)
    session.build(parts(st(0, 1)))
    assert not session.handle_response(SESSION_ID_NOT_FOUND, 0)
    assert (session.session_id, session.epoch, session.partitions) == (0, INITIAL_EPOCH, {})
    again = session.build(parts(st(0, 1)))
    assert (again.session_id, again.epoch, again.is_full) == (0, INITIAL_EPOCH, True)
    assert again.to_send == (st(0, 1),) and again.to_forget == ()


@pytest.mark.parametrize("code", [INVALID_EPOCH, TOPIC_ID_ERROR, UNKNOWN_SERVER_ERROR])
def test_other_errors_close_the_session_and_ask_for_a_new_one(code: int) -> None:
    session, _ = established(st(0), st(1), session_id=9)
    session.build(parts(st(0, 1)))
    assert not session.handle_response(code, 0)
    assert (session.session_id, session.epoch, session.partitions) == (9, INITIAL_EPOCH, {})
    again = session.build(parts(st(0, 1)))
    # Full, with the old id at epoch 0: the broker drops session 9 and makes a new one.
    assert (again.session_id, again.epoch, again.is_full) == (9, INITIAL_EPOCH, True)
    assert again.to_send == (st(0, 1),)
    assert session.handle_response(0, 10)
    assert (session.session_id, session.epoch) == (10, 1)


def test_an_error_on_a_full_request_keeps_asking() -> None:
    session = FetchSession()
    session.build(parts(st(0)))
    assert not session.handle_response(INVALID_EPOCH, 0)
    assert (session.session_id, session.epoch) == (0, INITIAL_EPOCH)
    assert session.build(parts(st(0))).is_full


def test_a_lost_request_closes_the_session() -> None:
    session, _ = established(st(0), session_id=9)
    session.build(parts(st(0, 1)))
    session.handle_error()
    assert (session.session_id, session.epoch, session.partitions) == (9, INITIAL_EPOCH, {})
    assert session.pending is None
    session.handle_error()  # idempotent, also with nothing pending
    assert (session.session_id, session.epoch) == (9, INITIAL_EPOCH)
    # A late answer to the lost request changes nothing.
    assert not session.handle_response(0, 9)
    assert (session.session_id, session.epoch) == (9, INITIAL_EPOCH)
    data = session.build(parts(st(0, 1)))
    assert (data.session_id, data.epoch, data.to_send) == (9, INITIAL_EPOCH, (st(0, 1),))


def test_a_broker_without_sessions_keeps_full_fetches() -> None:
    session = FetchSession()
    session.build(parts(st(0)))
    assert session.handle_response(0, 0)  # sessions disabled, cache full, or pre-v7
    assert (session.session_id, session.epoch, session.partitions) == (0, INITIAL_EPOCH, {})
    data = session.build(parts(st(0, 3)))
    assert data.is_full and data.to_send == (st(0, 3),)


def test_the_broker_closing_an_emptied_session() -> None:
    session, _ = established(st(0), session_id=4)
    data = session.build({})
    assert data.to_forget == (st(0),)
    assert session.handle_response(0, 0)  # the broker drops a session left empty
    assert (session.session_id, session.epoch, session.partitions) == (0, INITIAL_EPOCH, {})


# -- which partitions a response carries


def test_absence_from_an_incremental_response_means_no_new_data() -> None:
    session, _ = established(st(0), st(1), st(2), session_id=4)
    data = session.build(parts(st(0, 1), st(1), st(2)))
    seen = response_partitions(data, [("t", 2), ("t", 0)])
    assert seen.with_data == (("t", 2), ("t", 0))
    assert seen.without_data == (("t", 1),)
    assert seen.unexpected == () and seen.valid
    assert response_partitions(data, []).valid  # nothing new anywhere: fine
    assert session.handle_response(0, 4, returned=[("t", 2)])
    assert session.epoch == 2 and ("t", 1) in session.partitions


def test_unexpected_partitions_make_a_response_invalid() -> None:
    session, _ = established(st(0), session_id=4)
    data = session.build(parts(st(0, 1)))
    seen = response_partitions(data, [("t", 0), ("x", 0)])
    assert seen.unexpected == (("x", 0),) and not seen.valid
    assert not session.handle_response(0, 4, returned=[("t", 0), ("x", 0)])
    assert (session.session_id, session.epoch) == (4, INITIAL_EPOCH)  # close existing


def test_a_full_response_must_carry_every_partition() -> None:
    session = FetchSession()
    data = session.build(parts(st(0), st(1)))
    seen = response_partitions(data, [TopicPartition("t", 1)])
    assert seen.without_data == (("t", 0),) and not seen.valid
    assert response_partitions(data, [("t", 1), ("t", 0)]).valid
    # e.g. KIP-219: a throttled broker answers a full fetch with no partitions at all
    assert not session.handle_response(0, 0, returned=[])
    assert (session.session_id, session.epoch) == (0, INITIAL_EPOCH)
    session.build(parts(st(0), st(1)))
    assert session.handle_response(0, 8, returned=[("t", 0), ("t", 1)])
    assert (session.session_id, session.epoch) == (8, 1)


def test_topic_names_resolve_a_v13_response() -> None:
    session = FetchSession()
    data = session.build(parts(st(0), st(0, topic="u", tid=UID), st(0, topic="v", tid=None)))
    assert data.topic_names == {TID: "t", UID: "u"}


# -- topic ids


def test_topic_id_change_replaces_the_partition() -> None:
    session, _ = established(st(0), st(1), session_id=5)
    data = session.build(parts(st(0, tid=NEW_TID), st(1, tid=NEW_TID)))
    assert data.to_send == (st(0, tid=NEW_TID), st(1, tid=NEW_TID))
    assert data.to_forget == ()
    assert data.replaced == (st(0), st(1))
    assert data.uses_topic_ids
    assert session.handle_response(0, 5)
    assert session.partitions == parts(st(0, tid=NEW_TID), st(1, tid=NEW_TID))


def test_a_topic_id_appearing_is_an_alteration_not_a_replacement() -> None:
    session, _ = established(st(0, tid=None), session_id=5)
    data = session.build(parts(st(0)))
    assert (data.to_send, data.to_forget, data.replaced) == ((st(0),), (), ())
    # The session still holds no id for ("t", 0) until this succeeds, but the request
    # names only partitions with ids: it may go by id (and the broker will object with
    # FETCH_SESSION_TOPIC_ID_ERROR if the session was made by name).
    assert data.uses_topic_ids


@pytest.mark.parametrize("version", [12, 13, MAX_FETCH])
def test_replaced_partitions_are_forgotten_only_by_id(version: int) -> None:
    session, _ = established(st(0), st(1), st(2), session_id=5)
    data = session.build(parts(st(0, tid=NEW_TID), st(2, 7)))
    req = request(table(version), data)
    sent = [(p.partition, p.fetch_offset) for t in req.topics for p in t.partitions]
    assert sent == [(0, 0), (2, 7)]
    forgotten = [
        (getattr(f, "topic", None), getattr(f, "topic_id", None), tuple(f.partitions))
        for f in req.forgotten_topics_data
    ]
    if version >= 13:
        assert [t.topic_id for t in req.topics] == [NEW_TID, TID]
        # ("t", 1) dropped, and the old incarnation of ("t", 0): both under the old id
        assert forgotten == [(None, TID, (1, 0))]
    else:
        assert [t.topic for t in req.topics] == ["t"]
        # By name, forgetting ("t", 0) would drop the partition just re-added.
        assert forgotten == [("t", None, (1,))]


# -- sessionless mode and closing


def test_sessionless_never_asks_for_a_session() -> None:
    session = FetchSession(sessionless=True)
    assert session.sessionless
    for code, offset in [(0, 0), (INVALID_EPOCH, 1), (SESSION_ID_NOT_FOUND, 2), (0, 3)]:
        data = session.build(parts(st(0, offset), st(1)))
        assert (data.session_id, data.epoch, data.is_full) == (0, FINAL_EPOCH, True)
        assert keys(data.to_send) == [("t", 0), ("t", 1)]
        assert session.handle_response(code, 0) is (code == 0)
        assert (session.session_id, session.epoch, session.partitions) == (0, FINAL_EPOCH, {})
    session.build(parts(st(0)))
    session.handle_error()
    assert session.epoch == FINAL_EPOCH
    assert session.close() is None
    req = request(table(13), session.build(parts(st(0))))
    assert (req.session_id, req.session_epoch) == (0, FINAL_EPOCH)


def test_close_ends_the_session() -> None:
    session, held = established(st(0), session_id=77)
    session.build(held)  # in flight when the consumer leaves
    closing = session.close()
    assert closing is not None
    assert (closing.session_id, closing.epoch, closing.is_full) == (77, FINAL_EPOCH, True)
    assert (closing.to_send, closing.to_forget, closing.replaced) == ((), (), ())
    assert closing.session_partitions == {}
    assert (session.session_id, session.epoch, session.partitions) == (0, INITIAL_EPOCH, {})
    assert not session.handle_response(0, 77)  # the answer to the abandoned request
    assert session.session_id == 0
    assert session.close() is None  # nothing left to close
    for version in (7, 13):
        req = request(table(version), closing)
        assert (req.session_id, req.session_epoch) == (77, FINAL_EPOCH)
        assert (req.topics, req.forgotten_topics_data) == ((), ())


def test_close_after_an_error_still_closes_the_old_session() -> None:
    session, _ = established(st(0), session_id=3)
    session.build(parts(st(0, 1)))
    session.handle_error()
    closing = session.close()
    assert closing is not None and (closing.session_id, closing.epoch) == (3, FINAL_EPOCH)


# -- the kio request per version


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, MAX_FETCH])
def test_full_request_per_version(version: int) -> None:
    session = FetchSession()
    state = PartitionFetchState(
        topic="t",
        topic_id=TID,
        partition=3,
        fetch_offset=100,
        log_start_offset=-1,
        current_leader_epoch=4,
        partition_max_bytes=2048,
    )
    data = session.build(parts(st(0), state, st(0, topic="u", tid=UID)))
    req = request(table(version), data)
    assert req.__version__ == version
    assert req.max_wait == datetime.timedelta(milliseconds=250)
    assert (req.min_bytes, req.max_bytes, req.isolation_level) == (1, 1000, 1)
    if version >= 13:
        assert [t.topic_id for t in req.topics] == [TID, UID]
    else:
        assert [t.topic for t in req.topics] == ["t", "u"]
    (first, _) = req.topics
    assert [p.partition for p in first.partitions] == [0, 3]
    p3 = first.partitions[1]
    assert (p3.fetch_offset, p3.partition_max_bytes) == (100, 2048)
    if version >= 9:
        assert p3.current_leader_epoch == 4
    if version >= 7:
        assert (req.session_id, req.session_epoch, req.forgotten_topics_data) == (0, 0, ())
    else:
        assert not hasattr(req, "session_id")
    if version >= 11:
        assert req.rack_id == "rack-a"


@pytest.mark.parametrize("version", [7, 12, 13, MAX_FETCH])
def test_incremental_request_per_version(version: int) -> None:
    session, _ = established(st(0), st(1), st(0, topic="u", tid=UID), st(1, topic="u", tid=UID))
    data = session.build(parts(st(0, 4), st(0, topic="u", tid=UID), st(5, topic="w", tid=WID)))
    req = request(table(version), data)
    assert (req.session_id, req.session_epoch) == (42, 1)
    sent = [(p.partition, p.fetch_offset) for t in req.topics for p in t.partitions]
    assert sent == [(0, 4), (5, 0)]
    forgotten = [tuple(f.partitions) for f in req.forgotten_topics_data]
    assert forgotten == [(1,), (1,)]
    if version >= 13:
        assert [t.topic_id for t in req.topics] == [TID, WID]
        assert [f.topic_id for f in req.forgotten_topics_data] == [TID, UID]
    else:
        assert [t.topic for t in req.topics] == ["t", "w"]
        assert [f.topic for f in req.forgotten_topics_data] == ["t", "u"]


def test_before_v7_an_incremental_request_cannot_be_built() -> None:
    session, _ = established(st(0), st(1))
    data = session.build(parts(st(0, 4)))
    with pytest.raises(LocalProtocolError, match="v7"):
        request(table(6, low=4), data)


def test_a_partition_without_topic_id_caps_the_version_at_12() -> None:
    session = FetchSession()
    data = session.build(parts(st(0), st(0, topic="v", tid=None)))
    req = request(table(MAX_FETCH, low=4), data)
    assert req.__version__ == 12
    assert [t.topic for t in req.topics] == ["t", "v"]
    # A session holding an id-less partition forces names even if the changes have ids.
    session.handle_response(0, 3)
    incremental = session.build(parts(st(0, 9), st(0, topic="v", tid=None)))
    assert request(table(MAX_FETCH, low=4), incremental).__version__ == 12
    # A broker that only speaks v13+ cannot be asked by name.
    with pytest.raises(UnsupportedVersionError, match="no topic id"):
        request(table(MAX_FETCH, low=13), incremental)
