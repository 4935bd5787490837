"""The chaos workloads, one process each, on one kafkastate runtime (asyncio, trio, blocking).

``produce``: an idempotent producer (acks=all) sends ``--records`` records over ``--keys``
keys, paced over ``--duration`` seconds; the value of the n-th record of key ``k`` is
``b"k:n"``. Every acknowledgement is appended to the ack log (JSON lines: topic, partition,
offset, key, seq) as it arrives; a record that fails is logged with its error. The checker
(``_checker.py``) judges the topic against this log with another client.

    python -m kafkastate.testing.chaos._workload produce --runtime trio \\
        --bootstrap 127.0.0.1:PORT --topic chaos-p --records 20000 --keys 500 \\
        --duration 60 --log acks.jsonl
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, ExitStack, asynccontextmanager
from typing import IO, Any, TypeVar

from kafkastate.errors import KafkaError

from ._group import (
    GroupArgs,
    GroupLog,
    GroupProgress,
    member_lifetime,
    member_program,
    prefill_ends,
)
from ._txn import Program, TxnArgs, run_async, run_blocking, txn_program

__all__ = ["PRODUCER_OPTIONS", "main", "record_value"]

PRODUCER_OPTIONS: dict[str, Any] = {
    "acks": "all",
    "enable_idempotence": True,
    "linger_ms": 5,
    "request_timeout_ms": 10_000,
    "delivery_timeout_ms": 180_000,
    "max_block_ms": 180_000,
    "retry_backoff_ms": 100,
    "reconnect_backoff_max_ms": 1_000,
}
"""Options every runtime's producer gets: durable, idempotent, patient through faults (a
record fails only after three minutes of retries)."""


def record_value(key: int, seq: int) -> bytes:
    """The value of key ``key``'s ``seq``-th record (``b"17:42"``)."""
    return f"{key}:{seq}".encode()


class AckLog:
    """Appends acknowledgements and failures to a JSON-lines file; thread-safe (the
    blocking producer calls back on its I/O thread)."""

    def __init__(self, handle: IO[str], topic: str) -> None:
        self._handle = handle
        self._topic = topic
        self._lock = threading.Lock()
        self.acked = 0
        self.failed = 0

    def ack(self, key: int, seq: int, partition: int, offset: int) -> None:
        """Log one acknowledged record."""
        line = json.dumps({"t": self._topic, "p": partition, "o": offset, "k": key, "s": seq})
        with self._lock:
            self._handle.write(line + "\n")
            self.acked += 1

    def fail(self, key: int, seq: int, error: BaseException) -> None:
        """Log one record whose send failed (its fate is unknown: maybe written)."""
        line = json.dumps({"t": self._topic, "k": key, "s": seq, "err": repr(error)})
        with self._lock:
            self._handle.write(line + "\n")
            self.failed += 1


def _plan(records: int, keys: int) -> Iterator[tuple[int, int, int]]:
    """(index, key, seq) of every record, keys round-robin."""
    for i in range(records):
        yield i, i % keys, i // keys


def _ahead(started: float, index: int, records: int, duration: float) -> float:
    """Seconds the sender is ahead of its pace at record ``index`` (0 if behind)."""
    due = started + duration * index / max(records, 1)
    return max(0.0, due - time.monotonic())


async def _produce_asyncio(args: argparse.Namespace, log: AckLog) -> None:
    import asyncio  # noqa: PLC0415 -- one runtime per process

    from kafkastate.asyncio import AIOKafkaProducer  # noqa: PLC0415

    producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap, **PRODUCER_OPTIONS)
    await producer.start()
    try:
        started = time.monotonic()
        for i, key, seq in _plan(args.records, args.keys):
            if i % 50 == 0:
                await asyncio.sleep(_ahead(started, i, args.records, args.duration))
            future = await producer.send(args.topic, record_value(key, seq), key=str(key).encode())
            future.add_done_callback(_asyncio_outcome(log, key, seq))
        await producer.flush()
    finally:
        await producer.stop()


