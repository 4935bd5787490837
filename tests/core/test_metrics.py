"""The windowed statistics (Java's SampledStat rules) and the counters the machines keep,
with time stepped by hand."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from kafkastate.core.admin.machine import AdminMachine
from kafkastate.core.config import admin_config, consumer_machine, producer_config, resolve
from kafkastate.core.metrics import Stat
from kafkastate.core.producer.producer import ProducerMachine
from kafkastate.core.report import METRIC_NAMES, StatisticsReported, health, producer_metrics
from tests.core.producer.test_producer_machine import machine, ok, produce_response, started


def test_empty_stat_reads_zero() -> None:
    s = Stat()
    assert (s.rate(100.0), s.event_rate(100.0), s.avg(100.0), s.max(100.0)) == (0, 0, 0, 0)
    assert (s.total, s.count) == (0.0, 0)


def test_rate_divides_by_at_least_samples_minus_one_windows() -> None:
    s = Stat(samples=2, window=30.0)
    s.record(60.0, now=0.0)
    # 1 s in: Java pads the elapsed time to one full window (samples - 1), not 1 s
    assert s.rate(1.0) == pytest.approx(60.0 / 31.0)
    assert s.event_rate(1.0) == pytest.approx(1.0 / 31.0)
    # 45 s in: one full window elapsed, no padding
    assert s.rate(45.0) == pytest.approx(60.0 / 45.0)


def test_samples_roll_and_expire() -> None:
    s = Stat(samples=2, window=10.0)
    s.record(5.0, now=0.0)
    s.record(1.0, now=5.0)  # same window
    s.record(3.0, now=12.0)  # second window
    assert s.avg(12.0) == pytest.approx(3.0)
    assert s.max(12.0) == 5.0
    # the first window (started at 0) is older than 2 x 10 s at t=20: gone
    assert s.max(20.0) == 3.0
    assert s.avg(20.0) == 3.0
    s.record(7.0, now=25.0)  # overwrites the oldest slot
    assert s.max(25.0) == 7.0
    assert s.avg(25.0) == pytest.approx(5.0)
    # everything expires; cumulative values stay
    assert (s.avg(100.0), s.max(100.0), s.rate(100.0)) == (0.0, 0.0, 0.0)
    assert (s.total, s.count) == (16.0, 4)


def test_stat_refuses_a_bad_window() -> None:
    with pytest.raises(ValueError, match="window"):
        Stat(samples=0)
    with pytest.raises(ValueError, match="window"):
        Stat(window=0.0)


def test_producer_counts_per_batch_retries_acks_and_latency() -> None:
    peer = started(linger=0.5)
    ids = peer.topic_ids()
    peer.send(b"a")
    peer.send(b"b")
    peer.advance()  # linger
    (sent,) = peer.produces()
    peer.now += 0.25  # the broker takes 250 ms
    peer.answer(sent, produce_response(sent, lambda p: (6, -1), ids))  # NOT_LEADER
    while not peer.produces():
        peer.advance()
    (again,) = peer.produces()
    peer.now += 0.05
    peer.answer(again, produce_response(again, ok({("t", 0): 5}), ids))
    (ack,) = peer.outcomes()  # one batch of two records
    assert len(ack.record_ids) == 2

    counters = peer.m.counters
    assert counters.sent.total == 4  # two records, written twice (Java counts retries)
    assert counters.sent.count == 2  # per batch, not per record
    assert counters.retries.total == 2 and counters.acked == 2
    assert counters.errors.total == 0
    assert counters.error_codes == {6: 1}
    assert counters.last_ack == peer.now

    group = producer_metrics(peer.m, now=peer.now)["producer-metrics"]
    assert set(group) == set(METRIC_NAMES["producer-metrics"])
    assert group["record-send-total"] == 4
    assert group["record-retry-total"] == 2
    assert group["record-ack-total"] == 2
    assert group["records-per-request-avg"] == 2
    assert group["batch-size-avg"] > 0
    # the Produce answers took 250 and 50 ms; metadata and InitProducerId took 0
    assert group["request-latency-max"] == pytest.approx(250.0)
    assert group["requests-in-flight"] == 0
    assert group["buffer-used-bytes"] == 0
    assert group["connection-count"] >= 1
    json.dumps(producer_metrics(peer.m, now=peer.now))
    snapshot = health(peer.m, now=peer.now)
    json.dumps(snapshot)
    assert snapshot["kind"] == "producer" and snapshot["healthy"] and snapshot["error"] is None
    assert snapshot["last_ack_seconds_ago"] == 0.0


def test_producer_report_before_any_io() -> None:
    m = machine()
    report = producer_metrics(m)  # no time handed in yet: the machine's latest
    group = report["producer-metrics"]
    assert group["record-send-total"] == 0 and group["connection-count"] == 0
    assert group["buffer-available-bytes"] == m.accumulator.config.buffer_memory
    assert health(m)["last_ack_seconds_ago"] == -1.0


# ------------------------------------------------------------------- statistics timer


def _machines(interval_ms: int) -> list[Any]:
    base = {"bootstrap_servers": "127.0.0.1:9092", "statistics_interval_ms": interval_ms}
    producer = ProducerMachine(
        producer_config(resolve("producer", "kafkastate", base, owner="t")),
        rng=random.Random(1),
    )
    consumer = consumer_machine(
        resolve("consumer", "kafkastate", {**base, "group_id": "g"}, owner="t"),
        rng=random.Random(1),
    )
    admin = AdminMachine(
        admin_config(resolve("admin", "kafkastate", base, owner="t")), rng=random.Random(1)
    )
    return [producer, consumer, admin]


def _reports(m: Any, now: float) -> list[dict[str, Any]]:
    m.handle_timer(now=now)
    out = []
    while (event := m.next_event()) is not None:
        if isinstance(event, StatisticsReported):
            out.append(event.stats)
    return out


@pytest.mark.parametrize("kind", ["producer", "consumer", "admin"])
def test_statistics_fire_on_schedule_under_the_fake_clock(kind: str) -> None:
    m = _machines(5000)[["producer", "consumer", "admin"].index(kind)]
    assert _reports(m, 100.0) == []  # the first timer pass starts the schedule
    assert m.get_timer() is not None and m.get_timer() <= 105.0
    assert _reports(m, 104.999) == []
    (stats,) = _reports(m, 105.0)
    assert stats["type"] == kind and stats["time"] == 105.0
    assert stats["health"]["kind"] == kind
    if kind == "producer":
        assert stats["error_codes"] == {}
    if kind == "consumer":
        assert stats["lag"] == {}
    main_group = "admin-client-metrics" if kind == "admin" else f"{kind}-metrics"
    assert main_group in stats["metrics"]
    assert json.loads(json.dumps(stats)) == stats
    assert _reports(m, 105.0) == []  # handle_timer twice: one report
    assert _reports(m, 109.0) == []
    assert len(_reports(m, 110.0)) == 1
    # a driver that fell behind gets one report, and the schedule restarts from then
    assert len(_reports(m, 137.5)) == 1
    assert _reports(m, 142.0) == []
    assert len(_reports(m, 142.5)) == 1


def test_statistics_off_by_default() -> None:
    for m in _machines(0):
        for t in (0.0, 1e3, 1e6):
            assert _reports(m, t) == []


def test_observability_doc_lists_every_metric() -> None:
    import pathlib  # noqa: PLC0415
    import runpy  # noqa: PLC0415

    root = pathlib.Path(__file__).resolve().parents[2]
    tool = runpy.run_path(str(root / "tools" / "gen_observability_doc.py"))
    doc = (root / "docs" / "observability.md").read_text()
    assert tool["render"](doc) == doc, "run python tools/gen_observability_doc.py"


def test_metrics_windows_follow_the_options() -> None:
    base = {
        "bootstrap_servers": "127.0.0.1:9092",
        "metrics_num_samples": 3,
        "metrics_sample_window_ms": 1500,
    }
    producer = ProducerMachine(
        producer_config(resolve("producer", "kafka-python", base, owner="t")),
        rng=random.Random(1),
    )
    consumer = consumer_machine(
        resolve("consumer", "kafka-python", {**base, "group_id": "g"}, owner="t"),
        rng=random.Random(1),
    )
    stats = [producer.counters.sent, producer.client.counters.latency]
    stats += [consumer.fetcher.counters.fetches, consumer.fetcher.group_counters.commits]
    stats += [consumer.fetcher.client.counters.incoming]
    assert {(s.samples, s.window) for s in stats} == {(3, 1.5)}
