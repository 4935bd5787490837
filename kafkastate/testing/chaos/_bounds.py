"""Resource bounds (docs/reliability.md#resource-bounds): what a client holds while the
broker is slow or the application stops reading, and what connect/close cycles leave behind.

Each measurement runs in a fresh process of its own (one runtime, nothing else in it), so
its RSS is the client's:

- ``producer``: an application that keeps sending 1 KiB records while every proxy in front
  of the brokers is limited to a few KB/s must be held back (``send`` waits for buffer
  room), not buffer without end: the RSS growth over the baseline after warm-up stays
  within ``buffer_memory`` plus a fixed overhead.
- ``consumer``: an application that reads once and then stops reading while the topic
  holds far more than ``fetch_max_bytes``: the growth stays within
  ``fetch_max_bytes`` x connections plus a fixed overhead (the fetcher must not keep
  fetching into memory nobody reads).
- ``cycles``: producer, consumer and admin clients opened and closed in turn, each one
  talking to every broker before it closes (the producer sends a record to a partition
  each broker leads, the consumer lists the end offsets of those partitions, the admin
  client lists the groups on every broker); afterwards the process has the file
  descriptors, threads and tasks it had after the warm-up cycles, no more, and its RSS grew
  within a bound (:func:`run_cycles`, which the chaos session runs at 10,000 cycles).

RSS comes from ``/proc/self/status`` (``VmRSS``). The worker and the runner talk over the
worker's stdin/stdout, one JSON line each way: the runner turns the bandwidth limit on
once the producer's baseline is taken and off once its peak is measured.

    python -m kafkastate.testing.chaos --bounds --cycles 10000   # the chaos session's
    python -m kafkastate.testing.chaos --cycles-only --cycles 10000   # the cycles alone
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kafkastate.errors import KafkaError

from ._txn import Op, run_async, run_blocking

__all__ = [
    "BOUND_NAMES",
    "Bound",
    "BoundsOptions",
    "consumer_program",
    "cycles_program",
    "open_fds",
    "os_threads",
    "peers",
    "producer_program",
    "rss",
    "run_bounds",
    "run_cycles",
]

MIB = 1 << 20
CYCLE_BOUNDS = ("fds", "threads", "tasks", "unreached", "cycles_rss", "cycles_rss_late")
"""What :func:`run_cycles` measures per runtime."""
BOUND_NAMES = ("producer_rss", "consumer_rss", *CYCLE_BOUNDS)
CYCLES_RSS_LIMIT = 8 * MIB
"""The most a cycles process's RSS may grow after the warm-up (the trio driver's 1 MiB
reads, before they were fixed, grew it 5.8 MiB over 10,000 cycles on one broker)."""
CYCLES_RSS_LATE_LIMIT = 2 * MIB
"""The most it may grow over the second half of the cycles: a leak keeps growing, a warm-up
levels off (before the fix: +1.4 MiB over the last 2,000 of 10,000 cycles)."""
VALUE = bytes(range(256)) * 4
"""The 1 KiB record value both memory measurements use."""

Program = Generator[Op, Any, None]


def _status(field_name: str) -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field_name}")


def rss() -> int:
    """This process's resident set size in bytes (``VmRSS``)."""
    return _status("VmRSS") * 1024


def os_threads() -> int:
    """This process's threads, as the kernel counts them."""
    return _status("Threads")


def open_fds() -> int:
    """This process's open file descriptors."""
    return len(os.listdir("/proc/self/fd"))


def peers() -> set[str]:
    """The remote ``address:port`` (hex, as ``/proc/net/tcp`` writes it) of every
    established TCP connection this process holds: a client connected to three brokers
    has three, whatever else its runtime keeps open (pipes, socketpairs)."""
    mine: set[str] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since listed
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    found: set[str] = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                next(handle)  # the header
                for line in handle:
                    fields = line.split()
                    # sl local rem st tx:rx tr:when retrnsmt uid timeout inode
                    if fields[3] == "01" and fields[9] in mine:  # 01: ESTABLISHED
                        found.add(fields[2])
        except FileNotFoundError:  # no IPv6
            continue
    return found


@dataclass
class _Peak:
    """The RSS baseline and the highest RSS seen since."""

    baseline: int = 0
    peak: int = 0
    samples: int = 0

    def start(self) -> None:
        gc.collect()
        self.baseline = self.peak = rss()

    def sample(self) -> None:
        self.peak = max(self.peak, rss())
        self.samples += 1


