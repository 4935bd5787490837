"""``python -m kafkastate.sim``: run, sweep and replay simulated runs.

    python -m kafkastate.sim run SEED [--workload group|group848|txn] [--planted BUG] [--no-defence]
                                      [--trace FILE] [--shrink [--max-runs N]]
    python -m kafkastate.sim sweep [--seeds N] [--start S] [--jobs N] [--workload W]
                                   [--planted BUG] [--no-defence] [--shrink] [--coverage]
    python -m kafkastate.sim replay RUN.json [--trace FILE]

``--workload group`` (the default) runs consumer groups (:mod:`kafkastate.sim.world`);
``--workload group848`` consumer groups on the KIP-848 protocol
(:mod:`kafkastate.sim.world848`);
``--workload txn`` an exactly-once transactional pipeline (:mod:`kafkastate.sim.txnworld`),
where ``--no-defence`` switches the producer's KIP-890 client defence off (the harness
must then find the Jepsen anomaly).

A failing run prints its seed, the derived options and the invariant, and writes
``sim-failure-SEED.json`` (seed, options, the entropy tape); ``replay`` runs that file again
event for event and checks the trace hash is the one recorded.

``--shrink`` reduces a failing run (:mod:`kafkastate.sim.shrink`) to a smaller tape that
fails with the same invariant, prints how far the fault schedule and the event count
shrank, and writes it as ``sim-failure-SEED-shrunk.json`` (replay it like any other);
``sweep --shrink`` does that for the first failing seed of each invariant.
``sweep --jobs N`` runs the seeds in N worker processes (a seed's run is whole in one
process, so it is the same run as with one job; results are reported in seed order).
``sweep --coverage`` reports which transitions of each machine and which fault kinds the
sweep reached (:mod:`kafkastate.sim.coverage`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

from kafkastate.sim.coverage import Coverage
from kafkastate.sim.entropy import Entropy, SeededEntropy, TapeEntropy
from kafkastate.sim.shrink import shrink
from kafkastate.sim.txnworld import (
    TXN_FAULTS,
    TXN_PLANTED_BUGS,
    TXN_PLANTED_CATCHES,
    TxnConfig,
    TxnSim,
)
from kafkastate.sim.world import (
    FAULTS,
    PLANTED_BUGS,
    PLANTED_CATCHES,
    InvariantViolation,
    Sim,
    SimConfig,
)
from kafkastate.sim.world848 import PLANTED848_BUGS, PLANTED848_CATCHES, Sim848, Sim848Config


def _make(entropy: Entropy, workload: str, planted: str | None, defence: bool) -> Sim | TxnSim:
    if workload == "txn":
        if planted is not None and planted not in TXN_PLANTED_BUGS:
            raise SystemExit(f"--planted for --workload txn is one of {TXN_PLANTED_BUGS}")
        return TxnSim(entropy, TxnConfig.draw(entropy, planted=planted, defence=defence))
    if workload == "group848":
        if planted is not None and planted not in PLANTED848_BUGS:
            raise SystemExit(f"--planted for --workload group848 is one of {PLANTED848_BUGS}")
        return Sim848(entropy, Sim848Config.draw(entropy, planted=planted))
    if planted is not None and planted not in PLANTED_BUGS:
        raise SystemExit(f"--planted for --workload group is one of {PLANTED_BUGS}")
    return Sim(entropy, SimConfig.draw(entropy, planted=planted))


def _run(sim: Sim | TxnSim) -> InvariantViolation | None:
    try:
        sim.run()
    except InvariantViolation as exc:
        return exc
    return None


def _recording(
    seed: int | None, sim: Sim | TxnSim, failure: InvariantViolation | None
) -> dict[str, Any]:
    """What a replay file holds: the seed, the options, the tape, the trace hash."""
    return {
        "seed": seed,
        "workload": _workload(sim),
        "config": attrs.asdict(sim.config),
        "tape": sim.entropy.tape,
        "trace_hash": sim.trace_hash(),
        "invariant": None if failure is None else failure.invariant,
        "message": None if failure is None else str(failure),
    }


def _workload(sim: Sim | TxnSim) -> str:
    if isinstance(sim, TxnSim):
        return "txn"
    return "group848" if isinstance(sim, Sim848) else "group"


def _record(
    path: Path, seed: int | None, sim: Sim | TxnSim, failure: InvariantViolation | None
) -> None:
    path.write_text(json.dumps(_recording(seed, sim, failure)))


def _shrink(args: argparse.Namespace, seed: int, tape: list[int], invariant: str) -> Path:
    """Shrink a failing seed's tape, print how far, and write the replay file."""
    shrunk = shrink(
        lambda entropy: _make(entropy, args.workload, args.planted, not args.no_defence),
        tape,
        invariant,
        max_runs=args.max_runs,
    )
    out = Path(f"sim-failure-{seed}-shrunk.json")
    _record(out, seed, shrunk.sim, shrunk.failure)
    print(shrunk.summary())
    schedule = ", ".join(f"{kind}@{t}" for t, kind in shrunk.sim.fault_log) or "none"
    print(f"shrunk schedule: {schedule}")
    print(f"FAILED {shrunk.failure}\nreplay: python -m kafkastate.sim replay {out}")
    return out


