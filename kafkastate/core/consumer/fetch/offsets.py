"""Offset queries: ListOffsets to the leaders, OffsetFetch / OffsetCommit to the group
coordinator, found with FindCoordinator.

Theory of operation
-------------------
The application's :meth:`~kafkastate.core.consumer.fetcher.FetcherMachine.list_offsets`,
``fetch_committed`` and ``commit``, and the machine's own position lookups (committed
offsets, resets by ListOffsets), are *queries* (:class:`_Query`) that
:class:`OffsetQueries` runs until each has an answer for every partition or an error:

* ``list`` -- ListOffsets (v1+ timestamps, KIP-79; read_committed sees the last stable offset)
  to each partition's leader; a partition without a leader waits for metadata; retriable
  partition errors refresh metadata and ask again after ``retry.backoff.ms``.
* ``committed`` -- OffsetFetch (``require_stable``, KIP-447; v8+ batches groups, v10+ names
  topics by id) to the coordinator: the offset, its metadata and its leader epoch (KIP-320).
* ``commit`` -- OffsetCommit to the coordinator, with the member's generation and id so a
  member that fell out of the group cannot overwrite the new owner's offsets; a refusal as
  outside the generation is a :class:`~kafkastate.errors.CommitFailedError` (and a classic
  member rejoins when the coordinator no longer knows it).

The coordinator is found once (FindCoordinator v4+ batches keys) and kept on its own
connection, as in Java, so offset requests never wait behind a Fetch; COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE and NOT_COORDINATOR make the next query look again. The group
member shares it (:meth:`OffsetQueries.find_coordinator`).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from kafkastate.core.client import Client, RequestId
from kafkastate.core.consumer.fetch.state import PositionState, TopicPartition, _Partition
from kafkastate.core.consumer.group import GroupMember
from kafkastate.core.consumer.group848 import ConsumerGroupMember
from kafkastate.core.deadlines import earliest
from kafkastate.core.metadata import NodeId
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
from kafkastate.errors import (
    CommitFailedError,
    KafkaConfigurationError,
    KafkaError,
    error_for_code,
)

if TYPE_CHECKING:
    from kafkastate.core.consumer.fetcher import FetcherConfig

__all__ = [
    "ListedOffset",
    "OffsetQueries",
    "commit_entries",
    "find_coordinator_request",
    "list_offsets_request",
    "offset_commit_request",
    "offset_fetch_request",
    "response_topic_name",
]

# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR: look again.
_COORDINATOR_MOVED: Final = frozenset({14, 15, 16})
# OffsetCommit codes meaning the member is not (any more) in the generation that owns the
# partitions: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS,
# FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH.
_COMMIT_FENCED: Final = frozenset({22, 25, 27, 82, 113})
_REJOIN_ON_COMMIT: Final = frozenset({22, 25})

_UNKNOWN_TOPIC: Final = 3  # UNKNOWN_TOPIC_OR_PARTITION


@attrs.frozen(kw_only=True)
class ListedOffset:
    """One partition's answer to a ListOffsets query."""

    offset: int
    """The offset (-1: none, e.g. no record at or after the timestamp)."""
    timestamp: int
    """The record's timestamp for a timestamp query, else -1."""
    leader_epoch: int
    """The leader epoch of that offset, -1 if unknown."""


@attrs.define(slots=True)
class _Query:
    kind: str  # "list", "committed", "commit"
    query_id: int
    partitions: dict[TopicPartition, Any]  # timestamp / None / (offset, metadata)
    results: dict[TopicPartition, Any] = attrs.field(factory=dict)
    outstanding: int = 0  # requests in flight for it
    error: KafkaError | None = None
    retry_at: float | None = None
    internal: bool = False  # a position reset, not the application's
    awaits_metadata: bool = False  # retry_at was set only to wait for metadata
    epochs: dict[TopicPartition, int] = attrs.field(factory=dict)  # committed leader epochs
    seeks: dict[TopicPartition, int] = attrs.field(factory=dict)  # _Partition.seeks when sent


