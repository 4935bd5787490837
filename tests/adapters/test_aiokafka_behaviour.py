"""aiokafka 0.14's rules on kafkastate's AIOKafkaConsumer / AIOKafkaProducer (issue 16):
what start() waits for, the exception types, what calls do after stop(), the deprecated
arguments and the unclosed-object warning. Each was checked against aiokafka 0.14 itself on
the same broker; the test pins kafkastate's side against the real broker."""

from __future__ import annotations

import asyncio
import gc
import uuid
import warnings
from typing import Any

import pytest

from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.asyncio import AIOKafkaConsumer, AIOKafkaProducer
from kafkastate.errors import (
    ConsumerStoppedError,
    IllegalOperation,
    IllegalStateError,
    KafkaConfigurationError,
    ProducerClosed,
)
from kafkastate.structs import TopicPartition
from tests.adapters.test_consumer import _produce, _topic

pytestmark = pytest.mark.integration


def test_start_waits_for_the_assignment_with_and_without_a_group(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    expected = [TopicPartition(topic, 0), TopicPartition(topic, 1)]

    async def main() -> None:
        for group in (f"g-{uuid.uuid4().hex[:8]}", None):
            consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group)
            await consumer.start()
            try:
                # right after start(), as aiokafka: no getmany needed first
                assert sorted(consumer.assignment()) == expected, group
                consumer.seek(expected[0], 0)
            finally:
                await consumer.stop()

    asyncio.run(main())


def test_assign_before_start_and_committed_of_an_unknown_topic(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    _produce(bootstrap, topic, 3, partitions=1)

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=f"g-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
        )
        consumer.assign([TopicPartition(topic, 0)])
        await consumer.start()
        try:
            assert consumer.assignment() == {TopicPartition(topic, 0)}
            missing = TopicPartition(f"missing-{uuid.uuid4().hex[:8]}", 0)
            # None at once (aiokafka): not a wait until request_timeout_ms
            assert await asyncio.wait_for(consumer.committed(missing), 10) is None
            record = await asyncio.wait_for(consumer.getone(), 30)
            assert record.offset == 0
        finally:
            await consumer.stop()

    asyncio.run(main())


def test_aiokafka_exception_types(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)

    async def main() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id="g")
        for kwargs in (
            {"topics": ["a"], "pattern": "^a"},
            {"topics": []},
            {"topics": "abc"},
            {"topics": ["a"], "listener": object()},
        ):
            with pytest.raises(TypeError):
                consumer.subscribe(**kwargs)
        with pytest.raises(ValueError, match="regex"):
            consumer.subscribe(pattern="(x")
        alone = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await alone.start()
        try:
            with pytest.raises(ValueError, match="offset"):  # the offset first
                alone.seek(TopicPartition("unassigned", 0), -5)
            with pytest.raises(IllegalStateError, match="not assigned"):
                alone.seek(TopicPartition("unassigned", 0), 5)
            for call in (alone.commit(), alone.committed(TopicPartition(topic, 0))):
                with pytest.raises(IllegalOperation, match="group_id"):
                    await call
        finally:
            await alone.stop()
        member = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="g2")
        await member.start()
        try:
            with pytest.raises(IllegalStateError):
                member.assign([TopicPartition(topic, 0)])
        finally:
            await member.stop()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await producer.start()
        try:
            with pytest.raises(TypeError):
                await producer.send(topic, value=123)  # type: ignore[arg-type]
            with pytest.raises(IllegalOperation):
                await producer.send_offsets_to_transaction({}, "g")
        finally:
            await producer.stop()

    asyncio.run(main())


def test_calls_after_stop(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)

    async def main() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await consumer.start()
        consumer.assign([TopicPartition(topic, 0)])
        many = asyncio.ensure_future(consumer.getmany(timeout_ms=30_000))
        one = asyncio.ensure_future(consumer.getone())
        await asyncio.sleep(0.2)
        await consumer.stop()
        assert await many == {}  # a pending getmany returns nothing
        with pytest.raises(ConsumerStoppedError):
            await one
        for later in (consumer.getone(), consumer.getmany()):
            with pytest.raises(ConsumerStoppedError):
                await later
        with pytest.raises(ConsumerStoppedError):
            async for _ in consumer:
                pass
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=0)
        await producer.start()
        assert await (await producer.send(topic, b"v")) is None  # acks=0: None
        await producer.stop()
        for call in (producer.send(topic, b"v"), producer.begin_transaction()):
            with pytest.raises(ProducerClosed):
                await call

    asyncio.run(main())


