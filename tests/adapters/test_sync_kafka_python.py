"""kafka-python 3.0 behaviour of kafkastate.sync (issue 16) against a real broker:
Serializer / Deserializer objects (and on the anyio consumer too), partitioner objects
(kafkastate's and kafka-python's own) and the 2.x callable, ``config`` dicts,
``max_usable_produce_magic``, ``bootstrap()``, ``group_metadata()`` without a group, and
configuration errors in kafka-python's words."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from kafkastate.anyio import open_consumer
from kafkastate.core.producer import default_partition
from kafkastate.errors import KafkaConfigurationError, KafkaTimeoutError
from kafkastate.partitioner import DefaultPartitioner, StickyPartitioner
from kafkastate.serializer import DefaultSerializer, Deserializer, JsonSerializer
from kafkastate.structs import ConsumerGroupMetadata, TopicPartition
from kafkastate.sync import KafkaConsumer, KafkaProducer

kafka = pytest.importorskip("kafka")

from tests._support.readback import consume  # noqa: E402 (after the importorskip)
from tests.conformance.runtimes import new_topic  # noqa: E402


class _Closing(Deserializer):
    closed = 0

    def deserialize(self, topic: str, headers: Any, data: bytes | None) -> Any:
        return (topic, dict(headers), data)

    def close(self) -> None:
        _Closing.closed += 1


# --------------------------------------------------------------------- serializers


@pytest.mark.integration
def test_serializer_and_deserializer_objects_round_trip(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=1)
    closed: list[str] = []

    class Keys(DefaultSerializer):
        def close(self) -> None:
            closed.append("keys")

    with KafkaProducer(
        bootstrap_servers=bootstrap, key_serializer=Keys(), value_serializer=JsonSerializer()
    ) as producer:
        producer.send(topic, {"n": 1}, key="k1", headers=[("h", b"1")]).get(timeout=30)
        producer.send(topic, None, key="k2").get(timeout=30)  # a tombstone stays None
    assert closed == ["keys"]  # close() closes the serializer objects, as kafka-python
    tp = TopicPartition(topic, 0)
    with KafkaConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        key_deserializer=DefaultSerializer(),
        value_deserializer=JsonSerializer(),
    ) as consumer:
        consumer.assign([tp])
        records = consumer.poll(timeout_ms=10_000)[tp]
        assert [(r.key, r.value) for r in records] == [("k1", {"n": 1}), ("k2", None)]
    with KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", value_deserializer=_Closing()
    ) as consumer:
        consumer.assign([tp])
        first = consumer.poll(timeout_ms=10_000)[tp][0]
        # deserialize(topic, headers, data): the record's topic and headers
        assert first.value == (topic, {"h": b"1"}, b'{"n": 1}')
    assert _Closing.closed == 1


@pytest.mark.integration
@pytest.mark.anyio
async def test_the_anyio_consumer_takes_deserializer_objects(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=1)
    with KafkaProducer(bootstrap_servers=bootstrap) as producer:
        producer.send(topic, b'["a"]', key=b"k").get(timeout=30)
    closed: list[str] = []

    class Values(JsonSerializer):
        def close(self) -> None:
            closed.append("values")

    async with open_consumer(
        bootstrap_servers=bootstrap,
        key_deserializer=DefaultSerializer(),
        value_deserializer=Values(),
        auto_offset_reset="earliest",
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with anyio.fail_after(20):
            record = await consumer.getone()
    assert (record.key, record.value) == ("k", ["a"])
    assert closed == ["values"]


# --------------------------------------------------------------------- partitioners


@pytest.mark.integration
@pytest.mark.parametrize(
    "partitioner",
    [
        DefaultPartitioner(),
        StickyPartitioner(),
        kafka.partitioner.DefaultPartitioner(),  # kafka-python's own objects work too
        lambda key, every, available: default_partition(key, len(every)),  # 2.x callable
    ],
    ids=["default", "sticky", "kafka-python-default", "callable"],
)
def test_partitioners_choose_kafka_pythons_partitions(kafka_cluster: Any, partitioner: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=4)
    with KafkaProducer(bootstrap_servers=bootstrap, partitioner=partitioner) as producer:
        keyed = [producer.send(topic, b"v", key=f"key-{i}".encode()) for i in range(20)]
        for i, future in enumerate(keyed):
            assert future.get(timeout=30).partition == default_partition(f"key-{i}".encode(), 4)
        if callable(getattr(partitioner, "partition", None)):
            keyless = [producer.send(topic, b"v").get(timeout=30).partition for _ in range(5)]
            assert set(keyless) <= {0, 1, 2, 3}
    assert len(consume(bootstrap, topic, 20 + (5 if hasattr(partitioner, "partition") else 0)))


@pytest.mark.integration
def test_sticky_partitioner_fills_a_batch_then_moves(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=4)
    with KafkaProducer(
        bootstrap_servers=bootstrap, partitioner=StickyPartitioner(), batch_size=300, linger_ms=50
    ) as producer:
        futures = [producer.send(topic, b"%03d" % i + b"x" * 90) for i in range(24)]
        producer.flush(30)
        order = [f.get(timeout=30).partition for f in futures]
    runs = [len(list(g)) for _, g in itertools.groupby(order)]
    assert len(runs) > 1 and max(runs) < 24  # KIP-480: moved on at batch boundaries


# ------------------------------------------------------------ config, small methods


@pytest.mark.integration
def test_config_dicts_magic_bootstrap_and_group_metadata(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    with KafkaProducer(bootstrap_servers=bootstrap, linger_ms=7, **{"batch.size": 999}) as p:
        assert p.config["linger_ms"] == 7 and p.config["batch_size"] == 999
        assert p.config["bootstrap_servers"] == bootstrap
        assert p.config["acks"] == kafka.KafkaProducer.DEFAULT_CONFIG["acks"]
        assert p.config["client_id"].startswith("kafkastate-producer-")
        assert p.max_usable_produce_magic((0, 10, 1)) == 1
        assert KafkaProducer.max_usable_produce_magic((3, 0)) == 2
    with KafkaConsumer(bootstrap_servers=bootstrap, api_version=(4, 0)) as c:
        assert c.config["api_version"] == (4, 0) and c.config["group_id"] is None
        assert (
            c.config["fetch_max_wait_ms"] == kafka.KafkaConsumer.DEFAULT_CONFIG["fetch_max_wait_ms"]
        )
        c.bootstrap(timeout_ms=30_000)  # api_version given: the constructor did not wait
        assert c.topics() is not None
        c.bootstrap(timeout_ms=30_000, refresh=True)
        # kafka-python's empty snapshot without a group_id
        assert c.group_metadata() == ConsumerGroupMetadata(None, -1, "", None)  # type: ignore[arg-type]
        assert c.group_metadata().group_id is None


def test_bootstrap_times_out_without_a_broker() -> None:
    with (
        KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(4, 0)) as c,
        pytest.raises(KafkaTimeoutError),
    ):
        c.bootstrap(timeout_ms=300)


# ------------------------------------------------------------- configuration errors


@pytest.mark.parametrize("face", [KafkaConsumer, KafkaProducer])
def test_unknown_options_are_unrecognized_configs(face: Any) -> None:
    with pytest.raises(KafkaConfigurationError) as caught:
        face(bootstrap_servers="127.0.0.1:1", no_such_option=1)
    name = face.__name__
    assert str(caught.value) == f"{name}: Unrecognized configs: {{'no_such_option'}}"
    with pytest.raises(ValueError, match="Unrecognized configs"):  # kafka-python's producer's
        face(bootstrap_servers="127.0.0.1:1", no_such_option=1)


def test_kafka_python_cross_checks_on_the_faces() -> None:
    with pytest.raises(KafkaConfigurationError, match="must be larger than fetch_max_wait_ms"):
        KafkaConsumer(bootstrap_servers="127.0.0.1:1", fetch_max_wait_ms=40_000)
    with pytest.raises(KafkaConfigurationError, match="incompatible with user-provided acks=1"):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", enable_idempotence=True, acks=1)
    with pytest.raises(KafkaConfigurationError, match=r"requires broker >= 0\.11"):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", api_version=(0, 10), transactional_id="t")
    with pytest.raises(KafkaConfigurationError, match="Cannot set transactional_id"):
        KafkaProducer(
            bootstrap_servers="127.0.0.1:1", transactional_id="t", enable_idempotence=False
        )
