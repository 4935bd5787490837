"""Metadata: the client's view of the cluster, and when to refresh it.

Theory of operation
-------------------
A pure request-level machine. It keeps the last good :class:`ClusterMetadata` (brokers,
controller, topics with their partitions, leaders and leader epochs) and decides *when*
a Metadata request is due; the :class:`~kafkastate.core.client.Client` sends it and hands
back the response or the failure.

An update is due when

* nothing is known yet (bootstrap),
* the view is older than ``metadata_max_age`` (``metadata.max.age.ms``),
* someone asked (:meth:`request_update`): a new topic of interest, or an error that means
  the view is stale (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, FENCED_LEADER_EPOCH,
  a leader epoch newer than ours),
* the last answer left a topic of interest stale (a retriable topic error, a leaderless or
  lagging partition); a topic no longer of interest (:meth:`remove_topics`) asks for
  nothing any more,

and at least ``retry_backoff`` has passed since the last attempt (``retry.backoff.ms``), so
a broken cluster is not hammered. A new topic of interest is the exception, as in Java's
``Metadata.requestUpdateForNewTopics``: after a successful attempt its refresh goes out at
once (a consumer subscribing, or a first send to a topic, right after the bootstrap
metadata does not wait out the backoff); after a failed one the backoff holds.

Responses merge under KIP-320's rule: a partition whose reported leader epoch is *older*
than the one we hold keeps our entry -- that broker has not caught up yet -- and a later
refresh is requested.

Topics of interest are kept sorted so the request bytes never depend on hash order.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final, NewType

import attrs

from kafkastate.core.protocol.requests import metadata_request
from kafkastate.core.protocol.versions import ApiVersionTable
from kafkastate.errors import KafkaError, error_for_code

__all__ = [
    "STALE_METADATA_ERRORS",
    "BrokerAddress",
    "ClusterMetadata",
    "Metadata",
    "MetadataConfig",
    "NodeId",
    "PartitionMetadata",
    "TopicMetadata",
]

NodeId = NewType("NodeId", int)

STALE_METADATA_ERRORS: Final = frozenset(
    {
        3,  # UNKNOWN_TOPIC_OR_PARTITION
        5,  # LEADER_NOT_AVAILABLE
        6,  # NOT_LEADER_OR_FOLLOWER
        74,  # FENCED_LEADER_EPOCH
        75,  # UNKNOWN_LEADER_EPOCH
        100,  # UNKNOWN_TOPIC_ID
    }
)
"""Error codes in any response that mean: refresh metadata, then retry."""


def _non_negative(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attr.name} must be >= 0, got {value!r}")


@attrs.frozen(kw_only=True)
class MetadataConfig:
    """When to refresh metadata. Durations are float seconds."""

    metadata_max_age: float = attrs.field(default=300.0, validator=_non_negative)
    """Refresh at least this often (``metadata.max.age.ms``)."""
    retry_backoff: float = attrs.field(default=0.1, validator=_non_negative)
    """Minimum time between two attempts (``retry.backoff.ms``)."""
    allow_auto_topic_creation: bool = False
    """Ask brokers to create unknown topics (``allow.auto.create.topics``)."""


@attrs.frozen(kw_only=True)
class BrokerAddress:
    """Where a broker listens."""

    node_id: NodeId
    """The broker's ``node.id``."""
    host: str
    """Advertised host."""
    port: int
    """Advertised port."""
    rack: str | None = None
    """``broker.rack``, for rack-aware fetching (KIP-392)."""


@attrs.frozen(kw_only=True)
class PartitionMetadata:
    """One partition as Metadata described it."""

    partition: int
    """Partition index."""
    leader: NodeId | None
    """Leader node, or None while there is none (LEADER_NOT_AVAILABLE)."""
    leader_epoch: int
    """Leader epoch (KIP-320), -1 if the broker did not say."""
    replicas: tuple[NodeId, ...]
    """All replicas."""
    isr: tuple[NodeId, ...]
    """In-sync replicas."""
    offline_replicas: tuple[NodeId, ...] = ()
    """Replicas on offline log dirs."""
    error_code: int = 0
    """Partition-level error from the response (0 = none)."""


@attrs.frozen(kw_only=True)
class TopicMetadata:
    """One topic as Metadata described it."""

    name: str
    """Topic name."""
    topic_id: uuid.UUID | None
    """Topic id (KIP-516), None before Metadata v10 or for an unknown topic."""
    partitions: Mapping[int, PartitionMetadata]
    """Partition index -> partition."""
    is_internal: bool = False
    """``__consumer_offsets`` and friends."""
    error_code: int = 0
    """Topic-level error (3 = unknown topic)."""


