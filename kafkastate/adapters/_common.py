"""Small pieces every adapter shares."""

from __future__ import annotations

from kafkastate.core.client import Client
from kafkastate.errors import AuthenticationFailedError, KafkaError, NoBrokersAvailable

__all__ = ["no_brokers_error"]


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
