"""Client-visible behaviour on every supported broker generation (issue 25).

One broker of the version ``KAFKASTATE_COMPAT_VERSION`` names (default 3.9.1; fixture
``compat_cluster`` in tests/conftest.py) runs the same cases: records per codec, a classic
group that commits and resumes, KIP-848 where the broker has it (and its clear error where
not), the idempotent producer, transactions (commit, abort, timeout recovery), the offsets
APIs, and SASL/SSL. The default suite runs the short set against 3.9.1; ``nox -s compat``
runs everything (``KAFKASTATE_COMPAT_FULL=1``) against each version in turn. Written with the
blocking adapter: every runtime drives the same core machines.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin, NewTopic
from kafkastate.errors import (
    ProducerFencedError,
    TransactionTimedOutError,
    UnsupportedVersionError,
)
from kafkastate.structs import TopicPartition
from kafkastate.sync import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafkastate.testing import KafkaCluster
from tests._support.txn import commit_one
from tests.conftest import COMPAT_FULL

pytestmark = [pytest.mark.compat, pytest.mark.integration]

full_only = pytest.mark.compat_full  # deselected from the default suite's short set
# the default suite checks zstd only (the newest codec, Kafka 2.1+); the full run all four
CODECS = ("gzip", "snappy", "lz4", "zstd") if COMPAT_FULL else ("zstd",)


def new_topic(cluster: KafkaCluster, partitions: int = 1) -> str:
    name = f"compat-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions)])
    return name


def produce(cluster: KafkaCluster, topic: str, values: list[bytes], **kw: Any) -> None:
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=5, **kw)
    try:
        for value in values:
            producer.send(topic, value, partition=0)
        producer.flush(timeout=30)
    finally:
        producer.close()


def read_all(
    cluster: KafkaCluster, topic: str, count: int, *, deadline: float = 30.0, **kw: Any
) -> list[bytes]:
    """Up to ``count`` values of ``topic`` partition 0 from the beginning (assign, no group)."""
    kw.setdefault("bootstrap_servers", cluster.bootstrap)
    consumer = KafkaConsumer(auto_offset_reset="earliest", enable_auto_commit=False, **kw)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        return drain(consumer, count, deadline=deadline)
    finally:
        consumer.close()


def drain(consumer: KafkaConsumer, count: int, *, deadline: float = 30.0) -> list[bytes]:
    out: list[bytes] = []
    end = time.monotonic() + deadline
    while len(out) < count and time.monotonic() < end:
        for records in consumer.poll(timeout_ms=500).values():
            out += [r.value for r in records if r.value is not None]
    return out


# -- records -------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_per_codec(compat_cluster: KafkaCluster, codec: str) -> None:
    topic = new_topic(compat_cluster)
    values = [f"{codec}-{i}".encode() * 20 for i in range(50)]
    produce(compat_cluster, topic, values, compression_type=codec)
    assert read_all(compat_cluster, topic, len(values)) == values


def test_idempotent_producer_writes_each_record_once_in_order(
    compat_cluster: KafkaCluster,
) -> None:
    topic = new_topic(compat_cluster)
    values = [str(i).encode() for i in range(200)]
    produce(compat_cluster, topic, values, enable_idempotence=True, acks="all")
    assert read_all(compat_cluster, topic, len(values)) == values


# -- groups --------------------------------------------------------------------------------


def test_classic_group_commits_and_a_new_member_resumes(compat_cluster: KafkaCluster) -> None:
    topic = new_topic(compat_cluster)
    group = f"g-{topic}"
    produce(compat_cluster, topic, [str(i).encode() for i in range(10)])

    def member() -> KafkaConsumer:
        return KafkaConsumer(
            topic,
            bootstrap_servers=compat_cluster.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_records=4,
        )

    first = member()
    try:
        seen = drain(first, 4)
        assert seen[:4] == [b"0", b"1", b"2", b"3"]
        first.commit({TopicPartition(topic, 0): 4})
    finally:
        first.close(autocommit=False)
    second = member()
    try:
        rest = drain(second, 6)
        assert rest == [str(i).encode() for i in range(4, 10)]
    finally:
        second.close(autocommit=False)


def test_kip848_consumer_group_or_its_clear_error(compat_cluster: KafkaCluster) -> None:
    """``group_protocol="consumer"``: it works where the broker serves KIP-848 (Kafka 4.0+),
    and elsewhere the first poll raises UnsupportedVersionError at once (issue 25: it used
    to look for the coordinator again for ever)."""
    topic = new_topic(compat_cluster)
    produce(compat_cluster, topic, [b"a", b"b", b"c"])
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=compat_cluster.bootstrap,
        group_id=f"g848-{topic}",
        group_protocol="consumer",
        auto_offset_reset="earliest",
    )
    try:
        assert compat_cluster.profile is not None
        if compat_cluster.profile.consumer_protocol:
            assert drain(consumer, 3) == [b"a", b"b", b"c"]
            return
        started = time.monotonic()
        with pytest.raises(UnsupportedVersionError) as info:
            while time.monotonic() - started < 30:
                consumer.poll(timeout_ms=500)
        assert time.monotonic() - started < 15
        message = str(info.value)
        assert "ConsumerGroupHeartbeat" in message, message
        if compat_cluster.profile.major_minor < (3, 7):  # the broker lacks the API
            assert "group_protocol='consumer' (KIP-848)" in message, message
            assert "broker node" in message and "group_protocol='classic'" in message
    finally:
        consumer.close(autocommit=False)


# -- transactions --------------------------------------------------------------------------


def test_transactions_commit_and_abort_under_read_committed(
    compat_cluster: KafkaCluster,
) -> None:
    topic = new_topic(compat_cluster)
    producer = KafkaProducer(
        bootstrap_servers=compat_cluster.bootstrap,
        transactional_id=f"tid-{topic}",
        linger_ms=5,
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kept", partition=0).get(timeout=30)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"dropped", partition=0).get(timeout=30)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"kept-too", partition=0).get(timeout=30)
        producer.commit_transaction()
    finally:
        producer.close()
    committed = read_all(compat_cluster, topic, 2, isolation_level="read_committed")
    assert committed == [b"kept", b"kept-too"]
    raw = read_all(compat_cluster, topic, 3, isolation_level="read_uncommitted")
    assert raw == [b"kept", b"dropped", b"kept-too"]


def test_transaction_timeout_recovers_or_fails_with_the_next_step(
    compat_cluster: KafkaCluster,
) -> None:
    """After the coordinator aborted a transaction past transaction_timeout_ms the producer
    sees TransactionTimedOutError; abort_transaction() then re-initialises it on Kafka 4.0+
    (KIP-588) and fails with an UnsupportedVersionError naming the next step on older
    brokers -- never a ProducerFencedError for a fencing that did not happen (issue 25)."""
    topic = new_topic(compat_cluster)
    producer = KafkaProducer(
        bootstrap_servers=compat_cluster.bootstrap,
        transactional_id=f"tid-{topic}",
        transaction_timeout_ms=1000,
        linger_ms=5,
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"late", partition=0).get(timeout=30)
        time.sleep(3.0)  # the coordinator aborts it (cleanup interval 0.5 s)
        with pytest.raises(TransactionTimedOutError):
            producer.send(topic, b"later", partition=0).get(timeout=30)
            producer.commit_transaction()
        assert compat_cluster.profile is not None
        if compat_cluster.profile.major_minor >= (4, 0):
            producer.abort_transaction()
            producer.begin_transaction()
            producer.send(topic, b"next", partition=0).get(timeout=30)
            producer.commit_transaction()
            expected = [b"next"]
        else:
            with pytest.raises(UnsupportedVersionError) as info:
                producer.abort_transaction()
            error = info.value
            assert not isinstance(error, ProducerFencedError)
            assert error.feature == "recovering from a transaction timeout (KIP-588)"
            assert "create a new one with the same transactional_id" in str(error)
            with pytest.raises(UnsupportedVersionError):
                producer.begin_transaction()
            expected = []
    finally:
        producer.close()
    if not expected:  # the documented next step: a new producer, same transactional id
        commit_one(compat_cluster.bootstrap, f"tid-{topic}", topic, b"next")
    assert read_all(compat_cluster, topic, 1, isolation_level="read_committed") == [b"next"]


# -- offsets APIs --------------------------------------------------------------------------


def test_offsets_for_times_seek_to_end_and_end_offsets(compat_cluster: KafkaCluster) -> None:
    topic = new_topic(compat_cluster)
    produce(compat_cluster, topic, [b"a", b"b"])
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce(compat_cluster, topic, [b"c"])
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=compat_cluster.bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        found = consumer.offsets_for_times({tp: middle})
        assert found[tp] is not None and found[tp].offset == 2
        assert consumer.end_offsets([tp]) == {tp: 3}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        consumer.seek_to_end(tp)
        assert consumer.position(tp) == 3
        produce(compat_cluster, topic, [b"d"])
        assert drain(consumer, 1) == [b"d"]
    finally:
        consumer.close()


# -- admin operator calls --------------------------------------------------------------------


def test_admin_operator_calls_or_the_operation_named_in_their_error(
    compat_cluster: KafkaCluster,
) -> None:
    """The admin calls whose APIs came late work where the broker has them, and elsewhere
    raise UnsupportedVersionError naming the operation (issue 18): DescribeTopicPartitions
    (3.7), ListTransactions' pattern filter (4.1)."""
    topic = new_topic(compat_cluster, partitions=3)
    assert compat_cluster.profile is not None
    version = compat_cluster.profile.major_minor
    with KafkaAdminClient(bootstrap_servers=compat_cluster.bootstrap) as admin:
        if version >= (3, 7):
            page = admin.describe_topic_partitions([topic], response_partition_limit=2)
            assert page["next_cursor"] == {"topic_name": topic, "partition_index": 2}
        else:
            with pytest.raises(UnsupportedVersionError, match="describe_topic_partitions"):
                admin.describe_topic_partitions([topic])
        if version >= (4, 1):
            assert isinstance(admin.list_transactions(transactional_id_pattern="^none$"), dict)
        else:
            with pytest.raises(UnsupportedVersionError, match="list_transactions"):
                admin.list_transactions(transactional_id_pattern="^none$")
        features = admin.describe_features()
        assert isinstance(features["finalized_features"], dict)
        assert isinstance(admin.describe_user_scram_credentials(), dict)


# -- security ------------------------------------------------------------------------------


def _secured(cluster: KafkaCluster, listener: str) -> dict[str, Any]:
    """Consumer options for the SSL listener or a SASL mechanism on SASL_PLAINTEXT."""
    if listener == "SSL":
        assert cluster.ssl_bootstrap is not None
        return {
            "bootstrap_servers": cluster.ssl_bootstrap,
            "security_protocol": "SSL",
            "ssl_context": cluster.ssl_context(),
        }
    assert cluster.sasl is not None and cluster.sasl_bootstrap is not None
    return {
        "bootstrap_servers": cluster.sasl_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": listener,
        "sasl_plain_username": cluster.sasl.username,
        "sasl_plain_password": cluster.sasl.password,
    }


@full_only
@pytest.mark.parametrize("listener", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "SSL"])
def test_sasl_mechanisms_and_ssl(compat_cluster: KafkaCluster, listener: str) -> None:
    topic = new_topic(compat_cluster)
    produce(compat_cluster, topic, [b"secret"])
    got = read_all(compat_cluster, topic, 1, **_secured(compat_cluster, listener))
    assert got == [b"secret"]
