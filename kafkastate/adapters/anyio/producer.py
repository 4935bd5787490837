"""The async producer (anyio: asyncio or trio): ``async with open_producer(...) as producer``,
and the :class:`Producer` that ``AIOKafkaProducer`` runs too.

The :class:`Producer` gives commands to a
:class:`~kafkastate.core.producer.producer.ProducerMachine` and turns its events into
:class:`Delivery` outcomes; an :class:`~kafkastate.adapters.anyio.driver.AsyncDriver` does
the IO. Waiting is the machine's too: a record whose topic metadata has not arrived, or that
does not fit ``buffer_memory``, waits in the core with ``max_block_ms`` as its timer, and
``enqueue`` only waits for the machine's RecordsAdmitted (or the RecordsFailed that ends
the wait) naming it.

Two ways to send:

* ``await producer.send(...)`` appends the record and waits for its outcome:
  a :class:`RecordMetadata`, or the record's error raised.
* ``delivery = await producer.enqueue(...)`` only waits until the record is appended
  (metadata, buffer room) and returns a :class:`Delivery`; ``await delivery`` later.
  This is how to have many records in flight from one task.
* ``delivery = producer.send_nowait(...)`` awaits nothing (fire and forget): a record that
  does not fit ``buffer_memory`` now is refused with ``BufferFullError`` (the core's rule
  for a caller that cannot wait, ``ProducerMachine.send(block=False)``).

Cancelling a wait never withdraws an appended record: it is still delivered (or fails)
and :meth:`Producer.flush` still waits for it.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, NamedTuple, cast

import anyio
import anyio.lowlevel
import attrs

from kafkastate.adapters._common import call_logged, machine_rng, resolve, tls_context
from kafkastate.adapters.anyio.driver import AsyncDriver, wait_for_cluster
from kafkastate.adapters.anyio.observe import Observed
from kafkastate.core.client import MetadataUpdated
from kafkastate.core.config import producer_config
from kafkastate.core.producer.accumulator import (
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
    ProducerMachine,
    ProducerState,
)
from kafkastate.core.producer.transactions import (
    TransactionOperationCompleted,
    TransactionOpId,
    TransactionState,
)
from kafkastate.core.protocol.records import RecordBatchBuilder
from kafkastate.errors import (
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
    TransactionFailedError,
)
from kafkastate.otel_metrics import metrics_export_of
from kafkastate.structs import ConsumerGroupMetadata, TopicPartition
from kafkastate.tracing import SendSpan, Tracing, tracing_of

__all__ = [
    "BatchBuilder",
    "BatchRecord",
    "Delivery",
    "Producer",
    "RecordMetadata",
    "open_producer",
    "running_producer",
]

Headers = Sequence[tuple[str, bytes | None]]

log = logging.getLogger("kafkastate.producer")


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written: aiokafka's ``RecordMetadata``, the same
    fields in the same order."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""
    topic_partition: TopicPartition
    """``TopicPartition(topic, partition)``."""
    offset: int
    """The record's offset; -1 with ``acks=0`` (the broker does not say)."""
    timestamp: int
    """The record's timestamp in ms, as the log keeps it (create or log-append time)."""
    timestamp_type: int
    """0 for CreateTime, 1 for LogAppendTime (the topic's ``message.timestamp.type``)."""
    log_start_offset: int
    """The partition's log start offset when the record was written; -1 if the broker
    did not say (``acks=0``)."""


# RecordMetadata(...) without the keyword-argument parsing: one per acknowledged record.
_new_tuple: Final = tuple.__new__
_time_ns: Final = time.time_ns  # the wall clock, read once per record


def _unobserved_refcount() -> int | None:
    """What ``sys.getrefcount`` reports for an object held only by a local variable just
    popped from a dict, as :meth:`Producer._acknowledged` holds a future (2 on CPython
    3.11: the variable and the call's argument); None where there is no reference count
    to ask (PyPy) or where borrowed references make it unreliable (CPython 3.14+)."""
    refcount = getattr(sys, "getrefcount", None)
    if refcount is None or sys.version_info >= (3, 14):
        return None
    holder = {0: object()}
    sink = holder.pop(0)
    count: int = refcount(sink)
    return count


# A future that only the producer refers to cannot be observed by anyone.
_UNOBSERVED: Final = _unobserved_refcount()

_OUTSIDE: Final = " (use the producer inside its `async with open_producer(...)` block)"
"""What a call outside the producer's block is told (after :meth:`Producer._running`'s
refusal)."""
_Ack = tuple[str, int, TopicPartition, int, int, int, int]  # RecordMetadata's fields


