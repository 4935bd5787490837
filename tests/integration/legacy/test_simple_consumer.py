"""SimpleConsumer (0.9.5) against a real broker: offsets, seek/whence, pending, commits."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest

from kafkastate.legacy import KafkaClient, SimpleConsumer
from kafkastate.legacy.common import (
    KafkaConfigurationError,
    OffsetFetchRequest,
    OffsetOutOfRangeError,
)
from kafkastate.legacy.context import OffsetCommitContext

pytestmark = pytest.mark.integration

Produce = Callable[[str, int, list[bytes]], None]


def committed(client: KafkaClient, group: str, topic: str, partition: int = 0) -> int:
    (resp,) = client.send_offset_fetch_request(group, [OffsetFetchRequest(topic, partition)])
    return int(resp.offset)


def test_get_messages_reads_from_the_start_without_a_commit(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(2)
    produce(topic, 0, [b"a0", b"a1"])
    produce(topic, 1, [b"b0"])
    consumer = SimpleConsumer(client, "g-" + uuid.uuid4().hex, topic, auto_commit=False)
    got = consumer.get_messages(count=3, block=True, timeout=10)
    assert sorted(m.message.value for m in got) == [b"a0", b"a1", b"b0"]
    assert consumer.offsets == {0: 2, 1: 1}
    assert consumer.get_messages(count=1, block=False) == []
    assert consumer.pending() == 0
    consumer.stop()


def test_seek_whence(client: KafkaClient, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic(2)
    produce(topic, 0, [b"%d" % i for i in range(10)])
    produce(topic, 1, [b"%d" % i for i in range(10)])
    consumer = SimpleConsumer(client, None, topic, auto_commit=False)
    consumer.seek(-3, 2)  # 3 before the tail, divided as 0.9.5: divmod(-3, 2) -> -1, -2
    assert consumer.offsets == {0: 9, 1: 8}
    consumer.seek(4, 0, partition=1)
    assert consumer.offsets[1] == 4
    consumer.seek(2, 1, partition=1)
    assert consumer.offsets[1] == 6
    consumer.seek(7)
    assert consumer.offsets == {0: 7, 1: 7}
    assert consumer.pending() == 6
    assert consumer.pending([0]) == 3
    msgs = consumer.get_messages(count=6, block=True, timeout=10)
    assert sorted(m.offset for m in msgs) == [7, 7, 8, 8, 9, 9]
    with pytest.raises(KafkaConfigurationError, match="whence"):
        consumer.seek(0, 3)
    with pytest.raises(ValueError):
        consumer.seek(0, 5)
    consumer.stop()


def test_partition_info_and_get_message(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(1)
    produce(topic, 0, [b"x", b"y"])
    consumer = SimpleConsumer(client, None, topic, auto_commit=False)
    consumer.provide_partition_info()
    partition, message = consumer.get_messages(count=1, timeout=10)[0]
    assert (partition, message.offset, message.message.value) == (0, 0, b"x")
    m = consumer.get_message(timeout=10, get_partition_info=False)
    assert (m.offset, m.message.value) == (1, b"y")
    assert consumer.get_message(block=False) is None
    consumer.stop()


def test_iteration_ends_after_iter_timeout(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(1)
    produce(topic, 0, [b"1", b"2", b"3"])
    consumer = SimpleConsumer(client, None, topic, auto_commit=False, iter_timeout=0.5)
    assert [m.message.value for m in consumer] == [b"1", b"2", b"3"]
    consumer.stop()


def test_auto_commit_every_n_and_resume(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(1)
    group = "g-" + uuid.uuid4().hex
    produce(topic, 0, [b"%d" % i for i in range(5)])
    consumer = SimpleConsumer(client, group, topic, auto_commit_every_n=2, auto_commit_every_t=None)
    consumer.get_messages(count=1, timeout=10)
    assert committed(client, group, topic) == -1
    consumer.get_messages(count=1, timeout=10)
    assert committed(client, group, topic) == 2
    consumer.get_messages(count=1, timeout=10)
    consumer.stop()  # commits what was handed out
    assert committed(client, group, topic) == 3
    again = SimpleConsumer(client, group, topic, auto_commit_every_t=None)
    assert [m.message.value for m in again.get_messages(count=5, block=2, timeout=10)] == [
        b"3",
        b"4",
    ]
    again.stop()


def test_auto_commit_every_t(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(1)
    group = "g-" + uuid.uuid4().hex
    produce(topic, 0, [b"a"])
    consumer = SimpleConsumer(
        client, group, topic, auto_commit_every_n=None, auto_commit_every_t=100
    )
    consumer.get_messages(count=1, timeout=10)
    deadline = time.monotonic() + 10
    while committed(client, group, topic) != 1:
        assert time.monotonic() < deadline, "the timer never committed"
        time.sleep(0.05)
    consumer.stop()


def test_reset_partition_offset(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(1)
    produce(topic, 0, [b"a", b"b"])
    consumer = SimpleConsumer(client, None, topic, auto_commit=False)
    assert consumer.reset_partition_offset(0) == 2  # largest
    consumer.auto_offset_reset = "smallest"
    assert consumer.reset_partition_offset(0) == 0
    consumer.auto_offset_reset = "none"
    with pytest.raises(OffsetOutOfRangeError):
        consumer.reset_partition_offset(0)
    consumer.stop()


def test_out_of_range_offset_is_reset_by_policy(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(1)
    produce(topic, 0, [b"a", b"b"])
    smallest = SimpleConsumer(client, None, topic, auto_commit=False, auto_offset_reset="smallest")
    smallest.seek(100)
    assert [m.offset for m in smallest.get_messages(count=2, timeout=10)] == [0, 1]
    smallest.stop()
    strict = SimpleConsumer(client, None, topic, auto_commit=False, auto_offset_reset="none")
    strict.seek(100)
    with pytest.raises(OffsetOutOfRangeError):
        strict.get_messages(count=1, timeout=10)
    strict.stop()


def test_offset_commit_context(
    client: KafkaClient, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(1)
    group = "g-" + uuid.uuid4().hex
    produce(topic, 0, [b"ok", b"ok", b"stop", b"later"])
    consumer = SimpleConsumer(client, group, topic, auto_commit=False)
    consumer.provide_partition_info()
    consumer.fetch_last_known_offsets()
    with OffsetCommitContext(consumer) as context:
        for partition, message in consumer.get_messages(4, block=True, timeout=10):
            if message.message.value == b"ok":
                context.mark(partition, message.offset)
            else:
                break
        assert context
    assert committed(client, group, topic) == 2
    assert consumer.offsets[0] == 2
    consumer.stop()
