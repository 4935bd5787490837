"""Cost curves: throughput, produce latency and CPU per million records of kafkastate next to
aiokafka and confluent-kafka, against one parameter at a time (``./ks bench --curves``).

Sweeps (every other setting at its base: 100 B values, null keys, 1 partition, acks=1,
``linger.ms=5``, ``batch.size=16384``, no compression, one client per process):

* produce: record size (100 B, 1 KiB, 10 KiB), partitions (1, 10, 100, 1,000; keyed records,
  so every partition gets some), linger (0, 5, 20, 100 ms), producers in one process
  (1, 2, 4: the records split between them, sending concurrently; asyncio tasks, or
  confluent-kafka producers served round-robin by one thread);
* consume: record size, partitions (1 to 1,000), consumers in one process (1, 2, 4 on a
  4-partition topic, the partitions assigned round-robin, reading concurrently).

Each point runs every client in a fresh subprocess (order rotated point by point): kafkastate
asyncio (``await send()`` / ``getmany``), aiokafka (the same calls) and confluent-kafka
(``produce()`` + ``poll(0)`` / ``consume(500)``). Produce points report records/s, the p50
and p99 of send-to-acknowledgement latency (every n-th record sampled) and CPU seconds per
million records (all the worker's threads); consume points report records/s and CPU. Point
sizes are modest (``--records``, default 100,000 records of 100 B, fewer for bigger
values: at most 20 MB of values per point) so the whole run takes about 10-15 minutes.

Writes ``--json`` (the rows ``bench_all.py`` gathers: kind ``curve``) and the charts
``curve-<op>-<sweep>.svg`` (records/s), ``curve-produce-<sweep>-latency.svg`` (p50 and p99)
and ``curve-<op>-cpu.svg`` (CPU s per million records against the record size) into
``--plots``.

    python bench/bench_curves.py --records 20000 --plots /tmp/plots   # a smoke run
"""

# ruff: noqa: PLC0415 -- a worker imports only the client it runs

from __future__ import annotations

import argparse
import asyncio
import json
import math
import pathlib
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

HERE = pathlib.Path(__file__).resolve()
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(ROOT))

from bench_consumer import fill_topic  # noqa: E402
from bench_producer import (  # noqa: E402
    BATCH_SIZE,
    POOL,
    Broker,
    _percentile,
    _rss_mb,
    cpu_seconds,
    make_values,
)

CLIENTS = ("ks-asyncio", "aiokafka", "confluent")
LABELS = {
    "ks-asyncio": "kafkastate asyncio",
    "aiokafka": "aiokafka",
    "confluent": "confluent-kafka",
}
COLOURS = {"ks-asyncio": "#1f6feb", "aiokafka": "#d97706", "confluent": "#16a34a"}
BASE = {"size": 100, "partitions": 1, "linger": 5, "clients": 1}
SWEEPS: dict[str, dict[str, tuple[int, ...]]] = {
    "produce": {
        "size": (100, 1024, 10240),
        "partitions": (1, 10, 100, 1000),
        "linger": (0, 5, 20, 100),
        "clients": (1, 2, 4),
    },
    "consume": {
        "size": (100, 1024, 10240),
        "partitions": (1, 10, 100, 1000),
        "clients": (1, 2, 4),
    },
}
MAX_BYTES = 20_000_000  # values per point, at most
SAMPLES = 2000  # latency samples per produce point, about
KEYS = [b"key-%04d" % i for i in range(POOL)]
X_LABELS = {
    "size": lambda x: f"{x // 1024} KiB" if x % 1024 == 0 else f"{x} B",
    "partitions": lambda x: f"{x:,} partitions",
    "linger": lambda x: f"linger {x} ms",
    "clients": lambda x: f"{x} per process",
}


@dataclass
class Point:
    """One run: a client at one point of one sweep."""

    op: str
    sweep: str
    x: int
    client: str
    bootstrap: str
    topic: str
    records: int
    size: int
    partitions: int
    linger: int
    clients: int

    @property
    def keyed(self) -> bool:
        return self.sweep == "partitions"


# ---------------------------------------------------------------------------------------------
# worker: produce


def _latency(samples: list[float], t0: float) -> Any:
    return lambda _f: samples.append(time.perf_counter() - t0)