class Delivery:
    """The outcome of one appended record; ``await delivery`` for it.

    Resolved from the producer's pump task; cancelling a wait on it leaves the record, and
    the outcome, untouched.
    """

    __slots__ = ("_ack", "_callbacks", "_done", "_error", "_result", "record_id")

    def __init__(self, record_id: RecordId) -> None:
        self.record_id: Final = record_id
        """The machine's id for the record."""
        # Made only for a waiter: most deliveries are resolved before anyone awaits them.
        self._done: anyio.Event | None = None
        self._result: RecordMetadata | None = None
        self._ack: _Ack | None = None  # made into _result on demand
        self._error: KafkaError | None = None
        self._callbacks: list[Callable[[Delivery], None]] | None = None

    def done(self) -> bool:
        """Whether the record has its outcome.

        Returns:
            True once acknowledged or failed.
        """
        return self._ack is not None or self._error is not None

    def result(self) -> RecordMetadata:
        """The outcome, without waiting.

        Returns:
            Where the record was written.

        Raises:
            KafkaError: the record failed (the machine's error, as is).
            RuntimeError: no outcome yet.
        """
        if self._error is not None:
            raise self._error
        if self._result is None:
            if self._ack is None:
                raise RuntimeError(f"record {self.record_id} has no outcome yet")
            self._result = _new_tuple(RecordMetadata, self._ack)
        return self._result

    async def wait(self) -> RecordMetadata:
        """Wait for the outcome.

        Returns:
            Where the record was written.

        Raises:
            KafkaError: the record failed (delivery timeout, a broker error, an abort...).
        """
        if not self.done():
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()
        return self.result()

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self.wait().__await__()

    def add_done_callback(self, callback: Callable[[Delivery], None]) -> None:
        """Call ``callback(self)`` once the outcome is known (at once if it is).

        Args:
            callback: runs in the producer's pump task; it must not block. What it raises
                is logged (logger ``kafkastate.producer``) and ignored, as asyncio's
                futures do: the producer and the other records go on.
        """
        if self.done():
            call_logged(callback, self, log=log, what="a delivery callback")
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def _resolve(self, ack: _Ack | None, error: KafkaError | None) -> None:
        self._ack, self._error = ack, error
        if self._done is not None:
            self._done.set()
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for callback in callbacks:
                # (in the pump task: one raising must not stop the producer)
                call_logged(callback, self, log=log, what="a delivery callback")


@attrs.frozen(kw_only=True)
class BatchRecord:
    """What :meth:`BatchBuilder.append` says about an appended record (aiokafka's fields)."""

    offset: int
    """The offset delta within the batch (0 for the first record)."""
    timestamp: int
    """The record's timestamp in ms."""
    size: int
    """How many bytes the record takes in the batch (uncompressed)."""
    crc: None = None
    """Always None: v2 batches have one CRC for the whole batch."""


class BatchBuilder:
    """Records for one :meth:`Producer.send_batch` call: one record batch, one partition.

    Made by ``create_batch()``; fill it with :meth:`append` until that returns None (the
    batch reached its size), then hand it to ``send_batch``. The records keep their order
    and get consecutive offsets; no other record joins their batch.

    Args:
        batch_size: the size in bytes past which :meth:`append` refuses records (the first
            record is always taken).
        key_serializer: turns a key into bytes, or None.
        value_serializer: turns a value into bytes, or None.
    """

    def __init__(
        self,
        batch_size: int,
        *,
        key_serializer: Callable[[Any], bytes | None] | None = None,
        value_serializer: Callable[[Any], bytes | None] | None = None,
    ) -> None:
        self._limit = batch_size
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._builder = RecordBatchBuilder()
        self._records: list[tuple[int, bytes | None, bytes | None, tuple[Any, ...]]] = []
        self._closed = False

    def append(
        self,
        *,
        timestamp: int | None,
        key: Any,
        value: Any,
        headers: Headers | None = None,
    ) -> BatchRecord | None:
        """Add a record, if the batch has room and is open.

        Args:
            timestamp: create time in ms since the epoch; None for now.
            key: the key (through the key serializer, if any).
            value: the value (through the value serializer, if any).
            headers: ``(key, value)`` pairs.

        Returns:
            Where the record sits in the batch, or None if the batch is closed or full
            (a full batch closes itself).

        Raises:
            KafkaConfigurationError: a key, value or header of the wrong type (a
                ValueError).
        """
        if self._closed:
            return None
        key_bytes = key if self._key_serializer is None else self._key_serializer(key)
        value_bytes = value if self._value_serializer is None else self._value_serializer(value)
        ts = int(time.time() * 1000) if timestamp is None else timestamp
        hdrs = tuple(headers) if headers else ()
        for what, data in (("key", key_bytes), ("value", value_bytes)):
            if data is not None and not isinstance(data, bytes | bytearray | memoryview):
                raise KafkaConfigurationError(
                    f"batch record {what} must be bytes or None, not {type(data).__name__}"
                )
        if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
            raise KafkaConfigurationError(f"timestamp must be ms >= 0 or None, got {ts!r}")
        builder = self._builder
        if self._records and not builder.has_room_for(
            ts, key_bytes, value_bytes, hdrs, limit=self._limit
        ):
            self._closed = True
            return None
        before = builder.size_in_bytes()
        try:
            builder.append(ts, key_bytes, value_bytes, hdrs)
        except (TypeError, ValueError, AttributeError) as exc:
            raise KafkaConfigurationError(f"invalid batch record headers: {exc}") from None
        self._records.append((ts, key_bytes, value_bytes, hdrs))
        return BatchRecord(
            offset=len(self._records) - 1, timestamp=ts, size=builder.size_in_bytes() - before
        )

    def close(self) -> None:
        """Refuse further records (closing twice is harmless)."""
        self._closed = True

    def record_count(self) -> int:
        """Returns:
        How many records were appended."""
        return len(self._records)

    def size(self) -> int:
        """Returns:
        The batch's size in bytes, uncompressed."""
        return self._builder.size_in_bytes()

    def _take(self) -> list[tuple[int, bytes | None, bytes | None, tuple[Any, ...]]]:
        self._closed = True
        return self._records


