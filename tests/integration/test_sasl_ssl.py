"""Every SASL mechanism over TLS (SASL_SSL) against a real broker, on every runtime.

One broker for the module, started with ``sasl_ssl=True``: its SASL_SSL listener takes PLAIN,
SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (tokens from a real OIDC token endpoint,
:class:`~kafkastate.testing.OIDCServer`, validated against its JWKS) and GSSAPI (a real MIT
KDC, :class:`~kafkastate.testing.KerberosRealm`). Its certificate names only ``127.0.0.1``,
so a bootstrap of ``localhost:PORT`` fails hostname verification unless it is turned off.
Re-authentication (KIP-368) is on, with a session as long as the client's token lets it.

Without the Kerberos programs or the gssapi package the GSSAPI cases skip, naming what is
missing; the other mechanisms still run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import kafkastate.anyio
import kafkastate.trio
from kafkastate.adapters._common import resolve
from kafkastate.asyncio import AIOKafkaConsumer, AIOKafkaProducer, create_ssl_context
from kafkastate.core.config import client_config
from kafkastate.errors import KafkaError, SslAuthenticationError
from kafkastate.oauth import OIDCTokenProvider
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafkastate.testing import KafkaCluster, KerberosRealm, OIDCServer, PrerequisiteError
from kafkastate.testing._tls import make_tls_files
from kafkastate.testing.pytest_plugin import unavailable
from tests.conformance.runtimes import new_topic

pytestmark = pytest.mark.integration

CLIENT_ID = "sasl-ssl-client"
CLIENT_SECRET = "sasl-ssl-client-secret"
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
SESSION_MS = 600_000
"""``connections.max.reauth.ms``: long, so that only a short-lived token makes a
connection re-authenticate during a test (its session ends when the token does)."""


@pytest.fixture(scope="module")
def idp() -> Iterator[OIDCServer]:
    with OIDCServer({CLIENT_ID: CLIENT_SECRET}, audience="kafka") as server:
        yield server


@pytest.fixture(scope="module")
def realm(request: pytest.FixtureRequest) -> KerberosRealm | str:
    """The KDC of tests/conftest.py, or why there is none (only GSSAPI needs it)."""
    try:
        found: KerberosRealm = request.getfixturevalue("kerberos_realm")
    except pytest.skip.Exception as exc:
        return str(exc)
    return found


@pytest.fixture(scope="module")
def cluster(idp: OIDCServer, realm: KerberosRealm | str) -> Iterator[KafkaCluster]:
    kerberos = None if isinstance(realm, str) else realm.broker_service("localhost")
    try:
        started = KafkaCluster.start(
            sasl_ssl=True,
            oauth=idp.spec(),
            kerberos=kerberos,
            ssl_hostnames=("127.0.0.1",),
            config_overrides={"connections.max.reauth.ms": str(SESSION_MS)},
        )
    except PrerequisiteError as exc:
        unavailable(exc)
    with started:
        yield started


@pytest.fixture
def options(
    request: pytest.FixtureRequest, cluster: KafkaCluster, idp: OIDCServer, realm: Any
) -> dict[str, Any]:
    """The client options (kafka-python's names) for the test's ``mechanism`` over SASL_SSL."""
    mechanism: str = request.getfixturevalue("mechanism")
    assert cluster.ca_file is not None and cluster.sasl is not None
    base: dict[str, Any] = {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(cluster.ca_file),
        "sasl_mechanism": mechanism,
    }
    if mechanism == "OAUTHBEARER":
        provider = OIDCTokenProvider(idp.token_url, CLIENT_ID, CLIENT_SECRET, scope="kafka")
        return {**base, "sasl_oauth_token_provider": provider}
    if mechanism == "GSSAPI":
        if isinstance(realm, str):
            pytest.skip(realm)
        request.getfixturevalue("kerberos_client")  # a ticket, KRB5_CONFIG, KRB5CCNAME
        return {**base, "sasl_kerberos_domain_name": "localhost"}
    return {
        **base,
        "sasl_plain_username": cluster.sasl.username,
        "sasl_plain_password": cluster.sasl.password,
    }


def _bootstrap(cluster: KafkaCluster) -> str:
    assert cluster.sasl_ssl_bootstrap is not None
    return cluster.sasl_ssl_bootstrap


def _by_name(cluster: KafkaCluster) -> str:
    """The SASL_SSL listener as ``localhost:PORT``: a name the certificate does not carry."""
    return _bootstrap(cluster).replace("127.0.0.1", "localhost")


def _aiokafka_spelling(
    options: dict[str, Any], *, cafile: str | None = None, check_hostname: bool = True
) -> dict[str, Any]:
    """``options`` in aiokafka's spelling: the CA (``cafile``, else ``ssl_cafile``) and a
    client certificate, if any, as an ``ssl_context`` from ``create_ssl_context``."""
    opts = dict(options)
    trusted = opts.pop("ssl_cafile")
    opts["ssl_context"] = create_ssl_context(
        cafile=cafile or trusted,
        certfile=opts.pop("ssl_certfile", None),
        keyfile=opts.pop("ssl_keyfile", None),
        password=opts.pop("ssl_password", None),
        check_hostname=check_hostname,
    )
    return opts


def _blocking_round_trip(bootstrap: str, topic: str, values: list[bytes], **opts: Any) -> None:
    with KafkaProducer(bootstrap_servers=bootstrap, **opts) as producer:
        for value in values:
            producer.send(topic, value).get(timeout=30)
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **opts) as c:
        c.assign([TopicPartition(topic, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=1000).values():
                got.extend(r.value for r in records)
    assert got == values


async def _anyio_round_trip(
    face: Any, bootstrap: str, topic: str, values: list[bytes], **opts: Any
) -> None:
    """Produce and read back with ``open_producer``/``open_consumer`` of ``face``
    (kafkastate.anyio or kafkastate.trio)."""
    with anyio.fail_after(60):
        async with face.open_producer(bootstrap, **opts) as producer:
            for value in values:
                await producer.send(topic, value)
        async with face.open_consumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", **opts
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            got = [(await consumer.getone()).value for _ in values]
    assert got == values


# -- every mechanism on every runtime ----------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_blocking(cluster: KafkaCluster, mechanism: str, options: dict[str, Any]) -> None:
    values = [f"{mechanism}-{i}".encode() for i in range(3)]
    _blocking_round_trip(_bootstrap(cluster), new_topic(cluster.bootstrap), values, **options)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("face", "anyio_backend"),
    [
        pytest.param(kafkastate.anyio, "asyncio", id="anyio-asyncio"),
        pytest.param(kafkastate.anyio, "trio", id="anyio-trio"),
        pytest.param(kafkastate.trio, "trio", id="trio"),
    ],
)
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_async_faces(
    cluster: KafkaCluster, mechanism: str, options: dict[str, Any], face: Any, anyio_backend: str
) -> None:
    """``open_producer``/``open_consumer`` of kafkastate.anyio (on asyncio and trio) and of
    kafkastate.trio."""
    values = [f"{face.__name__}-{anyio_backend}-{mechanism}-{i}".encode() for i in range(3)]
    topic = new_topic(cluster.bootstrap)
    await _anyio_round_trip(face, _bootstrap(cluster), topic, values, **options)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_aiokafka_faces(
    cluster: KafkaCluster, mechanism: str, options: dict[str, Any], anyio_backend: str
) -> None:
    """aiokafka's spelling: the CA as an ``ssl_context`` from ``create_ssl_context``."""
    opts = _aiokafka_spelling(options)
    topic = new_topic(cluster.bootstrap)
    with anyio.fail_after(60):
        producer = AIOKafkaProducer(bootstrap_servers=_bootstrap(cluster), **opts)
        await producer.start()
        try:
            await producer.send_and_wait(topic, mechanism.encode())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=_bootstrap(cluster), auto_offset_reset="earliest", **opts
        )
        await consumer.start()
        try:
            record = await consumer.getone()
        finally:
            await consumer.stop()
    assert record.value == mechanism.encode()


