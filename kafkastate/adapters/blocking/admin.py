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
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kafkastate.adapters._admin import (
    GroupInformation,
    acl_list,
    before_offsets,
    checked,
    cluster_dict,
    code_of,
    common_versions,
    config_dicts,
    config_resource_list,
    error_classes,
    features_dict,
    group_dict,
    group_information,
    group_tuples,
    listing_dicts,
    messages,
    offsets_and_timestamps,
    one_group,
    only,
    page_dict,
    partitions_of,
    quorum_dict,
    raise_first,
    reassignment_dicts,
    scram_dicts,
    scram_results,
    seconds,
    topic_dicts,
)
from kafkastate.adapters._admin import feature_updates as as_feature_updates
from kafkastate.adapters._common import no_brokers_error, report_statistics, resolve, tls_context
from kafkastate.adapters.anyio.admin import raise_unsupported
from kafkastate.adapters.blocking.io import SocketLoop
from kafkastate.admin import (
    ACL,
    AbortTransactionSpec,
    ACLFilter,
    ClientQuotaAlteration,
    ClientQuotaFilterComponent,
    ClusterDescription,
    ConfigResource,
    ConfigResourceType,
    ElectionType,
    MemberToRemove,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    PartitionProducerState,
    QuotaEntity,
    TransactionDescription,
    TransactionListing,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafkastate.core import report
from kafkastate.core.admin import AdminMachine, AdminOperationCompleted, OpId
from kafkastate.core.admin.transactions import FINISHED_STATES, hanging_transactions
from kafkastate.core.admin.types import reset_offset
from kafkastate.core.config import admin_config
from kafkastate.core.report import Report, StatisticsReported
from kafkastate.errors import (
    ElectionNotNeededError,
    KafkaConfigurationError,
    KafkaConnectionError,
    KafkaError,
    TransactionalIdNotFoundError,
)
from kafkastate.otel_metrics import metrics_export_of
from kafkastate.structs import (
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
    TopicPartitionReplica,
)

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
            token_provider=options["sasl_oauth_token_provider"],
        )
        self._done: dict[OpId, AdminOperationCompleted] = {}
        self._stats_cb = options["stats_cb"]
        self._closed = False
        self._export = metrics_export_of(options, self.metrics)
        wait = options["bootstrap_timeout_ms"] / 1000
        try:
            client = self._machine.client
            client.request_metadata_update()
            self._pump(
                lambda: bool(client.cluster.brokers) or client.authentication_refused is not None,
                time.monotonic() + wait,
            )
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
        if self._export is not None:
            self._export.close()
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
            if self._loop.serve(event):
                continue
            match event:
                case AdminOperationCompleted(op_id=op):
                    self._done[op] = event
                case StatisticsReported(stats=stats):
                    report_statistics(self._stats_cb, stats)

    def _run(self, command: Callable[..., OpId], *args: Any, **kwargs: Any) -> dict[Any, Any]:
        if self._closed:
            raise KafkaConnectionError("KafkaAdminClient is closed")
        # Between calls nothing runs the machine's timers: run what fell due meanwhile
        # (connections idle past connections_max_idle_ms close) before the command could
        # pick an idle connection as a live one.
        self._machine.handle_timer(now=time.monotonic())
        self._events()
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
        wait_for_metadata: bool = False,
    ) -> dict[str, Any]:
        """Create topics; with ``wait_for_metadata``, then wait until the ones created have
        a leader for every partition (:meth:`wait_for_topics`, within ``timeout_ms``).

        Returns:
            ``{"topics": [{"name", "topic_id", "error_code", "error_message",
            "num_partitions", "replication_factor"}]}``.

        Raises:
            KafkaError: the first topic's error (``raise_errors``).
            KafkaConfigurationError: ``wait_for_metadata`` with ``validate_only``.
        """
        if validate_only and wait_for_metadata:
            raise KafkaConfigurationError("validate_only and wait_for_metadata exclude each other")
        m = self._machine
        results = self._run(
            m.create_topics, new_topics, timeout=seconds(timeout_ms), validate_only=validate_only
        )
        if raise_errors:
            raise_first(results)
        created = [name for name, r in results.items() if not isinstance(r, KafkaError)]
        if wait_for_metadata and created:
            raise_first(self._run(m.wait_for_topics, created, timeout=seconds(timeout_ms)))
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
        return checked(
            self._run(
                m.alter_configs,
                config_resources,
                validate_only=validate_only,
                incremental=incremental,
            )
        )

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
        """Describe classic and KIP-848 groups; members' subscriptions and assignments
        decoded.

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
        return acl_list(self._run(self._machine.describe_acls, acl_filter)), None

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

    # ------------------------------------------------ quotas and SCRAM credentials

    def describe_client_quotas(
        self, components: Iterable[ClientQuotaFilterComponent] = (), strict: bool = False
    ) -> dict[QuotaEntity, dict[str, float]]:
        """Client quotas matching a filter (kafka-python has no such call: kafkastate's
        shape). Returns: entity (sorted ``(type, name)`` pairs) -> {quota: value}.

        Raises:
            KafkaError: the broker's error.
        """
        result: dict[QuotaEntity, dict[str, float]] = only(
            self._run(self._machine.describe_client_quotas, components, strict=strict)
        )
        return result

    def alter_client_quotas(
        self, alterations: Iterable[ClientQuotaAlteration], validate_only: bool = False
    ) -> dict[QuotaEntity, Any]:
        """Set or remove client quotas. Returns: entity -> None or KafkaError."""
        m = self._machine
        return self._run(m.alter_client_quotas, alterations, validate_only=validate_only)

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, dict[str, Any]]:
        """SCRAM credentials of ``users`` (None: every user that has one).

        Returns:
            user -> ``{"error": None or its message, "credential_infos": [{"mechanism":
            ScramMechanism, "iterations": int}]}``.

        Raises:
            KafkaError: the broker's error for the request as a whole.
        """
        results = self._run(self._machine.describe_user_scram_credentials, users)
        return scram_dicts(scram_results(results, users))

    def alter_user_scram_credentials(
        self, alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion]
    ) -> dict[str, str | None]:
        """Add, replace or delete SCRAM credentials (passwords are salted here, PBKDF2
        with the mechanism's hash). Returns: user -> None or its error message."""
        return messages(self._run(self._machine.alter_user_scram_credentials, alterations))

    # -------------------------------------------------------- replicas and leaders

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, Any]:
        """Move partitions to new replica sets (None: cancel the ongoing move).

        Returns:
            TopicPartition -> None, or that partition's KafkaError.
        """
        m = self._machine
        return self._run(
            m.alter_partition_reassignments, reassignments, timeout=seconds(timeout_ms)
        )

    def list_partition_reassignments(
        self, topic_partitions: Any = None, timeout_ms: int | None = None
    ) -> dict[TopicPartition, dict[str, list[int]]]:
        """Reassignments in progress, of ``topic_partitions`` (``{topic: [ids]}``,
        TopicPartitions, or None: all).

        Returns:
            TopicPartition -> ``{"replicas", "adding_replicas", "removing_replicas"}``.

        Raises:
            KafkaError: the broker's error.
        """
        m = self._machine
        results = self._run(
            m.list_partition_reassignments,
            partitions_of(topic_partitions),
            timeout=seconds(timeout_ms),
        )
        return reassignment_dicts(only(results))

    def elect_leaders(
        self,
        election_type: ElectionType | int,
        topic_partitions: Any = None,
        timeout_ms: int | None = None,
        raise_errors: bool = True,
    ) -> dict[TopicPartition, Any]:
        """Elect leaders (0 preferred, 1 unclean) of ``topic_partitions`` (``{topic:
        [ids]}``, a list of topic names: all their partitions, TopicPartitions, or None:
        every partition).

        Returns:
            TopicPartition -> None, or its KafkaError (kafka-python returns the raw
            response instead).

        Raises:
            KafkaError: with ``raise_errors``, the first error other than
                ElectionNotNeededError.
        """
        if topic_partitions is not None and all(isinstance(t, str) for t in topic_partitions):
            described = self._described(list(topic_partitions))
            raise_first(described)
            topic_partitions = {
                t: [p.partition for p in d.partitions] for t, d in described.items()
            }
        m = self._machine
        parts = partitions_of(topic_partitions)
        results = self._run(m.elect_leaders, election_type, parts, timeout=seconds(timeout_ms))
        if parts is None:
            results = dict(only(results))
        if raise_errors:
            raise_first(
                {k: v for k, v in results.items() if not isinstance(v, ElectionNotNeededError)}
            )
        return results

    def describe_topic_partitions(
        self,
        topics: Iterable[str] | None = None,
        response_partition_limit: int = 2000,
        cursor: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """One page of DescribeTopicPartitions (Kafka 3.7+), from ``cursor``
        (``{"topic_name", "partition_index"}``).

        Returns:
            ``{"topics": [{"error_code", "name", "topic_id", "is_internal", "partitions",
            "topic_authorized_operations"}], "next_cursor": None or a cursor}``.
        """
        start = None
        if cursor is not None:
            start = TopicPartition(cursor["topic_name"], int(cursor["partition_index"]))
        page = only(
            self._run(
                self._machine.describe_topic_partitions,
                topics,
                partition_limit=response_partition_limit,
                cursor=start,
                one_page=True,
            )
        )
        return page_dict(page)

    def describe_features(self, send_request_to_controller: bool = False) -> dict[str, Any]:
        """The cluster's feature flags (any broker answers: KRaft brokers know them).

        Returns:
            ``{"supported_features": {name: (min, max)}, "finalized_features": {name:
            (min, max)}, "finalized_features_epoch": int or None}``.
        """
        return features_dict(only(self._run(self._machine.describe_features)))

    def update_features(
        self,
        feature_updates: Mapping[str, Any],
        validate_only: bool = False,
        timeout_ms: int = 60000,
    ) -> dict[str, str]:
        """Change finalized feature levels: ``{feature: level}`` or ``{feature:
        (upgrade_type, level)}``.

        Returns:
            feature -> ``"OK"`` or its error message.
        """
        results = self._run(
            self._machine.update_features,
            as_feature_updates(feature_updates),
            validate_only=validate_only,
            timeout=seconds(timeout_ms),
        )
        return {k: "OK" if v is None else v for k, v in messages(results).items()}

    # ----------------------------------------------------------------- transactions

    def list_transactions(
        self,
        broker_ids: Iterable[int] | None = None,
        producer_id_filters: Iterable[int] | None = None,
        state_filters: Iterable[str] | None = None,
        duration_filter_ms: int | None = None,
        transactional_id_pattern: str | None = None,
    ) -> dict[int, list[TransactionListing]]:
        """Transactions every broker (or those given) coordinates.

        Returns:
            broker id -> [TransactionListing].

        Raises:
            KafkaError: a broker's error.
        """
        return checked(
            self._run(
                self._machine.list_transactions,
                broker_ids,
                state_filters=state_filters or (),
                producer_id_filters=producer_id_filters or (),
                duration_filter_ms=duration_filter_ms,
                transactional_id_pattern=transactional_id_pattern,
            )
        )

    def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        """Transactions at their coordinators.

        Raises:
            KafkaError: an id's error (TransactionalIdNotFoundError...).
        """
        return checked(self._run(self._machine.describe_transactions, transactional_ids))

    def describe_producers(
        self, partitions: Iterable[TopicPartition], broker_id: int | None = None
    ) -> dict[TopicPartition, PartitionProducerState]:
        """Active producers of partitions, at their leaders (``broker_id`` is accepted
        and ignored).

        Raises:
            KafkaError: a partition's error.
        """
        return checked(self._run(self._machine.describe_producers, partitions))

    def abort_transaction(self, spec: AbortTransactionSpec) -> None:
        """Abort a hanging transaction on one partition (an abort marker at its leader).

        Raises:
            KafkaError: the leader's refusal.
        """
        only(self._run(self._machine.abort_transaction, spec))

    def fence_producers(self, transactional_ids: Iterable[str]) -> dict[str, Any]:
        """Fence the producers of transactional ids (no kafka-python equivalent).

        Returns:
            id -> ProducerIdAndEpoch, or its KafkaError.
        """
        return self._run(self._machine.fence_producers, transactional_ids)

    def remove_group_members(
        self,
        group_id: str,
        members: Iterable[MemberToRemove] | None = None,
        group_coordinator_id: int | None = None,
    ) -> dict[MemberToRemove, Any]:
        """Remove members (None: every member) from a classic group.

        Returns:
            MemberToRemove -> None, or its KafkaError (kafka-python: the error class).

        Raises:
            KafkaError: the group's error.
        """
        return one_group(self._run(self._machine.remove_group_members, group_id, members))

    # ------------------------------------------------------ kafka-python 3.0's groups

    def list_groups(
        self,
        broker_ids: Iterable[int] | None = None,
        states_filter: Iterable[str] | None = None,
        types_filter: Iterable[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Every group every broker (or those given) coordinates, of the states
        (``"Stable"``, ``"Empty"``...; Kafka 2.6+) and types (``"classic"``,
        ``"consumer"``; Kafka 4.0+) given.

        Returns:
            ``[{"group_id", "protocol_type", "group_state", "group_type"}]``.

        Raises:
            KafkaError: a broker's error.
        """
        results = self._run(
            self._machine.list_consumer_groups,
            broker_ids,
            states_filter=states_filter or (),
            types_filter=types_filter or (),
        )
        return listing_dicts(results)

    def describe_groups(
        self,
        group_ids: Iterable[str],
        group_coordinator_id: int | None = None,
        include_authorized_operations: bool = False,
    ) -> dict[str, dict[str, Any]]:
        """Describe classic and KIP-848 groups.

        Returns:
            group id -> ``{"error": None or its message, "group_id", "group_state",
            "protocol_type", "protocol_data", "group_type", "members": [{"member_id",
            "group_instance_id", "client_id", "client_host", "member_metadata",
            "member_assignment"}], "authorized_operations"}``; the member metadata and
            assignment decoded (Subscription, Assignment).
        """
        results = self._run(self._machine.describe_consumer_groups, group_ids)
        return {group_id: group_dict(g) for group_id, g in results.items()}

    def list_group_offsets(
        self, group_specs: Mapping[str, Iterable[TopicPartition] | None] | Iterable[str] | str
    ) -> dict[str, dict[TopicPartition, OffsetAndMetadata]]:
        """Committed offsets of groups: ``{group id: partitions or None (all)}``, or
        group ids (all of each group's).

        Returns:
            group id -> TopicPartition -> OffsetAndMetadata.

        Raises:
            KafkaError: a group's or a partition's error.
        """
        specs: Mapping[str, Iterable[TopicPartition] | None]
        if isinstance(group_specs, str):
            specs = {group_specs: None}
        elif isinstance(group_specs, Mapping):
            specs = group_specs
        else:
            specs = dict.fromkeys(group_specs)
        m = self._machine
        return {
            group_id: one_group(self._run(m.list_consumer_group_offsets, group_id, partitions))
            for group_id, partitions in specs.items()
        }

    def delete_groups(
        self, group_ids: Iterable[str], group_coordinator_id: int | None = None
    ) -> dict[str, str]:
        """Delete empty groups.

        Returns:
            group id -> ``"OK"``, or the name of its error class.
        """
        results = self._run(self._machine.delete_consumer_groups, group_ids)
        return {g: "OK" if r is None else type(r).__name__ for g, r in results.items()}

    def alter_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_coordinator_id: int | None = None,
    ) -> dict[TopicPartition, type[KafkaError]]:
        """:meth:`alter_consumer_group_offsets` in kafka-python 3.0's shape: TopicPartition
        -> its error class (NoError: done)."""
        return error_classes(self.alter_consumer_group_offsets(group_id, offsets))

    def delete_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        group_coordinator_id: int | None = None,
    ) -> dict[TopicPartition, type[KafkaError]]:
        """:meth:`delete_consumer_group_offsets` in kafka-python 3.0's shape:
        TopicPartition -> its error class (NoError: done)."""
        return error_classes(self.delete_consumer_group_offsets(group_id, partitions))

    # ------------------------------------------------- brokers, quorum, readiness

    def describe_metadata_quorum(self) -> dict[str, Any]:
        """The KRaft metadata quorum (``__cluster_metadata`` partition 0): its leader,
        epoch, high watermark, voters and observers, and the controllers' endpoints
        (Kafka 3.8+).

        Returns:
            The DescribeQuorum response's shape: ``{"topics": [{"topic_name",
            "partitions": [{"partition_index", "leader_id", "leader_epoch",
            "high_watermark", "current_voters", "observers", "error"}]}], "nodes"}``.

        Raises:
            KafkaError: the broker's or the quorum's error.
        """
        return quorum_dict(only(self._run(self._machine.describe_metadata_quorum)))

    def alter_replica_log_dirs(
        self, replica_assignments: Mapping[Any, str]
    ) -> dict[TopicPartitionReplica, type[KafkaError]]:
        """Move replicas to other log directories of their brokers
        (TopicPartitionReplica or ``(topic, partition, broker id)`` -> absolute path).

        Returns:
            TopicPartitionReplica -> its error class (NoError: done).
        """
        m = self._machine
        return error_classes(self._run(m.alter_replica_log_dirs, replica_assignments))

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The API versions every broker supports: API key -> ``(min, max)``.

        Raises:
            KafkaError: a broker's error.
        """
        return common_versions(self._run(self._machine.api_versions))

    def get_broker_version_data(self, broker_id: int) -> dict[str, Any]:
        """What one broker said of itself in ApiVersions.

        Returns:
            ``{"broker_id", "api_versions": {API key: (min, max)}}``.

        Raises:
            KafkaError: the broker's error (or no such broker).
        """
        versions = only(self._run(self._machine.api_versions, [broker_id]))
        return {"broker_id": broker_id, "api_versions": versions}

    def list_config_resources(
        self, resource_types: Iterable[ConfigResourceType | str | int] | None = None
    ) -> dict[str, list[str]]:
        """The config resources the cluster knows (Kafka 4.1+ for every type, KIP-1142),
        of ``resource_types`` (ConfigResourceType, its name or code; None: all).

        Returns:
            resource type name (``"topic"``, ``"group"``...) -> resource names.

        Raises:
            KafkaError: the broker's error.
        """
        m = self._machine
        listed = self._run(m.list_config_resources, resource_types or ())
        out: dict[str, list[str]] = {}
        for label, name in config_resource_list(listed):
            key = label.name.lower() if isinstance(label, ConfigResourceType) else str(label)
            out.setdefault(key, []).append(name)
        return out

    def reset_configs(
        self,
        config_resources: Iterable[ConfigResource],
        validate_only: bool = False,
        raise_on_unknown: bool = True,
        incremental: bool | None = None,
    ) -> dict[Any, Any]:
        """Reset configs to their defaults: each resource's ``configs`` names the keys
        (a dict's values are ignored); an IncrementalAlterConfigs DELETE of each.

        Returns:
            ``(ConfigResourceType, name) -> None``.

        Raises:
            KafkaError: the first resource's error.
        """
        deletions = [
            ConfigResource(r.resource_type, r.name, dict.fromkeys(r.configs or ()))
            for r in config_resources
        ]
        return self.alter_configs(deletions, validate_only=validate_only, incremental=True)

    def wait_for_topics(self, topic_names: Iterable[str], timeout_ms: int = 10000) -> None:
        """Wait until each topic is known with a leader for every partition (a created
        topic's metadata lags its creation).

        Raises:
            KafkaTimeoutError: a topic still not ready after ``timeout_ms`` (it says what
                it lacked).
        """
        names = list(topic_names)
        if names:
            m = self._machine
            raise_first(self._run(m.wait_for_topics, names, timeout=timeout_ms / 1000))

    def reset_group_offsets(
        self,
        group_id: str,
        offset_specs: Mapping[TopicPartition, OffsetSpec | int],
        group_coordinator_id: int | None = None,
    ) -> dict[TopicPartition, dict[str, Any]]:
        """Move a group's committed offsets (its consumers must have left): to an
        OffsetSpec (EARLIEST, LATEST, MAX_TIMESTAMP, resolved by ListOffsets) or an
        explicit offset (an int), kept inside each log's ``[earliest, latest]``; the
        committed metadata is kept.

        Returns:
            TopicPartition -> ``{"error": its error class (NoError: done), "offset": the
            offset committed}``.

        Raises:
            KafkaError: the group's error, or a partition's ListOffsets error.
        """
        if not offset_specs:
            return {}
        tps = [TopicPartition(*tp) for tp in offset_specs]
        m = self._machine
        committed = one_group(self._run(m.list_consumer_group_offsets, group_id, tps))
        earliest = self.list_offsets(dict.fromkeys(tps, OffsetSpec.EARLIEST))
        latest = self.list_offsets(dict.fromkeys(tps, OffsetSpec.LATEST))
        specs = {tp: s for tp, s in offset_specs.items() if isinstance(s, OffsetSpec)}
        resolved = self.list_offsets(specs) if specs else {}
        to_commit = {}
        for tp, spec in offset_specs.items():
            tp = TopicPartition(*tp)
            target = resolved[tp].offset if tp in resolved else int(spec)
            new = reset_offset(target, earliest[tp].offset, latest[tp].offset)
            before = committed.get(tp)
            metadata = before.metadata if before is not None and before.offset >= 0 else ""
            to_commit[tp] = OffsetAndMetadata(new, metadata, -1)
        errors = self.alter_group_offsets(group_id, to_commit)
        return {tp: {"error": errors[tp], "offset": o.offset} for tp, o in to_commit.items()}

    def find_hanging_transactions(
        self, broker_ids: Iterable[int] | None = None, max_transaction_timeout_ms: int = 900000
    ) -> list[dict[str, Any]]:
        """Open transactions older than ``max_transaction_timeout_ms`` (default 15 min,
        the broker's default ``transaction.max.timeout.ms``), by their start time at the
        coordinator and this machine's clock: what ``kafka-transactions.sh
        find-hanging`` reports.

        Returns:
            ``[{"transactional_id", "producer_id", "producer_epoch", "state", "age_ms",
            "coordinator_id", "topic_partitions"}]``, oldest first.

        Raises:
            KafkaError: a broker's ListTransactions error, or a coordinator's
                DescribeTransactions error for a listed id (other than the id having
                expired meanwhile).
        """
        listed = self.list_transactions(broker_ids)
        # only open transactions can hang: describing the finished ones is work for nothing
        ids = sorted(
            {
                t.transactional_id
                for ts in listed.values()
                for t in ts
                if t.state not in FINISHED_STATES
            }
        )
        if not ids:
            return []
        described = self._run(self._machine.describe_transactions, ids)
        for d in described.values():
            # an id that expired since it was listed is gone; any other error is raised,
            # not read as "not hanging"
            if isinstance(d, KafkaError) and not isinstance(d, TransactionalIdNotFoundError):
                raise d
        found = {tid: d for tid, d in described.items() if not isinstance(d, KafkaError)}
        now_ms = int(time.time() * 1000)  # the coordinator's start times are wall-clock ms
        return [
            {
                "transactional_id": tid,
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "state": d.state,
                "age_ms": age,
                "coordinator_id": d.coordinator_id,
                "topic_partitions": sorted(d.topic_partitions),
            }
            for tid, d, age in hanging_transactions(
                found, now_ms=now_ms, threshold_ms=max_transaction_timeout_ms
            )
        ]


def _errors(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": name, "error_code": code_of(r), "error_message": str(r) if code_of(r) else None}
        for name, r in results.items()
    ]
