"""kafka-python 0.9.5's ``MultiProcessConsumer``: partitions split between child processes.

Each child (a ``spawn``-ed process) runs a :class:`SimpleConsumer` over its partitions
from the parent's offsets and puts ``(partition, message)`` on a shared queue; the parent
hands messages out, keeps the offsets and commits them. Children exit when the parent
calls :meth:`MultiProcessConsumer.stop`, and on their own when the parent process dies.
The constructor returns once every child is connected and ready to read; a
child that crashes makes the parent raise :class:`~kafkastate.errors.KafkaError` naming
it instead of waiting.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import queue as _queue
import time
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from kafkastate.errors import KafkaError, KafkaTimeoutError
from kafkastate.legacy.consumer.base import (
    AUTO_COMMIT_INTERVAL,
    AUTO_COMMIT_MSG_COUNT,
    FULL_QUEUE_WAIT_TIME_SECONDS,
    NO_MESSAGES_WAIT_TIME_SECONDS,
    Consumer,
)

__all__ = ["Events", "MultiProcessConsumer"]

log = logging.getLogger(__name__)

_STARTUP_TIMEOUT = 60.0
_POLL = 0.2  # how often a waiting parent checks its children, and children their parent


class Events(NamedTuple):
    """The events the parent drives its children with."""

    start: Any
    pause: Any
    exit: Any


class _Flag:
    """An event over one shared byte, waited for by polling.

    Not ``multiprocessing.Event``: setting one waits for every sleeper to wake, so a child
    killed while it waited would hang the parent's next ``set()``; and a lock a killed
    child held would never be released. A byte needs no lock.
    """

    def __init__(self, ctx: Any) -> None:
        self._value = ctx.RawValue("b", 0)

    def set(self) -> None:
        self._value.value = 1

    def clear(self) -> None:
        self._value.value = 0

    def is_set(self) -> bool:
        return bool(self._value.value)

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.01))
        return True


def _mp_consume(  # noqa: PLR0917 -- runs in the child process
    hosts: str,
    client_id: str,
    topic: Any,
    offsets: dict[int, int],
    out: Any,
    size: Any,
    events: Events,
    parent: int,
    ready: Any,
    options: dict[str, Any],
) -> None:
    from kafkastate.legacy.client import KafkaClient  # noqa: PLC0415 -- in the child
    from kafkastate.legacy.consumer.simple import SimpleConsumer  # noqa: PLC0415

    client = KafkaClient(hosts, client_id=client_id)
    consumer = SimpleConsumer(
        client, None, topic, auto_commit=False, partitions=list(offsets), **options
    )
    for p, offset in offsets.items():
        consumer.seek(offset, None, p)
    consumer.provide_partition_info()
    ready.release()
    try:
        while not events.exit.is_set() and os.getppid() == parent:
            if not events.start.wait(_POLL):
                continue
            count = 0
            message = consumer.get_message()
            if not message:
                time.sleep(NO_MESSAGES_WAIT_TIME_SECONDS)
                continue
            while not events.exit.is_set():
                try:
                    out.put(message, timeout=FULL_QUEUE_WAIT_TIME_SECONDS)
                    break
                except _queue.Full:
                    continue
            count += 1
            if count == size.value:
                events.pause.wait(_POLL)
    finally:
        consumer.stop()
        client.close()


class MultiProcessConsumer(Consumer):
    """Reads a topic's partitions in parallel child processes; see the seed.

    Args:
        client: a :class:`~kafkastate.legacy.client.KafkaClient`.
        group: group for offsets (None: none).
        topic: the topic.
        partitions: the partitions (default all).
        auto_commit: see :class:`~kafkastate.legacy.consumer.base.Consumer`.
        auto_commit_every_n: see Consumer.
        auto_commit_every_t: see Consumer.
        num_procs: how many processes share the partitions.
        partitions_per_proc: at most this many partitions per process (overrides
            ``num_procs``).
        simple_consumer_options: passed to each child's SimpleConsumer (fetch sizes...).
    """

    def __init__(  # noqa: PLR0917 -- 0.9.5's positional signature
        self,
        client: Any,
        group: Any,
        topic: Any,
        partitions: Iterable[int] | None = None,
        auto_commit: bool = True,
        auto_commit_every_n: int | None = AUTO_COMMIT_MSG_COUNT,
        auto_commit_every_t: int | None = AUTO_COMMIT_INTERVAL,
        num_procs: int = 1,
        partitions_per_proc: int = 0,
        **simple_consumer_options: Any,
    ) -> None:
        super().__init__(
            client, group, topic, partitions, auto_commit, auto_commit_every_n, auto_commit_every_t
        )
        ctx = multiprocessing.get_context("spawn")
        self.queue: Any = ctx.Queue(1024)
        self.events = Events(start=_Flag(ctx), pause=_Flag(ctx), exit=_Flag(ctx))
        self.size: Any = ctx.RawValue("i", 0)
        ready = ctx.Semaphore(0)
        ids = list(self.offsets)
        if partitions_per_proc:
            num_procs = math.ceil(len(ids) / partitions_per_proc)
        num_procs = max(1, min(num_procs, len(ids)))
        self.procs: list[Any] = []
        for chunk in (ids[i::num_procs] for i in range(num_procs)):
            proc = ctx.Process(
                target=_mp_consume,
                args=(
                    client.bootstrap_servers,
                    client.client_id,
                    topic,
                    {p: self.offsets[p] for p in chunk},
                    self.queue,
                    self.size,
                    self.events,
                    os.getpid(),
                    ready,
                    simple_consumer_options,
                ),
                daemon=True,
            )
            proc.start()
            self.procs.append(proc)
        try:
            self._wait_ready(ready)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, ready: Any) -> None:
        # The children import kafkastate and connect before they can read: wait for that,
        # so that iteration (which ends after 1 s without a message) sees their messages.
        deadline = time.monotonic() + _STARTUP_TIMEOUT
        started = 0
        while started < len(self.procs):
            if ready.acquire(timeout=_POLL):
                started += 1
                continue
            for proc in self.procs:
                if proc.exitcode is not None:
                    raise KafkaError(
                        f"consumer process {proc.pid} exited with code {proc.exitcode} "
                        "while starting"
                    )
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(
                    f"consumer processes not ready within {_STARTUP_TIMEOUT:g} s"
                )

    def __repr__(self) -> str:
        return (
            f"<MultiProcessConsumer group={self.group!r}, topic={self.topic!r}, "
            f"consumers={len(self.procs)}>"
        )

    def _check_children(self) -> None:
        for proc in self.procs:
            if proc.exitcode not in (None, 0) and not self.events.exit.is_set():
                raise KafkaError(f"consumer process {proc.pid} exited with code {proc.exitcode}")

    def _take(self, block: bool, timeout: float | None) -> tuple[int, Any] | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._check_children()
            wait = _POLL if deadline is None else min(_POLL, max(deadline - time.monotonic(), 0.0))
            try:
                item: tuple[int, Any] = (
                    self.queue.get(block, wait) if block else self.queue.get_nowait()
                )
                return item
            except _queue.Empty:
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    self._check_children()
                    return None

    def __iter__(self) -> Iterator[Any]:
        self.size.value = 0
        self.events.pause.set()
        while True:
            self.events.start.set()
            item = self._take(True, 1.0)
            if item is None:
                break
            partition, message = item
            self.offsets[partition] = message.offset + 1
            self.events.start.clear()
            self.count_since_commit += 1
            self._auto_commit()
            yield message
        self.events.start.clear()

    def get_messages(
        self, count: int = 1, block: bool | int = True, timeout: float | None = 10
    ) -> list[Any]:
        """Up to ``count`` messages from the children (see SimpleConsumer.get_messages).

        Raises:
            KafkaError: a child process died.
        """
        messages: list[Any] = []
        self.size.value = count
        self.events.pause.clear()
        deadline = None if timeout is None else time.monotonic() + timeout
        new_offsets: dict[int, int] = {}
        while count > 0:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                break
            self.events.start.set()
            block_next = block is True or (not isinstance(block, bool) and block > len(messages))
            item = self._take(block_next, remaining)
            if item is None:
                break
            partition, message = item
            messages.append((partition, message) if self.partition_info else message)
            new_offsets[partition] = message.offset + 1
            count -= 1
        self.size.value = 0
        self.events.start.clear()
        self.events.pause.set()
        self.offsets.update(new_offsets)
        self.count_since_commit += len(messages)
        self._auto_commit()
        return messages

    def stop(self) -> None:
        """Stop the children (waiting for them), then commit (see Consumer.stop)."""
        self.events.exit.set()
        self.events.pause.set()
        self.events.start.set()
        for proc in self.procs:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
                proc.join()
        super().stop()
