"""The consumers' options and the arguments of their calls, as kafka-python and aiokafka
document them: every option of theirs works or is refused by name; TLS from files; the
constructor (KafkaConsumer) and start() (AIOKafkaConsumer) wait for a bootstrap server;
timeouts of the blocking calls; validation when the consumer is made."""

from __future__ import annotations

import asyncio
import inspect
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.anyio import open_consumer
from kafkastate.asyncio import AIOKafkaConsumer
from kafkastate.core.config import accepted
from kafkastate.errors import (
    AuthenticationFailedError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    SslAuthenticationError,
)
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaConsumer
from tests.adapters.test_consumer import _produce, _topic

kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

# kafka-python 3 / aiokafka options of group membership: each accepted by the consumer
# whose library has it.
GROUP = {
    "partition_assignment_strategy",
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "max_poll_interval_ms",
    "rebalance_timeout_ms",
    "group_instance_id",
    "leave_group_on_close",
    "exclude_internal_topics",
}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens here now: connections are refused at once


def _parameters(cls: type) -> frozenset[str]:
    """The options a consumer face takes (the option layer's table)."""
    flavour = "kafka-python" if cls is KafkaConsumer else "aiokafka"
    return accepted("consumer", flavour)


# ------------------------------------------------------------------ every option, by name


KAFKA_PYTHON_OPTIONS = sorted(
    {*kafka.KafkaConsumer.DEFAULT_CONFIG, "api_version_auto_timeout_ms", "leave_group_on_close"}
)


@pytest.mark.parametrize("option", KAFKA_PYTHON_OPTIONS)
def test_every_kafka_python_option_works_or_is_refused_by_name(option: str) -> None:
    if option in _parameters(KafkaConsumer):
        return  # accepted: see test_kafka_python_defaults_are_accepted
    with pytest.raises(KafkaConfigurationError, match=option) as caught:
        KafkaConsumer(bootstrap_servers=f"127.0.0.1:{_closed_port()}", **{option: None})
    assert option not in GROUP
    assert "not supported by" in str(caught.value)


def test_kafka_python_defaults_are_accepted() -> None:
    accepted = _parameters(KafkaConsumer)
    defaults = {k: v for k, v in kafka.KafkaConsumer.DEFAULT_CONFIG.items() if k in accepted}
    assert {"ssl_cafile", "reconnect_backoff_ms", "bootstrap_timeout_ms"} <= set(defaults)
    defaults.update(
        bootstrap_servers=f"127.0.0.1:{_closed_port()}",
        api_version=(2, 8),  # no bootstrap wait
        metrics_enabled=False,
    )
    with KafkaConsumer(**defaults) as consumer:
        assert consumer.metrics() == consumer.metrics(raw=True)
        assert consumer.metrics()["consumer-fetch-manager-metrics"]["assigned-partitions"] == 0


@pytest.mark.parametrize(
    "option", sorted(set(inspect.signature(aiokafka.AIOKafkaConsumer).parameters) - {"topics"})
)
def test_every_aiokafka_option_works_or_is_refused_by_name(option: str) -> None:
    if option in _parameters(AIOKafkaConsumer):
        return
    with pytest.raises(KafkaConfigurationError, match=option) as caught:
        AIOKafkaConsumer(bootstrap_servers="localhost", **{option: None})
    assert option not in GROUP
    assert "not supported by" in str(caught.value)


