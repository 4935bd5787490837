"""OAUTHBEARER against a real token endpoint and a broker that checks the signatures, and
KIP-368 re-authentication during produce/consume runs.

One OIDC server (kafkastate.testing.OIDCServer: client-credentials grant, RS256 JWTs, JWKS)
and one broker for the module: its ``OIDC`` listener validates tokens with Kafka's
OAuthBearerValidatorCallbackHandler against the server's JWKS, its SASL_PLAINTEXT listener
takes PLAIN/SCRAM, and ``connections.max.reauth.ms`` is short so that sessions expire every
few seconds.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

import kafkastate.anyio
from kafkastate.abc import AbstractTokenProvider
from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.asyncio import AIOKafkaConsumer, AIOKafkaProducer
from kafkastate.core.oauth import TokenEndpointUnavailable
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.errors import AuthenticationFailedError
from kafkastate.oauth import OIDCTokenProvider
from kafkastate.sync import KafkaConsumer, KafkaProducer
from kafkastate.testing import KafkaCluster, OIDCServer, PrerequisiteError
from kafkastate.testing.pytest_plugin import unavailable

pytestmark = pytest.mark.integration

REAUTH_MS = 3000
CLIENT_ID = "kafka-client"
SECRET = "kafka-client-secret"


@pytest.fixture(scope="module")
def oidc() -> Iterator[OIDCServer]:
    with OIDCServer({CLIENT_ID: SECRET}, audience="kafka") as server:
        yield server


@pytest.fixture(scope="module")
def cluster(oidc: OIDCServer) -> Iterator[KafkaCluster]:
    try:
        started = KafkaCluster.start(
            sasl=True,
            oauth=oidc.spec(),
            config_overrides={"connections.max.reauth.ms": str(REAUTH_MS)},
        )
    except PrerequisiteError as exc:
        unavailable(exc)
    with started:
        yield started


def _topic(cluster: KafkaCluster, partitions: int = 1) -> str:
    name = f"oauth-{uuid.uuid4().hex[:10]}"
    with BlockingAdmin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def _provider(oidc: OIDCServer, **extra: Any) -> OIDCTokenProvider:
    return OIDCTokenProvider(oidc.token_url, CLIENT_ID, SECRET, scope="kafka", **extra)


def _oauth(cluster: KafkaCluster, provider: Any) -> dict[str, Any]:
    assert cluster.oauth_bootstrap is not None
    return {
        "bootstrap_servers": cluster.oauth_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": provider,
    }


class Counting(AbstractTokenProvider):
    """Counts the client's token requests (each authentication and re-authentication)."""

    def __init__(self, inner: OIDCTokenProvider) -> None:
        super().__init__()
        self.inner = inner
        self.calls = 0

    async def token(self) -> str:
        self.calls += 1
        return await self.inner.token()


class Fixed:
    """kafka-python's provider shape: a plain token() method."""

    def __init__(self, token: str) -> None:
        self._token = token
        self.calls = 0

    def token(self) -> str:
        self.calls += 1
        return self._token


# ----------------------------------------------------------------- OIDCTokenProvider


def test_the_provider_caches_then_refreshes_before_expiry() -> None:
    with OIDCServer({CLIENT_ID: SECRET}, token_lifetime=2) as server:
        provider = OIDCTokenProvider(server.token_url, CLIENT_ID, SECRET, refresh_window=0.5)
        first = asyncio.run(provider.token())
        assert asyncio.run(provider.token()) == first  # cached
        assert server.token_requests == 1
        time.sleep(1.1)  # past half the lifetime, before expiry
        assert asyncio.run(provider.token()) != first
        assert server.token_requests == 2 and provider.fetches == 2


def test_the_provider_retries_an_unavailable_endpoint_with_backoff() -> None:
    with OIDCServer({CLIENT_ID: SECRET}) as server:
        server.fail_next(3, status=503)
        provider = OIDCTokenProvider(server.token_url, CLIENT_ID, SECRET, retry_backoff_ms=20)
        assert asyncio.run(provider.token())
        assert (server.refused, server.token_requests) == (3, 1)
        # an outage longer than the retry budget ends in a typed, retriable error
        server.fail_next(1000, status=500)
        gives_up = OIDCTokenProvider(
            server.token_url, CLIENT_ID, SECRET, retry_backoff_ms=20, retry_timeout_ms=300
        )
        started = time.monotonic()
        with pytest.raises(TokenEndpointUnavailable, match="HTTP 500") as caught:
            asyncio.run(gives_up.token())
        assert caught.value.retriable
        assert time.monotonic() - started < 5


