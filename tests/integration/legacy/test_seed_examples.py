"""Every code example of seed 004 (kafka-python 0.9.5's docs), run against the real broker
with ``kafka`` replaced by ``kafkastate.legacy``.

Each example is kept verbatim below. What :func:`adapt` changes besides the import is
named there: the broker address and topic names (fresh per test), and ``async=`` (a
reserved word since Python 3.7) spelled ``async_send=``. Examples that loop forever end
when the names they call (``print``, ``do_some_work``...) have seen every message.
"""

from __future__ import annotations

import gc
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any

import pytest

import kafkastate.legacy
import kafkastate.legacy.context
from kafkastate.legacy import KafkaClient, MultiProcessConsumer
from kafkastate.legacy.common import FetchRequest, OffsetFetchRequest

pytestmark = pytest.mark.integration

Produce = Callable[[str, int, list[bytes]], None]

USAGE_SIMPLE_PRODUCER = """
from kafka import SimpleProducer, KafkaClient

# To send messages synchronously
kafka = KafkaClient('localhost:9092')
producer = SimpleProducer(kafka)

# Note that the application is responsible for encoding messages to type bytes
producer.send_messages(b'my-topic', b'some message')
producer.send_messages(b'my-topic', b'this method', b'is variadic')

# Send unicode message
producer.send_messages(b'my-topic', u'?'.encode('utf-8'))
"""

USAGE_ASYNC = """
# To send messages asynchronously
producer = SimpleProducer(kafka, async=True)
producer.send_messages(b'my-topic', b'async message')

# To wait for acknowledgements
# ACK_AFTER_LOCAL_WRITE : server will wait till the data is written to
# a local log before sending response
# ACK_AFTER_CLUSTER_COMMIT : server will block until the message is committed
# by all in sync replicas before sending a response
producer = SimpleProducer(kafka, async=False,
                          req_acks=SimpleProducer.ACK_AFTER_LOCAL_WRITE,
                          ack_timeout=2000,
                          sync_fail_on_error=False)

responses = producer.send_messages(b'my-topic', b'another message')
for r in responses:
    logging.info(r.offset)

# To send messages in batch. You can use any of the available
# producers for doing this. The following producer will collect
# messages in batch and send them to Kafka after 20 messages are
# collected or every 60 seconds
# Notes:
# * If the producer dies before the messages are sent, there will be losses
# * Call producer.stop() to send the messages and cleanup
producer = SimpleProducer(kafka, async=True,
                           batch_send_every_n=20,
                           batch_send_every_t=60)
"""

USAGE_KEYED = """
from kafka import (
    KafkaClient, KeyedProducer,
    Murmur2Partitioner, RoundRobinPartitioner)

kafka = KafkaClient('localhost:9092')

# HashedPartitioner is default (currently uses python hash())
producer = KeyedProducer(kafka)
producer.send_messages(b'my-topic', b'key1', b'some message')
producer.send_messages(b'my-topic', b'key2', b'this methode')

# Murmur2Partitioner attempts to mirror the java client hashing
producer = KeyedProducer(kafka, partitioner=Murmur2Partitioner)

# Or just produce round-robin (or just use SimpleProducer)
producer = KeyedProducer(kafka, partitioner=RoundRobinPartitioner)
"""

USAGE_KAFKA_CONSUMER = """
from kafka import KafkaConsumer

# To consume messages
consumer = KafkaConsumer('my-topic',
                         group_id='my_group',
                         bootstrap_servers=['localhost:9092'])
for message in consumer:
    # message value is raw byte string -- decode if necessary!
    # e.g., for unicode: `message.value.decode('utf-8')`
    print("%s:%d:%d: key=%s value=%s" % (message.topic, message.partition,
                                         message.offset, message.key,
                                         message.value))
"""

