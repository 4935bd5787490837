"""A blocking driver for :class:`~kafkastate.core.producer.producer.ProducerMachine`.

The loop is :class:`~kafkastate.adapters.blocking.BlockingClient`'s: open or close the
sockets the machine asks for, write its bytes, wait for readable sockets or its deadline,
feed everything back. No decision lives here (STYLE.md §12), not even how long to wait:
a record whose topic metadata has not arrived, or that does not fit ``buffer_memory``,
waits in the machine (its ``accumulator.max_block``), and ``send`` runs the loop until the
machine admits it or fails it.
"""

from __future__ import annotations

import random
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from kafkastate.adapters.blocking import SocketLoop
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
        token_provider: the ``sasl_oauth_token_provider``, asked for OAUTHBEARER tokens.
        max_block: how long :meth:`send` may wait for metadata or buffer memory
            (``max.block.ms``); it becomes the machine's ``accumulator.max_block``.
    """

    def __init__(
        self,
        config: ProducerConfig,
        *,
        ssl_context: ssl.SSLContext | None = None,
        token_provider: Any = None,
        max_block: float = 60.0,
    ) -> None:
        config = attrs.evolve(
            config, accumulator=attrs.evolve(config.accumulator, max_block=max_block)
        )
        self.machine = ProducerMachine(config, rng=random.SystemRandom())
        self._io = SocketLoop(
            self.machine,
            ssl_context=ssl_context,
            token_provider=token_provider,
            connect_timeout=config.client.socket_connection_setup_timeout,
        )
        self.outcomes: dict[RecordId, RecordOutcome] = {}
        """Every record's outcome so far."""
        self._flushed: set[FlushId] = set()
        self._closed = False
        self._fatal: KafkaError | None = None
        self._waiting: RecordId | None = None  # the send waiting for metadata or memory
        self._wait_error: KafkaError | None = None  # how its wait ended, if it failed

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
            KafkaTimeoutError: ``max_block`` passed while the record waited.
            KafkaError: the machine refused the record (too large, closed, fatal...).
        """
        ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        rid = self.machine.send(
            topic,
            value=value,
            key=key,
            partition=partition,
            timestamp_ms=ts,
            headers=headers,
            now=time.monotonic(),
        )
        if self.machine.is_waiting(rid):
            self._waiting = rid
            try:  # the machine's max_block ends the wait
                self._run(lambda: not self.machine.is_waiting(rid))
            finally:
                self._waiting = None
            error, self._wait_error = self._wait_error, None
            if error is not None:
                raise error
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

    def _run(self, done: Callable[[], bool], deadline: float | None = None) -> None:
        while True:
            self._handle_events()
            self._io.flush()
            if done():
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise KafkaTimeoutError("the producer did not finish in time")
            self._io.poll(deadline)

    def _handle_events(self) -> None:
        m = self.machine
        while (event := m.next_event()) is not None:
            if self._io.serve(event):
                continue
            match event:
                case RecordsAcknowledged():
                    for rid, offset, _ts in event.results():
                        self.outcomes[rid] = (event.topic, event.partition, offset)
                case RecordsFailed(record_ids=rids, error=error) if rids[0] == self._waiting:
                    self._wait_error = error  # never in a batch: send raises it
                case RecordsFailed(record_ids=rids, error=error):
                    for rid in rids:
                        self.outcomes[rid] = error
                case RecordsAdmitted():
                    pass
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