def _asyncio_outcome(log: AckLog, key: int, seq: int) -> Callable[[Any], None]:
    def done(future: Any) -> None:
        error = future.exception()
        if error is not None:
            log.fail(key, seq, error)
        else:
            meta = future.result()
            log.ack(key, seq, meta.partition, meta.offset)

    return done


async def _produce_trio(args: argparse.Namespace, log: AckLog) -> None:
    import trio  # noqa: PLC0415

    from kafkastate.trio import Delivery, open_producer  # noqa: PLC0415

    def outcome(key: int, seq: int) -> Callable[[Delivery], None]:
        def done(delivery: Delivery) -> None:
            try:
                meta = delivery.result()
            except Exception as exc:
                log.fail(key, seq, exc)
            else:
                log.ack(key, seq, meta.partition, meta.offset)

        return done

    async with open_producer(args.bootstrap, **PRODUCER_OPTIONS) as producer:
        started = time.monotonic()
        for i, key, seq in _plan(args.records, args.keys):
            if i % 50 == 0:
                await trio.sleep(_ahead(started, i, args.records, args.duration))
            delivery = await producer.enqueue(args.topic, record_value(key, seq), str(key).encode())
            delivery.add_done_callback(outcome(key, seq))
        await producer.flush()


def _produce_blocking(args: argparse.Namespace, log: AckLog) -> None:
    from kafkastate.sync import KafkaProducer  # noqa: PLC0415

    producer = KafkaProducer(bootstrap_servers=args.bootstrap, **PRODUCER_OPTIONS)
    try:
        started = time.monotonic()
        for i, key, seq in _plan(args.records, args.keys):
            if i % 50 == 0:
                time.sleep(_ahead(started, i, args.records, args.duration))
            future = producer.send(args.topic, value=record_value(key, seq), key=str(key).encode())
            future.add_callback(
                lambda meta, k=key, s=seq: log.ack(k, s, meta.partition, meta.offset)
            )
            future.add_errback(lambda exc, k=key, s=seq: log.fail(k, s, exc))
        producer.flush()
    finally:
        producer.close()


_Params = TypeVar("_Params", TxnArgs, GroupArgs)


def _from_args(kind: type[_Params], args: argparse.Namespace) -> _Params:
    """A workload's parameters from the command line options of the same names."""
    return kind(**{f.name: getattr(args, f.name) for f in dataclasses.fields(kind)})


def _run_on(
    runtime: str,
    on_asyncio: Callable[..., Coroutine[Any, Any, None]],
    on_trio: Callable[..., Awaitable[None]],
    on_blocking: Callable[..., None],
    *args: Any,
) -> None:
    """Run the runtime's variant of a workload with ``args``."""
    if runtime == "asyncio":
        import asyncio  # noqa: PLC0415 -- one runtime per process

        asyncio.run(on_asyncio(*args))
    elif runtime == "trio":
        import trio  # noqa: PLC0415

        trio.run(on_trio, *args)
    else:
        on_blocking(*args)


def _produce(args: argparse.Namespace) -> int:
    with open(args.log, "w", encoding="utf-8") as handle:
        log = AckLog(handle, args.topic)
        _run_on(args.runtime, _produce_asyncio, _produce_trio, _produce_blocking, args, log)
    print(json.dumps({"sent": args.records, "acked": log.acked, "failed": log.failed}))
    return 0


TXN_CONSUMER_OPTIONS: dict[str, Any] = {
    "isolation_level": "read_committed",
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "request_timeout_ms": 15_000,
}
"""The transactional workload's consumer: assign-based, offsets stored in the group only
through ``send_offsets_to_transaction``."""