def producer_program(topic: str, seconds: float, warmup: int) -> Program:
    """Warm up (``warmup`` records, flushed), take the baseline, tell the runner (who
    slows the brokers down), then send for ``seconds`` as fast as sends are let through,
    sampling RSS; report, wait for the runner (who lifts the limit) and flush."""
    peak = _Peak()
    for _ in range(warmup):
        yield Op("send", (topic, VALUE))
    yield Op("flush")
    peak.start()
    yield Op("tell", ({"ready": True, "baseline": peak.baseline},))
    yield Op("hear")
    sent, started = 0, time.monotonic()
    while time.monotonic() - started < seconds:
        yield Op("send", (topic, VALUE))
        sent += 1
        if sent % 16 == 0:
            peak.sample()
    peak.sample()
    yield Op("tell", ({"baseline": peak.baseline, "peak": peak.peak, "sent": sent},))
    yield Op("hear")
    yield Op("flush")


def consumer_program(topic: str, partitions: int, seconds: float) -> Program:
    """Assign every partition, take the baseline, read one small batch, then stop reading
    for ``seconds`` (sampling RSS) while the client runs on; report."""
    peak = _Peak()
    yield Op("assign", ([(topic, p) for p in range(partitions)],))
    peak.start()
    got: dict[Any, list[Any]] = {}
    while not got:
        got = yield Op("getmany", kwargs={"timeout_ms": 1000, "max_records": 10})
    read = sum(len(records) for records in got.values())
    del got
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        yield Op("sleep", (0.1,))
        peak.sample()
    yield Op("tell", ({"baseline": peak.baseline, "peak": peak.peak, "read": read},))