def cmd_run(args: argparse.Namespace) -> int:
    entropy = SeededEntropy(args.seed)
    sim = _make(entropy, args.workload, args.planted, not args.no_defence)
    failure = _run(sim)
    if args.trace:
        Path(args.trace).write_text("\n".join(sim.trace) + "\n")
    print(f"seed {args.seed}: {attrs.asdict(sim.config)}")
    if failure is None:
        print(f"ok, trace {sim.trace_hash()[:16]} ({len(sim.trace)} lines)")
        return 0
    out = Path(f"sim-failure-{args.seed}.json")
    _record(out, args.seed, sim, failure)
    print(f"FAILED {failure}\nreplay: python -m kafkastate.sim replay {out}")
    if args.shrink:
        _shrink(args, args.seed, sim.entropy.tape, failure.invariant)
    return 1


def cmd_replay(args: argparse.Namespace) -> int:
    saved: dict[str, Any] = json.loads(Path(args.run).read_text())
    entropy = TapeEntropy(saved["tape"])
    sim = _make(
        entropy,
        saved.get("workload", "group"),
        saved["config"]["planted"],
        saved["config"].get("defence", True),
    )
    if json.loads(json.dumps(attrs.asdict(sim.config))) != saved["config"]:
        print("the tape derives other options than recorded (the code changed?)")
        return 1
    failure = _run(sim)
    if args.trace:
        Path(args.trace).write_text("\n".join(sim.trace) + "\n")
    same = sim.trace_hash() == saved["trace_hash"]
    print(f"replayed: {'the same trace' if same else 'A DIFFERENT TRACE (determinism bug)'}")
    print("ok" if failure is None else f"FAILED {failure}")
    return 0 if same and (failure is None) == (saved["invariant"] is None) else 1


@attrs.frozen
class _SeedJob:
    """One seed of a sweep, as a worker process gets it."""

    seed: int
    workload: str
    planted: str | None
    defence: bool
    coverage: bool


@attrs.frozen
class _SeedResult:
    """What a worker sends back: the failure (with its replay file) and the coverage."""

    seed: int
    invariant: str | None
    recording: dict[str, Any] | None
    transitions: Counter[tuple[str, str, str]]
    faults: Counter[str]


def _sweep_seed(job: _SeedJob) -> _SeedResult:
    """Run one seed (in this process or a worker), with its own coverage counter."""
    coverage = Coverage(())
    with coverage if job.coverage else contextlib.nullcontext():
        sim = _make(SeededEntropy(job.seed), job.workload, job.planted, job.defence)
        failure = _run(sim)
    if job.coverage:
        coverage.add_run(sim)
    return _SeedResult(
        seed=job.seed,
        invariant=None if failure is None else failure.invariant,
        recording=None if failure is None else _recording(job.seed, sim, failure),
        transitions=coverage.transitions,
        faults=coverage.faults,
    )


