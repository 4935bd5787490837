"""End-to-end producer benchmark against a real broker: kafkastate vs aiokafka, confluent-kafka
and kafka-python, side by side in one run.

Seven producers send the same records to the same local broker: kafkastate on asyncio
(``kafkastate.asyncio.AIOKafkaProducer``: ``await send()`` in a loop, then ``flush()``), on
trio (``kafkastate.trio.open_producer``: ``await producer.enqueue()`` in a loop, then
``flush()``) and blocking (``kafkastate.sync.KafkaProducer``: ``send()`` in a loop, then
``flush()``), aiokafka's ``AIOKafkaProducer``, confluent-kafka's ``Producer`` (``produce()``
then ``poll(0)``, ``poll()`` and retry on ``BufferError``, then ``flush()``) and kafka-python's
``KafkaProducer``, and kafkastate's fire-and-forget ``send_nowait()``
on asyncio (``ks-asyncio-nowait``: no await per record, a yield every 256 records, ``await
send()`` on ``BufferError``). The matrix: 100 B and 1 KiB values (null keys, JSON-like,
compressible 2-4x), 1 and 8 partitions, acks=1 and acks=all, no compression and lz4; plus
10 KiB values and keyed records (1,024 distinct keys) on 8 partitions, and the codec cells:
1 KiB on 1 partition with each of gzip, snappy, lz4 and zstd, and 10 KiB keyed on 8
partitions with zstd -- the cells ``./ks bench`` (``bench_all.py``) runs. A codec cell
checks that the client compressed: the topic's log (DescribeLogDirs) must hold at most
0.8x the value bytes (uncompressed batches hold more than the values). ``--json PATH`` also
writes every result.

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
import dataclasses
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
from typing import Any, NamedTuple, Protocol, Self, TypeVar

HERE = pathlib.Path(__file__).resolve()
if importlib.util.find_spec("kafkastate") is None:  # a checkout without an install
    sys.path.insert(0, str(HERE.parent.parent))

# --clients name -> label in the tables.
CLIENTS = {
    "ks-asyncio": "kafkastate asyncio",
    "ks-asyncio-nowait": "kafkastate asyncio send_nowait",
    "ks-trio": "kafkastate trio",
    "ks-sync": "kafkastate sync",
    "aiokafka": "aiokafka",
    "confluent": "confluent-kafka",
    "kafka-python": "kafka-python",
    # bench_consumer.py's own (each module runs the clients it has a run_<client> for)
    "ks-getone": "kafkastate asyncio getone",
    "ks-iter": "kafkastate asyncio async for",
    "ks-committed": "kafkastate asyncio read_committed",
}
PRODUCER_CLIENTS = (
    "ks-asyncio",
    "ks-asyncio-nowait",
    "ks-trio",
    "ks-sync",
    "aiokafka",
    "confluent",
    "kafka-python",
)
KAFKASTATE = (
    "ks-asyncio",
    "ks-asyncio-nowait",
    "ks-trio",
    "ks-sync",
    "ks-getone",
    "ks-iter",
    "ks-committed",
)
SIZES = (100, 1024)
PARTITIONS = (1, 8)
ACKS = ("1", "all")
COMPRESSIONS = ("none", "lz4")
CODECS = ("gzip", "snappy", "lz4", "zstd")  # every codec of Kafka's record batches
# A codec cell's log (record batches as stored) over its value bytes must be at most this:
# the values compress 2-4x, and uncompressed batches hold more bytes than their values.
STORED_AT_MOST = 0.8
LINGER_MS = 5
BATCH_SIZE = 16384
# Records per cell: (full, --quick); kafka-python is capped (it is the slowest by far and
# records/s is a rate): its own (full, --quick) counts.
RECORDS = {100: (1_000_000, 100_000), 1024: (200_000, 20_000), 10240: (50_000, 5_000)}
KAFKA_PYTHON_RECORDS = {100: (200_000, 100_000), 1024: (50_000, 20_000), 10240: (20_000, 5_000)}
# Codec cells of 1 KiB and 10 KiB take fewer (still 100 MB and 200 MB of values per run): a
# codec costs a client 1.5-4x the time per record (gzip most), and ``./ks bench`` runs five
# such cells for every client and the Java tool.
CODEC_RECORDS = {1024: (100_000, 10_000), 10240: (20_000, 2_000)}
QUICK_CELLS = (
    "100B-p1-acks1-none",
    "100B-p1-acks1-lz4",
    "100B-p8-acksall-none",
    "1KiB-p1-acks1-none",
)
# The two cells of the SVG chart.
CHART_CELLS = ("100B-p1-acks1-none", "100B-p1-acks1-lz4")
CHART_COLORS = {
    "ks-asyncio": "#1f6feb",
    "ks-asyncio-nowait": "#8250df",
    "ks-getone": "#58a6ff",
    "ks-iter": "#0a3069",
    "ks-committed": "#8250df",
    "ks-trio": "#58a6ff",
    "ks-sync": "#0a3069",
    "aiokafka": "#d97706",
    "confluent": "#16a34a",
    "kafka-python": "#9ca3af",
}
POOL = 1024  # distinct values, cycled: a pool, so the values do not count in the RSS
WORDS = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"kafka", b"topic", b"offset"]


class _Named(Protocol):  # a cell, here or in bench_consumer.py
    @property
    def name(self) -> str: ...


class _Measured(Protocol):  # a Result, here or in bench_consumer.py
    @property
    def elapsed(self) -> float: ...
    @property
    def problems(self) -> list[str]: ...
    @property
    def rate(self) -> float: ...


_CellT = TypeVar("_CellT", bound=_Named)
_ResultT = TypeVar("_ResultT", bound=_Measured)


# ---------------------------------------------------------------------------------------------
# cells


@dataclass(frozen=True)
class BaseCell:
    """A cell of the matrix: value size, partitions, compression (the consumer's cells)."""

    size: int
    partitions: int
    compression: str

    def _more(self) -> tuple[str, str]:
        """What a subclass adds to the name and to the title."""
        return "", ""

    @property
    def name(self) -> str:  # 100B-p1-none, 1KiB-p8-acksall-lz4, 10KiB-p1-acks1-keyed-none
        size = f"{self.size // 1024}KiB" if self.size % 1024 == 0 else f"{self.size}B"
        return f"{size}-p{self.partitions}{self._more()[0]}-{self.compression}"

    @property
    def title(self) -> str:
        size = f"{self.size // 1024} KiB" if self.size % 1024 == 0 else f"{self.size} B"
        parts = "1 partition" if self.partitions == 1 else f"{self.partitions} partitions"
        return f"{size} values, {parts}{self._more()[1]}, compression {self.compression}"


@dataclass(frozen=True)
class Cell(BaseCell):
    acks: str
    keyed: bool = False  # a key per record (8 bytes, 1,024 distinct: murmur2 partitioning)

    def _more(self) -> tuple[str, str]:
        if self.keyed:
            return f"-acks{self.acks}-keyed", f", acks={self.acks}, keyed"
        return f"-acks{self.acks}", f", acks={self.acks}"

    @property
    def idempotent(self) -> bool:
        return self.acks == "all"


ALL_CELLS = [
    Cell(s, p, c, a) for s, p, a, c in itertools.product(SIZES, PARTITIONS, ACKS, COMPRESSIONS)
] + [
    # 10 KiB values, and keyed records of every size (``./ks bench``'s matrix)
    Cell(10240, 1, "none", "1"),
    *(Cell(s, 8, "none", "1", keyed=True) for s in (100, 1024, 10240)),
    # every codec at 1 KiB (lz4 is in the product above), and one keyed 10 KiB codec cell
    *(Cell(1024, 1, c, "1") for c in CODECS if c not in COMPRESSIONS),
    Cell(10240, 8, "zstd", "1", keyed=True),
]


def select_cells(
    cells: Sequence[_CellT], quick_cells: Sequence[str], patterns: str | None, quick: bool
) -> list[_CellT]:
    """The cells ``--cells`` names (fnmatch patterns), or all (``--quick``: ``quick_cells``)."""
    if not patterns:
        return [c for c in cells if not quick or c.name in quick_cells]
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    return [c for c in cells if any(fnmatch.fnmatch(c.name, f"*{p}*") for p in pats)]


def cell_records(size: int, compression: str, quick: bool) -> int:
    """Records per client in a cell of ``size``-byte values (``--quick``: fewer): codec
    cells of 1 KiB and 10 KiB take :data:`CODEC_RECORDS`."""
    table = CODEC_RECORDS if compression != "none" and size in CODEC_RECORDS else RECORDS
    return table[size][1 if quick else 0]


def record_count(
    client: str, size: int, quick: bool, override: int | None, compression: str = "none"
) -> int:
    if client == "kafka-python":  # capped: the slowest by far, and records/s is a rate
        n = KAFKA_PYTHON_RECORDS[size][1 if quick else 0]
    else:
        n = cell_records(size, compression, quick)
    if override is not None:
        n = override if size == 100 else max(1, override // 5)
        if client == "kafka-python":
            n = min(n, KAFKA_PYTHON_RECORDS[size][0])
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


KEYS = [b"key-%04d" % i for i in range(POOL)]
NO_KEYS: list[bytes | None] = [None] * POOL


def keys_for(job: Job) -> list[Any]:
    """The key of record i is ``keys[i % POOL]``: None, or 1,024 distinct 8-byte keys."""
    return KEYS if job.keyed else NO_KEYS


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
    keyed: bool = False

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


def _aio_producer(cls: Any, job: Job) -> Any:
    """An aiokafka-style producer (aiokafka's, or kafkastate's) with the job's settings."""
    return cls(
        bootstrap_servers=job.bootstrap,
        acks=1 if job.acks == "1" else "all",
        enable_idempotence=job.idempotent,
        linger_ms=LINGER_MS,
        max_batch_size=BATCH_SIZE,
        compression_type=job.codec,
    )


async def _run_aio(cls: Any, job: Job, values: list[bytes], samples: Samples) -> float:
    producer = _aio_producer(cls, job)
    await producer.start()
    try:
        await producer.send_and_wait(job.topic, values[0])  # warm-up
        topic, every, send, sampled = job.topic, job.sample_every, producer.send, samples.future
        clock, keys = time.perf_counter, keys_for(job)
        start = clock()
        for i in range(job.records):
            if i % every == 0:
                t0 = clock()
                future = await send(topic, values[i % POOL], keys[i % POOL])
                future.add_done_callback(lambda f, t0=t0: sampled(t0, f))
            else:
                await send(topic, values[i % POOL], keys[i % POOL])
        await producer.flush()
        return clock() - start
    finally:
        await producer.stop()


def run_ks_asyncio_nowait(job: Job, values: list[bytes], samples: Samples) -> float:
    """kafkastate's fire-and-forget ``send_nowait()`` (confluent's ``produce()``): no await
    per record; the loop yields every 256 records (confluent's ``poll(0)``) and, when the
    buffer is full (BufferError), awaits ``send()``, which waits for room."""
    import asyncio

    from kafkastate.asyncio import AIOKafkaProducer

    async def main() -> float:
        producer = _aio_producer(AIOKafkaProducer, job)
        await producer.start()
        try:
            await producer.send_and_wait(job.topic, values[0])  # warm-up
            topic, every, sampled = job.topic, job.sample_every, samples.future
            nowait, send, pause = producer.send_nowait, producer.send, asyncio.sleep
            clock, keys = time.perf_counter, keys_for(job)
            start = clock()
            for i in range(job.records):
                value, key = values[i % POOL], keys[i % POOL]
                t0 = clock() if i % every == 0 else 0.0
                try:
                    future = nowait(topic, value, key)
                except BufferError:
                    future = await send(topic, value, key)
                if t0:
                    future.add_done_callback(lambda f, t0=t0: sampled(t0, f))
                if i & 255 == 255:
                    await pause(0)
            await producer.flush()
            return clock() - start
        finally:
            await producer.stop()

    return asyncio.run(main())


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
            clock, keys = time.perf_counter, keys_for(job)
            start = clock()
            for i in range(job.records):
                if i % every == 0:
                    t0 = clock()
                    delivery = await enqueue(topic, values[i % POOL], keys[i % POOL])
                    delivery.add_done_callback(lambda d, t0=t0: sampled(t0, d))
                else:
                    await enqueue(topic, values[i % POOL], keys[i % POOL])
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
        clock, keys = time.perf_counter, keys_for(job)
        start = clock()
        for i in range(job.records):
            if i % every == 0:
                t0 = clock()
                send(topic, values[i % POOL], keys[i % POOL]).add_callback(ok, t0).add_errback(
                    failed, t0
                )
            else:
                send(topic, values[i % POOL], keys[i % POOL])
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
    clock, keys = time.perf_counter, keys_for(job)
    start = clock()
    for i in range(job.records):
        value, key = values[i % POOL], keys[i % POOL]
        if i % every == 0:
            t0 = clock()
            callback = lambda err, msg, t0=t0: sampled(t0, err, msg)  # noqa: E731
            while True:
                try:
                    produce(topic, value, key, on_delivery=callback)
                    break
                except BufferError:
                    poll(0.005)
        else:
            while True:
                try:
                    produce(topic, value, key)
                    break
                except BufferError:
                    poll(0.005)
        poll(0)
    remaining = producer.flush(300)
    elapsed = clock() - start
    if remaining:
        raise KafkaException(f"{remaining} records still queued after flush(300)")
    return elapsed


def runners(namespace: dict[str, Any]) -> dict[str, Callable[..., Any]]:
    """Client -> its ``run_<client>`` function (``-`` as ``_``) in ``namespace``, a module's
    ``globals()``."""
    return {
        client: namespace[name]
        for client in CLIENTS
        if (name := "run_" + client.replace("-", "_")) in namespace
    }


RUNNERS: dict[str, Callable[[Job, list[bytes], Samples], float]] = runners(globals())


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


def cpu_seconds() -> float:
    """This process's CPU time, all threads, user + system (µs resolution: ``os.times()``
    counts 10 ms clock ticks)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


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
    cpu0 = cpu_seconds()
    elapsed = runner(job, values, samples)
    cpu = cpu_seconds() - cpu0
    lat = sorted(samples.latencies)
    print(
        json.dumps(
            {
                "client": job.client,
                "records": job.records,
                "elapsed": elapsed,
                # includes the warm-up and producer start/stop: small against N records
                "cpu": cpu,
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


def prepare_worker(client: str, with_hypothesis: bool) -> None:
    """Import the client's modules, so the baseline RSS includes them; without
    ``--with-hypothesis``, make ``import hypothesis`` fail first."""
    if not with_hypothesis:
        # kio (kafkastate's protocol codec) imports hypothesis, and with it pytest and
        # trio.testing, whenever it is installed: ~20 MB of RSS and 0.2 s of import
        # that a production install (no dev extra) does not have.
        sys.modules["hypothesis"] = None  # type: ignore[assignment]
    ks_asyncio = ["asyncio", "kafkastate.asyncio"]
    modules = {
        "ks-asyncio": ks_asyncio,
        "ks-asyncio-nowait": ks_asyncio,
        "ks-getone": ks_asyncio,
        "ks-iter": ks_asyncio,
        "ks-committed": ks_asyncio,
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
class BaseResult:
    """One client's run on one cell; subclasses add fields (NaN when the worker failed)."""

    client: str
    records: int
    elapsed: float  # inf when the worker failed
    cpu: float
    rss_mb: float
    rss_import_mb: float
    problems: list[str]

    @property
    def rate(self) -> float:
        return self.records / self.elapsed

    @classmethod
    def failed(cls, client: str, records: int, problems: list[str]) -> Self:
        return cls(client, records, math.inf, math.nan, math.nan, math.nan, problems)

    @classmethod
    def from_worker(cls, data: dict[str, Any], client: str, problems: list[str]) -> Self:
        """``client`` and ``problems`` as given, the other fields from the worker's JSON."""
        names = [f.name for f in dataclasses.fields(cls) if f.name not in {"client", "problems"}]
        return cls(client=client, problems=problems, **{name: data[name] for name in names})


@dataclass
class Result(BaseResult):
    p50_ms: float = math.nan
    p99_ms: float = math.nan


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

    def log_bytes(self, name: str, partitions: int) -> int:
        """The bytes the topic's partitions take in the brokers' logs (DescribeLogDirs): its
        record batches as stored, compressed or not."""
        from kafkastate.structs import TopicPartition
        from kafkastate.sync import KafkaAdminClient

        wanted = {TopicPartition(name, p) for p in range(partitions)}
        with KafkaAdminClient(bootstrap_servers=self.bootstrap) as admin:
            found = admin.describe_log_dirs(wanted)
        return sum(
            info.size
            for node in found
            for log_dir in node["log_dirs"]
            for tp, info in log_dir.replicas.items()
            if tp in wanted
        )

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


def compression_problem(
    broker: Broker, topic: str, partitions: int, compression: str, value_bytes: int
) -> str | None:
    """Whether a topic written with ``compression`` is compressed: None (also for "none"),
    or the problem if its log holds more than :data:`STORED_AT_MOST` x its value bytes (a
    client that ignored its ``compression_type``). The ratio goes to stderr."""
    if compression == "none":
        return None
    stored = broker.log_bytes(topic, partitions)
    print(
        f"    {compression}: {value_bytes:,} value bytes stored in {stored:,} "
        f"({value_bytes / max(stored, 1):.1f}x)",
        file=sys.stderr,
    )
    if stored <= STORED_AT_MOST * value_bytes:
        return None
    return (
        f"compression {compression}: the log holds {stored:,} bytes for {value_bytes:,} "
        "bytes of values: not compressed"
    )


def run_worker(
    broker: Broker, cell: Cell, client: str, records: int, args: argparse.Namespace
) -> Result:
    topic = f"bench-{cell.name}-{client}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, cell.partitions)
    data, problems = run_subprocess(
        HERE,
        [client, broker.bootstrap, topic, records],
        [
            "--size",
            cell.size,
            "--acks",
            cell.acks,
            "--compression",
            cell.compression,
            "--sample-every",
            args.sample_every,
            *(["--keyed"] if cell.keyed else []),
        ],
        args,
    )
    try:
        written = broker.count(topic, cell.partitions)
        if data is not None and written != records + 1:  # + the warm-up record
            problems.append(f"topic holds {written} records, expected {records + 1}")
        value_bytes = (records + 1) * cell.size
        codec = compression_problem(broker, topic, cell.partitions, cell.compression, value_bytes)
        if data is not None and codec is not None:
            problems.append(codec)
    except Exception as exc:  # reported, not fatal: the numbers are still printed
        problems.append(f"could not count the topic's records or log bytes: {exc!r}")
    try:
        broker.delete_topic(topic)
    except Exception as exc:
        problems.append(f"could not delete topic {topic}: {exc!r}")
    if data is None:
        return Result.failed(client, records, problems)
    if data["error_count"]:
        problems.append(f"{data['error_count']} sampled records failed, e.g. {data['errors']}")
    if data["samples"] == 0:
        problems.append("no latency samples")
    return Result.from_worker(data, client, problems)


def run_subprocess(
    script: pathlib.Path,
    job: list[Any],
    extra: list[Any],
    args: argparse.Namespace,
    *,
    pythonpath: str | None = None,
) -> tuple[dict[str, Any] | None, list[str]]:
    """Run ``script`` as a worker for ``job`` (client, bootstrap, topic, records) plus the
    ``extra`` options; its result (the last JSON line of its stdout) and what went wrong.
    ``pythonpath``: the worker imports kafkastate from this source tree (a baseline)."""
    client, bootstrap, topic, records = job
    argv = [sys.executable, str(script), "--worker", client, "--bootstrap", bootstrap]
    argv += ["--topic", topic, "--records", str(records), *map(str, extra)]
    if args.with_hypothesis:
        argv.append("--with-hypothesis")
    timeout = args.worker_timeout or 120 + records / 5000
    problems: list[str] = []
    try:
        env = None if pythonpath is None else {**os.environ, "PYTHONPATH": pythonpath}
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, env=env
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        problems.append(f"TIMEOUT after {timeout:.0f} s; stderr tail: {stderr[-800:]!r}")
        return None, problems
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        problems.append(f"worker exit {proc.returncode}; stderr tail: {proc.stderr[-1500:]}")
        return None, problems
    return json.loads(lines[-1]), problems


def best_of(
    clients: list[str], repeat: int, run: Callable[[str, int], _ResultT]
) -> dict[str, _ResultT]:
    """``run(client, rep)`` ``repeat`` times per client, the order rotated run by run; per
    client the fastest run, a clean run before one with problems."""
    best: dict[str, _ResultT] = {}
    for rep in range(repeat):
        shift = rep % len(clients)
        for client in clients[shift:] + clients[:shift]:
            result = run(client, rep)
            old = best.get(client)
            if (
                old is None
                or (not result.problems and result.rate > old.rate)
                or (old.problems and not result.problems)
            ):
                best[client] = result
    return {c: best[c] for c in clients}


def _ratio(a: _Measured | None, b: _Measured | None) -> str:
    if a is None or b is None or a.problems or b.problems:
        return "—"
    return f"{a.rate / b.rate:.2f}"


def ks_ratios(client: str, result: _Measured, results: dict[str, _ResultT]) -> tuple[str, str]:
    """A kafkastate client's records/s over aiokafka's and confluent-kafka's ("" otherwise)."""
    if client not in KAFKASTATE:
        return "", ""
    return _ratio(result, results.get("aiokafka")), _ratio(result, results.get("confluent"))


def print_cell(cell: Cell, results: dict[str, Result]) -> None:
    n = max(r.records for r in results.values())
    print_table(
        f"{cell.title} (`{cell.name}`, {n:,} records)",
        "records | rec/s | MB/s | CPU µs/rec | p50 ms | p99 ms | peak RSS MB | RSS after import MB",
        results,
        lambda r: [
            f"{r.records:,}",
            f"{r.rate:,.0f}",
            f"{r.rate * cell.size / 1e6:,.1f}",
            f"{r.cpu / r.records * 1e6:,.1f}",
            f"{r.p50_ms:,.1f}",
            f"{r.p99_ms:,.1f}",
            f"{r.rss_mb:,.0f}",
            f"{r.rss_import_mb:,.0f}",
        ],
        mark=lambda r: " †" if r.records < n else "",
    )


def print_table(
    heading: str,
    columns: str,
    results: dict[str, _ResultT],
    row: Callable[[_ResultT], list[str]],
    mark: Callable[[_ResultT], str] = lambda _: "",
) -> None:
    """A cell's table: a row per client (``columns``: its headings, " | " between them;
    ``row``: its values), then kafkastate's ratios to aiokafka and confluent-kafka, then
    the problems under the table."""
    heads = ["client", *columns.split(" | "), "ks / aiokafka", "ks / confluent"]
    print(f"\n### {heading}\n")
    print("| " + " | ".join(heads) + " |")
    print("|---|" + "---:|" * (len(heads) - 1))
    for client, r in results.items():
        label = CLIENTS[client] + mark(r)
        if r.problems and not math.isfinite(r.elapsed):
            values = ["FAILED"] + [""] * (len(heads) - 2)
        else:
            label += " ‼" if r.problems else ""
            values = [*row(r), *ks_ratios(client, r, results)]
        print(f"| {label} | " + " | ".join(values) + " |")
    for client, r in results.items():
        for problem in r.problems:
            print(f"\n‼ {CLIENTS[client]}: {problem}")
    sys.stdout.flush()


def print_summary(
    cells: Sequence[_Named], table: dict[str, dict[str, _ResultT]], clients: list[str]
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


def write_json(
    path: pathlib.Path,
    kind: str,
    cells: Sequence[_Named],
    table: dict[str, dict[str, _ResultT]],
) -> None:
    """Every result of the run (what ``bench/bench_all.py`` gathers): one row per cell and
    client, the dataclass's fields plus records/s; failed runs have ``rate`` null."""
    rows = []
    for cell in cells:
        for r in table.get(cell.name, {}).values():
            fields = dataclasses.asdict(r)  # type: ignore[call-overload]
            ok = math.isfinite(r.elapsed)
            rows.append(
                {
                    "kind": kind.lower(),
                    "cell": cell.name,
                    **{k: v for k, v in dataclasses.asdict(cell).items()},  # type: ignore[call-overload]
                    **{
                        k: (v if not isinstance(v, float) or math.isfinite(v) else None)
                        for k, v in fields.items()
                    },
                    "rate": r.rate if ok else None,
                }
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps({"kind": kind.lower(), "versions": versions(), "rows": rows}, indent=1)
    )


def write_svg(
    path: pathlib.Path,
    table: dict[str, dict[str, _ResultT]],
    clients: list[str],
    *,
    chart_cells: Sequence[str],
    title: str,
    footer: str,
) -> bool:
    """A grouped bar chart of records/s for ``chart_cells`` (one group each, labelled by
    the cell name's last part: the compression), drawn by tools/svg_diagrams.py (the
    documentation's plots); False if none was run."""
    sys.path.insert(0, str(HERE.parent.parent))  # the checkout's tools/
    from tools.svg_diagrams import bar_chart_svg

    groups = [(name, table[name]) for name in chart_cells if name in table]
    if not groups:
        return False

    def rate(row: dict[str, _ResultT], client: str) -> float | None:
        r = row.get(client)
        return r.rate if r is not None and math.isfinite(r.elapsed) else None

    svg = bar_chart_svg(
        title,
        [f"compression {name.rsplit('-', 1)[-1]}" for name, _ in groups],
        [(CLIENTS[c], [rate(row, c) for _, row in groups]) for c in clients],
        unit="records/s, higher is better",
        footer=f"{footer}, {datetime.date.today().isoformat()}",
        colours=[CHART_COLORS[c] for c in clients],
        bar_labels=True,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg)
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


def make_parser(
    doc: str, cell_examples: str, records_help: str, svg: str, clients: Sequence[str]
) -> argparse.ArgumentParser:
    """The options both end-to-end benchmarks take (and the hidden worker-mode ones)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few records, a subset of cells")
    parser.add_argument(
        "--clients",
        default=",".join(clients),
        help=f"comma-separated subset of: {', '.join(clients)}",
    )
    parser.add_argument(
        "--cells",
        default=None,
        help="comma-separated patterns (fnmatch, implicit *...*) over cell names such as "
        + cell_examples,
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per client and cell; best")
    parser.add_argument("--records", type=int, default=None, help=records_help)
    parser.add_argument("--bootstrap", default=None, help="HOST:PORT of a running broker")
    parser.add_argument("--svg", default=svg, help="chart path")
    parser.add_argument(
        "--json", default=None, help="also write every result to this JSON file (./ks bench)"
    )
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
    return parser


def clients_and_cells(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    cells: Sequence[_CellT],
    quick_cells: Sequence[str],
) -> tuple[list[str], list[_CellT]]:
    """``--clients`` and ``--cells`` checked (a usage error if either selects nothing)."""
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        parser.error(f"unknown client(s) {unknown}; choose from {', '.join(CLIENTS)}")
    selected = select_cells(cells, quick_cells, args.cells, args.quick)
    if not selected:
        parser.error(f"no cell matches {args.cells!r}; cells: {[c.name for c in cells]}")
    return clients, selected


class Chart(NamedTuple):
    cells: Sequence[str]  # one group of bars each, labelled by the name's last part
    title: str
    footer: str


def run_benchmark(
    parser: argparse.ArgumentParser,
    kind: str,
    cells: Sequence[_CellT],
    quick_cells: Sequence[str],
    chart: Chart,
    *,
    worker: Callable[[argparse.Namespace], None],
    settings: Callable[[argparse.Namespace], str],
    run_cell: Callable[[Broker, _CellT, list[str], argparse.Namespace], dict[str, _ResultT]],
) -> None:
    """Both end-to-end benchmarks' main: in worker mode run ``worker(args)``; else start (or
    connect to) the broker, ``run_cell`` each selected cell, print the tables, draw the chart.
    ``run_cell`` prints its cell's table and returns client -> result; ``settings(args)``
    describes the run under the title."""
    args = parser.parse_args()
    if args.worker:
        prepare_worker(args.worker, args.with_hypothesis)
        worker(args)
        return
    clients, selected = clients_and_cells(parser, args, cells, quick_cells)
    began = time.monotonic()
    broker = Broker(args.bootstrap)
    table: dict[str, dict[str, _ResultT]] = {}
    try:
        print(
            f"# {kind} end to end ({platform.python_implementation()} "
            f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs)\n"
        )
        print(
            f"{versions()}. Broker: {broker.description}. {settings(args)}; best of "
            f"{args.repeat} by records/s. ‼ = see the note under the table."
        )
        for cell in selected:
            table[cell.name] = run_cell(broker, cell, clients, args)
        print_summary(selected, table, clients)
    finally:
        broker.stop()
        if args.json:
            write_json(pathlib.Path(args.json), kind, selected, table)
    svg = pathlib.Path(args.svg)
    if write_svg(
        svg, table, clients, chart_cells=chart.cells, title=chart.title, footer=chart.footer
    ):
        print(f"\nChart: {svg}")
    else:
        print(f"\nNo chart: the cells {', '.join(chart.cells)} were not run.")
    print(f"\nTotal time {time.monotonic() - began:,.0f} s.")


def run_cell(
    broker: Broker, cell: Cell, clients: list[str], args: argparse.Namespace
) -> dict[str, Result]:
    """Every client on one cell, each on a fresh topic (best of ``--repeat``)."""

    def run(client: str, rep: int) -> Result:
        n = record_count(client, cell.size, args.quick, args.records, cell.compression)
        print(f"  {cell.name} {client} x{n:,} (run {rep + 1})", file=sys.stderr)
        return run_worker(broker, cell, client, n, args)

    results = best_of(clients, args.repeat, run)
    print_cell(cell, results)
    return results


def settings(args: argparse.Namespace) -> str:
    return (
        f"linger.ms={LINGER_MS}, batch.size={BATCH_SIZE}, idempotence on with acks=all and off "
        f"with acks=1, null keys, default partitioner; latency sampled every "
        f"{args.sample_every}th record; † = fewer records (kafka-python is capped: records/s "
        f"is a rate)"
    )


def main() -> None:
    parser = make_parser(
        __doc__,
        "100B-p1-acks1-none, 1KiB-p8-acksall-lz4",
        "records per 100 B cell (1 KiB cells: a fifth); kafka-python stays capped",
        "docs/bench-producer.svg",
        PRODUCER_CLIENTS,
    )
    parser.add_argument("--sample-every", type=int, default=100, help="latency sampling")
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--acks", help=argparse.SUPPRESS)
    parser.add_argument("--compression", help=argparse.SUPPRESS)
    parser.add_argument("--keyed", action="store_true", help=argparse.SUPPRESS)

    def work(args: argparse.Namespace) -> None:
        a = args
        worker(
            Job(
                a.worker,
                a.bootstrap,
                a.topic,
                a.size,
                a.records,
                a.acks,
                a.compression,
                a.sample_every,
                a.keyed,
            )
        )

    chart = Chart(
        CHART_CELLS,
        "Producer throughput, 100 B values, 1 partition, acks=1",
        f"linger.ms={LINGER_MS}, batch.size={BATCH_SIZE}, one local broker; "
        "bench/bench_producer.py",
    )
    run_benchmark(
        parser,
        "Producer",
        ALL_CELLS,
        QUICK_CELLS,
        chart,
        worker=work,
        settings=settings,
        run_cell=run_cell,
    )


if __name__ == "__main__":
    main()
