"""Small pieces every adapter shares."""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Any

from kafkastate.core.client import Client
from kafkastate.core.config import wants_tls
from kafkastate.errors import (
    AuthenticationFailedError,
    KafkaConfigurationError,
    KafkaError,
    NoBrokersAvailable,
)

__all__ = [
    "check_ms",
    "no_brokers_error",
    "report_statistics",
    "tls_context",
]

log = logging.getLogger("kafkastate.stats")


def report_statistics(callback: Callable[[Any], Any] | None, stats: dict[str, Any]) -> None:
    """Hand a statistics report to the user's ``stats_cb`` (if any); what it raises is
    logged, never raised into the client's IO task or thread."""
    if callback is None:
        return
    try:
        callback(stats)
    except Exception:  # a user callback: logged, never fatal
        log.exception("stats_cb raised")


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


def check_ms(**values: Any) -> None:
    """Each keyword is an option in ms that must be a number >= 0.

    Raises:
        KafkaConfigurationError: naming the first that is not.
    """
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise KafkaConfigurationError(f"{name} must be a number of ms >= 0, got {value!r}")


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
