"""Task runner. ``./ks`` prepares .venv and runs these sessions with ``--no-venv``."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import nox

# the sessions read tests/compat/versions.py: nox loads this file without its folder on sys.path
sys.path.insert(0, str(Path(__file__).resolve().parent))

nox.options.default_venv_backend = "none"
nox.options.sessions = ["lint", "typecheck", "tests"]

_FETCH = ("-m", "kafkastate.testing.broker", "fetch")
"""Downloads Kafka versions' jars into the harness cache (once per version)."""


@nox.session(venv_backend="none")
def tests(session: nox.Session) -> None:
    """The whole suite: unit, property, fuzz, and integration tests against real Kafka.

    The project's own suite needs the broker: a missing java/mvn fails the run instead of
    skipping the integration tests (users' suites get the skip by default).
    """
    from kafkastate.testing import default_kafka_version  # noqa: PLC0415
    from tests.compat.versions import short_version  # noqa: PLC0415

    if not os.environ.get("KAFKASTATE_BOOTSTRAP") and shutil.which("mvn"):
        # every broker the run starts, downloaded before the first test (not inside one);
        # without mvn the fixtures say what is missing (or use Docker, or cached jars)
        session.run("python", *_FETCH, default_kafka_version(), short_version())
    session.run("python", "-m", "pytest", *session.posargs, env={"KAFKASTATE_REQUIRE_BROKER": "1"})


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff lint and format check."""
    session.run("python", "-m", "ruff", "check", ".")
    session.run("python", "-m", "ruff", "format", "--check", ".")


@nox.session(venv_backend="none")
def typecheck(session: nox.Session) -> None:
    """mypy --strict over kafkastate/."""
    session.run("python", "-m", "mypy")


@nox.session(venv_backend="none")
def demo(session: nox.Session) -> None:
    """Start a local broker, run the demo against it, stop the broker."""
    session.run("python", "-m", "examples.demo", *session.posargs)


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Every comparison of docs/performance.md in one run on one broker the harness starts
    (produce awaited and fire-and-forget, consume getmany/getone/async for/read_committed,
    against aiokafka, confluent-kafka and Kafka's Java perf tools; Spark read and write
    against the JVM connector; memory; the cost curves): tables, JSON and CSV in
    bench/results/, charts in docs/plots/perf-*.svg and curve-*.svg (``-- --quick`` for a
    smoke run; ``--no-spark``, ``--no-curves``, ``--no-java`` leave parts out)."""
    session.run("python", "bench/bench_all.py", *session.posargs)


@nox.session(venv_backend="none")
def bench_records(session: nox.Session) -> None:
    """Core-only record-batch encode/decode benchmark against aiokafka's codec."""
    session.run("python", "bench/bench_records.py", *session.posargs)


@nox.session(venv_backend="none")
def bench_producer(session: nox.Session) -> None:
    """End-to-end producer benchmark against aiokafka, confluent-kafka and kafka-python on
    a broker the harness starts (``-- --quick`` for a smoke run)."""
    session.run("python", "bench/bench_producer.py", *session.posargs)


@nox.session(venv_backend="none")
def bench_consumer(session: nox.Session) -> None:
    """End-to-end consumer benchmark against aiokafka, confluent-kafka and kafka-python on
    a broker the harness starts (``-- --quick`` for a smoke run)."""
    session.run("python", "bench/bench_consumer.py", *session.posargs)


@nox.session(venv_backend="none")
def bench_getone(session: nox.Session) -> None:
    """getone() on 1,000 partitions against 1 partition (kafkastate asyncio and trio,
    aiokafka), the ratio per client over alternating rounds, on a broker the harness starts
    (``-- --quick`` for a smoke run)."""
    session.run("python", "bench/bench_getone.py", *session.posargs)


@nox.session(venv_backend="none")
def docs(session: nox.Session) -> None:
    """Build the documentation site into site/ with MkDocs, strict: a warning (a broken
    link or anchor, a docstring griffe cannot read) fails the build. ``-- --serve`` serves
    it on http://127.0.0.1:8000 and rebuilds on every change instead."""
    env = {"NO_MKDOCS_2_WARNING": "1"}
    if "--serve" in session.posargs:
        rest = [arg for arg in session.posargs if arg != "--serve"]
        session.run("python", "-m", "mkdocs", "serve", "--strict", *rest, env=env)
    else:
        session.run("python", "-m", "mkdocs", "build", "--strict", *session.posargs, env=env)


