"""One-record-at-a-time consumption (``getone``) against a real broker: does the per-record
cost grow with the number of assigned partitions?

Two topics hold the same N records of 100 B (null keys, the JSON-like values of
``bench_producer.py``): one with 1 partition and one with 1,000 partitions (the records
spread evenly, N / 1,000 per partition, written partition by partition so that every
partition holds whole batches as in the 1-partition topic). Three clients read every record
of a topic with ``getone()``, one call per record: kafkastate on asyncio
(``kafkastate.asyncio.AIOKafkaConsumer``), kafkastate on trio (``kafkastate.trio.
open_consumer``) and aiokafka's ``AIOKafkaConsumer`` for reference. Each read runs in a fresh
subprocess (``--worker``): no group, every partition ``assign()``-ed, ``seek_to_beginning()``,
then ``getone()`` until N records (it checks it got N records and N x 100 value bytes).

The figure of merit is the ratio ``rate(1,000 partitions) / rate(1 partition)`` per client.
The machine may be shared and loaded, so absolute rates drift: every round runs every client
on both topics back to back (the order of the topics alternates round by round, the order of
the clients rotates), and the ratio is taken within the round; the table reports the median
over rounds and the spread (min-max). The rate counted is the steady one: records after the
first over the time after the first record (the start, with its 1,000 offset lookups, is
left out; ``first ms`` shows it).

    python bench/bench_getone.py --quick              # smoke run: 10,000 records, 1 round
    python bench/bench_getone.py                      # 100,000 records, 5 rounds
    python bench/bench_getone.py --records 50000 --rounds 5 --clients ks-asyncio,aiokafka

``--vs-getmany`` measures the other figure of merit, the cost of one record at a time
against ``getmany`` (issue 23's goal: ``getone`` and ``async for`` within 2x of ``getmany``
per record): one 1-partition topic of N records (default 1,000,000), read by kafkastate's
``getmany`` (500 records per call), ``getone`` and ``async for`` on asyncio
(``AIOKafkaConsumer``) and trio (``open_consumer``), and aiokafka's ``getmany`` and
``getone``; every round runs every client (the order rotates), and the table gives each
client's CPU µs per record and its ratio to the same runtime's ``getmany`` taken within the
round (median and spread over rounds). ``--baseline DIR`` also runs every kafkastate client
with kafkastate imported from the source tree DIR (e.g. ``git archive main``), in the same
rounds: before/after ratios from one run.

    python bench/bench_getone.py --vs-getmany --rounds 3
    python bench/bench_getone.py --vs-getmany --records 200000 --baseline /tmp/ks-main

Without ``--bootstrap`` a broker is started with ``kafkastate.testing.KafkaCluster`` and
stopped at the end.
"""

# Clients are imported inside functions on purpose: a worker imports only the client it runs.
# ruff: noqa: PLC0415

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

HERE = pathlib.Path(__file__).resolve()
sys.path.insert(0, str(HERE.parent))

from bench_producer import (  # noqa: E402
    BATCH_SIZE,
    CLIENTS,
    LINGER_MS,
    POOL,
    Broker,
    cpu_seconds,
    make_values,
    prepare_worker,
    run_subprocess,
    versions,
)

