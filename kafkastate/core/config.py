"""One option layer: every consumer, producer and admin option, parsed, defaulted, cross-checked
and refused once, for every runtime.

Theory of operation
-------------------
:data:`OPTIONS` is the table: one :class:`Option` per option, with its Python name (the
kafka-python / aiokafka spelling), its Java / librdkafka property (``fetch.min.bytes``,
accepted too: ``resolve("consumer", "kafkastate", {"fetch.min.bytes": 10})``), the roles it
applies to, its check and its default. The libraries users come from disagree on a few
defaults (aiokafka's consumer auto-commits and waits 40 s for a request, kafka-python's
producer has no linger...): :data:`FLAVOUR_DEFAULTS` holds those, per flavour --
``"aiokafka"`` (``AIOKafkaConsumer``/``AIOKafkaProducer``), ``"kafka-python"``
(``KafkaConsumer``/``KafkaProducer``) and ``"kafkastate"`` (``open_consumer``/
``open_producer``).

:func:`resolve` takes what a user gave and returns every option of the role with its value:

* an unknown name raises ``TypeError`` (as Python does for an unknown keyword), an option of
  the user's library that kafkastate does not implement
  :class:`~kafkastate.errors.KafkaConfigurationError` (a ``ValueError``), both naming it;
* each value is checked by its option's check, which names the option in its error;
* options that depend on each other are settled and cross-checked once (a heartbeat below the
  session timeout, TLS and SASL against ``security_protocol``, a transactional producer is
  idempotent, ``receive_message_max_bytes`` at least a whole Fetch response...).

The builders (:func:`client_config`, :func:`fetcher_config`, :func:`group_config`,
:func:`producer_config`) turn resolved options into the machines' configs. TLS contexts are
IO objects: the core only checks that one is a context and whether TLS is wanted
(:func:`wants_tls`); the adapters build the context.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from kafkastate.core.protocol.compression import Compression
from kafkastate.core.sasl import MECHANISMS
from kafkastate.errors import KafkaConfigurationError

if TYPE_CHECKING:
    # The machines' modules are imported where their configs are built: a producer never
    # imports the consumer, group or admin machines, and resolving options imports no
    # machine (import time: each Spark worker, each CLI call).
    from kafkastate.core.admin.machine import AdminConfig
    from kafkastate.core.client import ClientConfig
    from kafkastate.core.consumer.assignors import Assignor
    from kafkastate.core.consumer.consumer import ConsumerMachine
    from kafkastate.core.consumer.fetcher import FetcherConfig
    from kafkastate.core.consumer.group import GroupConfig
    from kafkastate.core.consumer.group848 import ConsumerGroupConfig
    from kafkastate.core.producer.producer import ProducerConfig

__all__ = [
    "FLAVOURS",
    "accepted",
    "admin_config",
    "from_properties",
    "from_text",
    "FLAVOUR_DEFAULTS",
    "GROUP_PROTOCOLS",
    "OPTIONS",
    "SASL_IO_KEYS",
    "Option",
    "client_config",
    "check_consumer",
    "api_version_hint",
    "close_serializers",
    "deserializer_of",
    "max_usable_produce_magic",
    "options_dict",
    "serializer_of",
    "consumer_machine",
    "fetcher_config",
    "group_config",
    "producer_config",
    "resolve",
    "resolve_assignors",
    "SECRET_OPTIONS",
    "Secret",
    "TLS_FILE_OPTIONS",
    "wants_tls",
]

FLAVOURS: Final = ("aiokafka", "kafka-python", "kafkastate")
"""Whose defaults a face takes."""
GROUP_PROTOCOLS: Final = ("classic", "consumer")
"""``group.protocol`` values: the classic JoinGroup/SyncGroup protocol, or KIP-848."""
PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS: Final = MECHANISMS
SASL_IO_KEYS: Final = ("_sasl_gssapi", "_sasl_aws_msk_iam")
"""Keys a runtime adds to resolved options (not options users give): the IO halves of the
GSSAPI and AWS_MSK_IAM mechanisms (kafkastate/_sasl_io.py), read by :func:`client_config`."""
COMPRESSION: Final = {
    None: Compression.NONE,
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
_INT32_MAX: Final = 2**31 - 1

Check = Callable[[str, Any], Any]


# ------------------------------------------------------------------------------ checks


def _number(name: str, value: Any, *, minimum: float, strict: bool = False) -> float | int:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and not math.isnan(value)
    if not ok or value < minimum or (strict and value == minimum):
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise KafkaConfigurationError(f"{name} must be a number of ms {bound}, got {value!r}")
    return value  # type: ignore[no-any-return]


def _kind(kind: str) -> Callable[[Check], Check]:
    """Tag a check with how its option's value is read from text (:func:`from_text`)."""

    def tag(check: Check) -> Check:
        check.kind = kind  # type: ignore[attr-defined]
        return check

    return tag


@_kind("number")
def ms(name: str, value: Any) -> float | int:
    """A duration in ms, >= 0."""
    return _number(name, value, minimum=0)


@_kind("number")
def positive_ms(name: str, value: Any) -> float | int:
    """A duration in ms, > 0."""
    return _number(name, value, minimum=0, strict=True)


def _optional(check: Check) -> Check:
    def optional(name: str, value: Any) -> Any:
        return None if value is None else check(name, value)

    return _kind(getattr(check, "kind", "object"))(optional)


def _at_least(minimum: int) -> Check:
    @_kind("int")
    def count(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise KafkaConfigurationError(f"{name} must be an int >= {minimum}, got {value!r}")
        return value

    return count


@_kind("int")
def _buffer_memory(name: str, value: Any) -> int:
    """``buffer.memory``: at least what the smallest record needs, or every send would be
    refused (as larger than the buffer)."""
    from kafkastate.core.producer.accumulator import (  # noqa: PLC0415 -- see the top
        MIN_BUFFER_MEMORY,
        RECORD_OVERHEAD,
    )

    count: int = _at_least(1)(name, value)
    if count < MIN_BUFFER_MEMORY:
        raise KafkaConfigurationError(
            f"{name} must be at least {MIN_BUFFER_MEMORY} bytes, got {count}: the smallest "
            f"record in a batch of its own takes {MIN_BUFFER_MEMORY - RECORD_OVERHEAD} bytes "
            f"and each record counts {RECORD_OVERHEAD} more, so every send would be refused"
        )
    return count


@_kind("bool")
def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool | int):
        raise KafkaConfigurationError(f"{name} must be a bool, got {value!r}")
    return bool(value)


