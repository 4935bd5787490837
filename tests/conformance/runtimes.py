"""One small adapter per runtime with the same synchronous-looking script interface, so a
conformance scenario is written once and run on every runtime.

The async runtimes run their consumers and producers in an event loop of their own, in a
thread (``anyio.from_thread.start_blocking_portal``, i.e. ``anyio.run`` with that backend);
each script call is one ``portal.call``, so exceptions reach the script with the type the
runtime raised. The blocking runtime calls kafkastate.sync directly.

Runtimes:

* ``asyncio``: ``kafkastate.asyncio.AIOKafkaConsumer`` / ``AIOKafkaProducer`` (aiokafka's
  interface: ``start()``/``stop()``, ``getone``/``getmany``, send returns a future);
* ``trio``: ``kafkastate.trio.open_consumer`` / ``open_producer`` under trio;
* ``anyio-asyncio``: ``kafkastate.anyio.open_consumer`` / ``open_producer`` under
  ``anyio.run(backend="asyncio")``;
* ``blocking``: ``kafkastate.sync.KafkaConsumer`` / ``KafkaProducer`` (kafka-python's
  interface: iteration, ``poll``, send returns a future with ``get``).

Helpers shared by the scenarios: topics, an independent writer and reader (kafka-python, a
test-only dependency), the simulator's run of the listener scenario, and
:func:`assert_same_traces`, which compares every runtime's trace to the first and fails with
a readable diff.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import functools
import pprint
import re
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import anyio
import anyio.from_thread
import kafka
import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.structs import TopicPartition

RUNTIMES = ("asyncio", "trio", "anyio-asyncio", "blocking")
"""Every runtime a scenario runs on, in the order their traces are compared (to the first)."""

CALL_TIMEOUT = 20.0
"""Seconds any one script call may take on the async runtimes before it fails (TimeoutError)."""

Trace = list[tuple[Any, ...]]


# ------------------------------------------------------------------------------ helpers


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    """Create a topic with a fresh name."""
    name = f"conf-{uuid.uuid4().hex[:10]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def new_group() -> str:
    """A fresh consumer group id."""
    return f"conf-{uuid.uuid4().hex[:8]}"


def write(bootstrap: str, topic: str, values: Sequence[bytes], partition: int = 0) -> None:
    """Write ``values`` to one partition, in order, with an independent client."""
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
    for value in values:
        producer.send(topic, value=value, partition=partition)
    producer.flush(30)
    producer.close()


def read_back(
    bootstrap: str, topic: str, partitions: int, expected: int, timeout: float = 20
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` as ``(offset, value)`` per partition, read with an
    independent client until ``expected`` records came (or ``timeout`` passed)."""
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    consumer.assign([kafka.TopicPartition(topic, p) for p in range(partitions)])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout
    try:
        while sum(map(len, out.values())) < expected and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=300).items():
                out[tp.partition].extend((r.offset, r.value) for r in records)
    finally:
        consumer.close()
    return out


def committed_by_reader(bootstrap: str, group: str, tp: TopicPartition) -> tuple[int, str] | None:
    """``(offset, metadata)`` the group committed for ``tp``, read by an independent client
    that is not a member."""
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    try:
        found = consumer.committed(kafka.TopicPartition(tp.topic, tp.partition), metadata=True)
    finally:
        consumer.close(autocommit=False)
    return None if found is None else (found.offset, found.metadata)


def error(exc: BaseException, *names: str) -> tuple[Any, ...]:
    """``(type name, normalised message)``: ``names`` (topics, groups, ports) replaced by
    placeholders, the runtime's own class or function name by ``<owner>``."""
    message = str(exc)
    for i, name in enumerate(names):
        message = message.replace(name, f"<name{i}>")
    message = re.sub(r"\b(AIOKafkaConsumer|AIOKafkaProducer|KafkaConsumer|KafkaProducer)\b",
                     "<owner>", message)  # fmt: skip
    message = re.sub(r"\bopen_(consumer|producer)\b", "<owner>", message)
    return (type(exc).__name__, message)


def assert_same_traces(traces: Mapping[str, Trace], *, scenario: str) -> None:
    """Every runtime's trace must equal the first one's; else fail with a unified diff of
    each one that differs."""
    (first, expected), *rest = traces.items()
    for name, got in traces.items():  # shown with -s, and with a failure
        print(f"--- {scenario} on {name}")
        print(pprint.pformat(got, width=100))
    diffs = []
    for name, got in rest:
        if got != expected:
            diff = difflib.unified_diff(
                pprint.pformat(expected, width=100).splitlines(),
                pprint.pformat(got, width=100).splitlines(),
                fromfile=f"{scenario} on {first}",
                tofile=f"{scenario} on {name}",
                lineterm="",
            )
            diffs.append("\n".join(diff))
    if diffs:
        pytest.fail(
            f"{scenario}: the runtimes' traces differ\n\n" + "\n\n".join(diffs), pytrace=False
        )


