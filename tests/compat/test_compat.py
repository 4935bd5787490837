"""Client-visible behaviour on every supported broker generation (issue 25).

One broker of the version ``KAFKASTATE_COMPAT_VERSION`` names (default 3.9.1; fixture
``compat_cluster`` in tests/conftest.py) runs the same cases: records per codec, a classic
group that commits and resumes, KIP-848 where the broker has it (and its clear error where
not), the idempotent producer, transactions (commit, abort, timeout recovery), the offsets
APIs, admin calls whose APIs came late, and SASL/SSL. The default suite runs the short set
against 3.9.1 or 2.8.2 (by the day, tests/compat/versions.py); ``nox -s compat`` runs
everything (``KAFKASTATE_COMPAT_FULL=1``) against each version in turn and records each
``compat_row``'s outcome for docs/compatibility.md (tests/compat/results.py). A case that
finds the broker lacking its feature checks the client's error and records
``broker_lacks`` (a footnote key of tools/gen_compat_table.py). Written with the blocking
adapter: every runtime drives the same core machines.
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
row = pytest.mark.compat_row  # the table row of docs/compatibility.md a case stands for
Record = Any  # pytest's record_property fixture: (name, value) -> None
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


@row("produce/consume, gzip, snappy, lz4, zstd")
@pytest.mark.parametrize("codec", CODECS)
def test_produce_and_consume_per_codec(compat_cluster: KafkaCluster, codec: str) -> None:
    topic = new_topic(compat_cluster)
    values = [f"{codec}-{i}".encode() * 20 for i in range(50)]
    produce(compat_cluster, topic, values, compression_type=codec)
    assert read_all(compat_cluster, topic, len(values)) == values


@row("idempotent producer")
def test_idempotent_producer_writes_each_record_once_in_order(
    compat_cluster: KafkaCluster,
) -> None:
    topic = new_topic(compat_cluster)
    values = [str(i).encode() for i in range(200)]
    produce(compat_cluster, topic, values, enable_idempotence=True, acks="all")
    assert read_all(compat_cluster, topic, len(values)) == values


# -- groups --------------------------------------------------------------------------------


@row("classic group: commit, a new member resumes")
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


@row('`group_protocol="consumer"` (KIP-848)')
def test_kip848_consumer_group_or_its_clear_error(
    compat_cluster: KafkaCluster, record_property: Record
) -> None:
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
            record_property("broker_lacks", "consumer-group-heartbeat")
        else:
            record_property("broker_lacks", "kip848-preview-off")
    finally:
        consumer.close(autocommit=False)


# -- transactions --------------------------------------------------------------------------


@row("transactions: commit, abort, `read_committed`")
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


@row("transaction timeout: `abort_transaction()` goes on")
def test_transaction_timeout_recovers_or_fails_with_the_next_step(
    compat_cluster: KafkaCluster, record_property: Record
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
            record_property("broker_lacks", "transaction-timeout-recovery")
    finally:
        producer.close()
    if not expected:  # the documented next step: a new producer, same transactional id
        commit_one(compat_cluster.bootstrap, f"tid-{topic}", topic, b"next")
    assert read_all(compat_cluster, topic, 1, isolation_level="read_committed") == [b"next"]


# -- offsets APIs --------------------------------------------------------------------------


@row("`offsets_for_times`, `seek_to_end`, begin/end offsets")
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


def _admin(cluster: KafkaCluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap)


def _broker(cluster: KafkaCluster) -> tuple[int, int]:
    assert cluster.profile is not None
    return cluster.profile.major_minor


@row("admin: `describe_transactions`, `list_transactions`")
def test_describe_transactions_or_its_clear_error(
    compat_cluster: KafkaCluster, record_property: Record
) -> None:
    """DescribeTransactions and ListTransactions came with Kafka 3.0 (KIP-664)."""
    topic = new_topic(compat_cluster)
    tid = f"tid-{topic}"
    commit_one(compat_cluster.bootstrap, tid, topic, b"one")
    with _admin(compat_cluster) as admin:
        if _broker(compat_cluster) >= (3, 0):
            assert admin.describe_transactions([tid])[tid].state == "CompleteCommit"
            listed = admin.list_transactions()
            assert tid in {t.transactional_id for ts in listed.values() for t in ts}
            return
        with pytest.raises(UnsupportedVersionError, match="describe_transactions") as info:
            admin.describe_transactions([tid])
        assert info.value.api_name == "DescribeTransactions"
        with pytest.raises(UnsupportedVersionError, match="list_transactions"):
            admin.list_transactions()
    record_property("broker_lacks", "describe-transactions")


@row("admin: `describe_topic_partitions` (paged)")
def test_describe_topic_partitions_or_its_clear_error(
    compat_cluster: KafkaCluster, record_property: Record
) -> None:
    """DescribeTopicPartitions came with Kafka 3.7 (KIP-966)."""
    topic = new_topic(compat_cluster, partitions=3)
    with _admin(compat_cluster) as admin:
        if _broker(compat_cluster) >= (3, 7):
            page = admin.describe_topic_partitions([topic], response_partition_limit=2)
            assert page["next_cursor"] == {"topic_name": topic, "partition_index": 2}
            return
        with pytest.raises(UnsupportedVersionError, match="describe_topic_partitions") as info:
            admin.describe_topic_partitions([topic])
        assert info.value.api_name == "DescribeTopicPartitions"
    record_property("broker_lacks", "describe-topic-partitions")


@row("admin: `list_transactions(transactional_id_pattern=...)`")
def test_list_transactions_pattern_or_its_clear_error(
    compat_cluster: KafkaCluster, record_property: Record
) -> None:
    """ListTransactions' transactional-id pattern came with Kafka 4.1."""
    with _admin(compat_cluster) as admin:
        if _broker(compat_cluster) >= (4, 1):
            assert isinstance(admin.list_transactions(transactional_id_pattern="^none$"), dict)
            return
        with pytest.raises(UnsupportedVersionError, match="list_transactions"):
            admin.list_transactions(transactional_id_pattern="^none$")
    record_property("broker_lacks", "list-transactions-filter")


@row("admin: `describe_features`, `describe_user_scram_credentials`")
def test_admin_features_and_scram_credentials(compat_cluster: KafkaCluster) -> None:
    with _admin(compat_cluster) as admin:
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


SASL_ROW = row("SASL_PLAINTEXT: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512")
SSL_ROW = row("SSL (server certificate)")


@full_only
@pytest.mark.parametrize(
    "listener",
    [
        *(pytest.param(m, marks=SASL_ROW) for m in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")),
        pytest.param("SSL", marks=SSL_ROW),
    ],
)
def test_sasl_mechanisms_and_ssl(compat_cluster: KafkaCluster, listener: str) -> None:
    topic = new_topic(compat_cluster)
    produce(compat_cluster, topic, [b"secret"])
    got = read_all(compat_cluster, topic, 1, **_secured(compat_cluster, listener))
    assert got == [b"secret"]
