"""SimpleProducer and KeyedProducer (0.9.5) against a real broker, read back with
KafkaClient.send_fetch_request."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafkastate.legacy import (
    KafkaClient,
    KeyedProducer,
    Murmur2Partitioner,
    RoundRobinPartitioner,
    SimpleProducer,
)
from kafkastate.legacy.common import AsyncProducerQueueFull, FetchRequest, UnsupportedCodecError
from kafkastate.legacy.partitioner.hashed import murmur2
from kafkastate.legacy.protocol import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD

pytestmark = pytest.mark.integration


def values(client: KafkaClient, topic: str, partition: int = 0) -> list[bytes | None]:
    (resp,) = client.send_fetch_request(
        [FetchRequest(topic, partition, 0, 1 << 20)], max_wait_time=10, min_bytes=1
    )
    return [m.message.value for m in resp.messages]


def test_sync_producer_returns_the_first_offset(
    client: KafkaClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(1)
    producer = SimpleProducer(client)
    (first,) = producer.send_messages(topic.encode(), b"some message")
    assert (first.topic, first.partition, first.error, first.offset) == (topic.encode(), 0, 0, 0)
    (second,) = producer.send_messages(topic, b"this method", b"is variadic")
    assert second.offset == 1
    producer.stop()
    assert values(client, topic) == [b"some message", b"this method", b"is variadic"]


def test_sync_producer_round_robins_from_partition_zero(
    client: KafkaClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(3)
    producer = SimpleProducer(client, random_start=False)
    parts = [producer.send_messages(topic, b"m%d" % i)[0].partition for i in range(3)]
    parts += [producer.send_messages(topic.encode(), b"m")[0].partition]  # same cycle
    producer.stop()
    assert parts == [0, 1, 2, 0]


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_codecs(client: KafkaClient, new_topic: Callable[..., str], codec: int) -> None:
    topic = new_topic(1)
    producer = SimpleProducer(client, codec=codec, codec_compresslevel=5)
    producer.send_messages(topic, b"a", b"b")
    producer.stop()
    assert values(client, topic) == [b"a", b"b"]


def test_unknown_codec(client: KafkaClient) -> None:
    with pytest.raises(UnsupportedCodecError):
        SimpleProducer(client, codec=9)


def test_messages_must_be_bytes(client: KafkaClient, new_topic: Callable[..., str]) -> None:
    topic = new_topic(1)
    producer = SimpleProducer(client)
    with pytest.raises(TypeError, match="bytes"):
        producer.send_messages(topic, "text")  # type: ignore[arg-type]
    producer.stop()


def test_async_producer_delivers_in_order_and_flushes_on_stop(
    client: KafkaClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(1)
    # A linger of 60 s: only stop() (or 20 messages) sends them.
    producer = SimpleProducer(
        client, async_send=True, batch_send_every_n=1000, batch_send_every_t=60
    )
    for i in range(50):
        assert producer.send_messages(topic, b"%d" % i) == []
    producer.stop()
    assert values(client, topic) == [b"%d" % i for i in range(50)]


def test_async_spelled_as_the_seed(client: KafkaClient, new_topic: Callable[..., str]) -> None:
    topic = new_topic(1)
    producer = SimpleProducer(client, **{"async": True})
    assert producer.async_send
    producer.send_messages(topic, b"async message")
    producer.stop()
    assert values(client, topic) == [b"async message"]


def test_async_queue_full(client: KafkaClient, new_topic: Callable[..., str]) -> None:
    topic = new_topic(1)
    producer = SimpleProducer(client, async_send=True, batch_send_every_t=60, async_queue_maxsize=2)
    producer.send_messages(topic, b"1", b"2")
    with pytest.raises(AsyncProducerQueueFull) as info:
        producer.send_messages(topic, b"3")
    assert info.value.failed_msgs == [b"3"]
    producer.stop()
    assert values(client, topic) == [b"1", b"2"]


def test_keyed_producer_sends_a_key_to_one_partition(
    client: KafkaClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(4)
    producer = KeyedProducer(client, partitioner=Murmur2Partitioner)
    seen = {producer.send_messages(topic, b"key1", b"m%d" % i)[0].partition for i in range(5)}
    assert seen == {(murmur2(b"key1") & 0x7FFFFFFF) % 4}
    default = KeyedProducer(client)
    assert len({default.send(topic, b"key2", b"x")[0].partition for _ in range(5)}) == 1
    rr = KeyedProducer(client, partitioner=RoundRobinPartitioner)
    assert [rr.send_messages(topic, b"k", b"v")[0].partition for _ in range(4)] == [0, 1, 2, 3]
    for p in (producer, default, rr):
        p.stop()
    (partition,) = seen
    assert values(client, topic, partition)[:5] == [b"m%d" % i for i in range(5)]


def test_sync_fail_on_error_false_returns_the_error(
    client: KafkaClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(1)
    producer = SimpleProducer(client, sync_fail_on_error=False)
    big = b"x" * (2 << 20)  # above the broker's message.max.bytes
    (resp,) = producer.send_messages(topic, big)
    assert resp.error != 0
    producer.stop()


@pytest.mark.parametrize(
    "acks",
    [
        SimpleProducer.ACK_NOT_REQUIRED,
        SimpleProducer.ACK_AFTER_LOCAL_WRITE,
        SimpleProducer.ACK_AFTER_CLUSTER_COMMIT,
    ],
)
def test_req_acks(client: KafkaClient, new_topic: Callable[..., str], acks: int) -> None:
    topic = new_topic(1)
    producer = SimpleProducer(client, req_acks=acks, ack_timeout=2000)
    (resp,) = producer.send_messages(topic, b"acked")
    assert resp.error == 0
    assert resp.offset == (-1 if acks == 0 else 0)
    producer.stop()
    assert values(client, topic) == [b"acked"]
