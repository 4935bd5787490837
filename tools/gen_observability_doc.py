"""Rewrite the metric tables of docs/observability.md from the code
(kafkastate.core.report.METRIC_NAMES), between the ``<!-- metrics:begin -->`` and
``<!-- metrics:end -->`` markers.

Run: python tools/gen_observability_doc.py
(tests/core/test_metrics.py fails when the page and the code disagree.)
"""

from __future__ import annotations

import pathlib
import sys

from kafkastate.core.report import METRIC_NAMES

DOC = pathlib.Path(__file__).resolve().parent.parent / "docs" / "observability.md"
BEGIN, END = "<!-- metrics:begin -->", "<!-- metrics:end -->"


def tables() -> str:
    out: list[str] = []
    for group, names in METRIC_NAMES.items():
        out += [f"### `{group}`", "", "| metric | meaning |", "| --- | --- |"]
        out += [f"| `{name}` | {meaning} |" for name, meaning in names.items()]
        out.append("")
    return "\n".join(out)


def render(text: str) -> str:
    """``text`` with the generated section replaced."""
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{tables()}{END}{tail}"


if __name__ == "__main__":
    new = render(DOC.read_text())
    if "--check" in sys.argv:
        sys.exit(0 if new == DOC.read_text() else 1)
    DOC.write_text(new)
