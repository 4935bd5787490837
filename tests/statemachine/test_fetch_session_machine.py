"""A Hypothesis model of a FetchSession against a broker's fetch session cache (KIP-227).

The broker model follows the server rules of KIP-227 (Kafka's ``FetchManager.newContext``
and ``FetchSession.update``), reading the kio Fetch request the client builds after a trip
through kio's encoder and decoder:

* before Fetch v7 there are no sessions: every request is answered with session id 0;
* a full request (epoch 0 or -1) drops the session it names; epoch -1 makes no new one,
  epoch 0 makes one (epoch 1) holding exactly the request's partitions, if there is room;
* an incremental request for an unknown session gets FETCH_SESSION_ID_NOT_FOUND, one with
  the wrong epoch INVALID_FETCH_SESSION_EPOCH, one by topic name for a session made by id
  (or the reverse) FETCH_SESSION_TOPIC_ID_ERROR; otherwise its partitions are added or
  updated, then the forgotten ones removed; a session left empty is dropped (session id 0
  in the response), else its epoch moves on.

Partitions are keyed by topic id from Fetch v13 on, by name before. The test also loses
requests (processed by the broker or not), evicts sessions, fills the broker's cache,
re-creates topics (new topic ids), hides topic ids, closes the session, and jumps epochs to
the wrap-around point.

Promises checked:
- after every successful response, the client's session partitions are exactly what the
  broker's session holds (or nothing, when the broker holds no session for it), and the
  epochs agree;
- whenever the client's next request is incremental and the broker still has its session,
  the two agree (so an incremental request never relies on something the broker lacks);
- a refused response or a lost request always leads to a full request;
- a sessionless client never makes the broker keep a session.
"""

from __future__ import annotations

import dataclasses
import io
import uuid
from typing import Any

import attrs
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from kio.serial import entity_reader, entity_writer

from kafkastate.core.consumer.fetch.request import fetch_request_from_session
from kafkastate.core.consumer.fetch.session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchRequestData,
    FetchSession,
    PartitionFetchState,
    next_epoch,
)
from kafkastate.core.protocol.requests import nested_type
from kafkastate.core.protocol.versions import (
    CLIENT_VERSIONS,
    ApiKey,
    ApiVersionTable,
    request_type,
)

MAX_FETCH = CLIENT_VERSIONS[ApiKey.FETCH][1]
SESSION_ID_NOT_FOUND = 70
INVALID_EPOCH = 71
TOPIC_ID_ERROR = 106

TOPICS = ("a", "b")
PARTITIONS = (0, 1, 2)

# What the broker remembers of a partition: the request fields its version carries.
Wire = tuple[int, int, int | None, int | None]
BrokerKey = tuple[object, int]


@attrs.define
class BrokerSession:
    epoch: int
    by_id: bool
    parts: dict[BrokerKey, Wire]


class Broker:
    """One broker's fetch session cache, as KIP-227 describes the server side."""

    def __init__(self) -> None:
        self.sessions: dict[int, BrokerSession] = {}
        self.room = True
        self._next_id = 1000

    @staticmethod
    def _wire(p: Any) -> Wire:
        return (
            p.fetch_offset,
            p.partition_max_bytes,
            getattr(p, "log_start_offset", None),
            getattr(p, "current_leader_epoch", None),
        )

    def handle(self, req: Any) -> tuple[int, int]:
        """Process a Fetch request: ``(top-level error code, response session id)``."""
        version = int(req.__version__)
        if version < 7:
            return 0, 0  # no session fields on the wire, and none in the response
        by_id = version >= 13

        def topic_key(t: Any) -> object:
            return t.topic_id if by_id else t.topic

        fetch = {
            (topic_key(t), p.partition): self._wire(p) for t in req.topics for p in t.partitions
        }
        forget = [(topic_key(f), p) for f in req.forgotten_topics_data for p in f.partitions]
        sid, epoch = req.session_id, req.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if sid != 0:
                self.sessions.pop(sid, None)  # any session a full request names is closed
            if epoch == FINAL_EPOCH or not self.room:
                return 0, 0
            self._next_id += 1
            self.sessions[self._next_id] = BrokerSession(epoch=1, by_id=by_id, parts=fetch)
            return 0, self._next_id
        session = self.sessions.get(sid)
        if session is None:
            return SESSION_ID_NOT_FOUND, 0
        if session.epoch != epoch:
            return INVALID_EPOCH, 0
        if session.by_id != by_id:
            return TOPIC_ID_ERROR, 0
        session.parts.update(fetch)  # added or updated first...
        for key in forget:  # ...then forgotten
            session.parts.pop(key, None)
        if not session.parts:
            del self.sessions[sid]
            return 0, 0
        session.epoch = next_epoch(session.epoch)
        return 0, sid