class _TxnClients:
    """The transactional workload's producer and consumer. Its program opens them (op
    ``open``: the producer, with ``init_transactions``, then the consumer) and closes them
    (``close``, in the reverse order: a trio client is a context, and contexts end in
    order) to start over after a fatal error; every other op goes to the ones open now."""

    def __init__(self) -> None:
        self.producer: Any = None
        self.consumer: Any = None

    def ops(
        self,
        *,
        poll: str,
        send: Callable[..., Any],
        sleep: Callable[[float], Any],
        open_: Callable[[], Any],
        close: Callable[[], Any],
    ) -> dict[str, Any]:
        """The program's ops; ``send(producer, topic, value, partition)``."""

        def on(side: str, method: str) -> Callable[..., Any]:
            def call(*args: Any, **kwargs: Any) -> Any:
                client = getattr(self, side)  # the one open now, not the one open here
                return getattr(client, method)(*args, **kwargs)

            return call

        consumer = ("assign", "end_offsets", "committed", "seek")
        producer = (
            "begin_transaction",
            "send_offsets_to_transaction",
            "commit_transaction",
            "abort_transaction",
        )
        return {
            **{name: on("consumer", name) for name in consumer},
            **{name: on("producer", name) for name in producer},
            "getmany": on("consumer", poll),
            "send": lambda topic, value, partition: send(self.producer, topic, value, partition),
            "sleep": sleep,
            "open": open_,
            "close": close,
        }


async def _txn_async(
    program: Program,
    open_producer: Callable[[], AbstractAsyncContextManager[Any]],
    open_consumer: Callable[[], AbstractAsyncContextManager[Any]],
    send: Callable[..., Any],
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    clients = _TxnClients()
    stack: AsyncExitStack | None = None

    async def close() -> None:
        nonlocal stack
        clients.producer = clients.consumer = None
        ending, stack = stack, None
        if ending is not None:
            await ending.aclose()

    async def open_() -> None:
        nonlocal stack
        await close()
        stack = AsyncExitStack()
        clients.producer = await stack.enter_async_context(open_producer())
        clients.consumer = await stack.enter_async_context(open_consumer())

    try:
        await run_async(
            program, clients.ops(poll="getmany", send=send, sleep=sleep, open_=open_, close=close)
        )
    finally:
        await close()


async def _txn_asyncio(args: argparse.Namespace, program: Program) -> None:
    import asyncio  # noqa: PLC0415

    from kafkastate.asyncio import AIOKafkaConsumer, AIOKafkaProducer  # noqa: PLC0415

    @asynccontextmanager
    async def open_producer() -> AsyncIterator[Any]:
        producer = AIOKafkaProducer(
            bootstrap_servers=args.bootstrap,
            transactional_id=args.transactional_id,
            **PRODUCER_OPTIONS,
        )
        try:
            await producer.start()  # init_transactions too
            yield producer
        finally:
            await producer.stop()

    @asynccontextmanager
    async def open_consumer() -> AsyncIterator[Any]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=args.bootstrap, group_id=args.group, **TXN_CONSUMER_OPTIONS
        )
        try:
            await consumer.start()
            yield consumer
        finally:
            await consumer.stop()

    async def send(producer: Any, topic: str, value: bytes, partition: int) -> Any:
        return await producer.send(topic, value, partition=partition)

    await _txn_async(program, open_producer, open_consumer, send, asyncio.sleep)


async def _txn_trio(args: argparse.Namespace, program: Program) -> None:
    import trio  # noqa: PLC0415

    from kafkastate.trio import open_consumer, open_producer  # noqa: PLC0415

    def producer() -> AbstractAsyncContextManager[Any]:
        return open_producer(
            args.bootstrap, transactional_id=args.transactional_id, **PRODUCER_OPTIONS
        )

    def consumer() -> AbstractAsyncContextManager[Any]:
        return open_consumer(
            bootstrap_servers=args.bootstrap, group_id=args.group, **TXN_CONSUMER_OPTIONS
        )

    async def send(producer: Any, topic: str, value: bytes, partition: int) -> Any:
        return await producer.enqueue(topic, value, partition=partition)

    await _txn_async(program, producer, consumer, send, trio.sleep)


