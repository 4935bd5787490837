"""Offset reset and leader-epoch validation (KIP-320, OffsetForLeaderEpoch).

Theory of operation
-------------------
*Reset.* A partition without a valid position -- no committed offset, or
OFFSET_OUT_OF_RANGE from a Fetch -- moves by ``auto.offset.reset``: ``earliest`` / ``latest``
put it in AWAIT_RESET with that ListOffsets timestamp (the machine's offset queries,
:mod:`.offsets`, then ask the leader); ``none`` FAILS it with
:class:`~kafkastate.errors.NoOffsetForPartitionError`, or
:class:`~kafkastate.errors.OffsetOutOfRangeError` for a position the log does not hold (as
Java, aiokafka and kafka-python raise). :func:`finish_lookup` applies the answer of a
committed-offset or reset lookup.

*Validation (KIP-320).* The position carries the leader epoch of the record before it. When
the partition's leader epoch in metadata changes (:func:`check_leader`), or the position is
a committed offset with an epoch, the partition goes to AWAIT_VALIDATION and
OffsetForLeaderEpoch (v3+, ``current_leader_epoch`` fenced) asks the current leader where
that epoch ends in its log (:func:`send_validations`). At or past the position: fetching goes
on. Below it, the log was truncated under the consumer (an unclean leader election): with a
reset policy the position moves back to the end offset, where the logs diverge (Java does
the same); with ``none`` the partition FAILS with a
:class:`~kafkastate.errors.LogTruncationError`. An epoch the leader does not know at all
resets by policy (:func:`complete_validation`). Brokers without OffsetForLeaderEpoch v3 skip
the check; retriable errors wait for fresh metadata and try again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any, Final

from kafkastate.core.client import Client, RequestId
from kafkastate.core.consumer.fetch.offsets import ListedOffset, OffsetQueries, _Query
from kafkastate.core.consumer.fetch.state import (
    OFFSET_OUT_OF_RANGE,
    REFRESH_CODES,
    PositionState,
    TopicPartition,
    _Partition,
    await_metadata,
    move,
)
from kafkastate.core.metadata import ClusterMetadata, NodeId
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, ApiVersionTable
from kafkastate.errors import (
    KafkaError,
    LogTruncationError,
    NoOffsetForPartitionError,
    UnsupportedVersionError,
    error_for_code,
)

__all__ = [
    "Validation",
    "apply_policy",
    "check_leader",
    "complete_validation",
    "finish_lookup",
    "leader_epoch",
    "read_validation",
    "send_validations",
    "start_lookups",
    "validation_failed",
]

Validation = tuple[int, int, int]
"""What an OffsetForLeaderEpoch request asked for one partition: (position, position
epoch, current leader epoch)."""


# (On Python 3.11 ``EnumClass.MEMBER`` goes through EnumType.__getattr__'s slow lookup: the
# per-partition tests of start_lookups compare with these module constants.)
_FETCHING: Final = PositionState.FETCHING
_AWAIT_COMMITTED: Final = PositionState.AWAIT_COMMITTED
_AWAIT_RESET: Final = PositionState.AWAIT_RESET
_AWAIT_VALIDATION: Final = PositionState.AWAIT_VALIDATION


def apply_policy(
    p: _Partition, tp: TopicPartition, reset_to: int | None, *, out_of_range: int | None = None
) -> None:
    """No valid position: reset by ``auto_offset_reset`` or fail (``none``):
    OffsetOutOfRangeError for a position the log does not hold (``out_of_range``, as
    Java, aiokafka and kafka-python raise), else NoOffsetForPartitionError.

    Args:
        p: the partition.
        tp: its ``(topic, partition)``.
        reset_to: the policy's ListOffsets timestamp; None for ``none``.
        out_of_range: the fetch offset the broker called out of range, if that is why.
    """
    if reset_to is None:
        move(p, PositionState.FAILED, what="no reset policy")
        if out_of_range is not None:
            p.error = error_for_code(OFFSET_OUT_OF_RANGE)(
                f"offset {out_of_range} is out of range for partition {tp[0]}-{tp[1]} "
                "and auto_offset_reset is 'none'",
                topic=tp[0],
                partition=tp[1],
            )
            # aiokafka and kafka-python raise OffsetOutOfRangeError({tp: offset}); code reads
            # the partitions from err.args[0] (seed 000's local-state example).
            p.error.args = ({tp: out_of_range},)
            return
        p.error = NoOffsetForPartitionError(
            f"no valid offset for partition {tp[0]}-{tp[1]} and auto_offset_reset is 'none'"
        )
    else:
        move(p, PositionState.AWAIT_RESET, what="reset policy")
        p.reset_to = reset_to


def start_lookups(
    parts: Mapping[TopicPartition, _Partition],
    completed: MutableMapping[TopicPartition, Any],
    client: Client,
    queries: OffsetQueries,
    validating: MutableMapping[RequestId, dict[TopicPartition, Validation]],
    *,
    now: float,
) -> None:
    """Start what each partition's position waits for: validation after a leader change
    (OffsetForLeaderEpoch), committed offsets and resets (the machine's own queries)."""
    committed: list[TopicPartition] = []
    resets: dict[TopicPartition, int] = {}
    validate: list[TopicPartition] = []
    cluster = client.cluster
    topics = cluster.topics
    fetching = _FETCHING
    name: str | None = None
    metas: Mapping[int, Any] = {}
    for tp, p in parts.items():
        if p.in_flight or p.awaits_metadata or p.backoff_until > now:
            continue
        if p.state is fetching:
            # check_leader's test, inlined: this runs for every partition on every step.
            if tp[0] != name:
                name = tp[0]
                topic = topics.get(name)
                metas = {} if topic is None else topic.partitions
            meta = metas.get(tp[1])
            if meta is None or meta.leader_epoch < 0 or meta.leader_epoch == p.leader_epoch:
                continue  # no leader change: nothing to start for this partition
            check_leader(tp, p, cluster, completed)
        state = p.state
        if state is _AWAIT_COMMITTED:
            committed.append(tp)
        elif state is _AWAIT_RESET and p.reset_to is not None:
            resets[tp] = p.reset_to
        elif state is _AWAIT_VALIDATION:
            validate.append(tp)
    if validate:
        send_validations(validate, parts, client, validating, now=now)
    if not committed and not resets:
        return  # the usual step: every position known
    for kind, asked in (("committed", dict.fromkeys(committed)), ("list", resets)):
        if asked:
            q = queries.new(kind, asked)
            q.internal = True
            for tp in asked:
                parts[tp].in_flight = True
                q.seeks[tp] = parts[tp].seeks


def finish_lookup(
    q: _Query,
    parts: Mapping[TopicPartition, _Partition],
    cluster: ClusterMetadata,
    *,
    reset_to: int | None,
    retry_backoff: float,
    now: float,
) -> None:
    """Apply the answer of the machine's own committed-offset or reset lookup ``q``."""
    for tp in q.partitions:
        p = parts.get(tp)
        if p is None:
            continue
        p.in_flight = False
        if q.seeks.get(tp) != p.seeks:
            continue  # the application moved the position meanwhile: a stale answer
        result = q.results.get(tp)
        if q.kind == "committed" and p.state is PositionState.AWAIT_COMMITTED:
            if result is not None:
                # A committed offset with a leader epoch is checked against the
                # current leader's log before fetching from it (KIP-320).
                epoch = q.epochs.get(tp, -1)
                p.position, p.position_epoch, p.leader_epoch = result[0], epoch, -1
                new = PositionState.AWAIT_VALIDATION if epoch >= 0 else PositionState.FETCHING
                move(p, new, what="committed offset")
            elif q.error is not None:
                p.backoff_until = now + retry_backoff
            else:
                apply_policy(p, tp, reset_to)
        elif q.kind == "list" and p.state is PositionState.AWAIT_RESET:
            if isinstance(result, ListedOffset) and result.offset >= 0:
                move(p, PositionState.FETCHING, what="ListOffsets answered")
                p.position = result.offset
                p.position_epoch, p.reset_to = result.leader_epoch, None
                p.leader_epoch = leader_epoch(cluster, tp)  # fresh from the leader
            else:
                p.backoff_until = now + retry_backoff


def leader_epoch(cluster: ClusterMetadata, tp: TopicPartition) -> int:
    """The leader epoch metadata reports for ``tp``, -1 if unknown."""
    topic = cluster.topics.get(tp[0])
    meta = None if topic is None else topic.partitions.get(tp[1])
    return -1 if meta is None else meta.leader_epoch


def check_leader(
    tp: TopicPartition,
    p: _Partition,
    cluster: ClusterMetadata,
    completed: MutableMapping[TopicPartition, Any],
) -> None:
    """A FETCHING position whose leader changed is validated if it knows its epoch."""
    current = leader_epoch(cluster, tp)
    if current < 0 or current == p.leader_epoch:
        return
    if p.position_epoch < 0:
        p.leader_epoch = current  # nothing to validate with (a seek to an offset)
        return
    move(p, PositionState.AWAIT_VALIDATION, what="leader change")
    p.read_replica = None
    completed.pop(tp, None)  # fetched from the old leader: fetch it again


def send_validations(
    tps: Iterable[TopicPartition],
    parts: Mapping[TopicPartition, _Partition],
    client: Client,
    validating: MutableMapping[RequestId, dict[TopicPartition, Validation]],
    *,
    now: float,
) -> None:
    """Send OffsetForLeaderEpoch to each leader for the partitions awaiting validation;
    what was asked goes into ``validating`` by request id."""
    cluster = client.cluster
    by_leader: dict[NodeId, dict[TopicPartition, Validation]] = {}
    for tp in tps:
        p = parts[tp]
        leader = cluster.leader_for(*tp)
        current = leader_epoch(cluster, tp)
        if leader is None or current < 0:
            client.request_metadata_update()
            continue
        by_leader.setdefault(leader, {})[tp] = (p.position, p.position_epoch, current)
    for node, asked in by_leader.items():

        def factory(
            versions: ApiVersionTable, asked: dict[TopicPartition, Validation] = asked
        ) -> Any:
            return _offset_for_leader_epoch_request(versions, asked)

        rid = client.send(factory, now=now, node_id=node)
        validating[rid] = asked
        for tp in asked:
            parts[tp].in_flight = True


def _validation_target(
    parts: Mapping[TopicPartition, _Partition], tp: TopicPartition, sent: Validation
) -> _Partition | None:
    """The partition, if it still waits for the validation that was sent."""
    p = parts.get(tp)
    if p is None:
        return None
    p.in_flight = False
    if p.state is not PositionState.AWAIT_VALIDATION or (p.position, p.position_epoch) != (
        sent[0],
        sent[1],
    ):
        return None
    return p


def read_validation(
    sent: Mapping[TopicPartition, Validation],
    response: Any,
    parts: Mapping[TopicPartition, _Partition],
    client: Client,
    complete: Callable[[TopicPartition, _Partition, Validation, Any], None],
) -> None:
    """Take in an OffsetForLeaderEpoch response; ``complete`` applies each answered
    partition's end offset (:func:`complete_validation`, through the machine)."""
    answered: dict[TopicPartition, Any] = {}
    for t in response.topics:
        for part in t.partitions:
            answered[(str(t.topic), int(part.partition))] = part
    for tp, request in sent.items():
        p = _validation_target(parts, tp, request)
        if p is None:
            continue
        part = answered.get(tp)
        code = -1 if part is None else int(part.error_code)
        if code == 0:
            complete(tp, p, request, part)
        elif part is None or code in REFRESH_CODES or error_for_code(code).retriable:
            await_metadata(p, client)
        else:
            move(p, PositionState.FAILED, what="OffsetForLeaderEpoch error")
            p.error = error_for_code(code)(
                f"OffsetForLeaderEpoch for {tp[0]}-{tp[1]}", topic=tp[0], partition=tp[1]
            )


def complete_validation(
    tp: TopicPartition, p: _Partition, request: Validation, part: Any, reset_to: int | None
) -> None:
    """Where the position's epoch ends in the leader's log decides: fetch on, move back
    to the divergence, reset, or fail (``reset_to`` None: policy ``none``)."""
    position, _epoch, current = request
    end_offset, end_epoch = int(part.end_offset), int(part.leader_epoch)
    if end_offset >= 0 and end_epoch >= 0 and end_offset >= position:
        move(p, PositionState.FETCHING, what="position validated")
        p.leader_epoch = current
        return
    where = f"{tp[0]}-{tp[1]}"
    if end_offset < 0 or end_epoch < 0:
        # The leader knows no such epoch: where the logs diverge is unknown.
        if reset_to is not None:
            apply_policy(p, tp, reset_to)
            return
        message = f"log of {where} truncated below offset {position} (divergence unknown)"
        divergent: tuple[int | None, int | None] = (None, None)
    else:
        if reset_to is not None:
            move(p, PositionState.FETCHING, what="log truncated")
            p.position, p.position_epoch = end_offset, end_epoch
            p.leader_epoch = current
            return
        message = (
            f"log of {where} truncated below offset {position}: the leader's log diverges "
            f"from offset {end_offset} (leader epoch {end_epoch})"
        )
        divergent = (end_offset, end_epoch)
    move(p, PositionState.FAILED, what="log truncated")
    p.error = LogTruncationError(
        message + " and auto_offset_reset is 'none'",
        topic=tp[0],
        partition=tp[1],
        offset=position,
        divergent_offset=divergent[0],
        divergent_epoch=divergent[1],
    )


def validation_failed(
    sent: Mapping[TopicPartition, Validation],
    error: KafkaError,
    parts: Mapping[TopicPartition, _Partition],
    client: Client,
) -> None:
    """The OffsetForLeaderEpoch request failed (no answer, or no v3+ on the broker)."""
    for tp, request in sent.items():
        p = _validation_target(parts, tp, request)
        if p is None:
            continue
        if isinstance(error, UnsupportedVersionError):
            # No OffsetForLeaderEpoch v3+ on this broker: skip the check, as Java does.
            move(p, PositionState.FETCHING, what="no OffsetForLeaderEpoch v3+")
            p.leader_epoch = request[2]
        else:
            await_metadata(p, client)


def _offset_for_leader_epoch_request(
    versions: ApiVersionTable, parts: Mapping[TopicPartition, Validation]
) -> Any:
    """Where does each position's epoch end? ``parts``: tp -> (position, epoch, current)."""
    cls = versions.request_type(ApiKey.OFFSET_FOR_LEADER_EPOCH)
    topic_cls = nested_type(cls, "OffsetForLeaderTopic")
    part_cls = nested_type(cls, "OffsetForLeaderPartition")
    by_topic: dict[str, list[Any]] = {}
    for (topic, partition), (_position, epoch, current) in parts.items():
        by_topic.setdefault(topic, []).append(
            build(part_cls, partition=partition, current_leader_epoch=current, leader_epoch=epoch)
        )
    return build(
        cls,
        replica_id=-1,
        topics=tuple(build(topic_cls, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )
