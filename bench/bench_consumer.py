"""End-to-end consumer benchmark against a real broker: kafkastate vs aiokafka, confluent-kafka
and kafka-python, side by side in one run.

The consumer counterpart of ``bench_producer.py`` (whose helpers it imports). Six consumers
read the same pre-filled topic from the beginning: kafkastate on asyncio
(``kafkastate.asyncio.AIOKafkaConsumer``: ``await getmany()`` in a loop), on trio
(``kafkastate.trio.open_consumer`` + ``await consumer.getmany()``) and blocking
(``kafkastate.sync.KafkaConsumer.poll()``), aiokafka's ``AIOKafkaConsumer.getmany()``,
confluent-kafka's ``Consumer.consume(num_messages=500)`` and kafka-python's
``KafkaConsumer.poll()``. At most 500 records per call everywhere (``max_records=500``,
``num_messages=500``), a 1 s wait when nothing is there. The matrix: 1M x 100 B and
200k x 1 KiB values (null keys, JSON-like, compressible 2-4x), 1 and 8 partitions, no
compression and lz4; plus 1 KiB on 1 partition with gzip, snappy and zstd (``./ks bench``
runs the lz4 and zstd ones: filling a compressed topic costs the same as an uncompressed one,
the codec only moves the decompression into each client).

Each cell's topic is filled ONCE by the parent (confluent-kafka's ``Producer``,
``linger.ms=5``, ``batch.size=16384``, the cell's compression: the batches the producer
benchmark's clients write) and checked (end offsets; with a codec, that its log holds at
most 0.8x the value bytes: the batches are compressed); then every client reads that same
topic in a fresh subprocess (``--worker``), and the topic is deleted after the cell. The kafkastate
consumers, aiokafka and kafka-python read without a ``group_id`` (``auto_offset_reset=
"earliest"``, every partition of the topic); confluent-kafka needs a ``group.id``: a fresh one
per run, partitions ``assign()``-ed at ``OFFSET_BEGINNING``, no commits. A worker touches every
record's value (``len(value)``) and stops when it has all N records; it checks it got exactly N
records and N x size value bytes (no loss, no duplicates).

Timing (wall clock) runs from the consumer's construction to the N-th record: connection,
metadata and the offset lookup are included (small against N records; ``first ms``, the time
to the first record, shows how much; ``rec/s after first`` leaves it out: the records after
the first call that returned some, over the time after it). Reported per client and cell:
records/s and MB/s of value payload, the worker's CPU time per record (all its threads:
librdkafka's and kafka-python's included), its peak RSS (``VmHWM``) and RSS after imports,
and kafkastate's records/s against aiokafka's and confluent-kafka's. Workers do not import
hypothesis unless ``--with-hypothesis`` (see ``bench_producer.py``).

    python bench/bench_consumer.py --quick                  # smoke run, about a minute
    python bench/bench_consumer.py                          # the full matrix
    python bench/bench_consumer.py --bootstrap 127.0.0.1:9092 --cells '100B-p1-*' --repeat 3

Without ``--bootstrap`` a broker is started with ``kafkastate.testing.KafkaCluster`` and
stopped at the end.
"""

# Clients are imported inside functions on purpose: a worker imports only the client it runs,
# so one client's modules do not count in another's RSS.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import itertools
import json
import math
import pathlib
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

HERE = pathlib.Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from bench_producer import (  # noqa: E402
    BATCH_SIZE,
    CODECS,
    LINGER_MS,
    POOL,
    BaseCell,
    BaseResult,
    Broker,
    Chart,
    _rss_mb,
    best_of,
    compression_problem,
    cpu_seconds,
    make_parser,
    make_values,
    print_table,
    run_benchmark,
    run_subprocess,
    runners,
)

SIZES = (100, 1024)
PARTITIONS = (1, 8)
COMPRESSIONS = ("none", "lz4")
CONSUMER_CLIENTS = (
    "ks-asyncio",
    "ks-getone",
    "ks-iter",
    "ks-committed",
    "ks-trio",
    "ks-sync",
    "aiokafka",
    "confluent",
    "kafka-python",
)
MAX_RECORDS = 500  # per getmany / poll / consume call, every client
POLL_TIMEOUT_MS = 1000  # the wait when nothing is there
STALL_S = 60.0  # a worker with no new record for this long gives up
# Records per cell: (full, --quick). Every client reads the same topic, so the same N.
RECORDS = {100: (1_000_000, 100_000), 1024: (200_000, 20_000)}
QUICK_CELLS = ("100B-p1-none", "100B-p1-lz4", "100B-p8-none", "1KiB-p1-none")
CHART_CELLS = ("100B-p1-none", "100B-p1-lz4")
SETTINGS = (
    f"Topics filled once per cell by confluent-kafka (linger.ms={LINGER_MS}, "
    f"batch.size={BATCH_SIZE}, the cell's compression), read from the beginning by every "
    f"client; at most {MAX_RECORDS} records per call; default fetch settings; time from "
    "consumer construction to the last record"
)