def _txn_blocking(args: argparse.Namespace, program: Program) -> None:
    from kafkastate.sync import KafkaConsumer, KafkaProducer  # noqa: PLC0415

    clients = _TxnClients()
    stack: ExitStack | None = None

    def close() -> None:
        nonlocal stack
        clients.producer = clients.consumer = None
        ending, stack = stack, None
        if ending is not None:
            ending.close()

    def open_() -> None:
        nonlocal stack
        close()
        stack = ExitStack()
        producer = KafkaProducer(
            bootstrap_servers=args.bootstrap,
            transactional_id=args.transactional_id,
            **PRODUCER_OPTIONS,
        )
        stack.callback(producer.close, timeout=30)
        producer.init_transactions()
        clients.producer = producer
        consumer = KafkaConsumer(
            bootstrap_servers=args.bootstrap, group_id=args.group, **TXN_CONSUMER_OPTIONS
        )
        stack.callback(consumer.close, autocommit=False)
        clients.consumer = consumer

    def send(producer: Any, topic: str, value: bytes, partition: int) -> Any:
        return producer.send(topic, value=value, partition=partition)

    try:
        run_blocking(
            program, clients.ops(poll="poll", send=send, sleep=time.sleep, open_=open_, close=close)
        )
    finally:
        close()


def _txn(args: argparse.Namespace) -> int:
    params = _from_args(TxnArgs, args)
    with _open_log(args.log, args.incarnation) as handle:
        program = txn_program(params, handle)
        _run_on(args.runtime, _txn_asyncio, _txn_trio, _txn_blocking, args, program)
    print(json.dumps({"done": True}))
    return 0


GROUP_CONSUMER_OPTIONS: dict[str, Any] = {
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "request_timeout_ms": 15_000,
    "session_timeout_ms": 10_000,
}
"""The group workload's members: offsets committed by hand after each batch. The session
timeout is aiokafka's default on every runtime, so the members of a process a
``client_kill`` SIGKILLed leave the group within 10 s (kafka-python's 45 s would stall the
group that long)."""


def _member_ops(consumer: Any, getmany: Any, sleep: Any) -> dict[str, Any]:
    return {
        "subscribe": consumer.subscribe,
        "getmany": getmany,
        "commit": consumer.commit,
        "sleep": sleep,
    }


async def _group_async(
    params: GroupArgs,
    log: GroupLog,
    progress: GroupProgress,
    open_member: Callable[[], AbstractAsyncContextManager[Any]],
) -> None:
    import anyio  # noqa: PLC0415

    async def slot(index: int) -> None:
        generation = 0
        while not progress.done():
            member = params.member_name(index, generation)
            lifetime = member_lifetime(params, index, generation)
            try:
                async with open_member() as consumer:
                    program = member_program(params, member, lifetime, log, progress)
                    ops = _member_ops(consumer, consumer.getmany, anyio.sleep)
                    await run_async(program, ops)
            except KafkaError as exc:
                log.write("error", member, error=repr(exc))
                log.write("closing", member)
            generation += 1

    async with anyio.create_task_group() as group:
        for index in range(params.members):
            group.start_soon(slot, index)


async def _group_asyncio(
    params: GroupArgs, log: GroupLog, progress: GroupProgress, args: argparse.Namespace
) -> None:
    from kafkastate.asyncio import AIOKafkaConsumer  # noqa: PLC0415

    @asynccontextmanager
    async def open_member() -> AsyncIterator[Any]:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=args.bootstrap, group_id=params.group, **GROUP_CONSUMER_OPTIONS
        )
        await consumer.start()
        try:
            yield consumer
        finally:
            await consumer.stop()

    await _group_async(params, log, progress, open_member)


async def _group_trio(
    params: GroupArgs, log: GroupLog, progress: GroupProgress, args: argparse.Namespace
) -> None:
    from kafkastate.trio import open_consumer  # noqa: PLC0415

    def open_member() -> AbstractAsyncContextManager[Any]:
        return open_consumer(
            bootstrap_servers=args.bootstrap, group_id=params.group, **GROUP_CONSUMER_OPTIONS
        )

    await _group_async(params, log, progress, open_member)