@_kind("str")
def _text(name: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise KafkaConfigurationError(f"{name} must be a str or None, got {value!r}")
    return value


@_kind("str")
def _key_password(name: str, value: Any) -> Any:
    # what ssl.SSLContext.load_cert_chain takes: str, bytes, or a callable returning one
    if value is None or isinstance(value, str | bytes) or callable(value):
        return value
    raise KafkaConfigurationError(
        f"{name} must be a str, bytes, a callable returning one, or None, "
        f"got a {type(value).__name__}"
    )


@_kind("str")
def _name(name: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise KafkaConfigurationError(f"{name} must be a non-empty str or None, got {value!r}")
    return value


def _one_of(*choices: Any) -> Check:
    @_kind("int or str")
    def choice(name: str, value: Any) -> Any:
        if isinstance(value, bool) or value not in choices:
            shown = ", ".join(repr(c) for c in choices)
            raise KafkaConfigurationError(f"{name} must be one of {shown}, got {value!r}")
        return value

    return choice


def _callable(name: str, value: Any) -> Any:
    if value is not None and not callable(value):
        raise KafkaConfigurationError(f"{name} must be a callable or None, got {value!r}")
    return value


@_kind("str")
def _credential(name: str, value: Any) -> Any:
    if value is not None and not isinstance(value, str) and not callable(value):
        # (never the value itself in the message: it may be a secret)
        raise KafkaConfigurationError(
            f"{name} must be a str, a callable returning one, or None, got a {type(value).__name__}"
        )
    return value


def _token_provider(name: str, value: Any) -> Any:
    if value is not None and not callable(getattr(value, "token", None)):
        raise KafkaConfigurationError(
            f"{name} must have a token() method (kafkastate.abc.AbstractTokenProvider, "
            f"or kafka-python's provider with a plain token()), got a {type(value).__name__}"
        )
    return value


@_kind("str")
def _kerberos_name(name: str, value: Any) -> Any:
    # a gssapi.Name is the user's own object: the core cannot import gssapi to check it
    if value is None or (isinstance(value, str) and value):
        return value
    if type(value).__module__.split(".")[0] == "gssapi":
        return value
    raise KafkaConfigurationError(
        f"{name} must be a non-empty str ('kafka@broker.example.com', or a principal "
        f"'kafka/broker.example.com@REALM') or a gssapi.Name, got {value!r}"
    )


def _tracing(name: str, value: Any) -> Any:
    if isinstance(value, bool) or callable(getattr(value, "get_tracer", None)):
        return value
    raise KafkaConfigurationError(
        f"{name} must be True, False or an OpenTelemetry TracerProvider, got {value!r}"
    )


def _otel_metrics(name: str, value: Any) -> Any:
    if isinstance(value, bool) or callable(getattr(value, "get_meter", None)):
        return value
    raise KafkaConfigurationError(
        f"{name} must be True, False or an OpenTelemetry MeterProvider, got {value!r}"
    )


def _anything(name: str, value: Any) -> Any:
    del name
    return value


@_kind("str")
def _servers(name: str, value: Any) -> Any:
    from kafkastate.core.client import ClientConfig  # noqa: PLC0415 -- see the top

    try:
        return ClientConfig(bootstrap_servers=value).bootstrap_servers
    except KafkaConfigurationError as exc:
        raise KafkaConfigurationError(f"{name}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise KafkaConfigurationError(f"{name}: {exc}") from None


def _ssl_context(name: str, value: Any) -> Any:
    # the core does not import ssl: an SSLContext is what can wrap sockets
    if value is not None and not callable(getattr(value, "wrap_socket", None)):
        raise KafkaConfigurationError(f"{name} must be an ssl.SSLContext, got {value!r}")
    return value


@_kind("int or str")
def _acks(name: str, value: Any) -> Any:
    if value is None:
        return None  # aiokafka: decided by enable_idempotence
    return _one_of(0, 1, -1, "all")(name, value)


@_kind("int")
def _retries(name: str, value: Any) -> int:
    if value == math.inf:
        return _INT32_MAX
    count: int = _at_least(0)(name, value)
    return min(count, _INT32_MAX)


@_kind("str")
def _compression(name: str, value: Any) -> Any:
    if value not in COMPRESSION:
        raise KafkaConfigurationError(
            f"{name} must be one of gzip, snappy, lz4, zstd or None, got {value!r}"
        )
    return value


def _deserializer(name: str, value: Any) -> Any:
    if value is None or callable(value) or callable(getattr(value, "deserialize", None)):
        return value
    raise KafkaConfigurationError(
        f"{name} must be a callable f(bytes) or have deserialize(topic, headers, data), "
        f"got {value!r}"
    )


def _serializer(name: str, value: Any) -> Any:
    if value is None or callable(value) or callable(getattr(value, "serialize", None)):
        return value
    raise KafkaConfigurationError(
        f"{name} must be a callable f(data) or have serialize(topic, headers, data), got {value!r}"
    )


def _partitioner(name: str, value: Any) -> Any:
    if value is None or callable(value):
        return value
    if not isinstance(value, str | bytes) and callable(getattr(value, "partition", None)):
        return value  # (str.partition is no partitioner)
    raise KafkaConfigurationError(
        f"{name} must be a callable (key_bytes, all_partitions, available_partitions) or "
        f"have partition(topic, key, key_bytes, value, value_bytes, cluster), got {value!r}"
    )


def _strategy(name: str, value: Any) -> Any:
    if value is not None:
        resolve_assignors(value, name=name)
    return value


# ------------------------------------------------------------------------------- table


@attrs.frozen
class Option:
    """One option of the table."""

    name: str
    """The Python keyword (kafka-python's and aiokafka's spelling)."""
    prop: str
    """The Java / librdkafka property, also accepted ("" if it has none)."""
    roles: frozenset[str]
    """``consumer``, ``producer``, ``admin``."""
    check: Check
    """Checks a value (naming the option in its error) and returns it normalised."""
    default: Any
    """The default (see :data:`FLAVOUR_DEFAULTS` for the libraries' own)."""
    doc: str
    """What it does."""


_C: Final = frozenset({"consumer"})
_P: Final = frozenset({"producer"})
_CP: Final = frozenset({"consumer", "producer"})
_CPA: Final = frozenset({"consumer", "producer", "admin"})

_TABLE: Final = (
    # ---------------------------------------------------------- client (every role)
    Option("bootstrap_servers", "bootstrap.servers", _CPA, _servers, "localhost",
           '"host[:port],..." or a list of them (default port 9092).'),
    Option("client_id", "client.id", _CPA, _text, "kafkastate", "Sent with every request."),
    Option("request_timeout_ms", "request.timeout.ms", _CPA, positive_ms, 30000,
           "How long a request may take; also how long offset queries wait."),
    Option("retry_backoff_ms", "retry.backoff.ms", _CPA, ms, 100,
           "Wait before retrying a failed request."),
    Option("metadata_max_age_ms", "metadata.max.age.ms", _CPA, ms, 300000,
           "Refresh metadata at least this often."),
    Option("connections_max_idle_ms", "connections.max.idle.ms", _CPA, positive_ms, 540000,
           "Close connections idle this long."),
    Option("reconnect_backoff_ms", "reconnect.backoff.ms", _CPA, positive_ms, 50,
           "First wait before reconnecting to a broker (doubles, jittered)."),
    Option("reconnect_backoff_max_ms", "reconnect.backoff.max.ms", _CPA, positive_ms, 1000,
           "Longest wait before reconnecting."),
    Option("max_in_flight_requests_per_connection",
           "max.in.flight.requests.per.connection", _CPA, _at_least(1), 5,
           "Requests outstanding per broker connection."),
    Option("receive_message_max_bytes", "receive.message.max.bytes", _CPA,
           _optional(_at_least(1)), None,
           "Largest response accepted (None: the core's limit; a consumer's is at least "
           "fetch_max_bytes + max_partition_fetch_bytes)."),
    Option("allow_auto_create_topics", "allow.auto.create.topics", _CP, _flag, True,
           "Let metadata requests create missing topics (where the broker allows it)."),
    Option("security_protocol", "security.protocol", _CPA, _one_of(*PROTOCOLS), "PLAINTEXT",
           "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."),
    Option("ssl_context", "", _CPA, _ssl_context, None,
           "The TLS settings for SSL/SASL_SSL, e.g. kafkastate.helpers.create_ssl_context(...) "
           "(default: built from the ssl_* options)."),
    Option("ssl_check_hostname", "", _CPA, _flag, True,
           "The broker's certificate must name the host connected to (Java's "
           "ssl.endpoint.identification.algorithm=https); the CA is checked either way."),
    Option("ssl_cafile", "ssl.ca.location", _CPA, _text, None,
           "CA certificates (PEM) to verify brokers with (default: the system's trust store)."),
    Option("ssl_certfile", "ssl.certificate.location", _CPA, _text, None,
           "Client certificate (PEM) for mutual TLS."),
    Option("ssl_keyfile", "ssl.key.location", _CPA, _text, None, "The client certificate's key."),
    Option("ssl_password", "ssl.key.password", _CPA, _key_password, None,
           "The key's password (an encrypted key); never shown in messages or logs."),
    Option("ssl_crlfile", "ssl.crl.location", _CPA, _text, None,
           "Certificate revocation lists (PEM): a revoked broker certificate is refused."),
    Option("ssl_ciphers", "ssl.cipher.suites", _CPA, _text, None,
           "OpenSSL cipher list for TLS 1.2 and below (default: Python's)."),
    Option("sasl_mechanism", "sasl.mechanism", _CPA, _optional(_one_of(*SASL_MECHANISMS)), None,
           "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, GSSAPI or AWS_MSK_IAM "
           "(default PLAIN with SASL_*)."),
    Option("sasl_plain_username", "sasl.username", _CPA, _credential, None,
           "SASL user, or a callable returning it (called at every authentication)."),
    Option("sasl_plain_password", "sasl.password", _CPA, _credential, None,
           "SASL password, or a callable returning the current one (rotated without a "
           "restart: called at every authentication and re-authentication)."),
    Option("sasl_oauth_token_provider", "", _CPA, _token_provider, None,
           "OAUTHBEARER tokens: an object with token() (async, as aiokafka's "
           "AbstractTokenProvider, or plain, as kafka-python's) and optionally extensions();"
           " asked at every authentication and re-authentication. See "
           "kafkastate.oauth.OIDCTokenProvider."),
    Option("sasl_kerberos_service_name", "sasl.kerberos.service.name", _CPA, _text, "kafka",
           "GSSAPI: the brokers' Kerberos service name."),
    Option("sasl_kerberos_domain_name", "", _CPA, _text, None,
           "GSSAPI: the host part of the brokers' service principal (default: each "
           "broker's host name)."),
    Option("sasl_kerberos_name", "", _CPA, _kerberos_name, None,
           "GSSAPI: the brokers' Kerberos name, overriding sasl_kerberos_service_name and "
           "sasl_kerberos_domain_name: 'service@host' (a host-based service), a principal "
           "'service/host@REALM', or a gssapi.Name used as it is."),
    Option("api_version", "", _CPA, _anything, None,
           "Versions are always negotiated; kafka-python's hint (a tuple or '0.11.0') "
           "refuses features the version lacks and skips the constructor's wait."),
    Option("loop", "", _CPA, _anything, None,
           "aiokafka's; accepted for compatibility: the running event loop is used."),
    Option("bootstrap_timeout_ms", "", _CPA, positive_ms, 30000,
           "How long a blocking client's constructor waits for a bootstrap server."),
    Option("api_version_auto_timeout_ms", "", _CPA, _optional(positive_ms), None,
           "kafka-python 2's name for bootstrap_timeout_ms (wins when given)."),
    Option("metrics_enabled", "", _CPA, _flag, True, "Accepted; metrics() works either way."),
    Option("metrics_num_samples", "metrics.num.samples", _CPA, _at_least(1), 2,
           "Samples kept for metrics()'s windowed rates, averages and maxima."),
    Option("metrics_sample_window_ms", "metrics.sample.window.ms", _CPA, positive_ms, 30000,
           "Length of each sample."),
    Option("statistics_interval_ms", "statistics.interval.ms", _CPA, ms, 0,
           "How often stats_cb gets the statistics (metrics() and health()); 0 = never."),
    Option("tracing", "", _CP, _tracing, False,
           "OpenTelemetry spans (PRODUCER per send, CONSUMER per record, W3C trace context "
           "in the headers): True for the global tracer provider, or a TracerProvider; "
           "needs the otel extra."),
    Option("otel_metrics", "", _CPA, _otel_metrics, False,
           "Export metrics() through OpenTelemetry metrics (observable instruments, "
           "semantic-convention and KIP-714 names): True for the global meter provider, "
           "or a MeterProvider; needs the otel extra."),
    Option("stats_cb", "", _CPA, _callable, None,
           "Called with a JSON-able dict every statistics_interval_ms (confluent-kafka's); "
           "it runs on the client's IO task or thread: keep it short. What it raises is "
           "logged."),
    # ------------------------------------------------------------------------ consumer
    Option("group_id", "group.id", _C, _name, None,
           "Where committed offsets are read and written; the consumer group."),
    Option("key_deserializer", "", _C, _deserializer, None,
           "bytes -> key: a callable, or an object with deserialize(topic, headers, data)."),
    Option("value_deserializer", "", _C, _deserializer, None,
           "bytes -> value: a callable, or an object with deserialize(topic, headers, data)."),
    Option("auto_offset_reset", "auto.offset.reset", _C,
           _one_of("earliest", "latest", "none"), "latest",
           "Where to start without a committed offset."),
    Option("enable_auto_commit", "enable.auto.commit", _C, _flag, True,
           "Commit what was handed out every auto_commit_interval_ms, before a "
           "revocation and on close (needs a group_id)."),
    Option("auto_commit_interval_ms", "auto.commit.interval.ms", _C, positive_ms, 5000,
           "The auto-commit period."),
    Option("default_offset_commit_callback", "", _C, _callable, None,
           "callback(offsets, error) for auto-commits and commit_async without one "
           "(blocking consumer)."),
    Option("fetch_min_bytes", "fetch.min.bytes", _C, _at_least(1), 1,
           "The broker answers a Fetch once it has this much."),
    Option("fetch_max_wait_ms", "fetch.max.wait.ms", _C, ms, 500,
           "How long the broker may hold a Fetch for fetch_min_bytes."),
    Option("fetch_max_bytes", "fetch.max.bytes", _C, _at_least(1), 52_428_800,
           "A Fetch response's size limit."),
    Option("max_partition_fetch_bytes", "max.partition.fetch.bytes", _C, _at_least(1),
           1_048_576, "A partition's share of a Fetch response."),
    Option("max_poll_records", "max.poll.records", _C, _optional(_at_least(1)), 500,
           "Records per getmany()/poll() at most."),
    Option("check_crcs", "check.crcs", _C, _flag, True, "Verify each batch's CRC32C."),
    Option("isolation_level", "isolation.level", _C,
           _one_of("read_uncommitted", "read_committed"), "read_uncommitted",
           "read_committed hides aborted transactions' records."),
    Option("client_rack", "client.rack", _C, _text, None,
           "Fetch from the replica in this rack (KIP-392)."),
    Option("enable_incremental_fetch_sessions", "", _C, _flag, True,
           "Incremental fetch sessions (KIP-227)."),
    Option("exclude_internal_topics", "exclude.internal.topics", _C, _flag, True,
           "Leave internal topics out of pattern subscriptions."),
    Option("consumer_timeout_ms", "", _C, ms, math.inf,
           "Iteration stops after this long without a record."),
    Option("listener", "", _C, _anything, None,
           "A ConsumerRebalanceListener for the topics given to open_consumer."),
    Option("group_protocol", "group.protocol", _C, _one_of(*GROUP_PROTOCOLS), "classic",
           "classic (JoinGroup/SyncGroup) or consumer (KIP-848)."),
    Option("partition_assignment_strategy", "partition.assignment.strategy", _C, _strategy,
           None, "Assignors, preferred first (names, Assignor objects, or another "
           "library's built-in classes)."),
    Option("session_timeout_ms", "session.timeout.ms", _C, positive_ms, 45000,
           "A member silent this long is out of the group (classic)."),
    Option("heartbeat_interval_ms", "heartbeat.interval.ms", _C, positive_ms, 3000,
           "Heartbeat period (classic)."),
    Option("max_poll_interval_ms", "max.poll.interval.ms", _C, positive_ms, 300000,
           "A member that takes no records for this long leaves the group."),
    Option("rebalance_timeout_ms", "", _C, _optional(positive_ms), None,
           "How long the coordinator waits for members to rejoin (default "
           "max_poll_interval_ms)."),
    Option("group_instance_id", "group.instance.id", _C, _name, None,
           "Static membership (KIP-345)."),
    Option("group_remote_assignor", "group.remote.assignor", _C, _name, None,
           "The broker's assignor with group_protocol='consumer'."),
    Option("leave_group_on_close", "", _C, _optional(_flag), None,
           "Send LeaveGroup on close (default: dynamic members do)."),
    # ------------------------------------------------------------------------ producer
    Option("key_serializer", "", _P, _serializer, None,
           "key -> bytes: a callable, or an object with serialize(topic, headers, data)."),
    Option("value_serializer", "", _P, _serializer, None,
           "value -> bytes: a callable, or an object with serialize(topic, headers, data)."),
    Option("acks", "acks", _P, _acks, "all", "0, 1, -1 or 'all'."),
    Option("enable_idempotence", "enable.idempotence", _P, _optional(_flag), None,
           "Idempotent producer (None: on when acks='all')."),
    Option("linger_ms", "linger.ms", _P, ms, 5, "How long a batch waits for more records."),
    Option("batch_size", "batch.size", _P, _at_least(0), 16384, "A batch's size in bytes."),
    Option("max_batch_size", "", _P, _optional(_at_least(0)), None,
           "aiokafka's name for batch_size (wins when given)."),
    Option("buffer_memory", "buffer.memory", _P, _buffer_memory, 32 * 1024 * 1024,
           "Bytes of records waiting to be sent, each counting an estimated 480 bytes "
           "of Python objects on top of its encoded size; a send beyond it waits "
           "max_block_ms. At least 561 (the smallest record in a batch of its own)."),
    Option("max_request_size", "max.request.size", _P, _at_least(1), 1024 * 1024,
           "Largest Produce request (and record)."),
    Option("compression_type", "compression.type", _P, _compression, None,
           "gzip, snappy, lz4, zstd or None."),
    Option("delivery_timeout_ms", "delivery.timeout.ms", _P, positive_ms, 120000,
           "A record fails if not acknowledged within this."),
    Option("max_block_ms", "max.block.ms", _P, _optional(ms), 60000,
           "How long a send waits for metadata or buffer room."),
    Option("metadata_max_idle_ms", "metadata.max.idle.ms", _P, _at_least(5000), 300000,
           "A topic not sent to this long leaves the producer's metadata at the next "
           "update; a later send fetches it again (at least 5000, as Java's)."),
    Option("retries", "retries", _P, _retries, _INT32_MAX,
           "Retries of a failed batch (within delivery_timeout_ms)."),
    Option("partitioner", "", _P, _partitioner, None,
           "(key_bytes, all_partitions, available_partitions) -> partition, or a "
           "kafka-python 3.0 Partitioner object (DefaultPartitioner, StickyPartitioner)."),
    Option("transactional_id", "transactional.id", _P, _name, None,
           "Makes the producer transactional (and idempotent)."),
    Option("transaction_timeout_ms", "transaction.timeout.ms", _P, positive_ms, 60000,
           "The coordinator aborts a transaction open this long."),
)  # fmt: skip

OPTIONS: Final[Mapping[str, Option]] = {o.name: o for o in _TABLE}
"""Every option, by Python name."""
_LIBRDKAFKA_ALIASES: Final = {"sasl.mechanisms": "sasl_mechanism"}
"""librdkafka spellings that differ from the Java property (kcat's ``-X`` names)."""
_BY_PROP: Final = {o.prop: o.name for o in _TABLE if o.prop} | _LIBRDKAFKA_ALIASES

FLAVOUR_DEFAULTS: Final[Mapping[tuple[str, str], Mapping[str, Any]]] = {
    ("aiokafka", "consumer"): {
        "sasl_mechanism": "PLAIN",
        "request_timeout_ms": 40000,
        "session_timeout_ms": 10000,
        "consumer_timeout_ms": 200,
        "allow_auto_create_topics": False,
        "max_poll_records": None,
        "partition_assignment_strategy": None,  # roundrobin (see resolve)
    },
    ("aiokafka", "producer"): {
        "sasl_mechanism": "PLAIN",
        "request_timeout_ms": 40000,
        "acks": None,  # 1, or "all" when idempotent
        "enable_idempotence": False,
        "linger_ms": 0,
        "max_block_ms": None,  # request_timeout_ms
    },
    ("kafka-python", "consumer"): {
        "receive_message_max_bytes": 100_000_000,
    },
    ("kafka-python", "producer"): {
        "client_id": None,  # kafka-python-producer-N
        "acks": -1,
        "linger_ms": 0,
        "reconnect_backoff_max_ms": 30000,
        "receive_message_max_bytes": 100_000_000,
    },
    ("kafkastate", "consumer"): {
        "enable_auto_commit": False,
        "allow_auto_create_topics": False,
        "max_poll_records": None,
    },
    ("kafkastate", "producer"): {},
    ("aiokafka", "admin"): {
        "sasl_mechanism": "PLAIN",
        "request_timeout_ms": 40000,
    },
    ("kafka-python", "admin"): {
        "reconnect_backoff_max_ms": 30000,
        "receive_message_max_bytes": 100_000_000,
    },
    ("kafkastate", "admin"): {},
}
"""Where a library's default differs from :data:`OPTIONS`'s."""

_ONLY: Final[Mapping[str, frozenset[str]]] = {
    # options of some faces only: elsewhere they are unknown keywords
    "listener": frozenset({"kafkastate"}),
    "consumer_timeout_ms": frozenset({"aiokafka", "kafka-python"}),
    "default_offset_commit_callback": frozenset({"kafka-python"}),
    "bootstrap_timeout_ms": frozenset({"kafka-python"}),
    "api_version_auto_timeout_ms": frozenset({"kafka-python"}),
    "metrics_enabled": frozenset({"kafka-python"}),
    "retries": frozenset({"kafka-python"}),
    "leave_group_on_close": frozenset({"kafka-python"}),
    "api_version": frozenset({"aiokafka", "kafka-python"}),
    "loop": frozenset({"aiokafka"}),
    "max_batch_size": frozenset({"aiokafka", "kafkastate"}),
    "key_serializer": frozenset({"aiokafka", "kafka-python"}),
    "value_serializer": frozenset({"aiokafka", "kafka-python"}),
}

UNSUPPORTED: Final[Mapping[str, frozenset[str]]] = {
    "kafka-python": frozenset(
        {
            "client_dns_lookup",
            "receive_buffer_bytes",
            "send_buffer_bytes",
            "socket_options",
            "metric_reporters",
            "metric_group_prefix",
            "selector",
            "proxy_url",
            "socks5_proxy",
            "kafka_client",
        }
    ),
    "aiokafka": frozenset(),
    "kafkastate": frozenset(),
}
"""Options of the users' libraries that kafkastate does not implement: refused by name."""


def _applies(option: Option, role: str, flavour: str) -> bool:
    only = _ONLY.get(option.name)
    return role in option.roles and (only is None or flavour in only)


# ------------------------------------------------------------------------------ resolve


def from_text(name: str, raw: str, *, label: str | None = None) -> Any:
    """Option ``name``'s value read from text (a Spark or properties-file option): a bool
    from ``true``/``false``, a number, an int, or the text itself, as the option takes.

    Args:
        name: the option's Python name or Java property.
        raw: the text.
        label: how messages name it (default ``name``).

    Raises:
        KafkaConfigurationError: no such option, one that text cannot give (a callable, an
            SSL context), or text that is not of its kind; named.
    """
    option = OPTIONS.get(_BY_PROP.get(name, name))
    name = name if label is None else label
    if option is None:
        raise KafkaConfigurationError(f"{name} is not an option kafkastate knows")
    kind = getattr(option.check, "kind", "object")
    text = raw.strip()
    if kind == "bool":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise KafkaConfigurationError(f"{name} must be true or false, got {raw!r}")
    if kind in ("int", "number", "int or str"):
        try:
            return int(text)
        except ValueError:
            pass
        if kind == "number":
            try:
                return float(text)
            except ValueError:
                pass
        if kind != "int or str":
            raise KafkaConfigurationError(f"{name} must be a number, got {raw!r}")
        return text
    if kind == "str":
        return text
    raise KafkaConfigurationError(f"{name} cannot be given as text")


def from_properties(properties: Mapping[str, str]) -> dict[str, Any]:
    """Text properties (a properties file, kcat's ``-X key=value``) as keyword options:
    each key a Java / librdkafka property or a Python name, each value read by
    :func:`from_text`.

    Returns:
        Python name -> value; the last of two keys naming one option wins.

    Raises:
        KafkaConfigurationError: an unknown key, or a value not of its option's kind; named.
    """
    out: dict[str, Any] = {}
    for key, raw in properties.items():
        name = _BY_PROP.get(key, key)
        out[name] = from_text(name, raw, label=key)
    return out


def accepted(role: str, flavour: str) -> frozenset[str]:
    """The Python names of every option a ``flavour`` face of ``role`` takes."""
    return frozenset(o.name for o in _TABLE if _applies(o, role, flavour))


def resolve(role: str, flavour: str, given: Mapping[str, Any], *, owner: str) -> dict[str, Any]:
    """Every option of ``role`` for a ``flavour`` face, from what the user gave.

    Args:
        role: ``"consumer"``, ``"producer"`` or ``"admin"``.
        flavour: one of :data:`FLAVOURS`: whose defaults apply.
        given: the user's keywords (Python names, or Java/librdkafka properties).
        owner: the face's name, for messages (``"AIOKafkaConsumer"``).

    Returns:
        Python name -> checked value, for every option of the role.

    Raises:
        TypeError: an option no library has for this face (as Python would).
        KafkaConfigurationError: an option of the user's library kafkastate does not
            implement, a bad value, or options that contradict each other; each named.
    """
    out: dict[str, Any] = {}
    defaults = FLAVOUR_DEFAULTS[(flavour, role)]
    for entry in _TABLE:
        if _applies(entry, role, flavour):
            out[entry.name] = defaults.get(entry.name, entry.default)
    unknown: list[str] = []
    lacking: list[str] = []
    for key, value in given.items():
        name = _BY_PROP.get(key, key)
        option = OPTIONS.get(name)
        if option is None or not _applies(option, role, flavour):
            (lacking if name in UNSUPPORTED[flavour] else unknown).append(key)
            continue
        out[name] = value
    if unknown and flavour == "kafka-python":  # kafka-python's type and words
        shown = ", ".join(repr(k) for k in sorted(unknown))
        raise KafkaConfigurationError(f"{owner}: Unrecognized configs: {{{shown}}}")
    if unknown:
        raise TypeError(f"{owner}: unknown option(s): {', '.join(sorted(unknown))}")
    if lacking:
        raise KafkaConfigurationError(
            f"{owner}: {', '.join(sorted(lacking))}: {flavour} option(s) not supported by "
            "kafkastate"
        )
    for name, value in out.items():
        out[name] = OPTIONS[name].check(name, value)
    for name in SECRET_OPTIONS:  # masked wherever the dict is shown (a traceback's locals)
        if isinstance(out.get(name), str):
            out[name] = Secret(out[name])
    user_set = frozenset(_BY_PROP.get(key, key) for key in given)
    _settle_tls(out, flavour, user_set)
    _settle_client(out, flavour)
    if flavour == "kafka-python":
        _settle_kafka_python(out, role, user_set)
    if role == "consumer":
        _settle_consumer(out, flavour)
    elif role == "producer":
        _settle_producer(out, flavour)
    return out


def api_version_hint(value: Any, *, name: str = "api_version") -> tuple[int, ...] | None:
    """kafka-python's ``api_version`` as a tuple: a tuple of ints, or a str such as
    ``"0.11.0"`` (``"auto"`` and None: no hint).

    Raises:
        KafkaConfigurationError: anything else.
    """
    if value is None or value == "auto":
        return None
    if isinstance(value, str):
        try:
            value = tuple(int(part) for part in value.split("."))
        except ValueError:
            value = None
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
    ):
        return value
    raise KafkaConfigurationError(f"{name} must be tuple, got {value!r}")


def max_usable_produce_magic(api_version: Any) -> int:
    """The record batch format (magic) a broker of ``api_version`` reads: 2 from 0.11, 1
    from 0.10, else 0 (kafka-python's ``KafkaProducer.max_usable_produce_magic``).
    kafkastate itself always writes magic 2, the only format Kafka 4 accepts.

    Raises:
        KafkaConfigurationError: not an api_version (:func:`api_version_hint`).
    """
    version = api_version_hint(api_version)
    if version is None or version >= (0, 11):
        return 2
    return 1 if version >= (0, 10, 0) else 0


# The broker version each kafka-python feature needs (an older api_version hint refuses it).
_IDEMPOTENCE_VERSION: Final = (0, 11)
_SEPARATE_POLL_INTERVAL_VERSION: Final = (0, 10, 1)
_KIP_735_VERSION: Final = (3, 0)
_PRE_KIP_735_SESSION_TIMEOUT_MS: Final = 30000
_COMPRESSION_VERSIONS: Final = {"lz4": ((0, 8, 2), "LZ4"), "zstd": ((2, 1), "Zstd")}


def _settle_kafka_python(out: dict[str, Any], role: str, user_set: frozenset[str]) -> None:
    """kafka-python 3.0's own cross-checks, in its words (``KafkaConsumer.__init__``,
    ``KafkaProducer.__init__``, ``Heartbeat``), and what an explicit ``api_version`` hint
    older than a feature does to it."""
    version = out["api_version"] = api_version_hint(out["api_version"])
    if role == "consumer":
        fetch_wait = out["fetch_max_wait_ms"]
        request = out["request_timeout_ms"]
        idle = out["connections_max_idle_ms"]
        if not fetch_wait < request < idle:
            raise KafkaConfigurationError(
                f"connections_max_idle_ms ({idle}) must be larger than request_timeout_ms "
                f"({request}) which must be larger than fetch_max_wait_ms ({fetch_wait})."
            )
        if version is not None:
            _settle_group_timeouts(out, version, user_set)
        if out["group_id"] is not None:  # (kafka-python's Heartbeat, after the above)
            heartbeat, session = out["heartbeat_interval_ms"], out["session_timeout_ms"]
            if heartbeat >= session:
                raise KafkaConfigurationError(
                    "Heartbeat interval must be lower than the session timeout "
                    f"({heartbeat} v {session}): heartbeat_interval_ms, session_timeout_ms"
                )
        return
    if role == "producer":
        _settle_producer_hint(out, version)


def _settle_group_timeouts(
    out: dict[str, Any], version: tuple[int, ...], user_set: frozenset[str]
) -> None:
    """kafka-python's session / poll interval defaults and check for an old broker."""
    session_given = "session_timeout_ms" in user_set
    poll_given = "max_poll_interval_ms" in user_set
    if not session_given:
        if version < _SEPARATE_POLL_INTERVAL_VERSION and poll_given:
            out["session_timeout_ms"] = out["max_poll_interval_ms"]
        elif version < _KIP_735_VERSION:  # the brokers' max session timeout was 30 s
            out["session_timeout_ms"] = _PRE_KIP_735_SESSION_TIMEOUT_MS
    if version < _SEPARATE_POLL_INTERVAL_VERSION:
        if not poll_given:
            out["max_poll_interval_ms"] = out["session_timeout_ms"]
        if out["group_id"] is not None and (
            out["max_poll_interval_ms"] != out["session_timeout_ms"]
        ):
            raise KafkaConfigurationError(
                f"Broker version {version} does not support different values for "
                f"max_poll_interval_ms ({out['max_poll_interval_ms']}) and "
                f"session_timeout_ms ({out['session_timeout_ms']})"
            )


def _settle_producer_hint(out: dict[str, Any], version: tuple[int, ...] | None) -> None:
    """kafka-python's producer checks: compression and idempotence against the hint."""
    if version is not None:
        needed = _COMPRESSION_VERSIONS.get(out["compression_type"])
        if needed is not None and version < needed[0]:
            floor = ".".join(map(str, needed[0]))
            raise KafkaConfigurationError(f"{needed[1]} Requires >= Kafka {floor} Brokers")
    explicit = out["enable_idempotence"] is True or out["transactional_id"] is not None
    if out["transactional_id"] is not None and out["enable_idempotence"] is False:
        raise KafkaConfigurationError("Cannot set transactional_id without enable_idempotence.")
    if (
        version is not None
        and version < _IDEMPOTENCE_VERSION
        and out["enable_idempotence"] is not False
    ):
        if explicit:
            raise KafkaConfigurationError(
                "Idempotent/Transactional producer requires broker >= 0.11 "
                f"(got api_version={version})"
            )
        out["enable_idempotence"] = False  # as kafka-python: off for an old broker


SECRET_OPTIONS: Final = ("ssl_password", "sasl_plain_password")
"""Options whose values are never shown: in messages, logs or a face's ``config``."""


class Secret(str):
    """A password that prints masked: ``repr()`` (what a printed dict or a traceback's
    locals show) is ``'********'``; the value itself is the string."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "'********'"


TLS_FILE_OPTIONS: Final = (
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password",
    "ssl_crlfile",
    "ssl_ciphers",
)
"""kafka-python's options a TLS context is built from when ``ssl_context`` is not given."""


def _settle_tls(out: dict[str, Any], flavour: str, user_set: frozenset[str]) -> None:
    """TLS settings against ``security_protocol``: never a silent plaintext connection,
    never an ``ssl_*`` option quietly ignored."""
    protocol = out["security_protocol"]
    context = out["ssl_context"]
    files = [name for name in TLS_FILE_OPTIONS if out[name] is not None]
    if not protocol.endswith("SSL"):
        given = (["ssl_context"] if context is not None else []) + files
        if given:
            raise KafkaConfigurationError(
                f"{', '.join(given)} given but security_protocol is {protocol!r}: use 'SSL' "
                "(or 'SASL_SSL'); kafkastate never connects in plaintext with TLS settings"
            )
        return
    if context is not None:
        both = files + (["ssl_check_hostname"] if "ssl_check_hostname" in user_set else [])
        if both:
            raise KafkaConfigurationError(
                f"ssl_context and {', '.join(both)} given: the context is used as it is, so "
                "set those on it (kafkastate.helpers.create_ssl_context takes them all) or "
                "leave ssl_context out"
            )
    elif flavour == "aiokafka" and not files:
        # aiokafka builds no context of its own: say how to make one
        raise KafkaConfigurationError(
            f"ssl_context is mandatory with security_protocol={protocol!r} (as in aiokafka): "
            "pass ssl_context=create_ssl_context(cafile=...) (kafkastate.helpers), or "
            "kafka-python's ssl_cafile"
        )


def _settle_client(out: dict[str, Any], flavour: str) -> None:
    protocol = out["security_protocol"]
    mechanism = out["sasl_mechanism"]
    if protocol.startswith("SASL"):
        if mechanism is None:
            if flavour == "kafka-python":  # as kafka-python: no default mechanism
                raise KafkaConfigurationError(
                    f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)} with "
                    f"security_protocol={protocol}"
                )
            out["sasl_mechanism"] = "PLAIN"
        if out["sasl_mechanism"] == "OAUTHBEARER" and out["sasl_oauth_token_provider"] is None:
            raise KafkaConfigurationError(
                "sasl_mechanism='OAUTHBEARER' needs sasl_oauth_token_provider: an object with "
                "token() (kafkastate.abc.AbstractTokenProvider, or "
                "kafkastate.oauth.OIDCTokenProvider)"
            )
        # (the connection's config checks the credentials the mechanism needs)
        if out["sasl_mechanism"] == "AWS_MSK_IAM" and protocol != "SASL_SSL":
            # fail closed: the signed message carries the AWS session token
            raise KafkaConfigurationError(
                f"sasl_mechanism='AWS_MSK_IAM' needs security_protocol='SASL_SSL', not {protocol!r}"
            )
    elif mechanism is not None:
        if flavour != "aiokafka":  # aiokafka's default PLAIN means nothing without SASL
            raise KafkaConfigurationError(
                f"sasl_mechanism={mechanism!r} needs security_protocol SASL_PLAINTEXT or "
                f"SASL_SSL, not {protocol!r}"
            )
        out["sasl_mechanism"] = None
    timeout = out.get("api_version_auto_timeout_ms")
    if timeout is not None:
        out["bootstrap_timeout_ms"] = timeout


