"""End-to-end producer benchmark against a real broker: kafkastate vs aiokafka, confluent-kafka
and kafka-python, side by side in one run.

Six producers send the same records to the same local broker: kafkastate on asyncio
(``kafkastate.asyncio.AIOKafkaProducer``: ``await send()`` in a loop, then ``flush()``), on
trio (``kafkastate.trio.open_producer``: ``await producer.enqueue()`` in a loop, then
``flush()``) and blocking (``kafkastate.sync.KafkaProducer``: ``send()`` in a loop, then
``flush()``), aiokafka's ``AIOKafkaProducer``, confluent-kafka's ``Producer`` (``produce()``
then ``poll(0)``, ``poll()`` and retry on ``BufferError``, then ``flush()``) and kafka-python's
``KafkaProducer``. The matrix: 100 B and 1 KiB values (null keys, JSON-like, compressible
2-4x), 1 and 8 partitions, acks=1 and acks=all, no compression and lz4.

Every client and cell runs in a fresh subprocess (``--worker``) against a fresh topic; the
parent creates the topic, runs the worker, checks the topic's end offsets (every record
written once), deletes the topic. A worker sends one warm-up record and waits for it
(connection, metadata, producer id), then times N sends and the final flush (wall clock).
Same settings wherever a client has them: ``linger.ms=5``, ``batch.size=16384``, idempotence
off with acks=1 and on with acks=all (kafka-python 3 and kafkastate's sync producer turn it
on by default: it is set explicitly), default buffer sizes. Reported per client and cell:
records/s and MB/s of value payload, the client process's CPU time per record (all its
threads: librdkafka's, kafka-python's and kafkastate-sync's IO threads included), p50/p99
ack latency (send call to delivery callback, every ``--sample-every``-th record, the same way
for every client: under full load this is mostly time queued behind earlier records), and the
worker's peak RSS (``VmHWM``; ``ru_maxrss`` where there is no ``/proc``) and its RSS after
imports, before the producer exists. Workers do not import hypothesis (kio, kafkastate's
protocol codec, imports it whenever it is installed, as it is in the dev environment; a
production install has no hypothesis): ``--with-hypothesis`` lets them.

    python bench/bench_producer.py --quick                  # smoke run, a few minutes
    python bench/bench_producer.py                          # the full matrix (long)
    python bench/bench_producer.py --bootstrap 127.0.0.1:9092 --cells '100B-p1-*' --repeat 3

Without ``--bootstrap`` a broker is started with ``kafkastate.testing.KafkaCluster`` (local
JVM, benchmark JIT settings) and stopped at the end.
"""

# Clients are imported inside functions on purpose: a worker imports only the client it runs,
# so one client's modules do not count in another's RSS.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import datetime
import fnmatch
import importlib.util
import itertools
import json
import math
import os
import pathlib
import platform
import random
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

HERE = pathlib.Path(__file__).resolve()
if importlib.util.find_spec("kafkastate") is None:  # a checkout without an install
    sys.path.insert(0, str(HERE.parent.parent))

# --clients name -> label in the tables.
CLIENTS = {
    "ks-asyncio": "kafkastate asyncio",
    "ks-trio": "kafkastate trio",
    "ks-sync": "kafkastate sync",
    "aiokafka": "aiokafka",
    "confluent": "confluent-kafka",
    "kafka-python": "kafka-python",
}
KAFKASTATE = ("ks-asyncio", "ks-trio", "ks-sync")
SIZES = (100, 1024)
PARTITIONS = (1, 8)
ACKS = ("1", "all")
COMPRESSIONS = ("none", "lz4")
LINGER_MS = 5
BATCH_SIZE = 16384
# Records per cell: (full, --quick); kafka-python is capped (it is the slowest by far and
# records/s is a rate): its own (full, --quick) counts.
RECORDS = {100: (1_000_000, 100_000), 1024: (200_000, 20_000)}
KAFKA_PYTHON_RECORDS = {100: (200_000, 100_000), 1024: (50_000, 20_000)}
QUICK_CELLS = (
    "100B-p1-acks1-none",
    "100B-p1-acks1-lz4",
    "100B-p8-acksall-none",
    "1KiB-p1-acks1-none",
)
# The two cells of the SVG chart.
CHART_CELLS = ("100B-p1-acks1-none", "100B-p1-acks1-lz4")
POOL = 1024  # distinct values, cycled: a pool, so the values do not count in the RSS
WORDS = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"kafka", b"topic", b"offset"]


