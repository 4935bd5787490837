"""The group member inside the fetcher: its coordinator and the metadata it needs.

Theory of operation
-------------------
With ``group=``, a :class:`~kafkastate.core.consumer.group.GroupMember` (classic protocol,
JoinGroup/SyncGroup/Heartbeat, KIP-345 static membership) or a
:class:`~kafkastate.core.consumer.group848.ConsumerGroupMember` (KIP-848,
ConsumerGroupHeartbeat) runs inside the fetcher machine. The member asks for its coordinator;
the machine finds it with the same FindCoordinator lookup its offset queries use
(:mod:`.offsets`) and tells the member (:func:`coordinator_for`). Until metadata describes
every subscribed topic, or a short wait is over (:func:`subscription_known`), the member is
not told its coordinator and its join is held (``join_held``) -- whether the coordinator was
known before the subscription or not: a member that joined before would make the leader
assign without those topics, and the group would rebalance again as soon as they arrive.
Each metadata update gives the member the
subscribed topics' partition counts and topic ids (:func:`tell_metadata`). The member's
requests and decisions (revoke, assign, fail) are routed by the machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from kafkastate.core.consumer.fetch.offsets import OffsetQueries
from kafkastate.core.consumer.group import GroupMember
from kafkastate.core.consumer.group848 import ConsumerGroupMember
from kafkastate.core.metadata import ClusterMetadata, NodeId

__all__ = ["coordinator_for", "subscription_known", "tell_metadata"]

Member = GroupMember | ConsumerGroupMember


def subscription_known(
    subscription: Iterable[str], cluster: ClusterMetadata, wait_until: float, now: float
) -> bool:
    """Whether metadata describes every subscribed topic (or waiting for it is over, at
    ``wait_until``): a member that joined before would make the leader assign without
    those topics, and the group would rebalance again as soon as they arrive."""
    if now >= wait_until:
        return True
    topics = cluster.topics
    return all(t in topics and topics[t].error_code == 0 for t in subscription)


def coordinator_for(
    member: Member,
    queries: OffsetQueries,
    told: NodeId | None,
    ready: Callable[[], bool],
    now: float,
) -> NodeId | None:
    """The coordinator the member knows after this step.

    Args:
        member: the group member.
        queries: the machine's offset queries, which find the coordinator.
        told: the coordinator the member was told before, or None.
        ready: whether the member may join now (:func:`subscription_known`).
        now: the driver's clock.
    """
    if not member.coordinator_wanted:
        return told
    if told is not None:  # the member lost it: look again
        if queries.coordinator == told:
            queries.coordinator = None
        told = None
    if member.active:
        node = queries.find_coordinator(now)
        if node is not None and ready():
            member.coordinator_found(now=now)
            return node
    return told


def tell_metadata(member: Member, cluster: ClusterMetadata, now: float) -> None:
    """Give a subscribed member its topics' partition counts and the topic ids."""
    topics = cluster.topics
    counts = {
        t: len(topics[t].partitions)
        for t in member.subscription
        if t in topics and topics[t].error_code == 0
    }
    member.update_partition_counts(counts, now=now)
    names = {t.topic_id: name for name, t in topics.items() if t.topic_id is not None}
    member.update_topic_ids(names, now=now)
