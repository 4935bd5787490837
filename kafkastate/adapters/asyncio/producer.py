"""aiokafka's ``AIOKafkaProducer`` on asyncio.

It runs the async adapter's producer (:func:`kafkastate.adapters.anyio.producer.running_producer`,
on asyncio) in a background task that ``start()`` creates and ``stop()`` ends; every call
goes straight to that :class:`~kafkastate.adapters.anyio.producer.Producer` and its
:class:`~kafkastate.core.producer.producer.ProducerMachine`. As in aiokafka, ``start()``
waits for a bootstrap server to answer (up to ``request_timeout_ms``) and raises
``KafkaConnectionError`` (``NoBrokersAvailable``) if none does. Options are resolved by
:mod:`kafkastate.core.config` (docs/options.md).
"""

from __future__ import annotations

import asyncio
import functools
import warnings
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

from kafkastate.adapters._common import resolve
from kafkastate.adapters.anyio.producer import (
    BatchBuilder,
    Delivery,
    Producer,
    RecordMetadata,
    running_producer,
)
from kafkastate.adapters.asyncio.background import Background, Lifecycle, deprecated_arguments
from kafkastate.core.config import producer_config
from kafkastate.core.producer.producer import ProducerConfig
from kafkastate.errors import KafkaError, ProducerClosed
from kafkastate.structs import ConsumerGroupMetadata

__all__ = ["AIOKafkaProducer"]