async def _produce_aio(cls: Any, point: Point, values: list[bytes], samples: list[float]) -> float:
    producers = [
        cls(
            bootstrap_servers=point.bootstrap,
            acks=1,
            linger_ms=point.linger,
            max_batch_size=BATCH_SIZE,
            enable_idempotence=False,
        )
        for _ in range(point.clients)
    ]
    for p in producers:
        await p.start()
    try:
        for p in producers:
            await p.send_and_wait(point.topic, values[0])  # warm-up
        every = max(1, point.records // SAMPLES)
        keys = KEYS if point.keyed else [None] * POOL

        async def run(p: Any, first: int) -> None:
            send, topic, clock = p.send, point.topic, time.perf_counter
            for i in range(first, point.records, point.clients):
                if i % every == 0:
                    future = await send(topic, values[i % POOL], keys[i % POOL])
                    future.add_done_callback(_latency(samples, clock()))
                else:
                    await send(topic, values[i % POOL], keys[i % POOL])
            await p.flush()

        start = time.perf_counter()
        await asyncio.gather(*(run(p, i) for i, p in enumerate(producers)))
        return time.perf_counter() - start
    finally:
        for p in producers:
            await p.stop()


def _produce_confluent(point: Point, values: list[bytes], samples: list[float]) -> float:
    from confluent_kafka import KafkaException, Producer

    settings = {
        "bootstrap.servers": point.bootstrap,
        "acks": "1",
        "enable.idempotence": False,
        "linger.ms": point.linger,
        "batch.size": BATCH_SIZE,
    }
    producers = [Producer(settings) for _ in range(point.clients)]
    for p in producers:
        p.produce(point.topic, values[0])
        if p.flush(60):
            raise KafkaException("warm-up record not delivered in 60 s")
    every = max(1, point.records // SAMPLES)
    keys = KEYS if point.keyed else [None] * POOL
    topic, clock, k = point.topic, time.perf_counter, point.clients
    start = clock()
    for i in range(point.records):
        p = producers[i % k]
        callback = None
        if i % every == 0:
            t0 = clock()
            callback = lambda err, msg, t0=t0: samples.append(clock() - t0)  # noqa: E731
        while True:
            try:
                p.produce(topic, values[i % POOL], keys[i % POOL], on_delivery=callback)
                break
            except BufferError:
                p.poll(0.005)
        p.poll(0)
    if any(p.flush(300) for p in producers):
        raise KafkaException("records still queued after flush(300)")
    return clock() - start


def _classes(client: str) -> tuple[Any, Any, Any]:
    """The client's producer, consumer and TopicPartition classes (None for confluent-kafka),
    imported before the clocks start, as bench_producer.py's workers do."""
    if client == "aiokafka":
        import aiokafka

        return aiokafka.AIOKafkaProducer, aiokafka.AIOKafkaConsumer, aiokafka.TopicPartition
    if client == "ks-asyncio":
        import kafkastate.asyncio as ks

        return ks.AIOKafkaProducer, ks.AIOKafkaConsumer, ks.TopicPartition
    import confluent_kafka  # noqa: F401

    return None, None, None


def produce(point: Point) -> dict[str, Any]:
    values = make_values(POOL, point.size)
    samples: list[float] = []
    producer_cls, _, _ = _classes(point.client)
    cpu0 = cpu_seconds()
    if point.client == "confluent":
        elapsed = _produce_confluent(point, values, samples)
    else:
        elapsed = asyncio.run(_produce_aio(producer_cls, point, values, samples))
    lat = sorted(samples)
    return {
        "elapsed": elapsed,
        "cpu": cpu_seconds() - cpu0,
        "p50_ms": _percentile(lat, 0.50) * 1000,
        "p99_ms": _percentile(lat, 0.99) * 1000,
    }


# ---------------------------------------------------------------------------------------------
# worker: consume


async def _consume_aio(cls: Any, tp: Any, point: Point) -> int:
    consumers = [
        cls(
            bootstrap_servers=point.bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        for _ in range(point.clients)
    ]
    for c in consumers:
        await c.start()
    try:
        for i, c in enumerate(consumers):
            c.assign([tp(point.topic, p) for p in range(i, point.partitions, point.clients)])
        total = 0

        async def run(c: Any) -> None:
            nonlocal total
            while total < point.records:
                batch = await c.getmany(timeout_ms=200, max_records=500)
                for records in batch.values():
                    total += len(records)
                    for r in records:
                        len(r.value)

        await asyncio.gather(*(run(c) for c in consumers))
        return total
    finally:
        for c in consumers:
            await c.stop()


def _consume_confluent(point: Point) -> int:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumers = []
    for i in range(point.clients):
        c = Consumer(
            {
                "bootstrap.servers": point.bootstrap,
                "group.id": f"bench-curves-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "fetch.queue.backoff.ms": 10,
            }
        )
        parts = range(i, point.partitions, point.clients)
        c.assign([TopicPartition(point.topic, p, OFFSET_BEGINNING) for p in parts])
        consumers.append(c)
    total = 0
    try:
        while total < point.records:
            for c in consumers:
                for m in c.consume(500, 0.05):
                    if m.error() is None:
                        total += 1
                        len(m.value())
        return total
    finally:
        for c in consumers:
            c.close()


def consume(point: Point) -> dict[str, Any]:
    _, consumer_cls, tp = _classes(point.client)
    cpu0 = cpu_seconds()
    start = time.perf_counter()
    if point.client == "confluent":
        total = _consume_confluent(point)
    else:
        total = asyncio.run(_consume_aio(consumer_cls, tp, point))
    elapsed = time.perf_counter() - start
    if total != point.records:
        raise SystemExit(f"read {total} records, expected {point.records}")
    return {"elapsed": elapsed, "cpu": cpu_seconds() - cpu0, "p50_ms": None, "p99_ms": None}


def worker(point: Point) -> None:
    out = produce(point) if point.op == "produce" else consume(point)
    print(json.dumps({**out, "rss_mb": _rss_mb()}))


# ---------------------------------------------------------------------------------------------
# parent


def records_for(size: int, records: int) -> int:
    return max(1000, min(records, MAX_BYTES // size))


def run_point(point: Point, timeout: float) -> dict[str, Any] | None:
    argv = [sys.executable, str(HERE), "--worker", json.dumps(asdict(point))]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        print(f"  {point.client}: timed out after {timeout:.0f} s", file=sys.stderr)
        return None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        print(f"  {point.client}: failed: {proc.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    data: dict[str, Any] = json.loads(lines[-1])
    return data


def sweep_points(
    op: str, sweep: str, args: argparse.Namespace, broker: Broker
) -> list[dict[str, Any]]:
    rows = []
    for n, x in enumerate(SWEEPS[op][sweep]):
        setting = {**BASE, sweep: x}
        if op == "consume" and sweep == "clients":
            setting["partitions"] = max(SWEEPS[op][sweep])
        records = records_for(setting["size"], args.records)
        fill = None
        if op == "consume":
            fill = _Cell(setting["size"], setting["partitions"])
            topic, _ = fill_topic(broker, fill, records)
        order = CLIENTS[n % len(CLIENTS) :] + CLIENTS[: n % len(CLIENTS)]
        for client in order:
            if op == "produce":
                topic = f"bench-curves-{uuid.uuid4().hex[:8]}"
                broker.create_topic(topic, setting["partitions"])
            point = Point(op, sweep, x, client, broker.bootstrap, topic, records, **setting)
            data = run_point(point, timeout=120 + records / 2000)
            if op == "produce":
                broker.delete_topic(topic)
            if data is None:
                continue
            row = {
                "kind": "curve",
                "cell": f"{op}-{sweep}-{x}",
                "op": op,
                "sweep": sweep,
                "x": x,
                "client": client,
                "records": records,
                **data,
                "rate": records / data["elapsed"],
                "cpu_s_per_million": data["cpu"] / records * 1e6,
            }
            rows.append(row)
            lat = (
                ""
                if row["p50_ms"] is None
                else f", p50 {row['p50_ms']:.1f} / p99 {row['p99_ms']:.1f} ms"
            )
            print(
                f"{row['cell']:>24} {LABELS[client]:<20} {row['rate']:>10,.0f} records/s, "
                f"{row['cpu_s_per_million']:.1f} CPU s per million{lat}",
                flush=True,
            )
        if op == "consume":
            broker.delete_topic(topic)
    return rows


@dataclass
class _Cell:
    """What :func:`bench_consumer.fill_topic` needs to know of a topic."""

    size: int
    partitions: int
    compression: str = "none"

    @property
    def name(self) -> str:
        return f"curve-{self.size}B-p{self.partitions}"


def charts(rows: list[dict[str, Any]], footer: str) -> dict[str, str]:
    """The curves as SVG charts (one group per point, one bar per client)."""
    from tools.svg_diagrams import bar_chart_svg

    out = {}

    def draw(name: str, title: str, unit: str, picked: list[dict[str, Any]], field: str) -> None:
        xs = list(dict.fromkeys(r["x"] for r in picked))
        sweep = picked[0]["sweep"]
        value = {(r["x"], r["client"]): r[field] for r in picked}
        clients = [c for c in CLIENTS if any(r["client"] == c for r in picked)]
        out[name] = bar_chart_svg(
            title,
            [X_LABELS[sweep](x) for x in xs],
            [(LABELS[c], [value.get((x, c)) for x in xs]) for c in clients],
            unit=unit,
            footer=footer,
            colours=[COLOURS[c] for c in clients],
            bar_labels=True,
        )

    for op, sweeps in SWEEPS.items():
        for sweep in sweeps:
            picked = [r for r in rows if r["op"] == op and r["sweep"] == sweep]
            if not picked:
                continue
            what = f"{op.capitalize()} vs {sweep}"
            draw(f"curve-{op}-{sweep}.svg", what, "records/s, higher is better", picked, "rate")
            if op == "produce":
                for q in ("p50_ms", "p99_ms"):
                    draw(
                        f"curve-{op}-{sweep}-{q[:3]}.svg",
                        f"{what}: {q[:3]} latency",
                        "ms send to ack, lower is better",
                        picked,
                        q,
                    )
        sized = [r for r in rows if r["op"] == op and r["sweep"] == "size"]
        if sized:
            draw(
                f"curve-{op}-cpu.svg",
                f"{op.capitalize()}: CPU per million records",
                "CPU s, lower is better",
                sized,
                "cpu_s_per_million",
            )
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """Every point as a table: records/s, latency, CPU per client."""
    lines = [
        "| point | client | records/s | p50 ms | p99 ms | CPU s per million | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p50 = "—" if r["p50_ms"] is None else f"{r['p50_ms']:.1f}"
        p99 = "—" if r["p99_ms"] is None else f"{r['p99_ms']:.1f}"
        lines.append(
            f"| `{r['cell']}` | {LABELS[r['client']]} | {r['rate']:,.0f} | {p50} | {p99} "
            f"| {r['cpu_s_per_million']:.1f} | {r['rss_mb']:,.0f} |"
        )
    return "\n".join(lines)


def save(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The charts of ``rows`` into ``--plots``, the rows into ``--json``."""
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    footer = f"./ks bench --curves, {date}, one local broker; docs/performance.md"
    plots = pathlib.Path(args.plots)
    plots.mkdir(parents=True, exist_ok=True)
    for name, svg in charts(rows, footer).items():
        (plots / name).write_text(svg)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=None, help="HOST:PORT of a running broker")
    parser.add_argument("--records", type=int, default=100_000, help="records per 100 B point")
    parser.add_argument("--ops", default="produce,consume", help="produce, consume or both")
    parser.add_argument("--sweeps", default=None, help="comma subset of size,partitions,...")
    parser.add_argument("--plots", default=str(ROOT / "docs" / "plots"), help="chart directory")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Point(**json.loads(args.worker)))
        return
    wanted = None if args.sweeps is None else set(args.sweeps.split(","))
    began = time.monotonic()
    broker = Broker(args.bootstrap)
    rows: list[dict[str, Any]] = []
    try:
        for op in args.ops.split(","):
            for sweep in SWEEPS[op]:
                if wanted is None or sweep in wanted:
                    rows += sweep_points(op, sweep, args, broker)
                    save(rows, args)  # after every sweep: a run cut short keeps its curves
    finally:
        broker.stop()
    print("\n" + markdown(rows))
    print(f"\ncurves: {len(rows)} runs in {time.monotonic() - began:,.0f} s")
    if not rows or any(not math.isfinite(r["rate"]) for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