def _settle_consumer(out: dict[str, Any], flavour: str) -> None:
    if out["max_poll_records"] is None:
        out["max_poll_records"] = 500
    if out["group_id"] is None:
        out["enable_auto_commit"] = False  # nothing to commit to, as the libraries ignore it
    protocol = out["group_protocol"]
    if protocol == "consumer":
        if out["partition_assignment_strategy"] is not None:
            raise KafkaConfigurationError(
                "partition_assignment_strategy does not apply to group_protocol="
                "'consumer' (the coordinator assigns): use group_remote_assignor"
            )
    else:
        if out["group_remote_assignor"] is not None:
            raise KafkaConfigurationError(
                "group_remote_assignor needs group_protocol='consumer' (KIP-848)"
            )
        if out["partition_assignment_strategy"] is None:
            out["partition_assignment_strategy"] = {
                "aiokafka": ("roundrobin",),
                "kafka-python": ("range", "roundrobin"),
                "kafkastate": ("range", "cooperative-sticky"),  # Java's
            }[flavour]
        if flavour != "kafka-python" and out["heartbeat_interval_ms"] >= out["session_timeout_ms"]:
            raise KafkaConfigurationError(
                f"heartbeat_interval_ms ({out['heartbeat_interval_ms']!r}) must be below "
                f"session_timeout_ms ({out['session_timeout_ms']!r})"
            )
    if out["rebalance_timeout_ms"] is None and flavour == "aiokafka":
        out["rebalance_timeout_ms"] = out["session_timeout_ms"]  # aiokafka's default
    limit = out["receive_message_max_bytes"]
    if limit is not None:  # a Fetch response may be this large (kafka-python raises it too)
        out["receive_message_max_bytes"] = max(
            limit, out["fetch_max_bytes"] + out["max_partition_fetch_bytes"]
        )
    if out.get("listener") is not None and out["group_id"] is None:
        raise KafkaConfigurationError("a rebalance listener needs a group_id")


