"""The async admin client, on anyio (asyncio or trio): :func:`open_admin` and :class:`Admin`.

Every call gives the :class:`~kafkastate.core.admin.AdminMachine` one command and waits
for its :class:`~kafkastate.core.admin.AdminOperationCompleted`; routing, retries and
deadlines are the machine's, the sockets the shared :class:`AsyncDriver`'s. Results are
the machine's: one entry per resource, its value or its
:class:`~kafkastate.errors.KafkaError` (one topic's failure does not hide another's
success). An operation the broker does not support raises UnsupportedVersionError.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio

from kafkastate.adapters._admin import (
    acl_list,
    checked,
    config_resource_list,
    one_group,
    only,
    scram_results,
)
from kafkastate.adapters._common import machine_rng, resolve, tls_context
from kafkastate.adapters.anyio.driver import AsyncDriver, wait_for_cluster
from kafkastate.adapters.anyio.observe import Observed
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
    FeatureMetadata,
    FeatureUpdate,
    MemberToRemove,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    PartitionReassignment,
    QuorumDescription,
    QuotaEntity,
    TopicDescription,
    TopicPartitionsPage,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafkastate.core.admin import AdminMachine, AdminOperationCompleted, OpId
from kafkastate.core.admin.machine import AdminConfig
from kafkastate.core.client import MetadataUpdated
from kafkastate.core.config import admin_config
from kafkastate.errors import KafkaConnectionError, UnsupportedVersionError
from kafkastate.otel_metrics import metrics_export_of
from kafkastate.structs import OffsetAndMetadata, TopicPartition, TopicPartitionReplica

__all__ = ["Admin", "AdminCalls", "open_admin", "running_admin"]


def raise_unsupported(results: Mapping[Any, Any]) -> None:
    """Raise the first UnsupportedVersionError among ``results``: the operation as a
    whole is not available, which is no per-resource answer."""
    for value in results.values():
        if isinstance(value, UnsupportedVersionError):
            raise value


class AdminCalls:
    """The admin operations whose signature and result the async faces share (:class:`Admin`
    and aiokafka's ``AIOKafkaAdminClient``): written once, each one command to the
    :class:`AdminMachine` through ``_call``. A face gives ``_ops`` (its machine) and
    ``_call`` (run one command, wait for its results)."""

    def _ops(self) -> AdminMachine:
        raise NotImplementedError

    async def _call(
        self, command: Callable[..., OpId], *args: Any, **kwargs: Any
    ) -> dict[Any, Any]:
        raise NotImplementedError

    async def describe_acls(
        self, acl_filter: ACLFilter, *, timeout: float | None = None
    ) -> list[ACL]:
        """The ACLs matching a filter.

        Raises:
            KafkaError: the broker's error (SecurityDisabledError without an authorizer).
        """
        return acl_list(await self._call(self._ops().describe_acls, acl_filter, timeout=timeout))

    async def create_acls(
        self, acls: Iterable[ACL], *, timeout: float | None = None
    ) -> dict[ACL, Any]:
        """Create ACLs. Returns: ACL -> None or KafkaError."""
        return await self._call(self._ops().create_acls, acls, timeout=timeout)

    async def describe_client_quotas(
        self,
        components: Iterable[ClientQuotaFilterComponent] = (),
        strict: bool = False,
        *,
        timeout: float | None = None,
    ) -> dict[QuotaEntity, dict[str, float]]:
        """Client quotas matching a filter (no components: all). Returns: entity (sorted
        ``(type, name)`` pairs) -> {quota name: value}.

        Raises:
            KafkaError: the broker's error.
        """
        m = self._ops()
        result: dict[QuotaEntity, dict[str, float]] = only(
            await self._call(m.describe_client_quotas, components, strict=strict, timeout=timeout)
        )
        return result

    async def alter_client_quotas(
        self,
        alterations: Iterable[ClientQuotaAlteration],
        validate_only: bool = False,
        *,
        timeout: float | None = None,
    ) -> dict[QuotaEntity, Any]:
        """Set or remove client quotas. Returns: entity -> None or KafkaError."""
        m = self._ops()
        return await self._call(
            m.alter_client_quotas, alterations, validate_only=validate_only, timeout=timeout
        )

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """SCRAM credentials of ``users`` (None: every user that has one). Returns: user
        -> tuple of ScramCredentialInfo, or KafkaError (ResourceNotFoundError: none).

        Raises:
            KafkaError: the broker's error for the request as a whole.
        """
        m = self._ops()
        results = await self._call(m.describe_user_scram_credentials, users, timeout=timeout)
        return scram_results(results, users)

    async def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Add, replace or delete SCRAM credentials. Returns: user -> None or KafkaError."""
        m = self._ops()
        return await self._call(m.alter_user_scram_credentials, alterations, timeout=timeout)

    async def describe_features(self, *, timeout: float | None = None) -> FeatureMetadata:
        """Finalized (cluster-wide) and supported (by the broker asked) feature levels.

        Raises:
            KafkaError: the broker's error.
        """
        result: FeatureMetadata = only(
            await self._call(self._ops().describe_features, timeout=timeout)
        )
        return result

    async def list_transactions(
        self,
        broker_ids: Iterable[int] | None = None,
        state_filters: Iterable[str] = (),
        producer_id_filters: Iterable[int] = (),
        duration_filter_ms: int | None = None,
        transactional_id_pattern: str | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[int, Any]:
        """Transactions every broker (or those given) coordinates. Returns: broker id ->
        [TransactionListing] or KafkaError."""
        return await self._call(
            self._ops().list_transactions,
            broker_ids,
            state_filters=state_filters,
            producer_id_filters=producer_id_filters,
            duration_filter_ms=duration_filter_ms,
            transactional_id_pattern=transactional_id_pattern,
            timeout=timeout,
        )

    async def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Transactions at their coordinators. Returns: id -> TransactionDescription or
        KafkaError."""
        m = self._ops()
        return await self._call(m.describe_transactions, transactional_ids, timeout=timeout)

    async def describe_producers(
        self, partitions: Iterable[TopicPartition], *, timeout: float | None = None
    ) -> dict[TopicPartition, Any]:
        """Active producers of partitions (at their leaders). Returns: partition ->
        PartitionProducerState or KafkaError."""
        return await self._call(self._ops().describe_producers, partitions, timeout=timeout)

    async def abort_transaction(
        self, spec: AbortTransactionSpec, *, timeout: float | None = None
    ) -> None:
        """Abort a hanging transaction on one partition (an abort marker at its leader).

        Raises:
            KafkaError: the leader's refusal.
        """
        only(await self._call(self._ops().abort_transaction, spec, timeout=timeout))

    async def fence_producers(
        self, transactional_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Fence the producers of transactional ids. Returns: id -> ProducerIdAndEpoch or
        KafkaError."""
        return await self._call(self._ops().fence_producers, transactional_ids, timeout=timeout)

    async def remove_group_members(
        self,
        group_id: str,
        members: Iterable[MemberToRemove] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[MemberToRemove, Any]:
        """Remove members (None: every member) from a classic group. Returns: member ->
        None or KafkaError.

        Raises:
            KafkaError: the group's error.
        """
        m = self._ops()
        return one_group(
            await self._call(m.remove_group_members, group_id, members, timeout=timeout)
        )

    # ------------------------------------------------------- brokers and the quorum

    async def describe_metadata_quorum(self, *, timeout: float | None = None) -> QuorumDescription:
        """The KRaft metadata quorum: its leader, voters and observers.

        Raises:
            KafkaError: the broker's or the quorum's error.
        """
        m = self._ops()
        result: QuorumDescription = only(
            await self._call(m.describe_metadata_quorum, timeout=timeout)
        )
        return result

    async def alter_replica_log_dirs(
        self, assignments: Mapping[Any, str], *, timeout: float | None = None
    ) -> dict[TopicPartitionReplica, Any]:
        """Move replicas to other log directories of their brokers
        (TopicPartitionReplica or ``(topic, partition, broker id)`` -> absolute path).
        Returns: replica -> None or KafkaError."""
        m = self._ops()
        return await self._call(m.alter_replica_log_dirs, assignments, timeout=timeout)

    async def api_versions(
        self, broker_ids: Iterable[int] | None = None, *, timeout: float | None = None
    ) -> dict[int, Any]:
        """The API versions every broker (or those given) supports. Returns: broker id
        -> {API key: (min, max)} or KafkaError."""
        return await self._call(self._ops().api_versions, broker_ids, timeout=timeout)

    async def list_config_resources(
        self,
        resource_types: Iterable[ConfigResourceType | str | int] = (),
        *,
        timeout: float | None = None,
    ) -> list[tuple[ConfigResourceType | int, str]]:
        """The config resources the cluster knows, of ``resource_types`` (none: all;
        Kafka 4.1+, KIP-1142), as ``(ConfigResourceType, name)``.

        Raises:
            KafkaError: the broker's error.
        """
        m = self._ops()
        return config_resource_list(
            await self._call(m.list_config_resources, resource_types, timeout=timeout)
        )

    async def wait_for_topics(
        self, names: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, TopicDescription]:
        """Wait until each topic is known with a leader for every partition (what a
        created topic needs before it is used).

        Returns:
            name -> TopicDescription.

        Raises:
            KafkaTimeoutError: a topic still not ready at the deadline (it says what it
                lacked); or another error of a topic.
        """
        return checked(await self._call(self._ops().wait_for_topics, names, timeout=timeout))


class Admin(Observed, AdminCalls):
    """Admin operations on a running :class:`AdminMachine` (made by :func:`open_admin`).

    Each method returns a dict with one entry per resource: the value, or the
    resource's KafkaError. ``timeout`` (seconds) bounds the whole operation, retries
    included; the default is the ``request_timeout_ms`` option.
    """

    def __init__(self, machine: AdminMachine) -> None:
        self._machine = machine
        self._driver: AsyncDriver | None = None
        self._done: dict[OpId, AdminOperationCompleted] = {}
        self._waiters: dict[OpId, anyio.Event] = {}
        self._abandoned: set[OpId] = set()  # calls cancelled while their operation ran
        self._changed = anyio.Event()

    @property
    def machine(self) -> AdminMachine:
        """The core machine."""
        return self._machine

    def _attach(self, driver: AsyncDriver | None) -> None:
        self._driver = driver

    def _handle_event(self, event: Any) -> None:
        if isinstance(event, AdminOperationCompleted):
            if event.op_id in self._abandoned:
                self._abandoned.discard(event.op_id)
                return
            self._done[event.op_id] = event
            waiter = self._waiters.pop(event.op_id, None)
            if waiter is not None:
                waiter.set()
        elif isinstance(event, MetadataUpdated):
            self._changed.set()
            self._changed = anyio.Event()

    async def wait_for_cluster(self, timeout: float) -> None:
        """Wait until a bootstrap server answered (what ``start()`` waits for).

        Raises:
            NoBrokersAvailable: none did within ``timeout`` seconds.
        """
        await wait_for_cluster(
            self._running(), self._machine.client, lambda: self._changed, timeout
        )

    def _ops(self) -> AdminMachine:
        return self._machine

    def _running(self) -> AsyncDriver:
        if self._driver is None:
            raise KafkaConnectionError("the admin client is not running")
        return self._driver

    async def _call(
        self, command: Callable[..., OpId], *args: Any, **kwargs: Any
    ) -> dict[Any, Any]:
        driver = self._running()
        op = command(*args, now=driver.now(), **kwargs)
        waiter = self._waiters[op] = anyio.Event()
        driver.wake()
        try:
            if op not in self._done:
                await waiter.wait()
        except BaseException:
            if self._done.pop(op, None) is None:
                self._abandoned.add(op)  # its answer, when it comes, is nobody's
            raise
        finally:
            self._waiters.pop(op, None)
        results = self._done.pop(op).results
        raise_unsupported(results)
        return dict(results)

    # -------------------------------------------------------------------- topics

    async def create_topics(
        self,
        topics: Iterable[NewTopic],
        *,
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[str, Any]:
        """Create topics. Returns: name -> CreatedTopic or KafkaError."""
        m = self._machine
        return await self._call(
            m.create_topics, topics, timeout=timeout, validate_only=validate_only
        )

    async def delete_topics(
        self, names: Iterable[str | uuid.UUID], *, timeout: float | None = None
    ) -> dict[Any, Any]:
        """Delete topics, by name or by topic id (a :class:`uuid.UUID`; Kafka 3.1+).
        Returns: name (or id) -> None or KafkaError."""
        return await self._call(self._machine.delete_topics, names, timeout=timeout)

    async def describe_topics(
        self, names: Iterable[str | uuid.UUID] | None = None, *, timeout: float | None = None
    ) -> dict[Any, Any]:
        """Describe topics (None: every topic), by name or by topic id (a
        :class:`uuid.UUID`; Kafka 3.1+). Returns: name (or id) -> TopicDescription or
        KafkaError (every topic: by name)."""
        results = await self._call(self._machine.describe_topics, names, timeout=timeout)
        if names is None:
            everything = results[None]
            if isinstance(everything, BaseException):
                raise everything
            return {t.name: t for t in everything}
        return results

    async def list_topics(self, *, timeout: float | None = None) -> list[str]:
        """Every topic's name, sorted."""
        return sorted(await self.describe_topics(timeout=timeout))

    async def describe_cluster(self, *, timeout: float | None = None) -> ClusterDescription:
        """The cluster's id, controller and brokers.

        Raises:
            KafkaError: no broker answered in time.
        """
        result = (await self._call(self._machine.describe_cluster, timeout=timeout))[None]
        if not isinstance(result, ClusterDescription):
            raise result
        return result

    async def create_partitions(
        self,
        topics: Mapping[str, NewPartitions],
        *,
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[str, Any]:
        """Grow topics. Returns: name -> None or KafkaError."""
        m = self._machine
        return await self._call(
            m.create_partitions, topics, timeout=timeout, validate_only=validate_only
        )

    # ------------------------------------------------------------------- configs

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        timeout: float | None = None,
        include_synonyms: bool = False,
    ) -> dict[Any, Any]:
        """Describe configs. Returns: (ConfigResourceType, name) -> {config name:
        ConfigEntry} or KafkaError."""
        m = self._machine
        return await self._call(
            m.describe_configs, resources, timeout=timeout, include_synonyms=include_synonyms
        )

    async def alter_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[Any, Any]:
        """Replace configs (unnamed ones revert to defaults). Returns: (type, name) ->
        None or KafkaError."""
        m = self._machine
        return await self._call(
            m.alter_configs, resources, timeout=timeout, validate_only=validate_only
        )

    async def incremental_alter_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        timeout: float | None = None,
        validate_only: bool = False,
    ) -> dict[Any, Any]:
        """Change single configs (str: set, None: delete, AlterConfigOp). Returns:
        (type, name) -> None or KafkaError."""
        m = self._machine
        return await self._call(
            m.alter_configs,
            resources,
            timeout=timeout,
            validate_only=validate_only,
            incremental=True,
        )

    # -------------------------------------------------------------------- groups

    async def list_consumer_groups(
        self, broker_ids: Iterable[int] | None = None, *, timeout: float | None = None
    ) -> dict[int, Any]:
        """ListGroups on every broker. Returns: broker id -> [GroupListing] or KafkaError."""
        return await self._call(self._machine.list_consumer_groups, broker_ids, timeout=timeout)

    async def describe_consumer_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Describe classic and KIP-848 groups. Returns: id -> GroupDescription or
        KafkaError."""
        return await self._call(self._machine.describe_consumer_groups, group_ids, timeout=timeout)

    async def find_coordinator(
        self, key: str, key_type: int = 0, *, timeout: float | None = None
    ) -> int:
        """The broker id coordinating a group (``key_type`` 0) or a transactional id (1).

        Raises:
            KafkaError: no coordinator within the timeout, or a refusal.
        """
        m = self._machine
        return int(only(await self._call(m.find_coordinator, key, key_type, timeout=timeout)))

    async def delete_consumer_groups(
        self, group_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Delete empty groups. Returns: id -> None or KafkaError."""
        return await self._call(self._machine.delete_consumer_groups, group_ids, timeout=timeout)

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """A group's committed offsets.

        Raises:
            KafkaError: the group's or a partition's error.
        """
        m = self._machine
        return one_group(
            await self._call(m.list_consumer_group_offsets, group_id, partitions, timeout=timeout)
        )

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, Any]:
        """Commit offsets for a group without active members. Returns: partition ->
        None or KafkaError.

        Raises:
            KafkaError: the group's error (not found, not empty...).
        """
        m = self._machine
        return one_group(
            await self._call(m.alter_consumer_group_offsets, group_id, offsets, timeout=timeout)
        )

    async def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, Any]:
        """Delete a group's committed offsets. Returns: partition -> None or KafkaError.

        Raises:
            KafkaError: the group's error.
        """
        m = self._machine
        return one_group(
            await self._call(m.delete_consumer_group_offsets, group_id, partitions, timeout=timeout)
        )

    # ---------------------------------------------------------------- partitions

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec | int],
        *,
        timeout: float | None = None,
        isolation_level: int = 0,
    ) -> dict[TopicPartition, Any]:
        """Offsets by spec. Returns: partition -> ListedOffset or KafkaError."""
        m = self._machine
        return await self._call(
            m.list_offsets, specs, timeout=timeout, isolation_level=isolation_level
        )

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout: float | None = None
    ) -> dict[TopicPartition, Any]:
        """Delete records below offsets. Returns: partition -> low watermark or KafkaError."""
        return await self._call(self._machine.delete_records, before, timeout=timeout)

    async def describe_log_dirs(
        self,
        broker_ids: Iterable[int] | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[int, Any]:
        """Log directories and their replicas. Returns: broker id -> [LogDirDescription]
        or KafkaError."""
        m = self._machine
        return await self._call(m.describe_log_dirs, broker_ids, partitions, timeout=timeout)

    # ---------------------------------------------------------------------- ACLs
    # (describe_acls, create_acls: AdminCalls)

    async def delete_acls(
        self, filters: Iterable[ACLFilter], *, timeout: float | None = None
    ) -> dict[ACLFilter, Any]:
        """Delete the ACLs matching each filter. Returns: filter -> [ACL deleted] or
        KafkaError."""
        return await self._call(self._machine.delete_acls, filters, timeout=timeout)

    # (quotas, SCRAM credentials, describe_features, transactions, remove_group_members:
    # AdminCalls)

    # -------------------------------------------------------- replicas and leaders

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, Any]:
        """Move partitions to new replicas (None: cancel). Returns: partition -> None or
        KafkaError."""
        m = self._machine
        return await self._call(m.alter_partition_reassignments, reassignments, timeout=timeout)

    async def list_partition_reassignments(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of ``partitions``, or all).

        Raises:
            KafkaError: the broker's error.
        """
        m = self._machine
        result: dict[TopicPartition, PartitionReassignment] = only(
            await self._call(m.list_partition_reassignments, partitions, timeout=timeout)
        )
        return result

    async def elect_leaders(
        self,
        election_type: ElectionType | int = ElectionType.PREFERRED,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, Any]:
        """Elect leaders of ``partitions`` (None: all). Returns: partition -> None or
        KafkaError (ElectionNotNeededError: already led by that replica).

        Raises:
            KafkaError: the broker's error for the request as a whole.
        """
        m = self._machine
        results = await self._call(m.elect_leaders, election_type, partitions, timeout=timeout)
        return dict(only(results)) if partitions is None else results

    async def describe_topic_partitions(
        self,
        names: Iterable[str] | None = None,
        *,
        partition_limit: int = 2000,
        cursor: TopicPartition | None = None,
        one_page: bool = False,
        timeout: float | None = None,
    ) -> TopicPartitionsPage:
        """Topics (None: all) with DescribeTopicPartitions (Kafka 3.7+), at most
        ``partition_limit`` partitions per request; every page from ``cursor``, or only
        one (``one_page``). Returns: topics (name -> TopicDescription or KafkaError) and
        the cursor of the next page.

        Raises:
            UnsupportedVersionError: a broker older than 3.7.
        """
        m = self._machine
        result: TopicPartitionsPage = only(
            await self._call(
                m.describe_topic_partitions,
                names,
                partition_limit=partition_limit,
                cursor=cursor,
                one_page=one_page,
                timeout=timeout,
            )
        )
        return result

    async def update_features(
        self,
        updates: Mapping[str, FeatureUpdate | int],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Change finalized feature levels. Returns: feature -> None or KafkaError."""
        m = self._machine
        return await self._call(
            m.update_features, updates, validate_only=validate_only, timeout=timeout
        )