def commit_entries(
    offsets: Mapping[TopicPartition, int | tuple[int, str]],
    parts: Mapping[TopicPartition, _Partition],
    identity: tuple[int, str, str | None],
) -> dict[TopicPartition, Any]:
    """What a ``commit`` query carries per partition: (offset, metadata, generation, member
    id, group instance id, leader epoch).

    Args:
        offsets: the application's offsets, each with or without metadata.
        parts: the assigned partitions.
        identity: the member's (generation, member id, group instance id).

    Raises:
        KafkaConfigurationError: a malformed offset.
    """
    generation, member_id, group_instance_id = identity
    entries: dict[TopicPartition, Any] = {}
    for tp, value in offsets.items():
        offset, meta = value if isinstance(value, tuple) else (value, "")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise KafkaConfigurationError(f"offset for {tp} must be an int >= 0")
        # Committing the position: its leader epoch goes along (KIP-320), so whoever
        # resumes from it can validate it.
        p = parts.get(tp)
        epoch = -1
        if p is not None and p.state is PositionState.FETCHING and p.position == offset:
            epoch = p.position_epoch
        entries[tp] = (offset, meta, generation, member_id, group_instance_id, epoch)
    return entries


def _sent_as(q: _Query) -> tuple[int, str]:
    """The (generation, member id) a commit query's requests carry (one for all its
    partitions: see :func:`commit_entries`)."""
    entry = next(iter(q.partitions.values()), None)
    return (-1, "") if entry is None else (int(entry[2]), str(entry[3]))


