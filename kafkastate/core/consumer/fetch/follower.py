"""Follower fetching (KIP-392): fetching from the preferred read replica the leader names.

Theory of operation
-------------------
With ``client.rack`` set, the leader may answer a Fetch (v11+) with a
``preferred_read_replica``: a replica in the consumer's rack. The partition is fetched from
that node until something goes wrong -- a fetch error that sends the partition back to
metadata, a lost request, a leader change (KIP-320 validation), or the replica missing from
metadata -- and then from the leader again, which may name a replica anew. The data the
replica returns is the leader's log up to the replica's high watermark, so nothing else
changes: positions, sessions and validation are the same as with the leader.
"""

from __future__ import annotations

from typing import Any

from kafkastate.core.client import Client
from kafkastate.core.consumer.fetch.state import TopicPartition, _Partition
from kafkastate.core.metadata import ClusterMetadata, NodeId

__all__ = ["fetch_node", "fetched_from", "preferred_read_replica"]


def preferred_read_replica(part: Any) -> NodeId | None:
    """The replica a Fetch response partition names to fetch from next, or None (-1, or a
    version without the field)."""
    replica = int(getattr(part, "preferred_read_replica", -1))
    return NodeId(replica) if replica >= 0 else None


def fetch_node(p: _Partition, leader: NodeId, client: Client) -> NodeId:
    """Where to send ``p``'s next Fetch: its read replica while metadata knows that node,
    else the leader (and the replica is forgotten)."""
    node = p.read_replica if p.read_replica is not None else leader
    if client.node_state(node) is None:
        p.read_replica = None
        node = leader
    return node


def fetched_from(p: _Partition, tp: TopicPartition, cluster: ClusterMetadata) -> NodeId | None:
    """The node ``tp`` is fetched from: its read replica, else its leader (None: unknown)."""
    return p.read_replica if p.read_replica is not None else cluster.leader_for(*tp)
