"""TLS against real brokers (issue 19): round trips over the SSL listener on asyncio, trio
and blocking code with kafka-python's ``ssl_*`` options and aiokafka's ``ssl_context``,
mutual TLS with an encrypted client key, hostname verification, CRLs, and failures that are
typed, fast and named -- an untrusted CA, a certificate for another host, a revoked
certificate, a missing client certificate, TLS against a PLAINTEXT listener and the reverse.

The session cluster (``kafka_cluster``) has the SSL listener without client
authentication; a second cluster started here (``mtls_cluster``) requires client
certificates and its broker certificate names ``127.0.0.1`` only, so that ``localhost``
fails hostname verification.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import kafkastate.anyio
from kafkastate.asyncio import AIOKafkaConsumer, AIOKafkaProducer
from kafkastate.errors import (
    KafkaConfigurationError,
    KafkaError,
    SecurityProtocolMismatchError,
    SslAuthenticationError,
)
from kafkastate.helpers import create_ssl_context
from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafkastate.testing import KafkaCluster, PrerequisiteError, TlsFiles, make_crl
from kafkastate.testing._tls import make_tls_files
from kafkastate.testing.pytest_plugin import unavailable

pytestmark = pytest.mark.integration

FAST = 10.0
"""Seconds within which a refused TLS setup must fail (the bootstrap wait is 30 s)."""


@pytest.fixture(scope="module")
def mtls_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A broker whose SSL listener requires client certificates and whose certificate
    names ``127.0.0.1`` only."""
    try:
        cluster = KafkaCluster.start(
            ssl=True, ssl_client_auth="required", ssl_hostnames=("127.0.0.1",)
        )
    except PrerequisiteError as exc:
        unavailable(exc)
    yield cluster
    cluster.stop(remove=request.session.testsfailed == 0, graceful=False)


def _tls(cluster: Any) -> TlsFiles:
    tls: TlsFiles | None = cluster.tls
    assert tls is not None and cluster.ssl_bootstrap is not None
    return tls


def _local_tls(cluster: Any) -> TlsFiles:
    """The cluster's TLS files with the CA key (a cluster the harness made with openssl)."""
    tls = _tls(cluster)
    if tls.ca_key is None or tls.broker_cert is None:
        pytest.skip("needs the SSL listener's CA key (a cluster the harness made with openssl)")
    return tls


def _trusting(ca_file: Path) -> dict[str, Any]:
    """kafka-python's options for TLS that trusts ``ca_file``."""
    return {"security_protocol": "SSL", "ssl_cafile": str(ca_file)}


def _client_files(tls: TlsFiles) -> dict[str, Any]:
    """kafka-python's spelling of the harness's mutual-TLS material."""
    return {
        "security_protocol": "SSL",
        "ssl_cafile": str(tls.ca_file),
        "ssl_certfile": str(tls.client_cert),
        "ssl_keyfile": str(tls.client_key),
        "ssl_password": tls.client_key_password,
    }


def _topic() -> str:
    return f"tls-{uuid.uuid4().hex[:10]}"


def _sync_round_trip(bootstrap: str, **tls: Any) -> list[bytes]:
    """Produce three records and read them back with the blocking (kafka-python) faces."""
    topic = _topic()
    with KafkaProducer(bootstrap_servers=bootstrap, **tls) as producer:
        for i in range(3):
            producer.send(topic, f"v{i}".encode()).get(timeout=30)
    got: list[bytes] = []
    with KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **tls
    ) as consumer:
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
    return got


def _refused(
    error: type[KafkaError], bootstrap: str | None, face: Any = KafkaProducer, **options: Any
) -> KafkaError:
    """Making the blocking ``face`` raises ``error`` within :data:`FAST` seconds (its
    constructor waits up to 30 s for a bootstrap server); returns the error."""
    started = time.monotonic()
    with pytest.raises(error) as info:
        face(bootstrap_servers=bootstrap, **options)
    elapsed = time.monotonic() - started
    assert elapsed < FAST, f"{error.__name__} took {elapsed:.1f} s"
    return info.value


# ------------------------------------------------------------------------- round trips