SIZE = 100
PARTITIONS = (1, 1000)
RECORDS = (100_000, 10_000)  # full, --quick
ROUNDS = (5, 1)  # full, --quick
GETONE_CLIENTS = ("ks-asyncio", "ks-trio", "aiokafka")
# --vs-getmany: client -> (runtime, the same runtime's getmany client)
VS_CLIENTS = {
    "ks-getmany": "ks-getmany",
    "ks-asyncio": "ks-getmany",
    "ks-iter": "ks-getmany",
    "ks-trio-getmany": "ks-trio-getmany",
    "ks-trio": "ks-trio-getmany",
    "ks-trio-iter": "ks-trio-getmany",
    "aiokafka-getmany": "aiokafka-getmany",
    "aiokafka": "aiokafka-getmany",
}
VS_LABELS = {
    "ks-getmany": "kafkastate asyncio getmany",
    "ks-asyncio": "kafkastate asyncio getone",
    "ks-iter": "kafkastate asyncio async for",
    "ks-trio-getmany": "kafkastate trio getmany",
    "ks-trio": "kafkastate trio getone",
    "ks-trio-iter": "kafkastate trio async for",
    "aiokafka-getmany": "aiokafka getmany",
    "aiokafka": "aiokafka getone",
}
VS_RECORDS = (1_000_000, 100_000)  # full, --quick
MAX_RECORDS = 500  # per getmany call
PREPARED_AS = {  # the modules a worker imports first, as bench_producer's clients
    "ks-getmany": "ks-asyncio",
    "ks-trio-getmany": "ks-trio",
    "ks-trio-iter": "ks-trio",
    "aiokafka-getmany": "aiokafka",
}


# ---------------------------------------------------------------------------------------------
# worker: one client, one topic, in its own process


@dataclass
class Job:
    client: str
    bootstrap: str
    topic: str
    partitions: int
    records: int


class Tally:
    """Records and value bytes read so far; the first record's time."""

    def __init__(self, job: Job) -> None:
        self.target = job.records
        self.start = time.perf_counter()
        self.count = 0
        self.nbytes = 0
        self.first: float | None = None
        self.first_cpu = 0.0

    def got(self, value: bytes | None) -> None:
        if self.first is None:
            self.first = time.perf_counter()
            self.first_cpu = cpu_seconds()
        self.count += 1
        self.nbytes += len(value or b"")

    def got_many(self, batch: dict[Any, list[Any]]) -> None:
        """A ``getmany()`` result (the first record's time is the first batch's: the
        steady figures then count 499 records too many in a million)."""
        for records in batch.values():
            if self.first is None and records:
                self.first = time.perf_counter()
                self.first_cpu = cpu_seconds()
            self.count += len(records)
            self.nbytes += sum(len(r.value or b"") for r in records)


async def _getone_loop(consumer: Any, tally: Tally) -> None:
    """``getone()`` until the target (a stall ends at the parent's worker timeout)."""
    getone, got, target = consumer.getone, tally.got, tally.target
    while tally.count < target:
        record = await getone()
        got(record.value)


async def _getmany_loop(consumer: Any, tally: Tally) -> None:
    """``getmany()`` (500 records at most) until the target."""
    getmany, got_many, target = consumer.getmany, tally.got_many, tally.target
    while tally.count < target:
        got_many(await getmany(timeout_ms=1000, max_records=MAX_RECORDS))


async def _iter_loop(consumer: Any, tally: Tally) -> None:
    """``async for`` until the target."""
    got, target = tally.got, tally.target
    async for record in consumer:
        got(record.value)
        if tally.count >= target:
            break


def run_ks_asyncio(job: Job) -> Tally:
    import asyncio

    from kafkastate.asyncio import AIOKafkaConsumer

    return asyncio.run(_run_aio(AIOKafkaConsumer, job))


def run_ks_getmany(job: Job) -> Tally:
    import asyncio

    from kafkastate.asyncio import AIOKafkaConsumer

    return asyncio.run(_run_aio(AIOKafkaConsumer, job, _getmany_loop))


def run_ks_iter(job: Job) -> Tally:
    import asyncio

    from kafkastate.asyncio import AIOKafkaConsumer

    return asyncio.run(_run_aio(AIOKafkaConsumer, job, _iter_loop))


def run_aiokafka(job: Job) -> Tally:
    import asyncio

    from aiokafka import AIOKafkaConsumer

    return asyncio.run(_run_aio(AIOKafkaConsumer, job))


def run_aiokafka_getmany(job: Job) -> Tally:
    import asyncio

    from aiokafka import AIOKafkaConsumer

    return asyncio.run(_run_aio(AIOKafkaConsumer, job, _getmany_loop))