def run_everywhere(
    scenario: Callable[[Runtime], Trace], *, name: str, runtimes: Sequence[str] = RUNTIMES
) -> dict[str, Trace]:
    """Run ``scenario`` on each runtime in turn; the traces by runtime. A scenario that
    raises fails the test with the runtime's name."""
    traces: dict[str, Trace] = {}
    for runtime in runtimes:
        with open_runtime(runtime) as rt:
            try:
                traces[runtime] = scenario(rt)
            except Exception as exc:
                raise AssertionError(f"{name} on {runtime}: {exc!r}") from exc
    return traces


def poll_until(
    ready: Callable[[], bool], consumers: Sequence[Consumer], timeout: float = 30, what: str = ""
) -> None:
    """Read (100 ms at a time, records dropped) from every consumer until ``ready()``."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        for consumer in consumers:
            consumer.many(timeout_ms=100)


# ----------------------------------------------------------------------------- runtime


class Runtime:
    """A runtime's factories: :meth:`consumer` and :meth:`producer` (closed at the end)."""

    def __init__(self, name: str, portal: anyio.from_thread.BlockingPortal | None) -> None:
        self.name = name
        self.portal = portal
        self._open: list[Consumer | Producer] = []

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` on the runtime's loop (at most :data:`CALL_TIMEOUT`), or here."""
        if self.portal is None:
            return fn(*args, **kwargs)
        return self.portal.call(_bounded, functools.partial(fn, *args, **kwargs))

    def consumer(self, **options: Any) -> Consumer:
        """An open consumer (kafka-python/aiokafka option names)."""
        made = Consumer(self, options)
        self._open.append(made)
        return made

    def producer(self, **options: Any) -> Producer:
        """An open producer."""
        made = Producer(self, options)
        self._open.append(made)
        return made

    def close_all(self) -> None:
        for thing in reversed(self._open):
            with contextlib.suppress(Exception):
                thing.close()


async def _bounded(fn: Callable[[], Any]) -> Any:
    with anyio.fail_after(CALL_TIMEOUT):
        result = fn()
        if asyncio.iscoroutine(result) or hasattr(result, "__await__"):
            result = await result
        return result


@contextlib.contextmanager
def open_runtime(name: str) -> Iterator[Runtime]:
    """The runtime ``name`` of :data:`RUNTIMES`, with its event loop running if it has one."""
    if name == "blocking":
        rt = Runtime(name, None)
        try:
            yield rt
        finally:
            rt.close_all()
        return
    backend = "trio" if name == "trio" else "asyncio"
    with anyio.from_thread.start_blocking_portal(backend) as portal:
        rt = Runtime(name, portal)
        try:
            yield rt
        finally:
            rt.close_all()


class Consumer:
    """One consumer on one runtime: ``assign``, ``subscribe``, ``one`` (getone /
    iteration), ``many`` (getmany / poll), ``commit``, ``committed``, ``position``,
    ``assignment``, ``close``."""

    def __init__(self, rt: Runtime, options: dict[str, Any]) -> None:
        self.rt = rt
        self._closed = False
        self._cm: Any = None
        if rt.name == "blocking":
            from kafkastate.sync import KafkaConsumer  # noqa: PLC0415

            options.setdefault("consumer_timeout_ms", CALL_TIMEOUT * 1000)
            self.obj = KafkaConsumer(**options)
        elif rt.name == "asyncio":
            from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

            def make() -> AIOKafkaConsumer:
                return AIOKafkaConsumer(**options)

            self.obj = rt.call(make)
            try:
                rt.call(self.obj.start)
            except BaseException:
                rt.call(self.obj.stop)
                raise
        else:
            from kafkastate.anyio import open_consumer  # noqa: PLC0415

            assert rt.portal is not None
            self._cm = rt.portal.wrap_async_context_manager(open_consumer(**options))
            self.obj = self._cm.__enter__()

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        self.rt.call(self.obj.assign, list(partitions))

    def subscribe(self, topics: Sequence[str], listener: Any = None) -> None:
        self.rt.call(self.obj.subscribe, list(topics), listener=listener)

    def topics(self) -> set[str]:
        """Every topic: asks the cluster (metadata then includes them)."""
        return set(self.rt.call(self.obj.topics))

    def assignment(self) -> set[TopicPartition]:
        return set(self.rt.call(self.obj.assignment))

    def one(self) -> Any:
        """The next record: ``getone()`` / ``next(iter(consumer))``."""
        if self.rt.name == "blocking":
            try:
                return next(self.obj)
            except StopIteration:
                raise TimeoutError("no record within consumer_timeout_ms") from None
        return self.rt.call(self.obj.getone)

    def many(
        self, timeout_ms: float = 1000, max_records: int | None = None
    ) -> dict[Any, list[Any]]:
        """``getmany()`` / ``poll()``."""
        if self.rt.name == "blocking":
            return dict(self.obj.poll(timeout_ms=timeout_ms, max_records=max_records))
        return dict(self.rt.call(self.obj.getmany, timeout_ms=timeout_ms, max_records=max_records))

    def commit(self, offsets: Any = None) -> None:
        if offsets is None:
            self.rt.call(self.obj.commit)
        else:
            self.rt.call(self.obj.commit, offsets)

    def committed(self, tp: TopicPartition) -> int | None:
        return self.rt.call(self.obj.committed, tp)  # type: ignore[no-any-return]

    def position(self, tp: TopicPartition) -> int:
        return self.rt.call(self.obj.position, tp)  # type: ignore[no-any-return]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.rt.call(self.obj.seek, tp, offset)

    def close(self) -> None:
        """Close gracefully (auto-commit, revoke, leave)."""
        if self._closed:
            return
        self._closed = True
        if self.rt.name == "blocking":
            self.obj.close()
        elif self.rt.name == "asyncio":
            self.rt.call(self.obj.stop)
        else:
            self._cm.__exit__(None, None, None)


class Producer:
    """One producer on one runtime: ``send`` (returns once the record is appended; a
    handle), ``outcome`` (of a handle), ``flush``, ``close``, ``abort``."""

    def __init__(self, rt: Runtime, options: dict[str, Any]) -> None:
        self.rt = rt
        self._closed = False
        self._cm: Any = None
        if rt.name == "blocking":
            from kafkastate.sync import KafkaProducer  # noqa: PLC0415

            self.obj = KafkaProducer(**options)
        elif rt.name == "asyncio":
            from kafkastate.asyncio import AIOKafkaProducer  # noqa: PLC0415

            def make() -> AIOKafkaProducer:
                return AIOKafkaProducer(**options)

            self.obj = rt.call(make)
            try:
                rt.call(self.obj.start)
            except BaseException:
                rt.call(self.obj.stop)
                raise
        else:
            from kafkastate.anyio import open_producer  # noqa: PLC0415

            assert rt.portal is not None
            self._cm = rt.portal.wrap_async_context_manager(open_producer(**options))
            self.obj = self._cm.__enter__()

    def send(self, topic: str, value: bytes, *, partition: int | None = None) -> Any:
        """Append a record (waiting for metadata or buffer room as the runtime does); the
        handle for :meth:`outcome`."""
        if self.rt.name == "blocking":
            return self.obj.send(topic, value=value, partition=partition)
        if self.rt.name == "asyncio":
            return self.rt.call(self.obj.send, topic, value, partition=partition)
        return self.rt.call(self.obj.enqueue, topic, value, partition=partition)

    def outcome(self, handle: Any) -> tuple[Any, ...]:
        """``("ok", partition, offset)`` or ``("error", type name)``."""
        try:
            if self.rt.name == "blocking":
                meta = handle.get(CALL_TIMEOUT)
            elif self.rt.name == "asyncio":

                async def wait() -> Any:
                    return await handle

                meta = self.rt.call(wait)
            else:
                meta = self.rt.call(handle.wait)
        except Exception as exc:
            return ("error", type(exc).__name__)
        return ("ok", meta.partition, meta.offset)

    def flush(self) -> None:
        self.rt.call(self.obj.flush)

    def close(self) -> None:
        """Close gracefully: pending records are delivered first."""
        if self._closed:
            return
        self._closed = True
        if self.rt.name == "blocking":
            self.obj.close()
        elif self.rt.name == "asyncio":
            self.rt.call(self.obj.stop)
        else:
            self._cm.__exit__(None, None, None)

    def abort(self) -> None:
        """Close at once: pending records fail (``close(0)``; cancelling ``stop()``;
        ``Producer.abort()`` then leaving the block)."""
        if self._closed:
            return
        self._closed = True
        if self.rt.name == "blocking":
            self.obj.close(0)
        elif self.rt.name == "asyncio":

            async def cancel_stop() -> None:
                task = asyncio.ensure_future(self.obj.stop())
                await asyncio.sleep(0)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

            self.rt.call(cancel_stop)
        else:
            self.rt.call(self.obj.abort)
            self._cm.__exit__(None, None, None)
