"""kafkastate demo: a real Kafka broker, our wire codec, our record batches.

Run with ``./ks demo``. It starts a local Apache Kafka broker through the harness (or uses
``KAFKASTATE_BOOTSTRAP`` if set), then:

1. connects with the sans-IO ``BrokerConnection`` driven by the blocking adapter and shows
   the negotiated API versions;
2. authenticates over SASL/SCRAM-SHA-512 on the broker's SASL listener;
3. creates a topic, produces one record batch per compression codec (encoded by
   kafkastate's own record-batch code) and fetches everything back, decoding it;
4. deletes the topic and stops the broker.
"""

from __future__ import annotations

import sys
import time
import uuid

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.protocol.compression import Compression
from kafkastate.core.protocol.records import RecordBatchBuilder, iter_batches
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.core.protocol.versions import ApiKey, api_name
from kafkastate.testing import KafkaCluster


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
        admin.delete_topics([topic])
        print(f"deleted topic {topic!r}")


if __name__ == "__main__":
    sys.exit(main())