def _settle_producer(out: dict[str, Any], flavour: str) -> None:
    if out.get("max_batch_size") is not None:
        out["batch_size"] = out["max_batch_size"]
    if flavour == "aiokafka":
        for name in ("key_serializer", "value_serializer"):
            if out[name] is not None and not callable(out[name]):
                # aiokafka calls f(data); kafka-python 3.0's Serializer objects are
                # for kafkastate.sync
                raise KafkaConfigurationError(
                    f"{name} must be a callable f(data) (as in aiokafka), got {out[name]!r}"
                )
    if out["transactional_id"] is not None and not out["enable_idempotence"]:
        if out["enable_idempotence"] is False and flavour != "aiokafka":
            raise KafkaConfigurationError(
                "transactional_id needs enable_idempotence (a transactional producer is idempotent)"
            )
        out["enable_idempotence"] = True  # as aiokafka and kafka-python do
    if out["acks"] is None:
        out["acks"] = "all" if out["enable_idempotence"] else 1
    if out["enable_idempotence"] is True:
        # every conflict in one message, in kafka-python's words (left unset, idempotence
        # is off with such settings instead, as in kafka-python and Java)
        conflicts = []
        if out["acks"] not in (-1, "all"):
            conflicts.append(f"acks={out['acks']!r}")
        if out.get("retries") == 0:
            conflicts.append("retries=0")
        if out["max_in_flight_requests_per_connection"] > 5:  # KIP-98's limit
            conflicts.append(
                "max_in_flight_requests_per_connection="
                f"{out['max_in_flight_requests_per_connection']!r}"
            )
        if conflicts:
            raise KafkaConfigurationError(
                f"enable_idempotence=True is incompatible with user-provided {', '.join(conflicts)}"
            )
    if out["max_block_ms"] is None:
        out["max_block_ms"] = out["request_timeout_ms"]
    if out["delivery_timeout_ms"] < out["linger_ms"] + out["request_timeout_ms"]:
        raise KafkaConfigurationError(
            f"delivery_timeout_ms ({out['delivery_timeout_ms']}) must be >= linger_ms "
            f"({out['linger_ms']}) + request_timeout_ms ({out['request_timeout_ms']})"
        )


