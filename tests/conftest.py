"""Fixtures and markers shared by the whole suite (the suite's only conftest).

* ``anyio_backend`` -- every ``@pytest.mark.anyio`` test runs on asyncio and on trio
  (STYLE.md §11). Trio-only tests are ``@pytest.mark.trio`` (pytest-trio, ``trio_mode`` off).
* ``implementation`` / ``c_accelerator`` -- the record codec switch: run a module once per
  codec, or need the compiled ``_speedups``. A missing build skips, except in CI.
* ``@pytest.mark.kafka_needs(...)`` -- what a real-broker test needs of its cluster beyond a
  PLAINTEXT listener; against an external cluster (``KAFKASTATE_BOOTSTRAP``) that lacks it the
  test is skipped, naming the missing piece.
* ``bootstrap``, ``new_topic``, ``client``, ``produce`` -- the kafkastate.legacy tests
  (tests/integration/legacy): the broker, a fresh ready topic, a legacy KafkaClient, and
  writing values to one partition through it.
* ``compat_cluster`` -- the broker-version compatibility suite's own broker (tests/compat,
  marker ``compat``): Kafka ``$KAFKASTATE_COMPAT_VERSION`` (default: 3.9.1 or 2.8.2 by the
  day, tests/compat/versions.py), with SASL and SSL listeners when
  ``KAFKASTATE_COMPAT_FULL=1`` (``nox -s compat`` sets both, version by version). With
  ``KAFKASTATE_COMPAT_RESULTS=DIR`` the session writes ``DIR/kafka-VERSION.json``: each
  ``compat_row`` case's outcome, what tools/gen_compat_table.py turns into the table of
  docs/compatibility.md. A case that found the broker lacking its feature (and checked the
  client's error) says so with ``record_property("broker_lacks", FOOTNOTE_KEY)``.
* ``kerberos_realm``, ``gssapi_cluster``, ``kerberos_client`` -- SASL/GSSAPI against a real
  MIT KDC (tests/integration/test_gssapi.py): a throwaway realm ``KAFKASTATE.TEST`` on a
  loopback port, a broker whose SASL_PLAINTEXT listener also speaks GSSAPI as
  ``kafka/localhost``, and this process pointed at the realm with a ticket of ``client``
  in a private credentials cache. Missing krb5 programs or the gssapi package skip, naming
  what to install (``KAFKASTATE_REQUIRE_BROKER`` makes that a failure, as for a broker).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.protocol import records
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.errors import BrokerResponseError
from kafkastate.legacy import KafkaClient, create_message
from kafkastate.legacy.common import OffsetRequest, ProduceRequest
from kafkastate.testing import (
    KafkaCluster,
    KerberosRealm,
    PrerequisiteError,
    ProbeError,
    metadata,
)
from kafkastate.testing.pytest_plugin import unavailable
from tests.compat.results import write_results
from tests.compat.versions import short_version

# -- async backends ---------------------------------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``@pytest.mark.anyio`` test once on asyncio and once on trio."""
    return str(request.param)


# -- the C accelerator ------------------------------------------------------------------------

C_ACCELERATOR_MISSING = (
    "the compiled module kafkastate.core.protocol._speedups is not built "
    "(no C compiler when kafkastate was installed)"
)


def _c_accelerator_missing() -> NoReturn:
    """Skip, or fail where a missing build must not pass unnoticed: like a missing broker
    (kafkastate.testing), ``KAFKASTATE_REQUIRE_BROKER=1`` -- and ``CI`` -- make it an error."""
    required = [name for name in ("KAFKASTATE_REQUIRE_BROKER", "CI") if os.environ.get(name)]
    if required:
        pytest.fail(f"{C_ACCELERATOR_MISSING} [{' and '.join(required)} set]", pytrace=False)
    pytest.skip(C_ACCELERATOR_MISSING)


@pytest.fixture(scope="session")
def c_accelerator() -> None:
    """Need the C accelerator (session-scoped, so Hypothesis tests may use it)."""
    if not records.SPEEDUPS_AVAILABLE:
        _c_accelerator_missing()


