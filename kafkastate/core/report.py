"""Reports: the machines' counters as metrics with the Java client's names, and health.

Theory of operation
-------------------
Every runtime's ``metrics()`` is one of :func:`producer_metrics`, :func:`consumer_metrics`
or :func:`admin_metrics`, called with the adapter's clock reading (or None: the latest
time the machine was handed). The result has kafka-python's shape -- ``{group: {name:
value}}`` -- with the groups and names of the Java client (``producer-metrics``,
``consumer-fetch-manager-metrics``, ``consumer-coordinator-metrics``...). Rates are per
second and latencies in milliseconds, as in Java; windowed values come from
:class:`~kafkastate.core.metrics.Stat` (2 samples of 30 s). Per-node request metrics are in
one group per node, ``<client>-node-metrics.node-<id>`` (Java tags them with ``node-id``;
kafka-python's flat dict would merge them into one).

:func:`health` is a snapshot for liveness probes: connected brokers, the coordinator, the
assignment, the last successful produce/fetch and the error state.

:data:`METRIC_NAMES` lists every name per group; docs/observability.md is generated
from it (``tools/gen_observability_doc.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from kafkastate.core.client import SEPARATE_BASE, SEPARATE_TOP
from kafkastate.core.metrics import Stat

if TYPE_CHECKING:
    from kafkastate.core.admin.machine import AdminMachine
    from kafkastate.core.client import Client
    from kafkastate.core.consumer.consumer import ConsumerMachine
    from kafkastate.core.producer.producer import ProducerMachine

__all__ = [
    "METRIC_NAMES",
    "Report",
    "StatisticsReported",
    "admin_metrics",
    "consumer_metrics",
    "health",
    "metrics",
    "producer_metrics",
    "statistics",
]

Report = dict[str, dict[str, float]]
"""``{group: {metric name: value}}``, as kafka-python's ``metrics()`` returns."""

_MS: Final = 1000.0

_NETWORK: Final = {
    "connection-count": "Connections ready now.",
    "connection-creation-rate": "New connections per second.",
    "connection-creation-total": "Connections that became ready.",
    "connection-close-rate": "Connections closed per second.",
    "connection-close-total": "Connections closed (idle, lost, refused).",
    "successful-reauthentication-total": "KIP-368 re-authentications on live connections.",
    "request-rate": "Requests written per second.",
    "request-total": "Requests written.",
    "response-rate": "Responses read per second.",
    "response-total": "Responses read.",
    "request-latency-avg": "Mean ms from writing a request to reading its response.",
    "request-latency-max": "Largest such time in the window, ms.",
    "request-error-total": "Requests that got no response (timeout, lost connection...).",
    "outgoing-byte-rate": "Bytes written per second.",
    "outgoing-byte-total": "Bytes written.",
    "incoming-byte-rate": "Bytes read per second.",
    "incoming-byte-total": "Bytes read.",
}

_NODE: Final = {
    "request-latency-avg": "Mean ms to this node's responses.",
    "request-latency-max": "Largest such time in the window, ms.",
    "response-rate": "Responses from this node per second.",
    "response-total": "Responses from this node.",
}

_PRODUCER: Final = {
    "record-send-rate": "Records written in Produce requests per second (retries count).",
    "record-send-total": "Records written in Produce requests (retries count).",
    "record-ack-total": "Records the broker acknowledged.",
    "record-retry-rate": "Records put back for a retry per second.",
    "record-retry-total": "Records put back for a retry.",
    "record-error-rate": "Records failed for good per second.",
    "record-error-total": "Records failed for good.",
    "batch-size-avg": "Mean encoded bytes per batch written.",
    "batch-size-max": "Largest batch written in the window, bytes.",
    "records-per-request-avg": "Mean records per Produce request.",
    "record-queue-time-avg": "Mean ms from a batch's first record to its drain.",
    "record-queue-time-max": "Largest such time in the window, ms.",
    "produce-throttle-time-avg": "Mean broker throttle time per Produce response, ms.",
    "produce-throttle-time-max": "Largest throttle time in the window, ms.",
    "requests-in-flight": "Produce requests awaiting a response.",
    "buffer-total-bytes": "buffer.memory.",
    "buffer-available-bytes": "buffer.memory not held by records.",
    "buffer-used-bytes": "buffer.memory held by records.",
    "bufferpool-wait-ratio": "Fraction of time sends spent waiting for buffer memory.",
    "bufferpool-wait-time-ns-total": "Total ns sends waited for buffer memory.",
    "bufferpool-wait-time-total": "The same, Java's older name (ns).",
    "waiting-threads": "Sends waiting for buffer memory now.",
    "records-outstanding": "Records appended and without an outcome yet.",
    "batches-in-flight": "Batches written and awaiting a response.",
    "producer-id": "The idempotent producer id (-1 without).",
    "producer-epoch": "Its epoch (-1 without).",
}

