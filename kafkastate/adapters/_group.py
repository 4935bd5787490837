"""Group membership options and rebalance listeners, shared by the consumer adapters.

Turns aiokafka/kafka-python style options into the core's
:class:`~kafkastate.core.consumer.group.GroupConfig` (classic protocol) or
:class:`~kafkastate.core.consumer.group848.ConsumerGroupConfig` (KIP-848), resolves
assignors given by name, as kafkastate objects, or as aiokafka/kafka-python classes of a
built-in strategy, and checks listeners. No IO here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from kafkastate.core.consumer.assignors import ASSIGNORS, Assignor
from kafkastate.core.consumer.fetcher import FetcherMachine
from kafkastate.core.consumer.group import GroupConfig
from kafkastate.core.consumer.group848 import ConsumerGroupConfig
from kafkastate.core.metadata import ClusterMetadata
from kafkastate.errors import IllegalStateError, KafkaConfigurationError, RebalanceListenerError
from kafkastate.structs import ConsumerGroupMetadata

__all__ = [
    "GROUP_PROTOCOLS",
    "build_group_config",
    "check_listener",
    "check_subscription",
    "compile_pattern",
    "follow_subscription",
    "group_metadata",
    "listener_error",
    "listener_method",
    "matching_topics",
    "resolve_assignors",
    "start_subscription",
]

GROUP_PROTOCOLS: Final = ("classic", "consumer")
"""``group.protocol`` values: the classic JoinGroup/SyncGroup protocol, or KIP-848."""

_LISTENER_METHODS: Final = ("on_partitions_revoked", "on_partitions_assigned")


def resolve_assignors(strategy: Any) -> tuple[Assignor, ...]:
    """The assignors for ``partition_assignment_strategy``: a sequence of names
    (``"range"``, ``"roundrobin"``, ``"sticky"``, ``"cooperative-sticky"``), kafkastate
    assignor objects or classes (anything with ``name``, ``protocols`` and ``assign``), or
    aiokafka/kafka-python assignor classes of a built-in strategy (matched by their
    ``name``: the wire format is the same).

    Raises:
        KafkaConfigurationError: an empty sequence, or an entry that is none of these.
    """
    if isinstance(strategy, str) or not isinstance(strategy, Sequence) or not strategy:
        raise KafkaConfigurationError(
            f"partition_assignment_strategy must be a non-empty list of assignors, got {strategy!r}"
        )
    out: list[Assignor] = []
    for entry in strategy:
        if isinstance(entry, type) and isinstance(getattr(entry, "protocols", None), tuple):
            entry = entry()  # a kafkastate-style assignor class
        name = entry if isinstance(entry, str) else getattr(entry, "name", None)
        if _is_assignor(entry):
            out.append(entry)
        elif isinstance(name, str) and name in ASSIGNORS:
            out.append(ASSIGNORS[name]())  # a name, or another library's built-in class
        else:
            raise KafkaConfigurationError(
                f"partition_assignment_strategy entry {entry!r} is not an assignor: give one "
                f"of {sorted(ASSIGNORS)} or an object with name, protocols and "
                "assign(partitions_per_topic, subscriptions) (kafkastate.abc.Assignor)"
            )
    return tuple(out)


def _is_assignor(obj: Any) -> bool:
    return (
        isinstance(getattr(obj, "name", None), str)
        and isinstance(getattr(obj, "protocols", None), tuple)
        and callable(getattr(obj, "assign", None))
        and not isinstance(obj, type)
    )


def build_group_config(
    group_id: str | None,
    *,
    group_protocol: str = "classic",
    partition_assignment_strategy: Any = None,
    default_strategy: Sequence[str] = ("range", "cooperative-sticky"),
    session_timeout_ms: float = 45000,
    heartbeat_interval_ms: float = 3000,
    max_poll_interval_ms: float = 300000,
    rebalance_timeout_ms: float | None = None,
    group_instance_id: str | None = None,
    group_remote_assignor: str | None = None,
    leave_group_on_close: bool | None = None,
    client_rack: str | None = None,
    request_timeout_ms: float = 30000,
    retry_backoff_ms: float = 100,
) -> GroupConfig | ConsumerGroupConfig | None:
    """The group membership settings, or None without a ``group_id``.

    ``group_protocol="consumer"`` (KIP-848) lets the coordinator assign and time the
    session: ``partition_assignment_strategy`` is refused with it (name the broker's
    assignor with ``group_remote_assignor``), the session and heartbeat options are the
    broker's ``group.consumer.*`` settings.

    Raises:
        KafkaConfigurationError: naming the bad option.
    """
    if group_protocol not in GROUP_PROTOCOLS:
        raise KafkaConfigurationError(
            f"group_protocol must be one of {GROUP_PROTOCOLS}, got {group_protocol!r}"
        )
    if group_instance_id is not None and (
        not isinstance(group_instance_id, str) or not group_instance_id
    ):
        raise KafkaConfigurationError(
            f"group_instance_id must be a non-empty str or None, got {group_instance_id!r}"
        )
    for name, value in (
        ("session_timeout_ms", session_timeout_ms),
        ("heartbeat_interval_ms", heartbeat_interval_ms),
        ("max_poll_interval_ms", max_poll_interval_ms),
    ):
        _seconds(name, value)  # refused even without a group_id
    if group_id is None:
        return None
    try:
        if group_protocol == "consumer":
            if partition_assignment_strategy is not None:
                raise KafkaConfigurationError(
                    "partition_assignment_strategy does not apply to group_protocol="
                    "'consumer' (the coordinator assigns): use group_remote_assignor"
                )
            return ConsumerGroupConfig(
                group_id=group_id,
                max_poll_interval=_seconds("max_poll_interval_ms", max_poll_interval_ms),
                request_timeout=_seconds("request_timeout_ms", request_timeout_ms),
                retry_backoff=_seconds("retry_backoff_ms", retry_backoff_ms),
                group_instance_id=group_instance_id,
                group_remote_assignor=group_remote_assignor,
                client_rack=client_rack or None,
            )
        if group_remote_assignor is not None:
            raise KafkaConfigurationError(
                "group_remote_assignor needs group_protocol='consumer' (KIP-848)"
            )
        strategy = (
            default_strategy
            if partition_assignment_strategy is None
            else partition_assignment_strategy
        )
        session = _seconds("session_timeout_ms", session_timeout_ms)
        heartbeat = _seconds("heartbeat_interval_ms", heartbeat_interval_ms)
        if heartbeat >= session:
            raise KafkaConfigurationError(
                f"heartbeat_interval_ms ({heartbeat_interval_ms!r}) must be below "
                f"session_timeout_ms ({session_timeout_ms!r})"
            )
        return GroupConfig(
            group_id=group_id,
            assignors=resolve_assignors(strategy),
            session_timeout=session,
            heartbeat_interval=heartbeat,
            max_poll_interval=_seconds("max_poll_interval_ms", max_poll_interval_ms),
            rebalance_timeout=None
            if rebalance_timeout_ms is None
            else _seconds("rebalance_timeout_ms", rebalance_timeout_ms),
            request_timeout=_seconds("request_timeout_ms", request_timeout_ms),
            retry_backoff=_seconds("retry_backoff_ms", retry_backoff_ms),
            group_instance_id=group_instance_id,
            leave_group_on_close=leave_group_on_close,
            client_rack=client_rack or None,
        )
    except KafkaConfigurationError:
        raise
    except (TypeError, ValueError) as exc:
        raise KafkaConfigurationError(str(exc)) from exc


def group_metadata(machine: FetcherMachine) -> ConsumerGroupMetadata:
    """The consumer's membership for ``send_offsets_to_transaction``: generation (member
    epoch with KIP-848), member id and instance id while in a generation, so the coordinator
    fences a zombie's offsets (KIP-447); the group id alone otherwise.

    Raises:
        IllegalStateError: the consumer has no ``group_id``.
    """
    group_id = machine.config.group_id
    if group_id is None:
        raise IllegalStateError("group_metadata() needs a group_id")
    member = machine.member
    if member is None or member.generation < 0:
        return ConsumerGroupMetadata(group_id)
    generation, member_id, instance = member.commit_identity()
    return ConsumerGroupMetadata(group_id, generation, member_id, instance)


def _seconds(name: str, ms: Any) -> float:
    if isinstance(ms, bool) or not isinstance(ms, int | float) or not ms > 0:
        raise KafkaConfigurationError(f"{name} must be a number > 0, got {ms!r}")
    return float(ms) / 1000


def check_listener(listener: Any) -> None:
    """Refuse a rebalance listener without ``on_partitions_revoked`` and
    ``on_partitions_assigned`` (``on_partitions_lost`` is optional: the revoked callback
    stands in for it, as in Java).

    Raises:
        KafkaConfigurationError: naming what is missing.
    """
    if listener is None:
        return
    missing = [m for m in _LISTENER_METHODS if not callable(getattr(listener, m, None))]
    if missing:
        raise KafkaConfigurationError(
            f"listener {listener!r} lacks {', '.join(missing)}: subclass "
            "kafkastate.abc.ConsumerRebalanceListener"
        )


def check_subscription(
    topics: Any, pattern: Any, listener: Any, *, group: bool
) -> re.Pattern[str] | None:
    """Check ``subscribe(topics, pattern, listener)`` arguments.

    Returns:
        The compiled pattern, or None for a topic list.

    Raises:
        KafkaConfigurationError: bad topics, both topics and a pattern, a bad pattern or
            listener, or a listener without group membership.
    """
    compiled: re.Pattern[str] | None = None
    if pattern is not None:
        if topics:
            raise KafkaConfigurationError("subscribe to topics or to a pattern, not both")
        compiled = compile_pattern(pattern)
    elif isinstance(topics, str) or not topics or not all(isinstance(t, str) and t for t in topics):
        raise KafkaConfigurationError(f"topics must be a list of topic names, got {topics!r}")
    check_listener(listener)
    if listener is not None and not group:
        raise KafkaConfigurationError("a rebalance listener needs a group_id")
    return compiled


def start_subscription(
    machine: FetcherMachine, topics: Sequence[str], pattern: re.Pattern[str] | None, now: float
) -> tuple[str, ...]:
    """Hand a checked subscription to the machine (a group member subscribes; without a
    group the topics' metadata is tracked; a pattern tracks every topic).

    Returns:
        The subscribed topics (empty for a pattern, until metadata shows matches).
    """
    metadata = machine.client.metadata
    subscribed: tuple[str, ...] = ()
    if pattern is None:
        subscribed = tuple(dict.fromkeys(topics))
        if machine.member is not None:
            machine.subscribe(subscribed, now=now)
        else:
            metadata.add_topics(subscribed)
    else:
        metadata.set_topics(None)  # every topic: the pattern picks
    machine.client.request_metadata_update()
    return subscribed


def follow_subscription(
    machine: FetcherMachine,
    subscribed: tuple[str, ...],
    pattern: re.Pattern[str] | None,
    *,
    exclude_internal: bool,
    now: float,
) -> tuple[str, ...]:
    """Follow metadata: a pattern's matching topics (a change re-subscribes the member),
    and without a group, every partition of the subscribed topics.

    Returns:
        The subscribed topics now.
    """
    cluster = machine.client.cluster
    if pattern is not None and cluster.topics:
        matching = tuple(matching_topics(cluster, pattern, exclude_internal=exclude_internal))
        if matching and matching != subscribed:
            subscribed = matching
            if machine.member is not None:
                machine.subscribe(matching, now=now)
    if not subscribed or machine.member is not None:
        return subscribed
    wanted: list[tuple[str, int]] = []
    for topic in subscribed:
        wanted.extend((topic, p) for p in cluster.partitions_for(topic) or ())
    if set(wanted) != set(machine.assignment()):
        machine.assign(wanted, now=now)
    return subscribed


def listener_method(listener: Any, callback: str) -> Any:
    """The listener's ``callback``; ``on_partitions_revoked`` stands in for a missing
    ``on_partitions_lost`` (aiokafka's and kafka-python's listeners lack it; Java's default)."""
    method = getattr(listener, callback, None)
    return listener.on_partitions_revoked if method is None else method


def listener_error(listener: Any, callback: str, exc: Exception) -> RebalanceListenerError:
    """The error the application gets for a listener callback that raised."""
    error = RebalanceListenerError(
        f"{callback} of {listener!r} raised {exc!r}; the rebalance went on without it",
        callback=callback,
    )
    error.__cause__ = exc
    return error


def compile_pattern(pattern: Any) -> re.Pattern[str]:
    """A subscription pattern (a str or a compiled regex).

    Raises:
        KafkaConfigurationError: not a valid regular expression.
    """
    if isinstance(pattern, re.Pattern):
        return pattern
    if not isinstance(pattern, str) or not pattern:
        raise KafkaConfigurationError(f"pattern must be a regular expression, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise KafkaConfigurationError(f"pattern {pattern!r} is not a valid regex: {exc}") from exc


def matching_topics(
    cluster: ClusterMetadata, pattern: re.Pattern[str], *, exclude_internal: bool = True
) -> list[str]:
    """The cluster's topics whose name matches ``pattern`` from its start (``re.match``,
    as aiokafka and kafka-python match), sorted; internal topics left out unless
    ``exclude_internal`` is false."""
    return sorted(
        name
        for name, topic in cluster.topics.items()
        if topic.error_code == 0
        and pattern.match(name)
        and not (exclude_internal and topic.is_internal)
    )
