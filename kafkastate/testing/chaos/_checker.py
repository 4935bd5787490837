"""The independent checker: reads the topics back with confluent-kafka (librdkafka, not
kafkastate) and judges them against the workloads' ack logs.

Counts, each of which must be 0:

- ``lost``: acknowledged records missing from the log, or another record at their offset;
- ``duplicates``: a (key, seq) read more than once;
- ``order``: a key whose seqs go backwards in offset order (a key lives on one partition);
- ``ack_mismatch``: one (key, seq) acknowledged at two different offsets;
- ``unreadable``: partitions the reader could not read to their end.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["CHECK_NAMES", "CheckResult", "check_produce", "read_topic"]

CHECK_NAMES = ("lost", "duplicates", "order", "ack_mismatch", "unreadable")


@dataclass
class CheckResult:
    """What the checker found for one workload's topic.

    Attributes:
        topic: the topic.
        read: records read back.
        acked: distinct records the workload logged as acknowledged.
        failed: records the workload logged as failed (their fate is unknown).
        counts: check name -> violations (:data:`CHECK_NAMES`).
        examples: a few violations per check, for the report.
    """

    topic: str
    read: int = 0
    acked: int = 0
    failed: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHECK_NAMES, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def violation(self, check: str, example: str) -> None:
        """Count one violation of ``check``, keeping the first few examples."""
        self.counts[check] += 1
        if len(self.examples[check]) < 5:
            self.examples[check].append(example)

    @property
    def ok(self) -> bool:
        """Whether every count is 0."""
        return not any(self.counts.values())


def read_topic(
    bootstrap: str, topic: str, *, isolation: str = "read_committed", timeout: float = 120.0
) -> tuple[list[tuple[int, int, bytes | None, bytes | None]], list[int]]:
    """Read every partition of ``topic`` from the start to its end with confluent-kafka.

    Args:
        bootstrap: brokers to read from (directly, not through the fault proxy).
        topic: the topic.
        isolation: ``read_committed`` or ``read_uncommitted``.
        timeout: seconds for the whole read.

    Returns:
        ``(partition, offset, key, value)`` of every record, and the partitions not read to
        their end in time.
    """
    from confluent_kafka import (  # noqa: PLC0415 -- the checker's own, optional, client
        OFFSET_BEGINNING,
        Consumer,
        KafkaError,
        TopicPartition,
    )

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-checker-{topic}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = {p for p in partitions if ends[p] > 0}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                error = message.error()
                partition, offset = message.partition(), message.offset()
                if partition is None or offset is None:
                    raise RuntimeError(f"checker read of {topic}: {error}")
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if offset >= ends[partition]:
                            pending.discard(partition)
                        continue
                    raise RuntimeError(f"checker read of {topic}: {error}")
                out.append((partition, offset, message.key(), message.value()))
                if offset + 1 >= ends[partition]:
                    pending.discard(partition)
        return out, sorted(pending)
    finally:
        consumer.close()


def _load(paths: Iterable[Path]) -> list[dict[str, Any]]:
    entries = []
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    entries.append(json.loads(line))
    return entries


def check_produce(
    topic: str,
    records: Sequence[tuple[int, int, bytes | None, bytes | None]],
    unreadable: Sequence[int],
    ack_logs: Iterable[Path],
) -> CheckResult:
    """Judge a producer workload's topic against its ack log(s).

    Args:
        topic: the topic.
        records: what :func:`read_topic` read.
        unreadable: partitions it could not read to their end.
        ack_logs: the workload's JSON-lines ack logs.

    Returns:
        The counts.
    """
    result = CheckResult(topic=topic, read=len(records))
    for partition in unreadable:
        result.violation("unreadable", f"partition {partition} not read to its end")
    at_offset: dict[tuple[int, int], tuple[int, int]] = {}
    seen: dict[tuple[int, int], tuple[int, int]] = {}
    last_seq: dict[int, tuple[int, int]] = {}
    for partition, offset, _key, value in sorted(records, key=lambda r: (r[0], r[1])):
        try:
            key_text, seq_text = (value or b"").decode().split(":")
            key, seq = int(key_text), int(seq_text)
        except ValueError:
            result.violation("lost", f"p{partition}@{offset}: unexpected value {value!r}")
            continue
        at_offset[(partition, offset)] = (key, seq)
        if (key, seq) in seen:
            first = seen[(key, seq)]
            result.violation(
                "duplicates", f"{key}:{seq} at p{first[0]}@{first[1]} and p{partition}@{offset}"
            )
        else:
            seen[(key, seq)] = (partition, offset)
        previous = last_seq.get(key)
        if previous is not None and seq < previous[0]:
            result.violation(
                "order",
                f"key {key}: seq {seq} at p{partition}@{offset} after seq {previous[0]}"
                f" at @{previous[1]}",
            )
        last_seq[key] = (seq, offset)
    acked: dict[tuple[int, int], tuple[int, int]] = {}
    for entry in _load(ack_logs):
        ident = (int(entry["k"]), int(entry["s"]))
        if "err" in entry:
            result.failed += 1
            continue
        where = (int(entry["p"]), int(entry["o"]))
        if ident in acked and acked[ident] != where:
            result.violation(
                "ack_mismatch", f"{ident[0]}:{ident[1]} acked at {acked[ident]} and {where}"
            )
        acked[ident] = where
    result.acked = len(acked)
    for ident, where in acked.items():
        found = at_offset.get(where)
        if found != ident:
            result.violation(
                "lost", f"{ident[0]}:{ident[1]} acked at p{where[0]}@{where[1]}, read {found}"
            )
    return result