class AIOKafkaProducer(Lifecycle):
    """An asyncio producer with aiokafka's interface (the commonly used subset).

    No task is started before :meth:`start`. Options have aiokafka's names and defaults
    (``acks=1``, or ``"all"`` with ``enable_idempotence=True``; ``linger_ms=0``).

    Args:
        options: aiokafka's keyword options, with aiokafka's defaults
            (``bootstrap_servers``, ``acks`` -- 1, or ``"all"`` when idempotent --,
            ``key_serializer`` and ``value_serializer`` (called for every key and value,
            None included), ``compression_type``, ``max_batch_size``, ``linger_ms`` (0),
            ``enable_idempotence`` (off), ``request_timeout_ms`` (40 s), ``partitioner``,
            ``transactional_id`` (implies idempotence; :meth:`start` registers it with the
            transaction coordinator, fencing earlier producers with the same id), TLS,
            SASL...); kafkastate's additions (``delivery_timeout_ms``, ``buffer_memory``,
            ``max_block_ms`` -- default ``request_timeout_ms`` --,
            ``allow_auto_create_topics``) and the Java property names too. Every option,
            its default per library and its check: docs/options.md
            (:data:`kafkastate.core.config.OPTIONS`).

    Raises:
        TypeError: an unknown option.
        KafkaConfigurationError: an option has a bad value, or an aiokafka option
            kafkastate does not implement (Kerberos, OAuth) (a ValueError).
    """

    def __init__(self, *, loop: Any = None, **options: Any) -> None:
        deprecated_arguments("AIOKafkaProducer", loop, options)
        # Checked now, as aiokafka does, so a bad option fails before start().
        self._options = resolve("producer", "aiokafka", options, owner="AIOKafkaProducer")
        self._config = producer_config(self._options)
        self._key_serializer = self._options["key_serializer"]
        self._value_serializer = self._options["value_serializer"]
        self._serializing = self._key_serializer is not None or self._value_serializer is not None
        self._background: Background[Producer] = Background("AIOKafkaProducer")
        self._producer: Producer | None = None
        self._new_future: Callable[[], asyncio.Future[Any]] = _no_loop
        self._stopped = False

    def __del__(self, _warn: Any = warnings.warn) -> None:
        # (getattr: a constructor that raised leaves nothing to warn about)
        if getattr(self, "_producer", None) is not None and not getattr(self, "_stopped", True):
            _warn(f"Unclosed AIOKafkaProducer {self!r}", ResourceWarning, source=self)

    async def start(self) -> None:
        """Start the background task that owns the connections and wait for a bootstrap
        server to answer.

        Raises:
            NoBrokersAvailable: no bootstrap server answered within ``request_timeout_ms``
                (a KafkaConnectionError, as aiokafka raises).
            RuntimeError: already started.
        """
        # (the task holds no reference to self: an unclosed producer can be collected)
        self._new_future = _future_factory(asyncio.get_running_loop())
        run = functools.partial(_run, self._options, self._config)
        self._producer = await self._background.start(run)
        self._observed = self._producer

    async def stop(self) -> None:
        """Deliver what is pending, close the connections, end the background task.

        Cancelling ``stop()`` aborts: pending records fail with ProducerClosedError.
        """
        self._stopped = self._producer is not None or self._stopped
        try:
            await self._background.stop()
        finally:
            self._producer = None

    async def send(  # noqa: PLR0917 -- aiokafka's positional signature
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> asyncio.Future[RecordMetadata | None]:
        """Append a record (serialized first); wait only for metadata or buffer room.

        Args:
            topic: the topic.
            value: the value (passed through ``value_serializer`` if set).
            key: the key (passed through ``key_serializer`` if set).
            partition: an explicit partition, or None for the default partitioner.
            timestamp_ms: create time in ms since the epoch; None for now.
            headers: ``(key, value)`` pairs.

        Returns:
            A future resolving to the :class:`RecordMetadata` (None with ``acks=0``, as
            aiokafka), or failing with the record's error.

        Raises:
            KafkaTimeoutError: ``max_block_ms`` passed while the record was refused.
            KafkaError: the record was refused for good.
            RuntimeError: the producer is not started.
            ProducerClosedError: the producer was stopped (aiokafka's ``ProducerClosed``).
        """
        # (the hot path of the awaited loop: no helper frame, the future bound once)
        producer = self._producer or self._running()
        if self._serializing:
            key, value = self._serialize(key, value)
        future = self._new_future()
        moved = producer._append_now(
            topic, value, key, partition, timestamp_ms, headers or (), future, True
        )[1]
        if moved:  # let the pump run, or wait in the machine for metadata or buffer memory
            await producer._appended(moved)
        return future

    def send_nowait(  # noqa: PLR0917 -- send()'s positional signature
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> asyncio.Future[RecordMetadata | None]:
        """Append a record (serialized first) without awaiting anything: fire and forget,
        as confluent-kafka's ``produce()`` (kafkastate's addition; aiokafka has none).

        The same delivery guarantees as :meth:`send`. Call it from the event loop's
        thread, and yield to the loop now and then (``await asyncio.sleep(0)`` or any
        await -- confluent's ``poll(0)``): the producer's task writes the batches and
        resolves the futures only then. A record whose topic metadata is pending is held by
        the producer (its future fails with ``KafkaTimeoutError`` after ``max_block_ms``).

        Args:
            topic: the topic.
            value: the value (passed through ``value_serializer`` if set).
            key: the key (passed through ``key_serializer`` if set).
            partition: an explicit partition, or None for the default partitioner.
            timestamp_ms: create time in ms since the epoch; None for now.
            headers: ``(key, value)`` pairs.

        Returns:
            A future resolving to the :class:`RecordMetadata` (None with ``acks=0``), or
            failing with the record's error.

        Raises:
            BufferFullError: ``buffer_memory`` has no room now, or awaited sends wait for it
                (a builtin ``BufferError`` too, as confluent-kafka raises; retriable):
                nothing was appended. Yield and try again, or ``await`` :meth:`send`, which
                waits for room up to ``max_block_ms``.
            KafkaError: the record was refused for good.
            RuntimeError: the producer is not started.
            ProducerClosedError: the producer was stopped (aiokafka's ``ProducerClosed``).
        """
        producer = self._producer or self._running()
        if self._serializing:
            key, value = self._serialize(key, value)
        future: asyncio.Future[RecordMetadata | None] = self._new_future()
        # block=False: a record that would wait for buffer memory is refused (BufferError)
        producer._append_now(
            topic, value, key, partition, timestamp_ms, headers or (), future, False
        )
        return future

    def _serialize(self, key: Any, value: Any) -> tuple[Any, Any]:
        """The key and value through their serializers (where set)."""
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        return key, value

    async def send_and_wait(  # noqa: PLR0917 -- aiokafka's positional signature
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordMetadata | None:
        """:meth:`send`, then wait for the record's outcome.

        Args:
            topic: the topic.
            value: the value (passed through ``value_serializer`` if set).
            key: the key (passed through ``key_serializer`` if set).
            partition: an explicit partition, or None for the default partitioner.
            timestamp_ms: create time in ms since the epoch; None for now.
            headers: ``(key, value)`` pairs.

        Returns:
            Where the record was written; None with ``acks=0`` (as aiokafka).

        Raises:
            KafkaError: the record was refused or failed.
            RuntimeError: the producer is not started.
            ProducerClosedError: the producer was stopped (aiokafka's ``ProducerClosed``).
        """
        future = await self.send(topic, value, key, partition, timestamp_ms, headers)
        return await future

    def create_batch(self) -> BatchBuilder:
        """An empty :class:`~kafkastate.anyio.BatchBuilder` for :meth:`send_batch`, with
        this producer's serializers and ``max_batch_size``.

        Returns:
            The builder.

        Raises:
            RuntimeError: the producer is not started.
            ProducerClosedError: the producer was stopped (aiokafka's ``ProducerClosed``).
        """
        return self._running().create_batch(
            key_serializer=self._key_serializer, value_serializer=self._value_serializer
        )

    async def send_batch(
        self, batch: BatchBuilder, topic: str, *, partition: int
    ) -> asyncio.Future[RecordMetadata]:
        """Queue ``batch``'s records as one record batch for ``partition``.

        Args:
            batch: from :meth:`create_batch`.
            topic: the topic.
            partition: the partition.

        Returns:
            A future resolving to the first record's metadata (the batch's base offset)
            once the whole batch is written, or failing with its error.

        Raises:
            KafkaTimeoutError: ``max_block_ms`` passed while the batch was refused.
            KafkaError: the batch was refused for good.
            RuntimeError: the producer is not started.
            ProducerClosedError: the producer was stopped (aiokafka's ``ProducerClosed``).
        """
        delivery = await self._running().send_batch(batch, topic, partition=partition)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        delivery.add_done_callback(lambda d: _settle(future, d))
        return future

    async def flush(self) -> None:
        """Send everything now and wait until every earlier record has its outcome. After
        :meth:`stop` every record has its outcome: it returns at once (as aiokafka's).

        Raises:
            RuntimeError: the producer is not started.
        """
        if self._stopped and self._producer is None:
            return
        await self._running().flush()

    async def partitions_for(self, topic: str) -> set[int]:
        """The partitions of ``topic``, waiting for its metadata up to ``max_block_ms``.

        Args:
            topic: the topic.

        Returns:
            Its partition indexes.

        Raises:
            KafkaTimeoutError: no metadata in time.
            RuntimeError: the producer is not started.
            ProducerClosedError: the producer was stopped (aiokafka's ``ProducerClosed``).
        """
        return set(await self._running().partitions_for(topic))

    # ---------------------------------------------------------------- transactions

    async def begin_transaction(self) -> None:
        """Open a transaction (needs ``transactional_id``).

        Raises:
            IllegalOperation: a transaction is already open, or no ``transactional_id``
                (a :class:`~kafkastate.errors.TransactionStateError`).
            TransactionFailedError: the previous transaction failed and was not aborted.
            ProducerFenced: another producer with the same ``transactional_id`` took over.
        """
        await self._running().begin_transaction()

    async def commit_transaction(self) -> None:
        """Send every record of the transaction, then commit it.

        Raises:
            IllegalOperation: no transaction open.
            TransactionFailedError: a record or the offsets failed, or the coordinator
                aborted the transaction after ``transaction_timeout_ms``
                (TransactionTimedOutError); abort the transaction (the producer stays
                usable).
            ProducerFenced: another producer with the same ``transactional_id`` took over
                (fatal: stop the producer).
        """
        await self._running().commit_transaction()

    async def abort_transaction(self) -> None:
        """Abort the transaction: unsent records fail with TransactionAbortedError, written
        ones stay invisible to ``read_committed`` consumers.

        Raises:
            IllegalOperation: no transaction open.
            ProducerFenced: the producer was fenced (fatal).
        """
        await self._running().abort_transaction()

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], Any],
        group_id: str | ConsumerGroupMetadata,
    ) -> None:
        """Commit consumer offsets in the open transaction (consume-transform-produce).

        Args:
            offsets: ``TopicPartition -> offset`` (or ``OffsetAndMetadata``) of the next
                record to consume.
            group_id: the consumer group id, or the consumer's group metadata (KIP-447
                fencing of zombie members).

        Raises:
            IllegalOperation: no transaction open.
            TransactionFailedError: the group refused the offsets (a fenced member...);
                abort the transaction.
            ProducerFenced: the producer was fenced (fatal).
        """
        await self._running().send_offsets_to_transaction(offsets, group_id)

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """``async with producer.transaction():`` -- begin on entry, commit on a normal
        exit, abort if the block raises (then re-raise), as in aiokafka.

        Returns:
            The async context manager.
        """
        return _Transaction(self)

    def _running(self) -> Producer:
        if self._producer is None:
            if self._stopped:
                raise ProducerClosed("AIOKafkaProducer was stopped")
            raise RuntimeError("AIOKafkaProducer is not started: call `await start()` first")
        return self._producer


