"""kafka-python 0.9.5's ``Producer`` base class on kafkastate's blocking producer.

Each legacy producer owns a :class:`kafkastate.sync.KafkaProducer` (the core
``ProducerMachine`` with its IO thread) built from the ``KafkaClient``'s hosts and
client id. Sync mode sends a call's messages and waits for their acknowledgements; async
mode returns at once and lets the producer's IO thread batch (``batch_send_every_t`` is the
linger, ``batch_send_every_n`` messages send the batch at once). :meth:`Producer.stop`
delivers what is pending (up to ``async_stop_timeout`` seconds).

``async`` is a reserved word since Python 3.7: pass ``async_send=True`` (kafka-python 1.4's
name), ``async_=True``, or ``**{"async": True}``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from typing import Any

from kafkastate.adapters.blocking.producer import FutureRecordMetadata, KafkaProducer
from kafkastate.errors import KafkaError
from kafkastate.legacy.common import (
    AsyncProducerQueueFull,
    KafkaTimeoutError,
    ProduceResponse,
    RetryOptions,
    UnsupportedCodecError,
    seed_errors,
)
from kafkastate.legacy.protocol import (
    ALL_CODECS,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
)
from kafkastate.legacy.util import topic_name

__all__ = [
    "ASYNC_QUEUE_MAXSIZE",
    "ASYNC_QUEUE_PUT_TIMEOUT",
    "ASYNC_RETRY_BACKOFF_MS",
    "ASYNC_RETRY_LIMIT",
    "ASYNC_RETRY_ON_TIMEOUTS",
    "ASYNC_STOP_TIMEOUT_SECS",
    "BATCH_SEND_DEFAULT_INTERVAL",
    "BATCH_SEND_MSG_COUNT",
    "Producer",
]

log = logging.getLogger(__name__)

BATCH_SEND_DEFAULT_INTERVAL = 20
BATCH_SEND_MSG_COUNT = 20
ASYNC_QUEUE_MAXSIZE = 0
ASYNC_QUEUE_PUT_TIMEOUT = 0
ASYNC_RETRY_LIMIT = None
ASYNC_RETRY_BACKOFF_MS = 100
ASYNC_RETRY_ON_TIMEOUTS = True
ASYNC_LOG_MESSAGES_ON_ERROR = True
ASYNC_STOP_TIMEOUT_SECS = 30

_CODECS = {
    CODEC_NONE: None,
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}


class Producer:
    """Base class of :class:`SimpleProducer` and :class:`KeyedProducer` (see the seed).

    Args:
        client: a :class:`~kafkastate.legacy.client.KafkaClient`.
        req_acks: 0, 1 (default) or -1 (all in-sync replicas).
        ack_timeout: ms the broker may wait for ``req_acks`` (accepted; the producer's
            request timeout bounds the wait).
        codec: a ``kafkastate.legacy.protocol.CODEC_*`` (gzip, snappy, lz4, zstd) or None.
        codec_compresslevel: accepted; batches use the codec's default level (the producer
            underneath has no level option yet).
        sync_fail_on_error: sync mode raises errors (True) or returns them in responses.
        async_send: send in the background (also ``async``, ``async_``; ``batch_send``).
        batch_send_every_n: async: send a batch once this many messages wait.
        batch_send_every_t: async: send waiting messages after this many seconds.
        async_retry_limit: async retries per batch (None: until the delivery timeout).
        async_retry_backoff_ms: backoff between retries.
        async_retry_on_timeouts: accepted (timeouts are retried).
        async_queue_maxsize: async: at most this many unacknowledged messages (0: no limit).
        async_queue_put_timeout: async: seconds to wait for room before
            AsyncProducerQueueFull (0: fail at once).
        async_log_messages_on_error: log failed messages (True) or only their hash.
        async_stop_timeout: seconds :meth:`stop` waits for pending messages.

    Raises:
        UnsupportedCodecError: ``codec`` is not one of ``ALL_CODECS``.
        KafkaConfigurationError: a bad value (req_acks...).
    """

    ACK_NOT_REQUIRED = 0
    ACK_AFTER_LOCAL_WRITE = 1
    ACK_AFTER_CLUSTER_COMMIT = -1
    DEFAULT_ACK_TIMEOUT = 1000

    def __init__(  # noqa: PLR0917 -- 0.9.5's positional signature
        self,
        client: Any,
        req_acks: int = ACK_AFTER_LOCAL_WRITE,
        ack_timeout: int = DEFAULT_ACK_TIMEOUT,
        codec: int | None = None,
        codec_compresslevel: int | None = None,
        sync_fail_on_error: bool = True,
        async_send: bool = False,
        batch_send: bool = False,
        batch_send_every_n: int = BATCH_SEND_MSG_COUNT,
        batch_send_every_t: float = BATCH_SEND_DEFAULT_INTERVAL,
        async_retry_limit: int | None = ASYNC_RETRY_LIMIT,
        async_retry_backoff_ms: int = ASYNC_RETRY_BACKOFF_MS,
        async_retry_on_timeouts: bool = ASYNC_RETRY_ON_TIMEOUTS,
        async_queue_maxsize: int = ASYNC_QUEUE_MAXSIZE,
        async_queue_put_timeout: float = ASYNC_QUEUE_PUT_TIMEOUT,
        async_log_messages_on_error: bool = ASYNC_LOG_MESSAGES_ON_ERROR,
        async_stop_timeout: float = ASYNC_STOP_TIMEOUT_SECS,
        **kwargs: Any,
    ) -> None:
        async_send = bool(kwargs.pop("async", async_send) or kwargs.pop("async_", False))
        if kwargs:
            raise TypeError(f"unexpected keyword arguments: {sorted(kwargs)}")
        if codec is None:
            codec = CODEC_NONE
        if codec not in ALL_CODECS:
            raise UnsupportedCodecError(f"Codec 0x{codec:02x} unsupported")
        self.client = client
        self.req_acks = req_acks
        self.ack_timeout = ack_timeout
        self.codec = codec
        self.codec_compresslevel = codec_compresslevel
        self.sync_fail_on_error = sync_fail_on_error
        self.async_send = async_send or batch_send
        self.batch_send_every_n = batch_send_every_n
        self.batch_send_every_t = batch_send_every_t
        self.async_retry = RetryOptions(
            async_retry_limit, async_retry_backoff_ms, async_retry_on_timeouts
        )
        self.async_queue_maxsize = async_queue_maxsize
        self.async_queue_put_timeout = async_queue_put_timeout
        self.async_log_messages_on_error = async_log_messages_on_error
        self.async_stop_timeout = async_stop_timeout
        self.stopped = False
        self._since_batch = 0
        self._queue = _Pending(async_log_messages_on_error)
        options: dict[str, Any] = {
            "bootstrap_servers": client.bootstrap_servers,
            "client_id": client.client_id,
            "acks": req_acks,
            "compression_type": _CODECS[codec],
            "retry_backoff_ms": async_retry_backoff_ms,
            "linger_ms": int(batch_send_every_t * 1000) if self.async_send else 0,
        }
        if self.async_send and async_retry_limit is not None:
            options["retries"] = async_retry_limit
        with seed_errors():
            self._producer = KafkaProducer(**options)

    # ------------------------------------------------------------ sending

    def send_messages(
        self, topic: Any, partition: int, *msg: bytes | None
    ) -> list[ProduceResponse]:
        """Send ``msg`` to ``topic``/``partition`` with a null key.

        Returns:
            Sync mode: ``[ProduceResponse(topic, partition, error, offset of the first
            message)]``; async mode: ``[]``.

        Raises:
            TypeError: a message is not bytes (or None).
            AsyncProducerQueueFull: async, ``async_queue_maxsize`` reached.
            BrokerResponseError: sync with ``sync_fail_on_error``: the send failed.
        """
        return self._send_messages(topic, partition, *msg)

    def _send_messages(
        self, topic: Any, partition: int, *msg: bytes | None, key: bytes | None = None
    ) -> list[ProduceResponse]:
        if self.stopped:
            raise KafkaError("producer.stop() was called: it sends nothing more")
        for m in msg:
            if m is not None and not isinstance(m, bytes):
                raise TypeError(
                    f"all produce message payloads must be None or bytes, got {type(m).__name__}"
                )
        if key is not None and not isinstance(key, bytes):
            raise TypeError(f"the key must be None or bytes, got {type(key).__name__}")
        name = topic_name(topic)
        if self.async_send:
            self._enqueue(name, partition, msg, key)
            return []
        try:
            with seed_errors():
                futures = [
                    self._producer.send(name, value=m, key=key, partition=partition) for m in msg
                ]
                self._producer.flush()
                first = futures[0].get() if futures else None
                for f in futures[1:]:
                    f.get()
        except KafkaError as exc:
            if self.sync_fail_on_error:
                raise
            return [ProduceResponse(topic, partition, getattr(exc, "errno", -1), -1)]
        offset = first.offset if first is not None else -1
        return [ProduceResponse(topic, partition, 0, offset)]

    def _enqueue(
        self, topic: str, partition: int, msg: Sequence[bytes | None], key: bytes | None
    ) -> None:
        self._queue.reserve(msg, self.async_queue_maxsize, self.async_queue_put_timeout)
        for m in msg:
            with seed_errors():
                future = self._producer.send(topic, value=m, key=key, partition=partition)
            future.add_both(self._queue.done, m, future)
        self._since_batch += len(msg)
        if self._since_batch >= self.batch_send_every_n:
            self._since_batch = 0
            # Asks the IO thread to send now, without waiting for the outcome.
            with contextlib.suppress(KafkaTimeoutError):
                self._producer.flush(timeout=0)

    def stop(self, timeout: float | None = None) -> None:
        """Deliver pending messages (up to ``timeout``, default ``async_stop_timeout``
        seconds), then close the connections."""
        if self.stopped:
            return
        self.stopped = True
        self._producer.close(timeout if timeout is not None else self.async_stop_timeout)

    def __del__(self) -> None:
        # As 0.9.5: a producer dropped without stop() still delivers what it holds.
        if getattr(self, "_producer", None) is not None and not self.stopped:
            with contextlib.suppress(Exception):
                self.stop()


class _Pending:
    """The async producer's count of unacknowledged messages (``async_queue_maxsize``).

    A separate object so that the futures' callbacks do not keep the producer alive: a
    producer dropped without :meth:`Producer.stop` is collected at once and stops.
    """

    def __init__(self, log_messages: bool) -> None:
        self.count = 0
        self.room = threading.Condition()
        self.log_messages = log_messages

    def reserve(self, msg: Sequence[bytes | None], maxsize: int, put_timeout: float) -> None:
        with self.room:
            if maxsize > 0 and not self.room.wait_for(
                lambda: self.count + len(msg) <= maxsize, timeout=put_timeout
            ):
                raise AsyncProducerQueueFull(list(msg), "async producer queue full")
            self.count += len(msg)

    def done(self, message: bytes | None, future: FutureRecordMetadata, result: Any) -> None:
        with self.room:
            self.count -= 1
            self.room.notify_all()
        if future.failed():
            shown = message if self.log_messages else hash(message)
            log.error("async produce failed for %r: %s", shown, result)