# Where the producer reports one record's outcome: a Delivery, or the asyncio future that
# AIOKafkaProducer.send returned.
_Sink = Delivery | asyncio.Future[RecordMetadata | None]  # None: acks=0 for aiokafka


def _settle(sink: _Sink, ack: _Ack | None, error: KafkaError | None) -> None:
    """Give ``sink`` its outcome (an acknowledgement or an error)."""
    if isinstance(sink, Delivery):
        sink._resolve(ack, error)
        return
    if sink.done():  # AIOKafkaProducer.send's future, cancelled by its owner
        return
    if error is not None:
        sink.set_exception(error)
    else:
        assert ack is not None
        sink.set_result(_new_tuple(RecordMetadata, ack))


class _Admission:
    """A send the machine keeps waiting for buffer memory, and its caller waiting for it."""

    __slots__ = ("done", "error", "record_ids")

    def __init__(self, record_ids: Sequence[RecordId]) -> None:
        self.record_ids = record_ids
        self.done = anyio.Event()
        self.error: KafkaError | None = None


class Producer(Observed):
    """Sends records through a running :class:`AsyncDriver`; made by :func:`open_producer`.

    Args:
        machine: the producer machine.
        max_block: seconds a send may wait for metadata or buffer room (``max.block.ms``).
    """

    def __init__(self, machine: ProducerMachine, *, max_block: float) -> None:
        self.machine: Final = machine
        """The sans-IO machine (metadata, producer id, state)."""
        self._max_block = max_block
        self._driver: AsyncDriver | None = None
        self._deliveries: dict[RecordId, _Sink] = {}
        self._flushes: dict[FlushId, anyio.Event] = {}
        self._txn_ops: dict[TransactionOpId, tuple[anyio.Event, list[KafkaError]]] = {}
        self._changed = anyio.Event()  # set and replaced when a refused send may now pass
        # sends waiting in the machine for buffer memory, by (first) record id
        self._admissions: dict[RecordId, _Admission] = {}
        self._closed = anyio.Event()
        self.tracing: Tracing | None = None
        """OpenTelemetry spans per send (option ``tracing``), or None when off."""
        # with tracing on: each record's PRODUCER span, open until its outcome
        self._spans: dict[RecordId, SendSpan] = {}
        self.unacknowledged_result_none = False
        """aiokafka's rule for ``acks=0``: an asyncio future handed to :meth:`_append_now`
        resolves to None instead of metadata with offset -1."""

    # ------------------------------------------------------------------ commands

    async def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers = (),
    ) -> RecordMetadata:
        """Append a record and wait until it is acknowledged.

        Args:
            topic: the topic.
            value: the serialized value, or None (a tombstone).
            key: the serialized key, or None.
            partition: an explicit partition, or None for the default partitioner.
            timestamp_ms: create time in ms since the epoch; None for now.
            headers: ``(key, value)`` pairs.

        Returns:
            Where the record was written.

        Raises:
            KafkaTimeoutError: ``max_block_ms`` passed while the record was refused.
            KafkaError: the record was refused for good, or failed (the machine's error).
        """
        delivery = await self.enqueue(
            topic, value, key, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )
        return await delivery.wait()

    async def enqueue(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers = (),
    ) -> Delivery:
        """Append a record, waiting only for metadata or buffer room; not for delivery.

        Args:
            topic: the topic.
            value: the serialized value, or None (a tombstone).
            key: the serialized key, or None.
            partition: an explicit partition, or None for the default partitioner.
            timestamp_ms: create time in ms since the epoch; None for now.
            headers: ``(key, value)`` pairs.

        Returns:
            The record's :class:`Delivery`; ``await`` it for the outcome.

        Raises:
            KafkaTimeoutError: ``max_block_ms`` passed while the record was refused.
            KafkaError: the record was refused for good (too large, producer closed or
                failed...).
        """
        delivery, moved = self._append_now(
            topic, value, key, partition, timestamp_ms, headers, None
        )
        if moved:
            await self._appended(moved)  # a new batch, or a wait for metadata or memory
        return cast(Delivery, delivery)

    def send_nowait(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers = (),
    ) -> Delivery:
        """Append a record without awaiting anything (fire and forget, as
        confluent-kafka's ``produce()``); ``await`` or ``add_done_callback`` on the returned
        :class:`Delivery` for its outcome, whose guarantees are :meth:`send`'s.

        Nothing is sent while the calling task keeps the event loop: yield now and then
        (``await anyio.sleep(0)``, any await -- confluent's ``poll(0)``) so the producer's
        task writes batches and resolves deliveries. A record whose topic metadata is
        pending is held by the producer (its Delivery fails with ``KafkaTimeoutError``
        after ``max_block_ms`` if the metadata never names it).

        Args:
            topic: the topic.
            value: the serialized value, or None (a tombstone).
            key: the serialized key, or None.
            partition: an explicit partition, or None for the default partitioner.
            timestamp_ms: create time in ms since the epoch; None for now.
            headers: ``(key, value)`` pairs.

        Returns:
            The record's :class:`Delivery`.

        Raises:
            BufferFullError: ``buffer_memory`` has no room now, or awaited sends wait for
                it (a builtin ``BufferError`` too, as confluent-kafka raises; retriable):
                nothing was appended. Yield and try again, or ``await`` :meth:`enqueue`,
                which waits for room up to ``max_block_ms``.
            KafkaError: the record was refused for good (too large, producer closed or
                failed...).
        """
        delivery, _ = self._append_now(
            topic, value, key, partition, timestamp_ms, headers, None, False
        )
        return cast(Delivery, delivery)

    async def _appended(self, moved: bool | _Admission) -> None:
        """After :meth:`_append_now` said something moved: let the pump run, or wait for
        the machine to admit a record that waits for metadata or buffer memory.

        Raises:
            KafkaError: the wait ended in failure (``KafkaTimeoutError`` after
                ``max_block_ms``, the producer closed...).
        """
        if moved is True:
            await anyio.lowlevel.cancel_shielded_checkpoint()  # appended: no Cancelled
            return
        assert isinstance(moved, _Admission)
        try:
            await moved.done.wait()
        except BaseException as exc:
            # Given up (cancelled): take the record back if it still waits. One admitted
            # meanwhile stays, as any appended record does.
            first = moved.record_ids[0]
            driver = self._driver
            if (
                driver is not None
                and self._admissions.pop(first, None) is not None
                and self.machine.withdraw(first, now=driver.now())
            ):
                for rid in moved.record_ids:
                    self._deliveries.pop(rid, None)
                    span = self._spans.pop(rid, None)
                    if span is not None:
                        span.failed(exc)
                driver.wake()
            raise
        if moved.error is not None:
            raise moved.error

    def _append_now(  # noqa: PLR0917 -- internal, positional for speed
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None,
        partition: int | None,
        timestamp_ms: int | None,
        headers: Headers,
        sink: _Sink | None,
        block: bool = True,
    ) -> tuple[_Sink, bool | _Admission]:
        """Append once, without waiting; ``sink`` (None: a new :class:`Delivery`) gets the
        outcome. ``block`` False: the caller will not wait (``send_nowait``), so the machine
        refuses a record that would wait for buffer memory, and one it holds for metadata
        gets no :class:`_Admission` (its sink gets the outcome).

        Returns:
            The sink, and whether a batch opened or filled up -- then the caller should let
            the pump run -- or the record's :class:`_Admission` if the machine keeps it
            waiting for metadata or buffer memory; either way ``await self._appended(...)``.

        Raises:
            KafkaError: the machine refused the record.
            ProducerClosedError: the producer is closed.
        """
        driver = self._driver
        if driver is None:
            driver = self._running("send")  # raises
        machine = self.machine
        if timestamp_ms is None:
            timestamp_ms = _time_ns() // 1_000_000
        if partition is None and not headers and self.tracing is None:
            # The machine's hot path, positional; None: its general path (send) decides.
            rid = machine.send_plain(topic, value, key, timestamp_ms, driver.now())
            if rid is not None:  # (it never steps: nothing for the pump to see)
                if sink is None:
                    sink = Delivery(rid)
                self._deliveries[rid] = sink
                return sink, False
        steps = machine.steps
        urgent = machine.urgent_steps
        span = None
        if self.tracing is not None:
            headers, span = self.tracing.send(topic, partition, key, headers)
        try:
            rid = machine.send(
                topic,
                value=value,
                key=key,
                partition=partition,
                timestamp_ms=timestamp_ms,
                headers=headers,
                now=driver.now(),
                block=block,
            )
        except BaseException as exc:
            if span is not None:
                span.failed(exc)
            if isinstance(exc, KafkaError) and machine.steps != steps:
                driver.wake()  # a refusal for buffer memory: batches to send
            raise
        if span is not None:
            self._spans[rid] = span
        if sink is None:
            sink = Delivery(rid)
        self._deliveries[rid] = sink  # before any await: acks=0 completes at once
        if machine.steps != steps:
            # A batch opened or filled up: let the pump see it (a new linger deadline), and
            # send full batches while this task goes on appending. Appending to a batch
            # with room changes nothing the pump would act on, so it does not cost a
            # wake-up; a batch that only opened (waiting for its linger) costs one but no
            # yield: the pump re-reads the timer when this task next yields.
            driver.wake()
            if machine.urgent_steps == urgent:
                return sink, False
            if block and machine.is_waiting(rid):
                admission = self._admissions[rid] = _Admission((rid,))
                return sink, admission
            return sink, True
        return sink, False

    def create_batch(
        self,
        *,
        key_serializer: Callable[[Any], bytes | None] | None = None,
        value_serializer: Callable[[Any], bytes | None] | None = None,
    ) -> BatchBuilder:
        """An empty :class:`BatchBuilder` of ``batch_size`` bytes for :meth:`send_batch`.

        Args:
            key_serializer: turns keys into bytes, or None.
            value_serializer: turns values into bytes, or None.

        Returns:
            The builder.
        """
        return BatchBuilder(
            self.machine.config.accumulator.batch_size,
            key_serializer=key_serializer,
            value_serializer=value_serializer,
        )

    async def send_batch(self, batch: BatchBuilder, topic: str, *, partition: int) -> Delivery:
        """Append ``batch``'s records to ``partition`` as one record batch of their own;
        wait only for metadata or buffer room.

        Args:
            batch: the filled builder (closed by this call).
            topic: the topic.
            partition: the partition.

        Returns:
            A :class:`Delivery` for the whole batch: the first record's metadata (its
            offset is the batch's base offset) once every record is written, or the first
            error.

        Raises:
            KafkaTimeoutError: ``max_block_ms`` passed while the batch was refused or
                waited for buffer memory.
            KafkaError: the batch was refused for good (too large, empty, closed producer).
        """
        driver = self._running("send_batch")
        records = batch._take()
        rids = self.machine.send_batch(topic, partition, records, now=driver.now())
        admission = None
        if self.machine.is_waiting(rids[0]):
            admission = self._admissions[rids[0]] = _Admission(rids)
        whole = Delivery(rids[0])
        left = len(rids)

        def one_done(delivery: Delivery) -> None:
            nonlocal left
            left -= 1
            if whole.done():
                return
            if delivery._error is not None:
                whole._resolve(None, delivery._error)
            elif left == 0:
                first = parts[0]
                whole._resolve(first._ack, first._error)

        parts = [Delivery(rid) for rid in rids]
        for part in parts:
            self._deliveries[part.record_id] = part
            part.add_done_callback(one_done)
        driver.wake()
        if admission is not None:
            await self._appended(admission)  # buffer memory, in the machine's FIFO
        return whole

    async def flush(self) -> None:
        """Send everything now (no linger) and wait until every earlier record has its
        outcome. Cancelling the wait does not cancel the flush. Once the producer is closed
        every record has its outcome: it returns at once (as aiokafka's and kafka-python's).
        """
        if self.machine.state is ProducerState.CLOSED:
            return
        driver = self._running("flush")
        fid = self.machine.flush(now=driver.now())
        done = self._flushes[fid] = anyio.Event()
        driver.wake()
        await done.wait()

    # -------------------------------------------------------------- transactions

    async def _txn_op(self, call: str, start: Callable[[float], TransactionOpId]) -> None:
        """Start a transactional operation on the machine and wait for its outcome.
        Cancelling the wait does not cancel the operation (the machine resumes a commit or
        abort asked again: every caller waits for the one outcome)."""
        driver = self._running(call)
        op = start(driver.now())
        waiter = self._txn_ops.get(op)
        if waiter is None:
            waiter = self._txn_ops[op] = (anyio.Event(), [])
        done, outcome = waiter
        driver.wake()
        await done.wait()
        if outcome:
            raise outcome[0]

    async def init_transactions(self) -> None:
        """Register the ``transactional_id`` with its coordinator (InitProducerId): any
        earlier producer with the same id is fenced and what it left open is aborted.
        :func:`open_producer` calls it when given a ``transactional_id``.

        Raises:
            KafkaTimeoutError: not done within ``max_block_ms`` (no coordinator answered).
            TransactionStateError: no ``transactional_id``, or already initialised.
            KafkaError: the coordinator refused (TransactionalIdAuthorizationFailedError...).
        """
        machine = self.machine
        with anyio.move_on_after(self._max_block) as scope:
            await self._txn_op("init_transactions", lambda now: machine.init_transactions(now=now))
        if scope.cancelled_caught:
            raise KafkaTimeoutError(
                f"init_transactions did not finish within {self._max_block:g} s "
                "(max_block_ms): no transaction coordinator answered"
            )

    async def begin_transaction(self) -> None:
        """Open a transaction: records sent until commit or abort belong to it.

        Raises:
            TransactionStateError: a transaction is already open (or no transactional_id).
            TransactionFailedError: the previous transaction failed and was not aborted.
            ProducerFencedError: the producer was fenced (fatal).
        """
        self._running("begin_transaction")
        self.machine.begin_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], Any],
        group_id: str | ConsumerGroupMetadata,
    ) -> None:
        """Commit consumer offsets in the open transaction: they count only if it commits.

        Args:
            offsets: ``(topic, partition) -> offset`` of the *next* record to consume (the
                last processed offset + 1), or an ``OffsetAndMetadata``.
            group_id: the consumer group id, or the consumer's
                :class:`~kafkastate.structs.ConsumerGroupMetadata` (KIP-447: the group then
                refuses offsets from a member that was fenced out).

        Raises:
            TransactionStateError: no transaction open.
            TransactionFailedError: the transaction failed (a fenced group member...):
                abort it.
            ProducerFencedError: the producer was fenced (fatal).
        """
        machine = self.machine
        await self._txn_op(
            "send_offsets_to_transaction",
            lambda now: machine.send_offsets_to_transaction(offsets, group_id, now=now),
        )

    async def commit_transaction(self) -> None:
        """Send every record of the transaction, then commit it.

        Raises:
            TransactionStateError: no transaction open.
            TransactionFailedError: a record or the offsets failed, or the coordinator
                aborted the transaction after ``transaction_timeout_ms``
                (TransactionTimedOutError): the transaction cannot commit; call
                :meth:`abort_transaction` (the producer stays usable).
            ProducerFencedError: another producer with the same ``transactional_id`` took
                over (fatal: close the producer).
        """
        machine = self.machine
        await self._txn_op("commit_transaction", lambda now: machine.commit_transaction(now=now))

    async def abort_transaction(self) -> None:
        """Abort the transaction: records not sent yet fail with TransactionAbortedError,
        those written are never shown to ``read_committed`` consumers.

        Raises:
            TransactionStateError: no transaction open.
            ProducerFencedError: the producer was fenced (fatal).
        """
        machine = self.machine
        await self._txn_op("abort_transaction", lambda now: machine.abort_transaction(now=now))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """``async with producer.transaction():`` -- begin; commit on a normal exit; abort
        if the block raises (or is cancelled), then re-raise.

        A commit that fails with TransactionFailedError is aborted before the error
        propagates, so the producer is ready for the next transaction.

        Raises:
            TransactionStateError, TransactionFailedError, ProducerFencedError: as
                :meth:`begin_transaction` and :meth:`commit_transaction`.
        """
        await self.begin_transaction()
        try:
            yield
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._abort_if_open()
            raise
        try:
            await self.commit_transaction()
        except TransactionFailedError:
            with anyio.CancelScope(shield=True):
                await self._abort_if_open()
            raise

    async def _abort_if_open(self) -> None:
        txn = self.machine.transactions
        open_states = (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR)
        # an abort also ends a send_offsets under way (the body may have been cancelled
        # while it waited for one)
        if txn is not None and txn.state in open_states and txn.operation in (None, "send_offsets"):
            await self.abort_transaction()

    async def wait_for_cluster(self, timeout: float) -> None:
        """Wait until a bootstrap server answered a Metadata request (aiokafka's
        ``start()`` and kafka-python's constructor do this; :func:`open_producer` does not).

        Args:
            timeout: seconds.

        Raises:
            NoBrokersAvailable: no bootstrap server answered in time (a
                KafkaConnectionError).
        """
        await wait_for_cluster(
            self._running("wait_for_cluster"), self.machine.client, lambda: self._changed, timeout
        )

    async def partitions_for(self, topic: str) -> frozenset[int]:
        """The partitions of ``topic``, waiting for its metadata up to ``max_block_ms``.

        Args:
            topic: the topic.

        Returns:
            Its partition indexes.

        Raises:
            KafkaTimeoutError: no metadata for the topic within ``max_block_ms``.
            ProducerClosedError: the producer is closed, or closed while this waited.
        """
        driver = self._running("partitions_for")
        deadline = driver.now() + self._max_block
        while True:
            if self._driver is None or self.machine.state is ProducerState.CLOSED:
                # closed while waiting: no metadata will come
                self._running("partitions_for")
                self.machine.ensure_open("partitions_for")
            # used while waited for (Java's waitOnMetadata): not dropped as idle
            self.machine.track_topics([topic], now=driver.now())
            driver.wake()
            changed = self._changed
            found = self.machine.client.cluster.partitions_for(topic)
            if found is not None:
                return frozenset(found)
            if driver.now() >= deadline:
                raise KafkaTimeoutError(
                    f"no metadata for topic {topic!r} within {self._max_block:g} s (max_block_ms)"
                )
            with anyio.move_on_after(deadline - driver.now()):
                await changed.wait()

    async def aclose(self) -> None:
        """Refuse new records, deliver what is pending, close the connections.

        Records that cannot be delivered fail at their delivery timeout; cancel this (or
        call :meth:`abort`) to stop sooner. :func:`open_producer` calls it on a clean exit.
        Closing a closed producer does nothing.
        """
        driver = self._driver
        if driver is None:
            return  # closed (its block ended): nothing runs to close
        if self.machine.state is not ProducerState.CLOSED:
            self.machine.close(now=driver.now())
            driver.wake()
        await self._closed.wait()

    def abort(self) -> None:
        """Fail every pending record with ProducerClosedError and close at once.
        :func:`open_producer` calls it when its block exits with an exception or is
        cancelled. Aborting a closed producer does nothing."""
        driver = self._driver
        if driver is None:
            return
        self.machine.abort(now=driver.now())
        driver.wake()

    # ------------------------------------------------------------------ events

    def _running(self, call: str = "this call") -> AsyncDriver:
        """The driver, or the typed refusal of a producer whose block has ended.

        Raises:
            ProducerClosedError: the producer is closed, or not running.
        """
        driver = self._driver
        if driver is None:
            self.machine.ensure_open(call, advice=_OUTSIDE)  # closed: the core's refusal
            # the machine is open but nothing runs it (a driver that crashed)
            raise ProducerClosedError(f"{call}: the producer is not running{_OUTSIDE}")
        return driver

    def _attach(self, driver: AsyncDriver | None) -> None:
        self._driver = driver

    def _release_waiters(self) -> None:
        """The driver is gone: nothing can resolve what is still waiting. Normally nothing
        is (close and abort give every record its outcome); after a crash of the driver,
        fail the rest rather than leave a waiter -- a task outside the block, such as an
        AIOKafkaProducer user's -- hanging."""
        error = ProducerClosedError("the producer stopped before the record had an outcome")
        deliveries, self._deliveries = self._deliveries, {}
        for delivery in deliveries.values():
            if not delivery.done():
                _settle(delivery, None, error)
        spans, self._spans = self._spans, {}
        for span in spans.values():
            span.failed(error)
        for done in self._flushes.values():
            done.set()
        self._flushes.clear()
        admissions, self._admissions = self._admissions, {}
        for admission in admissions.values():
            admission.error = error
            admission.done.set()
        ops, self._txn_ops = self._txn_ops, {}
        for done, outcome in ops.values():
            outcome.append(ProducerClosedError("the producer stopped during the operation"))
            done.set()
        self._closed.set()
        self._changed.set()

    def _acknowledged(self, event: RecordsAcknowledged, topic: str, partition: int) -> None:
        """Resolve the deliveries and futures of an acknowledged batch (per record: the
        producer's hottest loop after appending)."""
        tp = TopicPartition(topic, partition)
        ts_type = 1 if event.log_append_time >= 0 else 0
        lso = event.log_start_offset
        offset = event.base_offset
        step = 1 if offset >= 0 else 0  # acks=0: every offset stays -1
        none = step == 0 and self.unacknowledged_result_none
        pop = self._deliveries.pop
        unobserved = _UNOBSERVED
        refcount = sys.getrefcount
        for rid, ts in zip(event.record_ids, event.timestamps, strict=True):
            sink = pop(rid, None)
            if sink is None or (
                unobserved is not None
                and refcount(sink) <= unobserved  # see _unobserved_refcount
                and getattr(sink, "_callbacks", ()) is None
            ):
                # A future or Delivery the caller dropped (send()'s, send_nowait()'s), with
                # no callback on it: nobody can ever look at its outcome, so make none.
                pass
            elif isinstance(sink, Delivery):
                sink._resolve((topic, partition, tp, offset, ts, ts_type, lso), None)
            elif not sink.done():
                sink.set_result(
                    None
                    if none
                    else _new_tuple(
                        RecordMetadata, (topic, partition, tp, offset, ts, ts_type, lso)
                    )
                )
            offset += step
        if self._spans:
            self._end_spans(event, partition)

    def _end_spans(self, event: RecordsAcknowledged, partition: int) -> None:
        """End the PRODUCER spans of an acknowledged batch's records (tracing on)."""
        pop = self._spans.pop
        offset = event.base_offset
        step = 1 if offset >= 0 else 0
        for rid in event.record_ids:
            span = pop(rid, None)
            if span is not None:
                span.acknowledged(partition, offset)
            offset += step

    def _handle_event(self, event: Any) -> None:
        match event:
            case RecordsAcknowledged(topic=topic, partition=partition):
                self._acknowledged(event, topic, partition)
                return
            case RecordsFailed(record_ids=rids, error=error):
                if self._spans:
                    for rid in rids:
                        span = self._spans.pop(rid, None)
                        if span is not None:
                            span.failed(error)
                admission = self._admissions.pop(rids[0], None) if self._admissions else None
                if admission is not None:
                    # it never got into a batch: the waiting send raises instead
                    for rid in rids:
                        self._deliveries.pop(rid, None)
                    admission.error = error
                    admission.done.set()
                    return
                for rid in rids:
                    delivery = self._deliveries.pop(rid, None)
                    if delivery is not None:
                        _settle(delivery, None, error)
                return
            case RecordsAdmitted(record_ids=rids):
                admission = self._admissions.pop(rids[0], None)
                if admission is not None:
                    admission.done.set()
                return
            case FlushCompleted(flush_id=fid):
                done = self._flushes.pop(fid, None)
                if done is not None:
                    done.set()
                return
            case TransactionOperationCompleted(operation_id=op, error=error):
                waiter = self._txn_ops.pop(op, None)
                if waiter is not None:
                    if error is not None:
                        waiter[1].append(error)
                    waiter[0].set()
                return
            case ProducerClosed():
                self._closed.set()
                for done in self._flushes.values():
                    done.set()  # every record has its outcome
                self._flushes.clear()
            case MetadataUpdated() | ProducerFailed():
                pass
            case _:
                return
        self._changed.set()
        self._changed = anyio.Event()