class _Transaction:
    """What :meth:`AIOKafkaProducer.transaction` returns."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self._producer = producer
        self._cm: AbstractAsyncContextManager[None] | None = None

    async def __aenter__(self) -> None:
        self._cm = self._producer._running().transaction()
        await self._cm.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._cm is not None
        return await self._cm.__aexit__(exc_type, exc, tb)


def _future_factory(loop: asyncio.AbstractEventLoop) -> Callable[[], asyncio.Future[Any]]:
    """What makes the future of each send, bound once (a future per send is on the hot
    path): the loop's ``create_future``, or -- when that is asyncio's own, a Python frame
    around ``asyncio.Future(loop=loop)`` -- the future class itself."""
    if type(loop).create_future is asyncio.BaseEventLoop.create_future:
        return functools.partial(asyncio.Future, loop=loop)
    return loop.create_future


def _no_loop() -> asyncio.Future[Any]:
    raise RuntimeError("AIOKafkaProducer is not started: call `await start()` first")


def _settle(future: asyncio.Future[RecordMetadata], delivery: Delivery) -> None:
    if future.cancelled():
        return
    try:
        future.set_result(delivery.result())
    except KafkaError as exc:
        future.set_exception(exc)


async def _run(
    options: dict[str, Any],
    config: ProducerConfig,
    ready: asyncio.Future[Producer],
    stopping: asyncio.Event,
) -> None:
    """The background task of a started :class:`AIOKafkaProducer`."""
    async with running_producer(options, config, wait_for_cluster=True) as producer:
        producer.unacknowledged_result_none = True  # acks=0: None, as aiokafka
        ready.set_result(producer)
        await stopping.wait()
