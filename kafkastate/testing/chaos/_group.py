"""The consumer-group workload: members that come and go while committing.

``--members`` slots each run one member after another; a member subscribes to the input,
reads batches and commits each batch's offsets (explicit, synchronous), and leaves after a
seeded lifetime; its slot then starts a new member (a rebalance each time). The run ends
once the commits reach the input's end. One log per process (JSON lines, one shared clock:
``time.monotonic()``, on Linux the machine's, so a restarted process's times compare):

- ``{"ev": "assigned" | "revoked" | "lost", "m", "parts", "t"}`` from the rebalance
  listener;
- ``{"ev": "closing", "m", "t"}`` when a member starts to leave (it owns nothing after);
- ``{"ev": "batch", "m", "recs": {partition: [offsets]}, "t"}`` what it processed, ``t``
  when the read returned them (the processing: the records are only logged);
- ``{"ev": "commit", "m", "offsets", "t0", "t", "ok"}`` each commit: sent at ``t0``,
  answered at ``t``, accepted or not (``"error"`` then says why).

The checker's ``owners`` check needs exactly these: a member's work on a partition (a batch
of it, a commit of it accepted) inside another member's ownership is a violation.

The process may be SIGKILLed and restarted (the ``client_kill`` fault): the runner then
appends ``{"ev": "killed", "t"}`` (every member of the dead process gave up what it owned
then), and the new process's members (named ``r<incarnation>/<slot>.<generation>``) rejoin
the group, resume from its committed offsets and pace from the first process's start.

The member's loop is a program of :class:`~._txn.Op` like the transactional workload's, so
the three runtimes share it.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from kafkastate.errors import KafkaError
from kafkastate.structs import TopicPartition

from ._txn import Op, Program

__all__ = [
    "GroupArgs",
    "GroupLog",
    "GroupProgress",
    "MemberListener",
    "member_lifetime",
    "member_program",
    "prefill_ends",
]


@dataclass(frozen=True)
class GroupArgs:
    """The workload's parameters (see ``_workload.py group``)."""

    topic: str
    group: str
    partitions: int
    members: int
    lifetime: float
    seed: int
    duration: float = 0.0
    """Seconds the commits are paced over (0: as fast as they go)."""
    incarnation: int = 0
    """How many times the process was killed and restarted before this one."""

    def member_name(self, slot: int, generation: int) -> str:
        """The log's name of the ``generation``-th member of ``slot`` in this process."""
        name = f"{slot}.{generation}"
        return name if self.incarnation == 0 else f"r{self.incarnation}/{name}"


class GroupLog:
    """The process's JSON-lines log, shared by its members (thread-safe)."""

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle
        self._lock = threading.Lock()

    def write(self, event: str, member: str, **fields: Any) -> None:
        """Append one event, stamped with ``time.monotonic()`` unless it has times."""
        entry = {"ev": event, "m": member, **fields}
        entry.setdefault("t", time.monotonic())
        with self._lock:
            self._handle.write(json.dumps(entry) + "\n")
            self._handle.flush()


@dataclass
class GroupProgress:
    """The highest offset committed per partition, by any member of this process."""

    ends: dict[int, int] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def due(self, duration: float) -> float:
        """When the commits so far were due, paced over ``duration`` seconds."""
        total = max(sum(self.ends.values()), 1)
        return self.started + duration * sum(self.committed.values()) / total

    def done(self) -> bool:
        """Whether the commits reached every partition's end."""
        return bool(self.ends) and all(
            self.committed.get(p, 0) >= end for p, end in self.ends.items()
        )

    def update(self, offsets: dict[TopicPartition, int]) -> None:
        """Record a successful commit."""
        for tp, offset in offsets.items():
            self.committed[tp.partition] = max(self.committed.get(tp.partition, 0), offset)


class MemberListener:
    """The rebalance listener: logs ownership changes (plain methods: every runtime runs
    them)."""

    def __init__(self, log: GroupLog, member: str) -> None:
        self._log = log
        self._member = member

    def _write(self, event: str, partitions: Any) -> None:
        self._log.write(event, self._member, parts=sorted(tp.partition for tp in partitions))

    def on_partitions_revoked(self, revoked: Any) -> None:
        """Log the partitions this member gives up."""
        self._write("revoked", revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        """Log the partitions this member now owns."""
        self._write("assigned", assigned)

    def on_partitions_lost(self, lost: Any) -> None:
        """Log the partitions this member lost without a rebalance."""
        self._write("lost", lost)


def member_lifetime(args: GroupArgs, slot: int, generation: int) -> float:
    """A member's seeded lifetime: between half and all of ``args.lifetime``."""
    rng = random.Random(f"{args.seed}-{slot}-{generation}")
    return rng.uniform(args.lifetime / 2, args.lifetime)


def member_program(
    args: GroupArgs,
    member: str,
    lifetime: float,
    log: GroupLog,
    progress: GroupProgress,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> Program:
    """One member's life as a generator of :class:`Op` (``subscribe``, ``getmany``,
    ``commit``, ``sleep``); the caller closes the consumer afterwards."""
    deadline = clock() + lifetime
    yield Op("subscribe", ([args.topic],), {"listener": MemberListener(log, member)})
    while clock() < deadline and not progress.done():
        ahead = progress.due(args.duration) - clock()
        if ahead > 0:
            yield Op("sleep", (min(ahead, 1.0),))
            continue
        batch: dict[TopicPartition, list[Any]] = yield Op(
            "getmany", kwargs={"timeout_ms": 500, "max_records": 200}
        )
        records = {tp: [r.offset for r in recs] for tp, recs in batch.items() if recs}
        if not records:
            continue
        log.write("batch", member, recs={tp.partition: found for tp, found in records.items()})
        offsets = {tp: found[-1] + 1 for tp, found in records.items()}
        started = clock()
        try:
            yield Op("commit", (offsets,))
        except KafkaError as exc:
            log.write(
                "commit", member, offsets=_plain(offsets), t0=started, ok=False, error=repr(exc)
            )
        else:
            log.write("commit", member, offsets=_plain(offsets), t0=started, ok=True)
            progress.update(offsets)
    log.write("closing", member)


def _plain(offsets: dict[TopicPartition, int]) -> dict[int, int]:
    return {tp.partition: offset for tp, offset in offsets.items()}


def prefill_ends(records: int, partitions: int) -> dict[int, int]:
    """The end offsets of an input written record ``i`` to partition ``i % partitions``."""
    return {p: len(range(p, records, partitions)) for p in range(partitions)}
