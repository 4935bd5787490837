"""BrokerConnection and the blocking driver against a real Apache Kafka 4.x broker."""

from __future__ import annotations

import re
import socket
import ssl
import struct
import time
import uuid
from typing import Any

import anyio
import pytest

from kafkastate.adapters.blocking import BlockingAdmin, BlockingConnection, parse_bootstrap
from kafkastate.admin import ConfigResource
from kafkastate.anyio import open_admin
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.protocol.framing import request_header_bytes
from kafkastate.core.protocol.requests import NewTopic, metadata_request
from kafkastate.core.protocol.versions import CLIENT_VERSIONS, ApiKey, ApiVersionTable
from kafkastate.errors import (
    AuthenticationFailedError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from kafkastate.sync import KafkaAdminClient
from kafkastate.testing import KafkaCluster, unsecured_jwt

pytestmark = pytest.mark.integration


def _first(bootstrap: str) -> tuple[str, int]:
    return parse_bootstrap(bootstrap)[0]


def test_negotiation_uses_highest_common_and_never_old_versions(kafka_cluster: Any) -> None:
    host, port = _first(kafka_cluster.bootstrap)
    with BlockingConnection.open(host, port) as conn:
        table = conn.versions
        assert table is not None
        broker = table.broker_ranges
        for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.CREATE_TOPICS):
            expected = min(CLIENT_VERSIONS[key][1], broker[key][1])
            assert table.version_for(key) == expected
        # Kafka 4 refuses Produce < 3 and Fetch < 4 although its ApiVersions may still
        # advertise Produce from v0 (KAFKA-18659, kept for old librdkafka): only our own
        # floor keeps us from sending them, so check the version we pick, not the range.
        assert table.version_for(ApiKey.PRODUCE) >= 3
        assert table.version_for(ApiKey.FETCH) >= 4
        assert ApiVersionTable(broker).version_for(ApiKey.PRODUCE) >= 3
        # No overlap (a client limited to Fetch v0..3) is a typed error naming both ranges.
        old_client = ApiVersionTable(broker, client={ApiKey.FETCH: (0, 3)})
        with pytest.raises(UnsupportedVersionError) as info:
            old_client.version_for(ApiKey.FETCH)
        assert info.value.broker_range == broker[ApiKey.FETCH]
        assert "0..3" in str(info.value)


SASL_MECHANISMS = [
    pytest.param(m, marks=pytest.mark.kafka_needs(f"sasl:{m}"))
    for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
]


def test_broker_refuses_produce_v2(kafka_cluster: Any) -> None:
    """Why our floor matters: a hand-made Produce v2 frame gets no success from Kafka 4."""
    host, port = _first(kafka_cluster.bootstrap)
    topic = b"no-such-topic-v2"
    # ProduceRequest v2: acks int16, timeout int32, [topic string, [partition int32, bytes]]
    body = struct.pack(">hii", 1, 1000, 1) + struct.pack(">h", len(topic)) + topic
    body += struct.pack(">iii", 1, 0, 0)
    header = request_header_bytes(ApiKey.PRODUCE, 2, 99, "kafkastate-test", flexible=False)
    frame = struct.pack(">i", len(header) + len(body)) + header + body
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(frame)
        try:
            reply = sock.recv(4096)
        except TimeoutError:
            pytest.fail("broker neither answered nor closed the connection")
    # Kafka 4 drops the connection ("unsupported version 2" in its log) instead of producing.
    assert reply == b""
    log = kafka_cluster.brokers[0].log_file if kafka_cluster.brokers else None
    if log is not None:
        deadline = time.monotonic() + 10
        while "(Produce) and unsupported version 2" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline, f"no rejection logged in {log}"
            time.sleep(0.1)


def test_metadata_create_delete_topics(kafka_cluster: Any) -> None:
    name = f"it-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(kafka_cluster.bootstrap) as admin:
        brokers = admin.metadata(None).brokers
        assert brokers and all(b.host == "127.0.0.1" for b in brokers)
        admin.create_topics(
            [NewTopic(name=name, num_partitions=4, configs={"retention.ms": "60000"})]
        )
        info = admin.topics([name])[name]
        assert sorted(info.partitions) == [0, 1, 2, 3]
        assert all(leader in {b.node_id for b in brokers} for leader in info.partitions.values())
        assert info.topic_id is not None
        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics([name])
        admin.delete_topics([name])
        assert admin.topics([name])[name].error_code == UnknownTopicOrPartitionError.errno
        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([name])


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
def test_sasl_good_credentials(kafka_cluster: Any, mechanism: str) -> None:
    creds = kafka_cluster.sasl
    config = ConnectionConfig(
        sasl_mechanism=mechanism, sasl_username=creds.username, sasl_password=creds.password
    )
    with BlockingAdmin(kafka_cluster.sasl_bootstrap, config=config) as admin:
        assert admin.metadata(None).brokers


@pytest.mark.parametrize("mechanism", SASL_MECHANISMS)
def test_sasl_wrong_password_fails_at_once(kafka_cluster: Any, mechanism: str) -> None:
    creds = kafka_cluster.sasl
    host, port = _first(kafka_cluster.sasl_bootstrap)
    config = ConnectionConfig(
        sasl_mechanism=mechanism, sasl_username=creds.username, sasl_password="wrong"
    )
    with pytest.raises(AuthenticationFailedError, match=mechanism):
        BlockingConnection.open(host, port, config=config, timeout=20)


