"""``python -m kafkastate.sim``: run, sweep and replay simulated runs.

    python -m kafkastate.sim run SEED [--workload group|txn] [--planted BUG] [--no-defence]
                                      [--trace FILE] [--shrink [--max-runs N]]
    python -m kafkastate.sim sweep [--seeds N] [--start S] [--workload group|txn]
                                   [--planted BUG] [--no-defence] [--shrink] [--coverage]
    python -m kafkastate.sim replay RUN.json [--trace FILE]

``--workload group`` (the default) runs consumer groups (:mod:`kafkastate.sim.world`);
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
``sweep --coverage`` reports which transitions of each machine and which fault kinds the
sweep reached (:mod:`kafkastate.sim.coverage`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import Counter
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


def _make(entropy: Entropy, workload: str, planted: str | None, defence: bool) -> Sim | TxnSim:
    if workload == "txn":
        if planted is not None and planted not in TXN_PLANTED_BUGS:
            raise SystemExit(f"--planted for --workload txn is one of {TXN_PLANTED_BUGS}")
        return TxnSim(entropy, TxnConfig.draw(entropy, planted=planted, defence=defence))
    if planted is not None and planted not in PLANTED_BUGS:
        raise SystemExit(f"--planted for --workload group is one of {PLANTED_BUGS}")
    return Sim(entropy, SimConfig.draw(entropy, planted=planted))


def _run(sim: Sim | TxnSim) -> InvariantViolation | None:
    try:
        sim.run()
    except InvariantViolation as exc:
        return exc
    return None


def _record(
    path: Path, seed: int | None, sim: Sim | TxnSim, failure: InvariantViolation | None
) -> None:
    path.write_text(
        json.dumps(
            {
                "seed": seed,
                "workload": "txn" if isinstance(sim, TxnSim) else "group",
                "config": attrs.asdict(sim.config),
                "tape": sim.entropy.tape,
                "trace_hash": sim.trace_hash(),
                "invariant": None if failure is None else failure.invariant,
                "message": None if failure is None else str(failure),
            }
        )
    )


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


def cmd_sweep(args: argparse.Namespace) -> int:
    found: Counter[str] = Counter()
    first: dict[str, tuple[int, list[int]]] = {}
    started = time.monotonic()
    width = 40
    coverage = Coverage(TXN_FAULTS if args.workload == "txn" else FAULTS)
    with coverage if args.coverage else contextlib.nullcontext():
        for i, seed in enumerate(range(args.start, args.start + args.seeds)):
            entropy = SeededEntropy(seed)
            sim = _make(entropy, args.workload, args.planted, not args.no_defence)
            failure = _run(sim)
            coverage.add_run(sim)
            if failure is not None:
                found[failure.invariant] += 1
                first.setdefault(failure.invariant, (seed, list(entropy.tape)))
                _record(Path(f"sim-failure-{seed}.json"), seed, sim, failure)
            done = (i + 1) * width // args.seeds
            sys.stderr.write(
                f"\r[{'#' * done}{'.' * (width - done)}] {i + 1}/{args.seeds} seeds, "
                f"{sum(found.values())} failing, {time.monotonic() - started:.0f} s"
            )
    sys.stderr.write("\n")
    print(f"{'invariant':<10} {'runs':>6} {'first seed':>11}")
    for invariant, count in sorted(found.items()):
        print(f"{invariant:<10} {count:>6} {first[invariant][0]:>11}")
    if not found:
        print(f"all {args.seeds} seeds passed")
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
        "--coverage",
        action="store_true",
        help="report the machines' transitions and the fault kinds the sweep reached",
    )
    catches = {**PLANTED_CATCHES, **TXN_PLANTED_CATCHES}
    for command in (run, sweep):
        command.add_argument("--workload", choices=("group", "txn"), default="group")
        command.add_argument(
            "--planted",
            choices=PLANTED_BUGS + TXN_PLANTED_BUGS,
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
