"""kafka-python's ``KafkaAdminClient`` for blocking code.

Each call runs in the caller's thread: it gives the
:class:`~kafkastate.core.admin.AdminMachine` one command, then drives a
:class:`~kafkastate.adapters.blocking.SocketLoop` (open what the machine asks, write, wait
for a socket or the machine's deadline, feed) until the machine reports the operation
done. Routing, retries and deadlines are the machine's; there is no thread.

Return shapes are kafka-python's (3.0): dicts for topic operations, ``(group_id,
protocol_type)`` tuples from ``list_consumer_groups``, ``GroupInformation`` tuples from
``describe_consumer_groups``, ``TopicPartition -> OffsetAndMetadata`` from
``list_consumer_group_offsets``. ``raise_errors`` (default True) raises the first
resource's error; with False each resource's entry carries its ``error_code``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafkastate.adapters._admin import (
    GroupInformation,
    before_offsets,
    cluster_dict,
    code_of,
    config_dicts,
    group_information,
    group_tuples,
    offsets_and_timestamps,
    one_group,
    raise_first,
    seconds,
    topic_dicts,
)
from kafkastate.adapters._common import no_brokers_error, report_statistics, tls_context
from kafkastate.adapters.anyio.admin import raise_unsupported
from kafkastate.adapters.blocking.io import SocketLoop
from kafkastate.core import report
from kafkastate.core.admin import (
    ACL,
    ACLFilter,
    AdminMachine,
    AdminOperationCompleted,
    ClusterDescription,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    OpId,
)
from kafkastate.core.client import CloseRequested, ConnectRequested
from kafkastate.core.config import admin_config, resolve
from kafkastate.core.report import Report, StatisticsReported
from kafkastate.errors import KafkaConnectionError
from kafkastate.structs import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

__all__ = ["KafkaAdminClient"]


class KafkaAdminClient:
    """A blocking admin client with kafka-python's interface.

    The constructor waits (``bootstrap_timeout_ms``) for a bootstrap server to answer.

    Args:
        configs: kafka-python's keyword options with its defaults (``bootstrap_servers``,
            ``client_id``, ``request_timeout_ms``, ``retry_backoff_ms``, TLS, SASL...);
            every admin option: docs/options.md.

    Raises:
        TypeError: an unknown option.
        KafkaConfigurationError: a bad value, or an option kafkastate does not implement.
        NoBrokersAvailable: no bootstrap server answered in time.
    """

    def __init__(self, **configs: Any) -> None:
        options = resolve("admin", "kafka-python", configs, owner="KafkaAdminClient")
        config = admin_config(options)
        self._machine = AdminMachine(config, rng=random.SystemRandom())
        self._loop = SocketLoop(
            self._machine,
            ssl_context=tls_context(options),
            connect_timeout=config.client.socket_connection_setup_timeout,
        )
        self._done: dict[OpId, AdminOperationCompleted] = {}
        self._stats_cb = options["stats_cb"]
        self._closed = False
        wait = options["bootstrap_timeout_ms"] / 1000
        try:
            client = self._machine.client
            client.request_metadata_update()
            self._pump(lambda: bool(client.cluster.brokers), time.monotonic() + wait)
            if not client.cluster.brokers:
                raise no_brokers_error(client, wait)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the connections."""
        if self._closed:
            return
        self._closed = True
        self._machine.close()
        self._events()
        self._loop.close()

    def metrics(self, raw: bool = False) -> Report:
        """Request, connection and byte counters, kafka-python's shape (``{group: {name:
        value}}``, group ``admin-client-metrics``; docs/observability.md).

        Args:
            raw: accepted for compatibility; ignored.
        """
        return report.admin_metrics(self._machine, time.monotonic())

    def health(self) -> dict[str, Any]:
        """A JSON-able snapshot for liveness probes (:func:`kafkastate.core.report.health`)."""
        return report.health(self._machine, time.monotonic())

    def __enter__(self) -> KafkaAdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- the loop

    def _pump(self, done: Callable[[], bool], deadline: float | None) -> None:
        self._machine.handle_timer(now=time.monotonic())
        while True:
            self._events()
            self._loop.flush()
            if done() or (deadline is not None and time.monotonic() >= deadline):
                return
            self._loop.poll(deadline)

    def _events(self) -> None:
        while (event := self._machine.next_event()) is not None:
            match event:
                case ConnectRequested(node_id=node, host=host, port=port):
                    self._loop.open(node, host, port)
                case CloseRequested(node_id=node):
                    self._loop.forget(node)
                case AdminOperationCompleted(op_id=op):
                    self._done[op] = event
                case StatisticsReported(stats=stats):
                    report_statistics(self._stats_cb, stats)

    def _run(self, command: Callable[..., OpId], *args: Any, **kwargs: Any) -> dict[Any, Any]:
        if self._closed:
            raise KafkaConnectionError("KafkaAdminClient is closed")
        op = command(*args, now=time.monotonic(), **kwargs)
        self._pump(lambda: op in self._done, None)  # the operation's deadline ends it
        results = self._done.pop(op).results
        raise_unsupported(results)
        return dict(results)

    # -------------------------------------------------------------------- topics

    def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        timeout_ms: int | None = None,
        validate_only: bool = False,
        raise_errors: bool = True,
    ) -> dict[str, Any]:
        """Create topics.

        Returns:
            ``{"topics": [{"name", "topic_id", "error_code", "error_message",
            "num_partitions", "replication_factor"}]}``.

        Raises:
            KafkaError: the first topic's error (``raise_errors``).
        """
        m = self._machine
        results = self._run(
            m.create_topics, new_topics, timeout=seconds(timeout_ms), validate_only=validate_only
        )
        if raise_errors:
            raise_first(results)
        return {
            "topics": [
                {
                    "name": name,
                    "topic_id": getattr(r, "topic_id", None),
                    "error_code": code_of(r),
                    "error_message": str(r) if code_of(r) else None,
                    "num_partitions": getattr(r, "num_partitions", -1),
                    "replication_factor": getattr(r, "replication_factor", -1),
                }
                for name, r in results.items()
            ]
        }

    def delete_topics(
        self, topics: Iterable[str], timeout_ms: int | None = None, raise_errors: bool = True
    ) -> dict[str, Any]:
        """Delete topics.

        Returns:
            ``{"topics": [{"name", "error_code", "error_message"}]}``.

        Raises:
            KafkaError: the first topic's error (``raise_errors``).
        """
        results = self._run(self._machine.delete_topics, topics, timeout=seconds(timeout_ms))
        if raise_errors:
            raise_first(results)
        return {"topics": _errors(results)}

    def list_topics(self) -> list[str]:
        """Every topic's name."""
        return sorted(self._described(None))

    def describe_topics(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Topics (None: all) as kafka-python's dicts (``name``, ``topic_id``,
        ``partitions`` with ``partition_index``, ``leader_id``, ``replica_nodes``...)."""
        return topic_dicts(self._described(topics), names="kafka-python")

    def _described(self, topics: Iterable[str] | None) -> dict[str, Any]:
        results = self._run(self._machine.describe_topics, topics)
        if topics is None:
            raise_first(results)
            return {t.name: t for t in results[None]}
        return results

    def describe_cluster(self) -> dict[str, Any]:
        """``{"brokers": [{"broker_id", "host", "port", "rack"}], "cluster_id",
        "controller_id"}``.

        Raises:
            KafkaError: no broker answered in time.
        """
        result = self._run(self._machine.describe_cluster)[None]
        if not isinstance(result, ClusterDescription):
            raise result
        return cluster_dict(result, broker_key="broker_id")

    def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions],
        timeout_ms: int | None = None,
        validate_only: bool = False,
        raise_errors: bool = True,
    ) -> dict[str, Any]:
        """Grow topics.

        Returns:
            ``{"results": [{"name", "error_code", "error_message"}]}``.

        Raises:
            KafkaError: the first topic's error (``raise_errors``).
        """
        m = self._machine
        results = self._run(
            m.create_partitions,
            topic_partitions,
            timeout=seconds(timeout_ms),
            validate_only=validate_only,
        )
        if raise_errors:
            raise_first(results)
        return {"results": _errors(results)}

    # ------------------------------------------------------------------- configs

    def describe_configs(
        self, config_resources: Iterable[ConfigResource], include_synonyms: bool = False
    ) -> dict[str, dict[str, Any]]:
        """Configs of topics, brokers and broker loggers.

        Returns:
            ``{resource type ("topic", "broker", "broker_logger"): {name: {config:
            {"value", "read_only", "source", "is_sensitive", "synonyms"}}}}``.

        Raises:
            KafkaError: the first resource's error.
        """
        m = self._machine
        results = self._run(m.describe_configs, config_resources, include_synonyms=include_synonyms)
        return config_dicts(results)

    def alter_configs(
        self,
        config_resources: Iterable[ConfigResource],
        validate_only: bool = False,
        incremental: bool = False,
    ) -> dict[Any, Any]:
        """Replace configs, or with ``incremental`` change single ones (value: set,
        None: delete, AlterConfigOp).

        Returns:
            ``(ConfigResourceType, name) -> None``.

        Raises:
            KafkaError: the first resource's error.
        """
        m = self._machine
        results = self._run(
            m.alter_configs, config_resources, validate_only=validate_only, incremental=incremental
        )
        raise_first(results)
        return results

    # -------------------------------------------------------------------- groups

    def list_consumer_groups(
        self, broker_ids: Iterable[int] | None = None
    ) -> list[tuple[str, str]]:
        """``(group_id, protocol_type)`` of every group every broker (or those given)
        coordinates.

        Raises:
            KafkaError: a broker's error.
        """
        return group_tuples(self._run(self._machine.list_consumer_groups, broker_ids))

    def describe_consumer_groups(
        self,
        group_ids: Iterable[str],
        group_coordinator_id: int | None = None,
        include_authorized_operations: bool = False,
    ) -> list[GroupInformation]:
        """Describe classic groups; members' metadata and assignments decoded.

        Raises:
            KafkaError: a group's error.
        """
        results = self._run(self._machine.describe_consumer_groups, group_ids)
        raise_first(results)
        return [group_information(g) for g in results.values()]

    def delete_consumer_groups(
        self, group_ids: Iterable[str], group_coordinator_id: int | None = None
    ) -> list[tuple[str, Any]]:
        """Delete empty groups. Returns: ``(group_id, None or its KafkaError)`` each."""
        return list(self._run(self._machine.delete_consumer_groups, group_ids).items())

    def list_consumer_group_offsets(
        self,
        group_id: str,
        group_coordinator_id: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """kafka-python's dict of a group's committed offsets: every partition it
        committed, or ``partitions`` (offset -1 where it committed none).

        Raises:
            KafkaError: what the coordinator said of the group.
        """
        return one_group(self._run(self._machine.list_consumer_group_offsets, group_id, partitions))

    def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_coordinator_id: int | None = None,
    ) -> dict[TopicPartition, Any]:
        """Set a group's committed offsets (its consumers must have left).

        Returns:
            TopicPartition -> None, or that partition's KafkaError.

        Raises:
            KafkaError: what the coordinator said of the group.
        """
        return one_group(self._run(self._machine.alter_consumer_group_offsets, group_id, offsets))

    def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        group_coordinator_id: int | None = None,
    ) -> dict[TopicPartition, Any]:
        """Forget a group's committed offsets of ``partitions`` (KIP-496; refused per
        partition while a member subscribes to its topic).

        Returns:
            TopicPartition -> None, or that partition's KafkaError.

        Raises:
            KafkaError: what the coordinator said of the group.
        """
        m = self._machine
        return one_group(self._run(m.delete_consumer_group_offsets, group_id, partitions))

    # ---------------------------------------------------------------- partitions

    def list_offsets(
        self,
        topic_partition_specs: Mapping[TopicPartition, OffsetSpec | int],
        isolation_level: int = 0,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets by spec (OffsetSpec or a timestamp in ms).

        Raises:
            KafkaError: a partition's error.
        """
        results = self._run(
            self._machine.list_offsets,
            topic_partition_specs,
            timeout=seconds(timeout_ms),
            isolation_level=isolation_level,
        )
        return offsets_and_timestamps(results)

    list_partition_offsets = list_offsets

    def delete_records(
        self,
        records_to_delete: Mapping[TopicPartition, Any],
        timeout_ms: int | None = None,
        partition_leader_id: int | None = None,
    ) -> dict[TopicPartition, dict[str, int]]:
        """Delete records below offsets. Returns: partition -> ``{"low_watermark"}``.

        Raises:
            KafkaError: a partition's error.
        """
        results = self._run(
            self._machine.delete_records,
            before_offsets(records_to_delete),
            timeout=seconds(timeout_ms),
        )
        raise_first(results)
        return {tp: {"low_watermark": low} for tp, low in results.items()}

    def describe_log_dirs(
        self,
        topic_partitions: Iterable[TopicPartition] | None = None,
        brokers: Iterable[int] | None = None,
    ) -> list[dict[str, Any]]:
        """Every broker's (or ``brokers``') log directories.

        Returns:
            ``[{"broker": id, "log_dirs": [LogDirDescription]}]``.

        Raises:
            KafkaError: a broker's error.
        """
        m = self._machine
        results = self._run(m.describe_log_dirs, brokers, topic_partitions)
        raise_first(results)
        return [{"broker": node, "log_dirs": dirs} for node, dirs in results.items()]

    # ---------------------------------------------------------------------- ACLs

    def describe_acls(self, acl_filter: ACLFilter) -> tuple[list[ACL], None]:
        """kafka-python's ``(matching ACLs, error)``; the error is always None here.

        Raises:
            KafkaError: the broker's (SecurityDisabledError without an authorizer).
        """
        (result,) = self._run(self._machine.describe_acls, acl_filter).values()
        if isinstance(result, BaseException):
            raise result
        return list(result), None

    def create_acls(self, acls: Iterable[ACL]) -> dict[str, list[Any]]:
        """Create ACLs.

        Returns:
            ``{"succeeded": [ACL], "failed": [(ACL, KafkaError)]}``.
        """
        results = self._run(self._machine.create_acls, acls)
        return {
            "succeeded": [a for a, e in results.items() if e is None],
            "failed": [(a, e) for a, e in results.items() if e is not None],
        }

    def delete_acls(self, acl_filters: Iterable[ACLFilter]) -> list[tuple[ACLFilter, Any, Any]]:
        """Delete the ACLs matching each filter.

        Returns:
            ``(filter, [(ACL, None)], None)`` per filter, or ``(filter, [], its
            KafkaError)``.
        """
        results = self._run(self._machine.delete_acls, acl_filters)
        out: list[tuple[ACLFilter, Any, Any]] = []
        for f, r in results.items():
            if isinstance(r, BaseException):
                out.append((f, [], r))
            else:
                out.append((f, [(acl, None) for acl in r], None))
        return out


def _errors(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": name, "error_code": code_of(r), "error_message": str(r) if code_of(r) else None}
        for name, r in results.items()
    ]
