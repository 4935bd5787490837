"""The independent checker: reads the topics back with confluent-kafka (librdkafka, not
kafkastate) and judges them against the workloads' ack logs.

Counts, each of which must be 0:

- ``owners``: a group member working on a partition (a record processed, a commit
  accepted) while another member owned it since later (from the members' logs of
  assignments, revocations, batches and commits, on the machine's one monotonic clock);
  an overlap of two ownerships without such work is the classic protocol's zombie window,
  counted apart (:attr:`CheckResult.zombie_windows`), not a violation;

- ``lost``: acknowledged records missing from the log, or another record at their offset;
- ``duplicates``: a (key, seq) read more than once;
- ``order``: a key whose seqs go backwards in offset order (a key lives on one partition);
- ``ack_mismatch``: one (key, seq) acknowledged at two different offsets;
- ``aborted_read``: a record of a transaction aborted on purpose seen by a
  ``read_committed`` reader;
- ``offsets``: a committed group offset that skips records not processed, or would replay
  records already processed (it must equal the input's end once the workload is done);
- ``unreadable``: partitions the reader could not read to their end.
"""

from __future__ import annotations

import json
import time
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CHECK_NAMES",
    "CheckResult",
    "check_produce",
    "check_group",
    "check_txn",
    "committed_offsets",
    "fenced_records",
    "mark_killed",
    "read_topics",
]

CHECK_NAMES = (
    "owners",
    "lost",
    "duplicates",
    "order",
    "ack_mismatch",
    "aborted_read",
    "offsets",
    "unreadable",
)


@dataclass
class CheckResult:
    """What the checker found for one workload's topic.

    Attributes:
        topic: the topic.
        read: records read back.
        acked: distinct records the workload logged as acknowledged.
        failed: records the workload logged as failed (their fate is unknown).
        fenced: (transactional output) records only a ``read_uncommitted`` reader sees
            whose attempt the log does not name: written in a transaction a killed process
            left open, aborted when its restart fenced it. Not a violation: the evidence
            that a kill met an open transaction.
        zombie_windows: (group) overlaps of two members' ownerships of a partition in
            which the older owner did no work on it: the coordinator gave the partition
            to another member before the older one heard it was removed (or while it
            closed). Not a violation: the evidence that faults opened such windows.
        counts: check name -> violations (:data:`CHECK_NAMES`).
        examples: a few violations per check (and zombie windows), for the report.
        recoveries: (transactional workload) what its log says it recovered from, by kind
            (``replace_producer``, ``retry_rewind``, ``retry_start``...): not violations.
    """

    topic: str
    read: int = 0
    acked: int = 0
    failed: int = 0
    fenced: int = 0
    zombie_windows: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CHECK_NAMES, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    recoveries: Counter[str] = field(default_factory=Counter)

    def violation(self, check: str, example: str) -> None:
        """Count one violation of ``check``, keeping the first few examples."""
        self.counts[check] += 1
        self.note(check, example)

    def note(self, kind: str, example: str) -> None:
        """Keep one of the first few examples of ``kind`` (a check or not) for the
        report."""
        if len(self.examples[kind]) < 5:
            self.examples[kind].append(example)

    @property
    def ok(self) -> bool:
        """Whether every count is 0."""
        return not any(self.counts.values())


Read = tuple[list[tuple[int, int, bytes | None, bytes | None]], list[int]]
"""What :func:`read_topics` read of one topic: ``(partition, offset, key, value)`` of every
record, and the partitions it could not read to their end."""


