"""kafka-python 0.9.5's ``SimpleConsumer`` on kafkastate's blocking consumer.

Fetching is :class:`kafkastate.sync.KafkaConsumer` (core ``ConsumerMachine`` and fetcher)
with a manual assignment and no group; :class:`~kafkastate.legacy.consumer.base.Consumer`
keeps 0.9.5's offsets and commits them for the group. Fetch sizes only size requests:
today's brokers return a record batch larger than the limit whole (KIP-74), so
``ConsumerFetchSizeTooSmall`` does not happen and ``max_buffer_size`` never needs to grow.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from kafkastate.adapters.blocking.consumer import KafkaConsumer as _BlockingConsumer
from kafkastate.errors import NoOffsetForPartitionError
from kafkastate.legacy.common import (
    KafkaConfigurationError,
    Message,
    OffsetAndMessage,
    OffsetOutOfRangeError,
    OffsetRequest,
    seed_errors,
)
from kafkastate.legacy.consumer.base import (
    AUTO_COMMIT_INTERVAL,
    AUTO_COMMIT_MSG_COUNT,
    FETCH_BUFFER_SIZE_BYTES,
    FETCH_MAX_WAIT_TIME,
    ITER_TIMEOUT_SECONDS,
    MAX_FETCH_BUFFER_SIZE_BYTES,
    Consumer,
)
from kafkastate.legacy.util import topic_name

__all__ = ["FetchContext", "SimpleConsumer"]

_RESET = {"largest": "latest", "smallest": "earliest"}


class FetchContext:
    """0.9.5's helper holding a fetch's ``block`` and ``timeout`` (a context manager)."""

    def __init__(self, consumer: SimpleConsumer, block: bool, timeout: float | None) -> None:
        self.consumer = consumer
        self.block = block
        self.timeout = timeout

    def __enter__(self) -> FetchContext:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class SimpleConsumer(Consumer):
    """Reads all (or the given) partitions of a topic; see the seed for every argument.

    Args:
        client: a :class:`~kafkastate.legacy.client.KafkaClient`.
        group: group for offsets (None: none).
        topic: the topic.
        auto_commit: see :class:`~kafkastate.legacy.consumer.base.Consumer`.
        partitions: the partitions (default all).
        auto_commit_every_n: see Consumer.
        auto_commit_every_t: see Consumer.
        fetch_size_bytes: bytes asked per partition.
        buffer_size: accepted (see the module: requests are sized by ``fetch_size_bytes``).
        max_buffer_size: accepted (see the module).
        iter_timeout: seconds iteration waits for a message before it ends (None: forever).
        auto_offset_reset: ``'largest'`` or ``'smallest'``: where to go when an offset is
            out of range; anything else raises OffsetOutOfRangeError instead.
    """

    def __init__(  # noqa: PLR0917 -- 0.9.5's positional signature
        self,
        client: Any,
        group: Any,
        topic: Any,
        auto_commit: bool = True,
        partitions: Iterable[int] | None = None,
        auto_commit_every_n: int | None = AUTO_COMMIT_MSG_COUNT,
        auto_commit_every_t: int | None = AUTO_COMMIT_INTERVAL,
        fetch_size_bytes: int = FETCH_BUFFER_SIZE_BYTES,
        buffer_size: int = FETCH_BUFFER_SIZE_BYTES,
        max_buffer_size: int | None = MAX_FETCH_BUFFER_SIZE_BYTES,
        iter_timeout: float | None = None,
        auto_offset_reset: str = "largest",
    ) -> None:
        super().__init__(
            client, group, topic, partitions, auto_commit, auto_commit_every_n, auto_commit_every_t
        )
        if max_buffer_size is not None and buffer_size > max_buffer_size:
            raise KafkaConfigurationError(
                f"buffer_size ({buffer_size}) is greater than max_buffer_size ({max_buffer_size})"
            )
        self.buffer_size = buffer_size
        self.max_buffer_size = max_buffer_size
        self.fetch_max_bytes = fetch_size_bytes
        self.iter_timeout = iter_timeout
        self.auto_offset_reset = auto_offset_reset
        self.queue: deque[tuple[int, OffsetAndMessage]] = deque()
        self._name = topic_name(topic)
        with seed_errors():
            self._consumer = _BlockingConsumer(
                bootstrap_servers=client.bootstrap_servers,
                client_id=client.client_id,
                enable_auto_commit=False,
                auto_offset_reset=_RESET.get(auto_offset_reset, "none"),
                max_partition_fetch_bytes=fetch_size_bytes,
            )
            self._consumer.assign([(self._name, p) for p in self.offsets])
        self._reposition()

    def __repr__(self) -> str:
        return (
            f"<SimpleConsumer group={self.group!r}, topic={self.topic!r}, "
            f"partitions={list(self.offsets)}>"
        )

    def _reposition(self) -> None:
        self.queue.clear()
        self.fetch_offsets = self.offsets.copy()
        with seed_errors():
            for p, offset in self.offsets.items():
                self._consumer.seek((self._name, p), offset)

    def reset_partition_offset(self, partition: int) -> int:
        """Move ``partition`` to its earliest (``'smallest'``) or latest (``'largest'``)
        offset.

        Returns:
            The new offset.

        Raises:
            OffsetOutOfRangeError: ``auto_offset_reset`` is neither.
        """
        if self.auto_offset_reset not in _RESET:
            raise OffsetOutOfRangeError(
                f"partition {partition}: auto_offset_reset is {self.auto_offset_reset!r}"
            )
        when = -2 if self.auto_offset_reset == "smallest" else -1
        (resp,) = self.client.send_offset_request([OffsetRequest(self.topic, partition, when, 1)])
        self.offsets[partition] = resp.offsets[0]
        self._reposition()
        return int(resp.offsets[0])

    def seek(self, offset: int, whence: int | None = None, partition: int | None = None) -> None:
        """Move the offsets, like ``fseek``.

        Args:
            offset: the offset, or how far to move.
            whence: None: ``offset`` is absolute; 0: from the earliest offset; 1: from the
                current one; 2: from the latest. Across all partitions (``partition``
                None) a relative 0/2 move is divided between them, the remainder to the
                first ones, as 0.9.5.
            partition: one partition, or None for all.

        Raises:
            KafkaConfigurationError: ``whence`` is not None, 0, 1 or 2 (a ValueError).
        """
        chosen = list(self.offsets) if partition is None else [partition]
        if whence is None:
            for p in chosen:
                self.offsets[p] = offset
        elif whence == 1:
            for p in chosen:
                self.offsets[p] += offset
        elif whence in (0, 2):
            delta, rem = divmod(offset, len(chosen))
            deltas = {p: delta + (1 if i < rem else 0) for i, p in enumerate(chosen)}
            when = -2 if whence == 0 else -1
            resps = self.client.send_offset_request(
                [OffsetRequest(self.topic, p, when, 1) for p in chosen]
            )
            for resp in resps:
                self.offsets[resp.partition] = resp.offsets[0] + deltas[resp.partition]
        else:
            raise KafkaConfigurationError(f"Unexpected value for `whence`, {whence!r}")
        self._reposition()
        self.count_since_commit += 1
        if self.auto_commit:
            self.commit()

    def get_messages(
        self, count: int = 1, block: bool | int = True, timeout: float | None = 0.1
    ) -> list[Any]:
        """Up to ``count`` messages.

        Args:
            count: the most to return.
            block: True: wait for ``count`` messages; a positive int: wait for that many;
                False: take what is there.
            timeout: seconds to wait at most (None: forever).

        Returns:
            OffsetAndMessage (or ``(partition, OffsetAndMessage)`` after
            :meth:`provide_partition_info`) in fetch order.
        """
        messages: list[Any] = []
        deadline = None if timeout is None else time.monotonic() + timeout
        new_offsets: dict[int, int] = {}
        while len(messages) < count:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            block_next = block is True or (not isinstance(block, bool) and block > len(messages))
            result = self._get_message(
                block_next, wait, get_partition_info=True, update_offset=False
            )
            if result is None:
                if block_next and (deadline is None or time.monotonic() < deadline):
                    continue
                break
            partition, message = result
            messages.append((partition, message) if self.partition_info else message)
            new_offsets[partition] = message.offset + 1
        self.offsets.update(new_offsets)
        self.count_since_commit += len(messages)
        self._auto_commit()
        return messages

    def get_message(
        self,
        block: bool = True,
        timeout: float | None = 0.1,
        get_partition_info: bool | None = None,
    ) -> Any:
        """One message (or ``(partition, message)``), or None if none came in time."""
        return self._get_message(block, timeout, get_partition_info)

    def _get_message(
        self,
        block: bool = True,
        timeout: float | None = 0.1,
        get_partition_info: bool | None = None,
        update_offset: bool = True,
    ) -> Any:
        if not self.queue:
            self._fetch(block, timeout)
        if not self.queue:
            return None
        partition, message = self.queue.popleft()
        if update_offset:
            self.offsets[partition] = message.offset + 1
            self.count_since_commit += 1
            self._auto_commit()
        if get_partition_info is None:
            get_partition_info = self.partition_info
        return (partition, message) if get_partition_info else message

    def _fetch(self, block: bool, timeout: float | None) -> None:
        # Without block, one fetch's worth of waiting (0.9.5 sent one FetchRequest with
        # max_wait_time 100 ms), bounded by the timeout.
        if block:
            wait = 3600.0 if timeout is None else timeout
        else:
            wait = FETCH_MAX_WAIT_TIME / 1000 if timeout is None else min(timeout, 0.1)
        try:
            with seed_errors():
                batches = self._consumer.poll(timeout_ms=wait * 1000)
        except NoOffsetForPartitionError as exc:
            raise OffsetOutOfRangeError(str(exc)) from exc
        for tp, records in batches.items():
            for r in records:
                self.queue.append(
                    (tp.partition, OffsetAndMessage(r.offset, Message(0, 0, r.key, r.value)))
                )
                self.fetch_offsets[tp.partition] = r.offset + 1

    def __iter__(self) -> Iterator[Any]:
        timeout = ITER_TIMEOUT_SECONDS if self.iter_timeout is None else self.iter_timeout
        while True:
            message = self.get_message(True, timeout)
            if message:
                yield message
            elif self.iter_timeout is None:
                continue
            else:
                break

    def stop(self) -> None:
        """Commit (see Consumer.stop) and close the connections."""
        super().stop()
        self._consumer.close(autocommit=False)