_FETCH: Final = {
    "fetch-rate": "Fetch responses per second.",
    "fetch-total": "Fetch responses.",
    "fetch-latency-avg": "Mean ms from writing a Fetch request to its response.",
    "fetch-latency-max": "Largest such time in the window, ms.",
    "fetch-size-avg": "Mean record bytes per Fetch response.",
    "fetch-size-max": "Largest in the window, bytes.",
    "bytes-consumed-rate": "Record bytes fetched per second.",
    "bytes-consumed-total": "Record bytes fetched.",
    "records-consumed-rate": "Records handed to the application per second.",
    "records-consumed-total": "Records handed to the application.",
    "fetch-throttle-time-avg": "Mean broker throttle time per Fetch response, ms.",
    "fetch-throttle-time-max": "Largest throttle time in the window, ms.",
    "records-lag-max": "Largest lag (log end minus position) over the assigned partitions now.",
    "assigned-partitions": "Partitions assigned now.",
    "paused-partitions": "Partitions paused now.",
}

_COORDINATOR: Final = {
    "commit-latency-avg": "Mean ms from commit to its answer.",
    "commit-latency-max": "Largest such time in the window, ms.",
    "commit-rate": "Commits answered per second.",
    "commit-total": "Commits answered.",
    "join-rate": "JoinGroup responses per second.",
    "join-total": "JoinGroup responses.",
    "join-time-avg": "Mean JoinGroup response time, ms.",
    "join-time-max": "Largest in the window, ms.",
    "sync-rate": "SyncGroup responses per second.",
    "sync-total": "SyncGroup responses.",
    "sync-time-avg": "Mean SyncGroup response time, ms.",
    "sync-time-max": "Largest in the window, ms.",
    "heartbeat-rate": "Heartbeat responses per second.",
    "heartbeat-total": "Heartbeat responses.",
    "heartbeat-response-time-max": "Largest heartbeat response time in the window, ms.",
    "last-heartbeat-seconds-ago": "Seconds since the last heartbeat response (-1: none).",
    "rebalance-rate-per-hour": "Completed rebalances (assignments received) per hour.",
    "rebalance-total": "Completed rebalances.",
    "failed-rebalance-total": "Times the member failed for good.",
    "last-rebalance-seconds-ago": "Seconds since the last assignment (-1: none).",
    "assigned-partitions": "Partitions assigned now.",
}

METRIC_NAMES: Final[Mapping[str, Mapping[str, str]]] = {
    "producer-metrics": {**_NETWORK, **_PRODUCER},
    "producer-node-metrics.node-<id>": _NODE,
    "consumer-metrics": _NETWORK,
    "consumer-node-metrics.node-<id>": _NODE,
    "consumer-fetch-manager-metrics": _FETCH,
    "consumer-coordinator-metrics": _COORDINATOR,
    "admin-client-metrics": _NETWORK,
    "admin-client-node-metrics.node-<id>": _NODE,
}
"""Every group and metric name, with a one-line description (the docs' table)."""


@attrs.frozen(kw_only=True)
class StatisticsReported:
    """``statistics_interval`` passed: the adapter hands :attr:`stats` to ``stats_cb``."""

    stats: dict[str, Any]
    """:func:`statistics` at the time it fell due (JSON-able)."""


