"""SASL/GSSAPI (Kerberos) against a real MIT KDC and a real broker, on every runtime.

The fixtures (tests/conftest.py) run ``krb5kdc`` for a throwaway realm, a broker whose
SASL_PLAINTEXT listener authenticates ``kafka/localhost`` from a keytab, and give this process
a ticket of ``client`` in a private credentials cache. The broker listens on 127.0.0.1, so the
clients name the service host with ``sasl_kerberos_domain_name="localhost"``.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from kafkastate.adapters._gssapi import GssapiSecurityContext
from kafkastate.adapters.blocking import BlockingConnection
from kafkastate.anyio import open_consumer, open_producer
from kafkastate.asyncio import AIOKafkaConsumer, AIOKafkaProducer
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.protocol.requests import metadata_request
from kafkastate.errors import AuthenticationFailedError
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafkastate.testing import KafkaCluster, KerberosRealm
from tests.conformance.runtimes import new_topic
from tests.conftest import GSSAPI_REAUTH_MS

pytestmark = pytest.mark.integration
REAUTH_SECONDS = GSSAPI_REAUTH_MS / 1000

GSSAPI = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "GSSAPI",
    "sasl_kerberos_service_name": "kafka",
    "sasl_kerberos_domain_name": "localhost",
}


def _listener_and_topic(cluster: KafkaCluster) -> tuple[str, str]:
    """The GSSAPI listener's bootstrap, and a fresh topic (made over PLAINTEXT)."""
    assert cluster.sasl_bootstrap is not None
    return cluster.sasl_bootstrap, new_topic(cluster.bootstrap)


def test_blocking_produce_and_consume(
    gssapi_cluster: KafkaCluster, kerberos_client: KerberosRealm
) -> None:
    bootstrap, topic = _listener_and_topic(gssapi_cluster)
    with KafkaProducer(bootstrap_servers=bootstrap, **GSSAPI) as producer:
        for i in range(5):
            producer.send(topic, f"v{i}".encode()).get(timeout=30)
    with KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", **GSSAPI
    ) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 5 and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                values.extend(r.value for r in records)
    assert values == [f"v{i}".encode() for i in range(5)]


@pytest.mark.anyio
async def test_anyio_produce_and_consume(
    gssapi_cluster: KafkaCluster, kerberos_client: KerberosRealm, anyio_backend: str
) -> None:
    bootstrap, topic = _listener_and_topic(gssapi_cluster)
    with anyio.fail_after(60):
        async with open_producer(bootstrap, **GSSAPI) as producer:
            for i in range(5):
                await producer.send(topic, f"{anyio_backend}-{i}".encode())
        async with open_consumer(
            bootstrap_servers=bootstrap, auto_offset_reset="earliest", **GSSAPI
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            values = [(await consumer.getone()).value for _ in range(5)]
    assert values == [f"{anyio_backend}-{i}".encode() for i in range(5)]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aiokafka_faces_produce_and_consume(
    gssapi_cluster: KafkaCluster, kerberos_client: KerberosRealm, anyio_backend: str
) -> None:
    bootstrap, topic = _listener_and_topic(gssapi_cluster)
    with anyio.fail_after(60):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **GSSAPI)
        await producer.start()
        try:
            await producer.send_and_wait(topic, b"aio")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", **GSSAPI
        )
        await consumer.start()
        try:
            record = await consumer.getone()
        finally:
            await consumer.stop()
    assert record.value == b"aio"


@pytest.mark.parametrize(
    ("override", "match"),
    [
        pytest.param({}, "No Kerberos credentials", id="no-ticket"),
        pytest.param(
            {"sasl_kerberos_service_name": "nosuchservice"}, "not found", id="unknown-service"
        ),
        pytest.param({"sasl_kerberos_domain_name": "otherhost"}, "not found", id="unknown-host"),
    ],
)
def test_refusals_are_typed_and_fast(  # noqa: PLR0917 - fixtures and parameters
    gssapi_cluster: KafkaCluster,
    kerberos_client: KerberosRealm,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    override: dict[str, str],
    match: str,
) -> None:
    if not override:  # no ticket: an empty private cache and no client keytab
        monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty-ccache'}")
    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError, match=match):
        KafkaProducer(
            bootstrap_servers=gssapi_cluster.sasl_bootstrap,
            **{**GSSAPI, **override},
            bootstrap_timeout_ms=20_000,
        )
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("face", [KafkaConsumer, KafkaAdminClient])
def test_other_blocking_faces_refuse_fast(
    gssapi_cluster: KafkaCluster,
    kerberos_client: KerberosRealm,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    face: Any,
) -> None:
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty-ccache'}")
    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError, match="Kerberos"):
        face(bootstrap_servers=gssapi_cluster.sasl_bootstrap, **GSSAPI)
    assert time.monotonic() - started < 5


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("face", [AIOKafkaProducer, AIOKafkaConsumer])
async def test_aiokafka_start_refuses_fast(  # noqa: PLR0917 - fixtures and parameters
    gssapi_cluster: KafkaCluster,
    kerberos_client: KerberosRealm,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    anyio_backend: str,
    face: Any,
) -> None:
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty-ccache'}")
    client = face(bootstrap_servers=gssapi_cluster.sasl_bootstrap, **GSSAPI)
    try:
        with anyio.fail_after(5), pytest.raises(AuthenticationFailedError, match="Kerberos"):
            await client.start()
    finally:
        await client.stop()