def read_topics(
    bootstrap: str,
    topics: Sequence[str],
    *,
    timeout: float = 180.0,
    isolation: str = "read_committed",
) -> dict[str, Read]:
    """Read every partition of ``topics`` from the start to its end with confluent-kafka,
    ``read_committed``, one consumer for all.

    Args:
        bootstrap: brokers to read from (directly, not through the fault proxy).
        topics: the topics.
        timeout: seconds for the whole read.

    Returns:
        Topic -> what was read.
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
            "group.id": "chaos-checker",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    out: dict[str, Read] = {topic: ([], []) for topic in topics}
    try:
        meta = consumer.list_topics(timeout=30).topics
        ends = {
            (topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for topic in topics
            for p in sorted(meta[topic].partitions)
        }
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
        pending = {tp for tp, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10_000, timeout=1.0):
                error = message.error()
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if topic is None or partition is None or offset is None:
                    raise RuntimeError(f"checker read: {error}")
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if offset >= ends[(topic, partition)]:
                            pending.discard((topic, partition))
                        continue
                    raise RuntimeError(f"checker read of {topic}: {error}")
                out[topic][0].append((partition, offset, message.key(), message.value()))
                if offset + 1 >= ends[(topic, partition)]:
                    pending.discard((topic, partition))
        for topic, partition in sorted(pending):
            out[topic][1].append(partition)
        return out
    finally:
        consumer.close()


def mark_killed(path: Path, at: float) -> None:
    """Append ``{"ev": "killed", "t": at}`` to a workload's log after its process was
    SIGKILLed, first ending the line the kill may have cut (a torn line)."""
    with open(path, "ab+") as handle:
        size = handle.seek(0, 2)
        torn = False
        if size > 0:
            handle.seek(size - 1)
            torn = handle.read(1) != b"\n"
        handle.seek(0, 2)
        handle.write((b"\n" if torn else b"") + json.dumps({"ev": "killed", "t": at}).encode())
        handle.write(b"\n")


def _load(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The JSON lines of ``paths``. A line that does not parse is the one a SIGKILL cut
    (the process was writing it): allowed as a file's last line or just before a
    ``killed`` mark, and skipped; anywhere else it is an error."""
    entries: list[dict[str, Any]] = []
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as handle:
            lines = [line for line in handle.read().split("\n") if line.strip()]
        for i, line in enumerate(lines):
            try:
                entries.append(json.loads(line))
            except ValueError:
                following = lines[i + 1] if i + 1 < len(lines) else None
                if following is not None and '"ev": "killed"' not in following:
                    raise ValueError(f"{path}: line {i + 1} is not JSON: {line!r}") from None
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
        records: what :func:`read_topics` read.
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


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets of ``topic`` (-1: none), read with confluent-kafka."""
    from confluent_kafka import Consumer, TopicPartition  # noqa: PLC0415

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed(
            [TopicPartition(topic, p) for p in range(partitions)], timeout=30
        )
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def check_txn(
    topic: str,
    records: Sequence[tuple[int, int, bytes | None, bytes | None]],
    unreadable: Sequence[int],
    *,
    input_ends: dict[int, int],
    committed: dict[int, int],
    txn_logs: Iterable[Path],
) -> CheckResult:
    """Judge a transactional workload's output (read ``read_committed``) against its input,
    the group's committed offsets and the workload's log of attempts.

    A process SIGKILLed and restarted (a ``killed`` mark in the log) leaves its last attempt
    unlogged, or its line torn: if that attempt committed, its output is visible and counts
    as an unknown outcome (``failed``); otherwise its transaction was aborted when the new
    producer fenced the old one.

    Every input record must be in the output exactly once (``lost``, ``duplicates``), in
    input order per partition (``order``); no record of an attempt aborted on purpose may be
    visible (``aborted_read``); an attempt logged as committed must be visible (``lost``);
    the committed offsets must equal the input's end (``offsets``).

    Args:
        topic: the output topic.
        records: what :func:`read_topics` read (``read_committed``).
        unreadable: partitions it could not read to their end.
        input_ends: input partition -> its end offset (records written before the run).
        committed: input partition -> the group's committed offset.
        txn_logs: the workload's JSON-lines logs of attempts.

    Returns:
        The counts (``acked``: input records processed in committed attempts; ``failed``:
        attempts with an unknown outcome).
    """
    result = CheckResult(topic=topic, read=len(records))
    for partition in unreadable:
        result.violation("unreadable", f"partition {partition} not read to its end")
    attempts: dict[int, str] = {}
    committed_inputs: dict[tuple[int, int], int] = {}
    kills = 0
    for entry in _load(txn_logs):
        if entry.get("ev") == "killed":
            kills += 1
            continue
        if entry.get("ev") == "recovery":
            result.recoveries[str(entry["what"])] += 1
            continue
        attempt, outcome = int(entry["attempt"]), str(entry["outcome"])
        attempts[attempt] = outcome
        if outcome == "unknown":
            result.failed += 1
        if outcome == "committed":
            for partition, offsets in entry["offsets"].items():
                for offset in offsets:
                    committed_inputs[(int(partition), int(offset))] = attempt
    result.acked = len(committed_inputs)
    seen: dict[tuple[int, int], int] = {}
    last: dict[int, int] = {}
    cut: set[int] = set()
    for partition, offset, _key, value in sorted(records, key=lambda r: (r[0], r[1])):
        try:
            in_partition, in_offset, attempt = (int(x) for x in (value or b"").split(b":"))
        except ValueError:
            result.violation("lost", f"p{partition}@{offset}: unexpected value {value!r}")
            continue
        if attempt not in attempts:
            # only a kill leaves a visible attempt unlogged: it committed, then the process
            # died before its log line (an unknown outcome, like a failed commit)
            if not kills:
                result.violation("lost", f"p{partition}@{offset}: attempt {attempt} not logged")
            cut.add(attempt)
        source = (in_partition, in_offset)
        if attempts.get(attempt) == "aborted":
            result.violation("aborted_read", f"p{partition}@{offset}: from aborted {attempt}")
        if source in seen:
            result.violation(
                "duplicates",
                f"input p{in_partition}@{in_offset} in attempts {seen[source]} and {attempt}",
            )
        seen[source] = attempt
        if in_partition != partition or in_offset < last.get(partition, -1):
            result.violation("order", f"p{partition}@{offset}: input p{in_partition}@{in_offset}")
        last[partition] = max(last.get(partition, -1), in_offset)
    for source, attempt in committed_inputs.items():
        if seen.get(source) != attempt:
            result.violation(
                "lost",
                f"input p{source[0]}@{source[1]} committed in attempt {attempt},"
                f" read {seen.get(source)}",
            )
    result.failed += len(cut)
    _input_consumed(result, input_ends, committed, set(seen) | set(committed_inputs))
    return result


def fenced_records(
    committed_read: Sequence[tuple[int, int, bytes | None, bytes | None]],
    uncommitted_read: Sequence[tuple[int, int, bytes | None, bytes | None]],
    txn_logs: Iterable[Path],
) -> int:
    """How many output records of attempts the log does not name only a
    ``read_uncommitted`` reader sees (see :attr:`CheckResult.fenced`)."""
    logged = {int(e["attempt"]) for e in _load(txn_logs) if "attempt" in e}
    visible = {(p, o) for p, o, _k, _v in committed_read}
    count = 0
    for partition, offset, _key, value in uncommitted_read:
        parts = (value or b"").split(b":")
        if (partition, offset) in visible or len(parts) != 3 or not parts[2].isdigit():
            continue
        count += int(parts[2]) not in logged
    return count


def check_group(
    topic: str,
    input_ends: dict[int, int],
    committed: dict[int, int],
    member_logs: Iterable[Path],
) -> CheckResult:
    """Judge a consumer-group workload: no two members working on one partition at the
    same time, every input record processed, the group's final committed offsets at the
    input's end.

    A member owns a partition from its ``assigned`` callback until its ``revoked`` or
    ``lost`` callback or its ``closing``; a ``killed`` mark (the runner SIGKILLed the
    process) ends every ownership of the process's members at its time. Two ownerships
    of one partition may overlap: with the classic protocol the coordinator gives the
    partitions of a member it removed (its session expired while a fault cut it off, or it
    did not rejoin in time) to another member before the removed one hears of it, and
    generation fencing refuses the removed member's commits. Such a window is a violation
    (``owners``) only if the older owner *worked* on the partition in it: a record of the
    partition processed (a ``batch`` line, stamped when the member got the records) or a
    commit of it the coordinator accepted (``ok``) between its start ``t0`` and its answer
    ``t`` -- the log cannot tell when in that span the coordinator accepted it, so any
    overlap counts, sound at the price of counting an answer delayed past the new owner's
    assignment. Work on a partition by a member that did not own it, while another did, is
    a violation too. A window with no such work is counted in
    :attr:`CheckResult.zombie_windows`, not a violation. A commit that failed without the
    coordinator's refusal (a timeout: it may have been accepted) is not counted as work:
    the log cannot prove it was; the window's example names it.

    The times are ``time.monotonic()`` of the workload's processes: on Linux one clock for
    every process of the machine (a killed process and its restart compare).

    Args:
        topic: the input topic.
        input_ends: partition -> its end offset.
        committed: partition -> the group's committed offset (read with confluent-kafka).
        member_logs: the workload's JSON-lines logs.

    Returns:
        The counts (``acked``: records processed, replays included; ``failed``: commits
        that failed; ``read``: members).
    """
    result = CheckResult(topic=topic)
    owned: dict[tuple[str, int], float] = {}
    spans: dict[int, list[_Span]] = defaultdict(list)
    work: dict[int, list[_Work]] = defaultdict(list)
    unknown: dict[int, list[_Work]] = defaultdict(list)  # commits failed without an answer
    processed: set[tuple[int, int]] = set()
    members: set[str] = set()
    for entry in _load(member_logs):
        member, event, at = str(entry.get("m", "")), str(entry["ev"]), float(entry["t"])
        if event != "killed":
            members.add(member)
        if event == "assigned":
            for partition in entry["parts"]:
                owned.setdefault((member, int(partition)), at)
        elif event == "killed":
            # the process died: its members (the only ones owning anything in this log)
            # processed nothing after this
            for (holder, partition), since in sorted(owned.items()):
                spans[partition].append(_Span(since, at, holder))
            owned.clear()
        elif event in ("revoked", "lost", "closing"):
            # "closing" names no partitions: the member gives up all it owns
            parts = entry["parts"] if "parts" in entry else [p for m, p in owned if m == member]
            for partition in parts:
                start = owned.pop((member, int(partition)), None)
                if start is not None:
                    spans[int(partition)].append(_Span(start, at, member))
        elif event == "batch":
            for partition, offsets in entry["recs"].items():
                result.acked += len(offsets)
                processed.update((int(partition), int(offset)) for offset in offsets)
                if offsets:
                    what = f"processed p{partition}@{offsets[0]}-{offsets[-1]} at {at:.3f}"
                    work[int(partition)].append(_Work(at, at, member, what))
        elif event == "commit":
            refused = str(entry.get("error", "")).split("(")[0] in _REFUSED
            if not entry["ok"]:
                result.failed += 1
            sent = float(entry["t0"])
            for partition, offset in entry["offsets"].items():
                if entry["ok"]:
                    what = f"commit of p{partition} at {offset} accepted"
                    work[int(partition)].append(
                        _Work(sent, at, member, f"{what} ({sent:.3f}-{at:.3f})")
                    )
                elif not refused:
                    what = f"a commit of unknown outcome ({sent:.3f}-{at:.3f})"
                    unknown[int(partition)].append(_Work(sent, at, member, what))
    for (member, partition), start in owned.items():  # never gave it up: owns it for good
        spans[partition].append(_Span(start, float("inf"), member))
    for partition in sorted(spans.keys() | work.keys()):
        _check_owners(
            result, partition, sorted(spans[partition]), work[partition], unknown[partition]
        )
    result.read = len(members)
    _input_consumed(result, input_ends, committed, processed)
    return result


@dataclass(frozen=True, order=True)
class _Span:
    """A member's ownership of a partition, from ``start`` until ``end``."""

    start: float
    end: float
    member: str


