"""The transactional read-process-write workload, written once as a program of operations
that a driver carries out on one runtime (asyncio, trio: awaited; blocking: called).

The program reads ``input`` (assign-based, ``read_committed``), and per batch: begins a
transaction, writes one output record per input record to the same partition (value
``b"<partition>:<offset>:<attempt>"``), adds the input offsets with
``send_offsets_to_transaction``, waits while it is ahead of its pace (up to 5 s, with the
transaction open) and commits -- except every ``abort_every``-th attempt, which
it aborts on purpose and re-reads. The log (JSON lines) names each attempt's outcome:
``committed``, ``aborted`` (on purpose) or ``unknown`` (an error; it may have committed),
with its input offsets.

It handles the errors a real application must, by kind, as a Java application would:

* the transaction failed (:class:`~kafkastate.errors.TransactionFailedError`, a failed
  send...): abort it, and the consumer goes back to the group's committed offsets (the
  *rewind*);
* the producer failed (:func:`is_fatal`: fenced, refused for good), or its abort failed:
  close the producer and the consumer, open new ones -- the same ``transactional.id``, so
  ``init_transactions`` fences whatever is left of the old producer and the coordinator
  aborts its open transaction -- and rewind;
* a step that timed out or found no broker (opening the clients at the start, a rewind's
  ``committed()``, a poll): try it again after a second.

Each recovery is a line of the log (``{"ev": "recovery", "what": "replace_producer" or
"retry_<step>", "error": ...}``). A step still failing a minute before the run's budget
(:func:`run_budget`) ends the process with its error.

The process may be SIGKILLed and restarted (the ``client_kill`` fault): the new process
reuses the transactional.id, so its producer fences the old one and the broker aborts the
open transaction; it resumes from the group's committed offsets. Its attempts are numbered
from ``incarnation * ATTEMPTS_PER_INCARNATION`` so they never collide with the old ones in
the shared log, and the attempt the kill cut is simply not logged (or half a line).
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import IO, Any, TypeVar

from kafkastate.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    KafkaError,
    ProducerClosedError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    TransactionCoordinatorFencedError,
    TransactionFailedError,
    UnsupportedVersionError,
)
from kafkastate.structs import TopicPartition

__all__ = [
    "ATTEMPTS_PER_INCARNATION",
    "FATAL_ERRORS",
    "Op",
    "TxnArgs",
    "is_fatal",
    "output_value",
    "run_async",
    "run_blocking",
    "run_budget",
    "txn_program",
]

ATTEMPTS_PER_INCARNATION = 1_000_000
"""Attempt numbers a process may use before the next incarnation's start."""


@dataclass(frozen=True)
class Op:
    """One operation for the driver: a client method name and its arguments."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class TxnArgs:
    """The workload's parameters (see ``_workload.py txn``)."""

    input: str
    output: str
    group: str
    partitions: int
    batch: int
    abort_every: int
    duration: float
    incarnation: int = 0
    """How many times the process was killed and restarted before this one."""
    paced_from: float | None = None
    """The ``time.monotonic()`` the pacing counts from (a restarted process keeps the first
    one's; ``None``: now)."""


def output_value(partition: int, offset: int, attempt: int) -> bytes:
    """The output record made from input ``partition@offset`` in transaction ``attempt``."""
    return f"{partition}:{offset}:{attempt}".encode()


Program = Generator[Op, Any, None]
_T = TypeVar("_T")


def txn_program(args: TxnArgs, log: IO[str]) -> Program:
    """The workload as a generator of :class:`Op`; the driver sends back each result (or
    throws the error it raised). Besides the clients' methods, the driver provides ``open``
    (a new producer with ``init_transactions`` done, then a new consumer) and ``close``
    (both, the consumer first; nothing to do when none is open)."""
    tps = [TopicPartition(args.input, p) for p in range(args.partitions)]
    started = time.monotonic() if args.paced_from is None else args.paced_from
    deadline = started + run_budget(args.duration) - 60.0
    recover = _Recovery(log, deadline)
    ends, position = yield from recover.retrying("start", lambda: _connect(tps))
    total = sum(ends.values())
    tried = 0
    while any(position[tp] < ends[tp] for tp in tps):
        try:
            batch: dict[TopicPartition, list[Any]] = yield Op(
                "getmany", kwargs={"timeout_ms": 500, "max_records": args.batch}
            )
        except KafkaError as exc:
            yield from recover.pause("poll", exc)
            continue
        if not batch:
            continue
        tried += 1
        attempt = args.incarnation * ATTEMPTS_PER_INCARNATION + tried
        offsets = {tp: [r.offset for r in records] for tp, records in batch.items() if records}
        entry: dict[str, Any] = {
            "attempt": attempt,
            "offsets": {tp.partition: found for tp, found in offsets.items()},
        }
        try:
            yield Op("begin_transaction")
            for tp, found in offsets.items():
                for offset in found:
                    yield Op(
                        "send",
                        (args.output, output_value(tp.partition, offset, attempt)),
                        {"partition": tp.partition},
                    )
            following = {tp: found[-1] + 1 for tp, found in offsets.items()}
            yield Op("send_offsets_to_transaction", (following, args.group))
            # the pace is kept inside the open transaction, so a fault or a client kill
            # most likely meets one open (a few seconds at most: far from its timeout)
            done = sum(position.values()) + sum(len(found) for found in offsets.values())
            due = min(started + args.duration * done / max(total, 1), time.monotonic() + 5.0)
            while (ahead := due - time.monotonic()) > 0:
                yield Op("sleep", (min(1.0, ahead),))
            if tried % args.abort_every == 0:
                yield Op("abort_transaction")
                entry["outcome"] = "aborted"
                for tp, found in offsets.items():
                    yield Op("seek", (tp, found[0]))
            else:
                yield Op("commit_transaction")
                entry["outcome"] = "committed"
                position.update(following)
        except KafkaError as exc:
            entry["outcome"] = "unknown"
            entry["error"] = repr(exc)
            dead = is_fatal(exc)
            if not dead:
                try:
                    yield Op("abort_transaction")
                except KafkaError as again:
                    # a producer that cannot abort cannot begin either: start a new one
                    entry["abort_error"] = repr(again)
                    dead = True
            _write(log, entry)
            if dead:
                recover.note("replace_producer", exc)
                _, position = yield from recover.retrying("reopen", lambda: _connect(tps))
            else:
                position = yield from recover.retrying("rewind", lambda: _rewind(tps))
            continue
        _write(log, entry)


