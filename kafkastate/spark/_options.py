"""The data source's options, parsed and checked on the driver.

Options are Spark's Kafka source's and sink's (docs/spark.md lists them). Spark hands them
over case-insensitively and as strings (SPARK.md G17); everything here takes a plain mapping
and returns frozen, picklable values, so the readers and writers that Spark pickles to the
executors carry configuration only (G6). Every error names the option.

``kafka.``-prefixed options are Kafka client properties. They are translated to the
keyword arguments of :class:`kafkastate.sync.KafkaConsumer` (reads) or
:class:`kafkastate.sync.KafkaProducer` (writes): ``kafka.max.poll.records`` becomes
``max_poll_records=<int>``, converted to the type the keyword takes. Properties that would
break the source (``auto.offset.reset``, deserializers, auto-commit...) are refused, as
Spark's own source refuses them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from kafkastate.core.config import accepted, from_text
from kafkastate.errors import KafkaConfigurationError
from kafkastate.spark._offsets import EARLIEST, LATEST, PartitionOffsets, from_json_offsets

__all__ = [
    "OffsetSpec",
    "SinkOptions",
    "SourceOptions",
    "Subscription",
    "client_options",
    "parse_sink_options",
    "parse_source_options",
]

# Kafka properties the source or sink sets itself (Spark's list, plus what has no
# kafka-python string form).
_REFUSED: Final = {
    "auto.offset.reset": "set startingOffsets instead",
    "key.deserializer": "keys are always read as bytes",
    "value.deserializer": "values are always read as bytes",
    "key.serializer": "keys are always written as bytes",
    "value.serializer": "values are always written as bytes",
    "enable.auto.commit": "the source never commits offsets to Kafka",
    "interceptor.classes": "Java interceptors do not apply",
    "ssl.context": "give ssl.cafile, ssl.certfile and ssl.keyfile",
    "partitioner": "give a partition column instead",
    "default.offset.commit.callback": "the source never commits offsets to Kafka",
    "transactional.id": "the sink is at-least-once, not transactional",
}
_JAAS: Final = re.compile(r'(username|password)\s*=\s*"((?:[^"\\]|\\.)*)"')
_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_UNITS: Final = {
    None: 1.0,
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}


@attrs.frozen(kw_only=True)
class Subscription:
    """Which partitions to read: exactly one of ``subscribe``, ``subscribePattern``,
    ``assign``."""

    topics: tuple[str, ...] = ()
    """``subscribe``: every partition of these topics."""
    pattern: str | None = None
    """``subscribePattern``: every partition of topics whose whole name matches."""
    partitions: tuple[tuple[str, int], ...] = ()
    """``assign``: exactly these partitions."""

    def wanted_topics(self, all_topics: set[str]) -> list[str]:
        """The topics this subscription reads, of the cluster's ``all_topics``, sorted."""
        if self.pattern is not None:
            regex = re.compile(self.pattern)
            return sorted(t for t in all_topics if regex.fullmatch(t))
        if self.topics:
            return sorted(self.topics)
        return sorted({t for t, _ in self.partitions})


@attrs.frozen(kw_only=True)
class OffsetSpec:
    """Where a read starts or ends: ``earliest``, ``latest``, offsets per partition (with
    -2/-1 for earliest/latest), one timestamp for every partition, or one per partition."""

    kind: Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]
    """Which of the forms."""
    offsets: PartitionOffsets = attrs.field(factory=dict, eq=False)
    """``offsets``: offset per partition (-2 earliest, -1 latest); ``timestamps``: ms per
    partition."""
    timestamp: int | None = None
    """``timestamp``: ms since the epoch."""


@attrs.frozen(kw_only=True)
class SourceOptions:
    """Everything the reader needs, parsed from the options."""

    subscription: Subscription
    """What to read."""
    starting: OffsetSpec
    """``startingOffsets`` / ``startingTimestamp`` / ``startingOffsetsByTimestamp``."""
    ending: OffsetSpec
    """Batch only: ``endingOffsets`` / ``endingTimestamp`` / ``endingOffsetsByTimestamp``."""
    timestamp_strategy: Literal["error", "latest"] = "error"
    """``startingOffsetsByTimestampStrategy``: what a partition with no record at or after
    its starting timestamp does."""
    min_partitions: int | None = None
    """``minPartitions``: a hint to split large ranges over more tasks."""
    max_records_per_partition: int | None = None
    """``maxRecordsPerPartition``: largest range one task reads."""
    max_offsets_per_trigger: int | None = None
    """Streaming: ``maxOffsetsPerTrigger``."""
    min_offsets_per_trigger: int | None = None
    """Streaming: ``minOffsetsPerTrigger``."""
    max_trigger_delay: float = 900.0
    """Streaming: ``maxTriggerDelay`` in seconds (default 15 minutes)."""
    include_headers: bool = False
    """``includeHeaders``: add the ``headers`` column."""
    fail_on_data_loss: bool = True
    """``failOnDataLoss``."""
    poll_timeout: float = 120.0
    """``kafkaConsumer.pollTimeoutMs`` in seconds: how long an executor waits for records it
    knows exist."""
    kafka: dict[str, Any] = attrs.field(factory=dict, eq=False)
    """Keyword arguments for :class:`kafkastate.sync.KafkaConsumer`."""