@dataclass(frozen=True)
class _Work:
    """A member's work on a partition, done at some time from ``first`` to ``last``."""

    first: float
    last: float
    member: str
    what: str


_REFUSED = frozenset(
    {
        "CommitFailedError",
        "FencedInstanceIdError",
        "IllegalGenerationError",
        "RebalanceInProgressError",
        "UnknownMemberIdError",
    }
)
"""The errors of a commit the coordinator refused (any other failed commit, a timeout, may
have been accepted)."""


def _check_owners(
    result: CheckResult,
    partition: int,
    spans: list[_Span],
    work: list[_Work],
    unknown: list[_Work],
) -> None:
    """Count the overlapping ownerships of one partition (``spans``, by start): an
    ``owners`` violation where the older owner (or a member owning nothing) worked on the
    partition within the newer owner's span, else a zombie window (whose example names a
    commit of the older owner's whose outcome is unknown, if one overlapped it)."""
    failed: set[tuple[_Span | None, _Span]] = set()
    finite = [span for span in spans if span.end != float("inf")]
    starts = [span.start for span in finite]
    longest = max((span.end - span.start for span in finite), default=0.0)
    forever = [span for span in spans if span.end == float("inf")]
    by_member: dict[str, list[_Span]] = defaultdict(list)
    for span in spans:
        by_member[span.member].append(span)
    for item in work:
        # the member's ownership the work belongs to: its last one that started before
        mine = by_member.get(item.member, [])
        index = bisect_right([span.start for span in mine], item.first)
        own = mine[index - 1] if index else None
        first = bisect_left(starts, item.first - longest)
        for other in [*finite[first : bisect_right(starts, item.last)], *forever]:
            if other.member == item.member or other.end <= item.first or other.start > item.last:
                continue
            if own is not None and own.start > other.start:
                continue  # the newer owner at work: ``other`` is the zombie
            if (own, other) not in failed:
                failed.add((own, other))
                held = f"owned it {own.start:.3f}-{own.end:.3f}" if own else "had not owned it"
                result.violation(
                    "owners",
                    f"partition {partition}: {item.member} ({held}) {item.what} while"
                    f" {other.member} owned it (assigned at {other.start:.3f})",
                )
    for i, newer in enumerate(spans):
        for older in spans[:i]:
            if older.member == newer.member or older.end <= newer.start:
                continue
            if (older, newer) not in failed:
                result.zombie_windows += 1
                until = min(older.end, newer.end)
                doubt = [
                    f", {item.what}"
                    for item in unknown
                    if item.member == older.member and item.first < until
                    if item.last > newer.start
                ]
                result.note(
                    "zombie_windows",
                    f"partition {partition}: {newer.member} assigned at {newer.start:.3f}"
                    f" while {older.member} owned it until {older.end:.3f}, no work of"
                    f" {older.member} in between{''.join(doubt[:1])}",
                )


def _input_consumed(
    result: CheckResult,
    input_ends: dict[int, int],
    committed: dict[int, int],
    processed: set[tuple[int, int]],
) -> None:
    """Every input record processed (else ``lost``: a skip), and the group's committed
    offset at each partition's end (else ``offsets``)."""
    for partition, end in sorted(input_ends.items()):
        for offset in range(end):
            if (partition, offset) not in processed:
                result.violation("lost", f"input p{partition}@{offset} never processed")
        if committed.get(partition, -1) != end:
            result.violation(
                "offsets",
                f"partition {partition}: committed {committed.get(partition)}, input end {end}",
            )