# -- hostname verification, untrusted CA -------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256"])
def test_blocking_hostname_verification(
    cluster: KafkaCluster, mechanism: str, options: dict[str, Any]
) -> None:
    started = time.monotonic()
    with pytest.raises(SslAuthenticationError, match="does not name the host"):
        KafkaProducer(bootstrap_servers=_by_name(cluster), **options)
    assert time.monotonic() - started < 5
    topic = new_topic(cluster.bootstrap)
    unchecked = {**options, "ssl_check_hostname": False}
    _blocking_round_trip(_by_name(cluster), topic, [b"name not checked"], **unchecked)


@pytest.mark.anyio
@pytest.mark.parametrize("mechanism", ["PLAIN"])
async def test_anyio_hostname_verification(
    cluster: KafkaCluster, mechanism: str, options: dict[str, Any], anyio_backend: str
) -> None:
    topic = new_topic(cluster.bootstrap)
    with anyio.fail_after(5), pytest.raises(SslAuthenticationError, match="does not name"):
        async with kafkastate.anyio.open_producer(_by_name(cluster), **options) as producer:
            await producer.send(topic, b"never")
    unchecked = {**options, "ssl_check_hostname": False}
    await _anyio_round_trip(kafkastate.anyio, _by_name(cluster), topic, [b"ok"], **unchecked)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512"])
