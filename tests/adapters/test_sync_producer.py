"""kafkastate.sync.KafkaProducer (kafka-python's API over one IO thread) against real Kafka;
records are read back with kafka-python's own consumer."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafkastate.adapters.blocking import BlockingAdmin
from kafkastate.core.producer import default_partition
from kafkastate.core.protocol.requests import NewTopic
from kafkastate.errors import (
    AuthenticationFailedError,
    IllegalStateError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageTooLargeError,
    NoBrokersAvailable,
)
from kafkastate.sync import (
    FutureRecordMetadata,
    KafkaConsumer,
    KafkaProducer,
    RecordMetadata,
    TopicPartition,
)
from tests._support.buffer import send_until_refused

kafka = pytest.importorskip("kafka")

from tests._support.readback import consume  # noqa: E402 (after the importorskip)

FAST: dict[str, Any] = {"reconnect_backoff_max_ms": 500, "request_timeout_ms": 10000}


def _io_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kafkastate-producer-io")]


@pytest.fixture(autouse=True)
def _no_thread_left() -> Iterator[None]:
    before = set(_io_threads())
    yield
    deadline = time.monotonic() + 5
    while set(_io_threads()) - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert set(_io_threads()) - before == set()


def _topic(bootstrap: str, partitions: int = 3, **configs: str) -> str:
    name = f"sync-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap) as admin:
        admin.create_topics([NewTopic(name=name, num_partitions=partitions, configs=configs)])
    return name


# --------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"acks": 2}, "acks"),
        ({"acks": True}, "acks"),
        ({"compression_type": "brotli"}, "compression_type"),
        ({"linger_ms": -1}, "linger_ms"),
        ({"batch_size": "big"}, "batch_size"),
        ({"buffer_memory": 0}, "buffer_memory"),
        ({"max_request_size": 0}, "max_request_size"),
        ({"max_block_ms": -5}, "max_block_ms"),
        ({"retries": -1}, "retries"),
        ({"request_timeout_ms": 0}, "request_timeout_ms"),
        ({"delivery_timeout_ms": 1000, "request_timeout_ms": 5000}, "delivery_timeout_ms"),
        ({"enable_idempotence": "yes"}, "enable_idempotence"),
        ({"enable_idempotence": True, "acks": 1}, "acks"),
        ({"max_in_flight_requests_per_connection": 0}, "max_in_flight_requests_per_connection"),
        ({"security_protocol": "TLS"}, "security_protocol"),
        ({"ssl_context": "ctx"}, "ssl_context"),
        ({"security_protocol": "SASL_PLAINTEXT"}, "sasl_mechanism"),
        ({"reconnect_backoff_ms": 0}, "reconnect_backoff_ms"),
        ({"metadata_max_age_ms": -1}, "metadata_max_age_ms"),
        ({"connections_max_idle_ms": 0}, "connections_max_idle_ms"),
        ({"key_serializer": 42}, "key_serializer"),
        ({"partitioner": "murmur"}, "partitioner"),
        ({"transactional_id": ""}, "transactional_id"),
        ({"transactional_id": "tx", "enable_idempotence": False}, "transactional_id"),
        ({"transactional_id": "tx", "acks": 1}, "acks"),
        ({"transaction_timeout_ms": 0}, "transaction_timeout_ms"),
        ({"socket_options": []}, "socket_options"),
        ({"bootstrap_servers": 7}, "bootstrap_servers"),
    ],
)
def test_bad_option_names_it(options: dict[str, Any], named: str) -> None:
    with pytest.raises(KafkaConfigurationError, match=named):
        KafkaProducer(**options)


def test_unknown_option_is_unrecognized_as_in_kafka_python() -> None:
    with pytest.raises(KafkaConfigurationError, match=r"Unrecognized configs: \{'linger_msec'\}"):
        KafkaProducer(linger_msec=5)


def test_no_broker_fails_the_constructor_like_kafka_python() -> None:
    before = len(_io_threads())
    started = time.monotonic()
    with pytest.raises(NoBrokersAvailable, match=r"127\.0\.0\.1:1"):
        KafkaProducer(bootstrap_servers="127.0.0.1:1", api_version_auto_timeout_ms=300, **FAST)
    assert 0.25 < time.monotonic() - started < 5
    assert issubclass(NoBrokersAvailable, KafkaConnectionError)
    deadline = time.monotonic() + 5
    while len(_io_threads()) > before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(_io_threads()) == before  # the IO thread did not leak


def test_close_twice_and_send_after_close_without_broker() -> None:
    # An explicit api_version skips the bootstrap wait, as in kafka-python.
    producer = KafkaProducer(bootstrap_servers="127.0.0.1:1", api_version=(4, 0), **FAST)
    assert len(_io_threads()) >= 1
    producer.close(timeout=5)
    producer.close()
    with pytest.raises(IllegalStateError):
        producer.send("t", b"v")
    with pytest.raises(IllegalStateError):
        producer.partitions_for("t")
    assert producer.metrics()["producer-metrics"]["record-send-total"] == 0


def test_send_validates_arguments() -> None:
    with KafkaProducer(bootstrap_servers="127.0.0.1:1", api_version=(4, 0), **FAST) as producer:
        with pytest.raises(KafkaConfigurationError, match="key or value"):
            producer.send("t")
        with pytest.raises(TypeError, match="headers"):
            producer.send("t", b"v", headers=[("h", "not bytes")])  # type: ignore[list-item]
        with pytest.raises(TypeError, match="serialized value"):
            producer.send("t", "a str without a serializer")
        with pytest.raises(KafkaConfigurationError, match="partition"):
            producer.send("t", b"v", partition=-1)


# ----------------------------------------------------------------------- with a broker


def test_produce_keyed_and_unkeyed_read_back(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap)
    n = 60
    with KafkaProducer(
        bootstrap_servers=bootstrap,
        key_serializer=str.encode,
        value_serializer=lambda v: v.encode(),
        linger_ms=5,
        **FAST,
    ) as producer:
        assert producer.partitions_for(topic) == {0, 1, 2}
        futures = []
        for i in range(n):
            key = f"k{i % 7}" if i % 2 else None
            headers = [("i", str(i).encode())]
            futures.append(producer.send(topic, f"v{i}", key=key, headers=headers))
        metas = [f.get(timeout=30) for f in futures]
        counters = producer.metrics()["producer-metrics"]
    assert counters["record-send-total"] >= n  # per attempt: a retried batch counts again
    assert counters["record-ack-total"] == n
    assert counters["record-error-total"] == 0
    assert counters["buffer-used-bytes"] == 0
    for i, (f, meta) in enumerate(zip(futures, metas, strict=True)):
        assert f.is_done and f.succeeded() and not f.failed()
        assert isinstance(meta, RecordMetadata)
        assert meta.topic == topic and meta.topic_partition == TopicPartition(topic, meta.partition)
        assert meta.topic_partition == kafka.TopicPartition(topic, meta.partition)
        assert meta.offset >= 0 and meta.timestamp > 0
        assert meta.serialized_value_size == len(f"v{i}")
        assert meta.serialized_key_size == (len(f"k{i % 7}") if i % 2 else -1)
        assert meta.serialized_header_size == 1 + len(str(i))
    records = consume(bootstrap, topic, n)
    assert len(records) == n
    where = {(r.partition, r.offset): r for r in records}
    for i, meta in enumerate(metas):
        record = where[(meta.partition, meta.offset)]
        assert record.value == f"v{i}".encode()
        assert record.timestamp == meta.timestamp
        assert record.headers == [("i", str(i).encode())]
        if record.key is not None:
            assert record.key == f"k{i % 7}".encode()
            assert record.partition == default_partition(record.key, 3)


def test_callbacks_errbacks_and_a_raising_callback(
    kafka_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1, **{"max.message.bytes": "2000"})
    seen: list[Any] = []
    threads: set[str] = set()

    def ok(tag: str, meta: RecordMetadata) -> None:
        threads.add(f"{tag}:{threading.current_thread().name}")
        seen.append((tag, meta.offset))

    def boom(_meta: RecordMetadata) -> None:
        raise RuntimeError("callback bug")

    caller = threading.current_thread().name
    with (
        caplog.at_level(logging.ERROR, logger="kafkastate.sync"),
        KafkaProducer(bootstrap_servers=bootstrap, **FAST) as producer,
    ):
        # The ack may come back before or after these are added (kafka-python semantics):
        # added before completion they run on the IO thread, after it at once in this one.
        first = producer.send(topic, b"a").add_callback(boom).add_callback(ok, "a")
        ran_at_once = f"a:{caller}" in threads
        first.get(timeout=30)
        # The broker refuses a record above the topic's max.message.bytes: errback.
        errors: list[BaseException] = []
        big = producer.send(topic, b"x" * 5000)
        big.add_errback(errors.append).add_callback(ok, "never")
        with pytest.raises(MessageTooLargeError):
            big.get(timeout=30)
        assert big.failed() and not big.succeeded() and not big.retriable()
        # later sends still work, and callbacks added after completion run at once
        later = producer.send(topic, b"b")
        meta = later.get(timeout=30)
        later.add_callback(ok, "late")
        assert seen[-1] == ("late", meta.offset)
    # the IO thread has stopped: callbacks it ran after waking get() have finished
    assert len(errors) == 1 and isinstance(errors[0], MessageTooLargeError)
    assert seen == [("a", 0), ("late", meta.offset)]
    # before completion on the IO thread, after it in the caller's: one or the other
    on_io_thread = any(name.startswith("a:kafkastate-producer-io") for name in threads)
    assert on_io_thread != ran_at_once, threads
    assert f"late:{caller}" in threads
    assert "callback bug" in caplog.text


def test_too_large_for_max_request_size_raises_at_send(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap, partitions=1)
    with KafkaProducer(
        bootstrap_servers=kafka_cluster.bootstrap, max_request_size=1000, **FAST
    ) as producer:
        with pytest.raises(MessageTooLargeError):
            producer.send(topic, b"x" * 4000)
        assert producer.send(topic, b"small").get(timeout=30).offset == 0
        assert producer.metrics()["producer-metrics"]["record-refused-total"] == 1


def test_flush_sends_lingering_records(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap)
    with KafkaProducer(
        bootstrap_servers=kafka_cluster.bootstrap,
        linger_ms=60000,
        delivery_timeout_ms=120000,
        **FAST,
    ) as producer:
        producer.partitions_for(topic)
        futures = [producer.send(topic, b"%d" % i, key=b"k") for i in range(10)]
        time.sleep(0.3)
        assert not any(f.is_done for f in futures)  # lingering
        producer.flush(timeout=30)
        assert all(f.succeeded() for f in futures)
        assert [f.get().offset for f in futures] == list(range(10))


def test_close_delivers_pending_records(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap)
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, linger_ms=60000, **FAST)
    futures = [producer.send(topic, b"%d" % i) for i in range(20)]
    producer.close()
    assert all(f.succeeded() for f in futures)
    producer.close()  # idempotent
    with pytest.raises(IllegalStateError):
        producer.send(topic, b"late")
    assert producer.metrics()["producer-metrics"]["record-ack-total"] == 20
    producer.flush()  # a no-op once closed


def test_close_from_a_callback_does_not_deadlock(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap)
    producer = KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, **FAST)
    closed = threading.Event()

    def close_it(_meta: RecordMetadata) -> None:
        producer.close()
        closed.set()

    producer.send(topic, b"first").add_callback(close_it)
    assert closed.wait(30)
    producer.close(timeout=10)  # joins the IO thread
    with pytest.raises(IllegalStateError):
        producer.send(topic, b"after")


def test_send_from_a_callback(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap)
    chained: list[FutureRecordMetadata] = []
    with KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, **FAST) as producer:
        producer.send(topic, b"1").add_callback(
            lambda _m: chained.append(producer.send(topic, b"2"))
        ).get(timeout=30)
        producer.flush(timeout=30)
        assert len(chained) == 1
        assert chained[0].get(timeout=30).topic == topic


def test_max_block_on_missing_metadata(kafka_cluster: Any) -> None:
    # What the wait ends in, end to end. When it ends is the core's decision, checked on
    # the fake clock (max_block is one of the machine's deadlines) in
    # tests/core/producer/test_producer_metadata_wait.py:
    # test_a_topic_that_never_appears_fails_the_send_at_its_max_block_deadline.
    missing = f"sync-missing-{uuid.uuid4().hex[:8]}"
    with KafkaProducer(
        bootstrap_servers=kafka_cluster.bootstrap,
        max_block_ms=500,
        allow_auto_create_topics=False,
        **FAST,
    ) as producer:
        with pytest.raises(KafkaTimeoutError, match=r"max_block_ms.*metadata"):
            producer.send(missing, b"v")
        with pytest.raises(KafkaTimeoutError, match="partitions_for"):
            producer.partitions_for(missing)
        counters = producer.metrics()["producer-metrics"]
        assert counters["record-block-timeout-total"] == 1


def test_send_nowait_to_a_topic_without_metadata_meets_buffer_memory(kafka_cluster: Any) -> None:
    missing = f"sync-missing-{uuid.uuid4().hex[:8]}"
    with KafkaProducer(
        bootstrap_servers=kafka_cluster.bootstrap,
        buffer_memory=4096,
        max_block_ms=60_000,
        allow_auto_create_topics=False,
        **FAST,
    ) as producer:
        # the records held for metadata count too: the bound refuses the burst
        send_until_refused(lambda: producer.send_nowait(missing, b"v" * 100))
        producer.close(timeout=0)


def test_acks_zero_and_threads(kafka_cluster: Any) -> None:
    topic = _topic(kafka_cluster.bootstrap)
    # acks=0 gets no answer: a Produce that reaches a partition whose leadership the broker
    # has not taken up yet (just after CreateTopics) is dropped unseen. Wait until every
    # leader answers ListOffsets, so the 100 records below can all be counted.
    with KafkaConsumer(bootstrap_servers=kafka_cluster.bootstrap) as reader:
        reader.end_offsets([TopicPartition(topic, p) for p in range(3)])
    with KafkaProducer(bootstrap_servers=kafka_cluster.bootstrap, acks=0, **FAST) as producer:
        futures: list[FutureRecordMetadata] = []
        lock = threading.Lock()

        def worker(w: int) -> None:
            for i in range(25):
                f = producer.send(topic, b"%d-%d" % (w, i))
                with lock:
                    futures.append(f)

        workers = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        producer.flush(timeout=30)
        assert all(f.get().offset == -1 for f in futures)
    assert len(consume(kafka_cluster.bootstrap, topic, 100)) == 100


@pytest.mark.kafka_needs("sasl:SCRAM-SHA-512")
def test_wrong_sasl_password_fails_the_constructor_typed(kafka_cluster: Any) -> None:
    started = time.monotonic()
    with pytest.raises(AuthenticationFailedError):
        KafkaProducer(
            bootstrap_servers=kafka_cluster.sasl_bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username=kafka_cluster.sasl.username,
            sasl_plain_password="wrong",
            bootstrap_timeout_ms=1500,
        )
    assert time.monotonic() - started < 10


def test_bootstrap_timeout_ms_is_kafka_python_3s_name() -> None:
    started = time.monotonic()
    with pytest.raises(KafkaTimeoutError, match="1:1"):  # NoBrokersAvailable is one
        KafkaProducer(bootstrap_servers="127.0.0.1:1", bootstrap_timeout_ms=300, **FAST)
    assert 0.25 < time.monotonic() - started < 5


# ------------------------------------------------------------------------- send_batch


def test_send_batch_writes_one_batch_per_call(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=2)
    stamp = 1_700_000_000_000
    with KafkaProducer(
        bootstrap_servers=bootstrap, value_serializer=str.encode, **FAST
    ) as producer:
        first = producer.send_batch(topic, [(None, f"v{i}", None) for i in range(50)], partition=1)
        second = producer.send_batch(
            topic, [(b"k", "w", [("h", b"x")])], partition=1, timestamp_ms=stamp
        )
        meta, meta2 = first.get(timeout=30), second.get(timeout=30)
        assert (meta.topic, meta.partition, meta.offset) == (topic, 1, 0)
        assert (meta2.partition, meta2.offset, meta2.timestamp) == (1, 50, stamp)
        with pytest.raises(KafkaConfigurationError, match="at least one record"):
            producer.send_batch(topic, [], partition=0)
        with pytest.raises(KafkaConfigurationError, match="key or a value"):
            producer.send_batch(topic, [(None, None, None)], partition=0)
        with pytest.raises(KafkaConfigurationError, match="partition"):
            producer.send_batch(topic, [(None, "v", None)], partition=-1)
        counters = producer.metrics()["producer-metrics"]
        assert counters["record-ack-total"] == 51
        assert counters["buffer-used-bytes"] == 0
    with pytest.raises(IllegalStateError):
        producer.send_batch(topic, [(None, "v", None)], partition=0)
    records = consume(bootstrap, topic, 51)
    assert [(r.partition, r.offset, r.key, r.value) for r in records[:2]] == [
        (1, 0, None, b"v0"),
        (1, 1, None, b"v1"),
    ]
    assert sorted(r.offset for r in records) == list(range(51))
    last = max(records, key=lambda r: r.offset)
    assert (last.key, last.value, last.headers, last.timestamp) == (
        b"k",
        b"w",
        [("h", b"x")],
        stamp,
    )


def test_send_batch_refusals_are_typed(kafka_cluster: Any) -> None:
    bootstrap = kafka_cluster.bootstrap
    topic = _topic(bootstrap, partitions=1)
    with KafkaProducer(
        bootstrap_servers=bootstrap, max_request_size=1000, max_block_ms=300, **FAST
    ) as producer:
        assert producer.partitions_for(topic) == {0}  # metadata known: refused at once
        with pytest.raises(MessageTooLargeError, match="batch"):
            producer.send_batch(topic, [(None, b"x" * 100, None)] * 20, partition=0)
        # a partition the topic does not have waits for metadata, then times out
        with pytest.raises(KafkaTimeoutError):
            producer.send_batch(topic, [(None, b"x", None)] * 3, partition=7)
        assert producer.send_batch(topic, [(None, b"ok", None)], partition=0).get(30).offset == 0
        counters = producer.metrics()["producer-metrics"]
        assert counters["record-refused-total"] == 1
        assert counters["buffer-used-bytes"] == 0
