"""The background task of the asyncio faces: ``start()`` runs an adapter's context manager
in a task, ``stop()`` tells it to leave the block and waits for it (aiokafka's lifecycle
around the async adapter, :mod:`kafkastate.adapters.anyio`)."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

from kafkastate.adapters.anyio.observe import Observed
from kafkastate.core.report import Report

__all__ = ["Background", "Lifecycle", "deprecated_arguments"]


def deprecated_arguments(owner: str, loop: Any, options: dict[str, Any]) -> None:
    """aiokafka's deprecated constructor arguments: ``loop`` (ignored: the running loop is
    used) and an explicit ``api_version`` (versions are negotiated with each broker);
    each gives a DeprecationWarning, as aiokafka 0.14 does."""
    if loop is not None:
        warnings.warn(
            f"{owner}(loop=...) is deprecated and ignored: the running loop is used",
            DeprecationWarning,
            stacklevel=3,
        )
    if options.get("api_version", "auto") != "auto":
        warnings.warn(
            f"{owner}(api_version=...) is deprecated and has no effect: versions are "
            "negotiated with each broker",
            DeprecationWarning,
            stacklevel=3,
        )


_T = TypeVar("_T")


class Background(Generic[_T]):
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


class Lifecycle:
    """``async with`` for the asyncio faces: :meth:`start` on entry, :meth:`stop` on exit
    (aiokafka's ``AIOKafkaProducer``, ``AIOKafkaConsumer``, ``AIOKafkaAdminClient``);
    ``metrics()`` and ``health()`` of what :meth:`start` made (kept after :meth:`stop`)."""

    _observed: Observed | None = None

    def metrics(self, raw: bool = False) -> Report:
        """Counters, rates and latencies, grouped as kafka-python's ``metrics()``
        (``{group: {name: value}}``, Java's names; docs/observability.md); ``{}`` before
        :meth:`start`. After :meth:`stop`, the final values.

        Args:
            raw: accepted for kafka-python compatibility; ignored.
        """
        observed = self._observed
        return {} if observed is None else observed.metrics()

    def health(self) -> dict[str, Any]:
        """A JSON-able snapshot for liveness probes (connected brokers, coordinator,
        assignment, last successful produce/fetch, error state); before :meth:`start`,
        ``{"state": "NOT_STARTED", "healthy": False}``."""
        observed = self._observed
        if observed is None:
            return {"state": "NOT_STARTED", "healthy": False}
        return observed.health()

    async def start(self) -> None:
        """Start the background task (the face says what else)."""
        raise NotImplementedError

    async def stop(self) -> None:
        """End the background task (the face says what else)."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