async def _run_aio(cls: Any, job: Job, loop: Callable[[Any, Tally], Any] = _getone_loop) -> Tally:
    tally = Tally(job)
    consumer = cls(
        bootstrap_servers=job.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        # aiokafka wants its TopicPartition; kafkastate takes that, as any (topic, partition)
        from aiokafka.structs import TopicPartition

        consumer.assign([TopicPartition(job.topic, p) for p in range(job.partitions)])
        await consumer.seek_to_beginning()
        await loop(consumer, tally)
        return tally
    finally:
        await consumer.stop()


def run_ks_trio(job: Job, loop: Callable[[Any, Tally], Any] = _getone_loop) -> Tally:
    import trio

    from kafkastate.trio import open_consumer

    async def main() -> Tally:
        tally = Tally(job)
        async with open_consumer(
            bootstrap_servers=job.bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([(job.topic, p) for p in range(job.partitions)])
            await consumer.seek_to_beginning()
            await loop(consumer, tally)
        return tally

    result: Tally = trio.run(main)
    return result


RUNNERS: dict[str, Callable[[Job], Tally]] = {
    "ks-asyncio": run_ks_asyncio,
    "ks-getmany": run_ks_getmany,
    "ks-iter": run_ks_iter,
    "ks-trio": run_ks_trio,
    "ks-trio-getmany": lambda job: run_ks_trio(job, _getmany_loop),
    "ks-trio-iter": lambda job: run_ks_trio(job, _iter_loop),
    "aiokafka": run_aiokafka,
    "aiokafka-getmany": run_aiokafka_getmany,
}


def worker(job: Job) -> None:
    """Run one client on one topic; print the result as one JSON line."""
    cpu0 = cpu_seconds()
    tally = RUNNERS[job.client](job)
    end = time.perf_counter()
    cpu_end = cpu_seconds()
    cpu = cpu_end - cpu0
    first = tally.first or end
    print(
        json.dumps(
            {
                "client": job.client,
                "records": tally.count,
                "bytes": tally.nbytes,
                "elapsed": end - tally.start,
                "first_ms": (first - tally.start) * 1000,
                "steady": (tally.count - 1) / max(end - first, 1e-9),
                "cpu": cpu,
                # CPU time per record after the first: what the load of other processes
                # leaves alone (a worker is one thread; all its threads count)
                "steady_cpu_us": (cpu_end - tally.first_cpu) / max(tally.count - 1, 1) * 1e6,
            }
        )
    )


# ---------------------------------------------------------------------------------------------
# parent: broker, topics, rounds, report


@dataclass
class Run:
    rate: float  # records/s after the first record
    first_ms: float
    cpu_us: float  # the worker's CPU time per record after the first record
    problems: list[str] = field(default_factory=list)


def fill_topic(broker: Broker, partitions: int, records: int) -> tuple[str, float]:
    """A fresh topic of ``partitions`` partitions holding ``records`` 100 B values,
    ``records / partitions`` per partition, written partition by partition (confluent-kafka,
    the batch settings of the other benchmarks)."""
    from confluent_kafka import KafkaException, Producer

    topic = f"bench-getone-p{partitions}-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, partitions)
    values = make_values(POOL, SIZE)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "1",
            "enable.idempotence": False,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_SIZE,
        }
    )
    errors: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for i in range(records):
        partition = i * partitions // records
        while True:
            try:
                produce(topic, values[i % POOL], partition=partition, on_delivery=delivered)
                break
            except BufferError:
                poll(0.005)
        poll(0)
    remaining = producer.flush(300)
    elapsed = time.perf_counter() - start
    if remaining or errors:
        raise KafkaException(f"fill: {remaining} records not flushed, errors {errors[:3]}")
    written = broker.count(topic, partitions)
    if written != records:
        raise KafkaException(f"fill: topic {topic} holds {written} records, expected {records}")
    return topic, elapsed


