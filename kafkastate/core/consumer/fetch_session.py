"""Incremental fetch sessions (KIP-227): what a Fetch request to one broker must carry.

Theory of operation
-------------------
A consumer that fetches the same partitions over and over need not list them all in every
request: the broker keeps a *session* holding each partition's fetch state, and the client
sends only what changed. The client side (Java ``FetchSessionHandler``) tracks:

* ``session_id`` -- 0 until the broker created one;
* ``epoch`` -- 0: a full request that asks for a new session (closing any old one with the
  same id); -1 (``FINAL_EPOCH``): a full request with no session (sessionless, or closing);
  1, 2, ...: incremental requests, one per response, wrapping from 2**31-1 back to 1;
* the partitions in the session and the state the broker knows of each.

Each :meth:`FetchSession.build` compares the partitions to fetch next with the session's:
a full request sends them all; an incremental one sends the added and altered ones
(offset, log start, leader epoch, max bytes or topic id changed) and *forgets* the ones no
longer wanted. The broker answers an incremental request with only the partitions that have
data or a changed state: absence means "nothing new", not an error.

:meth:`FetchSession.handle_response` moves the epoch on: a full request answered with a
session id starts the session at epoch 1; an incremental one goes to the next epoch.
FETCH_SESSION_ID_NOT_FOUND drops the session (next: session 0, epoch 0);
INVALID_FETCH_SESSION_EPOCH, any other top-level error, and a lost request
(:meth:`FetchSession.handle_error`) close it (same id, epoch 0: a full request that replaces
it). Until a response arrives, the partitions sent are "pending"; only a successful
response makes them the session's.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
from kafkastate.errors import LocalProtocolError

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "FetchRequestData",
    "FetchSession",
    "PartitionFetchState",
    "fetch_request_from_session",
]

INITIAL_EPOCH: Final = 0
"""A full fetch that asks for a new session."""
FINAL_EPOCH: Final = -1
"""A full fetch without a session (or closing one)."""
_MAX_EPOCH: Final = 2**31 - 1
_SESSION_ID_NOT_FOUND: Final = 70
_INVALID_SESSION_EPOCH: Final = 71

_TP = tuple[str, int]


@attrs.frozen(kw_only=True)
class PartitionFetchState:
    """What a Fetch request says about one partition."""

    topic: str
    """The topic name."""
    topic_id: uuid.UUID | None
    """The topic id (KIP-516), None if unknown (requests by name before Fetch v13)."""
    partition: int
    """The partition."""
    fetch_offset: int
    """Where to read from."""
    log_start_offset: int = -1
    """-1 for consumers (followers send theirs)."""
    current_leader_epoch: int = -1
    """The leader epoch we believe current (KIP-320), -1 if unknown."""
    partition_max_bytes: int = 1_048_576
    """``max.partition.fetch.bytes``."""


@attrs.frozen(kw_only=True)
class FetchRequestData:
    """The session part of one Fetch request, from :meth:`FetchSession.build`."""

    session_id: int
    """The session, 0 for none."""
    epoch: int
    """The request's session epoch."""
    to_send: tuple[PartitionFetchState, ...]
    """The partitions to put in the request (all of them for a full fetch)."""
    to_forget: tuple[PartitionFetchState, ...]
    """Partitions to remove from the session (incremental fetches only)."""
    session_partitions: Mapping[_TP, PartitionFetchState]
    """Everything the session holds once this request succeeds."""

    @property
    def is_full(self) -> bool:
        """Whether the request lists every partition (epoch 0 or -1)."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSession:
    """The client side of one broker's fetch session.

    Args:
        sessionless: never ask for a session (every request full, epoch -1).
    """

    def __init__(self, *, sessionless: bool = False) -> None:
        self._sessionless = sessionless
        self.session_id = 0
        """The broker's session id, 0 for none."""
        self.epoch = FINAL_EPOCH if sessionless else INITIAL_EPOCH
        """The epoch of the next request."""
        self._partitions: dict[_TP, PartitionFetchState] = {}
        self._pending: FetchRequestData | None = None

    @property
    def partitions(self) -> Mapping[_TP, PartitionFetchState]:
        """What the broker's session holds (after the last successful response)."""
        return self._partitions

    def build(self, next_partitions: Mapping[_TP, PartitionFetchState]) -> FetchRequestData:
        """The session part of the next request for ``next_partitions``.

        Raises:
            LocalProtocolError: the previous request has no answer yet (one at a time).
        """
        if self._pending is not None:
            raise LocalProtocolError("a fetch session has one request in flight at a time")
        wanted = dict(next_partitions)
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            data = FetchRequestData(
                session_id=self.session_id,
                epoch=self.epoch,
                to_send=tuple(wanted.values()),
                to_forget=(),
                session_partitions=wanted,
            )
        else:
            to_send = tuple(
                state for key, state in wanted.items() if self._partitions.get(key) != state
            )
            to_forget = tuple(state for key, state in self._partitions.items() if key not in wanted)
            # A topic id change is a different topic: forget the old one (KIP-516).
            to_forget += tuple(
                old
                for key, old in self._partitions.items()
                if key in wanted and old.topic_id != wanted[key].topic_id
            )
            data = FetchRequestData(
                session_id=self.session_id,
                epoch=self.epoch,
                to_send=to_send,
                to_forget=to_forget,
                session_partitions=wanted,
            )
        self._pending = data
        return data

    def handle_response(self, error_code: int, response_session_id: int) -> None:
        """The broker answered the pending request (``error_code`` is the top-level one)."""
        pending, self._pending = self._pending, None
        if self._sessionless:
            self.session_id, self.epoch = 0, FINAL_EPOCH
            if error_code == 0 and pending is not None:
                self._partitions = dict(pending.session_partitions)
            return
        if error_code != 0:
            if error_code == _SESSION_ID_NOT_FOUND:
                self.session_id = 0
            self.epoch = INITIAL_EPOCH  # close the existing one (or start afresh)
            self._partitions = {}
            return
        if pending is None:
            return
        if pending.is_full:
            if response_session_id == 0:
                self.session_id, self.epoch = 0, INITIAL_EPOCH  # the broker made none
            else:
                self.session_id, self.epoch = response_session_id, 1
        else:
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1
        self._partitions = dict(pending.session_partitions)

    def handle_error(self) -> None:
        """The request got no response (timeout, connection lost): the broker's view is
        unknown, so the next request is a full one replacing the session."""
        self._pending = None
        if not self._sessionless:
            self.epoch = INITIAL_EPOCH
        self._partitions = {}

    def close(self) -> FetchRequestData:
        """A request that closes the session (epoch -1, no partitions); afterwards the
        session starts afresh."""
        data = FetchRequestData(
            session_id=self.session_id,
            epoch=FINAL_EPOCH,
            to_send=(),
            to_forget=(),
            session_partitions={},
        )
        self.session_id = 0
        self.epoch = FINAL_EPOCH if self._sessionless else INITIAL_EPOCH
        self._partitions = {}
        self._pending = None
        return data


