"""Building Fetch requests: which partitions to fetch from which node, and the request.

Theory of operation
-------------------
Every assigned partition that is FETCHING, not paused or revoked, not named by a request in
flight and has no fetched data waiting for the application is *fetchable*
(:func:`fetchable`); it goes to its leader, or to the preferred read replica the leader
named (KIP-392, :mod:`.follower`). One Fetch request per node is in flight at a time. A
Fetch that would name only partitions already at their end (:func:`caught_up`) waits while
another partition of the same node still has data for the application
(:func:`buffered_on`): the broker would hold it for ``fetch.max.wait.ms``, and the partition
being drained could not be fetched meanwhile.

The node's fetch session (KIP-227, :mod:`.session`) decides what the request carries;
:func:`fetch_request_from_session` turns that into the Fetch entity of the negotiated
version (Fetch protocol: topics by name up to v12, by topic id from v13, KIP-516).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from kafkastate.core.client import Client, RequestId
from kafkastate.core.consumer.fetch import follower
from kafkastate.core.consumer.fetch.decode import _Completed
from kafkastate.core.consumer.fetch.session import (
    SESSION_MIN_VERSION,
    FetchRequestData,
    FetchSession,
    PartitionFetchState,
)
from kafkastate.core.consumer.fetch.state import PositionState, TopicPartition, _Partition
from kafkastate.core.metadata import ClusterMetadata, NodeId, PartitionMetadata
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import (
    CLIENT_VERSIONS,
    ApiKey,
    ApiVersionTable,
    api_name,
    request_type,
)
from kafkastate.errors import LocalProtocolError, UnsupportedVersionError

if TYPE_CHECKING:
    from kafkastate.core.consumer.fetcher import FetcherConfig

__all__ = [
    "TOPIC_ID_MIN_VERSION",
    "Fetches",
    "buffered_on",
    "caught_up",
    "fetch_factory",
    "fetch_request_from_session",
    "fetchable",
]

TOPIC_ID_MIN_VERSION: Final = 13
"""Fetch v13 names topics by id instead of by name (KIP-516)."""

_LAST_VERSION_BY_NAME: Final = TOPIC_ID_MIN_VERSION - 1
# FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH: the session handles them.
_SESSION_ERRORS: Final = frozenset({70, 71})


class Fetches:
    """The machine's Fetch requests: one in flight per node, each node's fetch session,
    and the backoff after a failed Fetch.

    Args:
        config: the machine's settings.
        client: the machine's Client.
    """

    def __init__(self, config: FetcherConfig, client: Client) -> None:
        self._config = config
        self._client = client
        self.sessions: dict[NodeId, FetchSession] = {}
        self.in_flight: dict[RequestId, tuple[NodeId, dict[TopicPartition, int]]] = {}
        self.node_busy: set[NodeId] = set()
        self.node_backoff: dict[NodeId, float] = {}
        # per node: the last Fetch built, with the versions and session data it was built
        # from (a caught-up consumer asks for the same offsets again and again)
        self._last_built: dict[NodeId, tuple[ApiVersionTable, FetchRequestData, Any]] = {}

    def send(
        self,
        parts: Mapping[TopicPartition, _Partition],
        completed: Mapping[TopicPartition, _Completed],
        now: float,
    ) -> None:
        """Send a Fetch to every node that has fetchable partitions and none in flight."""
        cfg = self._config
        read_committed = cfg.read_committed
        cluster = self._client.cluster
        for node, candidates in _candidates(parts, completed, self._client, now).items():
            if node in self.node_busy or self.node_backoff.get(node, 0.0) > now:
                continue
            if _all_caught_up(candidates, read_committed) and buffered_on(
                node, parts, completed, self._client
            ):
                # Only partitions at their end: the broker would hold this Fetch for
                # fetch_max_wait while the partitions being drained, which have more to
                # read, could not be fetched (one Fetch per node). Ask once they are drained.
                # (Decided before the fetch states are built: with many partitions this
                # runs on every step while the application drains the others.)
                continue
            states = _fetch_states(candidates, cluster, cfg.max_partition_fetch_bytes)
            session = self.sessions.get(node)
            if session is None:
                session = FetchSession(sessionless=not cfg.use_fetch_sessions)
                self.sessions[node] = session
            factory = self._factory(node, session.build(states))
            timeout = self._client.config.connection.request_timeout + cfg.fetch_max_wait
            rid = self._client.send(factory, now=now, node_id=node, timeout=timeout)
            self.in_flight[rid] = (node, {tp: st.fetch_offset for tp, st in states.items()})
            self.node_busy.add(node)
            for tp in states:
                parts[tp].in_flight = True

    def _factory(self, node: NodeId, data: FetchRequestData) -> Callable[[ApiVersionTable], Any]:
        """:func:`fetch_factory` for ``node``, reusing the request built last for it when
        the versions and the session data are the same (kio entities are frozen, and
        building one checks every field's type)."""
        cfg = self._config
        build_new = fetch_factory(
            data,
            max_wait=cfg.fetch_max_wait,
            min_bytes=cfg.fetch_min_bytes,
            max_bytes=cfg.fetch_max_bytes,
            isolation_level=1 if cfg.read_committed else 0,
            rack_id=cfg.client_rack,
        )
        built = self._last_built

        def factory(versions: ApiVersionTable) -> Any:
            last = built.get(node)
            if last is not None and last[0] is versions and last[1] == data:
                return last[2]
            request = build_new(versions)
            built[node] = (versions, data, request)
            return request

        return factory

    def answered(self, rid: RequestId) -> tuple[NodeId, dict[TopicPartition, int]] | None:
        """``(node, fetch offsets)`` if ``rid`` is one of our Fetches (now answered)."""
        fetch = self.in_flight.pop(rid, None)
        if fetch is not None:
            self.node_busy.discard(fetch[0])
        return fetch

    def session_answered(
        self,
        node: NodeId,
        offsets: Iterable[TopicPartition],
        parts: Mapping[TopicPartition, _Partition],
        response: Any,
        now: float,
    ) -> bool:
        """The node's session takes in the response's session fields (KIP-227) and the
        partitions it named are no longer in flight; False if the response has a top-level
        error (a session error makes the next request a full one at once, any other waits
        ``retry.backoff.ms``)."""
        session = self.sessions.get(node)
        code = int(getattr(response, "error_code", 0))
        if session is not None:
            session.handle_response(code, int(getattr(response, "session_id", 0)))
        for tp in offsets:
            p = parts.get(tp)
            if p is not None:
                p.in_flight = False
        if code != 0:
            if code not in _SESSION_ERRORS:
                self.node_backoff[node] = now + self._config.retry_backoff
            return False
        return True

    def failed(
        self, rid: RequestId, parts: Mapping[TopicPartition, _Partition], now: float
    ) -> bool:
        """If ``rid`` is one of our Fetches: it got no answer; the session closes, the
        node backs off, its partitions go back to their leaders after a metadata refresh."""
        fetch = self.in_flight.pop(rid, None)
        if fetch is None:
            return False
        node, offsets = fetch
        self.node_busy.discard(node)
        self.disconnected(node)
        self.node_backoff[node] = now + self._config.retry_backoff
        for tp in offsets:
            p = parts.get(tp)
            if p is not None:
                p.in_flight = False
                p.read_replica = None
        self._client.request_metadata_update()
        return True

    def disconnected(self, node: NodeId) -> None:
        """The connection to ``node`` was lost: its session is gone too."""
        session = self.sessions.get(node)
        if session is not None:
            session.handle_error()


def fetchable(
    parts: Mapping[TopicPartition, _Partition],
    completed: Mapping[TopicPartition, _Completed],
    client: Client,
    *,
    partition_max_bytes: int,
    now: float,
) -> dict[NodeId, dict[TopicPartition, PartitionFetchState]]:
    """The partitions to fetch now, by the node to fetch them from.

    A partition whose leader is unknown asks for a metadata refresh instead.

    Args:
        parts: the assigned partitions, in assignment order (kept on the wire).
        completed: fetched data not yet drained by the application.
        client: the machine's Client (metadata, node states).
        partition_max_bytes: ``max.partition.fetch.bytes``.
        now: the driver's clock.

    Returns:
        ``node -> {tp: fetch state}`` for :meth:`FetchSession.build`.
    """
    cluster = client.cluster
    return {
        node: _fetch_states(candidates, cluster, partition_max_bytes)
        for node, candidates in _candidates(parts, completed, client, now).items()
    }


_Candidate = tuple[TopicPartition, _Partition]


def _candidates(
    parts: Mapping[TopicPartition, _Partition],
    completed: Mapping[TopicPartition, _Completed],
    client: Client,
    now: float,
) -> dict[NodeId, list[_Candidate]]:
    """:func:`fetchable` without the fetch states: ``node -> [(tp, partition)]``. This runs
    over every assigned partition on every step, so it does as little as it can per
    partition: the metadata lookups are inlined (``leader_for``, and ``fetch_node`` without
    a read replica, which is the leader then), the fetch states are built only for a Fetch
    that goes (:func:`_fetch_states`)."""
    topics = client.cluster.topics
    fetching = PositionState.FETCHING
    name: str | None = None
    metas: Mapping[int, PartitionMetadata] = {}
    out: dict[NodeId, list[_Candidate]] = {}
    last_node: NodeId | None = None  # the node of the partition before, and its list
    last: list[_Candidate] = []
    for tp, p in parts.items():
        if (
            p.state is not fetching
            or p.in_flight
            or p.paused
            or p.revoking
            or p.awaits_metadata
            or p.backoff_until > now
            or tp in completed
        ):
            continue
        if tp[0] != name:
            name = tp[0]
            topic = topics.get(name)
            metas = {} if topic is None else topic.partitions
        meta = metas.get(tp[1])
        leader = None if meta is None else meta.leader
        if leader is None:  # unknown topic or partition, or no leader
            client.request_metadata_update()
            continue
        node = leader if p.read_replica is None else follower.fetch_node(p, leader, client)
        if node != last_node:
            last = out.setdefault(node, [])
            last_node = node
        last.append((tp, p))
    return out


def _fetch_states(
    candidates: list[_Candidate], cluster: ClusterMetadata, partition_max_bytes: int
) -> dict[TopicPartition, PartitionFetchState]:
    """The fetch states of ``candidates`` (every one's topic and partition are known)."""
    topics = cluster.topics
    states: dict[TopicPartition, PartitionFetchState] = {}
    for tp, p in candidates:
        topic = topics[tp[0]]
        states[tp] = PartitionFetchState(
            topic=tp[0],
            topic_id=topic.topic_id,
            partition=tp[1],
            fetch_offset=p.position,
            log_start_offset=-1,
            current_leader_epoch=topic.partitions[tp[1]].leader_epoch,
            partition_max_bytes=partition_max_bytes,
        )
    return states


def _all_caught_up(candidates: list[_Candidate], read_committed: bool) -> bool:
    """:func:`caught_up` for every candidate (inlined: it runs on every step)."""
    if read_committed:
        return all(0 <= p.last_stable_offset <= p.position for _tp, p in candidates)
    return all(0 <= p.high_watermark <= p.position for _tp, p in candidates)


def caught_up(p: _Partition, *, read_committed: bool) -> bool:
    """Whether ``p``'s position is at the end the last Fetch reported (the last stable
    offset for read_committed, else the high watermark)."""
    end = p.last_stable_offset if read_committed else p.high_watermark
    return end >= 0 and p.position >= end


def buffered_on(
    node: NodeId,
    parts: Mapping[TopicPartition, _Partition],
    completed: Iterable[TopicPartition],
    client: Client,
) -> bool:
    """Whether a partition fetched from ``node`` has data the application has not
    drained yet (and is not paused): it will want fetching as soon as it is drained."""
    cluster = client.cluster
    for tp in completed:
        p = parts.get(tp)
        if p is None or p.paused:
            continue
        if follower.fetched_from(p, tp, cluster) == node:
            return True
    return False


def fetch_factory(
    data: FetchRequestData,
    *,
    max_wait: float,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    rack_id: str,
) -> Callable[[ApiVersionTable], Any]:
    """The request factory the Client calls once the node's versions are known."""

    def factory(versions: ApiVersionTable) -> Any:
        return fetch_request_from_session(
            versions,
            data,
            max_wait=max_wait,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            rack_id=rack_id,
        )

    return factory


def _ms(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=round(seconds * 1000))


def _fetch_version(versions: ApiVersionTable, data: FetchRequestData) -> int:
    version = versions.version_for(ApiKey.FETCH)
    if version >= TOPIC_ID_MIN_VERSION and not data.uses_topic_ids:
        # A partition without a topic id can only be named: fall back to v12 as Java does.
        lo = max(CLIENT_VERSIONS[ApiKey.FETCH][0], versions.broker_ranges[ApiKey.FETCH][0])
        if lo > _LAST_VERSION_BY_NAME:
            name = api_name(ApiKey.FETCH)
            raise UnsupportedVersionError(
                f"a partition to fetch has no topic id, which needs {name} "
                f"v{_LAST_VERSION_BY_NAME} or older; the broker offers "
                f"{versions.broker_ranges[ApiKey.FETCH]}",
                api_key=ApiKey.FETCH,
                api_name=name,
                client_range=CLIENT_VERSIONS[ApiKey.FETCH],
                broker_range=versions.broker_ranges[ApiKey.FETCH],
            )
        version = _LAST_VERSION_BY_NAME
    if not data.is_full and version < SESSION_MIN_VERSION:
        raise LocalProtocolError(
            f"an incremental fetch needs Fetch v{SESSION_MIN_VERSION}+, negotiated v{version}"
        )
    return version


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
    """The kio Fetch request for ``data``.

    Topics go by name before v13 and by id since; a request naming a partition without a
    topic id is built at v12 (Java caps the version the same way). Forgotten partitions
    are :attr:`FetchRequestData.to_forget`, plus :attr:`FetchRequestData.replaced` where
    topics go by id. Before v7 there are no session fields: the request is a plain full one.

    Args:
        versions: the negotiated versions.
        data: from :meth:`FetchSession.build` or :meth:`FetchSession.close`.
        max_wait: seconds the broker may wait for ``min_bytes`` (``fetch.max.wait.ms``).
        min_bytes: ``fetch.min.bytes``.
        max_bytes: ``fetch.max.bytes``.
        isolation_level: 0 read_uncommitted, 1 read_committed.
        rack_id: ``client.rack`` (KIP-392).

    Returns:
        The kio request entity.

    Raises:
        UnsupportedVersionError: a partition has no topic id and the broker only speaks
            Fetch v13+.
        LocalProtocolError: ``data`` is incremental but the broker speaks no Fetch v7.
    """
    version = _fetch_version(versions, data)
    cls = request_type(ApiKey.FETCH, version)
    by_id = version >= TOPIC_ID_MIN_VERSION
    topic_cls = nested_type(cls, "FetchTopic")
    part_cls = nested_type(cls, "FetchPartition")
    topics = tuple(
        build(topic_cls, topic=state.topic, topic_id=state.topic_id, partitions=tuple(parts))
        for state, parts in _by_topic(
            data.to_send,
            by_id,
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
    gone = data.to_forget + data.replaced if by_id else data.to_forget
    forgotten: tuple[Any, ...] = ()
    if gone:  # incremental only, so v7+ (checked above) has the type
        forgotten_cls = nested_type(cls, "ForgottenTopic")
        forgotten = tuple(
            build(forgotten_cls, topic=state.topic, topic_id=state.topic_id, partitions=parts)
            for state, parts in _by_topic(gone, by_id, lambda s: s.partition)
        )
    return build(
        cls,
        replica_id=-1,
        max_wait=_ms(max_wait),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        session_id=data.session_id,
        session_epoch=data.epoch,
        topics=topics,
        forgotten_topics_data=forgotten,
        rack_id=rack_id,
    )


def _by_topic(
    states: Iterable[PartitionFetchState],
    by_id: bool,
    item: Callable[[PartitionFetchState], Any],
) -> list[tuple[PartitionFetchState, tuple[Any, ...]]]:
    """Group by the topic's wire key (id or name) in first-seen order (never a set: the
    order reaches the wire). Each group comes with its first state, for the topic fields."""
    groups: dict[object, tuple[PartitionFetchState, list[Any]]] = {}
    for state in states:
        wire_key = state.topic_id if by_id else state.topic
        groups.setdefault(wire_key, (state, []))[1].append(item(state))
    return [(first, tuple(items)) for first, items in groups.values()]