def test_options_neither_library_has_are_refused() -> None:
    # kafka-python's type and words; aiokafka's faces: a TypeError as Python's
    with pytest.raises(KafkaConfigurationError, match=r"Unrecognized configs: \{'bogus'\}"):
        KafkaConsumer(bootstrap_servers="localhost", bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        AIOKafkaConsumer(bootstrap_servers="localhost", bogus=1)


def test_aiokafka_no_op_options_are_accepted() -> None:
    AIOKafkaConsumer(bootstrap_servers="localhost", api_version="auto", consumer_timeout_ms=50)


# --------------------------------------------------------------- validation when made


BAD: list[tuple[dict[str, Any], str]] = [
    ({"max_poll_records": 0}, "max_poll_records"),
    ({"max_poll_records": -3}, "max_poll_records"),
    ({"max_poll_records": True}, "max_poll_records"),
    ({"max_poll_records": "10"}, "max_poll_records"),
    ({"auto_commit_interval_ms": 0}, "auto_commit_interval_ms"),
    ({"auto_commit_interval_ms": -1000}, "auto_commit_interval_ms"),
]


@pytest.mark.parametrize(("options", "name"), BAD)
def test_bad_values_fail_when_the_consumer_is_made(options: dict[str, Any], name: str) -> None:
    unreachable = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(KafkaConfigurationError, match=name):
        KafkaConsumer(bootstrap_servers=unreachable, **options)
    with pytest.raises(KafkaConfigurationError, match=name):
        AIOKafkaConsumer(bootstrap_servers=unreachable, **options)

    async def enter() -> None:
        async with open_consumer(bootstrap_servers=unreachable, **options):
            raise AssertionError("entered")

    for backend in ("asyncio", "trio"):
        with pytest.raises(KafkaConfigurationError, match=name):
            anyio.run(enter, backend=backend)


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"reconnect_backoff_ms": 0}, "reconnect_backoff_ms"),
        ({"reconnect_backoff_max_ms": -1}, "reconnect_backoff_max_ms"),
        ({"max_in_flight_requests_per_connection": 0}, "max_in_flight_requests_per_connection"),
        ({"receive_message_max_bytes": 0}, "receive_message_max_bytes"),
        ({"bootstrap_timeout_ms": -1}, "bootstrap_timeout_ms"),
        ({"consumer_timeout_ms": -1}, "consumer_timeout_ms"),
        ({"default_offset_commit_callback": 5}, "default_offset_commit_callback"),
        ({"security_protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"}, "ssl_cafile"),
    ],
)
def test_bad_kafka_python_values_are_named(options: dict[str, Any], name: str) -> None:
    with pytest.raises(KafkaConfigurationError, match=name):
        KafkaConsumer(bootstrap_servers=f"127.0.0.1:{_closed_port()}", **options)


# ------------------------------------------------------------------- bootstrap wait


def test_sync_constructor_waits_for_a_bootstrap_server() -> None:
    unreachable = f"127.0.0.1:{_closed_port()}"
    for wait in ({"bootstrap_timeout_ms": 400}, {"api_version_auto_timeout_ms": 400}):
        started = time.monotonic()
        with pytest.raises(NoBrokersAvailable, match=unreachable):
            KafkaConsumer(bootstrap_servers=unreachable, request_timeout_ms=30_000, **wait)
        assert 0.35 < time.monotonic() - started < 5
    # With api_version given, kafka-python's constructor does not wait at all: were the
    # 10 s bootstrap timeout honoured here, the constructor would take at least that long.
    started = time.monotonic()
    KafkaConsumer(
        bootstrap_servers=unreachable, api_version=(3, 0), api_version_auto_timeout_ms=10_000
    ).close()
    assert time.monotonic() - started < 5


@pytest.mark.integration
def test_sync_constructor_finds_the_cluster(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap, partitions=2)
    with KafkaConsumer(topic, bootstrap_servers=kafka_cluster.bootstrap) as consumer:
        # The wait already brought the topic's metadata: assigned before any poll.
        assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}


@pytest.mark.kafka_needs("sasl:SCRAM-SHA-512")
@pytest.mark.integration
def test_wrong_sasl_password_fails_the_consumers_typed(kafka_cluster: Any) -> None:
    options: dict[str, Any] = {
        "bootstrap_servers": kafka_cluster.sasl_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": kafka_cluster.sasl.username,
        "sasl_plain_password": "wrong",
    }
    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError):
        KafkaConsumer(bootstrap_timeout_ms=1500, **options)
    assert time.monotonic() - started < 10

    async def start() -> None:
        consumer = AIOKafkaConsumer(request_timeout_ms=1500, **options)
        await consumer.start()

    with pytest.raises(AuthenticationFailedError):
        asyncio.run(start())