@attrs.frozen(kw_only=True)
class SinkOptions:
    """Everything the writer needs, parsed from the options."""

    topic: str | None
    """``topic``: the topic of every row (overrides a ``topic`` column)."""
    include_headers: bool
    """``includeHeaders`` (accepted for symmetry with the source; a ``headers`` column is
    written whenever there is one, as Spark's sink does)."""
    kafka: dict[str, Any] = attrs.field(factory=dict, eq=False)
    """Keyword arguments for :class:`kafkastate.sync.KafkaProducer`."""


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _bool(name: str, raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "false"):
        return value == "true"
    raise KafkaConfigurationError(f"option {name} must be true or false, got {raw!r}")


def _int(name: str, raw: str | None, *, minimum: int) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise KafkaConfigurationError(f"option {name} must be an integer >= {minimum}, got {raw!r}")
    return value


def _duration(name: str, raw: str) -> float:
    match = _DURATION.match(raw.lower())
    if match is None:
        raise KafkaConfigurationError(
            f"option {name} must be a duration such as 500ms, 30s, 15m or 1h, got {raw!r}"
        )
    return float(match[1]) * _UNITS[match[2]]


def _json(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise KafkaConfigurationError(f"option {name} is not valid JSON: {exc}") from None


def _subscription(opts: Mapping[str, str]) -> Subscription:
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise KafkaConfigurationError(
            "exactly one of the options subscribe, subscribePattern, assign is required, "
            f"got {len(given)}"
        )
    kind = given[0]
    raw = opts[kind]
    if kind == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise KafkaConfigurationError(f"option subscribe names no topic: {raw!r}")
        return Subscription(topics=topics)
    if kind == "subscribepattern":
        try:
            re.compile(raw)
        except re.error as exc:
            raise KafkaConfigurationError(f"option subscribePattern: {exc}") from None
        if not raw.strip():
            raise KafkaConfigurationError("option subscribePattern is empty")
        return Subscription(pattern=raw)
    value = _json("assign", raw)
    if not isinstance(value, dict) or not value:
        raise KafkaConfigurationError(
            f'option assign must be JSON like {{"topicA": [0, 1]}}, got {raw!r}'
        )
    partitions: list[tuple[str, int]] = []
    for topic, numbers in value.items():
        if (
            not topic
            or not isinstance(numbers, list)
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in numbers)
        ):
            raise KafkaConfigurationError(
                f"option assign: {topic!r} must map to a list of partition numbers, got {numbers!r}"
            )
        partitions.extend((topic, n) for n in numbers)
    if not partitions:
        raise KafkaConfigurationError(f"option assign names no partition: {raw!r}")
    return Subscription(partitions=tuple(sorted(set(partitions))))


def _offset_spec(
    opts: Mapping[str, str], which: Literal["starting", "ending"], default: str
) -> OffsetSpec:
    """The ``<which>Timestamp`` > ``<which>OffsetsByTimestamp`` > ``<which>Offsets``
    precedence of Spark's source."""
    camel = f"{which}Timestamp"
    raw = opts.get(camel.lower())
    if raw is not None:
        ts = _int(camel, raw, minimum=0)
        return OffsetSpec(kind="timestamp", timestamp=ts)
    camel = f"{which}OffsetsByTimestamp"
    raw = opts.get(camel.lower())
    if raw is not None:
        stamps = from_json_offsets(_json(camel, raw), what=f"option {camel}")
        for tp, ts in stamps.items():
            if ts < 0:
                raise KafkaConfigurationError(
                    f"option {camel}: timestamp of {tp[0]}/{tp[1]} must be ms >= 0, got {ts}"
                )
        return OffsetSpec(kind="timestamps", offsets=stamps)
    camel = f"{which}Offsets"
    raw = opts.get(camel.lower(), default).strip()
    if raw.lower() in ("earliest", "latest"):
        kind: Literal["earliest", "latest"] = "earliest" if raw.lower() == "earliest" else "latest"
        return OffsetSpec(kind=kind)
    offsets = from_json_offsets(_json(camel, raw), what=f"option {camel}")
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise KafkaConfigurationError(
                f"option {camel}: offset of {tp[0]}/{tp[1]} must be >= 0, or -2 (earliest) "
                f"or -1 (latest), got {offset}"
            )
    return OffsetSpec(kind="offsets", offsets=offsets)