def _results(args: argparse.Namespace, jobs: list[_SeedJob]) -> Iterator[_SeedResult]:
    """The seeds' results in seed order, from ``--jobs`` worker processes (or this one)."""
    if args.jobs <= 1:
        yield from map(_sweep_seed, jobs)
        return
    context = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
    with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context) as pool:
        yield from pool.map(
            _sweep_seed, jobs, chunksize=max(1, min(8, len(jobs) // (4 * args.jobs)))
        )


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished workers (a shared machine's wall
    clock mostly measures the other processes)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def cmd_sweep(args: argparse.Namespace) -> int:
    _make(SeededEntropy(0), args.workload, args.planted, True)  # refuse a wrong --planted now
    found: Counter[str] = Counter()
    first: dict[str, tuple[int, list[int]]] = {}
    started = time.monotonic()
    cpu_started = _cpu_seconds()
    width = 40
    coverage = Coverage(TXN_FAULTS if args.workload == "txn" else FAULTS)
    jobs = [
        _SeedJob(seed, args.workload, args.planted, not args.no_defence, args.coverage)
        for seed in range(args.start, args.start + args.seeds)
    ]
    for i, result in enumerate(_results(args, jobs)):
        coverage.merge(result.transitions, result.faults)
        if result.recording is not None and result.invariant is not None:
            found[result.invariant] += 1
            first.setdefault(result.invariant, (result.seed, list(result.recording["tape"])))
            Path(f"sim-failure-{result.seed}.json").write_text(json.dumps(result.recording))
        done = (i + 1) * width // args.seeds
        sys.stderr.write(
            f"\r[{'#' * done}{'.' * (width - done)}] {i + 1}/{args.seeds} seeds, "
            f"{sum(found.values())} failing, {time.monotonic() - started:.0f} s"
        )
    elapsed = time.monotonic() - started
    cpu = _cpu_seconds() - cpu_started
    sys.stderr.write("\n")
    print(f"{'invariant':<10} {'runs':>6} {'first seed':>11}")
    for invariant, count in sorted(found.items()):
        print(f"{invariant:<10} {count:>6} {first[invariant][0]:>11}")
    if not found:
        print(f"all {args.seeds} seeds passed")
    print(
        f"{args.seeds} seeds in {elapsed:.1f} s ({60 * args.seeds / elapsed:.0f} seeds/min, "
        f"{args.jobs} job{'s' if args.jobs > 1 else ''}; {cpu:.2f} s CPU: "
        f"{60 * args.seeds / max(cpu, 1e-9):.0f} seeds/min per core)"
    )
    if args.coverage:
        print(coverage.report())
    if args.shrink:
        for invariant, (seed, tape) in sorted(first.items()):
            print(f"shrinking seed {seed} ({invariant})")
            _shrink(args, seed, tape, invariant)
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    """The command line."""
    parser = argparse.ArgumentParser(prog="python -m kafkastate.sim")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run one seed")
    run.add_argument("seed", type=int)
    run.add_argument("--trace")
    sweep = sub.add_parser("sweep", help="run many seeds, summarise the failures")
    sweep.add_argument("--seeds", type=int, default=200)
    sweep.add_argument("--start", type=int, default=0)
    sweep.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="worker processes (each seed runs whole in one; results stay in seed order)",
    )
    sweep.add_argument(
        "--coverage",
        action="store_true",
        help="report the machines' transitions and the fault kinds the sweep reached",
    )
    catches = {**PLANTED_CATCHES, **PLANTED848_CATCHES, **TXN_PLANTED_CATCHES}
    for command in (run, sweep):
        command.add_argument("--workload", choices=("group", "group848", "txn"), default="group")
        command.add_argument(
            "--planted",
            choices=PLANTED_BUGS + PLANTED848_BUGS + TXN_PLANTED_BUGS,
            help="a planted bug (the invariant that must catch it): "
            + ", ".join(f"{bug} ({inv})" for bug, inv in catches.items()),
        )
        command.add_argument(
            "--shrink",
            action="store_true",
            help="shrink a failing run to a smaller fault schedule and write a replay file",
        )
        command.add_argument(
            "--max-runs", type=int, default=120, help="the shrinker's budget of runs"
        )
        command.add_argument(
            "--no-defence",
            action="store_true",
            help="txn: switch the producer's KIP-890 defence off (the harness must fail)",
        )
    replay = sub.add_parser("replay", help="replay a recorded run")
    replay.add_argument("run")
    replay.add_argument("--trace")
    args = parser.parse_args(argv)
    handler = {"run": cmd_run, "sweep": cmd_sweep, "replay": cmd_replay}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