class OffsetQueries:
    """The machine's offset queries and the group coordinator they (and the member) use.

    Args:
        config: the machine's settings.
        client: the machine's Client.
        member: the group member (a refused commit may make it rejoin), or None.
        on_complete: called with each query that is over (the machine's events).
    """

    def __init__(
        self,
        config: FetcherConfig,
        client: Client,
        member: GroupMember | ConsumerGroupMember | None,
        on_complete: Callable[[_Query, float], None],
    ) -> None:
        self._config = config
        self._client = client
        self._member = member
        self._on_complete = on_complete
        self.queries: dict[int, _Query] = {}
        self.requests: dict[RequestId, tuple[int, str, list[TopicPartition]]] = {}
        self.topic_ids: dict[RequestId, dict[Any, str]] = {}
        self._next_query = 0
        self.coordinator: NodeId | None = None
        self.coordinator_rid: RequestId | None = None
        self.coordinator_retry_at = 0.0
        self.coordinator_unknown: NodeId | None = None  # found, not yet in metadata

    def new(self, kind: str, partitions: dict[TopicPartition, Any]) -> _Query:
        """A new query of ``kind`` (``list``, ``committed``, ``commit``), sent by :meth:`run`."""
        qid = self._next_query
        self._next_query += 1
        q = self.queries[qid] = _Query(kind=kind, query_id=qid, partitions=partitions)
        return q

    def next_deadline(self, now: float) -> float | None:
        """The earliest retry time after ``now`` (queries, the coordinator lookup), or None."""
        best = self.coordinator_retry_at if self.coordinator_retry_at > now else None
        for q in self.queries.values():
            t = q.retry_at
            if t is not None and t > now:
                best = earliest(best, t)
        return best

    def handle_response(self, rid: RequestId, response: Any, now: float) -> bool:
        """Take in the answer to request ``rid`` if it is one of ours."""
        query = self.requests.pop(rid, None)
        if query is not None:
            names_by_id = self.topic_ids.pop(rid, {})
            self.on_response(query, response, now, names_by_id)
            return True
        if rid == self.coordinator_rid:
            self.on_coordinator(response, now)
            return True
        return False

    def handle_failure(self, rid: RequestId, error: KafkaError, now: float) -> bool:
        """Take in the failure of request ``rid`` if it is one of ours."""
        query = self.requests.pop(rid, None)
        if query is not None:
            self.topic_ids.pop(rid, None)
            self.on_failure(query, error, now)
            return True
        if rid == self.coordinator_rid:
            self.coordinator_rid = None
            self.coordinator_retry_at = now + self._config.retry_backoff
            return True
        return False

    def metadata_arrived(self) -> None:
        """Queries that waited for metadata go at once; a coordinator that was not in
        metadata yet is used now if it is."""
        for q in self.queries.values():
            if q.awaits_metadata:
                q.retry_at, q.awaits_metadata = None, False
        node = self.coordinator_unknown
        if node is not None and self._client.node_state(node) is not None:
            self.coordinator_unknown = None
            self.coordinator = self._client.separate_connection(node)

    def run(self, now: float) -> None:
        """Send what is due: each query not in flight and not waiting to retry."""
        for q in list(self.queries.values()):
            if q.outstanding or (q.retry_at is not None and q.retry_at > now):
                continue
            if q.kind == "list":
                self._send_list(q, now)
            else:
                self._send_group(q, now)

    def fail_all(self, error: KafkaError, now: float) -> None:
        """The machine closed: every application query still open is over with ``error``
        (in query order), so no caller waits for an answer that cannot come; the
        machine's own position lookups are dropped."""
        for qid in sorted(self.queries):
            q = self.queries[qid]
            if q.internal:
                del self.queries[qid]
                continue
            if q.error is None:
                q.error = error
            self.complete(q, now)
        self.requests.clear()
        self.topic_ids.clear()

    def complete(self, q: _Query, now: float) -> None:
        """``q`` is over: forget it and hand it to the machine (its events)."""
        del self.queries[q.query_id]
        self._on_complete(q, now)

    def _send_list(self, q: _Query, now: float) -> None:
        cluster = self._client.cluster
        by_leader: dict[NodeId, dict[TopicPartition, int]] = {}
        waiting = False
        for tp, ts in q.partitions.items():
            if tp in q.results:
                continue
            topic = cluster.topics.get(tp[0])
            if topic is not None and topic.error_code not in (0, 3, 5):
                q.error = error_for_code(topic.error_code)(f"metadata for topic {tp[0]!r}")
                q.results[tp] = None
                continue
            leader = cluster.leader_for(*tp)
            if leader is None:
                waiting = True
                continue
            by_leader.setdefault(leader, {})[tp] = ts
        if waiting:
            self._client.metadata.add_topics(sorted({t for t, _ in q.partitions}))
            self._client.request_metadata_update()
        if not by_leader and not waiting:
            self.complete(q, now)
            return
        isolation = 1 if self._config.read_committed else 0
        for node, parts in by_leader.items():

            def factory(versions: ApiVersionTable, parts: dict[TopicPartition, int] = parts) -> Any:
                return list_offsets_request(versions, parts, isolation)

            rid = self._client.send(factory, now=now, node_id=node)
            self.requests[rid] = (q.query_id, "list", list(parts))
            q.outstanding += 1
        if waiting and not by_leader:
            q.retry_at, q.awaits_metadata = now + self._config.retry_backoff, True

    def _send_group(self, q: _Query, now: float) -> None:
        coordinator = self.find_coordinator(now)
        if coordinator is None:
            return
        group = self._config.group_id
        assert group is not None  # checked by the commands
        # OffsetFetch/OffsetCommit v10+ name topics by id: know them before asking.
        cluster = self._client.cluster
        names = sorted({topic for topic, _ in q.partitions})
        missing = [n for n in names if n not in cluster.topics]
        if missing:
            self._client.metadata.add_topics(missing)
            self._client.request_metadata_update()
            q.retry_at, q.awaits_metadata = now + self._config.retry_backoff, True
            return
        if q.kind == "committed":
            # A topic the cluster does not have has nothing committed to ask for: None at
            # once, as aiokafka answers, not a wait for a topic id that never comes.
            absent = {n for n in names if cluster.topics[n].error_code == _UNKNOWN_TOPIC}
            for tp in q.partitions:
                if tp[0] in absent:
                    q.results[tp] = None
            names = [n for n in names if n not in absent]
            if not names:
                self.complete(q, now)
                return
        ids = {n: cluster.topics[n].topic_id for n in names}
        if q.kind == "committed":
            tps = [tp for tp in q.partitions if tp[0] in ids]

            def factory(versions: ApiVersionTable) -> Any:
                return offset_fetch_request(versions, group, tps, ids)

        else:
            parts = dict(q.partitions)

            def factory(versions: ApiVersionTable) -> Any:
                return offset_commit_request(versions, group, parts, ids)

        rid = self._client.send(factory, now=now, node_id=coordinator)
        self.requests[rid] = (q.query_id, q.kind, list(q.partitions))
        self.topic_ids[rid] = {tid: n for n, tid in ids.items() if tid is not None}
        q.outstanding += 1

    def find_coordinator(self, now: float) -> NodeId | None:
        if self.coordinator is not None:
            if self._client.node_state(self.coordinator) is not None:
                return self.coordinator
            self.coordinator = None
        if self.coordinator_rid is not None or self.coordinator_retry_at > now:
            return None
        group = self._config.group_id
        assert group is not None

        def factory(versions: ApiVersionTable) -> Any:
            return find_coordinator_request(versions, group)

        self.coordinator_rid = self._client.send(factory, now=now)
        return None

    def on_coordinator(self, response: Any, now: float) -> None:
        self.coordinator_rid = None
        coordinators = getattr(response, "coordinators", None)
        found = coordinators[0] if coordinators else response  # v4+: one per key
        code = int(found.error_code)
        if code != 0:
            self.coordinator_retry_at = now + self._config.retry_backoff
            if code not in _COORDINATOR_MOVED:
                error = error_for_code(code)(f"FindCoordinator for group {self._config.group_id!r}")
                for q in list(self.queries.values()):
                    if q.kind != "list" and not q.outstanding:
                        q.error = error
                        self.complete(q, now)
            return
        node = NodeId(int(found.node_id))
        if self._client.node_state(node) is None:
            # Not in metadata yet: the refresh adds it (or, failing that, ask again later).
            self._client.request_metadata_update()
            self.coordinator_unknown = node
            self.coordinator_retry_at = now + self._config.retry_backoff
            return
        self.coordinator_unknown = None
        # Its own connection, as in Java: offset requests do not wait behind a Fetch.
        self.coordinator = self._client.separate_connection(node)

    def on_response(
        self,
        query: tuple[int, str, list[TopicPartition]],
        response: Any,
        now: float,
        names_by_id: Mapping[Any, str],
    ) -> None:
        qid, kind, _tps = query
        q = self.queries.get(qid)
        if q is None:
            return
        q.outstanding -= 1
        retry = False
        if kind == "list":
            for t in response.topics:
                for part in t.partitions:
                    tp = (str(t.name), int(part.partition_index))
                    if tp not in q.partitions:
                        continue
                    code = int(part.error_code)
                    if code == 0:
                        q.results[tp] = ListedOffset(
                            offset=int(part.offset),
                            timestamp=int(getattr(part, "timestamp", -1)),
                            leader_epoch=int(getattr(part, "leader_epoch", -1)),
                        )
                    elif error_for_code(code).retriable:
                        retry = True
                        self._client.request_metadata_update()
                    else:
                        q.error = q.error or error_for_code(code)(
                            f"ListOffsets for {tp[0]}-{tp[1]}", topic=tp[0], partition=tp[1]
                        )
                        q.results[tp] = None
        elif kind == "committed":
            groups = getattr(response, "groups", None)
            if groups:
                group = groups[0]
                topics, top_code = group.topics, int(group.error_code)
            else:
                topics, top_code = response.topics, int(getattr(response, "error_code", 0))
            if top_code in _COORDINATOR_MOVED:
                self.coordinator = None
                retry = True
            elif top_code != 0:
                q.error = error_for_code(top_code)(f"OffsetFetch for {self._config.group_id!r}")
            else:
                for t in topics:
                    name = response_topic_name(t, names_by_id)
                    for part in t.partitions:
                        tp = (name, int(part.partition_index))
                        code = int(part.error_code)
                        if code != 0:
                            if error_for_code(code).retriable:
                                retry = True
                            else:
                                q.error = q.error or error_for_code(code)(
                                    f"OffsetFetch for {tp[0]}-{tp[1]}"
                                )
                            continue
                        offset = int(part.committed_offset)
                        q.results[tp] = None if offset < 0 else (offset, part.metadata)
                        q.epochs[tp] = int(getattr(part, "committed_leader_epoch", -1))
                for tp in q.partitions:
                    q.results.setdefault(tp, None)
        else:
            for t in response.topics:
                name = response_topic_name(t, names_by_id)
                for part in t.partitions:
                    code = int(part.error_code)
                    if code in _COORDINATOR_MOVED:
                        self.coordinator = None
                        retry = True
                    elif code in _COMMIT_FENCED:
                        q.error = q.error or self.commit_fenced(code, name, sent=_sent_as(q))
                    elif code != 0:
                        q.error = q.error or error_for_code(code)(
                            f"OffsetCommit for {name}-{part.partition_index}",
                            topic=name,
                            partition=int(part.partition_index),
                        )
        if q.outstanding:
            return
        if retry and q.error is None:
            q.retry_at = now + self._config.retry_backoff
            return
        self.complete(q, now)

    def commit_fenced(
        self, code: int, topic: str, *, sent: tuple[int, str] | None = None
    ) -> KafkaError:
        """The error for a commit the group refused as coming from outside the generation.
        ``sent``: the (generation, member id) the refused request carried, when the broker
        refused it -- the member decides whether that calls for a rejoin
        (:meth:`GroupMember.commit_refused`); None when the member's own state refused it
        before sending (it is rejoining, or outside any generation)."""
        cause = error_for_code(code)(f"OffsetCommit for group {self._config.group_id!r}")
        member = self._member
        if (
            sent is not None
            and isinstance(member, GroupMember)
            and code in _REJOIN_ON_COMMIT
            and member.active
        ):
            member.commit_refused(*sent, "a commit was refused: " + type(cause).__name__)
        error = CommitFailedError(
            f"commit for group {self._config.group_id!r} refused ({type(cause).__name__} on "
            f"{topic}): this member is not in the group generation that owns the partitions "
            "(it was removed after a session or poll timeout, or a rebalance is under way); "
            "its partitions may belong to another member now"
        )
        error.__cause__ = cause
        return error

    def on_failure(
        self, query: tuple[int, str, list[TopicPartition]], error: KafkaError, now: float
    ) -> None:
        qid, kind, _tps = query
        q = self.queries.get(qid)
        if q is None:
            return
        q.outstanding -= 1
        if kind != "list":
            self.coordinator = None
        if error.retriable:
            if not q.outstanding:
                q.retry_at = now + self._config.retry_backoff
            return
        q.error = q.error or error
        if not q.outstanding:
            self.complete(q, now)