def test_deprecated_arguments_ssl_and_the_unclosed_warning(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with pytest.warns(DeprecationWarning, match="loop"):
            AIOKafkaProducer(bootstrap_servers=bootstrap, loop=loop)
        with pytest.warns(DeprecationWarning, match="api_version"):
            AIOKafkaConsumer(bootstrap_servers=bootstrap, api_version="2.0.0")
        with pytest.raises(KafkaConfigurationError, match="ssl_context is mandatory"):
            AIOKafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SSL")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await producer.start()
            del producer
            consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
            await consumer.start()
            del consumer
            gc.collect()
        unclosed = sorted(  # (their sockets may warn too, as in aiokafka: not counted)
            str(w.message).split(" <")[0]
            for w in caught
            if w.category is ResourceWarning and str(w.message).startswith("Unclosed AIOKafka")
        )
        assert unclosed == ["Unclosed AIOKafkaConsumer", "Unclosed AIOKafkaProducer"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            closed = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await closed.start()
            await closed.stop()
            del closed
            gc.collect()
        assert not [w for w in caught if w.category is ResourceWarning]

    asyncio.run(main())


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_unsubscribe_leaves_the_group_and_subscribe_joins_again(
    kafka_cluster: Any, protocol: str
) -> None:
    bootstrap = kafka_cluster.bootstrap
    first, second = _topic(bootstrap, partitions=2), _topic(bootstrap, partitions=1)
    _produce(bootstrap, first, 4, partitions=2)
    _produce(bootstrap, second, 3, partitions=1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    calls: list[tuple[str, list[TopicPartition]]] = []

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked: Any) -> None:
            calls.append(("revoked", sorted(revoked)))

        def on_partitions_assigned(self, assigned: Any) -> None:
            calls.append(("assigned", sorted(assigned)))

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            group_protocol=protocol,
        )
        consumer.subscribe([first], listener=Listener())
        await consumer.start()
        try:
            owned = [TopicPartition(first, 0), TopicPartition(first, 1)]
            assert sorted(consumer.assignment()) == owned
            got = await consumer.getmany(timeout_ms=10_000)
            assert sum(len(v) for v in got.values()) > 0
            consumer.unsubscribe()
            async with asyncio.timeout(30):
                while consumer.assignment():
                    await consumer.getmany(timeout_ms=100)
            assert consumer.subscription() == set()
            assert ("revoked", owned) in calls  # revoked (and auto-committed) before leaving
            # it left: a newcomer gets both partitions at once, not after the session timeout
            other = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                     group_protocol=protocol, enable_auto_commit=False)  # fmt: skip
            other.subscribe([first])
            async with asyncio.timeout(20):  # well inside the 45 s session timeout
                await other.start()
                while sorted(other.assignment()) != owned:  # (a leader that saw no
                    await other.getmany(timeout_ms=100)  # partition count yet rejoins)
            await other.stop()
            consumer.subscribe([second], listener=Listener())
            records: list[Any] = []
            async with asyncio.timeout(30):
                while len(records) < 3:
                    for batch in (await consumer.getmany(timeout_ms=500)).values():
                        records.extend(batch)
            assert consumer.assignment() == {TopicPartition(second, 0)}
            assert {r.topic for r in records} == {second}
            assert calls[-1] == ("assigned", [TopicPartition(second, 0)])
        finally:
            await consumer.stop()
        # the first topic's consumed offsets were committed before the member left
        witness = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
        await witness.start()
        try:
            committed = [await witness.committed(tp) for tp in owned]
            assert sum(c or 0 for c in committed) == sum(len(v) for v in got.values())
        finally:
            await witness.stop()

    asyncio.run(main())