def test_reauthentication_over_gssapi(
    gssapi_cluster: KafkaCluster, kerberos_client: KerberosRealm
) -> None:
    """KIP-368 with a fresh Kerberos context each time: the fixture's broker expects
    re-authentication every few seconds (connections.max.reauth.ms)."""
    assert gssapi_cluster.sasl_bootstrap is not None
    host, _, port = gssapi_cluster.sasl_bootstrap.split(",")[0].rpartition(":")
    config = ConnectionConfig(
        sasl_mechanism="GSSAPI",
        sasl_kerberos_domain_name="localhost",
        sasl_gssapi=GssapiSecurityContext,
    )
    with BlockingConnection.open(host, int(port), config=config, timeout=20) as conn:
        assert conn.versions is not None
        request = metadata_request(conn.versions, None)
        answered = 0
        deadline = time.monotonic() + REAUTH_SECONDS * 2.5
        while time.monotonic() < deadline:
            assert conn.request(request, timeout=10).brokers
            answered += 1
            time.sleep(0.25)
    assert answered >= 2.5 * REAUTH_SECONDS / 0.5  # the session expired twice meanwhile


@pytest.mark.anyio
async def test_async_refusal_is_typed_and_fast(
    gssapi_cluster: KafkaCluster,
    kerberos_client: KerberosRealm,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
    anyio_backend: str,
) -> None:
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty-ccache'}")
    topic = new_topic(gssapi_cluster.bootstrap)
    with anyio.fail_after(5), pytest.raises(AuthenticationFailedError, match="Kerberos"):
        async with open_producer(gssapi_cluster.sasl_bootstrap or "", **GSSAPI) as producer:
            await producer.send(topic, b"never")


def _kerberos_names(realm: KerberosRealm) -> list[Any]:
    """kafka-python's ``sasl_kerberos_name`` forms for the broker's ``kafka/localhost``."""
    import gssapi  # noqa: PLC0415 - the fixtures skip without it

    return [
        "kafka@localhost",  # a host-based service, kafka-python's text form
        realm.principal("kafka/localhost"),  # a principal: kafka/localhost@KAFKASTATE.TEST
        gssapi.Name("kafka@localhost", name_type=gssapi.NameType.hostbased_service),
    ]


@pytest.mark.parametrize("form", ["service", "principal", "gssapi.Name"])
def test_kerberos_name_overrides_service_and_domain(
    gssapi_cluster: KafkaCluster, kerberos_client: KerberosRealm, form: str
) -> None:
    """``sasl_kerberos_name`` alone names the broker: the service and domain given beside
    it (which name no principal of the realm) are not used."""
    name = _kerberos_names(kerberos_client)[["service", "principal", "gssapi.Name"].index(form)]
    bootstrap, topic = _listener_and_topic(gssapi_cluster)
    options = {
        **GSSAPI,
        "sasl_kerberos_service_name": "nosuchservice",
        "sasl_kerberos_domain_name": "otherhost",
        "sasl_kerberos_name": name,
    }
    with KafkaProducer(bootstrap_servers=bootstrap, **options) as producer:
        producer.send(topic, form.encode()).get(timeout=30)


def test_a_wrong_kerberos_name_is_refused(
    gssapi_cluster: KafkaCluster, kerberos_client: KerberosRealm
) -> None:
    """A name the KDC does not know fails, though service and domain would have worked."""
    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError, match="not found"):
        KafkaProducer(
            bootstrap_servers=gssapi_cluster.sasl_bootstrap,
            **GSSAPI,
            sasl_kerberos_name=kerberos_client.principal("kafka/otherhost"),
        )
    assert time.monotonic() - started < 5


@pytest.mark.anyio
async def test_async_kerberos_name(
    gssapi_cluster: KafkaCluster, kerberos_client: KerberosRealm, anyio_backend: str
) -> None:
    bootstrap, topic = _listener_and_topic(gssapi_cluster)
    options = {
        **GSSAPI,
        "sasl_kerberos_domain_name": "otherhost",
        "sasl_kerberos_name": kerberos_client.principal("kafka/localhost"),
    }
    with anyio.fail_after(30):
        async with open_producer(bootstrap, **options) as producer:
            await producer.send(topic, anyio_backend.encode())
