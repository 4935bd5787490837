"""The compat session's results file: one JSON per broker version, read by
tools/gen_compat_table.py to draw the table of docs/compatibility.md.

Schema (``kafka-<version>.json``)::

    {"kafka_version": "3.9.1", "mode": "KRaft", "full": true, "date": "2026-11-26",
     "python": "CPython 3.11.7",
     "rows": [{"row": "idempotent producer", "outcome": "ok", "lacks": null}, ...],
     "cases": {"test_compat.py::test_x[gzip]": "ok", ...}}

A row's outcome folds its cases': ``failed`` if one failed, else ``lacks`` (the broker
lacks the feature and the client's error was checked; ``lacks`` names the footnote), else
``ok`` if one passed, else ``skipped``.
"""

from __future__ import annotations

import datetime
import json
import platform
from collections.abc import Mapping
from pathlib import Path

from kafkastate.testing._versions import BrokerProfile

__all__ = ["fold", "write_results"]

_RANK = {"failed": 3, "lacks": 2, "ok": 1, "skipped": 0}


def fold(outcomes: Mapping[str, tuple[str, str, str | None]]) -> list[dict[str, str | None]]:
    """One entry per row, in the order the rows' first cases ran.

    Args:
        outcomes: test id -> (row, outcome, footnote key of what the broker lacks).

    Returns:
        ``[{"row", "outcome", "lacks"}]``.
    """
    rows: dict[str, dict[str, str | None]] = {}
    for row, outcome, lacks in outcomes.values():
        entry = rows.setdefault(row, {"row": row, "outcome": "skipped", "lacks": None})
        if _RANK[outcome] > _RANK[str(entry["outcome"])]:
            entry["outcome"] = outcome
            entry["lacks"] = lacks if outcome == "lacks" else None
    return list(rows.values())


def write_results(
    directory: Path,
    profile: BrokerProfile,
    outcomes: Mapping[str, tuple[str, str, str | None]],
    *,
    full: bool,
) -> Path:
    """Write ``directory/kafka-<version>.json``.

    Args:
        directory: where (created if missing).
        profile: the broker's harness profile (version, ZooKeeper or KRaft).
        outcomes: test id -> (row, outcome, footnote key of what the broker lacks).
        full: every case ran (``KAFKASTATE_COMPAT_FULL``), not the short set.

    Returns:
        The file written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"kafka-{profile.version}.json"
    data = {
        "kafka_version": profile.version,
        "mode": "ZooKeeper" if profile.zookeeper else "KRaft",
        "full": full,
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "rows": fold(outcomes),
        "cases": {
            test_id.rpartition("/")[2]: outcome for test_id, (_, outcome, _) in outcomes.items()
        },
    }
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return path