@pytest.fixture(scope="module", params=["python", "c"])
def implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a whole test module once per record codec: pure Python, then C.

    Module-scoped so Hypothesis tests may use it: ``pytestmark =
    pytest.mark.usefixtures("implementation")``.
    """
    if request.param == "c" and not records.SPEEDUPS_AVAILABLE:
        _c_accelerator_missing()
    previous = records.set_speedups(request.param == "c")
    yield request.param
    records.set_speedups(previous)


# -- what a real-broker test needs of its cluster ---------------------------------------------

NEEDS = ("sasl", "ssl", "fault_control", "racks", "single_broker")
"""Arguments of ``kafka_needs``; ``"sasl:MECHANISM"`` also needs that mechanism enabled."""


def _which(cluster: KafkaCluster, name: str) -> str:
    if cluster.kind != "external":
        return f"{name} is {cluster!r}"
    variable = "KAFKASTATE_BOOTSTRAP3" if name == "kafka_cluster3" else "KAFKASTATE_BOOTSTRAP"
    return f"{variable} names an external cluster ({cluster.bootstrap})"


def _missing(cluster: KafkaCluster, need: str) -> str | None:
    """Why ``cluster`` cannot give ``need``, or None if it can."""
    need, _, mechanism = need.partition(":")
    if need == "sasl":
        if cluster.sasl is None or cluster.sasl_bootstrap is None:
            return "a SASL_PLAINTEXT listener (set KAFKASTATE_SASL_BOOTSTRAP)"
        if mechanism == "OAUTHBEARER" and not cluster.sasl.oauthbearer:
            return "OAUTHBEARER on the SASL listener (KAFKASTATE_SASL_MECHANISMS)"
        if mechanism and mechanism != "OAUTHBEARER" and mechanism not in cluster.sasl.mechanisms:
            return f"{mechanism} on the SASL listener (KAFKASTATE_SASL_MECHANISMS)"
        return None
    if need == "ssl":
        if cluster.ssl_bootstrap is None or cluster.ca_file is None:
            return "an SSL listener (set KAFKASTATE_SSL_BOOTSTRAP and KAFKASTATE_SSL_CAFILE)"
        return None
    if need == "fault_control":
        return None if cluster.controllable else "brokers the harness can kill, stop and pause"
    if need == "racks":
        return None if cluster.controllable else "brokers in the harness's racks (rack-N)"
    if need == "single_broker":
        if cluster.kind != "external":
            return None if len(cluster.brokers) <= 1 else "a single broker"
        host, _, port = cluster.bootstrap.split(",")[0].rpartition(":")
        try:
            count = len(metadata(host, int(port)).brokers)
        except ProbeError:
            return None  # unreachable: the test itself reports that
        return None if count == 1 else f"a single broker (it has {count})"
    raise ValueError(f"kafka_needs: unknown need {need!r}; known: {', '.join(NEEDS)}")


@pytest.fixture(autouse=True)
def _kafka_needs(request: pytest.FixtureRequest) -> None:
    """Skip a ``kafka_needs`` test whose (external) cluster lacks a prerequisite."""
    needs = [need for marker in request.node.iter_markers("kafka_needs") for need in marker.args]
    if not needs:
        return
    name = "kafka_cluster3" if "kafka_cluster3" in request.fixturenames else "kafka_cluster"
    cluster: Any = request.getfixturevalue(name)
    missing = [why for need in needs if (why := _missing(cluster, need)) is not None]
    if missing:
        pytest.skip(f"needs {'; '.join(missing)}: {_which(cluster, name)}")


# -- the broker-version compatibility suite (tests/compat) ------------------------------------

COMPAT_FULL = bool(os.environ.get("KAFKASTATE_COMPAT_FULL"))
"""Run every compat case (all codecs, SASL, SSL), not the default suite's short set."""


def pytest_report_header(config: pytest.Config) -> str:
    return f"compat: Kafka {short_version()} ({'full' if COMPAT_FULL else 'short'} set)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default suite runs the compat suite's short set: ``compat_full`` cases are
    deselected (reported as such, not skipped) unless ``KAFKASTATE_COMPAT_FULL=1``."""
    if COMPAT_FULL:
        return
    full = [item for item in items if item.get_closest_marker("compat_full") is not None]
    if full:
        config.hook.pytest_deselected(items=full)
        items[:] = [item for item in items if item.get_closest_marker("compat_full") is None]


@pytest.fixture(scope="session")
def compat_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """One broker of ``$KAFKASTATE_COMPAT_VERSION`` for the compatibility suite."""
    try:
        cluster = KafkaCluster.start(short_version(), sasl=COMPAT_FULL, ssl=COMPAT_FULL)
    except PrerequisiteError as exc:
        unavailable(exc)
    request.config.stash[_COMPAT_RUN] = cluster
    yield cluster
    keep = request.session.testsfailed > 0 or bool(request.config.getoption("--kafka-keep"))
    cluster.stop(remove=not keep, graceful=False)


_COMPAT_RUN = pytest.StashKey[KafkaCluster]()
_COMPAT_OUTCOMES = pytest.StashKey[dict[str, tuple[str, str, str | None]]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each ``compat_row`` case's outcome (a failed setup or teardown counts too)."""
    report: pytest.TestReport = yield
    marker = item.get_closest_marker("compat_row")
    if marker is None or (report.when != "call" and report.passed):
        return report
    recorded = dict(item.user_properties).get("broker_lacks")
    lacks = None if recorded is None else str(recorded)
    outcome: str = "ok" if report.passed else report.outcome
    if outcome == "ok" and lacks:
        outcome = "lacks"
    outcomes = item.config.stash.setdefault(_COMPAT_OUTCOMES, {})
    if report.when == "call" or item.nodeid not in outcomes or outcome == "failed":
        outcomes[item.nodeid] = (str(marker.args[0]), outcome, lacks)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    """With ``KAFKASTATE_COMPAT_RESULTS``, write the compat cases' outcomes for the table."""
    target = os.environ.get("KAFKASTATE_COMPAT_RESULTS")
    cluster = session.config.stash.get(_COMPAT_RUN, None)
    outcomes = session.config.stash.get(_COMPAT_OUTCOMES, {})
    if not target or cluster is None or cluster.profile is None or not outcomes:
        return
    write_results(Path(target), cluster.profile, outcomes, full=COMPAT_FULL)