def open_admin(
    bootstrap_servers: str | Sequence[str] = "localhost", **options: Any
) -> AbstractAsyncContextManager[Admin]:
    """Run an admin client for the duration of an ``async with`` block (asyncio or trio).

    It waits for a bootstrap server to answer first (``request_timeout_ms``).

    Args:
        bootstrap_servers: ``"host[:port],..."`` or a list of such strings.
        options: any admin option of :data:`kafkastate.core.config.OPTIONS`
            (``request_timeout_ms``, ``retry_backoff_ms``, ``client_id``, TLS, SASL...;
            docs/options.md).

    Returns:
        An async context manager yielding the :class:`Admin`.

    Raises:
        KafkaConfigurationError: a bad option (checked at once).
        TypeError: an unknown option.
    """
    resolved = resolve(
        "admin",
        "kafkastate",
        {"bootstrap_servers": bootstrap_servers, **options},
        owner="open_admin",
    )
    return running_admin(resolved, admin_config(resolved))  # checked now


@asynccontextmanager
async def running_admin(options: Mapping[str, Any], config: AdminConfig) -> AsyncIterator[Admin]:
    """An :class:`Admin` of resolved options and their :class:`AdminConfig` (built once,
    when the options were checked), running for the ``async with`` block: it waits for a
    bootstrap server first; leaving the block closes the connections."""
    machine = AdminMachine(config, rng=machine_rng())
    admin = Admin(machine)
    driver = AsyncDriver(
        machine,
        on_event=admin._handle_event,
        ssl_context=tls_context(options),
        token_provider=options["sasl_oauth_token_provider"],
        connect_timeout=config.client.socket_connection_setup_timeout,
        stats_cb=options["stats_cb"],
    )
    export = metrics_export_of(options, admin.metrics)
    try:
        async with driver:
            admin._attach(driver)
            try:
                await admin.wait_for_cluster(config.client.connection.request_timeout)
                yield admin
            finally:
                machine.close()
                admin._attach(None)
    finally:
        if export is not None:
            export.close()
