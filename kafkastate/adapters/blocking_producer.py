"""A blocking driver for :class:`~kafkastate.core.producer.producer.ProducerMachine`.

The loop is :class:`~kafkastate.adapters.blocking.BlockingClient`'s: open or close the
sockets the machine asks for, write its bytes, wait for readable sockets or its deadline,
feed everything back. No protocol decision lives here (STYLE.md §12): the only error
handling is *waiting* -- ``send`` retries a record refused with a retriable error
(metadata pending, unknown topic, buffer full) until ``max_block`` passes.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Callable, Sequence

from kafkastate.adapters.blocking import SocketLoop
from kafkastate.core.client import CloseRequested, ConnectRequested
from kafkastate.core.producer.accumulator import (
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
    ProducerIdAssigned,
    ProducerMachine,
)
from kafkastate.errors import KafkaError, KafkaTimeoutError

__all__ = ["BlockingProducer", "RecordOutcome"]

RecordOutcome = tuple[str, int, int] | KafkaError
"""``(topic, partition, offset)`` for an acknowledged record, else the error."""


class BlockingProducer:
    """Produce records over blocking sockets.

    Args:
        config: producer settings.
        ssl_context: TLS for every connection, or None for plaintext.
        max_block: how long :meth:`send` may wait for metadata or buffer memory
            (``max.block.ms``).
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_block: float = 60.0,
    ) -> None:
        self.machine = ProducerMachine(config, rng=random.SystemRandom())
        self._max_block = max_block
        self._io = SocketLoop(
            self.machine,
            ssl_context=ssl_context,
            connect_timeout=config.client.socket_connection_setup_timeout,
        )
        self.outcomes: dict[RecordId, RecordOutcome] = {}
        """Every record's outcome so far."""
        self._flushed: set[FlushId] = set()
        self._closed = False
        self._fatal: KafkaError | None = None
        self._wake = 0  # counts events that may unblock a refused send

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> RecordId:
        """Append a record, waiting up to ``max_block`` for metadata or buffer memory.

        Returns:
            The record's id; its outcome appears in :attr:`outcomes`.

        Raises:
            KafkaTimeoutError: ``max_block`` passed while the record was refused.
            KafkaError: a non-retriable refusal (too large, closed, fatal...).
        """
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        deadline = time.monotonic() + self._max_block
        while True:
            try:
                rid = self.machine.send(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    timestamp_ms=ts,
                    headers=headers,
                    now=time.monotonic(),
                )
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                if time.monotonic() >= deadline:
                    raise KafkaTimeoutError(
                        f"send waited {self._max_block:g} s (max_block): {exc}"
                    ) from exc
                self._wait_for_wake(deadline)
                continue
            self._run(lambda: True)
            return rid

    def flush(self, timeout: float | None = None) -> None:
        """Block until every record sent so far has its outcome.

        Raises:
            KafkaTimeoutError: ``timeout`` passed first.
        """
        fid = self.machine.flush(now=time.monotonic())
        deadline = None if timeout is None else time.monotonic() + timeout
        self._run(lambda: fid in self._flushed, deadline=deadline)

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is pending, then close; abort what is left after ``timeout``."""
        if self._closed:
            return
        self.machine.close(now=time.monotonic())
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._run(lambda: self._closed, deadline=deadline)
        except KafkaTimeoutError:
            self.machine.abort(now=time.monotonic())
            self._handle_events()
        self._io.close()
        self._closed = True

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------- the loop

    def _wait_for_wake(self, deadline: float) -> None:
        seen = self._wake
        self._run(lambda: self._wake > seen, deadline=deadline, quiet=True)

    def _run(
        self, done: Callable[[], bool], deadline: float | None = None, *, quiet: bool = False
    ) -> None:
        while True:
            self._handle_events()
            self._io.flush()
            if done():
                return
            if deadline is not None and time.monotonic() >= deadline:
                if quiet:
                    return
                raise KafkaTimeoutError("the producer did not finish in time")
            self._io.poll(deadline)

    def _handle_events(self) -> None:
        m = self.machine
        while (event := m.next_event()) is not None:
            match event:
                case ConnectRequested(node_id=node, host=host, port=port):
                    self._io.open(node, host, port)
                case CloseRequested(node_id=node):
                    self._io.forget(node)
                case RecordsAcknowledged():
                    for rid, offset, _ts in event.results():
                        self.outcomes[rid] = (event.topic, event.partition, offset)
                case RecordsFailed(record_ids=rids, error=error):
                    for rid in rids:
                        self.outcomes[rid] = error
                case FlushCompleted(flush_id=fid):
                    self._flushed.add(fid)
                case ProducerFailed(error=error):
                    self._fatal = error
                case ProducerClosed():
                    self._closed = True
                case ProducerIdAssigned():
                    pass
                case _:
                    pass
            self._wake += 1