def cycles_program(
    topic: str, cycles: int, warmup: int = 3, every: int = 1000, budget: float | None = None
) -> Program:
    """Open and close a producer, a consumer and an admin client in turn (``warmup`` of
    each first), then report what the process holds compared with after the warm-up.

    Each ``cycle`` op answers how many brokers the client was connected to before it
    closed (:func:`peers`); the report's ``reached`` is the fewest any cycle reached (None
    when the ops do not say). Every ``every`` cycles, at the half-way cycle and after the
    warm-up and the last cycle the process's fds, threads, tasks and RSS are sampled, after
    a settle; each sample is written to stderr (the measurement's log) as it is taken and
    the report carries them all (``samples``), so a run that is stopped early still shows
    its curve. ``rss_late`` is the growth from the half-way sample to the end; ``failed``
    counts the cycles whose client raised a KafkaError (the first ten in ``failures``).

    ``budget``: seconds of cycling after the warm-up; once they have passed no new cycle
    starts and the program ends as after its last cycle (final sample, report), so a run
    that does not fit its time ends with coherent figures instead of being killed. The
    report's ``cycles`` is then the cycles done, ``planned`` what was asked, and
    ``rss_late`` the growth from the last sample at or before half the cycles done."""
    kinds = ("producer", "consumer", "admin")
    reached: int | None = None
    failed: list[str] = []

    def cycle(kind: str) -> Generator[Op, Any, None]:
        # A cycle that failed (a timeout on a loaded machine) is counted and shown, not
        # fatal: what it left behind is measured as any other cycle's.
        nonlocal reached
        try:
            answer = yield Op("cycle", (kind, topic))
        except KafkaError as exc:
            failed.append(f"{kind}: {exc!r}")
            return
        if isinstance(answer, int):
            reached = answer if reached is None else min(reached, answer)

    for kind in kinds * warmup:
        yield from cycle(kind)
    yield from _settle()
    before = {"fds": open_fds(), "threads": os_threads(), "tasks": (yield Op("tasks"))}
    rss_before = rss()
    samples = [_sample(0, before, rss_before)]
    half = cycles // 2
    started = time.monotonic()
    done = 0
    while done < cycles:
        yield from cycle(kinds[done % len(kinds)])
        done += 1
        if budget is not None and time.monotonic() - started >= budget:
            break  # out of time: the final sample and the report follow as after the last
        if done < cycles and (done == half or (every and done % every == 0)):
            yield from _settle()
            held = {"fds": open_fds(), "threads": os_threads(), "tasks": (yield Op("tasks"))}
            samples.append(_sample(done, held, rss(), time.monotonic() - started))
    elapsed = time.monotonic() - started
    yield from _settle()
    after = {"fds": open_fds(), "threads": os_threads(), "tasks": (yield Op("tasks"))}
    rss_after = rss()
    rss_half = [s["rss"] for s in samples if s["cycle"] <= done // 2][-1]
    samples.append(_sample(done, after, rss_after, elapsed))
    yield Op(
        "tell",
        (
            {
                "before": before,
                "after": after,
                "rss_growth": rss_after - rss_before,
                "rss_late": rss_after - rss_half,
                "reached": reached,
                "failed": len(failed),
                "failures": failed[:10],
                "cycles": done,
                "planned": cycles,
                "seconds": round(elapsed, 1),
                "samples": samples,
            },
        ),
    )


def _sample(cycle: int, held: dict[str, int], rss_now: int, seconds: float = 0.0) -> dict[str, Any]:
    """One point of the cycles curve, also written to stderr as it is taken."""
    sample = {"cycle": cycle, **held, "rss": rss_now, "seconds": round(seconds, 1)}
    print(json.dumps(sample), file=sys.stderr, flush=True)
    return sample


def _settle() -> Generator[Op, Any, None]:
    """Let closing tasks and threads end, and collect what they leave."""
    gc.collect()
    yield Op("sleep", (0.5,))
    gc.collect()


def _common_ops(
    cycle: Callable[..., Any], tasks: Callable[[], Any], hear: Callable[[], Any], sleep: Any
) -> dict[str, Callable[..., Any]]:
    """The ops every runtime has; the producer and consumer ones are added per bound."""
    return {"cycle": cycle, "tasks": tasks, "tell": _tell, "hear": hear, "sleep": sleep}


CYCLE_VALUE = b"cycle"
"""What a cycle's producer sends to each partition."""


def _everywhere(args: argparse.Namespace) -> range:
    """The cycles topic's partitions: one led by each broker (:func:`_cycles_topic`)."""
    return range(args.partitions)


def _tell(message: dict[str, Any]) -> None:
    print(json.dumps(message), flush=True)


def _hear() -> None:
    sys.stdin.readline()


PRODUCER_OPTIONS: dict[str, Any] = {
    "acks": 1,
    "linger_ms": 5,
    "max_block_ms": 600_000,
    "request_timeout_ms": 120_000,
    "delivery_timeout_ms": 600_000,
}


def _consumer_options(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "fetch_max_bytes": args.fetch_max_bytes,
        "max_partition_fetch_bytes": args.fetch_max_bytes,
        "auto_offset_reset": "earliest",
    }


# -- the three runtimes' ops --------------------------------------------------------------


async def _on_asyncio(args: argparse.Namespace, program: Program) -> None:
    import asyncio  # noqa: PLC0415 -- one runtime per process

    from kafkastate.asyncio import (  # noqa: PLC0415
        AIOKafkaAdminClient,
        AIOKafkaConsumer,
        AIOKafkaProducer,
    )
    from kafkastate.structs import TopicPartition  # noqa: PLC0415

    async def cycle(kind: str, topic: str) -> int:
        everywhere = _everywhere(args)
        if kind == "producer":
            producer = AIOKafkaProducer(bootstrap_servers=args.bootstrap)
            await producer.start()
            try:
                sent = [await producer.send(topic, CYCLE_VALUE, partition=p) for p in everywhere]
                await asyncio.gather(*sent)
                return len(peers())
            finally:
                await producer.stop()
        if kind == "consumer":
            consumer = AIOKafkaConsumer(bootstrap_servers=args.bootstrap)
            await consumer.start()
            try:
                await consumer.end_offsets([TopicPartition(topic, p) for p in everywhere])
                return len(peers())
            finally:
                await consumer.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=args.bootstrap)
        await admin.start()
        try:
            await admin.list_consumer_groups()
            return len(peers())
        finally:
            await admin.close()

    ops = _common_ops(
        cycle, lambda: len(asyncio.all_tasks()), lambda: asyncio.to_thread(_hear), asyncio.sleep
    )
    if args.bound == "producer":
        producer = AIOKafkaProducer(
            bootstrap_servers=args.bootstrap, buffer_memory=args.buffer_memory, **PRODUCER_OPTIONS
        )
        await producer.start()
        try:
            await run_async(program, {**ops, "send": producer.send, "flush": producer.flush})
        finally:
            await producer.stop()
    elif args.bound == "consumer":
        consumer = AIOKafkaConsumer(
            bootstrap_servers=args.bootstrap,
            **_consumer_options(args),
        )
        await consumer.start()
        try:

            def assign(parts: Sequence[tuple[str, int]]) -> None:
                consumer.assign([TopicPartition(t, p) for t, p in parts])

            await run_async(program, {**ops, "assign": assign, "getmany": consumer.getmany})
        finally:
            await consumer.stop()
    else:
        await run_async(program, ops)


