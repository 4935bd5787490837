"""FetcherConfig: a :class:`~kafkastate.core.consumer.fetcher.FetcherMachine`'s settings,
validated as they are made, and the ListOffsets timestamps of the reset policies."""

from __future__ import annotations

from typing import Any, Final

import attrs

from kafkastate.core.client import ClientConfig
from kafkastate.errors import KafkaConfigurationError

__all__ = ["EARLIEST", "LATEST", "RESETS", "FetcherConfig"]

EARLIEST: Final = -2
"""ListOffsets timestamp for the log start offset."""
LATEST: Final = -1
"""ListOffsets timestamp for the log end (high watermark, or LSO for read_committed)."""

RESETS: Final = {"earliest": EARLIEST, "latest": LATEST, "none": None}


def _positive(_inst: object, attr: attrs.Attribute[Any], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise KafkaConfigurationError(f"{attr.name} must be a number >= 0, got {value!r}")


def _positive_int(_inst: object, attr: attrs.Attribute[Any], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KafkaConfigurationError(f"{attr.name} must be an int >= 1, got {value!r}")


def _reset_name(_inst: object, _attr: attrs.Attribute[Any], value: str) -> None:
    if value not in RESETS:
        raise KafkaConfigurationError(
            f"auto_offset_reset must be 'earliest', 'latest' or 'none', got {value!r}"
        )


def _isolation(_inst: object, _attr: attrs.Attribute[Any], value: str) -> None:
    if value not in ("read_uncommitted", "read_committed"):
        raise KafkaConfigurationError(
            f"isolation_level must be 'read_uncommitted' or 'read_committed', got {value!r}"
        )


@attrs.frozen(kw_only=True)
class FetcherConfig:
    """Settings of a :class:`FetcherMachine`. Durations are float seconds."""

    client: ClientConfig
    """Connections and metadata."""
    group_id: str | None = None
    """``group.id``: where committed offsets are read and written; None for none."""
    auto_offset_reset: str = attrs.field(default="latest", validator=_reset_name)
    """``auto.offset.reset``: ``earliest``, ``latest`` or ``none``."""
    isolation_level: str = attrs.field(default="read_uncommitted", validator=_isolation)
    """``isolation.level``."""
    fetch_min_bytes: int = attrs.field(default=1, validator=_positive_int)
    """``fetch.min.bytes``."""
    fetch_max_wait: float = attrs.field(default=0.5, validator=_positive)
    """``fetch.max.wait.ms``: how long the broker may hold a Fetch for min bytes."""
    fetch_max_bytes: int = attrs.field(default=52_428_800, validator=_positive_int)
    """``fetch.max.bytes``: the response size limit (a first batch larger than it is
    still returned: the broker always makes progress)."""
    max_partition_fetch_bytes: int = attrs.field(default=1_048_576, validator=_positive_int)
    """``max.partition.fetch.bytes`` (same progress rule, per partition)."""
    check_crcs: bool = True
    """``check.crcs``: verify each batch's CRC32C."""
    client_rack: str = ""
    """``client.rack`` (KIP-392): lets the leader name a closer replica to fetch from."""
    retry_backoff: float = attrs.field(default=0.1, validator=_positive)
    """``retry.backoff.ms``: wait after a failed Fetch / ListOffsets / OffsetFetch."""
    use_fetch_sessions: bool = True
    """Incremental fetch sessions (KIP-227); False sends full sessionless fetches."""

    @property
    def read_committed(self) -> bool:
        """Whether ``isolation_level`` is read_committed."""
        return self.isolation_level == "read_committed"
