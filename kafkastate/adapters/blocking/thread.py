"""The IO thread behind :class:`kafkastate.sync.KafkaProducer`.

One thread per producer runs the :class:`~kafkastate.core.producer.producer.ProducerMachine`
and a :class:`~kafkastate.adapters.blocking.SocketLoop`. One lock guards the machine: the IO
thread holds it for everything except the wait in ``select``, and ``send`` from a user
thread takes it to append its record directly -- the common case costs no thread switch.
The IO thread is woken (a socketpair whose reading end sits in the selector) only when the
append changed what it must do (the machine's :attr:`~ProducerMachine.steps` moved: a batch
opened or filled), or for the other commands, which go through a deque. The loop is the
usual one (STYLE.md §12): run the queued commands, drain events into futures and replies,
write, wait for a socket, the waker, the machine's deadline or a caller's deadline
(``partitions_for``, ``close``), feed, repeat.

Nothing is decided here. Waiting is the machine's too (``config.accumulator.max_block``):
a record whose topic metadata has not arrived, or that does not fit ``buffer_memory``,
waits in the core, and the sending thread waits for the RecordsAdmitted -- or the
RecordsFailed that ends the wait -- naming it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import attrs

from kafkastate.adapters._common import no_brokers_error, report_statistics
from kafkastate.adapters.blocking import SocketLoop
from kafkastate.core import report
from kafkastate.core.client import (
    MetadataUpdated,
)
from kafkastate.core.producer.accumulator import (
    BufferSpaceFreed,
    FlushCompleted,
    FlushId,
    RecordId,
    RecordsAcknowledged,
    RecordsAdmitted,
    RecordsFailed,
)
from kafkastate.core.producer.producer import (
    ProducerClosed,
    ProducerClosedError,
    ProducerConfig,
    ProducerFailed,
    ProducerIdAssigned,
    ProducerMachine,
)
from kafkastate.core.producer.transactions import TransactionOperationCompleted, TransactionOpId
from kafkastate.core.report import Report, StatisticsReported
from kafkastate.errors import (
    IllegalStateError,
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
)

__all__ = ["BatchSink", "ProducerThread", "RecordSink", "Reply", "closed_error"]

log = logging.getLogger("kafkastate.sync")


def closed_error() -> ProducerClosedError:
    """What a call on a closed ``KafkaProducer`` raises: the core's type for a closed
    producer on every face, an ``IllegalStateError`` as kafka-python raises."""
    return ProducerClosedError("KafkaProducer already closed")


class RecordSink(Protocol):
    """Where the IO thread reports one record's outcome (a future)."""

    def record_acknowledged(self, topic: str, partition: int, offset: int, timestamp: int) -> None:
        """The broker wrote the record."""

    def record_failed(self, error: BaseException) -> None:
        """The record will not be written."""


class BatchSink:
    """A :class:`RecordSink` for the records of one ``send_batch``, told once per
    acknowledged run of them (a whole batch, or a piece of a split one)."""

    __slots__ = ()

    def record_acknowledged(self, topic: str, partition: int, offset: int, timestamp: int) -> None:
        """One record was written (not called for a run: :meth:`records_acknowledged`)."""
        self.records_acknowledged(topic, partition, 1, offset, timestamp)

    def records_acknowledged(
        self, topic: str, partition: int, count: int, offset: int, timestamp: int
    ) -> None:
        """``count`` consecutive records were written, the first at ``offset`` (-1 with
        ``acks=0``) with ``timestamp``."""
        raise NotImplementedError

    def record_failed(self, error: BaseException) -> None:
        """Records failed (called once per failed run or record)."""
        raise NotImplementedError