# ------------------------------------------------------------------- user-code adapters

Serialize = Callable[[str, Sequence[tuple[str, Any]], Any], Any]
"""A serializer as the faces call it: ``(topic, headers, data) -> bytes | None``."""
Deserialize = Callable[[str, Sequence[tuple[str, Any]], Any], Any]
"""A deserializer as the faces call it: ``(topic, headers, data) -> value``."""


def serializer_of(value: Any) -> Serialize | None:
    """What a ``key_serializer`` / ``value_serializer`` option means: an object with
    ``serialize(topic, headers, data)`` (kafka-python 3.0's ``Serializer``) is called so;
    any other callable is ``f(data)`` (kafka-python 2.x and aiokafka).

    Args:
        value: the resolved option (checked by :func:`resolve`).

    Returns:
        ``(topic, headers, data) -> bytes``, or None for no serializer.
    """
    return _user_code(value, "serialize")


def deserializer_of(value: Any) -> Deserialize | None:
    """What a ``key_deserializer`` / ``value_deserializer`` option means: an object with
    ``deserialize(topic, headers, data)`` (kafka-python 3.0's ``Deserializer``) is called
    so; any other callable is ``f(data)``. Both are called with None too (a null key or
    value), as kafka-python and aiokafka do.

    Args:
        value: the resolved option, or a deserializer :func:`deserializer_of` made.

    Returns:
        ``(topic, headers, data) -> value``, or None for no deserializer.
    """
    return _user_code(value, "deserialize")


