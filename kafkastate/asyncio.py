"""kafkastate for asyncio: :class:`AIOKafkaProducer` and :class:`AIOKafkaConsumer`,
drop-in subsets of aiokafka's.

Each runs its anyio context manager (:func:`kafkastate.anyio.open_producer`,
:func:`kafkastate.anyio.open_consumer`, on asyncio) in a background task that ``start()``
creates and ``stop()`` ends. anyio users on asyncio can use those directly; they are
re-exported here.

As in aiokafka, ``start()`` waits for a bootstrap server to answer (up to
``request_timeout_ms``) and raises ``KafkaConnectionError`` (``NoBrokersAvailable``) if none
does. aiokafka options kafkastate does not implement (Kerberos, OAuth token providers) raise
``KafkaConfigurationError`` naming them; ``loop`` and ``api_version`` are accepted and
ignored. Options are resolved by :mod:`kafkastate.core.config` (docs/options.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Generic, TypeVar

from kafkastate._anyio_consumer import Consumer, open_consumer, running_consumer
from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.anyio import (
    BatchBuilder,
    Delivery,
    Producer,
    RecordMetadata,
    open_producer,
    running_producer,
)
from kafkastate.core.config import check_consumer, producer_config, resolve
from kafkastate.core.consumer.consumer import check_subscription
from kafkastate.errors import IllegalStateError, KafkaError
from kafkastate.structs import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndTimestamp,
    TopicPartition,
)

__all__ = [
    "AIOKafkaConsumer",
    "AIOKafkaProducer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerGroupMetadata",
    "BatchBuilder",
    "Producer",
    "RecordMetadata",
    "TopicPartition",
    "open_consumer",
    "open_producer",
]

_T = TypeVar("_T")


class _Background(Generic[_T]):
    """The task an asyncio API object runs its anyio context manager in: started by
    ``start()``, told to leave the block by ``stop()``, which waits for it."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None

    async def start(
        self, run: Callable[[asyncio.Future[_T], asyncio.Event], Coroutine[Any, Any, None]]
    ) -> _T:
        """Run ``run(ready, stopping)`` in a task; return what it puts in ``ready``.

        Raises:
            RuntimeError: already started, or the task ended before it was ready.
            BaseException: what ended the task before it was ready.
        """
        if self._task is not None:
            raise RuntimeError(f"{self._what}.start() was already called")
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[_T] = loop.create_future()
        self._stopping = asyncio.Event()
        self._task = task = loop.create_task(run(ready, self._stopping))
        try:
            waiting: set[asyncio.Future[Any]] = {ready, task}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if not ready.done():
            self._task = None
            task.result()  # raises what stopped it
            raise RuntimeError(f"the {self._what} task ended before it started")
        return ready.result()

    async def stop(self) -> None:
        """Let the task leave its block and wait for it (nothing if not started)."""
        task, stopping = self._task, self._stopping
        if task is None or stopping is None:
            return
        stopping.set()
        try:
            await task
        finally:
            self._task = None