@pytest.mark.kafka_needs("ssl")
def test_blocking_round_trip_with_kafka_python_ssl_options(kafka_cluster: Any) -> None:
    tls = _tls(kafka_cluster)
    got = _sync_round_trip(kafka_cluster.ssl_bootstrap, **_trusting(tls.ca_file))
    assert got == [b"v0", b"v1", b"v2"]


@pytest.mark.anyio
@pytest.mark.kafka_needs("ssl")
async def test_async_round_trip_on_asyncio_and_trio(kafka_cluster: Any) -> None:
    """``kafkastate.anyio`` (what ``kafkastate.trio`` re-exports) over TLS, on both
    backends, with the kafka-python option names."""
    tls = _tls(kafka_cluster)
    bootstrap = kafka_cluster.ssl_bootstrap
    options = _trusting(tls.ca_file)
    topic = _topic()
    with anyio.fail_after(60):
        async with kafkastate.anyio.open_producer(bootstrap, **options) as producer:
            for i in range(3):
                await producer.send(topic, f"a{i}".encode())
        got: list[bytes] = []
        async with kafkastate.anyio.open_consumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **options
        ) as consumer:
            while len(got) < 3:
                batch = await consumer.getmany(timeout_ms=500)
                got.extend(r.value for records in batch.values() for r in records)
    assert got == [b"a0", b"a1", b"a2"]


@pytest.mark.kafka_needs("ssl")
def test_aiokafka_spelling_with_create_ssl_context(kafka_cluster: Any) -> None:
    """aiokafka's ``ssl_context=create_ssl_context(cafile=...)`` on the asyncio faces."""
    tls = _tls(kafka_cluster)
    bootstrap = kafka_cluster.ssl_bootstrap
    topic = _topic()

    async def main() -> list[bytes]:
        context = create_ssl_context(cafile=str(tls.ca_file))
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, security_protocol="SSL", ssl_context=context
        )
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aio")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            security_protocol="SSL",
            ssl_context=context,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            record = await consumer.getone()
        finally:
            await consumer.stop()
        return [record.value]

    assert asyncio.run(asyncio.wait_for(main(), 60)) == [b"aio"]


# ----------------------------------------------------------------------------- mutual TLS


def test_mutual_tls_with_an_encrypted_client_key(mtls_cluster: KafkaCluster) -> None:
    tls = _tls(mtls_cluster)
    assert tls.client_auth == "required"
    got = _sync_round_trip(mtls_cluster.ssl_bootstrap or "", **_client_files(tls))
    assert got == [b"v0", b"v1", b"v2"]
    # the harness's context helper presents the same certificate
    with KafkaAdminClient(
        bootstrap_servers=mtls_cluster.ssl_bootstrap,
        security_protocol="SSL",
        ssl_context=mtls_cluster.ssl_context(client_cert=True),
    ) as admin:
        assert admin.list_topics() is not None


@pytest.mark.anyio
async def test_mutual_tls_on_asyncio_and_trio(mtls_cluster: KafkaCluster) -> None:
    tls = _tls(mtls_cluster)
    topic = _topic()
    with anyio.fail_after(60):
        async with kafkastate.anyio.open_producer(
            mtls_cluster.ssl_bootstrap or "", **_client_files(tls)
        ) as producer:
            metadata = await producer.send(topic, b"mutual")
    assert metadata.offset == 0


def test_missing_client_certificate_is_refused_fast(mtls_cluster: KafkaCluster) -> None:
    tls = _tls(mtls_cluster)
    error = _refused(
        SslAuthenticationError,
        mtls_cluster.ssl_bootstrap,
        **_trusting(tls.ca_file),
    )
    assert "127.0.0.1" in str(error)


def test_wrong_key_password_is_a_configuration_error_without_the_password(
    mtls_cluster: KafkaCluster,
) -> None:
    options = _client_files(_tls(mtls_cluster)) | {"ssl_password": "not-the-password-42"}
    with pytest.raises(KafkaConfigurationError) as info:
        KafkaProducer(bootstrap_servers=mtls_cluster.ssl_bootstrap, **options)
    assert "not-the-password-42" not in str(info.value)
    assert "not-the-password-42" not in repr(info.value)


# ------------------------------------------------------------------ hostname verification


def _localhost_bootstrap(cluster: KafkaCluster) -> str:
    """The SSL listener as ``localhost:PORT``: a name its certificate does not carry."""
    return ",".join(
        "localhost:" + address.rsplit(":", 1)[1]
        for address in (cluster.ssl_bootstrap or "").split(",")
    )