def _trio_tasks() -> int:
    import trio  # noqa: PLC0415

    root = trio.lowlevel.current_root_task()
    count, stack = 0, [] if root is None else [root]
    while stack:
        task = stack.pop()
        count += 1
        for nursery in task.child_nurseries:
            stack.extend(nursery.child_tasks)
    return count


async def _on_trio(args: argparse.Namespace, program: Program) -> None:
    import trio  # noqa: PLC0415

    from kafkastate.trio import open_admin, open_consumer, open_producer  # noqa: PLC0415

    async def cycle(kind: str, topic: str) -> int:
        everywhere = _everywhere(args)
        if kind == "producer":
            async with open_producer(args.bootstrap) as producer:
                sent = [await producer.enqueue(topic, CYCLE_VALUE, partition=p) for p in everywhere]
                for delivery in sent:
                    await delivery.wait()
                return len(peers())
        if kind == "consumer":
            async with open_consumer(bootstrap_servers=args.bootstrap) as consumer:
                await consumer.end_offsets([(topic, p) for p in everywhere])
                return len(peers())
        async with open_admin(args.bootstrap) as admin:
            await admin.list_consumer_groups()
            return len(peers())

    ops = _common_ops(cycle, _trio_tasks, lambda: trio.to_thread.run_sync(_hear), trio.sleep)
    if args.bound == "producer":
        async with open_producer(
            args.bootstrap, buffer_memory=args.buffer_memory, **PRODUCER_OPTIONS
        ) as producer:
            await run_async(program, {**ops, "send": producer.enqueue, "flush": producer.flush})
    elif args.bound == "consumer":
        async with open_consumer(
            bootstrap_servers=args.bootstrap,
            **_consumer_options(args),
        ) as consumer:
            await run_async(
                program, {**ops, "assign": consumer.assign, "getmany": consumer.getmany}
            )
    else:
        await run_async(program, ops)


def _on_blocking(args: argparse.Namespace, program: Program) -> None:
    from kafkastate.structs import TopicPartition  # noqa: PLC0415
    from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: PLC0415

    def cycle(kind: str, topic: str) -> int:
        everywhere = _everywhere(args)
        if kind == "producer":
            producer = KafkaProducer(bootstrap_servers=args.bootstrap)
            try:
                sent = [producer.send(topic, value=CYCLE_VALUE, partition=p) for p in everywhere]
                for future in sent:
                    future.get(timeout=60)
                return len(peers())
            finally:
                producer.close()
        if kind == "consumer":
            consumer = KafkaConsumer(bootstrap_servers=args.bootstrap)
            try:
                consumer.end_offsets([TopicPartition(topic, p) for p in everywhere])
                return len(peers())
            finally:
                consumer.close()
        admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
        try:
            admin.list_consumer_groups()
            return len(peers())
        finally:
            admin.close()

    ops = _common_ops(cycle, threading.active_count, _hear, time.sleep)
    if args.bound == "producer":
        producer = KafkaProducer(
            bootstrap_servers=args.bootstrap, buffer_memory=args.buffer_memory, **PRODUCER_OPTIONS
        )
        try:

            def send(topic: str, value: bytes) -> Any:
                return producer.send(topic, value=value)

            run_blocking(program, {**ops, "send": send, "flush": producer.flush})
        finally:
            producer.close()
    elif args.bound == "consumer":
        consumer = KafkaConsumer(
            bootstrap_servers=args.bootstrap,
            **_consumer_options(args),
        )
        try:

            def assign(parts: Sequence[tuple[str, int]]) -> None:
                consumer.assign([TopicPartition(t, p) for t, p in parts])

            def getmany(timeout_ms: int, max_records: int) -> Any:
                return consumer.poll(timeout_ms=timeout_ms, max_records=max_records)

            run_blocking(program, {**ops, "assign": assign, "getmany": getmany})
        finally:
            consumer.close()
    else:
        run_blocking(program, ops)


