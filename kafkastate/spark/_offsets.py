"""Offsets and offset ranges: the JSON Spark checkpoints, range splitting, rate limits.

Pure functions over plain dicts, so every decision the source makes on the driver is tested
without a JVM or a broker. Offsets are Kafka *positions*: the offset of the next record to
read, so a range ``[start, end)`` holds ``end - start`` offsets (fewer records where the log
was compacted or holds transaction markers).

The JSON shape is Spark's own Kafka source's, ``{"topic": {"0": 42, "1": 7}}``. Spark
compares offsets as JSON *strings* (SPARK.md G12): the same offsets with keys in another
order look like new data and run an empty micro-batch on every trigger, so every offset the
source hands to Spark goes through :func:`to_json_offsets`, which sorts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from kafkastate.errors import KafkaConfigurationError, KafkaError

__all__ = [
    "EARLIEST",
    "LATEST",
    "DataLossError",
    "OffsetRange",
    "PartitionOffsets",
    "from_json_offsets",
    "rate_limit",
    "split_ranges",
    "to_json_offsets",
]

EARLIEST: Final = -2
"""In option JSON: the partition's log start offset (Spark's convention)."""
LATEST: Final = -1
"""In option JSON: the partition's log end offset (Spark's convention)."""

PartitionOffsets = dict[tuple[str, int], int]
"""Offset per ``(topic, partition)``."""


class DataLossError(KafkaError):
    """Records the query should have read are gone: deleted by retention, a partition or
    topic deleted, or offsets that went backwards (the topic was recreated). Raised when
    ``failOnDataLoss`` is true (the default); set it to false to skip what was lost, with a
    warning, as Spark's own Kafka source does."""


@attrs.frozen(kw_only=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic partition: one Spark input partition."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""
    start: int
    """First offset to read."""
    end: int
    """Offset after the last one to read."""

    @property
    def size(self) -> int:
        """Offsets in the range (0 if empty)."""
        return max(self.end - self.start, 0)


def to_json_offsets(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """Spark's offset dict, topics and partitions in sorted order (partitions numerically).

    Args:
        offsets: offset per ``(topic, partition)``.

    Returns:
        ``{topic: {str(partition): offset}}``, insertion-ordered so ``json.dumps`` gives one
        canonical string for the same offsets.
    """
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def from_json_offsets(value: Any, *, what: str) -> PartitionOffsets:
    """Parse Spark's offset dict (from a checkpoint, or an option's JSON, already loaded).

    Args:
        value: ``{topic: {partition: offset}}``; partitions as strings or ints.
        what: the option or object named in errors.

    Returns:
        Offset per ``(topic, partition)``.

    Raises:
        KafkaConfigurationError: not that shape.
    """
    if not isinstance(value, dict):
        raise KafkaConfigurationError(
            f'{what} must be a JSON object {{"topic": {{"0": offset}}}}, got {value!r}'
        )
    out: PartitionOffsets = {}
    for topic, partitions in value.items():
        if not isinstance(topic, str) or not topic or not isinstance(partitions, dict):
            raise KafkaConfigurationError(
                f'{what}: expected {{"topic": {{"0": offset}}}}, got {topic!r}: {partitions!r}'
            )
        for partition, offset in partitions.items():
            try:
                number = int(partition)
            except (TypeError, ValueError):
                number = -1
            if number < 0 or isinstance(offset, bool) or not isinstance(offset, int):
                raise KafkaConfigurationError(
                    f"{what}: partition {topic}/{partition!r} must be an int >= 0 with an "
                    f"integer offset, got {offset!r}"
                )
            out[(topic, number)] = offset
    return out


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Turn one range per topic partition into Spark input partitions.

    Empty ranges are dropped. Without ``min_partitions`` (or with no more than there are
    ranges) each range is one input partition. Otherwise, as Spark's Kafka source does,
    ranges whose share of ``min_partitions`` rounds to at most one stay whole and the others
    are cut into near-equal pieces in proportion to their size, so the total comes close to
    ``min_partitions``. ``max_records_per_partition`` then cuts any piece larger than it.

    Args:
        ranges: ranges to read.
        min_partitions: the ``minPartitions`` option (a hint, >= 1).
        max_records_per_partition: the ``maxRecordsPerPartition`` option (>= 1).

    Returns:
        Non-empty ranges, in the order given, pieces of a range in offset order.
    """
    kept = [r for r in ranges if r.size > 0]
    out = kept
    if kept and min_partitions is not None and min_partitions > len(kept):
        total = sum(r.size for r in kept)
        whole = [r for r in kept if round(r.size / total * min_partitions) <= 1]
        split_total = total - sum(r.size for r in whole)
        left = min_partitions - len(whole)
        out = []
        for r in kept:
            if any(r is w for w in whole):
                out.append(r)
            else:
                out.extend(_cut(r, max(round(r.size / split_total * left), 1)))
    if max_records_per_partition is not None:
        capped: list[OffsetRange] = []
        for r in out:
            capped.extend(_cut(r, math.ceil(r.size / max_records_per_partition)))
        out = capped
    return out


def _cut(r: OffsetRange, parts: int) -> list[OffsetRange]:
    """``r`` in ``parts`` near-equal pieces; the last one takes the remainder."""
    if parts <= 1:
        return [r]
    step = r.size // parts
    if step == 0:
        step, parts = 1, r.size
    pieces = []
    for i in range(parts):
        start = r.start + i * step
        end = r.end if i == parts - 1 else start + step
        pieces.append(attrs.evolve(r, start=start, end=end))
    return pieces


def rate_limit(
    start: Mapping[tuple[str, int], int],
    latest: Mapping[tuple[str, int], int],
    max_offsets: int,
) -> PartitionOffsets:
    """End offsets for a micro-batch of at most about ``max_offsets`` offsets.

    The limit is shared by backlog: each partition gets ``max_offsets * backlog / total``,
    rounded down, but at least one offset if it has any backlog, so a small partition is
    never starved by a large one (Spark's ``maxOffsetsPerTrigger`` semantics).

    Args:
        start: where each partition's batch begins.
        latest: each partition's available end.
        max_offsets: the limit (>= 1).

    Returns:
        End offset per partition of ``latest``; never below ``start``'s offset where the
        backlog is positive, never above ``latest``.
    """
    backlog = {tp: latest[tp] - start[tp] for tp in latest if tp in start}
    total = sum(size for size in backlog.values() if size > 0)
    if total <= max_offsets:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        size = backlog.get(tp, 0)
        if size <= 0:
            out[tp] = end
            continue
        share = max_offsets * size / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, start[tp] + step)
    return out