def statistics(
    machine: ProducerMachine | ConsumerMachine | AdminMachine, now: float
) -> dict[str, Any]:
    """What ``stats_cb`` gets: ``{"type": "producer"|"consumer"|"admin", "time": now (the
    driver's clock, seconds), "metrics": metrics(), "health": health()}``, plus for a
    producer ``"error_codes"`` (Kafka error code, as text -> how many partition answers
    carried it) and for a consumer ``"lag"`` (``"topic-partition"`` -> records behind the
    log end). JSON-able (``json.dumps`` gives confluent-kafka's string form)."""
    from kafkastate.core.consumer.consumer import ConsumerMachine  # noqa: PLC0415 -- a cycle
    from kafkastate.core.producer.producer import ProducerMachine  # noqa: PLC0415

    snapshot = health(machine, now)
    out: dict[str, Any] = {
        "type": snapshot["kind"],
        "time": now,
        "metrics": metrics(machine, now),
        "health": snapshot,
    }
    if isinstance(machine, ProducerMachine):
        codes = machine.counters.error_codes
        out["error_codes"] = {str(code): n for code, n in sorted(codes.items())}
    elif isinstance(machine, ConsumerMachine):
        out["lag"] = {f"{t}-{p}": lag for (t, p), lag in _lags(machine).items()}
    return out


def _broker(node_id: int) -> int:
    """The broker behind a node id: a second connection (the group coordinator's) has an
    id of its own counting down from ``SEPARATE_TOP``."""
    return SEPARATE_TOP - node_id if node_id >= SEPARATE_BASE else node_id


def _brokers(client: Client) -> list[int]:
    return sorted({_broker(n) for n in client.ready_nodes() if n >= 0})


def _time(client: Client, now: float | None) -> float:
    return client.last_now if now is None else now


def _counted(name: str, stat: Stat, now: float) -> dict[str, float]:
    """``<name>-rate`` (recordings per second) and ``<name>-total`` (recordings)."""
    return {f"{name}-rate": stat.event_rate(now), f"{name}-total": stat.count}


def _summed(name: str, stat: Stat, now: float) -> dict[str, float]:
    """``<name>-rate`` (recorded values per second) and ``<name>-total`` (their sum)."""
    return {f"{name}-rate": stat.rate(now), f"{name}-total": int(stat.total)}


def _timed(name: str, stat: Stat, now: float, scale: float = _MS) -> dict[str, float]:
    """``<name>-avg`` and ``<name>-max`` over the window (times in ms by default)."""
    return {f"{name}-avg": stat.avg(now) * scale, f"{name}-max": stat.max(now) * scale}


def _network(client: Client, now: float) -> dict[str, float]:
    c = client.counters
    return {
        "connection-count": len(client.ready_nodes()),
        **_counted("connection-creation", c.created, now),
        **_counted("connection-close", c.closed, now),
        "successful-reauthentication-total": client.reauthentications,
        **_counted("request", c.sent, now),
        **_counted("response", c.latency, now),
        **_timed("request-latency", c.latency, now),
        "request-error-total": c.errors,
        **_summed("outgoing-byte", c.outgoing, now),
        **_summed("incoming-byte", c.incoming, now),
    }


def _nodes(client: Client, prefix: str, now: float) -> Report:
    out: Report = {}
    for node_id, stat in sorted(client.counters.node_latency.items()):
        # a second connection (the coordinator's) reports under its broker
        name = f"{prefix}-node-metrics.node-{_broker(node_id)}"
        group = out.setdefault(name, dict.fromkeys(_NODE, 0.0))
        total = group["response-total"] + stat.count
        if total:
            group["request-latency-avg"] = (
                group["request-latency-avg"] * group["response-total"]
                + stat.avg(now) * _MS * stat.count
            ) / total
        group["request-latency-max"] = max(group["request-latency-max"], stat.max(now) * _MS)
        group["response-rate"] += stat.event_rate(now)
        group["response-total"] = total
    return out


