"""Small pieces every adapter shares."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from typing import Any, Final

from kafkastate.core.client import Client, ClientConfig
from kafkastate.core.connection import ConnectionConfig
from kafkastate.core.metadata import MetadataConfig
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConfigurationError,
    KafkaError,
    NoBrokersAvailable,
)

__all__ = ["build_client_config", "check_ms", "no_brokers_error"]


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
) -> tuple[ClientConfig, ssl.SSLContext | None]:
    """The :class:`ClientConfig` and TLS context of the async producers and consumers,
    from aiokafka-style options (``security_protocol`` decides TLS and SASL).

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
    try:
        config = ClientConfig(
            bootstrap_servers=bootstrap_servers,
            connection=ConnectionConfig(
                client_id=client_id,
                request_timeout=request_timeout_ms / 1000,
                sasl_mechanism=sasl_mechanism,
                sasl_username=sasl_plain_username,
                sasl_password=sasl_plain_password,
            ),
            metadata=MetadataConfig(
                metadata_max_age=metadata_max_age_ms / 1000,
                retry_backoff=retry_backoff_ms / 1000,
                allow_auto_topic_creation=bool(allow_auto_create_topics),
            ),
            connections_max_idle=connections_max_idle_ms / 1000,
        )
    except KafkaConfigurationError:
        raise
    except (ValueError, TypeError) as exc:  # lower configs validate with ValueError
        raise KafkaConfigurationError(str(exc)) from exc
    return config, ssl_context
