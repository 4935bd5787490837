"""Decoding and validating Fetch responses: per-partition errors, then records, lazily.

Theory of operation
-------------------
A Fetch response (Fetch protocol, all versions) names each partition by topic name (up to
v12) or topic id (v13+, KIP-516) and carries per partition an error code, the high watermark,
the last stable offset, the log start offset, the preferred read replica (KIP-392), the
aborted transactions (KIP-98) and the record batches. :func:`read_response` keeps only
partitions still assigned, still FETCHING and whose position is still the one fetched (data
fetched for a position that has since moved, a seek, is stale). Per-partition errors, as the
Java fetcher handles them:

* NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
  UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR, OFFSET_NOT_AVAILABLE and the like
  (:data:`~.state.REFRESH_CODES`) -> refresh metadata and fetch again from the same position;
* OFFSET_OUT_OF_RANGE -> reset by policy (``none``: the partition FAILS, :mod:`.reset`);
* authorization errors and anything else -> the partition is FAILED with the typed error,
  raised by the next ``poll`` and cleared by a seek.

A partition's data is kept as it arrived (:class:`_Completed`) and decoded only when ``poll``
reaches it (:func:`take`): batch by batch, CRC-checked when ``check.crcs`` is set, skipping
what precedes the position (a compressed batch's head, a re-fetch), control batches and, for
read_committed, aborted transactions (:mod:`.aborted`). Data that holds not one whole batch
at the position means the batch is larger than the fetch limits and the broker could not
send it (very old brokers; since KIP-74 they always do): :class:`RecordTooLargeError`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import attrs

from kafkastate.core.client import Client
from kafkastate.core.consumer.fetch import aborted as txn
from kafkastate.core.consumer.fetch import follower, reset
from kafkastate.core.consumer.fetch.state import (
    OFFSET_OUT_OF_RANGE,
    REFRESH_CODES,
    PositionState,
    TopicPartition,
    _Partition,
    await_metadata,
    move,
)
from kafkastate.core.protocol.records import Batch, iter_batches
from kafkastate.errors import KafkaError, RecordTooLargeError, error_for_code
from kafkastate.structs import ConsumerRecord

if TYPE_CHECKING:
    from kafkastate.core.consumer.fetcher import FetcherConfig

__all__ = ["hand_out", "has_records", "read_partition", "read_response", "take"]


@attrs.define(slots=True)
class _Completed:
    """One partition's data from one Fetch response, decoded lazily by ``poll``."""

    tp: TopicPartition
    fetch_offset: int
    records: bytes
    aborted: list[tuple[int, int]]  # (first_offset, producer_id), sorted
    batches: Any = None  # iterator over decoded batches, made on first poll
    pending: list[ConsumerRecord] = attrs.field(factory=list)  # the decoded batch being handed out
    taken: int = 0  # how many of ``pending`` were handed out
    aborted_producers: set[int] = attrs.field(factory=set)
    next_offset: int = -1  # the position after everything consumed so far
    leader_epoch: int = -1


def read_response(
    response: Any,
    offsets: Mapping[TopicPartition, int],
    parts: Mapping[TopicPartition, _Partition],
    completed: MutableMapping[TopicPartition, _Completed],
    client: Client,
    *,
    reset_to: int | None,
    now: float,
) -> list[TopicPartition]:
    """Take in a Fetch response without a top-level error.

    Args:
        response: the kio Fetch response.
        offsets: the fetch offset of each partition the request named.
        parts: the assigned partitions.
        completed: where fetched data waits for ``poll``; filled here.
        client: the machine's Client (topic ids, metadata refreshes).
        reset_to: the reset policy's ListOffsets timestamp, None for ``none``.
        now: the driver's clock.

    Returns:
        The partitions with data or a new error for ``poll``, in response order.
    """
    ids = {t.topic_id: name for name, t in client.cluster.topics.items()}
    arrived: list[TopicPartition] = []
    for t in response.responses:
        name = getattr(t, "topic", None)
        if name is None:
            name = ids.get(getattr(t, "topic_id", None))
        if name is None:
            continue
        for part in t.partitions:
            tp = (str(name), int(part.partition_index))
            p = parts.get(tp)
            if p is None or tp not in offsets or p.position != offsets[tp]:
                continue  # unassigned or seeked meanwhile: stale data
            if p.state is not PositionState.FETCHING:
                continue
            if read_partition(
                tp,
                p,
                part,
                offsets[tp],
                completed=completed,
                client=client,
                reset_to=reset_to,
                now=now,
            ):
                arrived.append(tp)
    return arrived


def read_partition(
    tp: TopicPartition,
    p: _Partition,
    part: Any,
    fetch_offset: int,
    *,
    completed: MutableMapping[TopicPartition, _Completed],
    client: Client,
    reset_to: int | None,
    now: float,
) -> bool:
    """Take in one partition of a Fetch response; True if ``poll`` has something new for
    it (data, or an error that FAILED it)."""
    code = int(part.error_code)
    p.last_fetch_at = now
    if code == 0:
        p.high_watermark = int(part.high_watermark)
        lso = int(getattr(part, "last_stable_offset", -1))
        p.last_stable_offset = lso
        p.log_start_offset = int(getattr(part, "log_start_offset", -1))
        p.read_replica = follower.preferred_read_replica(part)
        records = part.records
        data = b"" if records is None else bytes(records)
        if not data:
            return False
        completed[tp] = _Completed(
            tp=tp,
            fetch_offset=fetch_offset,
            records=data,
            aborted=txn.aborted_transactions(part),
            next_offset=fetch_offset,
        )
        return True
    if code == OFFSET_OUT_OF_RANGE:
        reset.apply_policy(p, tp, reset_to, out_of_range=fetch_offset)
        return p.state is PositionState.FAILED
    if code in REFRESH_CODES:
        p.read_replica = None
        await_metadata(p, client)
        return False
    move(p, PositionState.FAILED, what="Fetch error")
    p.error = error_for_code(code)(
        f"Fetch for {tp[0]}-{tp[1]} at offset {fetch_offset}", topic=tp[0], partition=tp[1]
    )
    return True


