"""The fault timeline as an SVG: one row per fault kind, one bar per fault (applied →
healed), the broker it hit written on the bar. Plain SVG text, no plotting library."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from ._faults import FAULT_KINDS

__all__ = ["timeline_svg"]

_COLOURS = {
    "leader_kill": "#d62728",
    "controller_kill": "#8c1c13",
    "pause": "#ff7f0e",
    "partition": "#9467bd",
    "latency": "#1f77b4",
    "bandwidth": "#17becf",
    "reset_peer": "#2ca02c",
    "client_kill": "#e377c2",
}
_ROW, _LEFT, _RIGHT, _TOP = 26, 120, 20, 30


def timeline_svg(
    timeline: Sequence[Mapping[str, object]], end: float, *, width: int = 900, title: str = ""
) -> str:
    """Draw the applied faults (``Applied`` rows as dicts) over ``[0, end]`` seconds.

    Args:
        timeline: rows with ``kind``, ``node``, ``started``, ``healed``.
        end: the time axis' end (seconds after the workloads started).
        width: the picture's width in pixels.
        title: a caption above the rows.

    Returns:
        The SVG document.
    """
    kinds = [kind for kind in FAULT_KINDS if any(row["kind"] == kind for row in timeline)]
    height = _TOP + _ROW * len(kinds) + 40
    scale = (width - _LEFT - _RIGHT) / max(end, 1.0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{_LEFT}" y="18" font-size="13">{escape(title)}</text>',
    ]
    for index, kind in enumerate(kinds):
        y = _TOP + index * _ROW
        parts.append(f'<text x="{_LEFT - 8}" y="{y + 16}" text-anchor="end">{kind}</text>')
        parts.append(
            f'<line x1="{_LEFT}" y1="{y + _ROW - 2}" x2="{width - _RIGHT}" '
            f'y2="{y + _ROW - 2}" stroke="#eee"/>'
        )
        for row in timeline:
            if row["kind"] != kind:
                continue
            start = float(str(row["started"]))
            healed = row.get("healed")
            stop = float(str(healed)) if healed is not None else end
            x, w = _LEFT + start * scale, max(2.0, (stop - start) * scale)
            parts.append(
                f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{_ROW - 10}" '
                f'fill="{_COLOURS.get(kind, "#777")}"><title>{escape(str(row.get("detail", "")))}'
                "</title></rect>"
            )
            if row.get("node") is not None:
                parts.append(f'<text x="{x + w + 3:.1f}" y="{y + 16}">{row["node"]}</text>')
    axis_y = _TOP + _ROW * len(kinds) + 4
    step = max(1, round(end / 10 / 10) * 10) if end > 20 else 5
    tick = 0
    while tick <= end:
        x = _LEFT + tick * scale
        parts.append(
            f'<line x1="{x:.1f}" y1="{axis_y}" x2="{x:.1f}" y2="{axis_y + 5}" stroke="black"/>'
        )
        parts.append(f'<text x="{x:.1f}" y="{axis_y + 18}" text-anchor="middle">{tick}</text>')
        tick += step
    parts.append(
        f'<text x="{width - _RIGHT}" y="{axis_y + 32}" text-anchor="end">seconds after the'
        " workloads started (the number: the broker hit)</text>"
    )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
