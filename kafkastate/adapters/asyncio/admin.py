"""aiokafka's ``AIOKafkaAdminClient`` on asyncio.

It runs the async adapter's admin client (:func:`kafkastate.adapters.anyio.admin.running_admin`)
in a background task that ``start()`` creates and ``close()`` ends; every call is one
command to the :class:`~kafkastate.core.admin.AdminMachine`, which routes it (any broker,
the group coordinator, the partition leader, every broker), retries what is retriable
within the call's timeout, and answers per resource.

Return shapes: aiokafka's where they are Python values (``list_topics``,
``describe_topics``, ``describe_cluster``, ``list_consumer_groups``,
``list_consumer_group_offsets``, ``delete_records``). Where aiokafka hands back the raw
protocol response (``create_topics``, ``delete_topics``, ``describe_configs``,
``alter_configs``, ``create_partitions``, ``describe_consumer_groups``), kafkastate returns
the machine's per-resource dict instead: name (or ``(ConfigResourceType, name)``) -> value
or KafkaError. ``group_coordinator_id`` is accepted and ignored: the coordinator is found,
and followed when it moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kafkastate.adapters._admin import (
    before_offsets,
    cluster_dict,
    group_tuples,
    offsets_and_timestamps,
    raise_first,
    seconds,
    topic_dicts,
)
from kafkastate.adapters._common import resolve
from kafkastate.adapters.anyio.admin import Admin, AdminCalls, running_admin
from kafkastate.adapters.asyncio.background import Background, Lifecycle
from kafkastate.admin import (
    ACLFilter,
    ConfigResource,
    ElectionType,
    FeatureUpdate,
    GroupDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    PartitionReassignment,
    TopicPartitionsPage,
)
from kafkastate.core.admin import AdminMachine, OpId
from kafkastate.core.config import admin_config
from kafkastate.errors import KafkaConnectionError
from kafkastate.structs import OffsetAndMetadata, OffsetAndTimestamp, TopicPartition

__all__ = ["AIOKafkaAdminClient"]


class AIOKafkaAdminClient(Lifecycle, AdminCalls):
    """An asyncio admin client with aiokafka's interface, and the rest of the admin
    operations (``incremental_alter_configs``, ``delete_consumer_groups``,
    ``alter_consumer_group_offsets``, ``delete_consumer_group_offsets``, ``list_offsets``,
    quotas, SCRAM credentials, reassignments, elections, features, transactions, member
    removal: docs/admin.md).

    No task is started before :meth:`start`.

    Args:
        options: aiokafka's keyword options with its defaults (``bootstrap_servers``,
            ``client_id``, ``request_timeout_ms`` (40 s), ``retry_backoff_ms``,
            ``metadata_max_age_ms``, ``connections_max_idle_ms``, TLS, SASL...); every
            admin option: docs/options.md.

    Raises:
        TypeError: an unknown option.
        KafkaConfigurationError: a bad value, or an option kafkastate does not implement.
    """

    def __init__(self, **options: Any) -> None:
        self._options = resolve("admin", "aiokafka", options, owner="AIOKafkaAdminClient")
        self._config = admin_config(self._options)
        self._background: Background[Admin] = Background("AIOKafkaAdminClient")
        self._admin: Admin | None = None

    async def start(self) -> None:
        """Start the background task and wait for a bootstrap server to answer.

        Raises:
            NoBrokersAvailable: none answered within ``request_timeout_ms``.
            RuntimeError: already started.
        """
        self._admin = await self._background.start(self._run)
        self._observed = self._admin

    async def close(self) -> None:
        """Close the connections and end the background task."""
        try:
            await self._background.stop()
        finally:
            self._admin = None

    stop = close

    async def _run(self, ready: asyncio.Future[Admin], stopping: asyncio.Event) -> None:
        async with running_admin(self._options, self._config) as admin:
            ready.set_result(admin)
            await stopping.wait()

    def _running(self) -> Admin:
        if self._admin is None:
            raise KafkaConnectionError("AIOKafkaAdminClient is not started")
        return self._admin

    def _ops(self) -> AdminMachine:
        return self._running().machine

    async def _call(
        self, command: Callable[..., OpId], *args: Any, **kwargs: Any
    ) -> dict[Any, Any]:
        return await self._running()._call(command, *args, **kwargs)

    # -------------------------------------------------------------------- topics

    async def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> dict[str, Any]:
        """Create topics. Returns: name -> CreatedTopic or that topic's KafkaError."""
        return await self._running().create_topics(
            new_topics, timeout=seconds(timeout_ms), validate_only=validate_only
        )

    async def delete_topics(
        self, topics: Iterable[str], timeout_ms: int | None = None
    ) -> dict[str, Any]:
        """Delete topics. Returns: name -> None or that topic's KafkaError."""
        return await self._running().delete_topics(topics, timeout=seconds(timeout_ms))

    async def list_topics(self) -> list[str]:
        """Every topic's name."""
        return await self._running().list_topics()

    async def describe_topics(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Topics (None: all) as aiokafka's dicts (``topic``, ``partitions`` with
        ``partition``, ``leader``, ``replicas``, ``isr``...; and ``topic_id``)."""
        return topic_dicts(await self._running().describe_topics(topics), names="aiokafka")

    async def describe_cluster(self) -> dict[str, Any]:
        """``{"brokers": [{"node_id", "host", "port", "rack"}], "cluster_id",
        "controller_id"}``."""
        return cluster_dict(await self._running().describe_cluster(), broker_key="node_id")

    async def create_partitions(
        self,
        topic_partitions: Mapping[str, NewPartitions],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> dict[str, Any]:
        """Grow topics. Returns: name -> None.

        Raises:
            KafkaError: the first topic's error (as aiokafka raises).
        """
        results = await self._running().create_partitions(
            topic_partitions, timeout=seconds(timeout_ms), validate_only=validate_only
        )
        raise_first(results)
        return results

    # ------------------------------------------------------------------- configs

    async def describe_configs(
        self, config_resources: Iterable[ConfigResource], include_synonyms: bool = False
    ) -> dict[Any, Any]:
        """Configs of topics, brokers, broker loggers. Returns: (ConfigResourceType,
        name) -> {config name: ConfigEntry} or KafkaError."""
        return await self._running().describe_configs(
            config_resources, include_synonyms=include_synonyms
        )

    async def alter_configs(self, config_resources: Iterable[ConfigResource]) -> dict[Any, Any]:
        """Replace configs. Returns: (ConfigResourceType, name) -> None or KafkaError."""
        return await self._running().alter_configs(config_resources)

    async def incremental_alter_configs(
        self, config_resources: Iterable[ConfigResource], validate_only: bool = False
    ) -> dict[Any, Any]:
        """Change single configs (value: set, None: delete, AlterConfigOp). Returns:
        (ConfigResourceType, name) -> None or KafkaError."""
        return await self._running().incremental_alter_configs(
            config_resources, validate_only=validate_only
        )

    # -------------------------------------------------------------------- groups

    async def list_consumer_groups(
        self, broker_ids: Iterable[int] | None = None
    ) -> list[tuple[str, str]]:
        """``(group_id, protocol_type)`` of every group.

        Raises:
            KafkaError: a broker's error.
        """
        return group_tuples(await self._running().list_consumer_groups(broker_ids))

    async def describe_consumer_groups(
        self,
        group_ids: Iterable[str],
        group_coordinator_id: int | None = None,
        include_authorized_operations: bool = False,
    ) -> list[GroupDescription]:
        """Describe classic and KIP-848 groups (members with their subscriptions and
        assignments; ``group_type`` tells which).

        Raises:
            KafkaError: a group's error (as aiokafka raises).
        """
        results = await self._running().describe_consumer_groups(group_ids)
        raise_first(results)
        return list(results.values())

    async def find_coordinator(self, group_id: str, coordinator_type: int = 0) -> int:
        """The broker id coordinating a group (``coordinator_type`` 0) or a
        transactional id (1).

        Raises:
            KafkaError: the coordinator's error.
        """
        return await self._running().find_coordinator(group_id, coordinator_type)

    async def delete_consumer_groups(
        self, group_ids: Iterable[str], group_coordinator_id: int | None = None
    ) -> dict[str, Any]:
        """Delete empty groups. Returns: id -> None or KafkaError."""
        return await self._running().delete_consumer_groups(group_ids)

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        group_coordinator_id: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """A group's committed offsets (all, or ``partitions``'; -1: none).

        Raises:
            KafkaError: the group's error.
        """
        return await self._running().list_consumer_group_offsets(group_id, partitions)

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_coordinator_id: int | None = None,
    ) -> dict[TopicPartition, Any]:
        """Commit offsets for a group without active members. Returns: partition ->
        None or KafkaError."""
        return await self._running().alter_consumer_group_offsets(group_id, offsets)

    async def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        group_coordinator_id: int | None = None,
    ) -> dict[TopicPartition, Any]:
        """Delete committed offsets. Returns: partition -> None or KafkaError."""
        return await self._running().delete_consumer_group_offsets(group_id, partitions)

    # ---------------------------------------------------------------- partitions

    async def list_offsets(
        self,
        topic_partition_specs: Mapping[TopicPartition, OffsetSpec | int],
        isolation_level: int = 0,
    ) -> dict[TopicPartition, OffsetAndTimestamp]:
        """Offsets by spec (OffsetSpec or a timestamp in ms).

        Raises:
            KafkaError: a partition's error.
        """
        results = await self._running().list_offsets(
            topic_partition_specs, isolation_level=isolation_level
        )
        return offsets_and_timestamps(results)

    async def delete_records(
        self, records_to_delete: Mapping[TopicPartition, Any], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete records below offsets (RecordsToDelete or int). Returns: partition ->
        its new low watermark.

        Raises:
            KafkaError: a partition's error (as aiokafka raises).
        """
        results = await self._running().delete_records(
            before_offsets(records_to_delete), timeout=seconds(timeout_ms)
        )
        raise_first(results)
        return results

    async def describe_log_dirs(
        self,
        topic_partitions: Iterable[TopicPartition] | None = None,
        brokers: Iterable[int] | None = None,
    ) -> dict[int, Any]:
        """Log directories. Returns: broker id -> [LogDirDescription] or KafkaError."""
        return await self._running().describe_log_dirs(brokers, topic_partitions)

    # ---------------------------------------------------------------------- ACLs
    # describe_acls and create_acls are AdminCalls' (aiokafka's signatures)

    async def delete_acls(self, acl_filters: Iterable[ACLFilter]) -> dict[ACLFilter, Any]:
        """Delete ACLs. Returns: filter -> [ACL deleted] or KafkaError."""
        return await self._running().delete_acls(acl_filters)

    # quotas, SCRAM credentials, describe_features, transactions and remove_group_members are
    # AdminCalls' too (the anyio Admin's, taking its ``timeout`` keyword as well)

    # -------------------------------------------------------- replicas and leaders

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, Any]:
        """Move partitions to new replicas (None: cancel). Returns: partition -> None or
        KafkaError."""
        running = self._running()
        return await running.alter_partition_reassignments(
            reassignments, timeout=seconds(timeout_ms)
        )

    async def list_partition_reassignments(
        self, topic_partitions: Iterable[TopicPartition] | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """Reassignments in progress. Returns: partition -> PartitionReassignment.

        Raises:
            KafkaError: the broker's error.
        """
        return await self._running().list_partition_reassignments(topic_partitions)

    async def elect_leaders(
        self,
        election_type: ElectionType | int = ElectionType.PREFERRED,
        topic_partitions: Iterable[TopicPartition] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, Any]:
        """Elect leaders (None: of every partition). Returns: partition -> None or
        KafkaError (ElectionNotNeededError: nothing to do)."""
        running = self._running()
        return await running.elect_leaders(
            election_type, topic_partitions, timeout=seconds(timeout_ms)
        )

    async def describe_topic_partitions(
        self,
        topics: Iterable[str] | None = None,
        response_partition_limit: int = 2000,
        cursor: TopicPartition | None = None,
        one_page: bool = False,
    ) -> TopicPartitionsPage:
        """Topics with DescribeTopicPartitions (Kafka 3.7+), paged by
        ``response_partition_limit``: every page from ``cursor`` (or one).

        Raises:
            UnsupportedVersionError: a broker older than 3.7.
        """
        return await self._running().describe_topic_partitions(
            topics, partition_limit=response_partition_limit, cursor=cursor, one_page=one_page
        )

    async def update_features(
        self,
        feature_updates: Mapping[str, FeatureUpdate | int],
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, Any]:
        """Change finalized feature levels. Returns: feature -> None or KafkaError."""
        return await self._running().update_features(
            feature_updates, validate_only=validate_only, timeout=seconds(timeout_ms)
        )
