"""Errors the harness raises (not client errors: they never come from kafkastate proper)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["BrokerStartError", "HarnessError", "PrerequisiteError"]


class HarnessError(RuntimeError):
    """The test harness could not do what was asked (fetch jars, start, stop…)."""


class PrerequisiteError(HarnessError):
    """A tool the local-JVM path needs is missing (``java``, ``mvn``, ``openssl``/``keytool``).

    Attributes:
        missing: the missing program's name, e.g. ``"java"``.
        purpose: what it is needed for.
    """

    def __init__(self, missing: str, purpose: str) -> None:
        super().__init__(f"{missing} not found ({purpose})")
        self.missing = missing
        self.purpose = purpose


class BrokerStartError(HarnessError):
    """A broker (or its storage format step) did not come up; the message has the log tail.

    Attributes:
        log_path: the log file whose tail is in the message, if any.
    """

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        super().__init__(message)
        self.log_path = log_path