def test_hostname_mismatch_fails_fast_and_passes_without_hostname_check(
    mtls_cluster: KafkaCluster,
) -> None:
    tls = _tls(mtls_cluster)
    bootstrap = _localhost_bootstrap(mtls_cluster)
    error = _refused(SslAuthenticationError, bootstrap, **_client_files(tls))
    assert "localhost" in str(error)
    assert isinstance(error.__cause__, OSError)  # the ssl module's verification error
    # the CA is still checked; only the name is not
    with KafkaProducer(
        bootstrap_servers=bootstrap, ssl_check_hostname=False, **_client_files(tls)
    ) as producer:
        producer.send(_topic(), b"x").get(timeout=30)


@pytest.mark.anyio
async def test_hostname_mismatch_on_asyncio_and_trio(mtls_cluster: KafkaCluster) -> None:
    tls = _tls(mtls_cluster)
    started = time.monotonic()
    with pytest.raises(SslAuthenticationError):
        async with kafkastate.anyio.open_producer(
            _localhost_bootstrap(mtls_cluster), **_client_files(tls)
        ) as producer:
            await producer.send(_topic(), b"never")
    assert time.monotonic() - started < FAST


# ---------------------------------------------------------------- trust: CA and CRL


@pytest.mark.kafka_needs("ssl")
def test_untrusted_ca_fails_fast(kafka_cluster: Any, tmp_path: Path) -> None:
    other = make_tls_files(tmp_path / "other")  # a CA the broker's certificate is not from
    error = _refused(
        SslAuthenticationError,
        kafka_cluster.ssl_bootstrap,
        KafkaConsumer,
        **_trusting(other.ca_file),
    )
    assert "CA" in str(error) or "certificate" in str(error)


@pytest.mark.kafka_needs("ssl")
def test_system_trust_store_does_not_trust_the_test_ca(kafka_cluster: Any) -> None:
    """Without ``ssl_cafile`` the system's trust store is used: it must refuse, never
    fall back to an unverified connection."""
    _refused(SslAuthenticationError, kafka_cluster.ssl_bootstrap, security_protocol="SSL")


@pytest.mark.kafka_needs("ssl")
def test_crl_revoking_the_broker_certificate_is_refused(kafka_cluster: Any, tmp_path: Path) -> None:
    pytest.importorskip("cryptography", reason="make_crl needs the cryptography package")
    tls = _local_tls(kafka_cluster)
    assert tls.broker_cert is not None
    clean = make_crl(tls, tmp_path / "clean.pem")
    revoked = make_crl(tls, tmp_path / "revoked.pem", revoke=[tls.broker_cert])
    options = _trusting(tls.ca_file)
    # a CRL that revokes nothing: accepted
    with KafkaProducer(
        bootstrap_servers=kafka_cluster.ssl_bootstrap, ssl_crlfile=str(clean), **options
    ) as producer:
        producer.send(_topic(), b"x").get(timeout=30)
    error = _refused(
        SslAuthenticationError, kafka_cluster.ssl_bootstrap, ssl_crlfile=str(revoked), **options
    )
    assert "revoked" in str(error)


# ------------------------------------------------------------------- protocol mismatch


@pytest.mark.kafka_needs("ssl")
def test_tls_client_on_a_plaintext_listener_is_named(kafka_cluster: Any) -> None:
    tls = _tls(kafka_cluster)
    error = _refused(
        SecurityProtocolMismatchError,
        kafka_cluster.bootstrap,
        **_trusting(tls.ca_file),
    )
    assert "plaintext" in str(error).lower()


@pytest.mark.kafka_needs("ssl")
def test_plaintext_client_on_a_tls_listener_is_named(kafka_cluster: Any) -> None:
    error = _refused(SecurityProtocolMismatchError, kafka_cluster.ssl_bootstrap, KafkaConsumer)
    assert "SSL" in str(error)


