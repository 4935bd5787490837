"""Incremental fetch sessions (KIP-227): what a Fetch request to one broker must carry.

Theory of operation
-------------------
A consumer that fetches the same partitions over and over need not list them all in every
request: the broker keeps a *session* holding each partition's fetch state, and the client
sends only what changed. The client side (Java ``FetchSessionHandler``), one
:class:`FetchSession` per broker, tracks:

* ``session_id`` -- 0 until the broker created one;
* ``epoch`` of the next request -- 0 (:data:`INITIAL_EPOCH`): a full request asking for a new
  session, closing the old one if ``session_id`` is set; -1 (:data:`FINAL_EPOCH`): a full
  request that creates no session (sessionless, or closing one); 1, 2, ...: incremental
  requests, one per successful response, wrapping from 2**31-1 back to 1 (:func:`next_epoch`);
* the partitions in the broker's session and the state the broker holds for each.

:meth:`FetchSession.build` compares the partitions to fetch next with the session's. A full
request sends them all. An incremental one sends the added and altered ones (fetch offset,
log start offset, leader epoch, max bytes or topic id changed) and *forgets* the ones no
longer wanted. A partition whose topic id changed under the same name (the topic was
deleted and re-created, KIP-516) is *replaced*: sent with the new id and, where the request
names topics by id (Fetch v13+), the old id is forgotten too; before v13 the broker knows
the partition by name only, and forgetting the name would drop the re-added partition
(Java ``FetchRequest.Builder`` does the same).

The broker answers an incremental request with only the partitions that have news: absence
means "nothing new", not an error (:func:`response_partitions`).

:meth:`FetchSession.handle_response` moves the epoch on (Java ``handleResponse``):

=====================================  ==================================================
response                               next request
=====================================  ==================================================
FETCH_SESSION_ID_NOT_FOUND             session 0, epoch 0 (start afresh)
any other top-level error              same session id, epoch 0 (close it, make a new one)
full request, session id 0             session 0, epoch 0 (the broker made no session)
full request, session id N             session N, epoch 1
incremental, session id 0              session 0, epoch 0 (the broker closed it)
incremental, session id N              epoch + 1 (2**31-1 wraps to 1)
=====================================  ==================================================

A lost request (:meth:`FetchSession.handle_error`) closes the session like an error. Until a
response arrives the partitions sent are *pending*; only a successful response makes them the
session's (Java updates its view when it builds; the wire is the same, because every path
that does not commit makes the next request a full one). One request per session is in
flight at a time.

Pure: no IO, no clock; partitions are kept in dicts in the caller's order.
"""

from __future__ import annotations

import itertools
import types
import uuid
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from kafkastate.errors import LocalProtocolError

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "SESSION_MIN_VERSION",
    "FetchRequestData",
    "FetchSession",
    "PartitionFetchState",
    "ResponsePartitions",
    "next_epoch",
    "response_partitions",
]

INVALID_SESSION_ID: Final = 0
"""The session id of a request or response without a session."""
INITIAL_EPOCH: Final = 0
"""A full fetch that asks for a new session."""
FINAL_EPOCH: Final = -1
"""A full fetch without a session (or closing one)."""
SESSION_MIN_VERSION: Final = 7
"""Fetch v7 carries session id, epoch and forgotten topics (KIP-227)."""

_MAX_EPOCH: Final = 2**31 - 1
_FETCH_SESSION_ID_NOT_FOUND: Final = 70

_TP = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch`` (Java ``FetchMetadata.nextEpoch``).

    Args:
        epoch: the current epoch.

    Returns:
        ``epoch + 1``, wrapping from 2**31-1 to 1 (0 asks for a new session, so it is
        skipped); :data:`FINAL_EPOCH` stays final.
    """
    if epoch < 0:
        return FINAL_EPOCH
    if epoch >= _MAX_EPOCH:
        return 1
    return epoch + 1


@attrs.frozen(kw_only=True)
class PartitionFetchState:
    """What a Fetch request says about one partition."""

    topic: str
    """The topic name."""
    topic_id: uuid.UUID | None
    """The topic id (KIP-516); None if unknown, which limits requests to Fetch v12."""
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

    @property
    def key(self) -> _TP:
        """``(topic, partition)``: how sessions key partitions."""
        return (self.topic, self.partition)


def _frozen_map(value: Mapping[_TP, PartitionFetchState]) -> Mapping[_TP, PartitionFetchState]:
    return types.MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class FetchRequestData:
    """The session part of one Fetch request, from :meth:`FetchSession.build`."""

    session_id: int
    """The session, 0 for none."""
    epoch: int
    """The request's session epoch."""
    to_send: tuple[PartitionFetchState, ...]
    """The partitions to put in the request: all of them for a full fetch, the added and
    altered ones for an incremental one (in the order the caller listed them)."""
    to_forget: tuple[PartitionFetchState, ...] = ()
    """Session partitions no longer wanted, as the session held them (incremental only)."""
    replaced: tuple[PartitionFetchState, ...] = ()
    """Session partitions whose topic id changed, with the *old* id; their successors are
    in :attr:`to_send`. Forgotten on the wire only where topics go by id (Fetch v13+)."""
    session_partitions: Mapping[_TP, PartitionFetchState] = attrs.field(
        factory=dict, converter=_frozen_map
    )
    """Everything the broker's session holds once this request succeeds: match the
    response against it (:func:`response_partitions`)."""

    @property
    def is_full(self) -> bool:
        """Whether the request lists every partition (epoch 0 or -1)."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    @property
    def uses_topic_ids(self) -> bool:
        """Whether every partition the request or the session names has a topic id: the
        condition for Fetch v13+ (Java ``canUseTopicIds``)."""
        return all(
            s.topic_id is not None
            for s in itertools.chain(self.session_partitions.values(), self.to_forget)
        )

    @property
    def topic_names(self) -> Mapping[uuid.UUID, str]:
        """Topic id -> name for the session's partitions, to read a v13+ response with."""
        return {
            s.topic_id: s.topic for s in self.session_partitions.values() if s.topic_id is not None
        }