def take(
    done: _Completed, p: _Partition, limit: int, config: FetcherConfig
) -> list[ConsumerRecord]:
    """Up to ``limit`` records from ``done``, skipping what the application must not
    see; advances the position (``config``: ``check_crcs``, ``isolation_level`` and the
    fetch limits for the error).

    Raises:
        CorruptRecordError: a batch failed to decode (or its CRC check).
        RecordTooLargeError: no whole batch at the position (see the module docstring).
    """
    out: list[ConsumerRecord] = []
    if done.batches is None:
        done.batches = iter_batches(done.records, check_crcs=config.check_crcs)
    read_committed = config.read_committed
    while len(out) < limit:
        pending = done.pending
        if done.taken < len(pending):
            # Whole runs of a batch at once, not record by record.
            start = done.taken
            stop = min(len(pending), start + limit - len(out))
            out.extend(pending if start == 0 and stop == len(pending) else pending[start:stop])
            done.taken = stop
            p.position = pending[stop - 1].offset + 1
            continue
        if done.batches is False:
            break
        batch: Batch | None = next(done.batches, None)
        if batch is None:
            done.batches = False
            if not out and p.position == done.fetch_offset and done.records:
                _check_progress(done, p, config)
            break
        if batch.next_offset <= p.position:
            continue  # before the position (a compressed batch's head, a re-fetch)
        done.leader_epoch = batch.partition_leader_epoch
        if batch.is_control:
            txn.marker_seen(batch, done.aborted_producers)
            p.position = max(p.position, batch.next_offset)
            continue
        if (
            read_committed
            and batch.is_transactional
            and txn.is_aborted(batch, done.aborted, done.aborted_producers)
        ):
            p.position = max(p.position, batch.next_offset)
            continue
        position = p.position
        # decoded straight into the records the application gets: one object per record
        records = batch.consumer_records(ConsumerRecord, done.tp[0], done.tp[1])
        if batch.base_offset < position:  # the batch began before the position
            records = [r for r in records if r.offset >= position]
        done.pending, done.taken = records, 0
        if not records:
            p.position = max(p.position, batch.next_offset)
    p.position_epoch = done.leader_epoch
    return out


def _check_progress(done: _Completed, p: _Partition, config: FetcherConfig) -> None:
    """Data arrived but not one whole batch at the position: the first batch is larger
    than the fetch limits and the broker could not send it (very old brokers; since
    KIP-74 they always do)."""
    raise RecordTooLargeError(
        f"the batch at offset {p.position} of {done.tp[0]}-{done.tp[1]} is larger than "
        f"max_partition_fetch_bytes ({config.max_partition_fetch_bytes}) / "
        f"fetch_max_bytes ({config.fetch_max_bytes}) and the broker sent only "
        f"{len(done.records)} bytes of it"
    )


def has_records(
    parts: Mapping[TopicPartition, _Partition], completed: Mapping[TopicPartition, _Completed]
) -> bool:
    """Whether ``poll`` would return something (records or an error) now."""
    if any(p.state is PositionState.FAILED for p in parts.values()):
        return True
    return any(
        not parts[tp].paused and (c.taken < len(c.pending) or c.batches is None or c.records)
        for tp, c in completed.items()
    )


def hand_out(
    completed: MutableMapping[TopicPartition, _Completed],
    parts: Mapping[TopicPartition, _Partition],
    max_records: int,
    take_from: Callable[[_Completed, _Partition, int], list[ConsumerRecord]],
) -> tuple[list[tuple[TopicPartition, list[ConsumerRecord], int]], bool]:
    """``poll``'s turn over the fetched data: each partition hands out one run, in turn.

    Args:
        completed: the fetched data; drained partitions are removed.
        parts: the assigned partitions (paused and revoked ones are skipped).
        max_records: at most this many records in all.
        take_from: the machine's :func:`take`.

    Returns:
        ``(partition, records, leader_epoch)`` runs, and whether a partition was drained
        (it wants fetching again).

    Raises:
        KafkaError: the first partition to fail, if nothing was handed out before it (the
            partition is FAILED with it either way).
    """
    out: list[tuple[TopicPartition, list[ConsumerRecord], int]] = []
    left = max_records
    drained: list[TopicPartition] = []
    for tp in list(completed):
        if left <= 0:
            break
        p = parts.get(tp)
        if p is None or p.paused or p.revoking:
            continue
        done = completed[tp]
        try:
            records = take_from(done, p, left)
        except KafkaError as exc:
            del completed[tp]
            move(p, PositionState.FAILED, what="records undecodable")
            p.error = exc
            if out:
                break  # hand out what we have; the error comes next time
            raise
        if records:
            out.append((tp, records, done.leader_epoch))
            left -= len(records)
        if done.taken >= len(done.pending) and done.batches is False:
            drained.append(tp)
    for tp in drained:
        completed.pop(tp, None)
    return out, bool(drained)