USAGE_KAFKA_CONSUMER_ADVANCED = (
    """
from kafka import KafkaConsumer

# more advanced consumer -- multiple topics w/ auto commit offset
# management
consumer = KafkaConsumer('topic1', 'topic2',
                         bootstrap_servers=['localhost:9092'],
                         group_id='my_consumer_group',
                         auto_commit_enable=True,
                         auto_commit_interval_ms=30 * 1000,
                         auto_offset_reset='smallest')

# Infinite iteration
for m in consumer:
    do_some_work(m)

    # Mark this message as fully consumed
    # so it can be included in the next commit
    #
    # **messages that are not marked w/ task_done currently do not commit!
    consumer.task_done(m)
""",
    """
# If auto_commit_enable is False, remember to commit() periodically
consumer.commit()
""",
    """
# Batch process interface
while True:
    for m in kafka.fetch_messages():
        process_message(m)
        consumer.task_done(m)
""",
)

USAGE_MULTIPROCESS = """
from kafka import KafkaClient, MultiProcessConsumer

kafka = KafkaClient('localhost:9092')

# This will split the number of partitions among two processes
consumer = MultiProcessConsumer(kafka, b'my-group', b'my-topic', num_procs=2)

# This will spawn processes such that each handles 2 partitions max
consumer = MultiProcessConsumer(kafka, b'my-group', b'my-topic',
                                partitions_per_proc=2)

for message in consumer:
    print(message)

for message in consumer.get_messages(count=5, block=True, timeout=4):
    print(message)
"""

USAGE_LOW_LEVEL = """
from kafka import KafkaClient, create_message
from kafka.protocol import KafkaProtocol
from kafka.common import ProduceRequest

kafka = KafkaClient('localhost:9092')

req = ProduceRequest(topic=b'my-topic', partition=1,
                     messages=[create_message(b'some message')])
resps = kafka.send_produce_request(payloads=[req], fail_on_error=True)
kafka.close()

resps[0].topic      # b'my-topic'
resps[0].partition  # 1
resps[0].error      # 0 (hopefully)
resps[0].offset      # offset of the first message sent in this request
"""

SET_TOPIC_PARTITIONS = """
kafka = KafkaConsumer()

# Consume topic1-all; topic2-partition2; topic3-partition0
kafka.set_topic_partitions("topic1", ("topic2", 2), {"topic3": 0})

# Consume topic1-0 starting at offset 12, and topic2-1 at offset 45
# using tuples --
kafka.set_topic_partitions(("topic1", 0, 12), ("topic2", 1, 45))

# using dict --
kafka.set_topic_partitions({ ("topic1", 0): 12, ("topic2", 1): 45 })
"""

OFFSET_COMMIT_CONTEXT = """
consumer = SimpleConsumer(client, group, topic, auto_commit=False)
consumer.provide_partition_info()
consumer.fetch_last_known_offsets()

while some_condition:
    with OffsetCommitContext(consumer) as context:
        messages = consumer.get_messages(count, block=False)

        for partition, message in messages:
            if can_process(message):
                context.mark(partition, message.offset)
            else:
                break

        if not context:
            sleep(delay)
"""


class Done(Exception):
    """Raised by the test's stand-ins to end an example's infinite loop."""


def adapt(code: str, bootstrap: str, topics: dict[str, str]) -> str:
    """The example as it runs on kafkastate.legacy: the import, the broker, the topics,
    and ``async=`` (a syntax error since Python 3.7) spelled ``async_send=``."""
    code = re.sub(r"\bfrom kafka import\b", "from kafkastate.legacy import", code)
    code = re.sub(r"\bfrom kafka\.", "from kafkastate.legacy.", code)
    code = code.replace("localhost:9092", bootstrap)
    code = code.replace("async=", "async_send=")
    for old, new in topics.items():
        code = code.replace(f"'{old}'", f"'{new}'").replace(f'"{old}"', f'"{new}"')
    return code


def run(code: str, namespace: dict[str, Any], *, until_done: bool = False) -> None:
    compiled = compile(code, "seed-004-example", "exec")
    if until_done:
        with pytest.raises(Done):
            exec(compiled, namespace)
    else:
        exec(compiled, namespace)


def fetch_values(client: KafkaClient, topic: str, partition: int = 0) -> list[bytes | None]:
    (resp,) = client.send_fetch_request(
        [FetchRequest(topic, partition, 0, 1 << 20)], max_wait_time=10, min_bytes=1
    )
    return [m.message.value for m in resp.messages]