@pytest.mark.anyio
@pytest.mark.kafka_needs("ssl")
async def test_protocol_mismatch_on_asyncio_and_trio(kafka_cluster: Any) -> None:
    tls = _tls(kafka_cluster)
    started = time.monotonic()
    with pytest.raises(SecurityProtocolMismatchError):
        async with kafkastate.anyio.open_producer(
            kafka_cluster.bootstrap, **_trusting(tls.ca_file)
        ) as producer:
            await producer.send(_topic(), b"never")
    with pytest.raises(SecurityProtocolMismatchError):
        async with kafkastate.anyio.open_producer(kafka_cluster.ssl_bootstrap) as producer:
            await producer.send(_topic(), b"never")
    assert time.monotonic() - started < 2 * FAST


# ---------------------------------------------------------------------------- secrets


def _texts(error: BaseException) -> list[str]:
    """str and repr of an exception and of everything it chains to."""
    out: list[str] = []
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        exc = todo.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        out += [str(exc), repr(exc)]
        todo += [exc.__cause__, exc.__context__]
    return out


@pytest.mark.kafka_needs("sasl:PLAIN")
def test_passwords_never_reach_logs_reprs_or_errors(
    mtls_cluster: KafkaCluster, kafka_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``ssl_password`` and ``sasl_plain_password`` are absent from every log line (DEBUG
    included), from the clients' and configs' repr/str, and from the errors of a wrong key
    password and wrong SASL credentials."""
    tls = _tls(mtls_cluster)
    key_password = tls.client_key_password
    sasl_password = kafka_cluster.sasl.password
    wrong_key_password = "wrong-key-password-7f3a"
    wrong_sasl_password = "wrong-sasl-password-91c2"
    secrets = [key_password, sasl_password, wrong_key_password, wrong_sasl_password]
    assert key_password and sasl_password
    seen: list[str] = []
    sasl = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": kafka_cluster.sasl.username,
    }
    with caplog.at_level("DEBUG"):
        with KafkaProducer(
            bootstrap_servers=mtls_cluster.ssl_bootstrap, **_client_files(tls)
        ) as producer:
            producer.send(_topic(), b"secret-free").get(timeout=30)
            seen += [repr(producer), str(producer), repr(producer.config), str(producer.config)]
        with KafkaConsumer(
            bootstrap_servers=kafka_cluster.sasl_bootstrap,
            sasl_plain_password=sasl_password,
            **sasl,
        ) as consumer:
            assert consumer.topics() is not None
            seen += [repr(consumer), str(consumer), repr(consumer.config)]
        with pytest.raises(KafkaConfigurationError) as bad_key:
            KafkaProducer(
                bootstrap_servers=mtls_cluster.ssl_bootstrap,
                **(_client_files(tls) | {"ssl_password": wrong_key_password}),
            )
        seen += _texts(bad_key.value)
        with pytest.raises(KafkaError) as bad_sasl:
            KafkaProducer(
                bootstrap_servers=kafka_cluster.sasl_bootstrap,
                sasl_plain_password=wrong_sasl_password,
                **sasl,
            )
        seen += _texts(bad_sasl.value)
        with pytest.raises(KafkaConfigurationError) as bad_type:  # a wrong type: no echo
            KafkaProducer(
                bootstrap_servers="localhost:1", **sasl, sasl_plain_password=[sasl_password]
            )
        seen += _texts(bad_type.value)
    records = caplog.records
    # the TLS setup is logged at DEBUG, the key password as <set>: the grep below has text
    assert "ssl_password=<set>" in caplog.text
    seen += [caplog.text] + [str(r.args) for r in records]
    for text in seen:
        for secret in secrets:
            assert secret not in text, f"a password leaked: {text[:200]!r}"


@pytest.mark.anyio
@pytest.mark.kafka_needs("ssl")
async def test_an_async_consumer_raises_a_tls_refusal_instead_of_waiting(
    kafka_cluster: Any, tmp_path: Path
) -> None:
    """``open_consumer`` does not wait for the cluster on entry: its getmany/getone raise
    the refusal once every bootstrap server refused, instead of returning nothing."""
    other = make_tls_files(tmp_path / "other")
    started = time.monotonic()
    async with kafkastate.anyio.open_consumer(
        _topic(),
        bootstrap_servers=kafka_cluster.ssl_bootstrap,
        **_trusting(other.ca_file),
    ) as consumer:
        with pytest.raises(SslAuthenticationError):
            with anyio.fail_after(FAST):
                await consumer.getone()
    assert time.monotonic() - started < FAST