def _group_blocking(
    params: GroupArgs, log: GroupLog, progress: GroupProgress, args: argparse.Namespace
) -> None:
    from kafkastate.sync import KafkaConsumer  # noqa: PLC0415

    failures: list[BaseException] = []

    def slot(index: int) -> None:
        generation = 0
        try:
            while not progress.done():
                member = params.member_name(index, generation)
                lifetime = member_lifetime(params, index, generation)
                consumer = KafkaConsumer(
                    bootstrap_servers=args.bootstrap,
                    group_id=params.group,
                    **GROUP_CONSUMER_OPTIONS,
                )
                try:
                    program = member_program(params, member, lifetime, log, progress)
                    run_blocking(program, _member_ops(consumer, consumer.poll, time.sleep))
                except KafkaError as exc:
                    log.write("error", member, error=repr(exc))
                    log.write("closing", member)
                finally:
                    consumer.close(autocommit=False)
                generation += 1
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=slot, args=(i,)) for i in range(params.members)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _open_log(path: str, incarnation: int) -> IO[str]:
    """The workload's log: a new file, or (a restarted process) the old one to append to
    (the runner ended the line the kill may have cut: ``mark_killed``)."""
    return open(path, "w" if incarnation == 0 else "a", encoding="utf-8")


def _resumed(text: str) -> dict[int, int]:
    """``--resume`` (``partition:offset,...``) as a dict."""
    pairs = (item.split(":") for item in text.split(",") if item)
    return {int(partition): int(offset) for partition, offset in pairs}


def _group(args: argparse.Namespace) -> int:
    params = _from_args(GroupArgs, args)
    progress = GroupProgress(
        ends=prefill_ends(args.records, args.partitions), committed=_resumed(args.resume)
    )
    if args.paced_from is not None:
        progress.started = args.paced_from
    with _open_log(args.log, args.incarnation) as handle:
        log = GroupLog(handle)
        _run_on(
            args.runtime, _group_asyncio, _group_trio, _group_blocking, params, log, progress, args
        )
    print(json.dumps({"committed": progress.committed}))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Command line entry point (one workload, one runtime)."""
    parser = argparse.ArgumentParser(description="a kafkastate chaos workload")
    sub = parser.add_subparsers(dest="workload", required=True)
    produce = sub.add_parser("produce", help="idempotent producer with an ack log")
    produce.add_argument("--runtime", choices=("asyncio", "trio", "blocking"), required=True)
    produce.add_argument("--bootstrap", required=True)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--records", type=int, required=True)
    produce.add_argument("--keys", type=int, default=1000)
    produce.add_argument("--duration", type=float, default=60.0)
    produce.add_argument("--log", required=True)
    txn = sub.add_parser("txn", help="transactional read-process-write with a log")
    txn.add_argument("--runtime", choices=("asyncio", "trio", "blocking"), required=True)
    txn.add_argument("--bootstrap", required=True)
    txn.add_argument("--input", required=True)
    txn.add_argument("--output", required=True)
    txn.add_argument("--group", required=True)
    txn.add_argument("--transactional-id", required=True)
    txn.add_argument("--partitions", type=int, required=True)
    txn.add_argument("--batch", type=int, default=200)
    txn.add_argument("--abort-every", type=int, default=7)
    txn.add_argument("--duration", type=float, default=60.0)
    txn.add_argument("--log", required=True)
    group = sub.add_parser("group", help="consumer-group members that come and go")
    group.add_argument("--runtime", choices=("asyncio", "trio", "blocking"), required=True)
    group.add_argument("--bootstrap", required=True)
    group.add_argument("--topic", required=True)
    group.add_argument("--group", required=True)
    group.add_argument("--partitions", type=int, required=True)
    group.add_argument("--records", type=int, required=True, help="records in the input")
    group.add_argument("--members", type=int, default=3)
    group.add_argument("--lifetime", type=float, default=15.0)
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--duration", type=float, default=60.0)
    group.add_argument("--log", required=True)
    group.add_argument(
        "--resume", default="", help="partition:offset,... the group had committed (restart)"
    )
    for restartable in (txn, group):
        restartable.add_argument(
            "--incarnation", type=int, default=0, help="restarts before this process"
        )
        restartable.add_argument(
            "--paced-from", type=float, default=None, help="time.monotonic() to pace from"
        )
    args = parser.parse_args(argv)
    run = {"produce": _produce, "txn": _txn, "group": _group}[args.workload]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