# ------------------------------------------------------------------------------ requests


def list_offsets_request(
    versions: ApiVersionTable, parts: Mapping[TopicPartition, int], isolation: int
) -> Any:
    """ListOffsets for ``parts`` (partition -> timestamp or -1 latest / -2 earliest /
    -3 max timestamp) at the negotiated version."""
    cls = versions.request_type(ApiKey.LIST_OFFSETS)
    topic_cls = nested_type(cls, "ListOffsetsTopic")
    part_cls = nested_type(cls, "ListOffsetsPartition")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), ts in parts.items():
        by_topic.setdefault(topic, []).append(
            build(part_cls, partition_index=partition, current_leader_epoch=-1, timestamp=ts)
        )
    return build(
        cls,
        replica_id=-1,
        isolation_level=isolation,
        topics=tuple(build(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        timeout=_timedelta_ms(30_000),
    )


def find_coordinator_request(versions: ApiVersionTable, group: str) -> Any:
    """FindCoordinator for a group, at the negotiated version (one key or a batch of one)."""
    cls = versions.request_type(ApiKey.FIND_COORDINATOR)
    return build(cls, key=group, key_type=0, coordinator_keys=(group,))


def response_topic_name(entry: Any, names_by_id: Mapping[Any, str]) -> str:
    """A response topic's name: given (up to v9) or looked up by its id (v10+)."""
    name = getattr(entry, "name", None)
    if name is None:
        name = names_by_id.get(getattr(entry, "topic_id", None), "")
    return str(name)


def offset_fetch_request(
    versions: ApiVersionTable,
    group: str,
    tps: Sequence[TopicPartition],
    ids: Mapping[str, Any],
) -> Any:
    """OffsetFetch of ``tps`` for ``group`` (require_stable), in the single-group form of
    v8+ when the version has it; ``ids`` gives topic ids for v10+."""
    cls = versions.request_type(ApiKey.OFFSET_FETCH)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in tps:
        by_topic.setdefault(topic, []).append(partition)
    try:
        group_cls = nested_type(cls, "OffsetFetchRequestGroup")
    except (KeyError, LookupError, AttributeError, TypeError):
        group_cls = None
    if group_cls is not None:
        topic_cls = nested_type(cls, "OffsetFetchRequestTopics")
        topics = tuple(
            build(topic_cls, name=t, topic_id=ids.get(t), partition_indexes=tuple(ps))
            for t, ps in by_topic.items()
        )
        group_entry = build(
            group_cls, group_id=group, member_id=None, member_epoch=-1, topics=topics
        )
        return build(cls, groups=(group_entry,), require_stable=True)
    topic_cls = nested_type(cls, "OffsetFetchRequestTopic")
    topics = tuple(
        build(topic_cls, name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items()
    )
    return build(cls, group_id=group, topics=topics, require_stable=True)


def offset_commit_request(
    versions: ApiVersionTable,
    group: str,
    parts: Mapping[TopicPartition, Any],
    ids: Mapping[str, Any],
) -> Any:
    """OffsetCommit for ``group``: ``parts`` maps a partition to ``(offset, metadata,
    generation, member id, instance id, leader epoch)`` (the generation fields are one
    member's, so all entries carry the same); ``ids`` gives topic ids for v10+."""
    cls = versions.request_type(ApiKey.OFFSET_COMMIT)
    topic_cls = nested_type(cls, "OffsetCommitRequestTopic")
    part_cls = nested_type(cls, "OffsetCommitRequestPartition")
    by_topic: dict[str, list[Any]] = {}
    generation, member_id, instance_id = -1, "", None
    for (topic, partition), (offset, meta, gen, member, instance, epoch) in parts.items():
        generation, member_id, instance_id = gen, member, instance
        by_topic.setdefault(topic, []).append(
            build(
                part_cls,
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=epoch,
                committed_metadata=meta,
                commit_timestamp=-1,
            )
        )
    return build(
        cls,
        group_id=group,
        generation_id_or_member_epoch=generation,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        retention_time=_timedelta_ms(-1),
        topics=tuple(
            build(topic_cls, name=t, topic_id=ids.get(t), partitions=tuple(ps))
            for t, ps in by_topic.items()
        ),
    )


def _timedelta_ms(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)