FATAL_ERRORS: tuple[type[KafkaError], ...] = (
    ProducerFencedError,
    InvalidProducerEpochError,
    TransactionCoordinatorFencedError,
    TransactionalIdAuthorizationFailedError,
    InvalidTxnStateError,
    UnsupportedVersionError,
    ProducerClosedError,
)
"""The errors after which a transactional producer is done (Java's fatal errors: fenced by
a newer producer with the same ``transactional.id``, refused for good, closed): the
workload closes it and opens a new one with the same id. A
:class:`~kafkastate.errors.TransactionFailedError` (the transaction is lost, the producer
is not) is not one of them, even when a fence caused it (a transaction timeout)."""


def is_fatal(error: KafkaError) -> bool:
    """Whether ``error`` leaves the transactional producer unusable (see
    :data:`FATAL_ERRORS`)."""
    return isinstance(error, FATAL_ERRORS) and not isinstance(error, TransactionFailedError)


def run_budget(duration: float) -> float:
    """Seconds a run gives its workloads from its start to finish (the runner kills one
    still running then); a workload paced over ``duration`` s stops retrying a minute
    earlier, so it exits with the error that kept it from going on."""
    return duration * 4 + 300


RETRY_PAUSE = 1.0
"""Seconds between two tries of a step that failed (opening the clients, a rewind)."""


class _Recovery:
    """Retries of the workload's steps until its deadline, each one logged as
    ``{"ev": "recovery", "what": ..., "error": ..., "t": ...}``."""

    def __init__(self, log: IO[str], deadline: float) -> None:
        self._log = log
        self._deadline = deadline

    def note(self, what: str, error: KafkaError) -> None:
        """Log one recovery: ``replace_producer`` or ``retry_<step>``."""
        _write(
            self._log,
            {"ev": "recovery", "what": what, "error": repr(error), "t": time.monotonic()},
        )

    def pause(self, step: str, error: KafkaError) -> Generator[Op, Any, None]:
        """Log that ``step`` failed and wait before the next try; past the deadline,
        raise ``error`` instead."""
        self.note(f"retry_{step}", error)
        if time.monotonic() >= self._deadline:
            raise error
        yield Op("sleep", (RETRY_PAUSE,))

    def retrying(
        self, step: str, make: Callable[[], Generator[Op, Any, _T]]
    ) -> Generator[Op, Any, _T]:
        """Run the step ``make()`` returns, again after each KafkaError, until the
        deadline."""
        while True:
            try:
                return (yield from make())
            except KafkaError as exc:
                yield from self.pause(step, exc)


def _connect(
    tps: list[TopicPartition],
) -> Generator[Op, Any, tuple[dict[TopicPartition, int], dict[TopicPartition, int]]]:
    """Close whatever clients are open, open a new producer (``init_transactions``: it
    fences the old one and the coordinator aborts the transaction left open) and a new
    consumer, and rewind it; return the input's ends and the positions."""
    yield Op("close")
    yield Op("open")
    yield Op("assign", (tps,))
    ends: dict[TopicPartition, int] = yield Op("end_offsets", (tps,))
    position = yield from _rewind(tps)
    return ends, position


def _rewind(tps: list[TopicPartition]) -> Generator[Op, Any, dict[TopicPartition, int]]:
    """Seek every partition to the group's committed offset (0 if none); return them."""
    position: dict[TopicPartition, int] = {}
    for tp in tps:
        committed = yield Op("committed", (tp,))
        position[tp] = 0 if committed is None else int(committed)
        yield Op("seek", (tp, position[tp]))
    return position


def _write(log: IO[str], entry: Mapping[str, Any]) -> None:
    log.write(json.dumps(entry) + "\n")
    log.flush()


def _advance(program: Program, result: Any, error: KafkaError | None) -> Op | None:
    try:
        return program.throw(error) if error is not None else program.send(result)
    except StopIteration:
        return None


async def run_async(program: Program, ops: Mapping[str, Callable[..., Any]]) -> None:
    """Carry out ``program`` with ``ops`` (client methods; what they return is awaited when
    it is awaitable)."""
    result: Any = None
    error: KafkaError | None = None
    while (op := _advance(program, result, error)) is not None:
        result, error = None, None
        try:
            value = ops[op.name](*op.args, **(op.kwargs or {}))
            result = await value if inspect.isawaitable(value) else value
        except KafkaError as exc:
            error = exc


def run_blocking(program: Program, ops: Mapping[str, Callable[..., Any]]) -> None:
    """Carry out ``program`` with ``ops`` (blocking client methods)."""
    result: Any = None
    error: KafkaError | None = None
    while (op := _advance(program, result, error)) is not None:
        result, error = None, None
        try:
            result = ops[op.name](*op.args, **(op.kwargs or {}))
        except KafkaError as exc:
            error = exc