def open_producer(
    bootstrap_servers: str | Sequence[str] = "localhost", **options: Any
) -> AbstractAsyncContextManager[Producer]:
    """Run a producer for the duration of an ``async with`` block (asyncio or trio).

    On a normal exit the producer is closed gracefully: pending records are delivered
    (or fail at their delivery timeout) and the connections closed. If the block raises or
    is cancelled, pending records fail with ProducerClosedError and the connections close at
    once (abort).

    Args:
        bootstrap_servers: ``"host[:port],..."`` or a list of such strings.
        options: any producer option of :data:`kafkastate.core.config.OPTIONS` (the
            kafka-python / aiokafka keyword, or the Java property name), with kafkastate's
            defaults: ``acks`` (``"all"``), ``enable_idempotence`` (on with acks all),
            ``linger_ms`` (5), ``batch_size`` (aiokafka's ``max_batch_size`` wins),
            ``buffer_memory``, ``max_block_ms`` (how long a send waits for metadata or
            buffer room), ``compression_type``, ``delivery_timeout_ms``, ``partitioner``
            (``(key_bytes, all_partitions, available_partitions) -> partition``),
            ``transactional_id`` (the producer is initialised on entry, fencing an earlier
            one with the same id), TLS, SASL... (docs/options.md lists them all).

    Returns:
        An async context manager whose block runs the :class:`Producer` it yields.

    Raises:
        KafkaConfigurationError: a bad option (checked at once, before anything starts).
        TypeError: an unknown option.
    """
    resolved = resolve(
        "producer",
        "kafkastate",
        {"bootstrap_servers": bootstrap_servers, **options},
        owner="open_producer",
    )
    # Every value the machines check, checked now; the machines get this config.
    return running_producer(resolved, producer_config(resolved))


