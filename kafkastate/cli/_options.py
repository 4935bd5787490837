"""The options every command that talks to a cluster shares: where it is (``-b``,
``KAFKASTATE_BOOTSTRAP``), how to reach it (kcat's ``-X key=value`` and ``-F`` properties
files) and how long to wait (``--timeout``).

``-X`` keys are Java / librdkafka properties (``security.protocol``, ``sasl.username``,
``ssl.ca.location``...) or the Python option names (``sasl_plain_username``); the option
layer (:func:`kafkastate.core.config.from_properties`) maps and reads them, once, for every
client a command opens. A client takes the options of its role; the others are left to
the clients they belong to (``-X acks=1`` means nothing to a consumer).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from kafkastate.core.config import accepted, from_properties
from kafkastate.errors import KafkaConfigurationError

__all__ = ["Connection", "read_properties"]

DEFAULT_TIMEOUT = 10.0
"""Seconds a command waits for the cluster (``--timeout``)."""


def read_properties(path: Path) -> dict[str, str]:
    """A Java properties file's ``key=value`` (or ``key: value``) lines; ``#`` and ``!``
    start comments.

    Raises:
        KafkaConfigurationError: the file cannot be read, or a line has no ``=``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KafkaConfigurationError(f"-F {path}: {exc.strerror or exc}") from exc
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, sep, value = _split(line)
        if not sep or not key:
            raise KafkaConfigurationError(f"-F {path}:{number}: expected key=value, got {line!r}")
        out[key] = value
    return out


def _split(line: str) -> tuple[str, str, str]:
    cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
    if cut < 0:
        return line, "", ""
    return line[:cut].strip(), line[cut], line[cut + 1 :].strip()


def parse_pairs(pairs: Sequence[str]) -> dict[str, str]:
    """``-X key=value`` arguments as a dict.

    Raises:
        KafkaConfigurationError: an argument without ``=``.
    """
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise KafkaConfigurationError(f"-X {pair}: expected key=value")
        out[key.strip()] = value.strip()
    return out


@attrs.frozen(kw_only=True)
class Connection:
    """Where the cluster is and how to reach it, for the clients a command opens."""

    bootstrap: str
    """``host:port,...``."""
    timeout: float
    """Seconds to wait for the cluster (bootstrap, metadata, admin calls)."""
    options: dict[str, Any]
    """The ``-F`` and ``-X`` options by Python name (``-X`` wins)."""

    @classmethod
    def build(
        cls, bootstrap: str, pairs: Sequence[str], files: Sequence[Path], timeout: float
    ) -> Connection:
        """Read ``-F`` files then ``-X`` pairs (later ones win).

        Raises:
            KafkaConfigurationError: an unknown property or a bad value, named.
        """
        if timeout <= 0:
            raise KafkaConfigurationError(f"--timeout must be > 0 seconds, got {timeout}")
        text: dict[str, str] = {}
        for path in files:
            text |= read_properties(path)
        text |= parse_pairs(pairs)
        options = from_properties(text)
        servers = options.pop("bootstrap_servers", None)
        return cls(bootstrap=bootstrap or servers or "localhost:9092", timeout=timeout,
                   options=options)  # fmt: skip

    @property
    def timeout_ms(self) -> int:
        """The timeout in ms, as the clients' options take it."""
        return int(self.timeout * 1000)

    def client_options(self, role: str, **overrides: Any) -> dict[str, Any]:
        """Keyword options for a ``kafkastate.sync`` client of ``role``: the bootstrap,
        the timeout as its bootstrap wait, ``overrides`` (the command's own), then the
        user's ``-F``/``-X`` options of that role, which win."""
        known = accepted(role, "kafka-python")
        ms = self.timeout_ms
        out: dict[str, Any] = {"bootstrap_servers": self.bootstrap, "bootstrap_timeout_ms": ms}
        if role == "admin":
            out["request_timeout_ms"] = ms
        out |= overrides
        out |= {name: value for name, value in self.options.items() if name in known}
        return out
