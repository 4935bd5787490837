"""The broker versions the compatibility suite runs against (read by tests/conftest.py and
the noxfile, which fetches their jars before the tests start)."""

from __future__ import annotations

import datetime
import os

__all__ = ["FULL_VERSIONS", "SHORT_VERSIONS", "short_version"]

FULL_VERSIONS = ("2.8.2", "3.6.2", "3.9.1", "4.0.2", "4.4.0")
"""``nox -s compat``: ZooKeeper (2.8), KRaft 3.x before and after KIP-848's preview, the
first 4.x and the newest on Maven Central."""

SHORT_VERSIONS = ("3.9.1", "2.8.2")
"""The default suite's short run: the newest 3.x (KRaft, no KIP-848) on even days of the
year, the oldest supported (ZooKeeper) on odd days -- both generations within two runs, at
the cost of one broker start per run."""


def short_version(today: datetime.date | None = None) -> str:
    """The broker the default suite's short compat run uses.

    Args:
        today: the day that picks it (default: today, UTC).

    Returns:
        ``$KAFKASTATE_COMPAT_VERSION`` if set, else the day's entry of
        :data:`SHORT_VERSIONS`.
    """
    explicit = os.environ.get("KAFKASTATE_COMPAT_VERSION")
    if explicit:
        return explicit
    day = today or datetime.datetime.now(datetime.UTC).date()
    return SHORT_VERSIONS[day.timetuple().tm_yday % len(SHORT_VERSIONS)]