def test_a_wrong_secret_is_refused_at_once_and_never_shown(caplog: Any) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "wrong-secret-XYZZY"
    with OIDCServer({CLIENT_ID: SECRET}) as server:
        provider = OIDCTokenProvider(server.token_url, CLIENT_ID, secret)
        assert secret not in repr(provider) and secret not in str(vars(provider).keys())
        started = time.monotonic()
        with pytest.raises(AuthenticationFailedError, match="invalid_client") as caught:
            asyncio.run(provider.token())
        assert time.monotonic() - started < 2
        assert server.refused == 1  # no retry for a refusal
    assert secret not in str(caught.value)
    assert secret not in caplog.text


# ------------------------------------------------------- through the validated listener


@pytest.mark.anyio
async def test_produce_and_consume_through_the_oidc_listener(
    cluster: KafkaCluster, oidc: OIDCServer
) -> None:
    """asyncio and trio, through kafkastate.anyio (the aiokafka option names)."""
    topic = _topic(cluster)
    options = _oauth(cluster, _provider(oidc))
    with anyio.fail_after(60):
        async with kafkastate.anyio.open_producer(**options) as producer:
            for i in range(10):
                await producer.send(topic, b"v%d" % i)
        async with kafkastate.anyio.open_consumer(
            topic, auto_offset_reset="earliest", **options
        ) as consumer:
            got: list[bytes] = []
            while len(got) < 10:
                batch = await consumer.getmany(timeout_ms=1000)
                got.extend(r.value for rs in batch.values() for r in rs)
    assert got == [b"v%d" % i for i in range(10)]


def test_aiokafka_spelling_through_the_oidc_listener(
    cluster: KafkaCluster, oidc: OIDCServer
) -> None:
    topic = _topic(cluster)
    options = _oauth(cluster, _provider(oidc))

    async def main() -> list[bytes]:
        producer = AIOKafkaProducer(**options)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, b"a%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **options)
        await consumer.start()
        got: list[bytes] = []
        try:
            while len(got) < 5:
                batch = await consumer.getmany(timeout_ms=1000)
                got.extend(r.value for rs in batch.values() for r in rs)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(asyncio.wait_for(main(), 60)) == [b"a%d" % i for i in range(5)]


@pytest.mark.parametrize("provider_kind", ["oidc", "kafka-python"])
def test_kafka_python_spelling_through_the_oidc_listener(
    cluster: KafkaCluster, oidc: OIDCServer, provider_kind: str
) -> None:
    """The blocking clients: an async provider (OIDCTokenProvider) and kafka-python's
    provider with a plain token()."""
    topic = _topic(cluster)
    provider: Any = _provider(oidc) if provider_kind == "oidc" else Fixed(oidc.issue())
    options = _oauth(cluster, provider)
    with KafkaProducer(**options) as producer:
        for i in range(5):
            producer.send(topic, b"k%d" % i)
        producer.flush(timeout=30)
    with KafkaConsumer(
        topic, auto_offset_reset="earliest", consumer_timeout_ms=5000, **options
    ) as consumer:
        got = [r.value for r in consumer]
    assert got == [b"k%d" % i for i in range(5)]


@pytest.mark.parametrize("broken", ["bad_signature", "expired"])
def test_a_bad_token_is_refused_fast_and_typed(
    cluster: KafkaCluster, oidc: OIDCServer, broken: str
) -> None:
    """Refused at the first authentication; the clients raise at once, long before their
    30 s / 40 s bootstrap timeouts, and never retry."""
    token = oidc.issue(**{broken: True})
    provider = Fixed(token)
    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError, match="OAUTHBEARER") as caught:
        KafkaProducer(**_oauth(cluster, provider))
    assert time.monotonic() - started < 3
    assert token not in str(caught.value)
    with pytest.raises(AuthenticationFailedError, match="OAUTHBEARER"):
        KafkaConsumer(**_oauth(cluster, provider))
    assert time.monotonic() - started < 6

    async def start() -> None:
        producer = AIOKafkaProducer(**_oauth(cluster, provider))
        await producer.start()

    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError, match="OAUTHBEARER"):
        asyncio.run(start())
    assert time.monotonic() - started < 3
    assert provider.calls <= 4  # one authentication per client attempt: no retry loop