def fetch_request_from_session(
    versions: ApiVersionTable,
    data: FetchRequestData,
    *,
    max_wait: float,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    rack_id: str = "",
) -> Any:
    """The kio Fetch request for ``data``: by topic name before v13, by topic id since.

    Args:
        versions: the negotiated versions.
        data: from :meth:`FetchSession.build`.
        max_wait: seconds the broker may wait for ``min_bytes``.
        min_bytes: ``fetch.min.bytes``.
        max_bytes: ``fetch.max.bytes``.
        isolation_level: 0 read_uncommitted, 1 read_committed.
        rack_id: ``client.rack`` (KIP-392).
    """
    cls = versions.request_type(ApiKey.FETCH)
    topic_cls = nested_type(cls, "FetchTopic")
    part_cls = nested_type(cls, "FetchPartition")
    topics = tuple(
        build(topic_cls, topic=name, topic_id=tid, partitions=tuple(parts))
        for (name, tid), parts in _group(
            data.to_send,
            lambda s: build(
                part_cls,
                partition=s.partition,
                current_leader_epoch=s.current_leader_epoch,
                fetch_offset=s.fetch_offset,
                last_fetched_epoch=-1,
                log_start_offset=s.log_start_offset,
                partition_max_bytes=s.partition_max_bytes,
            ),
        )
    )
    forgotten: tuple[Any, ...] = ()
    if data.to_forget:  # only in incremental requests, so v7+ (sessions) has the type
        forgotten_cls = nested_type(cls, "ForgottenTopic")
        forgotten = tuple(
            build(forgotten_cls, topic=name, topic_id=tid, partitions=tuple(parts))
            for (name, tid), parts in _group(data.to_forget, lambda s: s.partition)
        )
    return build(
        cls,
        replica_id=-1,
        max_wait=datetime.timedelta(seconds=max_wait),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=data.session_id,
        session_epoch=data.epoch,
        topics=topics,
        forgotten_topics_data=forgotten,
        rack_id=rack_id,
    )


def _group(
    states: Iterable[PartitionFetchState], item: Any
) -> list[tuple[tuple[str, uuid.UUID | None], list[Any]]]:
    """Group by topic, in first-seen order (never a set: the order reaches the wire)."""
    out: dict[tuple[str, uuid.UUID | None], list[Any]] = {}
    for state in states:
        out.setdefault((state.topic, state.topic_id), []).append(item(state))
    return list(out.items())
