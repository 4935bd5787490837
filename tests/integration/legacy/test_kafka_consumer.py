"""The 0.9.5 KafkaConsumer against a real broker: topic/partition forms, task_done and
commit, resume, timeouts, offsets."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from kafkastate.legacy import KafkaConsumer
from kafkastate.legacy.common import ConsumerTimeout, KafkaConfigurationError, KafkaMessage
from kafkastate.legacy.consumer.kafka import OffsetsStruct

pytestmark = pytest.mark.integration

Produce = Callable[[str, int, list[bytes]], None]


def drain(consumer: KafkaConsumer) -> list[KafkaMessage]:
    out = []
    try:
        for m in consumer:
            out.append(m)
    except ConsumerTimeout:
        pass
    return out


def test_commit_and_resume(bootstrap: str, new_topic: Callable[..., str], produce: Produce) -> None:
    topic = new_topic(2)
    group = "g-" + uuid.uuid4().hex
    produce(topic, 0, [b"a", b"b"])
    produce(topic, 1, [b"c"])
    consumer = KafkaConsumer(
        topic,
        group_id=group,
        bootstrap_servers=[bootstrap],
        auto_offset_reset="smallest",
        consumer_timeout_ms=1500,
        deserializer_class=bytes.upper,
    )
    got = drain(consumer)
    assert sorted(m.value for m in got) == [b"A", b"B", b"C"]
    assert consumer.commit() is False  # nothing marked with task_done yet
    first = next(m for m in got if (m.partition, m.offset) == (0, 0))
    assert consumer.task_done(first)
    assert not consumer.task_done(KafkaMessage("other", 0, 0, None, b""))
    assert consumer.commit() is True
    assert consumer.offsets("commit") == {(topic, 0): 1, (topic, 1): None}
    assert isinstance(consumer.offsets(), OffsetsStruct)
    assert consumer.offsets("fetch")[(topic, 0)] == 2
    consumer.close()
    again = KafkaConsumer(
        topic, group_id=group, bootstrap_servers=bootstrap, consumer_timeout_ms=1500
    )
    # partition 0 resumes after the commit; partition 1 has none: 'largest' (the default).
    assert [(m.partition, m.value) for m in drain(again)] == [(0, b"b")]
    again.close()


def test_set_topic_partitions_forms(
    bootstrap: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    t1, t2 = new_topic(2), new_topic(3)
    produce(t1, 0, [b"%d" % i for i in range(20)])
    produce(t2, 1, [b"%d" % i for i in range(50)])
    produce(t2, 2, [b"x"])
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=1500)
    consumer.set_topic_partitions((t1, 0, 12), (t2, 1, 45))
    got = drain(consumer)
    assert sorted((m.topic, m.partition, m.offset) for m in got) == sorted(
        [(t1, 0, o) for o in range(12, 20)] + [(t2, 1, o) for o in range(45, 50)]
    )
    consumer.set_topic_partitions({(t1, 0): 18, (t2, 1): 49})
    assert len(drain(consumer)) == 3
    consumer.set_topic_partitions(t1, (t2, 2), {t2: [1]})
    assert sorted(consumer.offsets("fetch")) == sorted([(t1, 0), (t1, 1), (t2, 1), (t2, 2)])
    consumer.set_topic_partitions({t2: 2})
    consumer.set_topic_partitions({t2: (1, 2)})
    with pytest.raises(KafkaConfigurationError):
        consumer.set_topic_partitions(3.5)
    assert consumer.get_partition_offsets(t2, 1, -1, 1) == (50,)
    assert consumer.get_partition_offsets(t2, 1, -2, 1) == (0,)
    consumer.close()


def test_fetch_messages_batches_and_timeout(
    bootstrap: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(1)
    produce(topic, 0, [b"1", b"2"])
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="smallest", consumer_timeout_ms=200
    )
    seen: list[bytes] = []
    for _ in range(50):
        seen.extend(m.value for m in consumer.fetch_messages())
        if len(seen) == 2:
            break
    assert seen == [b"1", b"2"]
    with pytest.raises(ConsumerTimeout):
        consumer.next()
    consumer.close()


def test_bad_configuration(bootstrap: str) -> None:
    with pytest.raises(KafkaConfigurationError, match="Unknown"):
        KafkaConsumer(bootstrap_servers=bootstrap, no_such_option=1)
    with pytest.raises(KafkaConfigurationError, match="bootstrap_servers"):
        KafkaConsumer()
    with pytest.raises(KafkaConfigurationError, match="group"):
        KafkaConsumer(bootstrap_servers=bootstrap, auto_commit_enable=True)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    with pytest.raises(KafkaConfigurationError, match="group"):
        consumer.commit()
    consumer.close()


def test_auto_commit_by_message_count(
    bootstrap: str, new_topic: Callable[..., str], produce: Produce
) -> None:
    topic = new_topic(1)
    group = "g-" + uuid.uuid4().hex
    produce(topic, 0, [b"a", b"b", b"c"])
    consumer = KafkaConsumer(
        topic,
        group_id=group,
        bootstrap_servers=bootstrap,
        auto_offset_reset="smallest",
        auto_commit_enable=True,
        auto_commit_interval_messages=2,
        consumer_timeout_ms=1500,
    )
    for m in drain(consumer):
        consumer.task_done(m)
    assert consumer.offsets("commit")[(topic, 0)] == 2
    consumer.close()