def parse_source_options(options: Mapping[str, Any], *, streaming: bool) -> SourceOptions:
    """Check and parse the reader's options.

    Args:
        options: the data source options (any key case; values are stringified).
        streaming: for a streaming query (``readStream``) rather than a batch read.

    Returns:
        The parsed options.

    Raises:
        KafkaConfigurationError: a missing, conflicting or malformed option, named.
    """
    opts = _lower(options)
    subscription = _subscription(opts)
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest")
    ending = _offset_spec(opts, "ending", "latest")
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name.lower() in opts:
                raise KafkaConfigurationError(f"option {name} is for batch reads only")
    else:
        if starting.kind == "latest" or (
            starting.kind == "offsets" and LATEST in starting.offsets.values()
        ):
            raise KafkaConfigurationError(
                "option startingOffsets: latest (-1) is for streaming queries only"
            )
        if ending.kind == "earliest" or (
            ending.kind == "offsets" and EARLIEST in ending.offsets.values()
        ):
            raise KafkaConfigurationError("option endingOffsets: earliest (-2) is not allowed")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise KafkaConfigurationError(
            f"option startingOffsetsByTimestampStrategy must be error or latest, got {strategy!r}"
        )
    poll_ms = _int(
        "kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms"), minimum=1
    )
    delay = opts.get("maxtriggerdelay")
    return SourceOptions(
        subscription=subscription,
        starting=starting,
        ending=ending,
        timestamp_strategy="latest" if strategy == "latest" else "error",
        min_partitions=_int("minPartitions", opts.get("minpartitions"), minimum=1),
        max_records_per_partition=_int(
            "maxRecordsPerPartition", opts.get("maxrecordsperpartition"), minimum=1
        ),
        max_offsets_per_trigger=_int(
            "maxOffsetsPerTrigger", opts.get("maxoffsetspertrigger"), minimum=1
        ),
        min_offsets_per_trigger=_int(
            "minOffsetsPerTrigger", opts.get("minoffsetspertrigger"), minimum=1
        ),
        max_trigger_delay=900.0 if delay is None else _duration("maxTriggerDelay", delay),
        include_headers=_bool("includeHeaders", opts.get("includeheaders"), False),
        fail_on_data_loss=_bool("failOnDataLoss", opts.get("failondataloss"), True),
        poll_timeout=120.0 if poll_ms is None else poll_ms / 1000,
        kafka=client_options(opts, "consumer"),
    )


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    """Check and parse the writer's options.

    Raises:
        KafkaConfigurationError: a missing or malformed option, named.
    """
    opts = _lower(options)
    topic = opts.get("topic")
    if topic is not None and not topic.strip():
        raise KafkaConfigurationError("option topic is empty")
    return SinkOptions(
        topic=topic,
        include_headers=_bool("includeHeaders", opts.get("includeheaders"), False),
        kafka=client_options(opts, "producer"),
    )


def client_options(opts: Mapping[str, str], role: str) -> dict[str, Any]:
    """Translate ``kafka.*`` options into keyword arguments of the blocking client of
    ``role`` (``KafkaConsumer`` or ``KafkaProducer``).

    ``kafka.bootstrap.servers`` is required. ``kafka.sasl.jaas.config`` with a
    ``username="..." password="..."`` pair (PlainLoginModule, ScramLoginModule) sets the SASL
    username and password.

    Args:
        opts: options, keys lowercased.
        role: ``"consumer"`` or ``"producer"``: the option layer's table
            (:data:`kafkastate.core.config.OPTIONS`) decides what is accepted and how
            values convert.

    Returns:
        Keyword arguments, values converted from strings.

    Raises:
        KafkaConfigurationError: ``kafka.bootstrap.servers`` missing, or a property that is
            unknown, refused or not of the keyword's type, named.
    """
    known = accepted(role, "kafka-python")
    out: dict[str, Any] = {}
    for key, raw in opts.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in _REFUSED:
            raise KafkaConfigurationError(f"option {key} is not supported: {_REFUSED[name]}")
        if name == "sasl.jaas.config":
            found = dict(_JAAS.findall(raw))
            if set(found) != {"username", "password"}:
                raise KafkaConfigurationError(
                    f'option {key} must hold username="..." and password="..."'
                )
            out["sasl_plain_username"] = found["username"]
            out["sasl_plain_password"] = found["password"]
            continue
        keyword = name.replace(".", "_")
        if keyword not in known:
            raise KafkaConfigurationError(
                f"option {key} is not a Kafka client property kafkastate knows "
                f"(no {keyword}= keyword)"
            )
        if keyword == "bootstrap_servers":
            servers = [s.strip() for s in raw.split(",") if s.strip()]
            if not servers:
                raise KafkaConfigurationError(f"option {key} is empty")
            out[keyword] = servers
            continue
        out[keyword] = from_text(keyword, raw, label=f"option {key}")
    if "bootstrap_servers" not in out:
        raise KafkaConfigurationError("option kafka.bootstrap.servers is required")
    return out