def test_aiokafka_start_waits_for_a_bootstrap_server() -> None:
    unreachable = f"127.0.0.1:{_closed_port()}"

    async def main() -> None:
        consumer = AIOKafkaConsumer("t", bootstrap_servers=unreachable, request_timeout_ms=400)
        started = time.monotonic()
        with pytest.raises(KafkaConnectionError, match=unreachable) as caught:
            await consumer.start()
        assert isinstance(caught.value, NoBrokersAvailable)
        assert 0.35 < time.monotonic() - started < 5
        with pytest.raises(IllegalStateError, match="not started"):
            consumer.assignment()
        await consumer.stop()  # harmless

    asyncio.run(main())


# ------------------------------------------------------------------------------- TLS


@pytest.mark.kafka_needs("ssl")
@pytest.mark.integration
def test_sync_consumer_tls_from_ssl_cafile(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap, partitions=1)
    _produce(kafka_cluster.bootstrap, topic, 5, partitions=1)
    tp = TopicPartition(topic, 0)
    for check_hostname in (True, False):
        with KafkaConsumer(
            bootstrap_servers=kafka_cluster.ssl_bootstrap,
            security_protocol="SSL",
            ssl_cafile=str(kafka_cluster.ca_file),
            ssl_check_hostname=check_hostname,
            auto_offset_reset="earliest",
        ) as consumer:
            consumer.assign([tp])
            batch = consumer.poll(timeout_ms=10_000, update_offsets=False)
            assert [r.offset for r in batch[tp]] == [0, 1, 2, 3, 4]
    # Without the CA the broker's certificate is not trusted: a typed refusal, at once.
    with pytest.raises(SslAuthenticationError, match="certificate"):
        KafkaConsumer(
            bootstrap_servers=kafka_cluster.ssl_bootstrap,
            security_protocol="SSL",
            bootstrap_timeout_ms=1000,
        )


# -------------------------------------------------------------------------- timeouts


def test_sync_timeout_ms_arguments_are_honoured() -> None:
    tp = TopicPartition("t", 0)
    consumer = KafkaConsumer(
        bootstrap_servers=f"127.0.0.1:{_closed_port()}",
        api_version=(3, 0),
        group_id="g",
        request_timeout_ms=60_000,
    )
    calls: list[Callable[[], Any]] = [
        lambda: consumer.beginning_offsets([tp], timeout_ms=300),
        lambda: consumer.end_offsets([tp], timeout_ms=300),
        lambda: consumer.offsets_for_times({tp: 0}, timeout_ms=300),
        lambda: consumer.committed(tp, timeout_ms=300),
        lambda: consumer.commit({tp: 1}, timeout_ms=300),
    ]
    for call in calls:
        started = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="timeout_ms"):
            call()
        assert 0.25 < time.monotonic() - started < 5
    with pytest.raises(KafkaConfigurationError, match="timeout_ms"):
        consumer.commit({tp: 1}, timeout_ms=-1)  # refused before anything is sent
    consumer.assign([tp])
    consumer.seek(tp, 3)  # a position to commit on close
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError):
        consumer.close(timeout_ms=300)
    assert time.monotonic() - started < 5
    consumer.close()  # closed all the same
    with pytest.raises(IllegalStateError, match="closed"):
        consumer.poll()


@pytest.mark.integration
def test_sync_timeout_ms_arguments_with_time_to_answer(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    _produce(bootstrap, topic, 4, partitions=1)
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group) as consumer:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp], timeout_ms=10_000) == {tp: 0}
        assert consumer.end_offsets([tp], timeout_ms=10_000) == {tp: 4}
        assert consumer.offsets_for_times({tp: 0}, timeout_ms=10_000)[tp] is not None
        consumer.commit({tp: 2}, timeout_ms=10_000)
        assert consumer.committed(tp, timeout_ms=10_000) == 2
        with pytest.raises(KafkaTimeoutError, match="timeout_ms"):
            consumer.end_offsets([tp], timeout_ms=0)
        consumer.seek(tp, 3)
        consumer.close(timeout_ms=10_000)  # auto-commit on close, given time
    with KafkaConsumer(bootstrap_servers=bootstrap, group_id=group) as c:
        c.assign([tp])
        assert c.committed(tp) == 3