@nox.session(venv_backend="none")
def docs_examples(session: nox.Session) -> None:
    """Run every Python example embedded in docs/*.md against a real broker (each tab of a
    tabbed page on its own)."""
    session.run("python", "-m", "pytest", "tests/integration/test_docs.py", *session.posargs)


@nox.session(venv_backend="none")
def plots(session: nox.Session) -> None:
    """Redraw docs/plots/*.svg from the benchmark results stored in docs/benchmarks.md."""
    session.run("python", "tools/gen_plots.py", *session.posargs)


@nox.session(venv_backend="none")
def bench_spark(session: nox.Session) -> None:
    """Spark batch read and write: ``format("kafkastate")`` against Spark's JVM connector
    (``format("kafka")``) on local[2] at 1, 4 and 16 partitions, and kafkastate's consumer
    in one process, on a broker the harness starts (``-- --quick`` for a smoke run)."""
    session.run("python", "bench/bench_spark.py", *session.posargs)


_SWEEP = ("python", "-m", "kafkastate.sim", "sweep")


@nox.session(venv_backend="none")
def dst(session: nox.Session) -> None:
    """A long deterministic-simulation sweep of consumer groups (``-- --seeds N --start S``),
    with a progress bar and a table of the invariants that failed; each failing seed leaves
    ``sim-failure-SEED.json`` for ``python -m kafkastate.sim replay``."""
    session.run(*_SWEEP, *(session.posargs or ["--seeds", "1000"]))


@nox.session(venv_backend="none")
def dst_planted(session: nox.Session) -> None:
    """The harness's self-test at length: every planted bug swept over 50 seeds
    (``-- --seeds N``); each table must show the bug's own invariant (docs/simulation.md)."""
    from kafkastate.sim.txnworld import TXN_PLANTED_CATCHES  # noqa: PLC0415
    from kafkastate.sim.world import PLANTED_CATCHES  # noqa: PLC0415
    from kafkastate.sim.world848 import PLANTED848_CATCHES  # noqa: PLC0415

    seeds = session.posargs or ["--seeds", "50"]
    workloads = (
        ("group", PLANTED_CATCHES),
        ("group848", PLANTED848_CATCHES),
        ("txn", TXN_PLANTED_CATCHES),
    )
    for workload, catches in workloads:
        for bug, invariant in catches.items():
            session.log(f"{bug}: must be caught by {invariant}")
            planted = ("--workload", workload, "--planted", bug)
            session.run(*_SWEEP, *planted, *seeds, success_codes=[0, 1])


@nox.session(venv_backend="none")
def dst_848(session: nox.Session) -> None:
    """A long deterministic-simulation sweep of KIP-848 consumer groups
    (``-- --seeds N --start S``)."""
    session.run(*_SWEEP, "--workload", "group848", *(session.posargs or ["--seeds", "1000"]))


@nox.session(venv_backend="none")
def dst_txn(session: nox.Session) -> None:
    """A long deterministic-simulation sweep of the exactly-once transactional pipeline
    (``-- --seeds N --start S``; ``-- --no-defence`` must fail: the harness's self-test)."""
    session.run(*_SWEEP, "--workload", "txn", *(session.posargs or ["--seeds", "1000"]))


@nox.session(venv_backend="none")
def compat(session: nox.Session) -> None:
    """The broker-version compatibility suite (tests/compat), every case, once per Kafka
    version (``-- 3.9.1 4.4.0`` picks versions; the default suite runs its short set
    against 3.9.1 or 2.8.2 by the day). Each run records its outcomes in
    docs/compat-results/; ``python tools/gen_compat_table.py`` redraws the table of
    docs/compatibility.md from them."""
    from tests.compat.versions import FULL_VERSIONS  # noqa: PLC0415

    versions = session.posargs or list(FULL_VERSIONS)
    if shutil.which("mvn"):
        session.run("python", *_FETCH, *versions)
    for version in versions:
        session.log(f"compat: Kafka {version}")
        session.run(
            "python",
            "-m",
            "pytest",
            "tests/compat",
            "-m",
            "compat",
            env={
                "KAFKASTATE_COMPAT_VERSION": version,
                "KAFKASTATE_COMPAT_FULL": "1",
                "KAFKASTATE_COMPAT_RESULTS": "docs/compat-results",
                "KAFKASTATE_REQUIRE_BROKER": "1",
            },
        )
    session.run("python", "tools/gen_compat_table.py")