@pytest.mark.anyio
async def test_a_bad_token_fails_the_async_clients_at_once(
    cluster: KafkaCluster, oidc: OIDCServer
) -> None:
    options = _oauth(cluster, Fixed(oidc.issue(expired=True)))
    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError, match="OAUTHBEARER"):
        async with kafkastate.anyio.open_admin(**options):
            pass
    assert time.monotonic() - started < 3
    with pytest.raises(AuthenticationFailedError, match="OAUTHBEARER"):
        async with kafkastate.anyio.open_producer(**options) as producer:
            await producer.send(_topic(cluster), b"never")
    assert time.monotonic() - started < 6


def test_a_refused_client_secret_fails_the_client_typed(
    cluster: KafkaCluster, oidc: OIDCServer
) -> None:
    provider = OIDCTokenProvider(oidc.token_url, CLIENT_ID, "not-the-secret")
    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError, match="invalid_client") as caught:
        KafkaProducer(**_oauth(cluster, provider))
    assert time.monotonic() - started < 3
    assert "not-the-secret" not in str(caught.value)


# ------------------------------------------------------------- KIP-368 re-authentication

RUN_SECONDS = 10.0


def test_reauthentication_during_an_asyncio_run_loses_nothing(
    cluster: KafkaCluster, oidc: OIDCServer
) -> None:
    """Sessions last REAUTH_MS: a ~10 s produce/consume run re-authenticates several times,
    each with a token asked for afresh, and every record arrives exactly once."""
    topic = _topic(cluster, partitions=2)
    producer_tokens = Counting(_provider(oidc))
    consumer_tokens = Counting(_provider(oidc))

    async def main() -> tuple[int, list[bytes]]:
        producer = AIOKafkaProducer(**_oauth(cluster, producer_tokens))
        consumer = AIOKafkaConsumer(
            topic, auto_offset_reset="earliest", **_oauth(cluster, consumer_tokens)
        )
        await producer.start()
        await consumer.start()
        got: list[bytes] = []
        sent = 0
        try:
            deadline = time.monotonic() + RUN_SECONDS
            while time.monotonic() < deadline:
                await producer.send_and_wait(topic, b"r%d" % sent)
                sent += 1
                batch = await consumer.getmany(timeout_ms=50)
                got.extend(r.value for rs in batch.values() for r in rs)
            end = time.monotonic() + 20
            while len(got) < sent and time.monotonic() < end:
                batch = await consumer.getmany(timeout_ms=500)
                got.extend(r.value for rs in batch.values() for r in rs)
        finally:
            await consumer.stop()
            await producer.stop()
        return sent, got

    sent, got = asyncio.run(main())
    assert sent > 50
    assert sorted(got) == sorted(b"r%d" % i for i in range(sent))
    # the first authentication of each connection plus at least two re-authentications
    assert producer_tokens.calls >= 3 and consumer_tokens.calls >= 3


def test_reauthentication_with_a_rotating_password_in_a_blocking_run(
    cluster: KafkaCluster,
) -> None:
    """kafka-python's clients with SCRAM and a callable password: read at each
    (re-)authentication, several times in a run; nothing lost."""
    assert cluster.sasl is not None and cluster.sasl_bootstrap is not None
    topic = _topic(cluster)
    lock = threading.Lock()
    reads = [0]
    password = cluster.sasl.password

    def current_password() -> str:
        with lock:
            reads[0] += 1
        return password

    options: dict[str, Any] = {
        "bootstrap_servers": cluster.sasl_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": cluster.sasl.username,
        "sasl_plain_password": current_password,
    }
    sent = 0
    got: list[bytes] = []
    with (
        KafkaProducer(**options) as producer,
        KafkaConsumer(topic, auto_offset_reset="earliest", **options) as consumer,
    ):
        deadline = time.monotonic() + RUN_SECONDS
        while time.monotonic() < deadline:
            producer.send(topic, b"s%d" % sent).get(timeout=30)
            sent += 1
            for records in consumer.poll(timeout_ms=50).values():
                got.extend(r.value for r in records)
        end = time.monotonic() + 20
        while len(got) < sent and time.monotonic() < end:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend(r.value for r in records)
        produced = producer.metrics()["producer-metrics"]
        consumed = consumer.metrics()["consumer-metrics"]
    # re-authenticated on the live connections, not reconnected: a session lasts 3 s
    for metrics in (produced, consumed):
        assert metrics["successful-reauthentication-total"] >= 2
        assert metrics["connection-creation-total"] <= 4
    assert sent > 50
    assert sorted(got) == sorted(b"s%d" % i for i in range(sent))
    assert reads[0] >= 6  # two clients, each authenticated, then re-authenticated