def roundtrip(entity: Any) -> Any:
    buf = io.BytesIO()
    entity_writer(type(entity))(buf, entity)
    decoded, _ = entity_reader(type(entity))(memoryview(buf.getvalue()), 0)
    return decoded


wanted_entries = st.lists(
    st.tuples(
        st.sampled_from(TOPICS),
        st.sampled_from(PARTITIONS),
        st.integers(0, 2),  # fetch offset
        st.integers(-1, 1),  # leader epoch
        st.sampled_from([1024, 2048]),  # max bytes
        st.sampled_from([-1, 0]),  # log start offset
    ),
    unique_by=lambda e: (e[0], e[1]),
    min_size=1,
    max_size=6,
)


class FetchSessionModel(RuleBasedStateMachine):
    @initialize(
        version=st.sampled_from([4, 7, 9, 12, 13, MAX_FETCH]),
        sessionless=st.sampled_from([False, False, False, True]),
    )
    def setup(self, version: int, sessionless: bool) -> None:
        self.version = version
        self.versions = ApiVersionTable({ApiKey.FETCH: (4, version)})
        fetch_partition = nested_type(request_type(ApiKey.FETCH, version), "FetchPartition")
        self.fields = {f.name for f in dataclasses.fields(fetch_partition)}
        self.client = FetchSession(sessionless=sessionless)
        self.broker = Broker()
        self.topic_ids: dict[str, uuid.UUID | None] = {
            t: uuid.UUID(int=i + 1) for i, t in enumerate(TOPICS)
        }
        self._uuids = len(TOPICS) + 1
        self.last: dict[tuple[str, int], PartitionFetchState] = {}

    # -------------------------------------------------------------- plumbing

    def _states(self, entries: list[Any]) -> dict[tuple[str, int], PartitionFetchState]:
        return {
            (topic, partition): PartitionFetchState(
                topic=topic,
                topic_id=self.topic_ids[topic],
                partition=partition,
                fetch_offset=offset,
                current_leader_epoch=leader_epoch,
                partition_max_bytes=max_bytes,
                log_start_offset=log_start,
            )
            for topic, partition, offset, leader_epoch, max_bytes, log_start in entries
        }

    def _request(self, data: FetchRequestData) -> Any:
        req = roundtrip(
            fetch_request_from_session(
                self.versions, data, max_wait=0.5, min_bytes=1, max_bytes=1 << 20, isolation_level=0
            )
        )
        if int(req.__version__) >= 7:
            assert (req.session_id, req.session_epoch) == (data.session_id, data.epoch)
        else:
            assert data.is_full
        return req

    def _project(self, by_id: bool) -> dict[BrokerKey, Wire]:
        """The client's session partitions as the broker would hold them."""
        out: dict[BrokerKey, Wire] = {}
        for s in self.client.partitions.values():
            key = (s.topic_id if by_id else s.topic, s.partition)
            out[key] = (
                s.fetch_offset,
                s.partition_max_bytes,
                s.log_start_offset if "log_start_offset" in self.fields else None,
                s.current_leader_epoch if "current_leader_epoch" in self.fields else None,
            )
        return out

    def _round_trip(self, wanted: dict[tuple[str, int], PartitionFetchState]) -> None:
        data = self.client.build(wanted)
        assert data.session_partitions == wanted
        code, sid = self.broker.handle(self._request(data))
        ok = self.client.handle_response(code, sid)
        self.last = wanted
        assert ok is (code == 0)
        if not ok or sid == 0:
            assert self.client.partitions == {}
            assert self.client.epoch in (INITIAL_EPOCH, FINAL_EPOCH)
            if code == SESSION_ID_NOT_FOUND:
                assert self.client.session_id == 0
            return
        # The promise: the client's view of the session is the broker's.
        session = self.broker.sessions[sid]
        assert self.client.session_id == sid
        assert self.client.epoch == session.epoch
        assert self._project(session.by_id) == session.parts

    # -------------------------------------------------------------- rules

    @rule(entries=wanted_entries)
    def fetch(self, entries: list[Any]) -> None:
        self._round_trip(self._states(entries))

    @rule(data=st.data())
    def fetch_again(self, data: st.DataObject) -> None:
        """The same partitions, one of them moved on (the common case)."""
        wanted = {
            k: attrs.evolve(s, topic_id=self.topic_ids[s.topic]) for k, s in self.last.items()
        }
        if wanted:
            key = data.draw(st.sampled_from(sorted(wanted)))
            wanted[key] = attrs.evolve(wanted[key], fetch_offset=wanted[key].fetch_offset + 1)
        self._round_trip(wanted)

    @rule(entries=wanted_entries, processed=st.booleans())
    def lose_request(self, entries: list[Any], processed: bool) -> None:
        req = self._request(self.client.build(self._states(entries)))
        if processed:
            self.broker.handle(req)  # the broker acted on it; the response got lost
        self.client.handle_error()
        assert self.client.epoch in (INITIAL_EPOCH, FINAL_EPOCH)
        assert self.client.partitions == {}

    @rule()
    def fetch_nothing(self) -> None:
        self._round_trip({})

    @rule()
    def evict(self) -> None:
        self.broker.sessions.clear()

    @rule(room=st.booleans())
    def cache_room(self, room: bool) -> None:
        self.broker.room = room

    @rule(topic=st.sampled_from(TOPICS))
    def recreate_topic(self, topic: str) -> None:
        self._uuids += 1
        self.topic_ids[topic] = uuid.UUID(int=self._uuids)

    @rule(topic=st.sampled_from(TOPICS))
    def hide_topic_id(self, topic: str) -> None:
        self.topic_ids[topic] = None  # e.g. metadata from a broker without KIP-516

    @rule()
    def close(self) -> None:
        had = self.client.session_id
        data = self.client.close()
        if data is None:
            assert had == 0 or self.client.sessionless
            return
        assert (data.session_id, data.epoch, data.to_send) == (had, FINAL_EPOCH, ())
        self.broker.handle(self._request(data))
        assert had not in self.broker.sessions
        assert (self.client.session_id, self.client.partitions) == (0, {})

    @precondition(lambda self: self.client.epoch > 0)
    @rule()
    def near_wrap(self) -> None:
        """As after ~2**31 round trips: the next epochs are 2**31-1, then 1."""
        session = self.broker.sessions.get(self.client.session_id)
        if session is not None and session.epoch == self.client.epoch:
            session.epoch = self.client.epoch = 2**31 - 2

    # -------------------------------------------------------------- invariants

    @invariant()
    def incremental_only_on_a_shared_view(self) -> None:
        client = self.client
        if client.epoch > 0:
            assert client.session_id != 0
            session = self.broker.sessions.get(client.session_id)
            if session is not None:  # evicted is fine: the broker will say so
                assert session.epoch == client.epoch
                assert self._project(session.by_id) == session.parts
        else:
            assert client.partitions == {}

    @invariant()
    def sessionless_makes_no_session(self) -> None:
        if self.client.sessionless:
            assert self.broker.sessions == {}
            assert (self.client.session_id, self.client.epoch) == (0, FINAL_EPOCH)


TestFetchSessionModel = FetchSessionModel.TestCase
TestFetchSessionModel.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