async def test_aiokafka_hostname_verification(
    cluster: KafkaCluster, mechanism: str, options: dict[str, Any], anyio_backend: str
) -> None:
    """aiokafka's way: ``check_hostname`` of the context."""
    checked = AIOKafkaProducer(bootstrap_servers=_by_name(cluster), **_aiokafka_spelling(options))
    try:
        with anyio.fail_after(5), pytest.raises(SslAuthenticationError, match="does not name"):
            await checked.start()
    finally:
        await checked.stop()
    unchecked = AIOKafkaProducer(
        bootstrap_servers=_by_name(cluster), **_aiokafka_spelling(options, check_hostname=False)
    )
    await unchecked.start()
    try:
        await unchecked.send_and_wait(new_topic(cluster.bootstrap), b"name not checked")
    finally:
        await unchecked.stop()


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that did not sign the broker's certificate."""
    return make_tls_files(tmp_path_factory.mktemp("other-ca")).ca_file


@pytest.mark.parametrize("mechanism", ["PLAIN", "OAUTHBEARER"])
def test_blocking_wrong_ca_is_refused(
    cluster: KafkaCluster, mechanism: str, options: dict[str, Any], other_ca: Path
) -> None:
    started = time.monotonic()
    with pytest.raises(SslAuthenticationError, match="ssl_cafile"):
        KafkaProducer(
            bootstrap_servers=_bootstrap(cluster), **{**options, "ssl_cafile": str(other_ca)}
        )
    assert time.monotonic() - started < 5


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("spelling", "anyio_backend"),
    [("anyio", "asyncio"), ("anyio", "trio"), ("aiokafka", "asyncio")],
)
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256"])
async def test_async_wrong_ca_is_refused(  # noqa: PLR0917 - fixtures and parameters
    cluster: KafkaCluster,
    mechanism: str,
    options: dict[str, Any],
    other_ca: Path,
    spelling: str,
    anyio_backend: str,
) -> None:
    topic = new_topic(cluster.bootstrap)
    with anyio.fail_after(5), pytest.raises(SslAuthenticationError):
        if spelling == "aiokafka":
            producer = AIOKafkaProducer(
                bootstrap_servers=_bootstrap(cluster),
                **_aiokafka_spelling(options, cafile=str(other_ca)),
            )
            try:
                await producer.start()
            finally:
                await producer.stop()
        else:
            wrong = {**options, "ssl_cafile": str(other_ca)}
            async with kafkastate.anyio.open_producer(_bootstrap(cluster), **wrong) as producer:
                await producer.send(topic, b"never")


# -- a slow token provider does not stall the blocking clients' IO -----------------------------


class SlowOnReauthentication:
    """A token provider (kafka-python's shape) whose first token is short-lived and whose
    answers from the third call on take :attr:`delay` seconds (an identity provider that
    hangs). The first token authenticates the producer's bootstrap connection, which must
    therefore re-authenticate a few seconds later; the second authenticates the connection
    its records go to, for an hour."""

    delay = 6.0

    def __init__(self, idp: OIDCServer) -> None:
        self.idp = idp
        self.calls = 0
        self.slow_started = threading.Event()
        self.slow_done = threading.Event()

    def token(self) -> str:
        self.calls += 1
        if self.calls == 1:
            return self.idp.issue(CLIENT_ID, lifetime=4)
        if self.calls >= 3:
            self.slow_started.set()
            time.sleep(self.delay)
            self.slow_done.set()
        return self.idp.issue(CLIENT_ID)