@pytest.fixture
def names(new_topic: Callable[..., str]) -> Callable[..., dict[str, str]]:
    def make(*seed_names: str, partitions: int = 1) -> dict[str, str]:
        return {n: new_topic(partitions) for n in seed_names}

    return make


def test_simple_producer_and_async_mode(
    bootstrap: str, client: KafkaClient, names: Callable[..., dict[str, str]]
) -> None:
    topics = names("my-topic")
    ns: dict[str, Any] = {"logging": logging}
    run(adapt(USAGE_SIMPLE_PRODUCER, bootstrap, topics), ns)
    run(adapt(USAGE_ASYNC, bootstrap, topics), ns)
    assert ns["responses"][0].error == 0
    ns["producer"].send_messages(topics["my-topic"].encode(), b"batched")
    ns["producer"].stop()  # "Call producer.stop() to send the messages and cleanup"
    # The example rebinds `producer` without stopping the async one: like 0.9.5, it delivers
    # when it is collected. Collect now, in case a reference cycle delays its finaliser.
    gc.collect()
    values = fetch_values(client, topics["my-topic"])
    assert values[:4] == [b"some message", b"this method", b"is variadic", b"?"]
    assert sorted(v for v in values[4:] if v is not None) == sorted(
        [b"async message", b"another message", b"batched"]
    )


def test_keyed_producer(
    bootstrap: str, client: KafkaClient, names: Callable[..., dict[str, str]]
) -> None:
    topics = names("my-topic", partitions=2)
    ns: dict[str, Any] = {}
    run(adapt(USAGE_KEYED, bootstrap, topics), ns)
    ns["producer"].stop()
    got = fetch_values(client, topics["my-topic"], 0) + fetch_values(client, topics["my-topic"], 1)
    assert sorted(v for v in got if v is not None) == [b"some message", b"this methode"]


def test_kafka_consumer(
    bootstrap: str, names: Callable[..., dict[str, str]], produce: Produce
) -> None:
    topics = names("my-topic")
    seen: list[str] = []

    def fake_print(line: str) -> None:
        seen.append(line)
        if len(seen) == 2:
            raise Done

    ns: dict[str, Any] = {"print": fake_print}
    # The consumer starts at 'largest' (the default): produce once it is positioned.
    code = adapt(USAGE_KAFKA_CONSUMER, bootstrap, topics)
    head, loop = code.split("for message in consumer:")
    run(head, ns)
    produce(topics["my-topic"], 0, [b"v1", b"v2"])
    run("for message in consumer:" + loop, ns, until_done=True)
    assert seen == [
        f"{topics['my-topic']}:0:0: key=None value=b'v1'",
        f"{topics['my-topic']}:0:1: key=None value=b'v2'",
    ]
    ns["consumer"].close()


def test_kafka_consumer_advanced(
    bootstrap: str, client: KafkaClient, names: Callable[..., dict[str, str]], produce: Produce
) -> None:
    topics = names("topic1", "topic2")
    produce(topics["topic1"], 0, [b"a", b"b"])
    produce(topics["topic2"], 0, [b"c"])
    work: list[bytes] = []

    def do_some_work(m: Any) -> None:
        work.append(m.value)
        if len(work) == 3:
            raise Done

    ns: dict[str, Any] = {"do_some_work": do_some_work}
    infinite, commit, batch = (
        adapt(part, bootstrap, topics) for part in USAGE_KAFKA_CONSUMER_ADVANCED
    )
    run(infinite, ns, until_done=True)
    consumer = ns["consumer"]
    run(commit, ns)
    assert sorted(work) == [b"a", b"b", b"c"]
    # The loop ended inside do_some_work: the third message was not marked task_done.
    (c1,) = client.send_offset_fetch_request(
        "my_consumer_group", [OffsetFetchRequest(topics["topic1"], 0)]
    )
    (c2,) = client.send_offset_fetch_request(
        "my_consumer_group", [OffsetFetchRequest(topics["topic2"], 0)]
    )
    assert sorted([c1.offset, c2.offset]) in ([-1, 2], [1, 1])
    produce(topics["topic1"], 0, [b"d"])
    processed: list[bytes] = []

    def process_message(m: Any) -> None:
        processed.append(m.value)
        if m.value == b"d":
            raise Done

    ns.update(kafka=consumer, process_message=process_message)
    run(batch, ns, until_done=True)
    assert processed[-1] == b"d"
    consumer.close()