# ---------------------------------------------------------------------------------------------
# cells


@dataclass(frozen=True)
class Cell:
    size: int
    partitions: int
    acks: str
    compression: str

    @property
    def name(self) -> str:
        size = "1KiB" if self.size == 1024 else f"{self.size}B"
        return f"{size}-p{self.partitions}-acks{self.acks}-{self.compression}"

    @property
    def title(self) -> str:
        size = "1 KiB" if self.size == 1024 else f"{self.size} B"
        parts = "1 partition" if self.partitions == 1 else f"{self.partitions} partitions"
        return f"{size} values, {parts}, acks={self.acks}, compression {self.compression}"

    @property
    def idempotent(self) -> bool:
        return self.acks == "all"


ALL_CELLS = [
    Cell(s, p, a, c) for s, p, a, c in itertools.product(SIZES, PARTITIONS, ACKS, COMPRESSIONS)
]


def select_cells(patterns: str | None, quick: bool) -> list[Cell]:
    if not patterns:
        return [c for c in ALL_CELLS if not quick or c.name in QUICK_CELLS]
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    return [c for c in ALL_CELLS if any(fnmatch.fnmatch(c.name, f"*{p}*") for p in pats)]


def record_count(client: str, size: int, quick: bool, override: int | None) -> int:
    table = KAFKA_PYTHON_RECORDS if client == "kafka-python" else RECORDS
    n = table[size][1 if quick else 0]
    if override is not None:
        n = override if size == 100 else max(1, override // 5)
        if client == "kafka-python":
            n = min(n, table[size][0])
    return n


# ---------------------------------------------------------------------------------------------
# worker: one client, one cell, in its own process


def make_values(n: int, size: int) -> list[bytes]:
    """JSON-ish values from a seeded generator (as bench_records.py): compressible 2-4x."""
    rng = random.Random(size)
    values = []
    for i in range(n):
        text = b'{"id": %d, "user": "%s%d", "tags": [' % (
            i,
            rng.choice(WORDS),
            rng.randrange(10**6),
        )
        while len(text) < size:
            text += b'"%s", %d, ' % (rng.choice(WORDS), rng.randrange(10**4))
        values.append(text[: size - 2] + b"]}")
    return values


class Samples:
    """Ack latencies of the sampled records, and how many of them failed."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.errors: list[str] = []

    def done(self, t0: float, error: object = None) -> None:
        self.latencies.append(time.perf_counter() - t0)
        if error is not None:
            self.errors.append(repr(error))

    # per-client callback shapes
    def future(self, t0: float, future: Any) -> None:  # asyncio.Future
        self.done(t0, None if future.cancelled() else future.exception())

    def delivery(self, t0: float, delivery: Any) -> None:  # kafkastate.anyio.Delivery
        try:
            delivery.result()
        except Exception as exc:
            self.done(t0, exc)
        else:
            self.done(t0)

    def callback(self, t0: float, _metadata: Any) -> None:  # kafka-python style future
        self.done(t0)

    def errback(self, t0: float, exc: BaseException) -> None:
        self.done(t0, exc)

    def confluent(self, t0: float, err: Any, _msg: Any) -> None:
        self.done(t0, err)


@dataclass
class Job:
    client: str
    bootstrap: str
    topic: str
    size: int
    records: int
    acks: str
    compression: str
    sample_every: int

    @property
    def idempotent(self) -> bool:
        return self.acks == "all"

    @property
    def codec(self) -> str | None:
        return None if self.compression == "none" else self.compression


def run_ks_asyncio(job: Job, values: list[bytes], samples: Samples) -> float:
    import asyncio

    from kafkastate.asyncio import AIOKafkaProducer

    return asyncio.run(_run_aio(AIOKafkaProducer, job, values, samples))


def run_aiokafka(job: Job, values: list[bytes], samples: Samples) -> float:
    import asyncio

    from aiokafka import AIOKafkaProducer

    return asyncio.run(_run_aio(AIOKafkaProducer, job, values, samples))


async def _run_aio(cls: Any, job: Job, values: list[bytes], samples: Samples) -> float:
    producer = cls(
        bootstrap_servers=job.bootstrap,
        acks=1 if job.acks == "1" else "all",
        enable_idempotence=job.idempotent,
        linger_ms=LINGER_MS,
        max_batch_size=BATCH_SIZE,
        compression_type=job.codec,
    )
    await producer.start()
    try:
        await producer.send_and_wait(job.topic, values[0])  # warm-up
        topic, every, send, sampled = job.topic, job.sample_every, producer.send, samples.future
        clock = time.perf_counter
        start = clock()
        for i in range(job.records):
            if i % every == 0:
                t0 = clock()
                future = await send(topic, values[i % POOL])
                future.add_done_callback(lambda f, t0=t0: sampled(t0, f))
            else:
                await send(topic, values[i % POOL])
        await producer.flush()
        return clock() - start
    finally:
        await producer.stop()


def run_ks_trio(job: Job, values: list[bytes], samples: Samples) -> float:
    import trio

    from kafkastate.trio import open_producer

    async def main() -> float:
        async with open_producer(
            job.bootstrap,
            acks=1 if job.acks == "1" else "all",
            enable_idempotence=job.idempotent,
            linger_ms=LINGER_MS,
            batch_size=BATCH_SIZE,
            compression_type=job.codec,
        ) as producer:
            await producer.send(job.topic, values[0])  # warm-up
            topic, every, enqueue, sampled = (
                job.topic,
                job.sample_every,
                producer.enqueue,
                samples.delivery,
            )
            clock = time.perf_counter
            start = clock()
            for i in range(job.records):
                if i % every == 0:
                    t0 = clock()
                    delivery = await enqueue(topic, values[i % POOL])
                    delivery.add_done_callback(lambda d, t0=t0: sampled(t0, d))
                else:
                    await enqueue(topic, values[i % POOL])
            await producer.flush()
            return clock() - start

    return float(trio.run(main))


def run_ks_sync(job: Job, values: list[bytes], samples: Samples) -> float:
    from kafkastate.sync import KafkaProducer

    return _run_threaded(KafkaProducer, job, values, samples)


def run_kafka_python(job: Job, values: list[bytes], samples: Samples) -> float:
    from kafka import KafkaProducer

    return _run_threaded(KafkaProducer, job, values, samples)


def _run_threaded(cls: Any, job: Job, values: list[bytes], samples: Samples) -> float:
    producer = cls(
        bootstrap_servers=job.bootstrap,
        acks=1 if job.acks == "1" else "all",
        enable_idempotence=job.idempotent,
        linger_ms=LINGER_MS,
        batch_size=BATCH_SIZE,
        compression_type=job.codec,
    )
    try:
        producer.send(job.topic, values[0]).get(timeout=60)  # warm-up
        topic, every, send = job.topic, job.sample_every, producer.send
        ok, failed = samples.callback, samples.errback
        clock = time.perf_counter
        start = clock()
        for i in range(job.records):
            if i % every == 0:
                t0 = clock()
                send(topic, values[i % POOL]).add_callback(ok, t0).add_errback(failed, t0)
            else:
                send(topic, values[i % POOL])
        producer.flush()
        return clock() - start
    finally:
        producer.close()


def run_confluent(job: Job, values: list[bytes], samples: Samples) -> float:
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {
            "bootstrap.servers": job.bootstrap,
            "acks": job.acks,
            "enable.idempotence": job.idempotent,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_SIZE,
            "compression.type": job.compression,
        }
    )
    warm: list[Any] = []
    producer.produce(job.topic, values[0], on_delivery=lambda err, msg: warm.append(err))
    producer.flush(60)
    if warm != [None]:
        raise KafkaException(warm[0] if warm else "warm-up record not delivered in 60 s")
    topic, every, produce, poll = job.topic, job.sample_every, producer.produce, producer.poll
    sampled = samples.confluent
    clock = time.perf_counter
    start = clock()
    for i in range(job.records):
        value = values[i % POOL]
        if i % every == 0:
            t0 = clock()
            callback = lambda err, msg, t0=t0: sampled(t0, err, msg)  # noqa: E731
            while True:
                try:
                    produce(topic, value, on_delivery=callback)
                    break
                except BufferError:
                    poll(0.005)
        else:
            while True:
                try:
                    produce(topic, value)
                    break
                except BufferError:
                    poll(0.005)
        poll(0)
    remaining = producer.flush(300)
    elapsed = clock() - start
    if remaining:
        raise KafkaException(f"{remaining} records still queued after flush(300)")
    return elapsed


RUNNERS: dict[str, Callable[[Job, list[bytes], Samples], float]] = {
    "ks-asyncio": run_ks_asyncio,
    "ks-trio": run_ks_trio,
    "ks-sync": run_ks_sync,
    "aiokafka": run_aiokafka,
    "confluent": run_confluent,
    "kafka-python": run_kafka_python,
}


def _rss_mb(field: str = "VmHWM") -> float:
    """This process's peak (``VmHWM``) or current (``VmRSS``) resident set, in MiB.

    Linux keeps ``getrusage().ru_maxrss`` across ``execve``: a worker would report its
    parent's peak (the benchmark's own, ~60 MB) whenever that is higher than its own. The
    ``/proc`` high-water mark belongs to the worker's own address space.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    if not sorted_values:
        return math.nan
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def worker(job: Job) -> None:
    """Run one client on one cell; print the result as one JSON line."""
    values = make_values(POOL, job.size)
    rss_import = _rss_mb("VmRSS")  # the client's modules are imported, no producer yet
    runner = RUNNERS[job.client]
    samples = Samples()
    cpu0 = os.times()
    elapsed = runner(job, values, samples)
    cpu1 = os.times()
    lat = sorted(samples.latencies)
    print(
        json.dumps(
            {
                "client": job.client,
                "records": job.records,
                "elapsed": elapsed,
                # includes the warm-up and producer start/stop: small against N records
                "cpu": (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system),
                "p50_ms": _percentile(lat, 0.50) * 1000,
                "p99_ms": _percentile(lat, 0.99) * 1000,
                "samples": len(lat),
                "errors": samples.errors[:3],
                "error_count": len(samples.errors),
                "rss_mb": _rss_mb(),
                "rss_import_mb": rss_import,
            }
        )
    )