def test_a_slow_token_provider_does_not_block_produce(
    cluster: KafkaCluster, idp: OIDCServer
) -> None:
    """The blocking producer calls the provider on a worker thread: while it hangs for
    the bootstrap connection's re-authentication, records still go out at once on the
    broker connection, which is authenticated already."""
    assert cluster.ca_file is not None
    provider = SlowOnReauthentication(idp)
    topic = new_topic(cluster.bootstrap)
    with KafkaProducer(
        bootstrap_servers=_bootstrap(cluster),
        security_protocol="SASL_SSL",
        ssl_cafile=str(cluster.ca_file),
        sasl_mechanism="OAUTHBEARER",
        sasl_oauth_token_provider=provider,
    ) as producer:
        producer.send(topic, b"first").get(timeout=30)
        assert provider.calls == 2  # the bootstrap connection and the broker's
        assert provider.slow_started.wait(10), "the bootstrap connection never re-authenticated"
        latencies = []
        for i in range(10):
            started = time.monotonic()
            producer.send(topic, f"while the provider hangs {i}".encode()).get(timeout=30)
            latencies.append(time.monotonic() - started)
            time.sleep(0.1)
        assert not provider.slow_done.is_set(), "the provider answered before the sends ended"
        assert max(latencies) < 1.0, latencies
        assert provider.slow_done.wait(provider.delay + 5)
        deadline = time.monotonic() + 10
        while producer.metrics()["producer-metrics"]["successful-reauthentication-total"] < 1:
            assert time.monotonic() < deadline, "the late token never re-authenticated"
            time.sleep(0.1)
        producer.send(topic, b"after").get(timeout=30)


# -- no secret anywhere: logs, reprs, errors, metrics ------------------------------------------

PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class _Secrets:
    """The secret strings of one test and every text a user could see, to grep."""

    def __init__(self, *secrets: str | None) -> None:
        self.secrets = [s for s in secrets if s]
        self.shown: list[str] = []

    def show(self, *things: object) -> None:
        """Record ``repr()`` and ``str()`` of each thing (an error: its traceback too)."""
        for thing in things:
            self.shown += [repr(thing), str(thing)]
            if isinstance(thing, BaseException):
                self.shown.append("".join(traceback.format_exception(thing)))

    def refusal(self, make: Any) -> None:
        """Run ``make``, which must raise a KafkaError; record what it raised."""
        with pytest.raises(KafkaError) as info:
            make()
        self.show(info.value)

    def assert_absent(
        self, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
    ) -> None:
        assert any(
            r.name.startswith("kafkastate") and r.levelno == logging.DEBUG for r in caplog.records
        ), "no DEBUG record of kafkastate was captured: the check would prove nothing"
        out, err = capfd.readouterr()
        texts = {"logs": caplog.text, "stdout": out, "stderr": err, "shown": "\n".join(self.shown)}
        for i, secret in enumerate(self.secrets):
            leaked = [where for where, text in texts.items() if secret in text]
            assert not leaked, f"secret #{i} ({len(secret)} chars) is in the {leaked}"


def _secret_options(
    cluster: KafkaCluster, options: dict[str, Any], mechanism: str
) -> tuple[dict[str, Any], _Secrets]:
    """``options`` plus a client certificate with an encrypted key (``ssl_password``, a
    secret on every mechanism), and the secrets the mechanism adds."""
    tls = cluster.tls
    assert tls is not None and tls.client_cert is not None and tls.client_key is not None
    opts = {
        **options,
        "ssl_certfile": str(tls.client_cert),
        "ssl_keyfile": str(tls.client_key),
        "ssl_password": tls.client_key_password,
    }
    found = _Secrets(tls.client_key_password, opts.get("sasl_plain_password"))
    if mechanism == "OAUTHBEARER":
        found.secrets.append(CLIENT_SECRET)
    return opts, found