# -- the kafkastate.legacy tests (tests/integration/legacy) -----------------------------------


@pytest.fixture
def bootstrap(kafka_cluster: KafkaCluster) -> str:
    return kafka_cluster.bootstrap


@pytest.fixture
def new_topic(bootstrap: str) -> Callable[..., str]:
    """``new_topic(partitions=1)``: create a topic with a unique name, return the name."""

    def make(partitions: int = 1) -> str:
        name = f"legacy-{uuid.uuid4().hex[:10]}"
        with BlockingAdmin(bootstrap) as admin:
            admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
        # Metadata names a leader a moment before it serves: wait until every partition
        # answers, so that examples without retries (as 0.9.5's) meet a ready topic.
        with KafkaClient(bootstrap) as client:
            for _ in range(100):
                client.load_metadata_for_topics(name)
                reqs = [OffsetRequest(name, p, -1, 1) for p in range(partitions)]
                if all(r.error == 0 for r in client.send_offset_request(reqs, False)):
                    return name
                time.sleep(0.1)
        raise AssertionError(f"topic {name} never became ready")

    return make


@pytest.fixture
def client(bootstrap: str) -> Iterator[KafkaClient]:
    c = KafkaClient(bootstrap)
    yield c
    c.close()


@pytest.fixture
def produce(client: KafkaClient) -> Callable[..., None]:
    """``produce(topic, partition, values)``: write ``values`` (bytes) to one partition."""

    def write(topic: str, partition: int, values: list[bytes]) -> None:
        messages = [create_message(v) for v in values]
        for attempt in range(50):
            try:
                client.send_produce_request([ProduceRequest(topic, partition, messages)])
                return
            except BrokerResponseError as exc:  # a new topic's leader may not be ready
                if not exc.retriable or attempt == 49:
                    raise
                client.load_metadata_for_topics(topic)
                time.sleep(0.1)

    return write


# -- SASL/GSSAPI against a real KDC (tests/integration/test_gssapi.py) ------------------------


def _kerberos_missing(what: str) -> NoReturn:
    if os.environ.get("KAFKASTATE_REQUIRE_BROKER"):
        pytest.fail(f"{what} [KAFKASTATE_REQUIRE_BROKER is set]", pytrace=False)
    pytest.skip(what)


@pytest.fixture(scope="module")
def kerberos_realm() -> Iterator[KerberosRealm]:
    """A running MIT KDC for ``KAFKASTATE.TEST`` with ``kafka/localhost`` and ``client``."""
    try:
        import gssapi  # noqa: F401, PLC0415 - the client side of the tests
    except (ImportError, OSError) as exc:
        _kerberos_missing(f"gssapi package missing: pip install 'kafkastate[gssapi]' ({exc})")
    try:
        realm = KerberosRealm.start()
    except PrerequisiteError as exc:
        _kerberos_missing(f"{exc.missing} not found ({exc.purpose})")
    try:
        realm.add_principal("client")
        yield realm
    finally:
        realm.stop()


GSSAPI_REAUTH_MS = 4000
"""``connections.max.reauth.ms`` of ``gssapi_cluster``: long tests re-authenticate (KIP-368)."""


@pytest.fixture(scope="module")
def gssapi_cluster(kerberos_realm: KerberosRealm) -> Iterator[KafkaCluster]:
    """A broker whose SASL_PLAINTEXT listener also speaks GSSAPI (``kafka/localhost``) and
    asks for re-authentication every :data:`GSSAPI_REAUTH_MS`."""
    try:
        cluster = KafkaCluster.start(
            kerberos=kerberos_realm.broker_service("localhost"),
            config_overrides={"connections.max.reauth.ms": str(GSSAPI_REAUTH_MS)},
        )
    except PrerequisiteError as exc:
        unavailable(exc)
    with cluster:
        yield cluster


@pytest.fixture
def kerberos_client(
    kerberos_realm: KerberosRealm, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> KerberosRealm:
    """Point this process at the realm with ``client``'s ticket in a private cache."""
    ccache = tmp_path / "ccache"
    kerberos_realm.kinit("client", kerberos_realm.root / "client.keytab", ccache)
    for name, value in kerberos_realm.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{ccache}")
    monkeypatch.delenv("KRB5_CLIENT_KTNAME", raising=False)
    return kerberos_realm