def _import_client(client: str) -> None:
    """Import the client's modules, so the baseline RSS includes them."""
    modules = {
        "ks-asyncio": ["asyncio", "kafkastate.asyncio"],
        "ks-trio": ["trio", "kafkastate.trio"],
        "ks-sync": ["kafkastate.sync"],
        "aiokafka": ["asyncio", "aiokafka"],
        "confluent": ["confluent_kafka"],
        "kafka-python": ["kafka"],
    }[client]
    for module in modules:
        importlib.import_module(module)


# ---------------------------------------------------------------------------------------------
# parent: broker, topics, workers, report


@dataclass
class Result:
    client: str
    records: int
    elapsed: float
    cpu: float
    p50_ms: float
    p99_ms: float
    rss_mb: float
    rss_import_mb: float
    problems: list[str]

    @property
    def rate(self) -> float:
        return self.records / self.elapsed


class Broker:
    """The cluster to run against: ``--bootstrap``, or a local one started and stopped here."""

    def __init__(self, bootstrap: str | None) -> None:
        self.cluster: Any = None
        if bootstrap:
            self.bootstrap = bootstrap
            self.description = f"existing broker at {bootstrap}"
            return
        from kafkastate.testing import KafkaCluster

        print("starting a local Kafka broker (kafkastate.testing)...", file=sys.stderr)
        self.cluster = KafkaCluster.start(fast_start=False)
        self.bootstrap = self.cluster.bootstrap
        self.description = (
            f"Apache Kafka {self.cluster.kafka_version}, one local KRaft node started by "
            f"kafkastate.testing (JVM default JIT and GC)"
        )

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    def admin(self) -> Any:
        from kafkastate.adapters.blocking import BlockingAdmin

        return BlockingAdmin(self.bootstrap)

    def create_topic(self, name: str, partitions: int) -> None:
        from kafkastate.core.protocol.requests import NewTopic

        with self.admin() as admin:
            admin.create_topics(
                [NewTopic(name=name, num_partitions=partitions, replication_factor=1)]
            )

    def delete_topic(self, name: str) -> None:
        with self.admin() as admin:
            admin.delete_topics([name], wait=False)

    def count(self, name: str, partitions: int) -> int:
        """Records in the topic: the sum of its partitions' end offsets (kafka-python)."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap)
        try:
            ends = consumer.end_offsets([TopicPartition(name, p) for p in range(partitions)])
            return sum(ends.values())
        finally:
            consumer.close()


def run_worker(
    broker: Broker, cell: Cell, client: str, records: int, args: argparse.Namespace
) -> Result:
    topic = f"bench-{cell.name}-{client}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, cell.partitions)
    argv = [
        sys.executable,
        str(HERE),
        "--worker",
        client,
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        topic,
        "--size",
        str(cell.size),
        "--records",
        str(records),
        "--acks",
        cell.acks,
        "--compression",
        cell.compression,
        "--sample-every",
        str(args.sample_every),
        *(["--with-hypothesis"] if args.with_hypothesis else []),
    ]
    timeout = args.worker_timeout or 120 + records / 5000
    problems: list[str] = []
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        problems.append(f"TIMEOUT after {timeout:.0f} s; stderr tail: {stderr[-800:]!r}")
        proc = None
    data: dict[str, Any] | None = None
    if proc is not None:
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            problems.append(f"worker exit {proc.returncode}; stderr tail: {proc.stderr[-1500:]}")
        else:
            data = json.loads(lines[-1])
    try:
        written = broker.count(topic, cell.partitions)
        if data is not None and written != records + 1:  # + the warm-up record
            problems.append(f"topic holds {written} records, expected {records + 1}")
    except Exception as exc:  # reported, not fatal: the numbers are still printed
        problems.append(f"could not count the topic's records: {exc!r}")
    try:
        broker.delete_topic(topic)
    except Exception as exc:
        problems.append(f"could not delete topic {topic}: {exc!r}")
    if data is None:
        return Result(client, records, math.inf, math.nan, *(math.nan,) * 4, problems)
    if data["error_count"]:
        problems.append(f"{data['error_count']} sampled records failed, e.g. {data['errors']}")
    if data["samples"] == 0:
        problems.append("no latency samples")
    return Result(
        client=client,
        records=records,
        elapsed=data["elapsed"],
        cpu=data["cpu"],
        p50_ms=data["p50_ms"],
        p99_ms=data["p99_ms"],
        rss_mb=data["rss_mb"],
        rss_import_mb=data["rss_import_mb"],
        problems=problems,
    )


def _ratio(a: Result | None, b: Result | None) -> str:
    if a is None or b is None or a.problems or b.problems:
        return "—"
    return f"{a.rate / b.rate:.2f}"


def print_cell(cell: Cell, results: dict[str, Result]) -> None:
    n = max(r.records for r in results.values())
    print(f"\n### {cell.title} (`{cell.name}`, {n:,} records)\n")
    print(
        "| client | records | rec/s | MB/s | CPU µs/rec | p50 ms | p99 ms | peak RSS MB "
        "| RSS after import MB | ks / aiokafka | ks / confluent |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for client, r in results.items():
        label = CLIENTS[client] + (" †" if r.records < n else "")
        if r.problems and not math.isfinite(r.elapsed):
            print(f"| {label} | {r.records:,} | FAILED | | | | | | | | |")
            continue
        ks = client in KAFKASTATE
        vs_aio = _ratio(r, results.get("aiokafka")) if ks else ""
        vs_conf = _ratio(r, results.get("confluent")) if ks else ""
        flag = " ‼" if r.problems else ""
        print(
            f"| {label}{flag} | {r.records:,} | {r.rate:,.0f} | "
            f"{r.rate * cell.size / 1e6:,.1f} | {r.cpu / r.records * 1e6:,.1f} | "
            f"{r.p50_ms:,.1f} | {r.p99_ms:,.1f} | {r.rss_mb:,.0f} | {r.rss_import_mb:,.0f} "
            f"| {vs_aio} | {vs_conf} |"
        )
    for client, r in results.items():
        for problem in r.problems:
            print(f"\n‼ {CLIENTS[client]}: {problem}")
    sys.stdout.flush()


def print_summary(
    cells: list[Cell], table: dict[str, dict[str, Result]], clients: list[str]
) -> None:
    print("\n## Summary: records/s\n")
    print("| cell | " + " | ".join(CLIENTS[c] for c in clients) + " |")
    print("|---|" + "---:|" * len(clients))
    for cell in cells:
        row = table.get(cell.name, {})
        out = []
        for c in clients:
            r = row.get(c)
            out.append("—" if r is None or not math.isfinite(r.elapsed) else f"{r.rate:,.0f}")
        print(f"| {cell.name} | " + " | ".join(out) + " |")


def write_svg(path: pathlib.Path, table: dict[str, dict[str, Result]], clients: list[str]) -> bool:
    """A grouped bar chart of records/s for the CHART_CELLS, as plain SVG text."""
    groups = [(name, table[name]) for name in CHART_CELLS if name in table]
    if not groups:
        return False
    colors = {
        "ks-asyncio": "#1f6feb",
        "ks-trio": "#58a6ff",
        "ks-sync": "#0a3069",
        "aiokafka": "#d97706",
        "confluent": "#16a34a",
        "kafka-python": "#9ca3af",
    }
    rates = [r.rate for _, row in groups for r in row.values() if math.isfinite(r.elapsed)] or [1.0]
    top = max(rates)
    magnitude = 10 ** math.floor(math.log10(top))
    step = next(s * magnitude for s in (0.2, 0.5, 1, 2, 5) if top / (s * magnitude) <= 6)
    ymax = step * math.ceil(top / step)
    width, height = 820, 440
    left, right, plot_top, bottom = 90, 200, 50, 360
    plot_w, plot_h = width - left - right, bottom - plot_top
    bar_w = plot_w / len(groups) / (len(clients) + 1.5)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2:.0f}" y="24" text-anchor="middle" font-size="15" '
        f'font-weight="bold">Producer throughput, 100 B values, 1 partition, acks=1 '
        f"(records/s, higher is better)</text>",
    ]
    tick = 0.0
    while tick <= ymax + step / 2:
        y = bottom - tick / ymax * plot_h
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e5e7eb"/>'
        )
        out.append(f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{tick:,.0f}</text>')
        tick += step
    out.append(
        f'<line x1="{left}" y1="{bottom}" x2="{left + plot_w}" y2="{bottom}" stroke="#374151"/>'
    )
    group_w = plot_w / len(groups)
    for g, (name, row) in enumerate(groups):
        x0 = left + g * group_w + bar_w * 0.75
        for i, client in enumerate(clients):
            r = row.get(client)
            x = x0 + i * bar_w
            if r is None or not math.isfinite(r.elapsed):
                continue
            h = r.rate / ymax * plot_h
            out.append(
                f'<rect x="{x + 2:.1f}" y="{bottom - h:.1f}" width="{bar_w - 4:.1f}" '
                f'height="{h:.1f}" fill="{colors[client]}"><title>{CLIENTS[client]}: '
                f"{r.rate:,.0f} records/s</title></rect>"
            )
            label = f"{r.rate / 1000:,.0f}k" if r.rate >= 1000 else f"{r.rate:,.0f}"
            out.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{bottom - h - 4:.1f}" '
                f'text-anchor="middle" font-size="10">{label}</text>'
            )
        compression = name.rsplit("-", 1)[-1]
        out.append(
            f'<text x="{left + (g + 0.5) * group_w:.1f}" y="{bottom + 22}" '
            f'text-anchor="middle" font-size="13">compression {compression}</text>'
        )
    for i, client in enumerate(clients):
        y = plot_top + 10 + i * 22
        out.append(
            f'<rect x="{left + plot_w + 20}" y="{y}" width="14" height="14" '
            f'fill="{colors[client]}"/>'
        )
        out.append(f'<text x="{left + plot_w + 40}" y="{y + 11}">{CLIENTS[client]}</text>')
    out.append(
        f'<text x="{left}" y="{height - 20}" font-size="11" fill="#4b5563">'
        f"linger.ms={LINGER_MS}, batch.size={BATCH_SIZE}, one local broker; "
        f"bench/bench_producer.py, {datetime.date.today().isoformat()}</text>"
    )
    out.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return True


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for dist in ("kafkastate", "aiokafka", "confluent-kafka", "kafka-python", "trio", "anyio"):
        try:
            found.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            found.append(f"{dist} (not installed)")
    return ", ".join(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few records, a subset of cells")
    parser.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help=f"comma-separated subset of: {', '.join(CLIENTS)}",
    )
    parser.add_argument(
        "--cells",
        default=None,
        help="comma-separated patterns (fnmatch, implicit *...*) over cell names such as "
        "100B-p1-acks1-none, 1KiB-p8-acksall-lz4",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per client and cell; best")
    parser.add_argument(
        "--records",
        type=int,
        default=None,
        help="records per 100 B cell (1 KiB cells: a fifth); kafka-python stays capped",
    )
    parser.add_argument("--bootstrap", default=None, help="HOST:PORT of a running broker")
    parser.add_argument("--svg", default="docs/bench-producer.svg", help="chart path")
    parser.add_argument("--sample-every", type=int, default=100, help="latency sampling")
    parser.add_argument(
        "--worker-timeout", type=float, default=None, help="seconds (default 120 + N/5000)"
    )
    parser.add_argument(
        "--with-hypothesis",
        action="store_true",
        help="let workers import hypothesis (kio does when it is installed; off by default)",
    )
    # worker mode (one client, one cell), used by the parent
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--acks", help=argparse.SUPPRESS)
    parser.add_argument("--compression", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        if not args.with_hypothesis:
            # kio (kafkastate's protocol codec) imports hypothesis, and with it pytest and
            # trio.testing, whenever it is installed: ~20 MB of RSS and 0.2 s of import
            # that a production install (no dev extra) does not have.
            sys.modules["hypothesis"] = None  # type: ignore[assignment]
        _import_client(args.worker)
        worker(
            Job(
                client=args.worker,
                bootstrap=args.bootstrap,
                topic=args.topic,
                size=args.size,
                records=args.records,
                acks=args.acks,
                compression=args.compression,
                sample_every=args.sample_every,
            )
        )
        return

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        parser.error(f"unknown client(s) {unknown}; choose from {', '.join(CLIENTS)}")
    cells = select_cells(args.cells, args.quick)
    if not cells:
        parser.error(f"no cell matches {args.cells!r}; cells: {[c.name for c in ALL_CELLS]}")

    began = time.monotonic()
    broker = Broker(args.bootstrap)
    table: dict[str, dict[str, Result]] = {}
    try:
        print(
            f"# Producer end to end ({platform.python_implementation()} "
            f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs)\n"
        )
        print(
            f"{versions()}. Broker: {broker.description}. linger.ms={LINGER_MS}, "
            f"batch.size={BATCH_SIZE}, idempotence on with acks=all and off with acks=1, "
            f"null keys, default partitioner; best of {args.repeat} by records/s; latency "
            f"sampled every {args.sample_every}th record. † = fewer records (kafka-python is "
            f"capped: records/s is a rate); ‼ = see the note under the table."
        )
        for cell in cells:
            best: dict[str, Result] = {}
            for rep in range(args.repeat):
                shift = rep % len(clients)  # rotate the order run by run
                for client in clients[shift:] + clients[:shift]:
                    n = record_count(client, cell.size, args.quick, args.records)
                    print(f"  {cell.name} {client} x{n:,} (run {rep + 1})", file=sys.stderr)
                    result = run_worker(broker, cell, client, n, args)
                    old = best.get(client)
                    if (
                        old is None
                        or (not result.problems and result.rate > old.rate)
                        or (old.problems and not result.problems)
                    ):
                        best[client] = result
            table[cell.name] = {c: best[c] for c in clients}
            print_cell(cell, table[cell.name])
        print_summary(cells, table, clients)
    finally:
        broker.stop()
    svg = pathlib.Path(args.svg)
    if write_svg(svg, table, clients):
        print(f"\nChart: {svg}")
    else:
        print(f"\nNo chart: the cells {', '.join(CHART_CELLS)} were not run.")
    print(f"\nTotal time {time.monotonic() - began:,.0f} s.")


if __name__ == "__main__":
    main()