def _refusals(found: _Secrets, bootstrap: str, opts: dict[str, Any], idp: OIDCServer) -> None:
    """Wrong credentials of the mechanism, and a wrong key password: the errors must not
    show them (nor the right ones)."""
    mechanism = opts["sasl_mechanism"]
    if mechanism in PASSWORD_MECHANISMS:
        wrong = f"wrong-{uuid.uuid4().hex}"
        found.secrets.append(wrong)
        bad = {**opts, "sasl_plain_password": wrong}
        found.refusal(lambda: KafkaProducer(bootstrap_servers=bootstrap, **bad))
    if mechanism == "OAUTHBEARER":
        forged = idp.issue(CLIENT_ID, bad_signature=True)
        found.secrets.append(forged)

        class Forged:
            def token(self) -> str:
                return forged

        bad = {**opts, "sasl_oauth_token_provider": Forged()}
        found.refusal(lambda: KafkaProducer(bootstrap_servers=bootstrap, **bad))
    wrong_key_password = f"wrong-key-{uuid.uuid4().hex}"
    found.secrets.append(wrong_key_password)
    bad = {**opts, "ssl_password": wrong_key_password}
    found.refusal(lambda: KafkaProducer(bootstrap_servers=bootstrap, **bad))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_no_secret_in_blocking_logs_reprs_errors_or_metrics(  # noqa: PLR0917 - fixtures
    cluster: KafkaCluster,
    idp: OIDCServer,
    mechanism: str,
    options: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    opts, found = _secret_options(cluster, options, mechanism)
    bootstrap, topic = _bootstrap(cluster), new_topic(cluster.bootstrap)
    with KafkaProducer(bootstrap_servers=bootstrap, **opts) as producer:
        producer.send(topic, b"secret-free").get(timeout=30)
        found.show(producer, producer.config, producer.metrics(), producer.health())
    with KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", **opts) as c:
        c.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 30
        while not c.poll(timeout_ms=500) and time.monotonic() < deadline:
            pass
        found.show(c, c.config, c.metrics(), c.health())
    with KafkaAdminClient(bootstrap_servers=bootstrap, **opts) as admin:
        found.show(admin, admin.list_topics(), admin.metrics(), admin.health())
    resolved = resolve(
        "producer", "kafka-python", {"bootstrap_servers": bootstrap, **opts}, owner="T"
    )
    found.show(resolved, client_config(resolved))
    _refusals(found, bootstrap, opts, idp)
    if mechanism == "OAUTHBEARER":  # the token the clients used (the provider caches it)
        found.secrets.append(asyncio.run(opts["sasl_oauth_token_provider"].token()))
        found.show(opts["sasl_oauth_token_provider"])
    found.assert_absent(caplog, capfd)


@pytest.mark.anyio
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_no_secret_in_async_logs_reprs_or_metrics(  # noqa: PLR0917 - fixtures
    cluster: KafkaCluster,
    mechanism: str,
    options: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    anyio_backend: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    opts, found = _secret_options(cluster, options, mechanism)
    bootstrap, topic = _bootstrap(cluster), new_topic(cluster.bootstrap)
    with anyio.fail_after(60):
        async with kafkastate.anyio.open_producer(bootstrap, **opts) as producer:
            await producer.send(topic, b"secret-free")
            found.show(producer, producer.metrics(), producer.health())
        async with kafkastate.anyio.open_consumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", **opts
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            found.show(await consumer.getone(), consumer, consumer.metrics(), consumer.health())
        if anyio_backend == "asyncio":  # aiokafka's faces
            async with AIOKafkaProducer(
                bootstrap_servers=bootstrap, **_aiokafka_spelling(opts)
            ) as aio:
                await aio.send_and_wait(topic, b"secret-free")
                found.show(aio, aio.metrics(), aio.health())
        wrong = f"wrong-{uuid.uuid4().hex}"
        if mechanism in PASSWORD_MECHANISMS:
            found.secrets.append(wrong)
            with pytest.raises(KafkaError) as info:
                bad = {**opts, "sasl_plain_password": wrong}
                async with kafkastate.anyio.open_producer(bootstrap, **bad) as refused:
                    await refused.send(topic, b"never")
            found.show(info.value)
    if mechanism == "OAUTHBEARER":
        found.secrets.append(await opts["sasl_oauth_token_provider"].token())
    found.assert_absent(caplog, capfd)
