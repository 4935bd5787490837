"""The anyio producer: ``async with open_producer(...) as producer`` on asyncio or trio.

The :class:`Producer` gives commands to a
:class:`~kafkastate.core.producer.producer.ProducerMachine` and turns its events into
:class:`Delivery` outcomes; an :class:`~kafkastate.adapters._async_driver.AsyncDriver` does
the IO. The only error handling here is *waiting*: a record refused with a retriable error
(metadata pending, unknown topic, buffer full) is offered again after the machine's state
changed, until ``max_block_ms`` passes (Java ``max.block.ms``).

Two ways to send:

* ``await producer.send(...)`` appends the record and waits for its outcome:
  a :class:`RecordMetadata`, or the record's error raised.
* ``delivery = await producer.enqueue(...)`` only waits until the record is appended
  (metadata, buffer room) and returns a :class:`Delivery`; ``await delivery`` later.
  This is how to have many records in flight from one task.

Cancelling a wait never withdraws an appended record: it is still delivered (or fails)
and :meth:`Producer.flush` still waits for it.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import anyio
import anyio.lowlevel
import attrs

from kafkastate.adapters._async_driver import AsyncDriver
from kafkastate.core.client import ClientConfig, MetadataUpdated
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.metadata import MetadataConfig
from kafkastate.core.producer.accumulator import (
    AccumulatorConfig,
    BufferSpaceFreed,
    FlushCompleted,
    FlushId,
    RecordId,
    RecordsAcknowledged,
    RecordsFailed,
)
from kafkastate.core.producer.producer import (
    ProducerClosed,
    ProducerConfig,
    ProducerFailed,
    ProducerMachine,
    ProducerState,
)
from kafkastate.core.protocol.compression import Compression
from kafkastate.errors import KafkaConfigurationError, KafkaError, KafkaTimeoutError

__all__ = ["Delivery", "Producer", "RecordMetadata", "build_producer_config", "open_producer"]

Headers = Sequence[tuple[str, bytes | None]]

_COMPRESSION: Final = {
    None: Compression.NONE,
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@attrs.frozen(kw_only=True)
class RecordMetadata:
    """Where an acknowledged record was written (aiokafka's ``RecordMetadata`` fields)."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""
    offset: int
    """The record's offset; -1 with ``acks=0`` (the broker does not say)."""
    timestamp: int
    """The record's timestamp in ms, as the log keeps it (create or log-append time)."""
    timestamp_type: int
    """0 for CreateTime, 1 for LogAppendTime (the topic's ``message.timestamp.type``)."""


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
        self._ack: tuple[str, int, int, int, int] | None = None  # made into _result on demand
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
            topic, partition, offset, timestamp, timestamp_type = self._ack
            self._result = RecordMetadata(
                topic=topic,
                partition=partition,
                offset=offset,
                timestamp=timestamp,
                timestamp_type=timestamp_type,
            )
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
            callback: runs in the producer's pump task; it must not block or raise.
        """
        if self.done():
            callback(self)
        elif self._callbacks is None:
            self._callbacks = [callback]
        else:
            self._callbacks.append(callback)

    def _resolve(
        self, ack: tuple[str, int, int, int, int] | None, error: KafkaError | None
    ) -> None:
        self._ack, self._error = ack, error
        if self._done is not None:
            self._done.set()
        callbacks, self._callbacks = self._callbacks, None
        if callbacks:
            for callback in callbacks:
                callback(self)


class Producer:
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
        self._deliveries: dict[RecordId, Delivery] = {}
        self._flushes: dict[FlushId, anyio.Event] = {}
        self._changed = anyio.Event()  # set and replaced when a refused send may now pass
        self._closed = anyio.Event()

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
        driver = self._driver
        if driver is None:
            driver = self._running()  # raises
        machine = self.machine
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        deadline: float | None = None
        while True:
            changed = self._changed
            steps = machine.steps
            now = driver.now()
            try:
                rid = machine.send(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    timestamp_ms=ts,
                    headers=headers,
                    now=now,
                )
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                driver.wake()  # the machine may have asked for metadata
                if deadline is None:
                    deadline = now + self._max_block
                if now >= deadline:
                    raise KafkaTimeoutError(
                        f"send waited {self._max_block:g} s (max_block_ms): {exc}"
                    ) from exc
                with anyio.move_on_after(deadline - now):
                    await changed.wait()
                continue
            delivery = Delivery(rid)
            self._deliveries[rid] = delivery
            if machine.steps != steps:
                # A batch opened or filled up: let the pump see it, and send full batches
                # while this task goes on appending. Appending to a batch with room changes
                # nothing the pump would act on, so it does not cost a wake-up.
                driver.wake()
                await anyio.lowlevel.cancel_shielded_checkpoint()  # appended: no Cancelled
            return delivery

    async def flush(self) -> None:
        """Send everything now (no linger) and wait until every earlier record has its
        outcome. Cancelling the wait does not cancel the flush.

        Raises:
            LocalProtocolError: the producer is closed.
        """
        driver = self._running()
        fid = self.machine.flush(now=driver.now())
        done = self._flushes[fid] = anyio.Event()
        driver.wake()
        await done.wait()

    async def partitions_for(self, topic: str) -> frozenset[int]:
        """The partitions of ``topic``, waiting for its metadata up to ``max_block_ms``.

        Args:
            topic: the topic.

        Returns:
            Its partition indexes.

        Raises:
            KafkaTimeoutError: no metadata for the topic within ``max_block_ms``.
        """
        driver = self._running()
        deadline = driver.now() + self._max_block
        self.machine.track_topics([topic])
        driver.wake()
        while True:
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
        """
        driver = self._running()
        if self.machine.state is not ProducerState.CLOSED:
            self.machine.close(now=driver.now())
            driver.wake()
        await self._closed.wait()

    def abort(self) -> None:
        """Fail every pending record with ProducerClosedError and close at once.
        :func:`open_producer` calls it when its block exits with an exception or is
        cancelled."""
        driver = self._running()
        self.machine.abort(now=driver.now())
        driver.wake()

    # ------------------------------------------------------------------ events

    def _running(self) -> AsyncDriver:
        if self._driver is None:
            raise RuntimeError("the producer is not running: use `async with open_producer(...)`")
        return self._driver

    def _attach(self, driver: AsyncDriver | None) -> None:
        self._driver = driver

    def _handle_event(self, event: Any) -> None:
        match event:
            case RecordsAcknowledged(topic=topic, partition=partition):
                ts_type = 1 if event.log_append_time >= 0 else 0
                pop = self._deliveries.pop
                for rid, offset, ts in event.results():
                    delivery = pop(rid, None)
                    if delivery is not None:
                        delivery._resolve((topic, partition, offset, ts, ts_type), None)
                return
            case RecordsFailed(record_ids=rids, error=error):
                for rid in rids:
                    delivery = self._deliveries.pop(rid, None)
                    if delivery is not None:
                        delivery._resolve(None, error)
                return
            case FlushCompleted(flush_id=fid):
                done = self._flushes.pop(fid, None)
                if done is not None:
                    done.set()
                return
            case ProducerClosed():
                self._closed.set()
                for done in self._flushes.values():
                    done.set()  # every record has its outcome
                self._flushes.clear()
            case MetadataUpdated() | BufferSpaceFreed() | ProducerFailed():
                pass
            case _:
                return
        self._changed.set()
        self._changed = anyio.Event()


def build_producer_config(
    bootstrap_servers: str | Sequence[str],
    *,
    client_id: str | None = "kafkastate",
    acks: int | str = "all",
    enable_idempotence: bool | None = None,
    linger_ms: float = 5,
    batch_size: int = 16384,
    buffer_memory: int = 32 * 1024 * 1024,
    max_request_size: int = 1024 * 1024,
    compression_type: str | None = None,
    request_timeout_ms: float = 30000,
    delivery_timeout_ms: float = 120000,
    retry_backoff_ms: float = 100,
    metadata_max_age_ms: float = 300000,
    connections_max_idle_ms: float = 540000,
    security_protocol: str = "PLAINTEXT",
    ssl_context: ssl.SSLContext | None = None,
    sasl_mechanism: str | None = None,
    sasl_plain_username: str | None = None,
    sasl_plain_password: str | None = None,
) -> tuple[ProducerConfig, ssl.SSLContext | None]:
    """Build a :class:`ProducerConfig` (and the TLS context) from kafka-python/aiokafka
    style options. See :func:`open_producer` for their meaning.

    Returns:
        The config and the TLS context to connect with (None for plaintext).

    Raises:
        KafkaConfigurationError: an option has a bad value or options contradict each other
            (a ValueError).
    """
    if compression_type not in _COMPRESSION:
        raise KafkaConfigurationError(
            f"compression_type must be one of gzip, snappy, lz4, zstd or None, "
            f"got {compression_type!r}"
        )
    if security_protocol not in _PROTOCOLS:
        raise KafkaConfigurationError(
            f"security_protocol must be one of {', '.join(_PROTOCOLS)}, got {security_protocol!r}"
        )
    tls = security_protocol.endswith("SSL")
    if ssl_context is not None and not tls:
        raise KafkaConfigurationError(
            f"ssl_context given but security_protocol is {security_protocol!r}; use 'SSL'"
        )
    if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
        raise KafkaConfigurationError(f"ssl_context must be an ssl.SSLContext, got {ssl_context!r}")
    if tls and ssl_context is None:
        ssl_context = ssl.create_default_context()
    sasl = security_protocol.startswith("SASL")
    if sasl and sasl_mechanism is None:
        sasl_mechanism = "PLAIN"
    if not sasl and sasl_mechanism is not None:
        raise KafkaConfigurationError(
            f"sasl_mechanism given but security_protocol is {security_protocol!r}"
        )
    for name, value in (
        ("linger_ms", linger_ms),
        ("request_timeout_ms", request_timeout_ms),
        ("delivery_timeout_ms", delivery_timeout_ms),
        ("retry_backoff_ms", retry_backoff_ms),
        ("metadata_max_age_ms", metadata_max_age_ms),
        ("connections_max_idle_ms", connections_max_idle_ms),
    ):
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise KafkaConfigurationError(f"{name} must be a number of ms >= 0, got {value!r}")
    try:
        config = ProducerConfig(
            client=ClientConfig(
                bootstrap_servers=bootstrap_servers,
                connection=ConnectionConfig(
                    client_id=client_id,
                    request_timeout=request_timeout_ms / 1000,
                    sasl_mechanism=sasl_mechanism if sasl else None,
                    sasl_username=sasl_plain_username,
                    sasl_password=sasl_plain_password,
                ),
                metadata=MetadataConfig(
                    metadata_max_age=metadata_max_age_ms / 1000,
                    retry_backoff=retry_backoff_ms / 1000,
                ),
                connections_max_idle=connections_max_idle_ms / 1000,
            ),
            accumulator=AccumulatorConfig(
                batch_size=batch_size,
                linger=linger_ms / 1000,
                buffer_memory=buffer_memory,
                max_request_size=max_request_size,
                compression=_COMPRESSION[compression_type],
                request_timeout=request_timeout_ms / 1000,
                delivery_timeout=delivery_timeout_ms / 1000,
                retry_backoff=retry_backoff_ms / 1000,
            ),
            acks=acks,
            enable_idempotence=enable_idempotence,
        )
    except KafkaConfigurationError:
        raise
    except (ValueError, TypeError) as exc:  # lower configs validate with ValueError
        raise KafkaConfigurationError(str(exc)) from exc
    return config, ssl_context


@asynccontextmanager
async def open_producer(
    bootstrap_servers: str | Sequence[str],
    *,
    client_id: str | None = "kafkastate",
    acks: int | str = "all",
    enable_idempotence: bool | None = None,
    linger_ms: float = 5,
    batch_size: int = 16384,
    max_batch_size: int | None = None,
    buffer_memory: int = 32 * 1024 * 1024,
    max_request_size: int = 1024 * 1024,
    compression_type: str | None = None,
    request_timeout_ms: float = 30000,
    delivery_timeout_ms: float = 120000,
    retry_backoff_ms: float = 100,
    metadata_max_age_ms: float = 300000,
    connections_max_idle_ms: float = 540000,
    max_block_ms: float = 60000,
    security_protocol: str = "PLAINTEXT",
    ssl_context: ssl.SSLContext | None = None,
    sasl_mechanism: str | None = None,
    sasl_plain_username: str | None = None,
    sasl_plain_password: str | None = None,
) -> AsyncIterator[Producer]:
    """Run a producer for the duration of an ``async with`` block (asyncio or trio).

    On a normal exit the producer is closed gracefully: pending records are delivered
    (or fail at their delivery timeout) and the connections closed. If the block raises or
    is cancelled, pending records fail with ProducerClosedError and the connections close at
    once (abort).

    Args:
        bootstrap_servers: ``"host[:port],..."`` or a list of such strings.
        client_id: ``client.id``.
        acks: 0, 1, -1 or ``"all"``.
        enable_idempotence: ``enable.idempotence``; None: on when ``acks="all"``.
        linger_ms: ``linger.ms``.
        batch_size: ``batch.size`` in bytes.
        max_batch_size: aiokafka's name for ``batch_size`` (wins when given).
        buffer_memory: ``buffer.memory`` in bytes.
        max_request_size: ``max.request.size`` in bytes.
        compression_type: ``"gzip"``, ``"snappy"``, ``"lz4"``, ``"zstd"`` or None.
        request_timeout_ms: ``request.timeout.ms``.
        delivery_timeout_ms: ``delivery.timeout.ms``.
        retry_backoff_ms: ``retry.backoff.ms``.
        metadata_max_age_ms: ``metadata.max.age.ms``.
        connections_max_idle_ms: ``connections.max.idle.ms``.
        max_block_ms: ``max.block.ms``: how long a send waits for metadata or buffer room.
        security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        ssl_context: TLS settings for ``SSL``/``SASL_SSL`` (default:
            ``ssl.create_default_context()``).
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512`` (default PLAIN).
        sasl_plain_username: SASL user.
        sasl_plain_password: SASL password.

    Yields:
        The running :class:`Producer`.

    Raises:
        KafkaConfigurationError: a bad option (before anything is started).
        TypeError: an unknown option.
    """
    if isinstance(max_block_ms, bool) or not isinstance(max_block_ms, int | float):
        raise KafkaConfigurationError(f"max_block_ms must be a number, got {max_block_ms!r}")
    if max_block_ms < 0:
        raise KafkaConfigurationError(f"max_block_ms must be >= 0, got {max_block_ms!r}")
    config, tls = build_producer_config(
        bootstrap_servers,
        client_id=client_id,
        acks=acks,
        enable_idempotence=enable_idempotence,
        linger_ms=linger_ms,
        batch_size=batch_size if max_batch_size is None else max_batch_size,
        buffer_memory=buffer_memory,
        max_request_size=max_request_size,
        compression_type=compression_type,
        request_timeout_ms=request_timeout_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        metadata_max_age_ms=metadata_max_age_ms,
        connections_max_idle_ms=connections_max_idle_ms,
        security_protocol=security_protocol,
        ssl_context=ssl_context,
        sasl_mechanism=sasl_mechanism,
        sasl_plain_username=sasl_plain_username,
        sasl_plain_password=sasl_plain_password,
    )
    machine = ProducerMachine(config, rng=random.SystemRandom())
    producer = Producer(machine, max_block=max_block_ms / 1000)
    driver = AsyncDriver(
        machine,
        on_event=producer._handle_event,
        ssl_context=tls,
        connect_timeout=config.client.socket_connection_setup_timeout,
    )
    async with driver:
        producer._attach(driver)
        clean = False
        try:
            yield producer
            await producer.aclose()
            clean = True
        finally:
            if not clean:
                producer.abort()
            producer._attach(None)
