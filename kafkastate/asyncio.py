"""kafkastate for asyncio: :class:`AIOKafkaProducer`, a drop-in subset of aiokafka's.

It runs :func:`kafkastate.anyio.open_producer` (the anyio driver, on asyncio) in a
background task that :meth:`AIOKafkaProducer.start` creates and
:meth:`AIOKafkaProducer.stop` ends. anyio users on asyncio can use
:func:`open_producer` directly; it is re-exported here.

As in aiokafka, ``start()`` waits for a bootstrap server to answer (up to
``request_timeout_ms``) and raises ``KafkaConnectionError`` (``NoBrokersAvailable``) if none
does. Options aiokafka has and kafkastate does not (transactions, Kerberos, OAuth token
providers, ``api_version``) raise ``TypeError`` naming them.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, Final

from kafkastate.anyio import (
    BatchBuilder,
    Delivery,
    Producer,
    RecordMetadata,
    build_producer_config,
    open_producer,
)
from kafkastate.core.producer.partitioner import CustomPartitioner
from kafkastate.errors import KafkaError

__all__ = [
    "AIOKafkaProducer",
    "BatchBuilder",
    "Producer",
    "RecordMetadata",
    "open_producer",
]

_UNSUPPORTED: Final = frozenset(
    {
        "loop",
        "api_version",
        "transactional_id",
        "transaction_timeout_ms",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_oauth_token_provider",
    }
)


class AIOKafkaProducer:
    """An asyncio producer with aiokafka's interface (the commonly used subset).

    No task is started before :meth:`start`. Options have aiokafka's names and defaults
    (``acks=1``, or ``"all"`` with ``enable_idempotence=True``; ``linger_ms=0``).

    Args:
        bootstrap_servers: ``"host[:port],..."`` or a list of such strings.
        client_id: ``client.id``.
        acks: 0, 1, -1 or ``"all"``; None for aiokafka's default.
        key_serializer: turns a key into bytes (called for every key, None included).
        value_serializer: turns a value into bytes (called for every value).
        compression_type: ``"gzip"``, ``"snappy"``, ``"lz4"``, ``"zstd"`` or None.
        max_batch_size: ``batch.size`` in bytes.
        max_request_size: ``max.request.size`` in bytes.
        linger_ms: ``linger.ms``.
        enable_idempotence: ``enable.idempotence``.
        request_timeout_ms: ``request.timeout.ms``.
        retry_backoff_ms: ``retry.backoff.ms``.
        metadata_max_age_ms: ``metadata.max.age.ms``.
        connections_max_idle_ms: ``connections.max.idle.ms``.
        delivery_timeout_ms: ``delivery.timeout.ms`` (not in aiokafka).
        max_block_ms: how long ``send`` waits for metadata or buffer room (not in
            aiokafka; default ``request_timeout_ms``).
        security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        ssl_context: TLS settings for ``SSL``/``SASL_SSL``.
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``.
        sasl_plain_username: SASL user.
        sasl_plain_password: SASL password.
        partitioner: ``(key_bytes, all_partitions, available_partitions) -> partition``;
            None for the Java default (murmur2 by key, uniform sticky without one).
        allow_auto_create_topics: let metadata requests create a missing topic, as
            aiokafka's do (not in aiokafka; True).
        unsupported: aiokafka options kafkastate does not implement.

    Raises:
        TypeError: an unsupported or unknown option.
        KafkaConfigurationError: an option has a bad value (a ValueError).
    """

    def __init__(
        self,
        *,
        bootstrap_servers: str | Sequence[str] = "localhost",
        client_id: str | None = "kafkastate",
        acks: int | str | None = None,
        key_serializer: Callable[[Any], bytes | None] | None = None,
        value_serializer: Callable[[Any], bytes | None] | None = None,
        compression_type: str | None = None,
        max_batch_size: int = 16384,
        max_request_size: int = 1048576,
        linger_ms: float = 0,
        enable_idempotence: bool = False,
        request_timeout_ms: float = 40000,
        retry_backoff_ms: float = 100,
        metadata_max_age_ms: float = 300000,
        connections_max_idle_ms: float = 540000,
        delivery_timeout_ms: float = 120000,
        max_block_ms: float | None = None,
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        sasl_mechanism: str = "PLAIN",
        sasl_plain_username: str | None = None,
        sasl_plain_password: str | None = None,
        partitioner: CustomPartitioner | None = None,
        allow_auto_create_topics: bool = True,
        **unsupported: Any,
    ) -> None:
        if unsupported:
            names = sorted(unsupported)
            known = [n for n in names if n in _UNSUPPORTED]
            unknown = [n for n in names if n not in _UNSUPPORTED]
            parts = []
            if known:
                parts.append(f"aiokafka option(s) not supported by kafkastate: {', '.join(known)}")
            if unknown:
                parts.append(f"unknown option(s): {', '.join(unknown)}")
            raise TypeError("AIOKafkaProducer: " + "; ".join(parts))
        if acks is None:
            acks = "all" if enable_idempotence else 1
        sasl = security_protocol.startswith("SASL")
        self._options: dict[str, Any] = {
            "client_id": client_id,
            "acks": acks,
            "enable_idempotence": enable_idempotence,
            "linger_ms": linger_ms,
            "batch_size": max_batch_size,
            "max_request_size": max_request_size,
            "compression_type": compression_type,
            "request_timeout_ms": request_timeout_ms,
            "delivery_timeout_ms": delivery_timeout_ms,
            "retry_backoff_ms": retry_backoff_ms,
            "metadata_max_age_ms": metadata_max_age_ms,
            "connections_max_idle_ms": connections_max_idle_ms,
            "security_protocol": security_protocol,
            "ssl_context": ssl_context,
            "sasl_mechanism": sasl_mechanism if sasl else None,
            "sasl_plain_username": sasl_plain_username,
            "sasl_plain_password": sasl_plain_password,
            "partitioner": partitioner,
            "allow_auto_create_topics": allow_auto_create_topics,
        }
        self._bootstrap = bootstrap_servers
        # Validate now, as aiokafka does, so a bad option fails before start().
        build_producer_config(bootstrap_servers, **self._options)
        self._max_block_ms = request_timeout_ms if max_block_ms is None else max_block_ms
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None
        self._producer: Producer | None = None

    async def start(self) -> None:
        """Start the background task that owns the connections and wait for a bootstrap
        server to answer.

        Raises:
            NoBrokersAvailable: no bootstrap server answered within ``request_timeout_ms``
                (a KafkaConnectionError, as aiokafka raises).
            RuntimeError: already started.
        """
        if self._task is not None:
            raise RuntimeError("AIOKafkaProducer.start() was already called")
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[Producer] = loop.create_future()
        self._stopping = asyncio.Event()
        self._task = task = loop.create_task(self._run(ready, self._stopping))
        try:
            waiting: set[asyncio.Future[Any]] = {ready, task}
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            task.cancel()
            raise
        if not ready.done():
            self._task = None
            task.result()  # raises what stopped it
            raise RuntimeError("the producer task ended before it started")
        self._producer = ready.result()

    async def stop(self) -> None:
        """Deliver what is pending, close the connections, end the background task.

        Cancelling ``stop()`` aborts: pending records fail with ProducerClosedError.
        """
        task, stopping = self._task, self._stopping
        if task is None or stopping is None:
            return
        stopping.set()
        try:
            await task
        finally:
            self._task = None
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
        key_bytes = key if self._key_serializer is None else self._key_serializer(key)
        value_bytes = value if self._value_serializer is None else self._value_serializer(value)
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        await producer._append(
            topic,
            value_bytes,
            key_bytes,
            partition,
            timestamp_ms,
            headers or (),
            _FutureSink(future),
        )
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

    def _running(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("AIOKafkaProducer is not started: call `await start()` first")
        return self._producer

    async def _run(self, ready: asyncio.Future[Producer], stopping: asyncio.Event) -> None:
        async with open_producer(
            self._bootstrap, max_block_ms=self._max_block_ms, **self._options
        ) as producer:
            await producer.wait_for_cluster(self._options["request_timeout_ms"] / 1000)
            ready.set_result(producer)
            await stopping.wait()


class _FutureSink:
    """Resolves one send()'s asyncio future straight from the producer's events."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future[RecordMetadata]) -> None:
        self.future = future

    def done(self) -> bool:
        return self.future.done()

    def _resolve(
        self, ack: tuple[str, int, int, int, int] | None, error: KafkaError | None
    ) -> None:
        future = self.future
        if future.done():
            return  # cancelled by its owner
        if error is not None:
            future.set_exception(error)
            return
        assert ack is not None
        topic, partition, offset, timestamp, timestamp_type = ack
        future.set_result(
            RecordMetadata(
                topic=topic,
                partition=partition,
                offset=offset,
                timestamp=timestamp,
                timestamp_type=timestamp_type,
            )
        )


def _settle(future: asyncio.Future[RecordMetadata], delivery: Delivery) -> None:
    if future.cancelled():
        return
    try:
        future.set_result(delivery.result())
    except KafkaError as exc:
        future.set_exception(exc)
