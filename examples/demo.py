"""kafkastate demo: a real Kafka broker, our wire codec, our record batches.

Run with ``./ks demo``. It starts a local Apache Kafka broker through the harness (or uses
``KAFKASTATE_BOOTSTRAP`` if set), then:

1. connects with the sans-IO ``BrokerConnection`` driven by the blocking adapter and shows
   the negotiated API versions;
2. authenticates over SASL/SCRAM-SHA-512 on the broker's SASL listener;
3. creates a topic, produces one record batch per compression codec (encoded by
   kafkastate's own record-batch code) and fetches everything back, decoding it;
4. produces keyed records to a 3-partition topic through the three producer APIs --
   asyncio (``AIOKafkaProducer``, aiokafka's interface), trio (``open_producer``) and
   blocking (``KafkaProducer``, kafka-python's interface), idempotent with lz4 -- and
   consumes them back with ``KafkaConsumer`` (kafka-python's) and trio's
   ``open_consumer``;
5. deletes the topics and stops the broker.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid

import trio

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.anyio import Producer
from kafkastate.asyncio import AIOKafkaProducer
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.protocol.compression import Compression
from kafkastate.core.protocol.records import RecordBatchBuilder, iter_batches
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.core.protocol.versions import ApiKey, api_name
from kafkastate.sync import KafkaConsumer, KafkaProducer
from kafkastate.testing import KafkaCluster
from kafkastate.trio import open_consumer as trio_open_consumer
from kafkastate.trio import open_producer as trio_open_producer


def main() -> int:
    print("starting Kafka (first run downloads the broker jars with Maven)...", flush=True)
    started = time.monotonic()
    with KafkaCluster.resolve(sasl=True) as cluster:
        print(f"broker ready at {cluster.bootstrap} in {time.monotonic() - started:.1f} s")
        run(cluster)
    print("broker stopped; demo done")
    return 0


def run(cluster: KafkaCluster) -> None:
    topic = f"demo-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(cluster.bootstrap) as admin:
        versions = admin.versions
        keys = (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.CREATE_TOPICS)
        print("negotiated:", ", ".join(f"{api_name(k)} v{versions.version_for(k)}" for k in keys))

        if cluster.sasl is not None and cluster.sasl_bootstrap is not None:
            scram = ConnectionConfig(
                sasl_mechanism="SCRAM-SHA-512",
                sasl_username=cluster.sasl.username,
                sasl_password=cluster.sasl.password,
            )
            with BlockingAdmin(cluster.sasl_bootstrap, config=scram) as secure:
                brokers = secure.metadata(None).brokers
                print(f"SASL/SCRAM-SHA-512 as {cluster.sasl.username!r}: {len(brokers)} broker(s)")

        admin.create_topics([NewTopic(name=topic, num_partitions=1)])
        print(f"created topic {topic!r}")

        now_ms = int(time.time() * 1000)
        for codec in Compression:
            builder = RecordBatchBuilder(compression=codec)
            for i in range(3):
                builder.append(
                    now_ms,
                    key=f"key-{i}".encode(),
                    value=f"{codec.name.lower()} record {i}".encode() * 4,
                    headers=[("codec", codec.name.encode())],
                )
            base = admin.produce(topic, 0, builder.build())
            print(f"produced 3 records with {codec.name:<6} at offset {base}")

        offset, seen = 0, 0
        while seen < 3 * len(Compression):
            data, high_watermark = admin.fetch(topic, 0, offset)
            for batch in iter_batches(data):
                for record in batch:
                    assert record.value is not None
                    print(
                        f"  offset {record.offset:2d} {batch.compression.name:<6} "
                        f"{record.key!r}: {record.value[:24]!r}... headers={record.headers}"
                    )
                    seen += 1
                offset = batch.next_offset
        print(f"fetched {seen} records back (high watermark {high_watermark})")

        produced = f"{topic}-apis"
        admin.create_topics([NewTopic(name=produced, num_partitions=3)])
        print(f"created topic {produced!r} with 3 partitions")
        produce_with_every_api(cluster.bootstrap, produced)
        consume_with_every_api(cluster.bootstrap, produced, expected=12)
        admin.delete_topics([topic, produced])
        print(f"deleted topics {topic!r} and {produced!r}")


def produce_with_every_api(bootstrap: str, topic: str) -> None:
    """Three runtimes, one producer core: the same keys land in the same partitions."""
    keys = [f"user-{n}" for n in range(4)]

    async def with_asyncio() -> None:
        async with AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            compression_type="lz4",
            key_serializer=str.encode,
            value_serializer=str.encode,
        ) as producer:
            for key in keys:
                meta = await producer.send_and_wait(topic, f"hello from asyncio to {key}", key)
                print(f"asyncio: {key} -> partition {meta.partition} offset {meta.offset}")

    async def with_trio() -> None:
        async with (
            trio_open_producer(bootstrap, compression_type="lz4") as producer,
            trio.open_nursery() as nursery,  # four sends in flight at once
        ):
            for key in keys:
                nursery.start_soon(send_one, producer, key)

    async def send_one(producer: Producer, key: str) -> None:
        value = f"hello from trio to {key}".encode()
        meta = await producer.send(topic, value, key.encode())
        print(f"trio:    {key} -> partition {meta.partition} offset {meta.offset}")

    asyncio.run(with_asyncio())
    trio.run(with_trio)
    with KafkaProducer(bootstrap_servers=bootstrap, acks="all", compression_type="lz4") as producer:
        futures = [(key, producer.send(topic, b"hello from sync", key.encode())) for key in keys]
        for key, future in futures:
            meta = future.get(timeout=30)
            print(f"sync:    {key} -> partition {meta.partition} offset {meta.offset}")


def consume_with_every_api(bootstrap: str, topic: str, *, expected: int) -> None:
    """Read the records back with the blocking consumer and with trio's."""
    by_partition: dict[int, list[str]] = {}
    with KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        key_deserializer=lambda k: k.decode(),
        consumer_timeout_ms=3000,
    ) as consumer:
        for record in consumer:  # stops 3 s after the last record
            by_partition.setdefault(record.partition, []).append(record.key)
    for partition, keys in sorted(by_partition.items()):
        print(f"  partition {partition}: {' '.join(keys)}")
    total = sum(len(keys) for keys in by_partition.values())
    print(f"KafkaConsumer read {total} records: each key in one partition, in send order")

    async def with_trio() -> int:
        count = 0
        async with trio_open_consumer(
            topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            with trio.move_on_after(20):
                async for _record in consumer:
                    count += 1
                    if count == expected:
                        break
        return count

    print(f"trio open_consumer read {trio.run(with_trio)} records")


if __name__ == "__main__":
    sys.exit(main())
