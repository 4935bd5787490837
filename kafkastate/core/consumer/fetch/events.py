"""The events a :class:`~kafkastate.core.consumer.fetcher.FetcherMachine` emits (its
outputs besides bytes): data to hand out, positions resolved, the answers to offset
queries and commits, and the group's revocations, assignments and leaving. Re-exported by
:mod:`kafkastate.core.consumer.fetcher`."""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from kafkastate.core.client import (
    CloseRequested,
    ConnectRequested,
    MetadataUpdated,
    TokenRequested,
)
from kafkastate.core.consumer.fetch.offsets import ListedOffset
from kafkastate.core.consumer.fetch.state import TopicPartition
from kafkastate.core.consumer.group import GroupFailed
from kafkastate.errors import KafkaError

__all__ = [
    "CommittedOffsets",
    "FetcherEvent",
    "GroupLeft",
    "OffsetsCommitted",
    "OffsetsListed",
    "PartitionsAssigned",
    "PartitionsRevoked",
    "PositionsResolved",
    "RecordsFetched",
]


@attrs.frozen(kw_only=True)
class RecordsFetched:
    """Data arrived for these partitions: :meth:`FetcherMachine.poll` has records (or an
    error) to hand out."""

    partitions: tuple[TopicPartition, ...]
    """The partitions with new data, in response order."""


@attrs.frozen(kw_only=True)
class PositionsResolved:
    """Looking up positions (committed offsets, resets) ended for these partitions: each
    is now FETCHING, FAILED, or waiting to try again."""

    partitions: tuple[TopicPartition, ...]
    """The partitions whose lookup ended."""


@attrs.frozen(kw_only=True)
class OffsetsListed:
    """The outcome of :meth:`FetcherMachine.list_offsets`."""

    query_id: int
    """The id ``list_offsets`` returned."""
    offsets: Mapping[TopicPartition, ListedOffset]
    """Per partition; absent if the query failed."""
    error: KafkaError | None
    """The first error that made the query fail, or None."""


@attrs.frozen(kw_only=True)
class CommittedOffsets:
    """The outcome of :meth:`FetcherMachine.fetch_committed`."""

    query_id: int
    """The id ``fetch_committed`` returned."""
    offsets: Mapping[TopicPartition, tuple[int, str | None] | None]
    """Per partition: ``(offset, metadata)``, or None if the group committed nothing."""
    error: KafkaError | None
    """Why the query failed, or None."""


@attrs.frozen(kw_only=True)
class OffsetsCommitted:
    """The outcome of :meth:`FetcherMachine.commit`."""

    query_id: int
    """The id ``commit`` returned."""
    offsets: Mapping[TopicPartition, int]
    """What was committed."""
    error: KafkaError | None
    """Why the commit failed (the first partition error), or None."""


@attrs.frozen(kw_only=True)
class PartitionsRevoked:
    """The group takes these partitions away (``lost``: the member fell out of the
    generation that owned them; a commit would be refused). They are no longer fetched or
    handed out; commit what was consumed (unless lost), run the listener, then call
    :meth:`FetcherMachine.revocation_done`."""

    partitions: tuple[TopicPartition, ...]
    """The partitions, sorted."""
    lost: bool
    """Lost rather than revoked."""


@attrs.frozen(kw_only=True)
class PartitionsAssigned:
    """The group's new assignment is in place (new partitions look for their committed
    offsets); run the listener, then call :meth:`FetcherMachine.assignment_done`."""

    assigned: tuple[TopicPartition, ...]
    """Everything assigned now."""
    added: tuple[TopicPartition, ...]
    """What this assignment added."""
    generation: int
    """The group generation."""


@attrs.frozen(kw_only=True)
class GroupLeft:
    """After :meth:`FetcherMachine.leave_group`: the member's last request (LeaveGroup, or
    the leaving heartbeat) was answered or failed, or there was nothing to send. Closing
    the connections now loses nothing."""


FetcherEvent = (
    ConnectRequested
    | CloseRequested
    | TokenRequested
    | MetadataUpdated
    | RecordsFetched
    | PositionsResolved
    | OffsetsListed
    | CommittedOffsets
    | OffsetsCommitted
    | PartitionsRevoked
    | PartitionsAssigned
    | GroupFailed
    | GroupLeft
)