@nox.session(venv_backend="none")
def chaos(session: nox.Session) -> None:
    """The long chaos run (docs/reliability.md): a 3-broker cluster behind Toxiproxy, the
    idempotent producer (1,000,000 records per runtime) and the transactional pipeline on
    asyncio, trio and blocking under 24 faults, judged by confluent-kafka; exit 1 on any
    violation, with the seed and schedule; then the resource bounds (``--bounds``: producer
    and consumer RSS against a slow cluster, 10,000 connect/close cycles per runtime, each
    client connected to all three brokers).
    ``-- --records 200000 --duration 600 --faults 20 --seed S`` shortens or replays a run.
    Toxiproxy is built with Go into the harness cache on first use."""
    session.run("python", "-m", "kafkastate.testing.chaos", *(session.posargs or ["--long"]))
    if not session.posargs:  # the resource bounds: RSS under backpressure, leaks over cycles
        session.run("python", "-m", "kafkastate.testing.chaos", "--bounds", "--out", "chaos-bounds")


@nox.session(venv_backend="none")
def cycles(session: nox.Session) -> None:
    """Only the connect/close cycles of the chaos session's resource bounds
    (docs/reliability.md): 10,000 per runtime on a fresh 3-broker cluster, the runtimes side
    by side, each producer, consumer and admin client connected to all three brokers; exit 1
    if a file descriptor, thread or task is left or the RSS grows past its bound.
    ``-- --cycles 2000 --runtimes trio`` shortens a run."""
    session.run(
        "python",
        "-m",
        "kafkastate.testing.chaos",
        "--cycles-only",
        "--out",
        "chaos-cycles",
        *session.posargs,
    )


FUZZ_TESTS = (
    "tests/core/protocol/test_response_fuzz.py",
    "tests/core/protocol/test_records_fuzz.py",
    "tests/core/test_sasl_fuzz.py",
    "tests/core/consumer/test_assignors_fuzz.py",
    "tests/core/consumer/test_group848_fuzz.py",
    "tests/core/admin/test_admin_parse_fuzz.py",
)
FUZZ_REPORT = "docs/fuzz-results/campaign.jsonl"


@nox.session(venv_backend="none")
def fuzz(session: nox.Session) -> None:
    """Every network decoder fuzzed at length: ``KAFKASTATE_FUZZ_EXAMPLES`` inputs per
    decoder (default 1,000,000; hours on 2 cores). ``-- -k sasl`` picks decoders. Each
    mutation loop draws a fresh stream of inputs and appends its figures to
    docs/fuzz-results/campaign.jsonl, which ``python tools/gen_fuzz_table.py`` sums into
    docs/reliability.md's table. ``-- --resume`` runs only the mutation loops, each for the
    inputs it still lacks there: repeat it (Ctrl-C keeps what ran) until the campaign is
    complete."""
    from tests._support.campaign import CAMPAIGN_TARGET  # noqa: PLC0415

    examples = os.environ.get("KAFKASTATE_FUZZ_EXAMPLES", str(CAMPAIGN_TARGET))
    env = {"KAFKASTATE_FUZZ_EXAMPLES": examples, "KAFKASTATE_FUZZ_REPORT": FUZZ_REPORT}
    args = list(session.posargs)
    if "--resume" in args:
        args.remove("--resume")
        env["KAFKASTATE_FUZZ_RESUME"] = "1"
        args += ["-m", "fuzz_loop"]
    tests = [arg for arg in args if arg.startswith("tests/")] or list(FUZZ_TESTS)
    options = [arg for arg in args if not arg.startswith("tests/")]
    session.run("python", "-m", "pytest", *tests, "-q", "-s", "-o", "timeout=0", *options, env=env)
    session.run("python", "tools/gen_fuzz_table.py")