def producer_metrics(machine: ProducerMachine, now: float | None = None) -> Report:
    """The producer's metrics (``producer-metrics`` and one group per node).

    Args:
        machine: the producer.
        now: the driver's clock; None for the latest time the machine was handed.
    """
    client = machine.client
    t = _time(client, now)
    pc = machine.counters
    acc = machine.accumulator
    group = _network(client, t)
    group.update(
        {
            **_summed("record-send", pc.sent, t),
            "record-ack-total": pc.acked,
            **_summed("record-retry", pc.retries, t),
            **_summed("record-error", pc.errors, t),
            **_timed("batch-size", pc.batch_bytes, t, 1.0),
            "records-per-request-avg": pc.records_per_request.avg(t),
            **_timed("record-queue-time", pc.queue_time, t),
            **_timed("produce-throttle-time", pc.throttle, t),
            "requests-in-flight": machine.requests_in_flight,
            "buffer-total-bytes": acc.config.buffer_memory,
            "buffer-available-bytes": acc.buffer_available,
            "buffer-used-bytes": acc.buffer_used,
            "bufferpool-wait-ratio": pc.buffer_wait.rate(t),
            "bufferpool-wait-time-ns-total": pc.buffer_wait.total * 1e9,
            "bufferpool-wait-time-total": pc.buffer_wait.total * 1e9,
            "waiting-threads": acc.waiting_sends,
            "records-outstanding": acc.outstanding_records,
            "batches-in-flight": len(acc.in_flight_batches()),
            "producer-id": machine.producer_id,
            "producer-epoch": machine.producer_epoch,
        }
    )
    return {"producer-metrics": group, **_nodes(client, "producer", t)}


def _lags(consumer: ConsumerMachine) -> dict[Any, int]:
    fetcher = consumer.fetcher
    committed = fetcher.config.read_committed
    out: dict[Any, int] = {}
    for tp, position in consumer.consumed().items():
        end = fetcher.last_stable_offset(tp) if committed else fetcher.highwater(tp)
        if end is not None:
            out[tp] = max(end - position, 0)
    return out


def _ago(at: float | None, now: float) -> float:
    return -1.0 if at is None else max(now - at, 0.0)


def consumer_metrics(consumer: ConsumerMachine, now: float | None = None) -> Report:
    """The consumer's metrics: ``consumer-metrics`` (network), per-node groups,
    ``consumer-fetch-manager-metrics`` and, with a group, ``consumer-coordinator-metrics``.

    Args:
        consumer: the consumer machine.
        now: the driver's clock; None for the latest time the machine was handed.
    """
    fetcher = consumer.fetcher
    client = fetcher.client
    t = _time(client, now)
    fc = fetcher.counters
    assigned = len(fetcher.assignment())
    lags = _lags(consumer)
    report: Report = {
        "consumer-metrics": _network(client, t),
        **_nodes(client, "consumer", t),
        "consumer-fetch-manager-metrics": {
            **_counted("fetch", fc.fetches, t),
            **_timed("fetch-latency", fc.fetches, t),
            **_timed("fetch-size", fc.bytes, t, 1.0),
            **_summed("bytes-consumed", fc.bytes, t),
            **_summed("records-consumed", fc.consumed, t),
            **_timed("fetch-throttle-time", fc.throttle, t),
            "records-lag-max": max(lags.values(), default=0),
            "assigned-partitions": assigned,
            "paused-partitions": len(consumer.paused()),
        },
    }
    if fetcher.config.group_id is not None:
        gc = fetcher.group_counters
        report["consumer-coordinator-metrics"] = {
            **_timed("commit-latency", gc.commits, t),
            **_counted("commit", gc.commits, t),
            **_counted("join", gc.joins, t),
            **_timed("join-time", gc.joins, t),
            **_counted("sync", gc.syncs, t),
            **_timed("sync-time", gc.syncs, t),
            **_counted("heartbeat", gc.heartbeats, t),
            "heartbeat-response-time-max": gc.heartbeats.max(t) * _MS,
            "last-heartbeat-seconds-ago": _ago(gc.last_heartbeat, t),
            "rebalance-rate-per-hour": gc.rebalances.event_rate(t) * 3600.0,
            "rebalance-total": gc.rebalances.count,
            "failed-rebalance-total": gc.failed_rebalances,
            "last-rebalance-seconds-ago": _ago(gc.last_rebalance, t),
            "assigned-partitions": assigned,
        }
    return report


