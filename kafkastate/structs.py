"""Plain value types shared by every API: partitions, offsets, consumed records.

They are ``NamedTuple``s, as in kafka-python (``kafka.structs``), so they compare equal to
its tuples, hash, unpack, and cost a tuple to make; aiokafka's attribute names are the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Self

__all__ = [
    "BrokerMetadata",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "MemberState",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "PartitionMetadata",
    "TopicPartition",
    "TopicPartitionReplica",
]


class TopicPartition(NamedTuple):
    """A topic and a partition (kafka-python's and aiokafka's ``TopicPartition``)."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""


class TopicPartitionReplica(NamedTuple):
    """A partition's replica on one broker (kafka-python's ``TopicPartitionReplica``)."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""
    broker_id: int
    """The node id of the broker holding the replica."""


class MemberState:
    """A group member's state as kafka-python names it (``kafka.structs.MemberState``)."""

    UNJOINED = "<unjoined>"
    """Not part of a group."""
    REBALANCING = "<rebalancing>"
    """Joining or rejoining."""
    STABLE = "<stable>"
    """In a generation, heartbeating."""


class OffsetAndMetadata(NamedTuple):
    """A committed offset (the next record to read) and its metadata string."""

    offset: int
    """The offset."""
    metadata: str = ""
    """Free text stored with the commit."""
    leader_epoch: int = -1
    """The leader epoch of the last consumed record, -1 if unknown."""


class ConsumerGroupMetadata(NamedTuple):
    """A consumer's group membership, for ``send_offsets_to_transaction`` (Java's
    ``ConsumerGroupMetadata``; kafka-python and aiokafka have the same fields).

    With the generation, member id and instance id, the group coordinator refuses offsets
    from a consumer that is no longer a member of the current generation (KIP-447), so a
    zombie's transaction cannot commit. A plain ``group_id`` string (no fencing) is
    accepted wherever this is, for assign-based consumers.
    """

    group_id: str
    """The group id (None only in kafka-python's empty snapshot of a consumer without
    one, from ``kafkastate.sync.KafkaConsumer.group_metadata``)."""
    generation_id: int = -1
    """The generation, -1 if unknown (no generation fencing)."""
    member_id: str = ""
    """The member id, "" if unknown."""
    group_instance_id: str | None = None
    """The static member's ``group.instance.id``, None for a dynamic member."""


class BrokerMetadata(NamedTuple):
    """One broker of the cluster (aiokafka's and kafka-python's field names)."""

    nodeId: int  # aiokafka's and kafka-python's name
    """The broker's node id."""
    host: str
    """Its advertised host."""
    port: int
    """Its advertised port."""
    rack: str | None
    """Its rack, if it has one."""


class PartitionMetadata(NamedTuple):
    """One partition as the metadata describes it (aiokafka's field names)."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""
    leader: int
    """The leader's node id (-1 when it has none)."""
    replicas: list[int]
    """The replicas' node ids."""
    isr: list[int]
    """The in-sync replicas' node ids."""
    error: Any
    """The partition's error (an error class or code), or None."""


class _OffsetAndTimestamp(NamedTuple):
    offset: int
    """The first offset whose timestamp is at or after the one asked for."""
    timestamp: int
    """That record's timestamp in ms."""


class OffsetAndTimestamp(_OffsetAndTimestamp):
    """The answer of ``offsets_for_times`` for one partition: aiokafka's (and kafka-python
    2.x's) two fields, so ``offset, timestamp = answer`` works as there; the leader epoch
    kafka-python 3.0 adds as a third field is the attribute :attr:`leader_epoch` (and the
    optional third constructor argument), outside the tuple."""

    leader_epoch: int | None = None
    """Its leader epoch, when the broker says (None otherwise)."""

    def __new__(cls, offset: int, timestamp: int, leader_epoch: int | None = None) -> Self:
        self = super().__new__(cls, offset, timestamp)
        if leader_epoch is not None:
            self.leader_epoch = leader_epoch
        return self

    def __repr__(self) -> str:
        return (
            f"OffsetAndTimestamp(offset={self.offset!r}, timestamp={self.timestamp!r}, "
            f"leader_epoch={self.leader_epoch!r})"
        )


class ConsumerRecord(NamedTuple):
    """One consumed record (kafka-python's field order; aiokafka's field names)."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""
    leader_epoch: int
    """The leader epoch of the batch it came in, -1 if unknown."""
    offset: int
    """Its offset."""
    timestamp: int
    """Its timestamp in ms (create or log-append time, see ``timestamp_type``)."""
    timestamp_type: int
    """0 for CreateTime, 1 for LogAppendTime."""
    key: Any
    """The key, deserialized if a key deserializer was given."""
    value: Any
    """The value, deserialized if a value deserializer was given."""
    headers: Sequence[tuple[str, bytes | None]]
    """``(key, value)`` pairs, a tuple (as aiokafka hands them out; kafka-python uses a
    list)."""
    checksum: None
    """Always None (v2 batches have one CRC per batch)."""
    serialized_key_size: int
    """Size of the key in bytes, -1 if null."""
    serialized_value_size: int
    """Size of the value in bytes, -1 if null."""
    serialized_header_size: int
    """Size of the headers in bytes, -1 if none."""