def _user_code(value: Any, method: str) -> Serialize | None:
    """``value.<method>`` if it has one (a kafka-python 3.0 object), else ``value(data)``."""
    if value is None:
        return None
    bound = getattr(value, method, None)
    if callable(bound):
        called: Serialize = bound
        return called
    return lambda _topic, _headers, data: value(data)


def close_serializers(options: Mapping[str, Any]) -> None:
    """Call ``close()`` on every kafka-python (de)serializer object of resolved options
    (``Serializer.close``), as a face's close does; plain callables are left alone."""
    for name, method in (
        ("key_serializer", "serialize"),
        ("value_serializer", "serialize"),
        ("key_deserializer", "deserialize"),
        ("value_deserializer", "deserialize"),
    ):
        value = options.get(name)
        close = getattr(value, "close", None)
        if callable(getattr(value, method, None)) and callable(close):
            close()


def options_dict(role: str, flavour: str, given: Mapping[str, Any]) -> dict[str, Any]:
    """A face's ``config`` dict, as kafka-python's ``KafkaConsumer.config`` /
    ``KafkaProducer.config``: every option the face takes by its Python name, with the
    value the user gave (a Java property counts under its Python name) or the face's
    default. kafka-python options kafkastate refuses are not in it.

    Passwords (:data:`SECRET_OPTIONS`) are :class:`Secret` strings: equal to the value,
    shown masked.

    Args:
        role: ``"consumer"`` or ``"producer"``.
        flavour: one of :data:`FLAVOURS`.
        given: the user's keywords, accepted by :func:`resolve`.
    """
    defaults = FLAVOUR_DEFAULTS[(flavour, role)]
    out = {o.name: defaults.get(o.name, o.default) for o in _TABLE if _applies(o, role, flavour)}
    for key, value in given.items():
        out[_BY_PROP.get(key, key)] = value
    for name in SECRET_OPTIONS:
        if isinstance(out.get(name), str):
            out[name] = Secret(out[name])  # the value for code, not for a printed dict
    return out