# ------------------------------------------------------------------- kafka-python options


@pytest.mark.integration
def test_default_offset_commit_callback(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    _produce(bootstrap, topic, 4, partitions=1)
    tp = TopicPartition(topic, 0)
    outcomes: list[tuple[dict[TopicPartition, Any], Any]] = []
    with KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        auto_commit_interval_ms=100,
        default_offset_commit_callback=lambda offsets, error: outcomes.append((offsets, error)),
    ) as consumer:
        consumer.assign([tp])
        consumer.commit_async({tp: 1})  # no callback: the default one
        explicit: list[Any] = []
        consumer.commit_async({tp: 2}, callback=lambda offsets, error: explicit.append(error))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not (
            explicit and any(offsets == {tp: 4} for offsets, _ in outcomes)
        ):
            consumer.poll(timeout_ms=100)  # also auto-commits every 100 ms
        assert outcomes[0] == ({tp: 1}, None)
        assert explicit == [None]
        assert all(error is None for _, error in outcomes)
        assert ({tp: 4}, None) in outcomes[1:]  # an auto-commit of what poll returned


@pytest.mark.integration
def test_allow_auto_create_topics(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    refused, created = (f"auto-{uuid.uuid4().hex[:10]}" for _ in range(2))
    with KafkaConsumer(refused, bootstrap_servers=bootstrap, allow_auto_create_topics=False) as c:
        c.poll(timeout_ms=1500)
        assert c.assignment() == set()
        assert refused not in c.topics()
    with KafkaConsumer(created, bootstrap_servers=bootstrap) as c:  # kafka-python's default
        deadline = time.monotonic() + 15
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(timeout_ms=200)
        assert {tp.topic for tp in c.assignment()} == {created}


# ----------------------------------------------------------------- refused arguments


BAD_SUBSCRIPTIONS = [
    ({"topics": ["t"], "pattern": "^t.*"}, "topics or to a pattern, not both"),
    ({"pattern": "(unclosed"}, "not a valid regex"),
    ({"topics": ["t"], "listener": object()}, "lacks on_partitions_revoked"),
    ({"topics": ["t"], "listener": ConsumerRebalanceListener()}, "listener needs a group_id"),
    ({"topics": "t"}, "list of topic names"),
]


@pytest.mark.integration
def test_subscribe_arguments_are_checked(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    with KafkaConsumer(bootstrap_servers=bootstrap) as consumer:
        for kwargs, message in BAD_SUBSCRIPTIONS:
            with pytest.raises(KafkaConfigurationError, match=message):
                consumer.subscribe(**kwargs)
        assert consumer.subscription() == set()

    async def main() -> None:
        async with AIOKafkaConsumer(bootstrap_servers=bootstrap) as consumer:
            for kwargs, message in BAD_SUBSCRIPTIONS:
                with pytest.raises(KafkaConfigurationError, match=message):
                    consumer.subscribe(**kwargs)
            assert consumer.subscription() == set()

    asyncio.run(main())


@pytest.mark.integration
@pytest.mark.parametrize("adapter", ["asyncio", "trio", "aiokafka"])
def test_seek_to_committed_without_group_id(kafka_cluster: Any, adapter: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    tp = TopicPartition(_topic(bootstrap, partitions=1), 0)

    async def with_open_consumer() -> None:
        async with open_consumer(bootstrap_servers=bootstrap) as consumer:
            consumer.assign([tp])
            with pytest.raises(IllegalStateError, match="group_id"):
                await consumer.seek_to_committed(tp)
            with pytest.raises(IllegalStateError, match="group_id"):
                await consumer.seek_to_committed()

    async def with_aiokafka() -> None:
        async with AIOKafkaConsumer(bootstrap_servers=bootstrap) as consumer:
            consumer.assign([tp])
            with pytest.raises(IllegalStateError, match="group_id"):
                await consumer.seek_to_committed(tp)

    if adapter == "aiokafka":
        asyncio.run(with_aiokafka())
    else:
        anyio.run(with_open_consumer, backend=adapter)
