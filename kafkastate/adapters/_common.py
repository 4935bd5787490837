"""Small pieces every adapter shares."""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kafkastate.core.client import Client, ClientConfig
from kafkastate.core.config import wants_tls
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.metadata import MetadataConfig
from kafkastate.core.protocol.framing import DEFAULT_MAX_FRAME_SIZE
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConfigurationError,
    KafkaError,
    NoBrokersAvailable,
)

__all__ = [
    "KAFKA_PYTHON_UNSUPPORTED",
    "build_client_config",
    "check_ms",
    "check_positive_ms",
    "kafka_python_ssl_context",
    "no_brokers_error",
    "refuse_options",
    "tls_context",
]

KAFKA_PYTHON_UNSUPPORTED: Final = frozenset(
    {
        "client_dns_lookup",
        "receive_buffer_bytes",
        "send_buffer_bytes",
        "socket_options",
        "ssl_crlfile",
        "ssl_ciphers",
        "metric_reporters",
        "metrics_num_samples",
        "metrics_sample_window_ms",
        "selector",
        "sasl_kerberos_name",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_oauth_token_provider",
        "proxy_url",
        "socks5_proxy",
        "kafka_client",
    }
)
"""kafka-python options of its client (producer and consumer alike) that kafkastate does not
implement: refused by name."""


def refuse_options(
    owner: str,
    given: Mapping[str, Any],
    *,
    library: str,
    group: frozenset[str] = frozenset(),
    unsupported: frozenset[str] = frozenset(),
) -> None:
    """Refuse, by name, every option in ``given`` (the constructor's leftover keywords).

    Args:
        owner: the class or function, for the message.
        given: the leftover keyword arguments.
        library: whose options these are (``"kafka-python"``, ``"aiokafka"``).
        group: ``library``'s options that need consumer group membership.
        unsupported: ``library``'s options kafkastate does not implement.

    Raises:
        KafkaConfigurationError: options of ``library`` kafkastate lacks, each named with
            the reason.
        TypeError: an option ``library`` does not have either (as Python would).
    """
    if not given:
        return
    names = sorted(given)
    parts = []
    needing = [n for n in names if n in group]
    lacking = [n for n in names if n in unsupported and n not in group]
    unknown = [n for n in names if n not in group and n not in unsupported]
    if needing:
        parts.append(
            f"{', '.join(needing)}: {library} option(s) that need consumer group membership, "
            "not implemented yet"
        )
    if lacking:
        parts.append(f"{', '.join(lacking)}: {library} option(s) not supported by kafkastate")
    if unknown:
        parts.append(f"unknown option(s): {', '.join(unknown)}")
    message = f"{owner}: " + "; ".join(parts)
    if unknown:
        raise TypeError(message)
    raise KafkaConfigurationError(message)


def no_brokers_error(client: Client, timeout: float) -> KafkaError:
    """The error for "no bootstrap server answered within ``timeout`` seconds": the
    authentication failure itself if that is why (it is not worth waiting again), else
    NoBrokersAvailable naming the servers and the last connection error."""
    last = client.last_connection_error or client.metadata.last_error
    if isinstance(last, AuthenticationFailedError):
        return last
    servers = ", ".join(f"{h}:{p}" for h, p in client.config.bootstrap_servers)
    error = NoBrokersAvailable(
        f"no bootstrap server answered within {timeout * 1000:g} ms ({servers})"
        + ("" if last is None else f"; last error: {last}")
    )
    error.__cause__ = last
    return error


_PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def check_ms(**values: Any) -> None:
    """Each keyword is an option in ms that must be a number >= 0.

    Raises:
        KafkaConfigurationError: naming the first that is not.
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise KafkaConfigurationError(f"{name} must be a number of ms >= 0, got {value!r}")


def kafka_python_ssl_context(options: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The TLS context of kafka-python style options: ``ssl_context`` if given, else one
    built from ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_password`` and
    ``ssl_check_hostname``; None unless ``security_protocol`` is SSL or SASL_SSL.

    Raises:
        KafkaConfigurationError: a bad ``security_protocol`` or ``ssl_context``, or TLS
            files that cannot be loaded.
    """
    protocol = options["security_protocol"]
    if protocol not in _PROTOCOLS:
        raise KafkaConfigurationError(
            f"security_protocol must be one of {', '.join(_PROTOCOLS)}, got {protocol!r}"
        )
    context = options["ssl_context"]
    if context is not None and not isinstance(context, ssl.SSLContext):
        raise KafkaConfigurationError(f"ssl_context must be an ssl.SSLContext, got {context!r}")
    if protocol not in ("SSL", "SASL_SSL"):
        return None
    if context is not None:
        return context
    try:
        context = ssl.create_default_context(cafile=options["ssl_cafile"])
        context.check_hostname = bool(options["ssl_check_hostname"])
        if not context.check_hostname:
            context.verify_mode = (
                ssl.CERT_NONE if options["ssl_cafile"] is None else ssl.CERT_REQUIRED
            )
        if options["ssl_certfile"] is not None:
            context.load_cert_chain(
                options["ssl_certfile"], options["ssl_keyfile"], options["ssl_password"]
            )
    except OSError as exc:  # ssl.SSLError included: a missing or unreadable file
        raise KafkaConfigurationError(
            f"ssl_cafile, ssl_certfile, ssl_keyfile or ssl_password: {exc}"
        ) from exc
    return context