@attrs.frozen(kw_only=True)
class ResponsePartitions:
    """How the partitions of a Fetch response relate to the request (Java
    ``verifyFullFetchResponsePartitions`` / ``verifyIncrementalFetchResponsePartitions``)."""

    is_full: bool
    """Whether the request was a full one."""
    with_data: tuple[_TP, ...]
    """Session partitions the response carries (data, an error, or new metadata such as the
    high watermark), in response order."""
    without_data: tuple[_TP, ...]
    """Session partitions the response leaves out, in session order. In an incremental
    response this only means "nothing new since the last response": the partition stays in
    the session and is fetched from the same offset again. A full response must carry
    every partition, so there any absence makes the response invalid."""
    unexpected: tuple[_TP, ...]
    """Partitions the response carries that the session does not hold."""

    @property
    def valid(self) -> bool:
        """Whether the response may be used: nothing unexpected, and nothing missing from a
        full response."""
        return not self.unexpected and not (self.is_full and self.without_data)


def response_partitions(data: FetchRequestData, returned: Iterable[_TP]) -> ResponsePartitions:
    """Sort the session's partitions by whether a Fetch response carried them.

    Args:
        data: the request the response answers.
        returned: ``(topic, partition)`` of every partition in the response (resolve v13+
            topic ids with :attr:`FetchRequestData.topic_names`).

    Returns:
        The partitions with data, without data, and unexpected ones.
    """
    session = data.session_partitions
    seen = dict.fromkeys((str(t), int(p)) for t, p in returned)  # ordered, de-duplicated
    return ResponsePartitions(
        is_full=data.is_full,
        with_data=tuple(key for key in seen if key in session),
        without_data=tuple(key for key in session if key not in seen),
        unexpected=tuple(key for key in seen if key not in session),
    )