@pytest.mark.kafka_needs("sasl:SCRAM-SHA-256")
def test_scram_user_unknown(kafka_cluster: Any) -> None:
    creds = kafka_cluster.sasl
    host, port = _first(kafka_cluster.sasl_bootstrap)
    config = ConnectionConfig(
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username=creds.plain_only_username,
        sasl_password=creds.plain_only_password,
    )
    with pytest.raises(AuthenticationFailedError):
        BlockingConnection.open(host, port, config=config, timeout=20)


@pytest.mark.kafka_needs("ssl")
def test_ssl_listener(kafka_cluster: Any) -> None:
    context = ssl.create_default_context(cafile=str(kafka_cluster.tls.ca_file))
    host, port = _first(kafka_cluster.ssl_bootstrap)
    with BlockingConnection.open(host, port, ssl_context=context) as conn:
        assert conn.versions is not None and conn.versions.supports(ApiKey.METADATA)


@pytest.mark.kafka_needs("sasl:OAUTHBEARER")
def test_oauthbearer_token(kafka_cluster: Any) -> None:
    assert kafka_cluster.sasl.oauthbearer
    host, port = _first(kafka_cluster.sasl_bootstrap)
    good = ConnectionConfig(sasl_mechanism="OAUTHBEARER", sasl_oauth_token=unsecured_jwt("alice"))
    with BlockingConnection.open(host, port, config=good, timeout=20) as conn:
        assert conn.versions is not None
    expired = unsecured_jwt("alice", lifetime=60, now=time.time() - 3600)
    for token in (expired, "not.a.jwt"):
        bad = ConnectionConfig(sasl_mechanism="OAUTHBEARER", sasl_oauth_token=token)
        with pytest.raises(AuthenticationFailedError, match="OAUTHBEARER"):
            BlockingConnection.open(host, port, config=bad, timeout=20)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "OAUTHBEARER"])
def test_reauthentication_keeps_connection_alive(mechanism: str) -> None:
    """KIP-368: with connections.max.reauth.ms set, the broker drops a connection whose
    session expired; ours re-authenticates in time and keeps serving requests."""
    overrides = {"connections.max.reauth.ms": "4000"}
    with KafkaCluster.start(sasl=True, config_overrides=overrides) as cluster:
        assert cluster.sasl is not None and cluster.sasl_bootstrap is not None
        host, port = _first(cluster.sasl_bootstrap)
        config = ConnectionConfig(
            sasl_mechanism=mechanism,
            sasl_username=cluster.sasl.username,
            sasl_password=cluster.sasl.password,
            sasl_oauth_token=unsecured_jwt("alice"),
        )
        with BlockingConnection.open(host, port, config=config, timeout=20) as conn:
            assert conn.versions is not None
            request = metadata_request(conn.versions, None)
            deadline = time.monotonic() + 10.0
            answered = 0
            while time.monotonic() < deadline:
                assert conn.request(request, timeout=10).brokers
                answered += 1
                time.sleep(0.25)
            assert answered >= 25  # the session expired twice meanwhile


# -- ApiVersions once per broker (issue 25) -------------------------------------------------


def _request_log(cluster: Any, level: str) -> None:
    """Set the broker's ``kafka.request.logger`` (DEBUG logs every completed request)."""
    node = cluster.brokers[0].node_id
    with KafkaAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        change = ConfigResource("broker_logger", node, {"kafka.request.logger": level})
        admin.alter_configs([change], incremental=True)


def _requests_of(log: Any, client_id: str) -> list[tuple[int, str]]:
    """``(api key, connection id)`` of every completed request of ``client_id`` the
    broker logged (its request logger writes the header as JSON)."""
    seen = []
    for line in log.read_text(errors="replace").splitlines():
        if "Completed request:" not in line or f'"clientId":"{client_id}"' not in line:
            continue
        key = re.search(r'"requestApiKey":(\d+)', line)
        conn = re.search(r'"connection":"([^"]+)"', line)
        assert key is not None and conn is not None, line
        seen.append((int(key.group(1)), conn.group(1)))
    return seen


@pytest.mark.anyio
@pytest.mark.kafka_needs("fault_control", "single_broker")
async def test_a_reconnect_does_not_ask_the_broker_for_its_api_versions_again(
    kafka_cluster: Any,
) -> None:
    """The broker is the witness: its request log shows one ApiVersions per node (the
    bootstrap address and broker 1 are two nodes), however many connections follow."""
    client_id = f"versions-{uuid.uuid4().hex[:8]}"
    log = kafka_cluster.brokers[0].log_file
    _request_log(kafka_cluster, "DEBUG")
    try:
        async with open_admin(
            kafka_cluster.bootstrap,
            client_id=client_id,
            request_timeout_ms=1000,
            connections_max_idle_ms=1500,
        ) as admin:
            for _ in range(3):
                assert (await admin.describe_cluster()).brokers
                await anyio.sleep(2.5)  # past connections_max_idle_ms: the client hangs up
        with anyio.fail_after(10):
            while len({conn for _, conn in _requests_of(log, client_id)}) < 3:
                await anyio.sleep(0.1)
    finally:
        _request_log(kafka_cluster, "WARN")
    seen = _requests_of(log, client_id)
    assert len({conn for _, conn in seen}) >= 3, seen
    assert [key for key, _ in seen].count(ApiKey.API_VERSIONS) <= 2, seen