Cell = BaseCell
ALL_CELLS = [
    *(Cell(s, p, c) for s, p, c in itertools.product(SIZES, PARTITIONS, COMPRESSIONS)),
    *(Cell(1024, 1, c) for c in CODECS if c not in COMPRESSIONS),  # every codec at 1 KiB
]


def record_count(size: int, quick: bool, override: int | None) -> int:
    if override is not None:
        return override if size == 100 else max(1, override // 5)
    return RECORDS[size][1 if quick else 0]


# ---------------------------------------------------------------------------------------------
# worker: one client, one cell, in its own process


@dataclass
class Job:
    client: str
    bootstrap: str
    topic: str
    partitions: int
    records: int


class Tally:
    """Records and value bytes read so far, the first record's time, stall detection."""

    def __init__(self, job: Job, start: float) -> None:
        self.target = job.records
        self.start = start
        self.count = 0
        self.nbytes = 0
        self.first: float | None = None
        self.first_count = 0  # records of the first non-empty call
        self.last_progress = start

    def idle(self) -> None:
        """A call returned nothing: give up after STALL_S without progress."""
        now = time.perf_counter()
        if now - self.last_progress > STALL_S:
            raise RuntimeError(
                f"stalled: {self.count:,}/{self.target:,} records, nothing new for {STALL_S:.0f} s"
            )

    def take(self, batch: dict[Any, list[Any]]) -> None:
        """Count a ``getmany()`` / ``poll()`` result: partition -> records."""
        if not batch:
            self.idle()
            return
        count = nbytes = 0
        for records in batch.values():
            count += len(records)
            for record in records:
                nbytes += len(record.value)
        self.got(count, nbytes)

    def got(self, count: int, nbytes: int) -> None:
        now = time.perf_counter()
        if self.first is None:
            self.first = now
            self.first_count = count
        self.count += count
        self.nbytes += nbytes
        self.last_progress = now

    @property
    def done(self) -> bool:
        return self.count >= self.target


def run_ks_asyncio(job: Job) -> Tally:
    import asyncio

    from kafkastate.asyncio import AIOKafkaConsumer

    return asyncio.run(_run_aio(AIOKafkaConsumer, job))


def run_aiokafka(job: Job) -> Tally:
    import asyncio

    from aiokafka import AIOKafkaConsumer

    return asyncio.run(_run_aio(AIOKafkaConsumer, job))


# kafkastate (asyncio, sync), aiokafka, kafka-python: no group, every partition, from the start
FROM_START = {"group_id": None, "auto_offset_reset": "earliest", "enable_auto_commit": False}


async def _run_aio(cls: Any, job: Job) -> Tally:
    tally = Tally(job, time.perf_counter())
    consumer = cls(job.topic, bootstrap_servers=job.bootstrap, **FROM_START)
    await consumer.start()
    try:
        getmany, take = consumer.getmany, tally.take
        while not tally.done:
            take(await getmany(timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_RECORDS))
        return tally
    finally:
        await consumer.stop()


def _ks_read(job: Job, read: Callable[[Any, Tally], Any], **options: Any) -> Tally:
    """kafkastate's ``AIOKafkaConsumer`` (``FROM_START`` plus ``options``) read to the end
    of the job by ``await read(consumer, tally)``."""
    import asyncio

    from kafkastate.asyncio import AIOKafkaConsumer

    async def main() -> Tally:
        tally = Tally(job, time.perf_counter())
        consumer = AIOKafkaConsumer(
            job.topic, bootstrap_servers=job.bootstrap, **FROM_START, **options
        )
        await consumer.start()
        try:
            await read(consumer, tally)
            return tally
        finally:
            await consumer.stop()

    return asyncio.run(main())


def run_ks_getone(job: Job) -> Tally:
    """kafkastate's ``await getone()`` per record (the issue's goal: within 2x of getmany)."""

    async def read(consumer: Any, tally: Tally) -> None:
        getone, got = consumer.getone, tally.got
        while not tally.done:
            record = await getone()
            got(1, len(record.value))

    return _ks_read(job, read)


def run_ks_iter(job: Job) -> Tally:
    """kafkastate's ``async for record in consumer``."""

    async def read(consumer: Any, tally: Tally) -> None:
        got = tally.got
        async for record in consumer:
            got(1, len(record.value))
            if tally.done:
                break

    return _ks_read(job, read)


def run_ks_committed(job: Job) -> Tally:
    """kafkastate's getmany with ``isolation_level="read_committed"`` (the issue's goal:
    within 10 % of read_uncommitted on a topic without transactions)."""

    async def read(consumer: Any, tally: Tally) -> None:
        getmany, take = consumer.getmany, tally.take
        while not tally.done:
            take(await getmany(timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_RECORDS))

    return _ks_read(job, read, isolation_level="read_committed")


def run_ks_trio(job: Job) -> Tally:
    import trio

    from kafkastate.trio import open_consumer

    async def main() -> Tally:
        tally = Tally(job, time.perf_counter())
        async with open_consumer(
            job.topic, bootstrap_servers=job.bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            getmany, take = consumer.getmany, tally.take
            while not tally.done:
                take(await getmany(timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_RECORDS))
        return tally

    result: Tally = trio.run(main)
    return result


def run_ks_sync(job: Job) -> Tally:
    from kafkastate.sync import KafkaConsumer

    return _run_threaded(KafkaConsumer, job)


def run_kafka_python(job: Job) -> Tally:
    from kafka import KafkaConsumer

    return _run_threaded(KafkaConsumer, job)


def _run_threaded(cls: Any, job: Job) -> Tally:
    tally = Tally(job, time.perf_counter())
    consumer = cls(
        job.topic, bootstrap_servers=job.bootstrap, max_poll_records=MAX_RECORDS, **FROM_START
    )
    try:
        poll, take = consumer.poll, tally.take
        while not tally.done:
            take(poll(timeout_ms=POLL_TIMEOUT_MS, max_records=MAX_RECORDS))
        return tally
    finally:
        consumer.close()


def run_confluent(job: Job) -> Tally:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    tally = Tally(job, time.perf_counter())
    consumer = Consumer(
        {
            "bootstrap.servers": job.bootstrap,
            "group.id": f"bench-consumer-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign(
            [TopicPartition(job.topic, p, OFFSET_BEGINNING) for p in range(job.partitions)]
        )
        consume = consumer.consume
        while not tally.done:
            messages = consume(num_messages=MAX_RECORDS, timeout=POLL_TIMEOUT_MS / 1000)
            if not messages:
                tally.idle()
                continue
            count = nbytes = 0
            for message in messages:
                if message.error():
                    raise KafkaException(message.error())
                count += 1
                nbytes += len(message.value() or b"")
            tally.got(count, nbytes)
        return tally
    finally:
        consumer.close()


RUNNERS: dict[str, Callable[[Job], Tally]] = runners(globals())


def worker(job: Job) -> None:
    """Run one client on one cell; print the result as one JSON line."""
    rss_import = _rss_mb("VmRSS")  # the client's modules are imported, no consumer yet
    cpu0 = cpu_seconds()
    tally = RUNNERS[job.client](job)
    end = time.perf_counter()
    cpu = cpu_seconds() - cpu0
    print(
        json.dumps(
            {
                "client": job.client,
                "records": tally.count,
                "bytes": tally.nbytes,
                "elapsed": end - tally.start,
                "first_ms": ((tally.first or end) - tally.start) * 1000,
                # records/s after the first call that returned records: without start-up
                "steady": (tally.count - tally.first_count) / (end - (tally.first or end) or 1e-9),
                # includes consumer start/stop: small against N records
                "cpu": cpu,
                "rss_mb": _rss_mb(),
                "rss_import_mb": rss_import,
            }
        )
    )


# ---------------------------------------------------------------------------------------------
# parent: broker, topics, workers, report


@dataclass
class Result(BaseResult):
    first_ms: float = math.nan  # time to the first record
    steady: float = math.nan  # records/s after the first call that returned records


def fill_topic(broker: Broker, cell: Cell, records: int) -> tuple[str, float]:
    """Create the cell's topic and write ``records`` values to it (confluent-kafka)."""
    from confluent_kafka import KafkaException, Producer

    topic = f"bench-consumer-{cell.name}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, cell.partitions)
    values = make_values(POOL, cell.size)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "1",
            "enable.idempotence": False,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_SIZE,
            "compression.type": cell.compression,
        }
    )
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for i in range(records):
        value = values[i % POOL]
        while True:
            try:
                produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                poll(0.005)
        poll(0)
    remaining = producer.flush(300)
    elapsed = time.perf_counter() - start
    if remaining or errors:
        raise KafkaException(f"fill: {remaining} records not flushed, errors {errors[:3]}")
    written = broker.count(topic, cell.partitions)
    if written != records:
        raise KafkaException(f"fill: topic {topic} holds {written} records, expected {records}")
    problem = compression_problem(
        broker, topic, cell.partitions, cell.compression, records * cell.size
    )
    if problem is not None:
        raise KafkaException(f"fill: {problem}")
    return topic, elapsed


def run_worker(
    broker: Broker, cell: Cell, topic: str, client: str, *, records: int, args: argparse.Namespace
) -> Result:
    job = [client, broker.bootstrap, topic, records]
    data, problems = run_subprocess(HERE, job, ["--partitions", cell.partitions], args)
    if data is None:
        return Result.failed(client, records, problems)
    if data["records"] != records:
        problems.append(f"read {data['records']:,} records, expected {records:,}")
    if data["bytes"] != records * cell.size:
        problems.append(f"read {data['bytes']:,} value bytes, expected {records * cell.size:,}")
    return Result.from_worker(data, client, problems)


def print_cell(cell: Cell, records: int, fill_s: float, results: dict[str, Result]) -> None:
    print_table(
        f"{cell.title} (`{cell.name}`, {records:,} records, filled in {fill_s:.1f} s)",
        "rec/s | MB/s | CPU µs/rec | first ms | rec/s after first | peak RSS MB "
        "| RSS after import MB",
        results,
        lambda r: [
            f"{r.rate:,.0f}",
            f"{r.rate * cell.size / 1e6:,.1f}",
            f"{r.cpu / max(r.records, 1) * 1e6:,.2f}",
            f"{r.first_ms:,.0f}",
            f"{r.steady:,.0f}",
            f"{r.rss_mb:,.0f}",
            f"{r.rss_import_mb:,.0f}",
        ],
    )


def run_cell(
    broker: Broker, cell: Cell, clients: list[str], args: argparse.Namespace
) -> dict[str, Result]:
    """Fill the cell's topic, let every client read it (best of ``--repeat``), delete it."""
    n = record_count(cell.size, args.quick, args.records)
    print(f"  {cell.name}: filling x{n:,}", file=sys.stderr)
    topic, fill_s = fill_topic(broker, cell, n)

    def run(client: str, rep: int) -> Result:
        print(f"  {cell.name} {client} x{n:,} (run {rep + 1})", file=sys.stderr)
        return run_worker(broker, cell, topic, client, records=n, args=args)

    try:
        results = best_of(clients, args.repeat, run)
    finally:
        try:
            broker.delete_topic(topic)
        except Exception as exc:  # reported, not fatal
            print(f"could not delete topic {topic}: {exc!r}", file=sys.stderr)
    print_cell(cell, n, fill_s, results)
    return results


def main() -> None:
    records_help = "records per 100 B cell (1 KiB cells: a fifth)"
    svg = "docs/bench-consumer.svg"
    parser = make_parser(__doc__, "100B-p1-none, 1KiB-p8-lz4", records_help, svg, CONSUMER_CLIENTS)
    parser.add_argument("--partitions", type=int, help=argparse.SUPPRESS)

    def work(args: argparse.Namespace) -> None:
        worker(Job(args.worker, args.bootstrap, args.topic, args.partitions, args.records))

    chart = Chart(
        CHART_CELLS,
        "Consumer throughput, 100 B values, 1 partition",
        f"at most {MAX_RECORDS} records per call, from the beginning, one local broker; "
        "bench/bench_consumer.py",
    )
    run_benchmark(
        parser,
        "Consumer",
        ALL_CELLS,
        QUICK_CELLS,
        chart,
        worker=work,
        settings=lambda _: SETTINGS,
        run_cell=run_cell,
    )


if __name__ == "__main__":
    main()
