"""Producer policy on every runtime: sends refused for a full buffer are admitted in send
order; a send waits for its topic's metadata up to max_block_ms and then fails with
KafkaTimeoutError, while the client stays usable; an unreachable cluster fails a send with
KafkaTimeoutError after max_block_ms; closing with sends in flight delivers them
(graceful) or fails them (abort)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from kafkastate.errors import KafkaTimeoutError
from tests.conformance.runtimes import (
    Runtime,
    Trace,
    assert_same_traces,
    error,
    new_topic,
    read_back,
    run_everywhere,
)

pytestmark = pytest.mark.integration

# ------------------------------------------------------------ 5. a full buffer


def test_full_buffer_admits_sends_in_order(kafka_cluster: Any) -> None:
    """12 KB sent quickly through a 4 KB buffer: sends wait for room; every record is
    delivered, in send order per partition."""
    bootstrap = kafka_cluster.bootstrap
    count, partitions = 40, 2
    values = [f"{i:04d}".encode() + b"x" * 300 for i in range(count)]

    def scenario(rt: Runtime) -> Trace:
        topic = new_topic(bootstrap, partitions=partitions)
        options: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "linger_ms": 20,
            "buffer_memory": 4096,  # kafkastate's AIOKafkaProducer takes it too
            "batch_size": 1024,
        }
        p = rt.producer(**options)
        handles = [p.send(topic, v, partition=i % partitions) for i, v in enumerate(values)]
        outcomes = [p.outcome(h) for h in handles]
        p.close()
        got = read_back(bootstrap, topic, partitions, count)
        return [
            ("outcomes", outcomes),
            *(
                ("read back", partition, [(o, v[:4]) for o, v in got[partition]])
                for partition in range(partitions)
            ),
        ]

    traces = run_everywhere(scenario, name="full buffer")
    assert_same_traces(traces, scenario="full buffer")
    first = next(iter(traces.values()))
    sent = {p: [(i // partitions, v[:4]) for i, v in enumerate(values) if i % partitions == p]
            for p in range(partitions)}  # fmt: skip
    for partition in range(partitions):
        assert ("read back", partition, sent[partition]) in first


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WAITS_AT_OPEN = {
    "asyncio": "aiokafka's start() waits for a bootstrap server and has no way around it: "
    "it raises NoBrokersAvailable (a KafkaTimeoutError) before any send",
}
"""Runtimes where the unreachable cluster is refused when the producer opens, and why.
The blocking producer waits in its constructor too (kafka-python's), unless ``api_version``
is given, which the scenario does so that its send is the one refused."""


def test_unreachable_cluster_times_out(kafka_cluster: Any) -> None:
    """Bootstrap to a closed port, max_block_ms=500: a send fails with KafkaTimeoutError."""
    port = _closed_port()
    where: dict[str, str] = {}

    def scenario(rt: Runtime) -> Trace:
        options: dict[str, Any] = {
            "bootstrap_servers": f"127.0.0.1:{port}",
            "max_block_ms": 500,
            "request_timeout_ms": 1000,
        }
        if rt.name == "blocking":
            options["api_version"] = (2, 5)  # kafka-python's way to skip the constructor's wait
        try:
            p = rt.producer(**options)
        except Exception as exc:
            where[rt.name] = "open"
            return [("refused", isinstance(exc, KafkaTimeoutError))]
        try:
            p.outcome(p.send("anything", b"v"))
        except Exception as exc:
            where[rt.name] = "send"
            return [("refused", type(exc).__name__, *error(exc)[1:])]
        finally:
            p.abort()
        return [("send accepted",)]

    traces = run_everywhere(scenario, name="unreachable cluster")
    for runtime in WAITS_AT_OPEN:  # documented: refused at open, by a KafkaTimeoutError
        assert (where[runtime], traces.pop(runtime)) == ("open", [("refused", True)])
    assert_same_traces(traces, scenario="unreachable cluster")
    first = next(iter(traces.values()))
    assert first[0][:2] == ("refused", "KafkaTimeoutError")


def test_a_send_waits_for_metadata_then_times_out(kafka_cluster: Any) -> None:
    """max_block_ms=600, no auto-creation: a send to a missing topic, and one to a
    partition the topic does not have, each fail with KafkaTimeoutError naming the topic
    metadata; a send to an existing partition then goes through."""
    bootstrap = kafka_cluster.bootstrap

    def scenario(rt: Runtime) -> Trace:
        topic = new_topic(bootstrap, partitions=1)
        p = rt.producer(
            bootstrap_servers=bootstrap, max_block_ms=600, allow_auto_create_topics=False
        )
        trace: Trace = []
        try:
            for target, partition in ((f"{topic}-missing", None), (topic, 3), (topic, 0)):
                try:
                    outcome = p.outcome(p.send(target, b"v", partition=partition))
                except Exception as exc:
                    name = type(exc).__name__
                    trace.append(("refused", partition, name, "topic metadata" in str(exc)))
                else:
                    trace.append(("sent", partition, outcome))
        finally:
            p.close()
        return trace

    traces = run_everywhere(scenario, name="metadata wait")
    assert_same_traces(traces, scenario="metadata wait")
    assert next(iter(traces.values())) == [
        ("refused", None, "KafkaTimeoutError", True),
        ("refused", 3, "KafkaTimeoutError", True),
        ("sent", 0, ("ok", 0, 0)),
    ]


# ----------------------------------------------------- 6. close during in-flight sends


@pytest.mark.parametrize("how", ["graceful", "abort"])
def test_close_with_sends_in_flight(kafka_cluster: Any, how: str) -> None:
    """30 sends lingering (linger_ms=3000), then close: graceful delivers every one; abort
    fails every one still pending, with the same type everywhere. What was acknowledged is
    readable either way."""
    bootstrap = kafka_cluster.bootstrap
    count = 30

    def scenario(rt: Runtime) -> Trace:
        topic = new_topic(bootstrap)
        p = rt.producer(bootstrap_servers=bootstrap, linger_ms=3000)
        handles = [p.send(topic, f"v{i}".encode(), partition=0) for i in range(count)]
        if how == "graceful":
            p.close()
        else:
            p.abort()
        outcomes = [p.outcome(h) for h in handles]
        acked = sorted(o[2] for o in outcomes if o[0] == "ok")
        got = read_back(bootstrap, topic, 1, len(acked), timeout=10 if acked else 2)
        readable = [offset for offset, _ in got[0]]
        return [
            ("outcomes", sorted({o[0] if o[0] == "ok" else o for o in outcomes})),
            ("acknowledged", len(acked)),
            ("every acknowledged record readable", set(acked) <= set(readable)),
            ("readable", len(readable)),
        ]

    traces = run_everywhere(scenario, name=f"close with sends in flight ({how})")
    assert_same_traces(traces, scenario=f"close with sends in flight ({how})")
