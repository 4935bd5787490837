"""Every option error, on every runtime: the same exception type, and a message that names
the option (normalised: the runtime's own class or function name becomes ``<owner>``).
Where the libraries whose interfaces the runtimes copy differ (aiokafka vs kafka-python),
the row says so and the differing runtime's type is asserted exactly."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from tests.conformance.runtimes import (
    RUNTIMES,
    Runtime,
    assert_same_traces,
    error,
    new_group,
    open_runtime,
)

pytestmark = pytest.mark.integration


class Row(NamedTuple):
    label: str
    options: dict[str, Any]
    names: str
    """What the message must mention."""
    kafka_python: tuple[str, str] | None = None
    """Where kafka-python's words differ on purpose: the blocking runtime's exact
    ``(type, normalised message)``; the other runtimes must still agree."""


_UNRECOGNIZED = ("KafkaConfigurationError", "<owner>: Unrecognized configs: {'no_such_option'}")


CONSUMER_ROWS = [
    Row("max_poll_records=0", {"max_poll_records": 0}, "max_poll_records"),
    Row("auto_commit_interval_ms=-1", {"auto_commit_interval_ms": -1}, "auto_commit_interval_ms"),
    Row('fetch_max_wait_ms="x"', {"fetch_max_wait_ms": "x"}, "fetch_max_wait_ms"),
    Row('auto_offset_reset="sometimes"', {"auto_offset_reset": "sometimes"}, "auto_offset_reset"),
    Row('isolation_level="dirty"', {"isolation_level": "dirty"}, "isolation_level"),
    Row("session_timeout_ms=-5", {"group_id": "g", "session_timeout_ms": -5}, "session_timeout_ms"),
    Row(
        'partition_assignment_strategy=["nope"]',
        {"group_id": "g", "partition_assignment_strategy": ["nope"]},
        "nope",
    ),
    Row("an unknown option", {"no_such_option": 1}, "no_such_option", _UNRECOGNIZED),
    Row("a listener without group_id", {"_listener_without_group": True}, "group_id"),
]

PRODUCER_ROWS = [
    Row("acks=7", {"acks": 7}, "acks"),
    Row('compression_type="brotli"', {"compression_type": "brotli"}, "compression_type"),
    Row("linger_ms=-1", {"linger_ms": -1}, "linger_ms"),
    Row("max_request_size=0", {"max_request_size": 0}, "max_request_size"),
    Row("max_block_ms=-1", {"max_block_ms": -1}, "max_block_ms"),
    Row("enable_idempotence with acks=1", {"enable_idempotence": True, "acks": 1}, "acks"),
    Row("an unknown option", {"no_such_option": 1}, "no_such_option", _UNRECOGNIZED),
    Row("buffer_memory=0", {"buffer_memory": 0}, "buffer_memory"),
]


class _Listener:
    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        pass


def _outcome(rt: Runtime, kind: str, row: Row, bootstrap: str) -> tuple[Any, ...]:
    options = {k: v for k, v in row.options.items() if not k.startswith("_")}
    if options.get("group_id") == "g":
        options["group_id"] = new_group()
    try:
        if kind == "producer":
            rt.producer(bootstrap_servers=bootstrap, **options).close()
        else:
            c = rt.consumer(bootstrap_servers=bootstrap, **options)
            if "_listener_without_group" in row.options:
                c.subscribe(["some-topic"], listener=_Listener())
            c.close()
    except Exception as exc:
        kind_name, message = error(exc)
        return (kind_name, row.names in message, message)
    return ("accepted",)


@pytest.mark.parametrize("kind", ["consumer", "producer"])
def test_option_errors(kafka_cluster: Any, kind: str) -> None:
    bootstrap = kafka_cluster.bootstrap
    rows = CONSUMER_ROWS if kind == "consumer" else PRODUCER_ROWS
    results: dict[str, dict[str, tuple[Any, ...]]] = {}
    for runtime in RUNTIMES:
        with open_runtime(runtime) as rt:
            results[runtime] = {row.label: _outcome(rt, kind, row, bootstrap) for row in rows}
    for row in rows:
        if row.kafka_python is not None:  # kafka-python's words on the blocking runtime
            kind_name, message = row.kafka_python
            assert results["blocking"][row.label] == (kind_name, True, message), row.label
            results["blocking"][row.label] = results[RUNTIMES[0]][row.label]
    traces = {
        runtime: [(row.label, *results[runtime][row.label]) for row in rows] for runtime in RUNTIMES
    }
    assert_same_traces(traces, scenario=f"{kind} option errors")
    for entry in next(iter(traces.values())):
        assert entry[1] != "accepted", f"{entry[0]} was accepted"
        assert entry[2], f"{entry[0]}: the message does not name the option: {entry[3]}"
