"""KafkaClient (0.9.5) against a real broker: metadata, produce, fetch, offsets, commits."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest

from kafkastate.legacy import KafkaClient, KafkaConnection, create_gzip_message, create_message
from kafkastate.legacy.common import (
    ConnectionError,
    FetchRequest,
    KafkaUnavailableError,
    LeaderNotAvailableError,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetRequest,
    ProduceRequest,
    UnknownTopicOrPartitionError,
)

pytestmark = pytest.mark.integration


def test_metadata(client: KafkaClient, new_topic: Callable[..., str]) -> None:
    topic = new_topic(3)
    client.load_metadata_for_topics(topic)
    assert client.has_metadata_for_topic(topic)
    assert client.get_partition_ids_for_topic(topic) == [0, 1, 2]
    assert topic in client.topics
    assert client.brokers
    client.reset_topic_metadata(topic)
    assert not client.has_metadata_for_topic(topic)


def test_produce_fetch_offsets_commit(client: KafkaClient, new_topic: Callable[..., str]) -> None:
    topic = new_topic(2)
    req = ProduceRequest(
        topic=topic.encode(),
        partition=1,
        messages=[create_message(b"one"), create_message(b"two", b"k")],
    )
    gz = ProduceRequest(topic=topic, partition=0, messages=[create_gzip_message([b"a", b"b"])])
    resps = client.send_produce_request(payloads=[req, gz], fail_on_error=True)
    assert [(r.topic, r.partition, r.error, r.offset) for r in resps] == [
        (topic.encode(), 1, 0, 0),
        (topic, 0, 0, 0),
    ]
    (fetched,) = client.send_fetch_request([FetchRequest(topic, 1, 1, 4096)], min_bytes=1)
    assert fetched.error == 0
    assert fetched.highwaterMark == 2
    assert [(m.offset, m.message.key, m.message.value) for m in fetched.messages] == [
        (1, b"k", b"two")
    ]
    (gzf,) = client.send_fetch_request([FetchRequest(topic, 0, 0, 4096)], min_bytes=1)
    assert [m.message.value for m in gzf.messages] == [b"a", b"b"]
    latest, earliest = client.send_offset_request(
        [OffsetRequest(topic, 1, -1, 1), OffsetRequest(topic, 0, -2, 1)]
    )
    assert latest.offsets == (2,) and earliest.offsets == (0,)
    (committed,) = client.send_offset_commit_request(
        "legacy-group", [OffsetCommitRequest(topic, 1, 2, None)]
    )
    assert committed.error == 0
    got = client.send_offset_fetch_request(
        "legacy-group", [OffsetFetchRequest(topic, 1), OffsetFetchRequest(topic, 0)]
    )
    assert [(r.partition, r.offset) for r in got] == [(1, 2), (0, -1)]
    (coordinator,) = client.send_consumer_metadata_request(["legacy-group"])
    assert coordinator.error == 0 and coordinator.nodeId in client.brokers


def test_ensure_topic_exists_creates_on_demand(client: KafkaClient) -> None:
    client.ensure_topic_exists("legacy-auto-created", timeout=30)
    assert client.get_partition_ids_for_topic("legacy-auto-created")


def test_unknown_partition_is_the_seeds_error(
    client: KafkaClient, new_topic: Callable[..., str]
) -> None:
    topic = new_topic(1)
    with pytest.raises(UnknownTopicOrPartitionError):
        client.send_produce_request([ProduceRequest(topic, 7, [create_message(b"x")])])


def test_copy_and_reinit(client: KafkaClient, new_topic: Callable[..., str]) -> None:
    topic = new_topic(1)
    other = client.copy()
    other.reinit()
    other.load_metadata_for_topics(topic)
    assert other.get_partition_ids_for_topic(topic) == [0]
    other.close()


def test_dead_broker_is_kafka_unavailable() -> None:
    with pytest.raises(KafkaUnavailableError):
        KafkaClient("127.0.0.1:1", timeout=2)


def test_leader_not_available_is_importable() -> None:
    assert LeaderNotAvailableError.errno == 5


def test_kafka_connection_moves_framed_bytes(bootstrap: str) -> None:
    host, port = bootstrap.split(",", 1)[0].rsplit(":", 1)
    conn = KafkaConnection(host, int(port), timeout=10)
    client_id = b"legacy"
    # ApiVersions v0: api key 18, version 0, correlation id 7, client id.
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    conn.send(7, struct.pack(">i", len(body)) + body)
    response = conn.recv(7)
    correlation_id, error_code = struct.unpack(">ih", response[:6])
    assert (correlation_id, error_code) == (7, 0)
    copy = conn.copy()
    conn.close()
    copy.reinit()
    copy.close()
    with pytest.raises(ConnectionError):
        KafkaConnection("127.0.0.1", 1, timeout=2)