class FetchSession:
    """The client side of one broker's fetch session (Java ``FetchSessionHandler``).

    Args:
        sessionless: never ask for a session: every request is full, with session 0 and
            epoch -1 (for brokers or tests that want no sessions).
    """

    def __init__(self, *, sessionless: bool = False) -> None:
        self._sessionless = sessionless
        self.session_id: int = INVALID_SESSION_ID
        """The broker's session id, 0 for none."""
        self.epoch: int = FINAL_EPOCH if sessionless else INITIAL_EPOCH
        """The epoch of the next request."""
        self.last_response: float | None = None
        """When the last response arrived (the ``now`` given to :meth:`handle_response`),
        on the driver's clock; None if never. Brokers evict sessions idle for
        ``min.incremental.fetch.session.eviction.ms``."""
        self._partitions: dict[_TP, PartitionFetchState] = {}
        self._pending: FetchRequestData | None = None

    @property
    def sessionless(self) -> bool:
        """Whether this session never asks the broker for one."""
        return self._sessionless

    @property
    def partitions(self) -> Mapping[_TP, PartitionFetchState]:
        """What the broker's session holds as of the last successful response; empty when
        there is no session or the next request is a full one anyway."""
        return types.MappingProxyType(self._partitions)

    @property
    def pending(self) -> FetchRequestData | None:
        """The request built and not answered yet, if any."""
        return self._pending

    def build(self, next_partitions: Mapping[_TP, PartitionFetchState]) -> FetchRequestData:
        """The session part of the next request, to fetch ``next_partitions``.

        Args:
            next_partitions: ``(topic, partition) -> state`` of every partition to fetch
                from this broker; the order is kept on the wire (a full response fills
                partitions in request order until ``fetch.max.bytes`` runs out).

        Returns:
            What the request must carry; pass it to
            :func:`~kafkastate.core.consumer.fetch.request.fetch_request_from_session`.

        Raises:
            LocalProtocolError: a request is still pending (one at a time), or a key is
                not its state's ``(topic, partition)``.
        """
        if self._pending is not None:
            raise LocalProtocolError("a fetch session has one request in flight at a time")
        wanted = dict(next_partitions)
        for key, state in wanted.items():
            if key != state.key:
                raise LocalProtocolError(
                    f"fetch session key {key!r} does not match its partition {state.key!r}"
                )
        if self.epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            data = FetchRequestData(
                session_id=self.session_id,
                epoch=self.epoch,
                to_send=tuple(wanted.values()),
                session_partitions=wanted,
            )
        else:
            data = self._incremental(wanted)
        self._pending = data
        return data

    def _incremental(self, wanted: dict[_TP, PartitionFetchState]) -> FetchRequestData:
        held = self._partitions
        to_send: list[PartitionFetchState] = []
        replaced: list[PartitionFetchState] = []
        for key, state in wanted.items():
            old = held.get(key)
            if old == state:
                continue  # the broker has it as it is: leave it out (KIP-227)
            to_send.append(state)
            if (
                old is not None
                and old.topic_id is not None
                and state.topic_id is not None
                and old.topic_id != state.topic_id
            ):
                # Same name, new topic (KIP-516): only both ids known make it a replacement;
                # an id appearing or vanishing is an ordinary alteration (Java does the same).
                replaced.append(old)
        return FetchRequestData(
            session_id=self.session_id,
            epoch=self.epoch,
            to_send=tuple(to_send),
            to_forget=tuple(state for key, state in held.items() if key not in wanted),
            replaced=tuple(replaced),
            session_partitions=wanted,
        )

    def handle_response(
        self,
        error_code: int,
        response_session_id: int,
        now: float | None = None,
        *,
        returned: Iterable[_TP] | None = None,
    ) -> bool:
        """The broker answered the pending request.

        Args:
            error_code: the response's top-level error code.
            response_session_id: the response's session id (0 before Fetch v7).
            now: when the response arrived, on the driver's clock (kept in
                :attr:`last_response`).
            returned: ``(topic, partition)`` of every partition in the response; if given,
                a response that carries unexpected partitions, or a full response that
                leaves some out, is refused as Java does (:func:`response_partitions`).

        Returns:
            Whether the response's partition data may be used. False for an error, a
            refused response, or a response to a request this session already gave up on
            (after :meth:`handle_error` or :meth:`close`), which is otherwise ignored.
        """
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        if now is not None:
            self.last_response = now
        valid = returned is None or response_partitions(pending, returned).valid
        if self._sessionless:
            return error_code == 0 and valid
        if error_code != 0:
            if error_code == _FETCH_SESSION_ID_NOT_FOUND:
                self._next(INVALID_SESSION_ID, INITIAL_EPOCH)
            else:
                # INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR, anything else:
                # close the session and ask for a new one (nextCloseExistingAttemptNew).
                self._next(self.session_id, INITIAL_EPOCH)
            return False
        if not valid:
            if pending.is_full:
                self._next(INVALID_SESSION_ID, INITIAL_EPOCH)
            else:
                self._next(self.session_id, INITIAL_EPOCH)
            return False
        if response_session_id == INVALID_SESSION_ID:
            # A full request the broker made no session for (sessions disabled, cache full,
            # pre-v7), or an incremental one that closed the session (it emptied).
            self._next(INVALID_SESSION_ID, INITIAL_EPOCH)
        elif pending.is_full:
            self._next(response_session_id, next_epoch(INITIAL_EPOCH))
            self._partitions = dict(pending.session_partitions)
        else:
            self._next(self.session_id, next_epoch(self.epoch))
            self._partitions = dict(pending.session_partitions)
        return True

    def handle_error(self) -> None:
        """The pending request got no response (timeout, connection lost, or it could not
        be sent): the broker's view is unknown, so the next request is a full one that
        closes the session and asks for a new one (Java ``handleError``). Idempotent."""
        self._pending = None
        if not self._sessionless:
            self._next(self.session_id, INITIAL_EPOCH)

    def close(self) -> FetchRequestData | None:
        """The request that closes the broker's session, for a consumer that leaves.

        Returns:
            A request with the session id, epoch -1 and no partitions; None when there is
            no session to close. Either way this object starts afresh (session 0), and a
            response to a request still pending is ignored.
        """
        session_id = self.session_id
        self._pending = None
        self._next(INVALID_SESSION_ID, FINAL_EPOCH if self._sessionless else INITIAL_EPOCH)
        if self._sessionless or session_id == INVALID_SESSION_ID:
            return None
        return FetchRequestData(session_id=session_id, epoch=FINAL_EPOCH, to_send=())

    def _next(self, session_id: int, epoch: int) -> None:
        self.session_id = session_id
        self.epoch = epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self._partitions = {}