def tls_context(options: Mapping[str, Any]) -> ssl.SSLContext | None:
    """The TLS context of resolved options (:func:`kafkastate.core.config.resolve`): None
    unless ``security_protocol`` is SSL or SASL_SSL; else ``ssl_context`` if given, else
    one built from kafka-python's ``ssl_cafile``, ``ssl_certfile``, ``ssl_keyfile``,
    ``ssl_password`` and ``ssl_check_hostname`` (where the face has them), else the system's
    default context.

    Raises:
        KafkaConfigurationError: TLS files that cannot be loaded.
    """
    if not wants_tls(options):
        return None
    context = options["ssl_context"]
    if context is not None:
        return context  # type: ignore[no-any-return]
    cafile = options.get("ssl_cafile")
    try:
        context = ssl.create_default_context(cafile=cafile)
        context.check_hostname = bool(options.get("ssl_check_hostname", True))
        if not context.check_hostname:
            context.verify_mode = ssl.CERT_NONE if cafile is None else ssl.CERT_REQUIRED
        if options.get("ssl_certfile") is not None:
            context.load_cert_chain(
                options["ssl_certfile"], options.get("ssl_keyfile"), options.get("ssl_password")
            )
    except OSError as exc:  # ssl.SSLError included: a missing or unreadable file
        raise KafkaConfigurationError(
            f"ssl_cafile, ssl_certfile, ssl_keyfile or ssl_password: {exc}"
        ) from exc
    return context


def check_positive_ms(**values: Any) -> None:
    """Each keyword is an option in ms that must be a number > 0.

    Raises:
        KafkaConfigurationError: naming the first that is not.
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise KafkaConfigurationError(f"{name} must be a number of ms > 0, got {value!r}")


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KafkaConfigurationError(f"{name} must be an int >= 1, got {value!r}")
    return value


def build_client_config(
    bootstrap_servers: str | Sequence[str],
    *,
    client_id: str | None,
    request_timeout_ms: float,
    retry_backoff_ms: float,
    metadata_max_age_ms: float,
    connections_max_idle_ms: float,
    security_protocol: str,
    ssl_context: ssl.SSLContext | None,
    sasl_mechanism: str | None,
    sasl_plain_username: str | None,
    sasl_plain_password: str | None,
    allow_auto_create_topics: bool = False,
    reconnect_backoff_ms: float = 50,
    reconnect_backoff_max_ms: float = 1000,
    max_in_flight_requests_per_connection: int = 5,
    receive_message_max_bytes: int | None = None,
) -> tuple[ClientConfig, ssl.SSLContext | None]:
    """The :class:`ClientConfig` and TLS context of the async producers and the consumers,
    from aiokafka-style options (``security_protocol`` decides TLS and SASL).
    ``receive_message_max_bytes`` None keeps the core's frame limit.

    Raises:
        KafkaConfigurationError: a bad or contradictory option (a ValueError).
    """
    if security_protocol not in _PROTOCOLS:
        raise KafkaConfigurationError(
            f"security_protocol must be one of {', '.join(_PROTOCOLS)}, got {security_protocol!r}"
        )
    tls = security_protocol.endswith("SSL")
    if ssl_context is not None and not isinstance(ssl_context, ssl.SSLContext):
        raise KafkaConfigurationError(f"ssl_context must be an ssl.SSLContext, got {ssl_context!r}")
    if ssl_context is not None and not tls:
        raise KafkaConfigurationError(
            f"ssl_context given but security_protocol is {security_protocol!r}; use 'SSL'"
        )
    if tls and ssl_context is None:
        ssl_context = ssl.create_default_context()
    sasl = security_protocol.startswith("SASL")
    if sasl and sasl_mechanism is None:
        sasl_mechanism = "PLAIN"
    if not sasl and sasl_mechanism is not None:
        raise KafkaConfigurationError(
            f"sasl_mechanism given but security_protocol is {security_protocol!r}"
        )
    check_ms(
        request_timeout_ms=request_timeout_ms,
        retry_backoff_ms=retry_backoff_ms,
        metadata_max_age_ms=metadata_max_age_ms,
        connections_max_idle_ms=connections_max_idle_ms,
    )
    check_positive_ms(
        reconnect_backoff_ms=reconnect_backoff_ms, reconnect_backoff_max_ms=reconnect_backoff_max_ms
    )
    frame_limit = (
        DEFAULT_MAX_FRAME_SIZE
        if receive_message_max_bytes is None
        else _count("receive_message_max_bytes", receive_message_max_bytes)
    )
    try:
        config = ClientConfig(
            bootstrap_servers=bootstrap_servers,
            connection=ConnectionConfig(
                client_id=client_id,
                request_timeout=request_timeout_ms / 1000,
                max_in_flight=_count(
                    "max_in_flight_requests_per_connection", max_in_flight_requests_per_connection
                ),
                sasl_mechanism=sasl_mechanism,
                sasl_username=sasl_plain_username,
                sasl_password=sasl_plain_password,
                max_frame_size=frame_limit,
            ),
            metadata=MetadataConfig(
                metadata_max_age=metadata_max_age_ms / 1000,
                retry_backoff=retry_backoff_ms / 1000,
                allow_auto_topic_creation=bool(allow_auto_create_topics),
            ),
            reconnect_backoff=reconnect_backoff_ms / 1000,
            reconnect_backoff_max=reconnect_backoff_max_ms / 1000,
            connections_max_idle=connections_max_idle_ms / 1000,
        )
    except KafkaConfigurationError:
        raise
    except (ValueError, TypeError) as exc:  # lower configs validate with ValueError
        raise KafkaConfigurationError(str(exc)) from exc
    return config, ssl_context
