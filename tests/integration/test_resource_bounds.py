"""Resource bounds (kafkastate.testing.chaos._bounds): the programs stepped by hand, a short
measurement on a real broker behind Toxiproxy (producer RSS while the broker is slow:
backpressure; consumer RSS while the application does not read; no file descriptor, thread
or task left behind by connect/close cycles), and short connect/close cycles on the
3-broker cluster, each client connected to all three brokers. The chaos session measures
the same with 3 brokers, a minute each and 10,000 cycles per runtime."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kafkastate.core.producer import RECORD_OVERHEAD
from kafkastate.errors import KafkaTimeoutError
from kafkastate.testing import KafkaCluster, PrerequisiteError
from kafkastate.testing.chaos._bounds import (
    BOUND_NAMES,
    CYCLE_BOUNDS,
    MIB,
    Bound,
    BoundsOptions,
    bounds_table,
    consumer_program,
    cycles_program,
    open_fds,
    os_threads,
    peers,
    producer_program,
    rss,
    run_bounds,
    run_cycles,
)
from kafkastate.testing.chaos._txn import run_blocking
from kafkastate.testing.pytest_plugin import unavailable


def test_proc_readings_are_this_process() -> None:
    before = rss()
    block = bytearray(64 * MIB)
    block[::4096] = b"x" * len(block[::4096])  # touch every page: resident now
    assert rss() - before >= 48 * MIB
    del block
    fds = open_fds()
    with open(__file__, "rb"):
        assert open_fds() == fds + 1
    assert os_threads() >= 1


def test_producer_program_takes_its_baseline_before_the_slow_phase() -> None:
    calls: list[str] = []
    told: list[dict[str, Any]] = []
    ops = {
        "send": lambda topic, value: calls.append("send"),
        "flush": lambda: calls.append("flush"),
        "tell": told.append,
        "hear": lambda: calls.append("hear"),
    }
    run_blocking(producer_program("t", seconds=0.05, warmup=3), ops)
    assert calls[:5] == ["send", "send", "send", "flush", "hear"]
    assert calls[-2:] == ["hear", "flush"]
    assert told[0]["ready"] and told[1]["sent"] == calls.count("send") - 3
    assert told[1]["peak"] >= told[1]["baseline"] == told[0]["baseline"] > 0


def test_consumer_program_reads_once_then_stops() -> None:
    polls: list[int] = []
    told: list[dict[str, Any]] = []

    def getmany(timeout_ms: int, max_records: int) -> dict[str, list[int]]:
        polls.append(max_records)
        return {} if len(polls) == 1 else {"tp": [1, 2]}  # nothing yet, then a batch

    ops = {
        "assign": lambda parts: None,
        "getmany": getmany,
        "sleep": lambda s: None,
        "tell": told.append,
    }
    run_blocking(consumer_program("t", 2, seconds=0.05), ops)
    assert polls == [10, 10]
    assert told == [{"baseline": told[0]["baseline"], "peak": told[0]["peak"], "read": 2}]


def test_cycles_program_reports_what_the_cycles_left() -> None:
    opened: list[str] = []
    tasks = iter([4, 4, 5])
    told: list[dict[str, Any]] = []

    def cycle(kind: str, topic: str) -> int:
        opened.append(kind)
        if len(opened) == 5:
            raise KafkaTimeoutError("a slow broker")
        return 2 if len(opened) == 6 else 3  # brokers this cycle's client reached

    ops = {
        "cycle": cycle,
        "sleep": lambda seconds: None,
        "tasks": lambda: next(tasks),
        "tell": told.append,
    }
    run_blocking(cycles_program("t", cycles=5, warmup=1), ops)
    warmup = ["producer", "consumer", "admin"]
    assert opened == [*warmup, "producer", "consumer", "admin", "producer", "consumer"]
    assert told[0]["before"]["tasks"] == 4 and told[0]["after"]["tasks"] == 5
    assert told[0]["cycles"] == told[0]["planned"] == 5
    assert [s["cycle"] for s in told[0]["samples"]] == [0, 2, 5]  # and half-way
    assert told[0]["reached"] == 2  # the fewest any cycle reached
    assert told[0]["failed"] == 1 and "KafkaTimeoutError" in told[0]["failures"][0]
    assert told[0]["rss_late"] == told[0]["samples"][2]["rss"] - told[0]["samples"][1]["rss"]


def test_cycles_program_out_of_budget_reports_the_cycles_it_did() -> None:
    """A budget already spent after the first cycle: no second cycle starts, and the
    report is that of a 1-cycle run (final sample after a settle) out of the 9 planned."""
    opened: list[str] = []
    tasks = iter([1, 1])
    told: list[dict[str, Any]] = []
    ops = {
        "cycle": lambda kind, topic: opened.append(kind),
        "sleep": lambda seconds: None,
        "tasks": lambda: next(tasks),
        "tell": told.append,
    }
    run_blocking(cycles_program("t", cycles=9, warmup=1, every=2, budget=0.0), ops)
    assert opened == ["producer", "consumer", "admin", "producer"]
    assert told[0]["cycles"] == 1 and told[0]["planned"] == 9
    assert [s["cycle"] for s in told[0]["samples"]] == [0, 1]
    assert told[0]["rss_late"] == told[0]["rss_growth"]  # no sample half-way: from the start


def test_peers_counts_established_connections_by_remote_end() -> None:
    import socket  # noqa: PLC0415

    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        before = peers()
        first = socket.create_connection(("127.0.0.1", port))
        second = socket.create_connection(("127.0.0.1", port))
        accepted = [server.accept()[0], server.accept()[0]]
        try:
            # two connections to one listener are one peer; the accepted ends are two more
            # (their remote ends are the two client ports)
            assert len(peers() - before) == 3
        finally:
            for sock in [first, second, *accepted]:
                sock.close()


def test_cycles_program_samples_the_curve_every_n_cycles() -> None:
    tasks = iter([1, 2, 3, 4])
    told: list[dict[str, Any]] = []
    ops = {
        "cycle": lambda kind, topic: None,
        "sleep": lambda seconds: None,
        "tasks": lambda: next(tasks),
        "tell": told.append,
    }
    run_blocking(cycles_program("t", cycles=7, warmup=1, every=3), ops)
    samples = told[0]["samples"]
    assert [(s["cycle"], s["tasks"]) for s in samples] == [(0, 1), (3, 2), (6, 3), (7, 4)]
    assert all(s["fds"] > 0 and s["threads"] >= 1 and s["rss"] > 0 for s in samples)
    assert "| tasks | asyncio | +1 | +0 | False |" in bounds_table(
        [Bound("tasks", "asyncio", 1, 0)]
    )


@pytest.mark.integration
def test_short_resource_bounds(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka", reason="the topic is written with confluent-kafka")
    pytest.importorskip("trio")
    options = BoundsOptions(seconds=4.0, cycles=60, out=tmp_path / "bounds")
    try:
        bounds = run_bounds(options)
    except PrerequisiteError as exc:
        unavailable(exc)
    assert len(bounds) == len(BOUND_NAMES) * len(options.runtimes)
    assert all(b.ok for b in bounds), (
        bounds_table(bounds) + "\n" + repr([b.detail for b in bounds if not b.ok])
    )
    for bound in bounds:
        if bound.name == "producer_rss":  # it filled the buffer: the limit was reached
            # (each 1 KiB record counts its RECORD_OVERHEAD in buffer_memory too)
            filled = bound.detail["sent"] * (1024 + RECORD_OVERHEAD)
            assert filled >= options.buffer_memory, bound.detail
        if bound.name == "consumer_rss":
            assert bound.detail["read"] > 0


@pytest.mark.integration
def test_cycles_reach_all_three_brokers_and_leave_nothing(
    kafka_cluster3: KafkaCluster, tmp_path: Path
) -> None:
    """30 cycles per runtime, the runtimes side by side: every producer, consumer and admin
    client is connected to all three brokers before it closes; afterwards no fd, thread or
    task more than after the warm-up, and the RSS within its bounds."""
    pytest.importorskip("confluent_kafka", reason="the cycles topic is made with confluent-kafka")
    pytest.importorskip("trio")
    topic = f"cycles-{uuid.uuid4().hex[:8]}"
    bounds = run_cycles(kafka_cluster3.bootstrap, cycles=30, every=10, out=tmp_path, topic=topic)
    runtimes = ("asyncio", "trio", "blocking")
    assert [(b.name, b.runtime) for b in bounds] == [(n, r) for r in runtimes for n in CYCLE_BOUNDS]
    assert all(b.ok for b in bounds), bounds_table(bounds)
    for bound in bounds:
        assert bound.detail["brokers"] == 3, bound.detail
        assert bound.detail["reached"] == 3, bound.detail
        assert bound.detail["failed"] == 0, bound.detail["failures"]
        assert [s["cycle"] for s in bound.detail["samples"]] == [0, 10, 15, 20, 30]