# ----------------------------------------------------------------------------- builders


@contextlib.contextmanager
def _as_config_error() -> Iterator[None]:
    """The lower configs validate with ValueError/TypeError: users get the
    KafkaConfigurationError (a ValueError) every option error is."""
    try:
        yield
    except KafkaConfigurationError:
        raise
    except (ValueError, TypeError) as exc:
        raise KafkaConfigurationError(str(exc)) from exc


def wants_tls(options: Mapping[str, Any]) -> bool:
    """Whether the connections use TLS (``security_protocol`` SSL or SASL_SSL)."""
    return str(options["security_protocol"]).endswith("SSL")


def _seconds(value: float) -> float:
    return float(value) / 1000


def client_config(options: Mapping[str, Any]) -> ClientConfig:
    """The :class:`ClientConfig` of resolved options (plus the :data:`SASL_IO_KEYS` a
    runtime added).

    Raises:
        KafkaConfigurationError: a value the lower configs refuse.
    """
    from kafkastate.core.client import ClientConfig  # noqa: PLC0415 -- see the top
    from kafkastate.core.connection import ConnectionConfig  # noqa: PLC0415
    from kafkastate.core.metadata import MetadataConfig  # noqa: PLC0415
    from kafkastate.core.protocol.framing import DEFAULT_MAX_FRAME_SIZE  # noqa: PLC0415

    limit = options["receive_message_max_bytes"]
    with _as_config_error():
        return ClientConfig(
            bootstrap_servers=options["bootstrap_servers"],
            connection=ConnectionConfig(
                client_id=options["client_id"],
                request_timeout=_seconds(options["request_timeout_ms"]),
                max_in_flight=options["max_in_flight_requests_per_connection"],
                sasl_mechanism=options["sasl_mechanism"],
                sasl_username=options["sasl_plain_username"],
                sasl_password=options["sasl_plain_password"],
                sasl_oauth_token_provider=options["sasl_oauth_token_provider"] is not None,
                sasl_kerberos_service_name=options["sasl_kerberos_service_name"],
                sasl_kerberos_domain_name=options["sasl_kerberos_domain_name"],
                sasl_kerberos_name=options["sasl_kerberos_name"],
                sasl_gssapi=options.get("_sasl_gssapi"),
                sasl_aws_msk_iam=options.get("_sasl_aws_msk_iam"),
                max_frame_size=DEFAULT_MAX_FRAME_SIZE if limit is None else limit,
            ),
            metadata=MetadataConfig(
                metadata_max_age=_seconds(options["metadata_max_age_ms"]),
                retry_backoff=_seconds(options["retry_backoff_ms"]),
                allow_auto_topic_creation=options.get("allow_auto_create_topics", False),
            ),
            reconnect_backoff=_seconds(options["reconnect_backoff_ms"]),
            reconnect_backoff_max=_seconds(options["reconnect_backoff_max_ms"]),
            connections_max_idle=_seconds(options["connections_max_idle_ms"]),
            statistics_interval=_seconds(options["statistics_interval_ms"]),
            metrics_samples=options["metrics_num_samples"],
            metrics_window=_seconds(options["metrics_sample_window_ms"]),
        )