def run_one(
    broker: Broker,
    client: str,
    topic: str,
    partitions: int,
    *,
    records: int,
    args: Any,
    pythonpath: str | None = None,
) -> Run:
    data, problems = run_subprocess(
        HERE,
        [client, broker.bootstrap, topic, records],
        ["--partitions", partitions],
        args,
        pythonpath=pythonpath,
    )
    if data is None:
        return Run(float("nan"), float("nan"), float("nan"), problems)
    if data["records"] != records:
        problems.append(f"read {data['records']:,} records, expected {records:,}")
    if data["bytes"] != records * SIZE:
        problems.append(f"read {data['bytes']:,} value bytes, expected {records * SIZE:,}")
    return Run(data["steady"], data["first_ms"], data["steady_cpu_us"], problems)


def _spread(values: list[float], fmt: str) -> str:
    if not values:
        return "—"
    return f"{format(min(values), fmt)}-{format(max(values), fmt)}"


def _ratios(one: list[Run], many: list[Run], of: Callable[[Run, Run], float]) -> list[float]:
    """``of(1p run, 1000p run)`` per round where both runs went well."""
    return [of(o, m) for o, m in zip(one, many, strict=True) if not o.problems and not m.problems]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(
    clients: list[str], runs: dict[tuple[str, int], list[Run]], rounds: int, records: int
) -> None:
    print(f"\n### getone: 1,000 partitions against 1 ({records:,} records of {SIZE} B)\n")
    print(
        "| client | 1p rec/s | 1000p rec/s | **1000p/1p rec/s ratio** | spread "
        "| 1p CPU µs/rec | 1000p CPU µs/rec | 1p/1000p CPU ratio | spread | 1000p first ms |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    problems: list[str] = []
    for client in clients:
        one, many = runs[(client, 1)], runs[(client, 1000)]
        rate = _ratios(one, many, lambda o, m: m.rate / o.rate)
        cpu = _ratios(one, many, lambda o, m: o.cpu_us / m.cpu_us)
        for r in one + many:
            problems.extend(f"{CLIENTS[client]}: {p}" for p in r.problems)

        def med(rs: list[Run], attr: str) -> float:
            return _median([getattr(r, attr) for r in rs if not r.problems])

        print(
            f"| {CLIENTS[client]} | {med(one, 'rate'):,.0f} | {med(many, 'rate'):,.0f} "
            f"| **{_median(rate):.2f}** | {_spread(rate, '.2f')} "
            f"| {med(one, 'cpu_us'):,.2f} | {med(many, 'cpu_us'):,.2f} "
            f"| {_median(cpu):.2f} | {_spread(cpu, '.2f')} | {med(many, 'first_ms'):,.0f} |"
        )
    print(
        f"\n{len(clients)} clients x {rounds} round(s); medians over rounds; a ratio is taken "
        "within a round (the 1p and 1000p reads back to back), spread = its min-max over "
        "rounds. rec/s and CPU µs/rec count the records after the first (start-up left out); "
        "the CPU ratio (1p CPU per record over 1000p's) is the same figure by process CPU "
        "time, which other processes' load leaves alone."
    )
    for problem in problems:
        print(f"\n‼ {problem}")
    print("\nPer round (rec/s 1p / 1000p; CPU µs/rec 1p / 1000p):\n")
    print("| client | " + " | ".join(f"round {i + 1}" for i in range(rounds)) + " |")
    print("|---|" + "---:|" * rounds)
    for client in clients:
        cells = [
            f"{o.rate:,.0f} / {m.rate:,.0f}; {o.cpu_us:.2f} / {m.cpu_us:.2f}"
            for o, m in zip(runs[(client, 1)], runs[(client, 1000)], strict=True)
        ]
        print(f"| {CLIENTS[client]} | " + " | ".join(cells) + " |")
    sys.stdout.flush()


def _progress(line: str, run: Run) -> None:
    """One run's line on stderr, with its problems."""
    print(f"  {line}" + (f" ‼ {run.problems}" if run.problems else ""), file=sys.stderr)


def _clean_up(broker: Broker, topics: list[str]) -> None:
    """Delete the topics (a failure is reported, not fatal) and stop the broker."""
    for topic in topics:
        try:
            broker.delete_topic(topic)
        except Exception as exc:  # reported, not fatal
            print(f"could not delete topic {topic}: {exc!r}", file=sys.stderr)
    broker.stop()


def vs_getmany(args: Any, clients: list[str]) -> None:
    """``--vs-getmany``: each client's CPU per record against its runtime's getmany, in
    rounds (and against the ``--baseline`` tree's, when given)."""
    records = args.records or VS_RECORDS[1 if args.quick else 0]
    rounds = args.rounds or ROUNDS[1 if args.quick else 0]
    trees: list[tuple[str, str | None]] = [("", None)]
    if args.baseline:
        trees.append((" (baseline)", str(pathlib.Path(args.baseline).resolve())))
    variants = [
        (client, tag, path)
        for client in clients
        for tag, path in trees
        if path is None or client.startswith("ks-")
    ]
    runs: dict[tuple[str, str], list[Run]] = {(c, t): [] for c, t, _ in variants}
    began = time.monotonic()
    load_before = load()
    broker = Broker(args.bootstrap)
    topic = ""
    try:
        print(
            f"# one record at a time against getmany ({platform.python_implementation()} "
            f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs)\n"
        )
        print(f"{versions()}. Broker: {broker.description}.")
        print(f"  filling 1 partition x{records:,}", file=sys.stderr)
        topic, fill_s = fill_topic(broker, 1, records)
        print(f"  filled in {fill_s:.1f} s", file=sys.stderr)
        for rnd in range(rounds):
            shift = rnd % len(variants)
            for client, tag, path in variants[shift:] + variants[:shift]:
                run = run_one(broker, client, topic, 1, records=records, args=args, pythonpath=path)
                runs[(client, tag)].append(run)
                _progress(f"round {rnd + 1} {client}{tag}: {run.cpu_us:.2f} µs/rec", run)
    finally:
        _clean_up(broker, [topic] if topic else [])

    def per_round(a: list[Run], b: list[Run]) -> list[float]:
        return [
            x.cpu_us / y.cpu_us for x, y in zip(a, b, strict=True) if not (x.problems or y.problems)
        ]

    print(f"\n### CPU per record against getmany ({records:,} records of {SIZE} B, 1 partition)\n")
    print(
        "| client | CPU µs/rec | rec/s | **CPU / getmany's** | spread "
        + ("| CPU / baseline's | spread " if args.baseline else "")
        + "|"
    )
    print("|---|---:|---:|---:|---:|" + ("---:|---:|" if args.baseline else ""))
    problems: list[str] = []
    for client, tag, _path in variants:
        mine = runs[(client, tag)]
        base = runs.get((VS_CLIENTS[client], tag), [])
        vs = per_round(mine, base) if base else []
        good = [r for r in mine if not r.problems]
        problems.extend(f"{VS_LABELS[client]}{tag}: {p}" for r in mine for p in r.problems)
        row = (
            f"| {VS_LABELS[client]}{tag} | {_median([r.cpu_us for r in good]):.2f} "
            f"| {_median([r.rate for r in good]):,.0f} | **{_median(vs):.2f}** "
            f"| {_spread(vs, '.2f')} |"
        )
        if args.baseline:
            before = runs.get((client, trees[-1][0])) if tag == "" else None
            after = per_round(mine, before) if before else []
            row += f" {_median(after):.2f} | {_spread(after, '.2f')} |" if after else " | |"
        print(row)
    print(
        f"\n{len(variants)} runs x {rounds} round(s), the order rotating; CPU µs per record "
        "of the worker process (all threads) after its first record; ratios are taken within "
        "a round, the table gives their median and min-max."
    )
    for problem in problems:
        print(f"\n‼ {problem}")
    print(f"\nLoad average (1/5/15 min) before: {load_before}; after: {load()}.")
    print(f"\nTotal time {time.monotonic() - began:,.0f} s.")