def worker(argv: Sequence[str] | None = None) -> int:
    """One measurement in this process (the runner starts it)."""
    parser = argparse.ArgumentParser(description="a kafkastate resource-bound measurement")
    parser.add_argument("bound", choices=("producer", "consumer", "cycles"))
    parser.add_argument("--runtime", choices=("asyncio", "trio", "blocking"), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--buffer-memory", type=int, default=4 * MIB)
    parser.add_argument("--fetch-max-bytes", type=int, default=MIB)
    parser.add_argument("--cycles", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--every", type=int, default=1000)
    parser.add_argument("--budget", type=float, default=None)
    args = parser.parse_args(argv)
    faulthandler.register(signal.SIGUSR1)  # the stacks of a measurement that hangs
    if args.bound == "producer":
        program = producer_program(args.topic, args.seconds, args.warmup)
    elif args.bound == "consumer":
        program = consumer_program(args.topic, args.partitions, args.seconds)
    else:
        program = cycles_program(args.topic, args.cycles, every=args.every, budget=args.budget)
    if args.runtime == "asyncio":
        import asyncio  # noqa: PLC0415

        asyncio.run(_on_asyncio(args, program))
    elif args.runtime == "trio":
        import trio  # noqa: PLC0415

        trio.run(_on_trio, args, program)
    else:
        _on_blocking(args, program)
    return 0


# -- the runner's side ----------------------------------------------------------------------


@dataclass(frozen=True)
class BoundsOptions:
    """What :func:`run_bounds` measures.

    Attributes:
        runtimes: the runtimes (one process per measurement).
        brokers: brokers in the cluster (the consumer has one connection to each).
        seconds: how long the producer sends against the slow brokers, and how long the
            consumer does not read.
        rate_kb: the bandwidth limit (KB/s, each way, every proxy) while the producer sends.
        buffer_memory: the producer's ``buffer_memory``.
        fetch_max_bytes: the consumer's ``fetch_max_bytes`` (and ``max_partition_fetch_bytes``).
        consumer_input: bytes in the consumer's topic (far more than it may hold).
        cycles: connect/close cycles per runtime (producer, consumer, admin in turn, each
            talking to every broker; :func:`run_cycles`).
        overhead: the fixed overhead allowed over ``buffer_memory`` or fetch bytes.
        out: where the results and logs go.
        kafka_version: the broker version (default: the harness's).
    """

    runtimes: Sequence[str] = ("asyncio", "trio", "blocking")
    brokers: int = 1
    seconds: float = 5.0
    rate_kb: int = 32
    buffer_memory: int = 4 * MIB
    fetch_max_bytes: int = MIB
    consumer_input: int = 48 * MIB
    cycles: int = 300
    overhead: int = 16 * MIB
    out: Path = field(default_factory=lambda: Path("chaos-bounds"))
    kafka_version: str | None = None


@dataclass
class Bound:
    """One measured bound.

    Attributes:
        name: one of :data:`BOUND_NAMES`.
        runtime: the runtime.
        measured: bytes of RSS growth, or descriptors/threads/tasks more than before.
        limit: the most allowed.
        detail: what else the measurement reported.
    """

    name: str
    runtime: str
    measured: int
    limit: int
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the measurement is within its limit."""
        return self.measured <= self.limit


class _Worker:
    """A measurement process and its JSON-lines conversation."""

    def __init__(self, argv: Sequence[str], log: Path) -> None:
        self._log = open(log, "w")  # noqa: SIM115 -- closed in finish()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kafkastate.testing.chaos._bounds", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def hear(self) -> dict[str, Any]:
        if self.process.stdout is None:  # pragma: no cover -- stdout=PIPE
            raise RuntimeError("no pipe")
        line = self.process.stdout.readline()
        if not line:
            self.finish(10.0)
            raise RuntimeError(f"measurement ended: exit {self.process.returncode}")
        found: dict[str, Any] = json.loads(line)
        return found

    def tell(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.write("go\n")
            self.process.stdin.flush()

    def finish(self, timeout: float) -> int:
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._log.close()
        return code


def _prefill_bytes(bootstrap: str, topic: str, size: int, partitions: int) -> None:
    from confluent_kafka import Producer  # noqa: PLC0415 -- not under test

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(size // len(VALUE)):
        producer.produce(topic, VALUE, partition=i % partitions)
        if i % 5_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"could not write the input of {topic}")


def _report(bounds: list[Bound], bound: Bound) -> None:
    bounds.append(bound)
    print(
        f"bounds: {bound.name} {bound.runtime} {bound.measured} (limit {bound.limit})", flush=True
    )


def run_bounds(options: BoundsOptions) -> list[Bound]:
    """Measure every bound on every runtime against a fresh cluster behind Toxiproxy.

    Returns:
        The bounds, also written to ``options.out / "bounds.json"``.

    Raises:
        PrerequisiteError: java, mvn or go (for Toxiproxy's first build) is missing.
    """
    from .._cluster import KafkaCluster  # noqa: PLC0415
    from .._config import free_ports  # noqa: PLC0415
    from ._faults import proxy_name  # noqa: PLC0415
    from ._runner import _topics_admin  # noqa: PLC0415
    from ._toxiproxy import Toxiproxy, ensure_toxiproxy  # noqa: PLC0415

    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    binary = ensure_toxiproxy()
    ports = dict(zip(range(1, options.brokers + 1), free_ports(options.brokers), strict=True))
    partitions = 2 * options.brokers
    bounds: list[Bound] = []
    with (
        Toxiproxy(binary, out / "toxiproxy.log") as proxy,
        KafkaCluster.start(
            options.kafka_version,
            brokers=options.brokers,
            proxy_ports=ports,
            workdir=out / "cluster",
        ) as cluster,
    ):
        proxy.start()
        for broker in cluster.brokers:
            if broker.proxied_port is None:  # pragma: no cover -- start(proxy_ports=...)
                raise RuntimeError("the cluster has no PROXIED listener")
            proxy.create_proxy(
                proxy_name(broker.node_id), ports[broker.node_id], broker.proxied_port
            )
        _topics_admin(cluster.bootstrap, ["bounds-in", "bounds-out"], partitions, options.brokers)
        _prefill_bytes(cluster.bootstrap, "bounds-in", options.consumer_input, partitions)
        bootstrap = str(cluster.proxied_bootstrap)

        def slow(on: bool) -> None:
            for broker in cluster.brokers:
                for stream in ("downstream", "upstream"):
                    name, where = f"bounds-{stream}", proxy_name(broker.node_id)
                    if on:
                        proxy.add_toxic(
                            where, name, "bandwidth", {"rate": options.rate_kb}, stream=stream
                        )
                    else:
                        proxy.remove_toxic(where, name)

        for runtime in options.runtimes:
            common = ["--runtime", runtime, "--bootstrap", bootstrap]
            common += ["--seconds", str(options.seconds), "--partitions", str(partitions)]
            producer = _Worker(
                [
                    *("producer", *common, "--topic", "bounds-out"),
                    *("--buffer-memory", str(options.buffer_memory)),
                ],
                out / f"producer-{runtime}.log",
            )
            producer.hear()
            slow(True)
            try:
                producer.tell()
                found = producer.hear()
            finally:
                slow(False)
            producer.tell()
            producer.finish(300.0)
            _report(
                bounds,
                Bound(
                    "producer_rss",
                    runtime,
                    found["peak"] - found["baseline"],
                    options.buffer_memory + options.overhead,
                    found,
                ),
            )
            consumer = _Worker(
                [
                    *("consumer", *common, "--topic", "bounds-in"),
                    *("--fetch-max-bytes", str(options.fetch_max_bytes)),
                ],
                out / f"consumer-{runtime}.log",
            )
            found = consumer.hear()
            consumer.finish(60.0)
            _report(
                bounds,
                Bound(
                    "consumer_rss",
                    runtime,
                    found["peak"] - found["baseline"],
                    options.fetch_max_bytes * options.brokers + options.overhead,
                    found,
                ),
            )
        bounds += run_cycles(
            bootstrap,
            runtimes=options.runtimes,
            cycles=options.cycles,
            out=out,
            admin_bootstrap=cluster.bootstrap,
        )
    (out / "bounds.json").write_text(
        json.dumps({"options": _plain(options), "bounds": [asdict(b) for b in bounds]}, indent=1)
    )
    return bounds


def _cycles_topic(bootstrap: str, topic: str) -> int:
    """Create ``topic`` with one partition led by each broker; return the broker count."""
    from confluent_kafka.admin import AdminClient  # noqa: PLC0415 -- not under test
    from confluent_kafka.cimpl import NewTopic  # noqa: PLC0415

    admin = AdminClient({"bootstrap.servers": bootstrap})
    brokers = sorted(admin.list_topics(timeout=30).brokers)
    new = NewTopic(topic, len(brokers), replica_assignment=[[b] for b in brokers])
    for future in admin.create_topics([new]).values():
        future.result(timeout=60)
    return len(brokers)


def run_cycles(
    bootstrap: str,
    *,
    runtimes: Sequence[str] = ("asyncio", "trio", "blocking"),
    cycles: int = 300,
    every: int = 1000,
    out: Path,
    topic: str = "bounds-cycles",
    admin_bootstrap: str | None = None,
    budget: float | None = None,
) -> list[Bound]:
    """Connect/close cycles on every runtime, the runtimes side by side (one process
    each), against every broker of the cluster at ``bootstrap``.

    ``topic`` is created with one partition on each broker (through ``admin_bootstrap``,
    default ``bootstrap``), so each cycle's client connects to all of them. Bounds per
    runtime: ``fds``, ``threads``, ``tasks`` (no more after the cycles than after the
    warm-up), ``unreached`` (brokers the least-connected cycle did not reach: 0),
    ``cycles_rss`` (growth after the warm-up, at most :data:`CYCLES_RSS_LIMIT`) and
    ``cycles_rss_late`` (growth over the second half, at most
    :data:`CYCLES_RSS_LATE_LIMIT`). Each process's samples go to ``out/cycles-RUNTIME.log``.
    ``budget``: seconds each process cycles for at most (:func:`cycles_program`; None:
    until ``cycles`` are done); a bound's ``detail["cycles"]`` says how many it did.

    Returns:
        The bounds, also written to ``out / "cycles.json"``.
    """
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    brokers = _cycles_topic(admin_bootstrap or bootstrap, topic)
    argv = ["--bootstrap", bootstrap, "--topic", topic, "--partitions", str(brokers)]
    argv += ["--cycles", str(cycles), "--every", str(every)]
    if budget is not None:
        argv += ["--budget", str(budget)]
    workers = {
        runtime: _Worker(["cycles", "--runtime", runtime, *argv], out / f"cycles-{runtime}.log")
        for runtime in runtimes
    }
    bounds: list[Bound] = []
    try:
        for runtime, worker in workers.items():
            found = worker.hear()
            found["brokers"] = brokers
            for name in ("fds", "threads", "tasks"):
                grew = found["after"][name] - found["before"][name]
                _report(bounds, Bound(name, runtime, grew, 0, found))
            reached = found["reached"] if found["reached"] is not None else 0
            _report(bounds, Bound("unreached", runtime, brokers - reached, 0, found))
            _report(
                bounds, Bound("cycles_rss", runtime, found["rss_growth"], CYCLES_RSS_LIMIT, found)
            )
            late = Bound(
                "cycles_rss_late", runtime, found["rss_late"], CYCLES_RSS_LATE_LIMIT, found
            )
            _report(bounds, late)
    except BaseException:
        for worker in workers.values():
            if worker.process.poll() is None:
                worker.process.kill()
        raise
    finally:
        for worker in workers.values():
            worker.finish(60.0)
    (out / "cycles.json").write_text(
        json.dumps({"brokers": brokers, "bounds": [asdict(b) for b in bounds]}, indent=1)
    )
    return bounds


def _plain(options: BoundsOptions) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(options).items()}


def bounds_table(bounds: Sequence[Bound]) -> str:
    """The bounds as a markdown table (MiB for RSS, counts otherwise)."""
    lines = ["| bound | runtime | measured | limit | ok |", "|---|---|---:|---:|---|"]
    for b in bounds:
        if "_rss" in b.name:
            measured, limit = f"{b.measured / MIB:.1f} MiB", f"{b.limit / MIB:.1f} MiB"
        else:
            measured, limit = f"{b.measured:+d}", f"{b.limit:+d}"
        lines.append(f"| {b.name} | {b.runtime} | {measured} | {limit} | {b.ok} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(worker())