def admin_config(options: Mapping[str, Any]) -> AdminConfig:
    """The :class:`AdminConfig` of resolved admin options.

    Raises:
        KafkaConfigurationError: a value the lower configs refuse.
    """
    from kafkastate.core.admin.machine import AdminConfig  # noqa: PLC0415 -- see the top

    with _as_config_error():
        return AdminConfig(
            client=client_config(options),
            retry_backoff=_seconds(options["retry_backoff_ms"]),
        )


def fetcher_config(options: Mapping[str, Any]) -> FetcherConfig:
    """The :class:`FetcherConfig` of resolved consumer options.

    Raises:
        KafkaConfigurationError: a value the lower configs refuse.
    """
    from kafkastate.core.consumer.fetcher import FetcherConfig  # noqa: PLC0415 -- see the top

    with _as_config_error():
        return FetcherConfig(
            client=client_config(options),
            group_id=options["group_id"],
            auto_offset_reset=options["auto_offset_reset"],
            isolation_level=options["isolation_level"],
            fetch_min_bytes=options["fetch_min_bytes"],
            fetch_max_wait=_seconds(options["fetch_max_wait_ms"]),
            fetch_max_bytes=options["fetch_max_bytes"],
            max_partition_fetch_bytes=options["max_partition_fetch_bytes"],
            check_crcs=options["check_crcs"],
            client_rack=options["client_rack"] or "",
            retry_backoff=_seconds(options["retry_backoff_ms"]),
            use_fetch_sessions=options["enable_incremental_fetch_sessions"],
        )


def group_config(options: Mapping[str, Any]) -> GroupConfig | ConsumerGroupConfig | None:
    """The group membership settings of resolved consumer options (KIP-848's with
    ``group_protocol="consumer"``), or None without a ``group_id``.

    Raises:
        KafkaConfigurationError: a value the group configs refuse.
    """
    from kafkastate.core.consumer.group import GroupConfig  # noqa: PLC0415 -- see the top
    from kafkastate.core.consumer.group848 import ConsumerGroupConfig  # noqa: PLC0415

    group_id = options["group_id"]
    if group_id is None:
        return None
    rack = options["client_rack"] or None
    with _as_config_error():
        if options["group_protocol"] == "consumer":
            return ConsumerGroupConfig(
                group_id=group_id,
                max_poll_interval=_seconds(options["max_poll_interval_ms"]),
                request_timeout=_seconds(options["request_timeout_ms"]),
                retry_backoff=_seconds(options["retry_backoff_ms"]),
                group_instance_id=options["group_instance_id"],
                group_remote_assignor=options["group_remote_assignor"],
                client_rack=rack,
            )
        rebalance = options["rebalance_timeout_ms"]
        return GroupConfig(
            group_id=group_id,
            assignors=resolve_assignors(options["partition_assignment_strategy"]),
            session_timeout=_seconds(options["session_timeout_ms"]),
            heartbeat_interval=_seconds(options["heartbeat_interval_ms"]),
            max_poll_interval=_seconds(options["max_poll_interval_ms"]),
            rebalance_timeout=None if rebalance is None else _seconds(rebalance),
            request_timeout=_seconds(options["request_timeout_ms"]),
            retry_backoff=_seconds(options["retry_backoff_ms"]),
            group_instance_id=options["group_instance_id"],
            leave_group_on_close=options.get("leave_group_on_close"),
            client_rack=rack,
        )


def producer_config(options: Mapping[str, Any]) -> ProducerConfig:
    """The :class:`ProducerConfig` of resolved producer options.

    Raises:
        KafkaConfigurationError: a value the lower configs refuse.
    """
    from kafkastate.core.producer.accumulator import AccumulatorConfig  # noqa: PLC0415
    from kafkastate.core.producer.producer import ProducerConfig  # noqa: PLC0415 -- see the top

    retry_backoff = _seconds(options["retry_backoff_ms"])
    client = client_config(options)
    # Metadata requests share the wire with Produce: never cap the wire below 5.
    wire = max(5, client.connection.max_in_flight)
    client = attrs.evolve(client, connection=attrs.evolve(client.connection, max_in_flight=wire))
    with _as_config_error():
        return ProducerConfig(
            client=client,
            accumulator=AccumulatorConfig(
                batch_size=options["batch_size"],
                linger=_seconds(options["linger_ms"]),
                buffer_memory=options["buffer_memory"],
                max_request_size=options["max_request_size"],
                compression=COMPRESSION[options["compression_type"]],
                request_timeout=_seconds(options["request_timeout_ms"]),
                delivery_timeout=_seconds(options["delivery_timeout_ms"]),
                retry_backoff=retry_backoff,
                retry_backoff_max=max(retry_backoff, 1.0),
                max_block=_seconds(options["max_block_ms"]),
            ),
            acks=options["acks"],
            enable_idempotence=options["enable_idempotence"],
            max_in_flight_requests_per_connection=options["max_in_flight_requests_per_connection"],
            retries=options.get("retries", _INT32_MAX),
            partitioner=options["partitioner"],
            transactional_id=options["transactional_id"],
            transaction_timeout=_seconds(options["transaction_timeout_ms"]),
            metadata_max_idle=_seconds(options["metadata_max_idle_ms"]),
        )


# ---------------------------------------------------------------------------- assignors


def resolve_assignors(
    strategy: Any, *, name: str = "partition_assignment_strategy"
) -> tuple[Assignor, ...]:
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
            f"{name} must be a non-empty list of assignors, got {strategy!r}"
        )
    from kafkastate.core.consumer.assignors import ASSIGNORS  # noqa: PLC0415 -- see the top

    out: list[Assignor] = []
    for entry in strategy:
        if isinstance(entry, type) and isinstance(getattr(entry, "protocols", None), tuple):
            entry = entry()  # a kafkastate-style assignor class
        known = entry if isinstance(entry, str) else getattr(entry, "name", None)
        if _is_assignor(entry):
            out.append(entry)
        elif isinstance(known, str) and known in ASSIGNORS:
            out.append(ASSIGNORS[known]())  # a name, or another library's built-in class
        else:
            raise KafkaConfigurationError(
                f"{name} entry {entry!r} is not an assignor: give one "
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


# ----------------------------------------------------------------------------- machines


def check_consumer(options: Mapping[str, Any]) -> None:
    """Build the consumer's configs of resolved options once, so that every value the
    machines check is checked when the face is made (before anything starts).

    Raises:
        KafkaConfigurationError: a value the lower configs refuse.
    """
    fetcher_config(options)
    group_config(options)


def consumer_machine(options: Mapping[str, Any], *, rng: Any) -> ConsumerMachine:
    """The :class:`~kafkastate.core.consumer.consumer.ConsumerMachine` (over its fetcher and
    group member) of resolved consumer options.

    Args:
        options: from :func:`resolve`.
        rng: seeded randomness for the fetcher (backoff jitter, node choice).

    Raises:
        KafkaConfigurationError: a value the lower configs refuse.
    """
    from kafkastate.core.consumer.consumer import ConsumerMachine  # noqa: PLC0415
    from kafkastate.core.consumer.fetcher import FetcherMachine  # noqa: PLC0415 -- see the top

    fetcher = FetcherMachine(fetcher_config(options), rng=rng, group=group_config(options))
    return ConsumerMachine(
        fetcher,
        max_poll_records=options["max_poll_records"],
        auto_commit=options["enable_auto_commit"],
        auto_commit_interval=_seconds(options["auto_commit_interval_ms"]),
        exclude_internal_topics=options["exclude_internal_topics"],
    )