def load() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} / {five:.2f} / {fifteen:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 records, 1 round")
    parser.add_argument(
        "--clients",
        default=None,
        help=f"comma-separated subset of: {', '.join(GETONE_CLIENTS)}",
    )
    parser.add_argument("--records", type=int, default=None, help="records per topic")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 5; --quick 1)")
    parser.add_argument("--bootstrap", default=None, help="HOST:PORT of a running broker")
    parser.add_argument("--worker-timeout", type=float, default=None, help="seconds per read")
    parser.add_argument(
        "--with-hypothesis", action="store_true", help="let workers import hypothesis"
    )
    parser.add_argument(
        "--vs-getmany",
        action="store_true",
        help="getone and async for against getmany, CPU per record (clients: "
        + ", ".join(VS_CLIENTS)
        + ")",
    )
    parser.add_argument(
        "--baseline", default=None, help="--vs-getmany: also run kafkastate from this tree"
    )
    # worker mode (one client, one topic), used by the parent
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--partitions", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        prepare_worker(PREPARED_AS.get(args.worker, args.worker), args.with_hypothesis)
        worker(Job(args.worker, args.bootstrap, args.topic, args.partitions, args.records))
        return

    if args.vs_getmany:
        chosen = args.clients if args.clients is not None else ",".join(VS_CLIENTS)
        picked = [c.strip() for c in chosen.split(",") if c.strip()]
        if not picked or any(c not in VS_CLIENTS for c in picked):
            parser.error(f"--vs-getmany clients: choose from {', '.join(VS_CLIENTS)}")
        vs_getmany(args, picked)
        return
    clients = [c.strip() for c in (args.clients or ",".join(GETONE_CLIENTS)).split(",")]
    clients = [c for c in clients if c]
    unknown = [c for c in clients if c not in GETONE_CLIENTS]
    if unknown or not clients:
        parser.error(f"unknown client(s) {unknown}; choose from {', '.join(GETONE_CLIENTS)}")
    records = args.records or RECORDS[1 if args.quick else 0]
    if records % PARTITIONS[-1]:
        parser.error(f"--records must be a multiple of {PARTITIONS[-1]}")
    rounds = args.rounds or ROUNDS[1 if args.quick else 0]
    began = time.monotonic()
    load_before = load()
    broker = Broker(args.bootstrap)
    topics: dict[int, str] = {}
    runs: dict[tuple[str, int], list[Run]] = {(c, p): [] for c in clients for p in PARTITIONS}
    try:
        print(
            f"# getone against partition count ({platform.python_implementation()} "
            f"{platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs)\n"
        )
        print(f"{versions()}. Broker: {broker.description}.")
        for partitions in PARTITIONS:
            print(f"  filling {partitions} partition(s) x{records:,}", file=sys.stderr)
            topics[partitions], fill_s = fill_topic(broker, partitions, records)
            print(f"  filled in {fill_s:.1f} s", file=sys.stderr)
        for rnd in range(rounds):
            shift = rnd % len(clients)
            for client in clients[shift:] + clients[:shift]:
                order = PARTITIONS if rnd % 2 == 0 else PARTITIONS[::-1]
                for partitions in order:
                    run = run_one(
                        broker, client, topics[partitions], partitions, records=records, args=args
                    )
                    runs[(client, partitions)].append(run)
                    _progress(f"round {rnd + 1} {client} p{partitions}: {run.rate:,.0f} rec/s", run)
    finally:
        _clean_up(broker, list(topics.values()))
    report(clients, runs, rounds, records)
    print(f"\nLoad average (1/5/15 min) before: {load_before}; after: {load()}.")
    print(f"\nTotal time {time.monotonic() - began:,.0f} s.")


if __name__ == "__main__":
    main()