@attrs.frozen(kw_only=True)
class ClusterMetadata:
    """An immutable snapshot of the cluster."""

    brokers: Mapping[NodeId, BrokerAddress] = attrs.field(factory=dict)
    """Live brokers by node id."""
    topics: Mapping[str, TopicMetadata] = attrs.field(factory=dict)
    """Topics by name (only the ones asked for, unless all were)."""
    controller_id: NodeId | None = None
    """The controller (in KRaft: a broker picked to forward admin requests)."""
    cluster_id: str | None = None
    """The cluster id."""

    def leader_for(self, topic: str, partition: int) -> NodeId | None:
        """The leader of ``topic``/``partition``, or None if unknown or leaderless."""
        t = self.topics.get(topic)
        if t is None:
            return None
        p = t.partitions.get(partition)
        return None if p is None else p.leader

    def partitions_for(self, topic: str) -> tuple[int, ...] | None:
        """Sorted partition indexes of ``topic``, or None if the topic is not known."""
        t = self.topics.get(topic)
        if t is None or t.error_code != 0:
            return None
        return tuple(sorted(t.partitions))


class Metadata:
    """Tracks the cluster view and decides when to refresh it.

    Args:
        config: refresh settings.
        topics: initial topics of interest; None means all topics.
    """

    def __init__(self, config: MetadataConfig, topics: Iterable[str] | None = ()) -> None:
        self.config = config
        self._all_topics = topics is None
        self._topics: list[str] = sorted(set(topics or ()))
        self.cluster = ClusterMetadata()
        """The last good snapshot (empty before the first response); replaced, never
        changed, by each new response (and by :meth:`remove_topics`). Read it; do not
        set it. (A plain attribute: the producer reads it once per record.)"""
        self._updated_at: float | None = None
        self._last_attempt: float | None = None
        self._requested = True  # nothing known yet
        # topics of interest the last answer left stale (a retriable topic error, a
        # leaderless or lagging partition): each asks for a refresh until an answer is
        # good or the topic is dropped (kept while the next request is in flight)
        self._stale_topics: set[str] = set()
        self._in_flight = False
        self._new_topics = False  # a topic of interest was added since the last attempt
        self._last_error: KafkaError | None = None

    # ----------------------------------------------------------------- state

    @property
    def topics(self) -> tuple[str, ...] | None:
        """Topics of interest (sorted), or None when tracking all topics."""
        return None if self._all_topics else tuple(self._topics)

    @property
    def stale_topics(self) -> tuple[str, ...]:
        """Topics of interest (sorted) that the last answer left stale: each asks for a
        refresh (a retriable topic error such as an unknown topic, a leaderless or lagging
        partition) until an answer is good or the topic is removed."""
        return tuple(sorted(self._stale_topics))

    @property
    def in_flight(self) -> bool:
        """Whether a Metadata request is outstanding."""
        return self._in_flight

    @property
    def last_error(self) -> KafkaError | None:
        """Why the last attempt failed, if it did."""
        return self._last_error

    # -------------------------------------------------------------- commands

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Track more topics; a refresh is requested if any is new.

        Returns:
            Whether anything was added.
        """
        if self._all_topics:
            return False
        new = set(topics) - set(self._topics)
        if not new:
            return False
        self._topics = sorted({*self._topics, *new})
        self._requested = self._new_topics = True
        return True

    def set_topics(self, topics: Iterable[str] | None) -> None:
        """Replace the topics of interest (None = all) and request a refresh."""
        wanted = None if topics is None else sorted(set(topics))
        if wanted != (None if self._all_topics else self._topics):
            self._new_topics = True
        self._all_topics = wanted is None
        self._topics = wanted or []
        self._requested = True

    def remove_topics(self, topics: Iterable[str]) -> None:
        """Stop tracking topics (nothing when tracking all topics): they leave the
        snapshot, and a stale answer for them (an unknown topic) asks for no refresh any
        more. No refresh is requested.
        """
        if self._all_topics:
            return
        gone = set(topics) & set(self._topics)
        if not gone:
            return
        self._topics = [t for t in self._topics if t not in gone]
        self._stale_topics -= gone
        old = self.cluster
        if gone & old.topics.keys():
            kept = {k: v for k, v in old.topics.items() if k not in gone}
            self.cluster = attrs.evolve(old, topics=kept)

    def request_update(self) -> None:
        """Ask for a refresh as soon as the backoff allows (a stale-metadata error...)."""
        self._requested = True

    def observe_error(self, error_code: int) -> bool:
        """Feed an error code from any response; request a refresh if it means stale.

        Returns:
            Whether the code asked for a refresh.
        """
        if error_code in STALE_METADATA_ERRORS:
            self._requested = True
            return True
        return False

    def observe_leader_epoch(self, topic: str, partition: int, leader_epoch: int) -> None:
        """A response named a leader epoch; refresh if it is newer than ours (KIP-320)."""
        t = self.cluster.topics.get(topic)
        p = None if t is None else t.partitions.get(partition)
        if p is None or leader_epoch > p.leader_epoch:
            self._requested = True

    # ----------------------------------------------------------------- timing

    def update_due_at(self) -> float | None:
        """Absolute time when the next Metadata request should go out, or None if one is
        already in flight."""
        if self._in_flight:
            return None
        if self._last_attempt is None or (self._new_topics and self._last_error is None):
            earliest = 0.0
        else:
            earliest = self._last_attempt + self.config.retry_backoff
        if self._requested or self._stale_topics or self._updated_at is None:
            return earliest
        return max(earliest, self._updated_at + self.config.metadata_max_age)

    def update_due(self, now: float) -> bool:
        """Whether a Metadata request should be sent at ``now``."""
        due = self.update_due_at()
        return due is not None and due <= now

    # ------------------------------------------------------------ the request

    def start_update(self, *, now: float) -> None:
        """Record that a Metadata request is being sent (no second one until it ends)."""
        self._in_flight = True
        self._last_attempt = now
        self._requested = self._new_topics = False

    def build_request(self, versions: ApiVersionTable) -> Any:
        """Build the Metadata request for the connection's negotiated versions."""
        return metadata_request(
            versions,
            None if self._all_topics else self._topics,
            allow_auto_topic_creation=self.config.allow_auto_topic_creation,
        )

    def handle_failure(self, error: KafkaError) -> None:
        """The request failed (timeout, connection lost): retry after the backoff."""
        self._in_flight = False
        self._requested = True
        self._last_error = error

    def handle_response(self, response: Any, *, now: float) -> ClusterMetadata:
        """Merge a Metadata response and return the new snapshot.

        A top-level error (v13+, e.g. REBOOTSTRAP_REQUIRED) counts as a failed attempt and
        leaves the snapshot unchanged.

        Partitions whose reported leader epoch is older than ours keep our entry and a new
        refresh is requested (KIP-320). Topic-level errors are kept in the snapshot
        (``TopicMetadata.error_code``); a retriable one requests a refresh.
        """
        code = int(getattr(response, "error_code", 0))  # top-level since v13 (KIP-1102)
        if code != 0:
            self.handle_failure(error_for_code(code)("Metadata request failed"))
            return self.cluster
        self._in_flight = False
        self._last_error = None
        old = self.cluster
        brokers = {
            NodeId(int(b.node_id)): BrokerAddress(
                node_id=NodeId(int(b.node_id)),
                host=str(b.host),
                port=int(b.port),
                rack=getattr(b, "rack", None),
            )
            for b in response.brokers
        }
        topics: dict[str, TopicMetadata] = {} if self._all_topics else dict(old.topics)
        stale: set[str] = set()
        for t in response.topics:
            name = t.name
            if name is None:  # topic-id-only answer; we always ask by name
                continue
            code = int(t.error_code)
            if code != 0:
                if error_for_code(code).retriable:
                    stale.add(name)
                topics[name] = TopicMetadata(
                    name=name, topic_id=None, partitions={}, error_code=code
                )
                continue
            previous = old.topics.get(name)
            parts: dict[int, PartitionMetadata] = {}
            for p in t.partitions:
                index = int(p.partition_index)
                epoch = int(getattr(p, "leader_epoch", -1))
                kept = None if previous is None else previous.partitions.get(index)
                if kept is not None and epoch < kept.leader_epoch:
                    parts[index] = kept  # this broker is behind: keep what we know
                    stale.add(name)
                    continue
                leader = int(p.leader_id)
                pcode = int(p.error_code)
                if pcode in STALE_METADATA_ERRORS:
                    stale.add(name)
                parts[index] = PartitionMetadata(
                    partition=index,
                    leader=NodeId(leader) if leader >= 0 else None,
                    leader_epoch=epoch,
                    replicas=tuple(NodeId(int(r)) for r in p.replica_nodes),
                    isr=tuple(NodeId(int(r)) for r in p.isr_nodes),
                    offline_replicas=tuple(
                        NodeId(int(r)) for r in getattr(p, "offline_replicas", ())
                    ),
                    error_code=pcode,
                )
            topic_id = getattr(t, "topic_id", None)
            if topic_id is not None and topic_id.int == 0:
                topic_id = None
            topics[name] = TopicMetadata(
                name=name,
                topic_id=topic_id,
                partitions=parts,
                is_internal=bool(getattr(t, "is_internal", False)),
            )
        if not self._all_topics:
            wanted = set(self._topics)
            topics = {k: v for k, v in sorted(topics.items()) if k in wanted}
            stale &= wanted
        controller = int(getattr(response, "controller_id", -1))
        self.cluster = ClusterMetadata(
            brokers=dict(sorted(brokers.items())),
            topics=dict(sorted(topics.items())),
            controller_id=NodeId(controller) if controller >= 0 else None,
            cluster_id=getattr(response, "cluster_id", None),
        )
        self._updated_at = now
        self._stale_topics = stale
        return self.cluster
