"""A thread-based producer with kafka-python's API, over kafkastate's sans-IO core.

:class:`KafkaProducer` takes kafka-python's keyword arguments, starts one IO thread in its
constructor (as kafka-python does) and returns :class:`FutureRecordMetadata` from
:meth:`~KafkaProducer.send`. The IO thread alone drives the
:class:`~kafkastate.core.producer.producer.ProducerMachine`; callbacks and errbacks run on
it. Errors are :mod:`kafkastate.errors` classes (``KafkaTimeoutError``,
``MessageTooLargeError``...), not kafka-python's.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, NamedTuple, NoReturn, Self

from kafkastate.adapters._common import call_logged, resolve, tls_context
from kafkastate.adapters.blocking.thread import BatchSink, ProducerThread, closed_error
from kafkastate.core.config import (
    close_serializers,
    max_usable_produce_magic,
    options_dict,
    producer_config,
    serializer_of,
)
from kafkastate.core.report import Report
from kafkastate.errors import (
    KafkaConfigurationError,
    KafkaError,
    KafkaTimeoutError,
)
from kafkastate.otel_metrics import MetricsExport, metrics_export_of
from kafkastate.structs import (
    ConsumerGroupMetadata,
    TopicPartition,
)
from kafkastate.tracing import SendSpan, tracing_of

__all__ = ["FutureRecordMetadata", "KafkaProducer", "RecordMetadata"]

log = logging.getLogger("kafkastate.sync")

_CLIENT_IDS = itertools.count(1)

Serializer = Callable[[str, list[tuple[str, bytes]], Any], Any]
_FLAVOUR: Final = "kafka-python"


class RecordMetadata(NamedTuple):
    """Where an acknowledged record was written (kafka-python's ``RecordMetadata``)."""

    topic: str
    """The topic."""
    partition: int
    """The partition."""
    topic_partition: TopicPartition
    """``(topic, partition)``."""
    offset: int
    """The record's offset; -1 with ``acks=0``."""
    timestamp: int
    """The broker's log-append time on a LOG_APPEND_TIME topic, else the record's
    create time, ms since the epoch."""
    checksum: int | None
    """Always None (record batches v2 have no per-record checksum)."""
    serialized_key_size: int
    """Bytes of the serialized key, -1 for None."""
    serialized_value_size: int
    """Bytes of the serialized value, -1 for None."""
    serialized_header_size: int
    """Bytes of the header keys (UTF-8) and values, -1 without headers."""


class FutureRecordMetadata:
    """The outcome of one :meth:`KafkaProducer.send` (kafka-python's future).

    ``is_done``, ``value`` and ``exception`` are attributes as in kafka-python. Callbacks
    registered before completion run on the producer's IO thread; after completion, at
    once in the caller's thread. A callback that raises is logged and ignored.
    """

    __slots__ = (
        "_callbacks",
        "_errbacks",
        "_event",
        "_sizes",
        "exception",
        "is_done",
        "value",
    )

    def __init__(self, sizes: tuple[int, int, int]) -> None:
        self.is_done = False
        """Whether the record has its outcome."""
        self.value: RecordMetadata | None = None
        """The metadata once acknowledged."""
        self.exception: BaseException | None = None
        """The error once failed."""
        self._sizes = sizes
        # Made on demand, under _FUTURES_LOCK: most futures are never waited on or given
        # a callback, and a threading.Event per record costs more than the record.
        self._event: threading.Event | None = None
        self._callbacks: list[Callable[[RecordMetadata], Any]] | None = None
        self._errbacks: list[Callable[[BaseException], Any]] | None = None

    def succeeded(self) -> bool:
        """Returns:
        Whether the record was acknowledged."""
        return self.is_done and self.exception is None

    def failed(self) -> bool:
        """Returns:
        Whether the record failed."""
        return self.is_done and self.exception is not None

    def retriable(self) -> bool:
        """Returns:
        Whether the record failed with a retriable error."""
        return isinstance(self.exception, KafkaError) and self.exception.retriable

    def add_callback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Self:
        """Call ``fn(*args, metadata, **kwargs)`` once the record is acknowledged.

        Args:
            fn: the callback; ``args`` and ``kwargs`` are bound before the metadata.

        Returns:
            This future, for chaining.
        """
        f = functools.partial(fn, *args, **kwargs) if args or kwargs else fn
        with _FUTURES_LOCK:
            if not self.is_done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(f)
                return self
        if self.exception is None:
            assert self.value is not None
            _call(f, self.value)
        return self

    def add_errback(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Self:
        """Call ``fn(*args, exception, **kwargs)`` if the record fails.

        Args:
            fn: the errback; ``args`` and ``kwargs`` are bound before the exception.

        Returns:
            This future, for chaining.
        """
        f = functools.partial(fn, *args, **kwargs) if args or kwargs else fn
        with _FUTURES_LOCK:
            if not self.is_done:
                if self._errbacks is None:
                    self._errbacks = []
                self._errbacks.append(f)
                return self
        if self.exception is not None:
            _call(f, self.exception)
        return self

    def add_both(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Self:
        """Register ``fn`` as callback and errback.

        Returns:
            This future.
        """
        return self.add_callback(fn, *args, **kwargs).add_errback(fn, *args, **kwargs)

    def get(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the outcome.

        Args:
            timeout: seconds to wait; None waits until the record has its outcome (at most
                ``delivery_timeout_ms`` after ``send``).

        Returns:
            The record's metadata.

        Raises:
            KafkaTimeoutError: ``timeout`` passed first.
            KafkaError: the record failed with this error.
        """
        if not self.is_done:
            with _FUTURES_LOCK:
                event = self._event
                if event is None and not self.is_done:
                    event = self._event = threading.Event()
            if event is not None and not event.wait(timeout):
                raise KafkaTimeoutError(f"Timeout after waiting for {timeout} secs.")
        if self.exception is not None:
            raise self.exception
        assert self.value is not None
        return self.value

    # Called by the IO thread (kafkastate.adapters.blocking.thread.RecordSink).
    def record_acknowledged(self, topic: str, partition: int, offset: int, timestamp: int) -> None:
        """Complete with the record's metadata and run the callbacks (IO thread)."""
        key_size, value_size, header_size = self._sizes
        metadata = RecordMetadata(
            topic,
            partition,
            TopicPartition(topic, partition),
            offset,
            timestamp,
            None,
            key_size,
            value_size,
            header_size,
        )
        with _FUTURES_LOCK:
            self.value = metadata
            self.is_done = True
            callbacks, event = self._callbacks, self._event
            self._callbacks = self._errbacks = None
        if event is not None:
            event.set()
        if callbacks:
            for f in callbacks:
                _call(f, metadata)

    def record_failed(self, error: BaseException) -> None:
        """Complete with ``error`` and run the errbacks (IO thread)."""
        with _FUTURES_LOCK:
            self.exception = error
            self.is_done = True
            errbacks, event = self._errbacks, self._event
            self._callbacks = self._errbacks = None
        if event is not None:
            event.set()
        if errbacks:
            for f in errbacks:
                _call(f, error)


class _TracedFuture(FutureRecordMetadata):
    """A future whose record has a PRODUCER span (tracing on): the span ends with the
    outcome, before any waiter or callback sees it."""

    __slots__ = ("_span",)

    def __init__(self, sizes: tuple[int, int, int], span: SendSpan) -> None:
        super().__init__(sizes)
        self._span = span

    def record_acknowledged(self, topic: str, partition: int, offset: int, timestamp: int) -> None:
        self._span.acknowledged(partition, offset)
        super().record_acknowledged(topic, partition, offset, timestamp)

    def record_failed(self, error: BaseException) -> None:
        self._span.failed(error)
        super().record_failed(error)


class _BatchOutcome(BatchSink):
    """Where the IO thread reports the records of one :meth:`KafkaProducer.send_batch`:
    completes the batch's future when the last is acknowledged, or at the first error."""

    __slots__ = ("_first", "_future", "_left")

    def __init__(self, future: FutureRecordMetadata, count: int) -> None:
        self._future = future
        self._left = count
        self._first: tuple[str, int, int, int] | None = None

    def records_acknowledged(
        self, topic: str, partition: int, count: int, offset: int, timestamp: int
    ) -> None:
        first = self._first
        if first is None or (offset >= 0 and offset < first[2]):  # a split batch's pieces
            self._first = (topic, partition, offset, timestamp)
        self._left -= count
        first = self._first
        if self._left <= 0 and first is not None and not self._future.is_done:
            self._future.record_acknowledged(*first)

    def record_failed(self, error: BaseException) -> None:
        if not self._future.is_done:
            self._future.record_failed(error)


_FUTURES_LOCK: Final = threading.Lock()
"""Guards every future's completion against callback registration and waiters (one lock
for all: held for a few attribute writes, never while user code runs)."""


_call = functools.partial(call_logged, log=log, what="a producer callback")
"""Run a future's callback or errback: what it raises is logged and ignored."""


# --------------------------------------------------------------------------------- config


def _number(name: str, value: Any, *, minimum: float, strict: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
    if not ok or value < minimum or (strict and value == minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise KafkaConfigurationError(f"{name} must be a number {bound}, got {value!r}")
    return float(value)


# ------------------------------------------------------------------------------- producer


class KafkaProducer:
    """Publish records to Kafka from threads, with kafka-python's API.

    The constructor validates the options, then starts the IO thread (as kafka-python
    does); connections open on demand. Every option is keyword-only and named as in
    kafka-python; durations are milliseconds.

    Args:
        bootstrap_servers: ``"host[:port]"`` or a list of them (default port 9092).
        client_id: sent with every request; default ``kafkastate-producer-<n>``.
        key_serializer: ``f(key) -> bytes`` or a :class:`kafkastate.serializer.Serializer`
            (anything with ``serialize(topic, headers, key)``); None means keys are bytes
            already.
        value_serializer: the same for values.
        acks: 0, 1 or ``'all'`` (-1, the default).
        compression_type: None, ``'gzip'``, ``'snappy'``, ``'lz4'`` or ``'zstd'``.
        retries: re-sends per batch (default infinite; ``delivery_timeout_ms`` bounds them).
        batch_size: target batch size in bytes (16384).
        linger_ms: how long a batch waits for more records (0, kafka-python's default).
        partitioner: a kafka-python 3.0 partitioner object
            (:class:`kafkastate.partitioner.DefaultPartitioner`, ``StickyPartitioner``
            or your own ``Partitioner``), a callable ``(key_bytes, all_partitions,
            available_partitions) -> partition`` (kafka-python 2.x / aiokafka style), or
            None for murmur2 on keys and uniform sticky partitions (KIP-794) for keyless
            records.
        buffer_memory: bytes of records held before ``send`` blocks (32 MiB; Java's
            ``buffer.memory``, which kafka-python 3.0 dropped).
        max_block_ms: how long ``send`` and ``partitions_for`` wait for metadata or buffer
            memory (60000).
        max_request_size: largest record batch and request (1048576).
        request_timeout_ms: how long a request waits for its response (30000).
        delivery_timeout_ms: bound from ``send`` to outcome (120000, KIP-91).
        enable_idempotence: True/False; unset means on unless ``acks``, ``retries`` or
            ``max_in_flight_requests_per_connection`` conflict (KIP-679).
        max_in_flight_requests_per_connection: Produce requests outstanding per broker (5).
        retry_backoff_ms: first backoff before a retry (100).
        metadata_max_age_ms: refresh metadata at least this often (300000).
        metadata_max_idle_ms: a topic not sent to this long leaves the metadata at the next
            refresh; a later send fetches it again (300000, at least 5000; Java's
            ``metadata.max.idle.ms``).
        allow_auto_create_topics: let the broker create unknown topics (True).
        reconnect_backoff_ms: first reconnect delay (50).
        reconnect_backoff_max_ms: largest reconnect delay (30000).
        connections_max_idle_ms: close connections idle this long (540000).
        receive_message_max_bytes: largest response accepted (100000000).
        security_protocol: ``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``.
        ssl_context: the TLS context; without one, SSL builds a default context from
            ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password`` and
            ``ssl_check_hostname``.
        sasl_mechanism: ``PLAIN``, ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``.
        sasl_plain_username: SASL username.
        sasl_plain_password: SASL password.
        transactional_id: ``transactional.id``: a transactional producer (implies
            idempotence); call :meth:`init_transactions` once, then send only between
            :meth:`begin_transaction` and :meth:`commit_transaction` /
            :meth:`abort_transaction`.
        transaction_timeout_ms: ``transaction.timeout.ms`` (60000): the coordinator aborts
            a transaction left open longer.
        api_version: versions are negotiated with ApiVersions whatever this says; as in
            kafka-python, when None the constructor waits for a bootstrap server.
        bootstrap_timeout_ms: how long the constructor waits for a bootstrap server to
            answer (only when ``api_version`` is None) before NoBrokersAvailable
            (kafka-python 3; 30 s).
        api_version_auto_timeout_ms: kafka-python 2's name for the same wait; wins when
            given.
        metrics_enabled: accepted and ignored: :meth:`metrics` is always available.

    Raises:
        TypeError: an unknown keyword argument.
        KafkaConfigurationError: an invalid value, or a kafka-python option this
            producer does not implement; the message names the option.
        NoBrokersAvailable: no bootstrap server answered within ``bootstrap_timeout_ms``
            (a KafkaConnectionError and a KafkaTimeoutError).
        AuthenticationFailedError: the bootstrap server refused the SASL credentials.
    """

    def __init__(self, **options: Any) -> None:
        self._io: ProducerThread | None = None
        self._closed = True
        self._export: MetricsExport | None = None
        resolved = resolve("producer", _FLAVOUR, options, owner="KafkaProducer")
        if resolved["client_id"] is None:
            resolved["client_id"] = f"kafkastate-producer-{next(_CLIENT_IDS)}"
        config = producer_config(resolved)
        self._resolved = resolved
        self._key_serializer = serializer_of(resolved["key_serializer"])
        self._value_serializer = serializer_of(resolved["value_serializer"])
        self._max_block = resolved["max_block_ms"] / 1000
        self._tracing = tracing_of(resolved)
        bootstrap_wait = resolved["bootstrap_timeout_ms"] / 1000
        api_version = resolved["api_version"]
        tls = tls_context(resolved)
        self.config: dict[str, Any] = options_dict("producer", _FLAVOUR, options)
        """kafka-python's option dict: every option by name, as given or defaulted
        (``client_id`` as chosen)."""
        self.config["client_id"] = resolved["client_id"]
        self._io = ProducerThread(
            config,
            ssl_context=tls,
            name=f"kafkastate-producer-io[{config.client.connection.client_id}]",
            token_provider=resolved["sasl_oauth_token_provider"],
            stats_cb=resolved["stats_cb"],
        )
        self._closed = False
        self._close_lock = threading.Lock()
        self._io.start()
        self._export = metrics_export_of(resolved, self._io.metrics)
        if api_version is None:
            try:
                self._io.wait_for_cluster(bootstrap_wait)
            except BaseException:
                self.close(timeout=1.0)  # nothing is pending: the IO thread ends at once
                raise

    def send(  # noqa: PLR0917 -- kafka-python's positional signature
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Publish a record; return at once with a future for its outcome.

        Blocks only while the topic's metadata or buffer memory is missing, up to
        ``max_block_ms``. From a callback (the IO thread) it never blocks: a record that
        would wait is queued and its future fails after ``max_block_ms``.

        Args:
            topic: the topic.
            value: the value (bytes, or anything ``value_serializer`` takes); None is a
                tombstone and needs a key.
            key: the key (bytes, or anything ``key_serializer`` takes), or None.
            headers: a list of ``(str, bytes)`` pairs.
            partition: an explicit partition, or None for the partitioner's choice.
            timestamp_ms: create time in ms since the epoch; default now.

        Returns:
            A future resolving to the record's :class:`RecordMetadata`.

        Raises:
            KafkaTimeoutError: no metadata or buffer memory within ``max_block_ms``.
            MessageTooLargeError: the record exceeds ``max_request_size``.
            ProducerClosedError: the producer is closed (an IllegalStateError, as
                kafka-python raises).
            TypeError: a bad topic, header or serialized type.
            KafkaConfigurationError: neither key nor value, or a negative partition.
            KafkaError: another refusal (the producer failed fatally...).
        """
        return self._send(topic, value, key, headers, partition, timestamp_ms, True)

    def send_nowait(  # noqa: PLR0917 -- send()'s positional signature
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: list[tuple[str, bytes]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Publish a record without ever blocking (fire and forget, as confluent-kafka's
        ``produce()``; kafkastate's addition): :meth:`send` with the same delivery
        guarantees, except that a record that does not fit ``buffer_memory`` now is refused
        at once instead of waiting up to ``max_block_ms``. A record whose topic metadata is
        pending is queued; its future fails with ``KafkaTimeoutError`` after
        ``max_block_ms`` if the metadata never names it. There is no ``poll()`` to call:
        the IO thread sends and runs callbacks by itself.

        Args:
            topic: the topic.
            value: the value (bytes, or anything ``value_serializer`` takes); None is a
                tombstone and needs a key.
            key: the key (bytes, or anything ``key_serializer`` takes), or None.
            headers: a list of ``(str, bytes)`` pairs.
            partition: an explicit partition, or None for the partitioner's choice.
            timestamp_ms: create time in ms since the epoch; default now.

        Returns:
            A future resolving to the record's :class:`RecordMetadata`.

        Raises:
            BufferFullError: ``buffer_memory`` has no room now, or blocked sends wait for
                it (a builtin ``BufferError`` too, as confluent-kafka raises; retriable):
                nothing was appended. Try again later, or call :meth:`send`, which waits.
            MessageTooLargeError: the record exceeds ``max_request_size``.
            ProducerClosedError: the producer is closed (an IllegalStateError, as
                kafka-python raises).
            TypeError: a bad topic, header or serialized type.
            KafkaConfigurationError: neither key nor value, or a negative partition.
            KafkaError: another refusal (the producer failed fatally...).
        """
        return self._send(topic, value, key, headers, partition, timestamp_ms, False)

    def _send(  # noqa: PLR0917 -- internal, positional for speed
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: list[tuple[str, bytes]] | None,
        partition: int | None,
        timestamp_ms: int | None,
        block: bool,
    ) -> FutureRecordMetadata:
        io = self._io
        if self._closed or io is None:
            raise closed_error()
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str, got {topic!r}")
        if value is None and key is None:
            raise KafkaConfigurationError("send needs at least one of key or value")
        if headers is None:
            headers = []
        if not isinstance(headers, list) or not all(
            isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], str) and _is_bytes(h[1])
            for h in headers
        ):
            raise TypeError("headers must be a list of (str, bytes) tuples")
        if partition is not None and (
            isinstance(partition, bool) or not isinstance(partition, int) or partition < 0
        ):
            raise KafkaConfigurationError(f"partition must be an int >= 0, got {partition!r}")
        key_bytes = _serialized("key", self._key_serializer, topic, headers, key)
        value_bytes = _serialized("value", self._value_serializer, topic, headers, value)
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        sizes = (
            -1 if key_bytes is None else len(key_bytes),
            -1 if value_bytes is None else len(value_bytes),
            sum(len(k.encode()) + len(v) for k, v in headers) if headers else -1,
        )
        span = None
        if self._tracing is None:
            future = FutureRecordMetadata(sizes)
        else:
            headers, span = self._tracing.send(topic, partition, key_bytes, headers)
            future = _TracedFuture(sizes, span)
        try:
            io.submit_send(
                topic,
                value=value_bytes,
                key=key_bytes,
                headers=headers,
                partition=partition,
                timestamp_ms=timestamp_ms,
                sink=future,
                block=block,
            )
        except BaseException as exc:
            if span is not None:
                span.failed(exc)
            raise
        return future

    def send_batch(
        self,
        topic: str,
        records: Sequence[tuple[Any, Any, list[tuple[str, bytes]] | None]],
        *,
        partition: int,
        timestamp_ms: int | None = None,
    ) -> FutureRecordMetadata:
        """Publish records as one record batch of their own, to one partition (aiokafka's
        ``send_batch``, without its builder; kafkastate's addition to kafka-python's API).

        The records get consecutive offsets and no other record joins their batch, which
        is sent as it is whatever ``batch_size`` says: a bulk writer's path, with one
        appending call and one future for many records. Blocks only while the topic's
        metadata or buffer memory is missing, up to ``max_block_ms``. No tracing spans are
        made for them.

        Args:
            topic: the topic.
            records: ``(key, value, headers)`` per record, in order; keys and values
                through the serializers as in :meth:`send`, headers a list of
                ``(str, bytes)`` pairs or None.
            partition: the partition (required: a batch is never partitioned).
            timestamp_ms: create time of every record, ms since the epoch; default now.

        Returns:
            A future for the whole batch: the first record's :class:`RecordMetadata` (its
            offset is the batch's base offset; the serialized sizes are -1) once every
            record is acknowledged, or the first error.

        Raises:
            KafkaTimeoutError: no metadata or buffer memory within ``max_block_ms``.
            MessageTooLargeError: the batch exceeds ``max_request_size`` or
                ``buffer_memory``.
            ProducerClosedError: the producer is closed (an IllegalStateError).
            IllegalStateError: called from a callback.
            KafkaConfigurationError: no records, a negative partition, or a record with
                neither key nor value or of the wrong type.
            KafkaError: another refusal (the producer failed fatally...).
        """
        io = self._io
        if self._closed or io is None:
            raise closed_error()
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            raise KafkaConfigurationError(f"partition must be an int >= 0, got {partition!r}")
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        key_ser, value_ser = self._key_serializer, self._value_serializer
        if key_ser is None and value_ser is None:  # one comprehension: the bulk hot path
            batch = [
                (ts, k, v, h or ()) if k is not None or v is not None else _keyless_valueless()
                for k, v, h in records
            ]
        else:
            batch = []
            for key, value, headers in records:
                if value is None and key is None:
                    _keyless_valueless()
                hdrs = headers or []
                batch.append(
                    (
                        ts,
                        _serialized("key", key_ser, topic, hdrs, key),
                        _serialized("value", value_ser, topic, hdrs, value),
                        headers or (),
                    )
                )
        future = FutureRecordMetadata((-1, -1, -1))
        io.submit_batch(topic, partition, batch, _BatchOutcome(future, len(batch)))
        return future

    def flush(self, timeout: float | None = None) -> None:
        """Send everything now (no linger) and wait until every record sent before this
        call has its outcome.

        Args:
            timeout: seconds to wait; None waits (records fail at ``delivery_timeout_ms``).

        Raises:
            KafkaTimeoutError: ``timeout`` passed first.
            IllegalStateError: called from a callback (it would wait for its own thread).
        """
        if self._io is not None and not self._closed:
            self._io.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Deliver pending records, close the connections and end the IO thread.

        Idempotent. Records still pending after ``timeout`` seconds fail with
        ``ProducerClosedError``. From a callback, close cannot wait for its own thread:
        pending records are aborted at once (like ``close(0)``, as kafka-python and the
        Java client do) and the thread ends when the callback returns.

        Args:
            timeout: seconds to wait for delivery; None waits (bounded by
                ``delivery_timeout_ms``), 0 aborts pending records at once.

        Raises:
            KafkaConfigurationError: a negative timeout.
        """
        if timeout is not None:
            _number("timeout", timeout, minimum=0)
        io = self._io
        if io is None:
            return
        with self._close_lock:
            already, self._closed = self._closed, True
        io.close(timeout)
        if not already:
            close_serializers(self._resolved)
            if self._export is not None:
                self._export.close()

    @classmethod
    def max_usable_produce_magic(cls, api_version: Any) -> int:
        """The record batch format a broker of ``api_version`` takes, as kafka-python
        computes it (2 from 0.11, 1 from 0.10, else 0). kafkastate writes format 2
        whatever it says (the only one Kafka 4 accepts).

        Args:
            api_version: a version tuple (``(2, 8)``) or string (``"0.10.2"``).

        Returns:
            0, 1 or 2.

        Raises:
            KafkaConfigurationError: not a version.
        """
        return max_usable_produce_magic(api_version)

    # ------------------------------------------------------------ transactions

    def _io_running(self) -> ProducerThread:
        io = self._io
        if self._closed or io is None:
            raise closed_error()
        return io

    def init_transactions(self) -> None:
        """Register the ``transactional_id`` with its transaction coordinator: fences any
        earlier producer with the same id and aborts what it left open. Call once, before
        the first transaction.

        Raises:
            KafkaTimeoutError: not done within ``max_block_ms`` (call again to keep
                waiting is not supported: close the producer).
            TransactionStateError: no ``transactional_id``, or already called (an
                IllegalStateError).
            KafkaError: the coordinator refused (TransactionalIdAuthorizationFailedError...).
        """
        io = self._io_running()
        machine = io.machine
        io.transaction_call(
            "init_transactions", lambda now: machine.init_transactions(now=now), self._max_block
        )

    def begin_transaction(self) -> None:
        """Open a transaction: records sent until commit or abort belong to it.

        Raises:
            TransactionStateError: not initialised, or a transaction already open.
            TransactionFailedError: the previous transaction failed; abort it first.
            ProducerFencedError: the producer was fenced (fatal).
        """
        io = self._io_running()
        machine = io.machine

        def begin(_now: float) -> None:
            machine.begin_transaction()

        io.transaction_call("begin_transaction", begin, None)

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[tuple[str, int], Any],
        consumer_group_metadata: str | ConsumerGroupMetadata,
    ) -> None:
        """Commit consumer offsets in the open transaction; they count only if it commits.

        Args:
            offsets: ``TopicPartition -> OffsetAndMetadata`` (or an int offset) of the next
                record to consume.
            consumer_group_metadata: the consumer's group metadata (KIP-447 fencing), or a
                plain group id str.

        Raises:
            TransactionStateError: no transaction open.
            TransactionFailedError: the group refused the offsets (a fenced member...);
                abort the transaction.
            ProducerFencedError: the producer was fenced (fatal).
        """
        io = self._io_running()
        machine = io.machine
        io.transaction_call(
            "send_offsets_to_transaction",
            lambda now: machine.send_offsets_to_transaction(
                offsets, consumer_group_metadata, now=now
            ),
            None,
        )

    def commit_transaction(self) -> None:
        """Send every record of the transaction (flush), then commit it.

        Raises:
            TransactionStateError: no transaction open.
            TransactionFailedError: a record or the offsets failed, or the coordinator
                aborted the transaction after ``transaction_timeout_ms``
                (TransactionTimedOutError); call :meth:`abort_transaction` (the producer
                stays usable).
            ProducerFencedError: another producer with the same ``transactional_id`` took
                over (fatal: close the producer).
        """
        io = self._io_running()
        machine = io.machine
        io.transaction_call(
            "commit_transaction", lambda now: machine.commit_transaction(now=now), None
        )

    def abort_transaction(self) -> None:
        """Abort the transaction: unsent records fail with TransactionAbortedError, written
        ones stay invisible to ``read_committed`` consumers.

        Raises:
            TransactionStateError: no transaction open.
            ProducerFencedError: the producer was fenced (fatal).
        """
        io = self._io_running()
        machine = io.machine
        io.transaction_call(
            "abort_transaction", lambda now: machine.abort_transaction(now=now), None
        )

    def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic``, waiting up to ``max_block_ms`` for its metadata.

        Args:
            topic: the topic.

        Returns:
            The set of partition ids.

        Raises:
            KafkaTimeoutError: no metadata within ``max_block_ms``.
            ProducerClosedError: the producer is closed (an IllegalStateError, as
                kafka-python raises).
        """
        io = self._io
        if self._closed or io is None:
            raise closed_error()
        return io.partitions_for(topic, self._max_block)

    def metrics(self, raw: bool = False) -> Report:
        """Counters, rates and latencies, grouped as kafka-python groups them
        (``{group: {name: value}}``, the Java client's names: docs/observability.md).

        ``producer-metrics`` also holds this face's own: ``record-refused-total`` and
        ``record-block-timeout-total`` (``send`` raised) and ``records-waiting-send``
        (blocked in ``send``).

        Args:
            raw: accepted for compatibility; ignored.

        Returns:
            ``{group: {name: value}}``; after close, the final values.
        """
        assert self._io is not None
        return self._io.metrics()

    def health(self) -> dict[str, Any]:
        """A JSON-able snapshot for liveness probes (:func:`kafkastate.core.report.health`):
        connected brokers, last acknowledgement, error state."""
        assert self._io is not None
        return self._io.health()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        client_id = self.config["client_id"] if self._io else None
        return f"<KafkaProducer client_id={client_id} closed={self._closed}>"


def _keyless_valueless() -> NoReturn:
    raise KafkaConfigurationError("send_batch: a record needs a key or a value")


def _is_bytes(value: object) -> bool:
    return isinstance(value, bytes | bytearray | memoryview)


def _serialized(
    what: str,
    serializer: Serializer | None,
    topic: str,
    headers: list[tuple[str, bytes]],
    data: Any,
) -> bytes | bytearray | memoryview | None:
    out = data if serializer is None or data is None else serializer(topic, headers, data)
    if out is not None and not _is_bytes(out):
        raise TypeError(
            f"unsupported type for serialized {what}: {type(out).__name__} "
            f"(pass bytes or set {what}_serializer)"
        )
    result: bytes | bytearray | memoryview | None = out
    return result