def admin_metrics(machine: AdminMachine, now: float | None = None) -> Report:
    """The admin client's metrics (``admin-client-metrics`` and one group per node).

    Args:
        machine: the admin machine.
        now: the driver's clock; None for the latest time the machine was handed.
    """
    client = machine.client
    t = _time(client, now)
    return {"admin-client-metrics": _network(client, t), **_nodes(client, "admin-client", t)}


def metrics(
    machine: ProducerMachine | ConsumerMachine | AdminMachine, now: float | None = None
) -> Report:
    """:func:`producer_metrics`, :func:`consumer_metrics` or :func:`admin_metrics`, by the
    machine's kind."""
    from kafkastate.core.consumer.consumer import ConsumerMachine  # noqa: PLC0415 -- a cycle
    from kafkastate.core.producer.producer import ProducerMachine  # noqa: PLC0415

    if isinstance(machine, ProducerMachine):
        return producer_metrics(machine, now)
    if isinstance(machine, ConsumerMachine):
        return consumer_metrics(machine, now)
    return admin_metrics(machine, now)


def health(
    machine: ProducerMachine | ConsumerMachine | AdminMachine, now: float | None = None
) -> dict[str, Any]:
    """A JSON-able snapshot for liveness probes.

    Keys: ``kind`` (producer, consumer, admin), ``state``, ``brokers`` (brokers with a
    ready connection; the coordinator's second connection counts as its broker),
    ``error`` (the producer's or the group member's fatal error, else the last connection
    error, as text; None if none), ``healthy`` (no fatal error, and no connection error or
    a broker connected since); for a producer ``last_ack_seconds_ago``; for a consumer
    ``assignment``, ``coordinator`` (the broker, or None), ``last_fetch_seconds_ago`` and
    ``group_state``. A ``..._seconds_ago`` is -1 before the first.

    Args:
        machine: a producer, consumer or admin machine.
        now: the driver's clock; None for the latest time the machine was handed.
    """
    from kafkastate.core.consumer.consumer import ConsumerMachine  # noqa: PLC0415 -- a cycle
    from kafkastate.core.producer.producer import ProducerMachine  # noqa: PLC0415

    if isinstance(machine, ConsumerMachine):
        return _consumer_health(machine, now)
    client = machine.client
    t = _time(client, now)
    brokers = _brokers(client)
    conn_error = client.last_connection_error
    out: dict[str, Any] = {"brokers": brokers}
    fatal = None
    if isinstance(machine, ProducerMachine):
        fatal = machine.fatal_error
        out.update(
            kind="producer",
            state=machine.state.name,
            last_ack_seconds_ago=_ago(machine.counters.last_ack, t),
        )
    else:
        out.update(kind="admin", state=machine.state.name)
    error = fatal if fatal is not None else conn_error
    out["error"] = None if error is None else f"{type(error).__name__}: {error}"
    # a connection error with a broker connected since is history, not ill health
    out["healthy"] = fatal is None and (conn_error is None or bool(brokers))
    return out


def _consumer_health(consumer: ConsumerMachine, now: float | None) -> dict[str, Any]:
    fetcher = consumer.fetcher
    client = fetcher.client
    t = _time(client, now)
    brokers = _brokers(client)
    group_error = consumer.group_error
    error = group_error if group_error is not None else client.last_connection_error
    member = fetcher.member
    coordinator = fetcher.coordinator
    return {
        "kind": "consumer",
        "state": consumer.state.name,
        "brokers": brokers,
        "coordinator": None if coordinator is None else _broker(coordinator),
        "group_state": None if member is None else member.state.name,
        "assignment": [[tp[0], tp[1]] for tp in fetcher.assignment()],
        "last_fetch_seconds_ago": _ago(fetcher.counters.last_fetch, t),
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "healthy": group_error is None and (error is None or bool(brokers)),
    }