class AIOKafkaProducer:
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

    def __init__(self, **options: Any) -> None:
        # Checked now, as aiokafka does, so a bad option fails before start().
        self._options = resolve("producer", "aiokafka", options, owner="AIOKafkaProducer")
        producer_config(self._options)
        self._key_serializer = self._options["key_serializer"]
        self._value_serializer = self._options["value_serializer"]
        self._background: _Background[Producer] = _Background("AIOKafkaProducer")
        self._producer: Producer | None = None

    async def start(self) -> None:
        """Start the background task that owns the connections and wait for a bootstrap
        server to answer.

        Raises:
            NoBrokersAvailable: no bootstrap server answered within ``request_timeout_ms``
                (a KafkaConnectionError, as aiokafka raises).
            RuntimeError: already started.
        """
        self._producer = await self._background.start(self._run)

    async def stop(self) -> None:
        """Deliver what is pending, close the connections, end the background task.

        Cancelling ``stop()`` aborts: pending records fail with ProducerClosedError.
        """
        try:
            await self._background.stop()
        finally:
            self._producer = None

    async def __aenter__(self) -> AIOKafkaProducer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def send(  # noqa: PLR0917 -- aiokafka's positional signature
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> asyncio.Future[RecordMetadata]:
        """Append a record (serialized first); wait only for metadata or buffer room.

        Args:
            topic: the topic.
            value: the value (passed through ``value_serializer`` if set).
            key: the key (passed through ``key_serializer`` if set).
            partition: an explicit partition, or None for the default partitioner.
            timestamp_ms: create time in ms since the epoch; None for now.
            headers: ``(key, value)`` pairs.

        Returns:
            A future resolving to the :class:`RecordMetadata`, or failing with the
            record's error.

        Raises:
            KafkaTimeoutError: ``max_block_ms`` passed while the record was refused.
            KafkaError: the record was refused for good.
            RuntimeError: the producer is not started.
        """
        producer = self._producer
        if producer is None:
            producer = self._running()  # raises
        if self._key_serializer is not None:
            key = self._key_serializer(key)
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        try:
            # The common case without a detour through another coroutine: appended now.
            _, moved = producer._append_now(
                topic, value, key, partition, timestamp_ms, headers or (), future
            )
        except KafkaError as exc:
            if not exc.retriable:
                raise
            await producer._append(  # wait for metadata (max_block_ms)
                topic, value, key, partition, timestamp_ms, headers or (), future, refused=exc
            )
        else:
            if moved:  # let the pump run, or wait in the machine's FIFO for buffer memory
                await producer._appended(moved)
        return future

    async def send_and_wait(  # noqa: PLR0917 -- aiokafka's positional signature
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
    ) -> RecordMetadata:
        """:meth:`send`, then wait for the record's outcome.

        Args:
            topic: the topic.
            value: the value (passed through ``value_serializer`` if set).
            key: the key (passed through ``key_serializer`` if set).
            partition: an explicit partition, or None for the default partitioner.
            timestamp_ms: create time in ms since the epoch; None for now.
            headers: ``(key, value)`` pairs.

        Returns:
            Where the record was written.

        Raises:
            KafkaError: the record was refused or failed.
            RuntimeError: the producer is not started.
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
        """
        delivery = await self._running().send_batch(batch, topic, partition=partition)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        delivery.add_done_callback(lambda d: _settle(future, d))
        return future

    async def flush(self) -> None:
        """Send everything now and wait until every earlier record has its outcome.

        Raises:
            RuntimeError: the producer is not started.
        """
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
            raise RuntimeError("AIOKafkaProducer is not started: call `await start()` first")
        return self._producer

    async def _run(self, ready: asyncio.Future[Producer], stopping: asyncio.Event) -> None:
        async with running_producer(self._options, wait_for_cluster=True) as producer:
            ready.set_result(producer)
            await stopping.wait()


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


def _settle(future: asyncio.Future[RecordMetadata], delivery: Delivery) -> None:
    if future.cancelled():
        return
    try:
        future.set_result(delivery.result())
    except KafkaError as exc:
        future.set_exception(exc)


class AIOKafkaConsumer:
    """An asyncio consumer with aiokafka's interface.

    Give partitions with :meth:`assign`, or topics / a pattern (here or in
    :meth:`subscribe`). With a ``group_id`` a subscription joins the consumer group (the
    classic protocol, or KIP-848 with ``group_protocol="consumer"``), which assigns the
    partitions; heartbeats and rebalances run in the background, and a
    :class:`~kafkastate.abc.ConsumerRebalanceListener` hears of every change. Without a
    ``group_id`` a subscription reads every partition of the topics. The few aiokafka
    options kafkastate lacks (Kerberos, OAuth) raise ``KafkaConfigurationError``
    naming them.

    Args:
        topics: topics to read every partition of.
        options: aiokafka's keyword options, with aiokafka's defaults (``bootstrap_servers``,
            ``group_id``, ``key_deserializer``, ``value_deserializer``, ``fetch_*``,
            ``enable_auto_commit`` (on), ``auto_commit_interval_ms``,
            ``partition_assignment_strategy`` (round robin), ``session_timeout_ms``
            (10 s), ``rebalance_timeout_ms`` (the session timeout),
            ``request_timeout_ms`` (40 s), ``isolation_level``, TLS, SASL...); also
            ``group_protocol="consumer"`` (KIP-848) and the Java property names. Every
            option, its default per library and its check: docs/options.md
            (:data:`kafkastate.core.config.OPTIONS`). ``consumer_timeout_ms`` and
            ``api_version`` are accepted without effect (fetching is driven by the
            broker's answers; versions are negotiated).

    Raises:
        KafkaConfigurationError: a bad option value, or an aiokafka option kafkastate does
            not implement (Kerberos...), named (a ValueError).
        TypeError: an option aiokafka does not have either.
    """

    def __init__(self, *topics: str, **options: Any) -> None:
        self._options = resolve("consumer", "aiokafka", options, owner="AIOKafkaConsumer")
        check_consumer(self._options)  # checked now, as aiokafka does
        self._topics = topics
        self._background: _Background[Consumer] = _Background("AIOKafkaConsumer")
        self._consumer: Consumer | None = None
        self._pending: tuple[Any, Any, Any] | None = None  # subscribe() before start()

    async def start(self) -> None:
        """Start the background task that owns the connections, subscribe to the topics
        given to the constructor, and wait for a bootstrap server to answer (as aiokafka
        does).

        Raises:
            NoBrokersAvailable: no bootstrap server answered within ``request_timeout_ms``
                (a KafkaConnectionError, as aiokafka raises).
            AuthenticationFailedError: the bootstrap servers refused the SASL credentials.
            RuntimeError: already started.
        """
        self._consumer = await self._background.start(self._run)

    async def stop(self) -> None:
        """Commit (with auto-commit on) and close the connections."""
        try:
            await self._background.stop()
        finally:
            self._consumer = None

    async def __aenter__(self) -> AIOKafkaConsumer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _running(self) -> Consumer:
        if self._consumer is None:
            raise IllegalStateError("AIOKafkaConsumer is not started: call `await start()`")
        return self._consumer

    async def _run(self, ready: asyncio.Future[Consumer], stopping: asyncio.Event) -> None:
        subscription = self._pending
        self._pending = None
        if subscription is None and self._topics:
            subscription = (self._topics, None, None)
        async with running_consumer(self._options, subscription, wait_for_cluster=True) as consumer:
            ready.set_result(consumer)
            await stopping.wait()

    # The rest delegates to kafkastate.anyio.Consumer.

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read exactly these partitions."""
        self._running().assign(partitions)

    def assignment(self) -> set[TopicPartition]:
        """The partitions being read."""
        return set(self._running().assignment())

    def subscribe(
        self, topics: Sequence[str] = (), pattern: str | None = None, listener: Any = None
    ) -> None:
        """Subscribe to ``topics`` or to the topics matching ``pattern`` (``re.match``);
        with a ``group_id`` the group assigns their partitions and ``listener`` (a
        :class:`~kafkastate.abc.ConsumerRebalanceListener`) hears of every change.

        Raises:
            KafkaConfigurationError: bad topics, both or neither of topics and pattern, a
                bad pattern or listener.
        """
        if self._consumer is None:
            # before start(), as aiokafka allows: checked now, applied by start()
            check_subscription(
                topics, pattern, listener, group=self._options["group_id"] is not None
            )
            self._pending = (topics, pattern, listener)
            return
        self._running().subscribe(topics, pattern=pattern, listener=listener)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """This member's group metadata, for ``send_offsets_to_transaction``."""
        return self._running().group_metadata()

    def subscription(self) -> set[str]:
        """The subscribed topics."""
        return set(self._running().subscription())

    def unsubscribe(self) -> None:
        """Drop the subscription and the assignment."""
        self._running().unsubscribe()

    async def getone(self, *partitions: tuple[str, int]) -> ConsumerRecord:
        """The next record (of these partitions)."""
        return await self._running().getone(*partitions)

    async def getmany(
        self, *partitions: tuple[str, int], timeout_ms: float = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Fetched records per partition, waiting up to ``timeout_ms`` for the first."""
        return await self._running().getmany(
            *partitions, timeout_ms=timeout_ms, max_records=max_records
        )

    def __aiter__(self) -> AIOKafkaConsumer:
        return self

    async def __anext__(self) -> ConsumerRecord:
        consumer = self._consumer
        if consumer is None:
            raise StopAsyncIteration  # stopped: aiokafka ends the iteration too
        return await consumer.__anext__()  # ends the iteration when stop() comes meanwhile

    def seek(self, partition: tuple[str, int], offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        self._running().seek(partition, offset)

    async def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        """Read from the log start."""
        await self._running().seek_to_beginning(*partitions)

    async def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        """Read only new records."""
        await self._running().seek_to_end(*partitions)

    async def seek_to_committed(self, *partitions: tuple[str, int]) -> None:
        """Go back to the committed offsets.

        Raises:
            IllegalStateError: no group_id, or a partition is not assigned.
        """
        await self._running().seek_to_committed(*partitions)

    async def position(self, partition: tuple[str, int]) -> int:
        """The offset of the next record to be returned."""
        return await self._running().position(partition)

    async def committed(self, partition: tuple[str, int]) -> int | None:
        """The group's committed offset, or None."""
        return await self._running().committed(partition)

    async def commit(self, offsets: Mapping[tuple[str, int], Any] | None = None) -> None:
        """Commit offsets (default: the positions of every assigned partition)."""
        await self._running().commit(offsets)

    def highwater(self, partition: tuple[str, int]) -> int | None:
        """The high watermark of the last fetch."""
        return self._running().highwater(partition)

    def last_stable_offset(self, partition: tuple[str, int]) -> int | None:
        """The last stable offset of the last fetch."""
        return self._running().last_stable_offset(partition)

    def last_poll_timestamp(self, partition: tuple[str, int]) -> int | None:
        """When records of ``partition`` were last returned (ms since the epoch)."""
        return self._running().last_poll_timestamp(partition)

    def pause(self, *partitions: tuple[str, int]) -> None:
        """Stop fetching these partitions."""
        self._running().pause(*partitions)

    def resume(self, *partitions: tuple[str, int]) -> None:
        """Undo :meth:`pause`."""
        self._running().resume(*partitions)

    def paused(self) -> set[TopicPartition]:
        """The paused partitions."""
        return set(self._running().paused())

    async def beginning_offsets(
        self, partitions: Iterable[tuple[str, int]]
    ) -> dict[TopicPartition, int]:
        """The log start offsets."""
        return await self._running().beginning_offsets(partitions)

    async def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """The log end offsets."""
        return await self._running().end_offsets(partitions)

    async def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """The first offsets at or after the timestamps (ms)."""
        return await self._running().offsets_for_times(timestamps)

    async def topics(self) -> set[str]:
        """Every topic in the cluster."""
        return set(await self._running().topics())

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        """The partitions of ``topic`` from the metadata at hand (aiokafka: no request)."""
        found = self._running().machine.client.cluster.partitions_for(topic)
        return None if found is None else set(found)
