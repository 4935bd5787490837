"""What the core's counters cost the producer: send throughput with the counters as built vs.
without them, as a ratio (issue 20: under 3 %).

Two baselines:

* ``--baseline stub`` (default): the same code with :meth:`kafkastate.core.metrics.Stat.record`
  replaced by a no-op -- what the windowed statistics cost (the few integer counters and
  the calls themselves stay);
* ``--baseline PATH``: another checkout of kafkastate (``/work/main``, a worktree of the
  commit before the counters) run by the same interpreter -- the whole difference.

Each round runs both variants, in alternating order, each in a fresh subprocess against a
fresh topic on the same broker: N records of ``--size`` bytes through ``--client``
(``sync``: ``kafkastate.sync.KafkaProducer``; ``asyncio``: ``kafkastate.asyncio.
AIOKafkaProducer``), ``linger_ms=5``, ``acks=1``, one partition, after a warm-up record.
Reported: the median over ``--repeat`` rounds of the client process's CPU time per record
(all threads; the broker is another process) and of records/s (wall clock), and the ratios
with/without. Also a core-only figure: the cost of one ``Stat.record`` call.

    python bench/bench_metrics_overhead.py --quick
    python bench/bench_metrics_overhead.py --bootstrap 127.0.0.1:9092 --repeat 7
    python bench/bench_metrics_overhead.py --baseline /work/main --client asyncio

Without ``--bootstrap`` (or ``KAFKASTATE_BOOTSTRAP``) a broker is started with
``kafkastate.testing.KafkaCluster`` and stopped at the end.
"""

# ruff: noqa: PLC0415 -- the worker imports the client after choosing the code under test

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent


def stat_calls(machine: Any) -> int:
    """How many ``Stat.record`` calls a producer machine made (every Stat counts its own)."""
    from kafkastate.core.metrics import Stat

    total = 0
    for counters in (machine.counters, machine.client.counters):
        for name in counters.__slots__:
            value = getattr(counters, name)
            stats = value.values() if isinstance(value, dict) else [value]
            total += sum(s.count for s in stats if isinstance(s, Stat))
    return total


def worker(args: argparse.Namespace) -> None:
    """One measured run; prints ``{"cpu": s, "wall": s, "n": records, "calls": n}``."""
    if args.stub:
        from kafkastate.core import metrics

        def record(self: Any, value: float, now: float) -> None:
            pass

        metrics.Stat.record = record  # type: ignore[method-assign]
    value = b"x" * args.size
    n = args.records
    if args.client == "sync":
        from kafkastate.sync import KafkaProducer

        with KafkaProducer(bootstrap_servers=args.bootstrap, linger_ms=5, acks=1) as producer:
            producer.send(args.topic, value).get(timeout=60)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            send = producer.send
            for _ in range(n):
                send(args.topic, value)
            producer.flush()
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
            machine = producer._io.machine if producer._io is not None else None
    else:
        import asyncio

        from kafkastate.asyncio import AIOKafkaProducer

        async def run() -> tuple[float, float, Any]:
            async with AIOKafkaProducer(
                bootstrap_servers=args.bootstrap, linger_ms=5, acks=1
            ) as producer:
                await (await producer.send(args.topic, value))
                cpu0, wall0 = time.process_time(), time.perf_counter()
                send = producer.send
                for _ in range(n):
                    await send(args.topic, value)
                await producer.flush()
                inner = producer._producer
                done = time.process_time() - cpu0, time.perf_counter() - wall0
                return (*done, None if inner is None else inner.machine)

        cpu, wall, machine = asyncio.run(run())
    calls = -1
    if not args.stub and machine is not None and hasattr(machine, "counters"):
        calls = stat_calls(machine)
    print(json.dumps({"cpu": cpu, "wall": wall, "n": n, "calls": calls}))


def _topic(bootstrap: str) -> str:
    from kafkastate.adapters.blocking import BlockingAdmin
    from kafkastate.core.protocol.requests import NewTopic

    name = f"bench-metrics-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=1)])
    return name


def _run(args: argparse.Namespace, variant: str, topic: str) -> dict[str, float]:
    env = dict(os.environ)
    cmd = [sys.executable, __file__, "--worker", "--bootstrap", args.bootstrap, "--topic", topic]
    cmd += ["--client", args.client, "--records", str(args.records), "--size", str(args.size)]
    if variant == "with":
        env["PYTHONPATH"] = str(ROOT)
    elif args.baseline == "stub":
        env["PYTHONPATH"] = str(ROOT)
        cmd.append("--stub")
    else:
        env["PYTHONPATH"] = str(pathlib.Path(args.baseline).resolve())
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=900)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def stat_record_ns(calls: int = 1_000_000) -> float:
    """Nanoseconds per :meth:`Stat.record` call (core only, no IO)."""
    sys.path.insert(0, str(ROOT))
    from kafkastate.core.metrics import Stat

    stat = Stat()
    record = stat.record
    start = time.process_time()
    for i in range(calls):
        record(1.0, i * 1e-6)
    return (time.process_time() - start) / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKASTATE_BOOTSTRAP"))
    parser.add_argument("--client", choices=["sync", "asyncio"], default="sync")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline", default="stub", help="'stub' or a kafkastate checkout")
    parser.add_argument("--quick", action="store_true", help="20k records, 3 rounds")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stub", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.quick:
        args.records, args.repeat = 20_000, 3
    sys.path.insert(0, str(ROOT))
    cluster = None
    if not args.bootstrap:
        from kafkastate.testing import KafkaCluster

        cluster = KafkaCluster.start()
        args.bootstrap = cluster.bootstrap
    try:
        runs: dict[str, list[dict[str, float]]] = {"with": [], "without": []}
        for i in range(args.repeat):
            order = ("with", "without") if i % 2 == 0 else ("without", "with")
            for variant in order:
                runs[variant].append(_run(args, variant, _topic(args.bootstrap)))
    finally:
        if cluster is not None:
            cluster.stop()
    cpu = {v: statistics.median(r["cpu"] / r["n"] for r in rs) * 1e6 for v, rs in runs.items()}
    rate = {v: statistics.median(r["n"] / r["wall"] for r in rs) for v, rs in runs.items()}
    baseline = "Stat.record stubbed" if args.baseline == "stub" else args.baseline
    print(f"client {args.client}, {args.records} x {args.size} B, median of {args.repeat} rounds")
    print(f"baseline: {baseline}\n")
    print("| variant | CPU µs/record | records/s |")
    print("| --- | ---: | ---: |")
    for variant in ("with", "without"):
        print(f"| {variant} counters | {cpu[variant]:.2f} | {rate[variant]:,.0f} |")
    print(
        f"\nCPU per record with/without: {cpu['with'] / cpu['without']:.3f}; "
        f"throughput with/without: {rate['with'] / rate['without']:.3f}"
    )
    per_call = stat_record_ns()
    calls = statistics.median(r["calls"] / r["n"] for r in runs["with"])
    print(f"core only: one Stat.record call costs {per_call:.0f} ns")
    if calls >= 0:
        share = calls * per_call / 1000 / cpu["with"]
        print(
            f"Stat.record calls per record sent: {calls:.3f} (per batch and per request, "
            f"not per record): {calls * per_call:.1f} ns per record, {share:.2%} of the "
            "measured CPU per record"
        )


if __name__ == "__main__":
    main()