class Reply:
    """A one-shot answer from the IO thread to a waiting user thread."""

    __slots__ = ("_event", "error", "value")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    def set(self, value: Any = None) -> None:
        """Answer with ``value``."""
        self.value = value
        self._event.set()

    def fail(self, error: BaseException) -> None:
        """Answer with ``error``."""
        self.error = error
        self._event.set()

    @property
    def done(self) -> bool:
        """Whether an answer is there."""
        return self._event.is_set()

    def wait(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds (None: forever); return whether answered."""
        return self._event.wait(timeout)


# ------------------------------------------------------------------------------ commands


@attrs.define(slots=True, eq=False)
class _Send:
    """A send the machine keeps waiting (for metadata or buffer memory)."""

    sink: RecordSink
    reply: Reply | None  # None: sent from the IO thread itself, nobody waits
    rids: Sequence[RecordId] = ()  # a batch's ids (a record's own id is the key)


@attrs.define(slots=True, eq=False)
class _Flush:
    reply: Reply


@attrs.define(slots=True, eq=False)
class _Partitions:
    topic: str | None  # None: bootstrap, wait for any broker
    deadline: float
    max_block: float
    reply: Reply


@attrs.define(slots=True, eq=False)
class _Metrics:
    reply: Reply


@attrs.define(slots=True, eq=False)
class _Close:
    deadline: float | None
    reply: Reply


_Command = _Flush | _Partitions | _Metrics | _Close


# ---------------------------------------------------------------------------------- loop


class ProducerThread:
    """Runs a ProducerMachine on its own thread; other threads send it commands.

    Args:
        config: the machine's settings; ``accumulator.max_block`` (``max_block_ms``) bounds
            a send's wait for buffer memory, which the machine keeps.
        ssl_context: TLS for every connection, or None for plaintext.
        name: the thread's name.
        token_provider: the ``sasl_oauth_token_provider``, asked for OAUTHBEARER tokens.
        stats_cb: called on the IO thread with the machine's statistics reports.

    Raises:
        KafkaConfigurationError: ``config.accumulator.max_block`` is None.
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        ssl_context: ssl.SSLContext | None,
        name: str,
        token_provider: Any = None,
        stats_cb: Callable[[Any], Any] | None = None,
    ) -> None:
        self._stats_cb = stats_cb
        if config.accumulator.max_block is None:
            raise KafkaConfigurationError("ProducerThread needs config.accumulator.max_block")
        self._machine = ProducerMachine(config, rng=random.SystemRandom())
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._loop = SocketLoop(
            self._machine,
            waker=self._wake_r,
            ssl_context=ssl_context,
            connect_timeout=config.client.socket_connection_setup_timeout,
            token_provider=token_provider,
        )
        # Guards the machine and everything below. Reentrant: callbacks run on the IO
        # thread, which holds it, and may send.
        self._lock = threading.RLock()
        self._accepting = True
        self._commands: collections.deque[_Command] = collections.deque()
        self._sinks: dict[RecordId, RecordSink] = {}
        self._blocked: dict[RecordId, _Send] = {}  # waiting in the machine
        self._waiting_partitions: list[_Partitions] = []
        self._flushes: dict[FlushId, Reply] = {}
        self._txn_ops: dict[TransactionOpId, Reply] = {}
        self._close: _Close | None = None
        self._close_replies: list[Reply] = []
        self._finished = False
        self._crash: BaseException | None = None
        self._counts = {"refused": 0, "timed_out": 0}  # send() raised: the adapter's to count
        self._final_metrics: Report | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        """The IO thread (started by :meth:`start`)."""

    @property
    def machine(self) -> ProducerMachine:
        """The machine; touch it only under :meth:`transaction_call` (the lock)."""
        return self._machine

    def start(self) -> None:
        """Start the IO thread."""
        self.thread.start()

    @property
    def on_io_thread(self) -> bool:
        """Whether the caller runs on the IO thread (inside a callback)."""
        return threading.current_thread() is self.thread

    # ------------------------------------------------------------- user side

    def submit_send(
        self,
        topic: str,
        *,
        value: bytes | bytearray | memoryview | None,
        key: bytes | bytearray | memoryview | None,
        headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]],
        partition: int | None,
        timestamp_ms: int,
        sink: RecordSink,
        block: bool = True,
    ) -> None:
        """Append a record; if the machine keeps it waiting for metadata or buffer memory,
        wait until it is admitted (up to the machine's ``max_block``).

        From the IO thread (a callback) nothing can wait: a record the machine keeps
        waiting gets its outcome through its sink (KafkaTimeoutError after ``max_block``).
        ``block`` False (``send_nowait``): nothing waits either, and the machine refuses a
        record that would wait for buffer memory (BufferFullError).

        Raises:
            BufferFullError: ``block`` False and no room in ``buffer_memory`` now.
            KafkaTimeoutError: ``max_block`` passed while the record waited.
            ProducerClosedError: the producer is closed (an IllegalStateError).
            KafkaError: the machine refused the record (MessageTooLargeError...).
        """
        inline = self.on_io_thread
        with self._lock:
            if not self._accepting or self._finished or self._close is not None:
                raise closed_error()
            woke = self._append_now(
                topic, value, key, headers, partition, timestamp_ms, sink, inline, block
            )
        if not isinstance(woke, _Send):
            if woke:
                # A batch opened or filled: give the IO thread the GIL now, or a tight send
                # loop keeps it and records pile up until buffer_memory is full.
                time.sleep(0)
            return
        if woke.reply is None:  # a callback or send_nowait: the sink gets the outcome
            if not inline:
                self._wake()  # the IO thread asks for the metadata it waits for
            return
        self._wake()
        woke.reply.wait(None)  # the machine's max_block ends the wait
        if woke.reply.error is not None:
            raise woke.reply.error

    def submit_batch(
        self,
        topic: str,
        partition: int,
        records: Sequence[tuple[int, Any, Any, Sequence[tuple[str, Any]]]],
        sink: RecordSink,
    ) -> int:
        """Append ``records`` to ``partition`` as one record batch of their own; if the
        machine keeps the batch waiting for metadata or buffer memory, wait until it is
        admitted (up to the machine's ``max_block``). ``sink`` gets every record's outcome.

        Returns:
            How many records were appended.

        Raises:
            KafkaTimeoutError: ``max_block`` passed while the batch waited.
            ProducerClosedError: the producer is closed (an IllegalStateError).
            IllegalStateError: called from a callback (it would
                wait for its own thread).
            KafkaError: the machine refused the batch (MessageTooLargeError...).
        """
        if self.on_io_thread:
            raise IllegalStateError("send_batch() from a producer callback would deadlock")
        with self._lock:
            if not self._accepting or self._finished or self._close is not None:
                raise closed_error()
            machine = self._machine
            try:
                rids = machine.send_batch(topic, partition, records, now=time.monotonic())
            except KafkaError:
                self._counts["refused"] += 1
                raise
            self._sinks.update(dict.fromkeys(rids, sink))  # before any event (acks=0)
            waiting = None
            if machine.is_waiting(rids[0]):
                waiting = self._blocked[rids[0]] = _Send(sink=sink, reply=Reply(), rids=rids)
        self._wake()
        if waiting is not None and waiting.reply is not None:
            waiting.reply.wait(None)  # the machine's max_block ends the wait
            if waiting.reply.error is not None:
                raise waiting.reply.error
        return len(rids)

    def _append_now(  # noqa: PLR0917 -- internal, positional for speed
        self,
        topic: str,
        value: bytes | bytearray | memoryview | None,
        key: bytes | bytearray | memoryview | None,
        headers: Sequence[tuple[str, bytes | bytearray | memoryview | None]],
        partition: int | None,
        timestamp_ms: int,
        sink: RecordSink,
        inline: bool,
        block: bool,
    ) -> bool | _Send:
        """Append under the lock; the record's :class:`_Send` if the machine keeps it
        waiting for metadata or buffer memory, else whether the IO thread was woken.

        Raises:
            KafkaError: the machine refused the record.
        """
        machine = self._machine
        if partition is None and not headers:
            # The machine's hot path, positional; None: its general path (send) decides.
            fast = machine.send_plain(topic, value, key, timestamp_ms, time.monotonic())
            if fast is not None:  # (it never steps: nothing for the IO thread to see)
                self._sinks[fast] = sink
                return False
        steps = machine.steps
        try:
            rid = machine.send(
                topic,
                value=value,
                key=key,
                partition=partition,
                timestamp_ms=timestamp_ms,
                headers=headers,
                now=time.monotonic(),
                block=block,
            )
        except KafkaError:
            self._counts["refused"] += 1
            if machine.steps != steps and not inline:  # a refusal for buffer memory
                self._wake()  # batches to send
            raise
        self._sinks[rid] = sink  # before any event: acks=0 completes once admitted
        if machine.steps != steps:
            if machine.is_waiting(rid):
                waits = block and not inline
                cmd = self._blocked[rid] = _Send(sink=sink, reply=Reply() if waits else None)
                return cmd
            if not inline:
                self._wake()
                return True
            return False
        return False

    def flush(self, timeout: float | None) -> None:
        """Block until every record sent before has its outcome.

        Raises:
            KafkaTimeoutError: ``timeout`` passed first.
            IllegalStateError: called from a callback (it would wait for itself).
        """
        if self.on_io_thread:
            raise IllegalStateError("flush() from a producer callback would deadlock")
        if self._finished:
            return
        reply = Reply()
        try:
            self._call(_Flush(reply=reply), reply, timeout)
        except IllegalStateError:
            if not self._finished:
                raise  # closed meanwhile: every record had its outcome

    def transaction_call(
        self,
        what: str,
        start: Callable[[float], TransactionOpId | None],
        timeout: float | None,
    ) -> None:
        """Run a transactional command on the machine (under the lock, on the caller's
        thread) and wait for the outcome of the operation it started, if any.

        Args:
            what: the call's name, for messages.
            start: ``start(now)`` calls the machine; returns the operation id, or None for
                a command that completes at once (``begin_transaction``).
            timeout: seconds to wait; None waits.

        Raises:
            KafkaTimeoutError: ``timeout`` passed first (the operation goes on).
            ProducerClosedError: the producer is closed (an IllegalStateError).
            IllegalStateError: called from a callback (it would wait for itself).
            KafkaError: the machine refused the command, or the operation failed.
        """
        if self.on_io_thread:
            raise IllegalStateError(f"{what}() from a producer callback would deadlock")
        with self._lock:
            if not self._accepting or self._finished or self._close is not None:
                raise closed_error()
            op = start(time.monotonic())
            if op is None:
                return
            reply = self._txn_ops.get(op)  # a commit or abort resumed: the same reply
            if reply is None:
                reply = self._txn_ops[op] = Reply()
        self._wake()
        if not reply.wait(timeout):
            raise KafkaTimeoutError(f"{what} did not finish within {timeout:g} s")
        if reply.error is not None:
            raise reply.error

    def partitions_for(self, topic: str, max_block: float) -> set[int]:
        """The topic's partition ids, waiting up to ``max_block`` for its metadata.

        Raises:
            KafkaTimeoutError: no metadata for it within ``max_block``.
            ProducerClosedError: the producer is closed (an IllegalStateError).
        """
        if self.on_io_thread:
            known = self._machine.client.cluster.partitions_for(topic)
            if known is None:
                raise IllegalStateError(
                    f"no metadata for {topic!r} yet, and a callback cannot wait for it"
                )
            return set(known)
        reply = Reply()
        cmd = _Partitions(
            topic=topic, deadline=time.monotonic() + max_block, max_block=max_block, reply=reply
        )
        result: set[int] = self._call(cmd, reply, None)
        return result

    def wait_for_cluster(self, timeout: float) -> None:
        """Wait until a bootstrap server answered a Metadata request.

        Raises:
            NoBrokersAvailable: none did within ``timeout`` seconds.
        """
        reply = Reply()
        cmd = _Partitions(
            topic=None, deadline=time.monotonic() + timeout, max_block=timeout, reply=reply
        )
        self._call(cmd, reply, None)

    def metrics(self) -> Report:
        """A snapshot of counters and gauges (see :meth:`KafkaProducer.metrics`)."""
        if self.on_io_thread:
            return self._snapshot()
        if self._final_metrics is not None:
            return self._final_metrics
        reply = Reply()
        try:
            result: Report = self._call(_Metrics(reply=reply), reply, None)
        except IllegalStateError:
            self.thread.join()
            assert self._final_metrics is not None
            return self._final_metrics
        return result

    def health(self) -> dict[str, Any]:
        """The producer's health snapshot (:func:`kafkastate.core.report.health`)."""
        with self._lock:
            return report.health(self._machine, time.monotonic())

    def close(self, timeout: float | None) -> None:
        """Deliver what is pending (aborting it after ``timeout``), close, end the thread.

        From the IO thread (a callback): pending records are aborted at once and the thread
        ends after the callback returns; nothing is joined.
        """
        if self.on_io_thread:
            if self._close is None:
                if timeout is None or timeout > 0:
                    log.warning(
                        "close() from a producer callback cannot wait: pending records are "
                        "aborted (as close(timeout=0))"
                    )
                self._close = _Close(deadline=time.monotonic(), reply=Reply())
                waited = ProducerClosedError("KafkaProducer closed while send() waited")
                self._refuse_blocked(waited, time.monotonic())
                self._machine.abort(now=time.monotonic())
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.thread.is_alive():
            reply = Reply()
            with contextlib.suppress(IllegalStateError):  # closing already: just join
                self._call(_Close(deadline=deadline, reply=reply), reply, None)
        if self.thread.ident is not None:
            self.thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _call(self, cmd: _Command, reply: Reply, timeout: float | None) -> Any:
        with self._lock:
            if not self._accepting:
                raise closed_error()
            self._commands.append(cmd)
        self._wake()
        if not reply.wait(timeout):
            raise KafkaTimeoutError(f"flush did not finish within {timeout:g} s")
        if reply.error is not None:
            raise reply.error
        return reply.value

    def _wake(self) -> None:
        # BlockingIOError: the buffer is full, so a wake-up is pending anyway.
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    # ------------------------------------------------------------------ IO side

    def _run(self) -> None:
        lock, loop = self._lock, self._loop
        try:
            while True:
                with lock:
                    now = time.monotonic()
                    self._take_commands(now)
                    self._check_deadlines(now)
                    self._handle_events()
                    loop.flush()
                    self._handle_events()
                    if self._finished:
                        break
                    times = (self._machine.get_timer(), self._deadline())
                    wakes = [t for t in times if t is not None]  # 0.0 is a deadline too
                ready = loop.select(min(wakes) if wakes else None)  # sends may run now
                with lock:
                    self._drain_waker()
                    loop.feed(ready)
        except BaseException as exc:
            log.exception("the producer IO thread failed")
            self._crash = exc
        finally:
            with lock:
                self._shutdown()

    def _take_commands(self, now: float) -> None:
        while self._commands:
            cmd = self._commands.popleft()
            match cmd:
                case _Flush(reply=reply):
                    self._flushes[self._machine.flush(now=now)] = reply
                case _Partitions(topic=None):
                    self._machine.client.request_metadata_update()
                    self._waiting_partitions.append(cmd)
                case _Partitions(topic=str(topic)):
                    self._machine.track_topics([topic], now=now)
                    self._waiting_partitions.append(cmd)
                case _Metrics(reply=reply):
                    reply.set(self._snapshot())
                case _Close(reply=reply):
                    self._close_replies.append(reply)
                    if self._close is None:
                        self._close = cmd
                        self._refuse_blocked(
                            ProducerClosedError("KafkaProducer closed while send() waited"), now
                        )
                        self._machine.close(now=now)
                    elif cmd.deadline is not None and (
                        self._close.deadline is None or cmd.deadline < self._close.deadline
                    ):
                        self._close.deadline = cmd.deadline

    def _refuse_blocked(self, error: KafkaError, now: float) -> None:
        """KafkaProducer's rule: close() refuses the sends still blocked in send() with
        IllegalStateError; take them back from the machine's FIFO first."""
        blocked, self._blocked = self._blocked, {}
        for rid, cmd in blocked.items():
            if self._machine.withdraw(rid, now=now):
                for gone in cmd.rids or (rid,):
                    self._sinks.pop(gone, None)
                self._refuse(cmd, error)
            else:  # admitted or failed meanwhile: its events tell
                self._blocked[rid] = cmd

    def _check_deadlines(self, now: float) -> None:
        if self._waiting_partitions:
            cluster = self._machine.client.cluster
            still: list[_Partitions] = []
            for p in self._waiting_partitions:
                known: tuple[int, ...] | None
                if p.topic is None:
                    known = tuple(cluster.brokers) or None
                else:
                    known = cluster.partitions_for(p.topic)
                if known is not None:
                    p.reply.set(set(known))
                elif p.topic is None and (
                    now >= p.deadline or self._machine.client.authentication_refused is not None
                ):
                    # (refused credentials: waiting cannot help)
                    p.reply.fail(no_brokers_error(self._machine.client, p.max_block))
                elif now >= p.deadline:
                    p.reply.fail(
                        KafkaTimeoutError(
                            f"partitions_for waited max_block_ms ({p.max_block * 1000:g} ms) "
                            f"for metadata of topic {p.topic!r}"
                        )
                    )
                else:
                    if p.topic is not None:  # used while waited for: not dropped as idle
                        self._machine.track_topics([p.topic], now=now)
                    still.append(p)
            self._waiting_partitions = still
        close = self._close
        if close is not None and close.deadline is not None and now >= close.deadline:
            close.deadline = None
            self._machine.abort(now=now)

    def _refuse(self, cmd: _Send, error: KafkaError) -> None:
        if cmd.reply is not None:
            cmd.reply.fail(error)
        else:
            _complete(cmd.sink.record_failed, error)

    def _deadline(self) -> float | None:
        times = [p.deadline for p in self._waiting_partitions]
        if self._close is not None and self._close.deadline is not None:
            times.append(self._close.deadline)
        return min(times) if times else None

    def _handle_events(self) -> None:
        machine = self._machine
        while (event := machine.next_event()) is not None:
            if self._loop.serve(event):
                continue
            match event:
                case RecordsAcknowledged(topic=topic, partition=partition, record_ids=rids) if (
                    isinstance(self._sinks.get(rids[0]), BatchSink)
                ):
                    # a send_batch's records (a batch of their own): one call for the run
                    sinks = self._sinks
                    run = sinks.pop(rids[0])
                    for rid in rids[1:]:
                        sinks.pop(rid, None)
                    if isinstance(run, BatchSink):
                        _complete(
                            run.records_acknowledged,
                            topic,
                            partition,
                            len(rids),
                            event.base_offset,
                            event.timestamps[0],
                        )
                case RecordsAcknowledged(topic=topic, partition=partition):
                    for rid, offset, ts in event.results():
                        sink = self._sinks.pop(rid, None)
                        if sink is not None:
                            _complete(sink.record_acknowledged, topic, partition, offset, ts)
                case RecordsAdmitted(record_ids=rids):
                    blocked = self._blocked.pop(rids[0], None)
                    if blocked is not None and blocked.reply is not None:
                        blocked.reply.set()
                case RecordsFailed(record_ids=rids, error=error) if (
                    self._blocked and rids[0] in self._blocked
                ):
                    # the wait for buffer memory ended without the record in a batch
                    blocked = self._blocked.pop(rids[0])
                    if isinstance(error, KafkaTimeoutError):
                        self._counts["timed_out"] += 1
                    for rid in blocked.rids or rids[:1]:
                        self._sinks.pop(rid, None)
                    if blocked.reply is not None:
                        blocked.reply.fail(error)  # send() raises it
                    else:
                        _complete(blocked.sink.record_failed, error)
                case RecordsFailed(record_ids=rids, error=error):
                    for rid in rids:
                        sink = self._sinks.pop(rid, None)
                        if sink is not None:
                            _complete(sink.record_failed, error)
                case StatisticsReported(stats=stats):
                    report_statistics(self._stats_cb, stats)
                case FlushCompleted(flush_id=fid):
                    reply = self._flushes.pop(fid, None)
                    if reply is not None:
                        reply.set()
                case TransactionOperationCompleted(operation_id=op, error=op_error):
                    reply = self._txn_ops.pop(op, None)
                    if reply is not None:
                        if op_error is None:
                            reply.set()
                        else:
                            reply.fail(op_error)
                case ProducerFailed(error=error):
                    log.error("the producer failed fatally: %s", error)
                case ProducerClosed():
                    self._finished = True
                case MetadataUpdated() | BufferSpaceFreed() | ProducerIdAssigned():
                    pass  # sends waiting for metadata are retried on every turn of the loop

    def _drain_waker(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _snapshot(self) -> Report:
        out = report.producer_metrics(self._machine, time.monotonic())
        c = self._counts
        out["producer-metrics"].update(
            {
                "record-refused-total": c["refused"],
                "record-block-timeout-total": c["timed_out"],
                "records-waiting-send": len(self._blocked),
            }
        )
        return out

    def _shutdown(self) -> None:
        self._accepting = False
        machine = self._machine
        if not self._finished:  # crashed: give every record an outcome
            try:
                self._refuse_blocked(closed_error(), time.monotonic())
                machine.abort(now=time.monotonic())
                self._handle_events()
            except BaseException:
                log.exception("aborting the producer after a crash failed")
        self._final_metrics = self._snapshot()
        gone = ProducerClosedError("the producer closed before the record had an outcome")
        error: BaseException = self._crash if self._crash is not None else gone
        for sink in self._sinks.values():
            _complete(sink.record_failed, error)
        self._sinks.clear()
        for waiting in self._blocked.values():
            self._refuse(waiting, closed_error())
        self._blocked.clear()
        for cmd in self._commands_left():
            if isinstance(cmd, _Close):
                self._close_replies.append(cmd.reply)
            elif isinstance(cmd, _Metrics):
                cmd.reply.set(self._final_metrics)
            else:
                cmd.reply.fail(closed_error())
        for p in self._waiting_partitions:
            p.reply.fail(closed_error())
        for reply in self._flushes.values():
            reply.set()  # closed: every record has its outcome
        for reply in self._txn_ops.values():
            reply.fail(ProducerClosedError("the producer closed during the operation"))
        self._txn_ops.clear()
        self._loop.close()
        self._wake_r.close()
        self._wake_w.close()
        for reply in self._close_replies:
            reply.set()

    def _commands_left(self) -> list[_Command]:
        left = list(self._commands)
        self._commands.clear()
        return left


def _complete(fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("completing a record future failed")