@asynccontextmanager
async def running_producer(
    options: Mapping[str, Any], config: ProducerConfig, *, wait_for_cluster: bool = False
) -> AsyncIterator[Producer]:
    """A :class:`Producer` of resolved options (:func:`kafkastate.core.config.resolve`),
    running for the ``async with`` block: a transactional one is initialised first; a
    normal exit closes it gracefully, an exception or cancellation aborts it.

    Args:
        options: resolved producer options.
        config: their :class:`ProducerConfig` (built once, when the options were checked).
        wait_for_cluster: wait for a bootstrap server (``request_timeout_ms``) first, as
            aiokafka's ``start()`` does.
    """
    machine = ProducerMachine(config, rng=machine_rng())
    producer = Producer(machine, max_block=options["max_block_ms"] / 1000)
    producer.tracing = tracing_of(options)
    driver = AsyncDriver(
        machine,
        on_event=producer._handle_event,
        ssl_context=tls_context(options),
        token_provider=options["sasl_oauth_token_provider"],
        connect_timeout=config.client.socket_connection_setup_timeout,
        timers_when_due=True,  # the producer's commands step for themselves
        stats_cb=options["stats_cb"],
    )
    export = metrics_export_of(options, producer.metrics)
    try:
        async with driver:
            producer._attach(driver)
            clean = False
            try:
                if wait_for_cluster:
                    await producer.wait_for_cluster(config.client.connection.request_timeout)
                if config.transactional_id is not None:
                    await producer.init_transactions()
                yield producer
                await producer.aclose()
                clean = True
            finally:
                if not clean:
                    producer.abort()
                producer._attach(None)
    finally:
        producer._release_waiters()
        if export is not None:
            export.close()
