"""pytest plugin: session-scoped real Kafka clusters for kafkastate's tests and for yours.

Loaded automatically (entry point ``pytest11: kafkastate``) once kafkastate is installed.

Fixtures:

* ``kafka_cluster`` — one broker with PLAINTEXT, SASL_PLAINTEXT (PLAIN + SCRAM users) and SSL
  listeners, started once per session; ``KAFKASTATE_BOOTSTRAP`` (and the other variables the
  CLI prints) makes it use an existing cluster instead.
* ``kafka_cluster3`` — three brokers, started the first time a test asks for it;
  ``KAFKASTATE_BOOTSTRAP3`` makes it use an existing cluster.
* ``kafka_sim`` — a :class:`kafkastate.sim.api.KafkaSim`: runs your application (rebalance
  listener, processing) in simulated consumer groups under faults, seed after seed, no
  broker needed; ``--kafka-sim-seeds N`` sets how many seeds (default 20),
  ``--kafka-sim-seed S`` runs only seed S (to replay a failure).
* ``kafka_bootstrap_env`` — function-scoped: exports ``kafka_cluster``'s ``KAFKASTATE_*``
  variables (``KAFKASTATE_BOOTSTRAP``…) into ``os.environ`` for one test.

Tests using them are marked ``integration``. Without ``java`` (or without ``mvn`` before the
jars are cached) they are skipped with a message naming the missing program, unless
``KAFKASTATE_REQUIRE_BROKER=1``, which turns the skip into an error (for CI). On a failing
test the broker log paths are attached to the report, and the run directories are kept.
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

from ._cluster import KafkaCluster
from ._errors import PrerequisiteError

if TYPE_CHECKING:
    from kafkastate.sim.api import KafkaSim

__all__ = ["kafka_bootstrap_env", "kafka_cluster", "kafka_cluster3", "kafka_sim", "unavailable"]

_FIXTURES = ("kafka_cluster", "kafka_cluster3")

RACK_AWARE = {
    "broker.rack": "rack-{node_id}",
    "replica.selector.class": "org.apache.kafka.common.replica.RackAwareReplicaSelector",
}
"""``kafka_cluster3``'s racks: node N in ``rack-N``, follower fetching by rack (KIP-392)."""
_STARTED = pytest.StashKey[list[KafkaCluster]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    """Add ``--kafka-version`` and ``--kafka-keep``."""
    group = parser.getgroup("kafkastate", "kafkastate real-broker harness")
    group.addoption(
        "--kafka-version",
        default=None,
        help="Apache Kafka version for the kafka_cluster fixtures "
        "(default $KAFKASTATE_KAFKA_VERSION or the harness default)",
    )
    group.addoption(
        "--kafka-sim-seeds",
        type=int,
        default=None,
        help="how many seeds the kafka_sim fixture's sweeps run (default 20)",
    )
    group.addoption(
        "--kafka-sim-seed",
        type=int,
        default=None,
        help="run only this seed in the kafka_sim fixture's sweeps (replay a failure)",
    )
    group.addoption(
        "--kafka-keep",
        action="store_true",
        default=False,
        help="keep the brokers' run directories (configs, data, logs) after the session",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``integration`` marker and the list of clusters this session started."""
    config.addinivalue_line(
        "markers", "integration: needs a real Apache Kafka broker (started by kafkastate.testing)"
    )
    config.stash[_STARTED] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that uses a cluster fixture (even indirectly) ``integration``."""
    for item in items:
        names = getattr(item, "fixturenames", ())
        if any(name in names for name in _FIXTURES):
            item.add_marker(pytest.mark.integration)


def unavailable(exc: PrerequisiteError) -> NoReturn:
    """Skip (or, with ``KAFKASTATE_REQUIRE_BROKER``, fail) a test that needs a broker the
    harness cannot start; for fixtures of your own that start clusters.

    Args:
        exc: why the harness cannot start one.
    """
    message = (
        f"kafkastate: no Kafka broker: {exc.missing} not found ({exc.purpose}); install it, "
        "or point KAFKASTATE_BOOTSTRAP at a running cluster"
    )
    if os.environ.get("KAFKASTATE_REQUIRE_BROKER"):
        pytest.fail(message + " [KAFKASTATE_REQUIRE_BROKER is set]", pytrace=False)
    pytest.skip(message)


def _session_cluster(request: pytest.FixtureRequest, brokers: int) -> Iterator[KafkaCluster]:
    config = request.config
    version = config.getoption("--kafka-version") or None
    try:
        if brokers == 1:
            cluster = KafkaCluster.resolve(version, 1, sasl=True, ssl=True)
        else:
            env = dict(os.environ)
            env["KAFKASTATE_BOOTSTRAP"] = os.environ.get("KAFKASTATE_BOOTSTRAP3", "")
            for key in ("SASL_BOOTSTRAP", "SSL_BOOTSTRAP", "SSL_CAFILE"):
                env.pop(f"KAFKASTATE_{key}", None)
            external = KafkaCluster.from_env(env)
            cluster = external or KafkaCluster.start(version, brokers, config_overrides=RACK_AWARE)
    except PrerequisiteError as exc:
        unavailable(exc)
    config.stash[_STARTED].append(cluster)
    yield cluster
    failed = request.session.testsfailed > 0
    keep = bool(config.getoption("--kafka-keep")) or failed
    cluster.stop(remove=not keep, graceful=False)


@pytest.fixture(scope="session")
def kafka_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """One broker with PLAINTEXT, SASL_PLAINTEXT and SSL listeners, shared by the session.

    Honours ``KAFKASTATE_BOOTSTRAP`` (an existing cluster: then ``sasl_bootstrap`` /
    ``ssl_bootstrap`` are set only if ``KAFKASTATE_SASL_BOOTSTRAP`` / ``KAFKASTATE_SSL_BOOTSTRAP``
    are, and fault control is unavailable: check ``cluster.controllable``).

    Yields:
        The ready :class:`~kafkastate.testing.KafkaCluster`.
    """
    yield from _session_cluster(request, 1)


@pytest.fixture(scope="session")
def kafka_cluster3(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """Three combined broker+controller nodes (replication factor 3), started on first use.

    Node N is in rack ``rack-N`` and brokers pick replicas for consumers by rack
    (:data:`RACK_AWARE`): a consumer with ``client_rack="rack-2"`` is sent to node 2's
    replica (KIP-392); consumers without a rack read from leaders as usual.

    Honours ``KAFKASTATE_BOOTSTRAP3`` (an existing multi-broker cluster, no fault control).

    Yields:
        The ready :class:`~kafkastate.testing.KafkaCluster`.
    """
    yield from _session_cluster(request, 3)


@pytest.fixture(autouse=True)
def _healthy_cluster3(request: pytest.FixtureRequest) -> None:
    """Before a test that uses ``kafka_cluster3``: every node running and ready, whatever
    the fault tests before it left behind (a node that did not survive its restart)."""
    if "kafka_cluster3" not in getattr(request, "fixturenames", ()):
        return
    cluster: KafkaCluster = request.getfixturevalue("kafka_cluster3")
    if cluster.controllable:
        cluster.heal()


@pytest.fixture
def kafka_bootstrap_env(kafka_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """Export ``kafka_cluster``'s ``KAFKASTATE_*`` variables for the duration of one test.

    For code that reads its broker address from the environment (docs examples, demos,
    subprocesses): ``KAFKASTATE_BOOTSTRAP`` and, when present, the SASL/SSL entries.
    """
    for key, value in kafka_cluster.env().items():
        monkeypatch.setenv(key, value)


def _clusters_of(item: pytest.Item) -> list[KafkaCluster]:
    funcargs = getattr(item, "funcargs", {})
    return [value for value in funcargs.values() if isinstance(value, KafkaCluster)]


def _log_lines(cluster: KafkaCluster) -> list[str]:
    lines: list[str] = []
    for broker in cluster.brokers:
        state = "running" if broker.is_running else "not running"
        lines.append(f"node {broker.node_id} ({state}, {broker.address}): {broker.log_file}")
    return lines


def _problems(path: Path, limit: int = 10) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    hits = [line for line in text.splitlines() if "] ERROR " in line or "] WARN " in line]
    return hits[-limit:]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the broker log paths (and their last warnings) to a failing test's report."""
    report = yield
    if report.failed:
        for cluster in _clusters_of(item):
            if not cluster.brokers:
                continue
            lines = _log_lines(cluster)
            for broker in cluster.brokers:
                problems = _problems(broker.log_file)
                if problems:
                    lines.append(f"--- last warnings/errors of node {broker.node_id} ---")
                    lines.extend(problems)
            report.sections.append(("kafkastate broker logs", "\n".join(lines)))
    return report


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """After a failed session, say where the kept broker logs are."""
    started = config.stash.get(_STARTED, [])
    local = [c for c in started if c.brokers]
    if not local or (exitstatus == 0 and not config.getoption("--kafka-keep")):
        return
    terminalreporter.section("kafkastate brokers")
    for cluster in local:
        terminalreporter.write_line(f"{cluster!r}: run dir {cluster.workdir}")
        for line in _log_lines(cluster):
            terminalreporter.write_line("  " + line)


@pytest.fixture
def kafka_sim(request: pytest.FixtureRequest) -> KafkaSim:
    """A :class:`~kafkastate.sim.api.KafkaSim` (docs/simulation.md, "Your code in the
    simulation"): ``kafka_sim.check(app=..., check=..., reset=...)`` -- or, for your
    asyncio/trio consumer code, ``kafka_sim.check(member=..., final=..., backend=...)`` --
    sweeps the seeds and fails with the seed and how to replay it.

    Returns:
        The simulator's user API, with the seeds the command line asks for.
    """
    from kafkastate.sim.api import DEFAULT_SEEDS, KafkaSim  # noqa: PLC0415 (no sim unless used)

    one = request.config.getoption("--kafka-sim-seed")
    count = request.config.getoption("--kafka-sim-seeds") or DEFAULT_SEEDS
    return KafkaSim(seeds=[one] if one is not None else range(count))
