"""Read a topic back with an independent client (kafka-python, a test-only dependency)."""

from __future__ import annotations

import time
from typing import Any

import kafka


def consume(bootstrap: str, topic: str, expected: int, timeout: float = 20.0) -> list[Any]:
    """Every record of ``topic`` from the beginning: wait for ``expected`` of them (up to
    ``timeout`` seconds), then poll once more so that duplicates would show up."""
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=2000,
    )
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(records)
        for records in consumer.poll(timeout_ms=300).values():
            out.extend(records)
    finally:
        consumer.close()
    return out