def test_multiprocess_consumer(
    bootstrap: str,
    names: Callable[..., dict[str, str]],
    produce: Produce,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    topics = names("my-topic", partitions=4)
    for p in range(4):
        produce(topics["my-topic"], p, [b"%d" % p])
    made: list[MultiProcessConsumer] = []

    class Tracked(MultiProcessConsumer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(kafkastate.legacy, "MultiProcessConsumer", Tracked)
    printed: list[Any] = []
    ns: dict[str, Any] = {"print": printed.append}
    try:
        run(adapt(USAGE_MULTIPROCESS, bootstrap, topics), ns)
    finally:
        for consumer in made:
            consumer.stop()
    assert [len(c.procs) for c in made] == [2, 2]
    assert sorted(m.message.value for m in printed) == [b"0", b"1", b"2", b"3"]


def test_low_level(
    bootstrap: str, client: KafkaClient, names: Callable[..., dict[str, str]]
) -> None:
    topics = names("my-topic", partitions=2)
    ns: dict[str, Any] = {}
    run(adapt(USAGE_LOW_LEVEL, bootstrap, topics), ns)
    resp = ns["resps"][0]
    assert (resp.topic, resp.partition, resp.error, resp.offset) == (
        topics["my-topic"].encode(),
        1,
        0,
        0,
    )
    assert fetch_values(client, topics["my-topic"], 1) == [b"some message"]


def test_set_topic_partitions(
    bootstrap: str, names: Callable[..., dict[str, str]], produce: Produce
) -> None:
    topics = names("topic1", "topic2", "topic3", partitions=3)
    produce(topics["topic1"], 0, [b"%d" % i for i in range(13)])
    produce(topics["topic2"], 1, [b"%d" % i for i in range(46)])
    # The example's KafkaConsumer() names no broker (0.9.5 raised there too): give one.
    code = adapt(SET_TOPIC_PARTITIONS, bootstrap, topics).replace(
        "KafkaConsumer()", f"KafkaConsumer(bootstrap_servers={bootstrap!r})"
    )
    ns: dict[str, Any] = {"KafkaConsumer": kafkastate.legacy.KafkaConsumer}
    run(code, ns)
    kafka = ns["kafka"]
    assert kafka.offsets("fetch") == {(topics["topic1"], 0): 12, (topics["topic2"], 1): 45}
    got: list[tuple[str, int, int]] = []
    while len(got) < 2:
        got += [(m.topic, m.partition, m.offset) for m in kafka.fetch_messages()]
    assert sorted(got) == sorted([(topics["topic1"], 0, 12), (topics["topic2"], 1, 45)])
    kafka.close()


def test_offset_commit_context(
    client: KafkaClient, names: Callable[..., dict[str, str]], produce: Produce
) -> None:
    topic = names("t")["t"]
    group = "g-" + uuid.uuid4().hex
    produce(topic, 0, [b"ok", b"ok", b"later"])
    rounds = iter([True] * 20 + [False])
    slept: list[float] = []

    class Condition:
        def __bool__(self) -> bool:
            return next(rounds)

    ns: dict[str, Any] = {
        "SimpleConsumer": kafkastate.legacy.SimpleConsumer,
        "OffsetCommitContext": kafkastate.legacy.context.OffsetCommitContext,
        "client": client,
        "group": group,
        "topic": topic,
        "count": 10,
        "some_condition": Condition(),
        "can_process": lambda m: m.message.value == b"ok",
        "sleep": slept.append,
        "delay": 0.01,
    }
    run(OFFSET_COMMIT_CONTEXT, ns)
    ns["consumer"].stop()
    (resp,) = client.send_offset_fetch_request(group, [OffsetFetchRequest(topic, 0)])
    assert resp.offset == 2  # both "ok" committed; "later" is retried each round
    assert slept  # rounds without a processable message sleep
