"""``python -m kafkastate.testing.chaos``: one chaos run; exit 1 on any violation."""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from ._bounds import BoundsOptions, bounds_table, run_bounds, run_cycles
from ._faults import FAULT_KINDS
from ._runner import RUNTIMES, ChaosOptions, run_chaos
from ._toxiproxy import ensure_toxiproxy

SHORT = {
    "records": 20_000,
    "keys": 500,
    "duration": 60.0,
    "faults": 5,
    "txn_records": 3_000,
    "group_records": 6_000,
}
LONG = {
    "records": 1_000_000,
    "keys": 10_000,
    "duration": 1200.0,
    "faults": 24,
    "txn_records": 100_000,
    "group_records": 200_000,
}


def main(argv: list[str] | None = None) -> int:
    """Parse the options, run, print the table and the reproducer."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--long", action="store_true", help=f"the long run: {LONG}")
    parser.add_argument(
        "--install-proxy",
        action="store_true",
        help="only build Toxiproxy into the harness cache (if needed) and print its path",
    )
    parser.add_argument(
        "--bounds",
        action="store_true",
        help="measure the resource bounds instead (docs/reliability.md#resource-bounds)",
    )
    parser.add_argument(
        "--cycles-only",
        action="store_true",
        help="only the connect/close cycles, on a fresh 3-broker cluster (no Toxiproxy)",
    )
    parser.add_argument(
        "--cycles",
        type=int,
        default=10_000,
        help="--bounds, --cycles-only: connect/close cycles per runtime",
    )
    parser.add_argument(
        "--every", type=int, default=1000, help="--cycles-only: sample every N cycles"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help="--cycles-only: seconds each runtime cycles for at most, then reports what it did",
    )
    parser.add_argument(
        "--bound-seconds", type=float, default=60.0, help="--bounds: seconds per RSS measurement"
    )
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument("--records", type=int, help="records per runtime")
    parser.add_argument("--keys", type=int)
    parser.add_argument("--duration", type=float, help="seconds the workloads are paced over")
    parser.add_argument("--faults", type=int)
    parser.add_argument("--txn-records", type=int, help="transactional input per runtime")
    parser.add_argument("--group-records", type=int, help="consumer-group input per runtime")
    parser.add_argument("--runtimes", default=",".join(RUNTIMES))
    parser.add_argument("--kinds", default=",".join(FAULT_KINDS))
    parser.add_argument("--out", type=Path, default=Path("chaos-run"))
    parser.add_argument("--kafka-version", default=None)
    args = parser.parse_args(argv)
    if args.install_proxy:
        print(ensure_toxiproxy())
        return 0
    if args.cycles_only:
        return _cycles_only(args)
    if args.bounds:
        bounds = run_bounds(
            BoundsOptions(
                runtimes=tuple(r for r in args.runtimes.split(",") if r),
                brokers=3,
                seconds=args.bound_seconds,
                cycles=args.cycles,
                out=args.out,
                kafka_version=args.kafka_version,
            )
        )
        print(bounds_table(bounds))
        ok = all(b.ok for b in bounds)
        print(("PASS" if ok else "FAIL") + f"; details in {args.out / 'bounds.json'}")
        return 0 if ok else 1
    preset = LONG if args.long else SHORT
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    options = ChaosOptions(
        seed=seed,
        records=int(args.records or preset["records"]),
        keys=int(args.keys or preset["keys"]),
        duration=float(args.duration or preset["duration"]),
        faults=int(args.faults if args.faults is not None else preset["faults"]),
        runtimes=tuple(r for r in args.runtimes.split(",") if r),
        out=args.out,
        kafka_version=args.kafka_version,
        kinds=tuple(k for k in args.kinds.split(",") if k),
        txn_records=int(
            args.txn_records if args.txn_records is not None else preset["txn_records"]
        ),
        group_records=int(
            args.group_records if args.group_records is not None else preset["group_records"]
        ),
    )
    report = run_chaos(options)
    print(report.table())
    for error in report.fault_errors + report.workload_errors:
        print(f"error: {error}")
    for result in report.results:
        for check, examples in result.examples.items():
            for example in examples:
                print(f"{result.topic} {check}: {example}")
    print(("PASS" if report.ok else "FAIL") + f" in {report.elapsed} s; {report.reproducer()}")
    return 0 if report.ok else 1


def _cycles_only(args: argparse.Namespace) -> int:
    """The connect/close cycles of every runtime, side by side, on a fresh 3-broker cluster."""
    from .._cluster import KafkaCluster  # noqa: PLC0415

    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with KafkaCluster.start(args.kafka_version, brokers=3, workdir=out / "cluster") as cluster:
        bounds = run_cycles(
            cluster.bootstrap,
            runtimes=tuple(r for r in args.runtimes.split(",") if r),
            cycles=args.cycles,
            every=args.every,
            out=out,
            budget=args.budget,
        )
    print(bounds_table(bounds))
    for runtime in dict.fromkeys(b.runtime for b in bounds):
        detail = next(b.detail for b in bounds if b.runtime == runtime)
        print(
            f"{runtime}: {detail['cycles']} of {detail['planned']} cycles in"
            f" {detail['seconds']} s, {detail['failed']} failed"
        )
    ok = all(b.ok for b in bounds)
    print(("PASS" if ok else "FAIL") + f"; details in {out / 'cycles.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
