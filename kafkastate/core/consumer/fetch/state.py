"""An assigned partition's position state, shared by the fetcher's jobs.

Theory of operation
-------------------
Each partition the application (or the group) assigned has one :class:`_Partition` record in
one :class:`PositionState`: looking for its committed offset, resetting by ListOffsets,
validating its position against the leader's log (KIP-320), fetching, or failed with an
error the application must see. The jobs of the machine (:mod:`.request`, :mod:`.decode`,
:mod:`.reset`, :mod:`.follower`) read and move these records; the machine
(:class:`~kafkastate.core.consumer.fetcher.FetcherMachine`) owns them.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Final

import attrs

from kafkastate.core.client import Client
from kafkastate.core.metadata import NodeId
from kafkastate.core.states import StateTable, register, transition
from kafkastate.errors import KafkaConfigurationError, KafkaError

__all__ = [
    "OFFSET_OUT_OF_RANGE",
    "POSITION_STATES",
    "REFRESH_CODES",
    "PositionState",
    "TopicPartition",
    "await_metadata",
    "checked_partitions",
    "move",
]

TopicPartition = tuple[str, int]
"""``(topic, partition)``."""

REFRESH_CODES: Final = frozenset(
    {
        6,  # NOT_LEADER_OR_FOLLOWER
        3,  # UNKNOWN_TOPIC_OR_PARTITION
        56,  # KAFKA_STORAGE_ERROR
        74,  # FENCED_LEADER_EPOCH
        75,  # UNKNOWN_LEADER_EPOCH
        78,  # OFFSET_NOT_AVAILABLE
        100,  # UNKNOWN_TOPIC_ID
        106,  # INCONSISTENT_TOPIC_ID
        5,  # LEADER_NOT_AVAILABLE
        9,  # REPLICA_NOT_AVAILABLE
    }
)
"""Fetch errors after which the partition is fetched again once metadata was refreshed."""
OFFSET_OUT_OF_RANGE: Final = 1
"""The OFFSET_OUT_OF_RANGE error code."""


class PositionState(enum.Enum):
    """Where an assigned partition's position stands."""

    AWAIT_COMMITTED = "await_committed"
    """Waiting for the group's committed offset."""
    AWAIT_RESET = "await_reset"
    """Waiting for ListOffsets by the reset strategy."""
    AWAIT_VALIDATION = "await_validation"
    """Checking the position against the current leader's log (OffsetForLeaderEpoch)."""
    FETCHING = "fetching"
    """The position is known; fetched when not paused."""
    FAILED = "failed"
    """An error the application must see (raised by ``poll``); a seek clears it."""


_P = PositionState
# STYLE §6: read off every change of state in the fetcher's jobs. A seek (seek, seek_to,
# seek_to_committed) leaves any state; a committed offset is validated first when it has a
# leader epoch (KIP-320); a leader change sends a FETCHING position to validation; the
# reset policy moves to AWAIT_RESET, or FAILED for ``none``; a fetch, validation or decode
# error fails the position. A partition starts in AWAIT_COMMITTED with a group_id, else
# in AWAIT_RESET.
POSITION_STATES: Final = register(
    StateTable(
        machine="FetchPosition",
        states=PositionState,
        initial=_P.AWAIT_COMMITTED,
        transitions={
            _P.AWAIT_COMMITTED: {
                _P.AWAIT_COMMITTED,
                _P.AWAIT_RESET,
                _P.AWAIT_VALIDATION,
                _P.FETCHING,
                _P.FAILED,
            },
            _P.AWAIT_RESET: {_P.AWAIT_COMMITTED, _P.AWAIT_RESET, _P.FETCHING, _P.FAILED},
            _P.AWAIT_VALIDATION: {_P.AWAIT_COMMITTED, _P.AWAIT_RESET, _P.FETCHING, _P.FAILED},
            _P.FETCHING: {
                _P.AWAIT_COMMITTED,
                _P.AWAIT_RESET,
                _P.AWAIT_VALIDATION,
                _P.FETCHING,
                _P.FAILED,
            },
            _P.FAILED: {_P.AWAIT_COMMITTED, _P.AWAIT_RESET, _P.FETCHING},
        },
    )
)
"""An assigned partition's position states (STYLE §6)."""


@attrs.define(slots=True)
class _Partition:
    state: PositionState
    position: int = -1
    position_epoch: int = -1  # leader epoch of the record before the position (KIP-320)
    leader_epoch: int = -1  # the metadata leader epoch the position is known good under
    reset_to: int | None = None  # ListOffsets timestamp while AWAIT_RESET
    paused: bool = False
    error: KafkaError | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    last_fetch_at: float | None = None  # when data last arrived for it (driver clock)
    in_flight: bool = False  # a Fetch, ListOffsets or OffsetFetch names it
    backoff_until: float = 0.0
    awaits_metadata: bool = False  # not tried again before fresh metadata arrives
    seeks: int = 0  # which placing of the position this is (to spot stale answers)
    revoking: bool = False  # the group is taking it away: neither fetched nor handed out
    read_replica: NodeId | None = None


def move(p: _Partition, new: PositionState, *, what: str) -> None:
    """Move ``p`` to ``new`` through :data:`POSITION_STATES`.

    Raises:
        LocalProtocolError: the table does not allow the move.
    """
    p.state = transition(POSITION_STATES, p.state, new, what=what)


def await_metadata(p: _Partition, client: Client) -> None:
    """Try ``p`` again once fresh metadata arrived (the Metadata machine paces and
    retries its refreshes; retrying ``p`` before would ask the same stale leader)."""
    p.awaits_metadata = True
    client.request_metadata_update()


def checked_partitions(partitions: Iterable[TopicPartition]) -> dict[TopicPartition, None]:
    """``partitions`` as plain ``(topic, partition)`` keys, in order.

    Raises:
        KafkaConfigurationError: a malformed ``(topic, partition)``.
    """
    wanted: dict[TopicPartition, None] = {}
    for tp in partitions:
        if (
            not isinstance(tp, tuple)
            or len(tp) != 2
            or not isinstance(tp[0], str)
            or not tp[0]
            or isinstance(tp[1], bool)
            or not isinstance(tp[1], int)
            or tp[1] < 0
        ):
            raise KafkaConfigurationError(
                f"a partition must be a (topic: str, partition: int >= 0) pair, got {tp!r}"
            )
        wanted[(tp[0], tp[1])] = None
    return wanted
