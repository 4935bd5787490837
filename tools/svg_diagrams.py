"""SVG drawings for the documentation site, made at build time with no layout engine.

- :func:`state_svg`: one machine's ``StateTable`` (kafkastate.core.states) as a layered
  graph: states in rows by their distance from the initial state, forward transitions
  drawn down, backward and sideways ones as curves on the right, re-entry as a loop.
- :func:`layers_svg`: the layer diagram of DESIGN.md / docs/architecture.md.
- :func:`bar_chart_svg`: a grouped bar chart (tools/gen_plots.py draws the benchmark
  results with it).

Deterministic output (enum order, no set iteration reaches the text), so a rebuild of an
unchanged table gives the same bytes.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from html import escape

from kafkastate.core.states import StateTable

FONT = 'font-family="Helvetica, Arial, sans-serif" font-size="13"'
CHAR_W = 7.6  # an average character of FONT, for box widths
ROW_H = 86
BOX_H = 30
GAP = 34
MARGIN = 30
COLOURS = ("#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2", "#dc2626", "#4b5563")


def _layers(table: StateTable[enum.Enum]) -> list[list[enum.Enum]]:
    """States in rows. A depth-first walk from the initial state (enum order) finds the
    edges that go back to a state still on the walk; without them the graph is acyclic,
    and each state's row is its longest path from the initial state, so states every
    other one can reach (CLOSED, FAILED) sink to the bottom. States the initial one cannot
    reach go in a last row."""
    order = list(table.states)
    back: set[tuple[enum.Enum, enum.Enum]] = set()
    on_walk: list[enum.Enum] = []
    seen: set[enum.Enum] = set()

    def walk(state: enum.Enum) -> None:
        seen.add(state)
        on_walk.append(state)
        for target in order:
            if target not in table.transitions[state] or target is state:
                continue
            if target in on_walk:
                back.add((state, target))
            elif target not in seen:
                walk(target)
        on_walk.pop()

    walk(table.initial)
    row = {table.initial: 0}
    for _ in order:  # longest paths by relaxation: at most one pass per state
        for state in order:
            if state not in row:
                continue
            for target in order:
                forward = target in table.transitions[state] and target is not state
                if forward and (state, target) not in back:
                    row[target] = max(row.get(target, 0), row[state] + 1)
    last = max(row.values()) + 1
    rows: list[list[enum.Enum]] = [[] for _ in range(last + 1)]
    for state in order:
        rows[row.get(state, last)].append(state)
    return [r for r in rows if r]


def state_svg(table: StateTable[enum.Enum]) -> str:
    """The machine's states and legal transitions as one SVG document."""
    rows = _layers(table)
    width_of = {s: len(s.name) * CHAR_W + 28 for row in rows for s in row}
    row_w = [sum(width_of[s] for s in row) + GAP * (len(row) - 1) for row in rows]
    inner_w = max(row_w)
    loop_room = 60 + 14 * len(table.states)  # the curves of backward edges, on the right
    long_room = 30 + 12 * len(table.states)  # long forward edges, on the left
    width = long_room + inner_w + 2 * MARGIN + loop_room
    height = MARGIN + 40 + ROW_H * (len(rows) - 1) + BOX_H + MARGIN
    centre: dict[enum.Enum, tuple[float, float]] = {}
    for r, row in enumerate(rows):
        x = long_room + MARGIN + (inner_w - row_w[r]) / 2
        y = MARGIN + 40 + r * ROW_H + BOX_H / 2
        for state in row:
            centre[state] = (x + width_of[state] / 2, y)
            x += width_of[state] + GAP
    row_of = {s: r for r, row in enumerate(rows) for s in row}
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" {FONT}>',
        f"<title>{escape(table.machine)} states</title>",
        "<defs>",
        *(
            f'<marker id="arrow{i}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
            f'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
            f'fill="{colour}"/></marker>'
            for i, colour in enumerate(COLOURS)
        ),
        "</defs>",
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
    ]
    ix, iy = centre[table.initial]
    out.append(f'<circle cx="{ix:.1f}" cy="{MARGIN + 6}" r="6" fill="#111827"/>')
    out.append(
        f'<line x1="{ix:.1f}" y1="{MARGIN + 12}" x2="{ix:.1f}" y2="{iy - BOX_H / 2:.1f}" '
        f'stroke="#111827" marker-end="url(#arrow{len(COLOURS) - 1})"/>'
    )
    right = long_room + MARGIN + inner_w + 16
    bends = lefts = 0
    for s_index, state in enumerate(table.states):
        colour = s_index % len(COLOURS)
        stroke = f'stroke="{COLOURS[colour]}" fill="none" marker-end="url(#arrow{colour})"'
        sx, sy = centre[state]
        for target in table.states:
            if target not in table.transitions[state]:
                continue
            tx, ty = centre[target]
            label = f"<title>{state.name} → {target.name}</title>"
            if target is state:
                x0 = sx + width_of[state] / 2
                out.append(
                    f'<path d="M{x0:.1f},{sy - 6:.1f} C{x0 + 30:.1f},{sy - 24:.1f} '
                    f'{x0 + 30:.1f},{sy + 24:.1f} {x0 + 2:.1f},{sy + 8:.1f}" {stroke}>'
                    f"{label}</path>"
                )
            elif row_of[target] > row_of[state] + 1:  # past other rows: round the left
                lefts += 1
                bend = long_room - 12 * (lefts % len(table.states)) - 4
                x0 = sx - width_of[state] / 2
                x1 = tx - width_of[target] / 2
                out.append(
                    f'<path d="M{x0:.1f},{sy + 4:.1f} C{bend:.1f},{sy + 4:.1f} '
                    f'{bend:.1f},{ty - 4:.1f} {x1 - 2:.1f},{ty - 4:.1f}" {stroke}>{label}</path>'
                )
            elif row_of[target] > row_of[state]:
                out.append(
                    f'<path d="M{sx:.1f},{sy + BOX_H / 2:.1f} C{sx:.1f},{sy + ROW_H / 2:.1f} '
                    f'{tx:.1f},{ty - ROW_H / 2:.1f} {tx:.1f},{ty - BOX_H / 2:.1f}" {stroke}>'
                    f"{label}</path>"
                )
            else:  # back up the rows or along one: round the right-hand side
                bends += 1
                bend = right + 14 * (bends % len(table.states)) + 10
                x0 = sx + width_of[state] / 2
                x1 = tx + width_of[target] / 2
                out.append(
                    f'<path d="M{x0:.1f},{sy + 4:.1f} C{bend:.1f},{sy + 4:.1f} '
                    f'{bend:.1f},{ty - 4:.1f} {x1 + 2:.1f},{ty - 4:.1f}" {stroke} '
                    f'stroke-dasharray="5 3">{label}</path>'
                )
    for state in table.states:
        cx, cy = centre[state]
        w = width_of[state]
        final = not table.transitions[state]
        out.append(
            f'<rect x="{cx - w / 2:.1f}" y="{cy - BOX_H / 2:.1f}" width="{w:.1f}" '
            f'height="{BOX_H}" rx="8" fill="#eff6ff" stroke="#1e3a8a" '
            f'stroke-width="{2.5 if final else 1.2}"/>'
        )
        out.append(
            f'<text x="{cx:.1f}" y="{cy + 4.5:.1f}" text-anchor="middle">'
            f"{escape(state.name)}</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


LAYERS: Sequence[tuple[str, str]] = (
    ("user code", "asyncio · trio · anyio · blocking faces (kafkastate.asyncio, .trio, .sync)"),
    ("adapters", "sockets, TLS, tasks, futures, timers: kafkastate/adapters/"),
    ("core/client", "Client: request routing to nodes, connections, metadata"),
    ("request level", "Producer · TransactionManager · Fetcher · GroupMember · assignors"),
    ("byte level", "BrokerConnection: framing, correlation ids, ApiVersions, SASL"),
    ("codec", "kio entities · record batches v2 · gzip/snappy/lz4/zstd · CRC32C"),
)


def layers_svg() -> str:
    """The client's layers, top (user code) to bottom (bytes), with the two directions."""
    box_w, box_h, gap = 640, 44, 26
    width = box_w + 2 * MARGIN + 150
    height = MARGIN * 2 + len(LAYERS) * box_h + (len(LAYERS) - 1) * gap
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT}>',
        "<title>kafkastate layers</title>",
        '<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#374151"/>'
        "</marker></defs>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for i, (name, what) in enumerate(LAYERS):
        y = MARGIN + i * (box_h + gap)
        pure = i >= 2
        out.append(
            f'<rect x="{MARGIN}" y="{y}" width="{box_w}" height="{box_h}" rx="6" '
            f'fill="{"#eff6ff" if pure else "#fef3c7"}" stroke="#1e3a8a"/>'
        )
        out.append(f'<text x="{MARGIN + 12}" y="{y + 18}" font-weight="bold">{name}</text>')
        out.append(f'<text x="{MARGIN + 12}" y="{y + 35}">{escape(what)}</text>')
        if i:
            top = y - gap
            out.append(
                f'<line x1="{MARGIN + box_w / 2 - 30}" y1="{top + 2}" '
                f'x2="{MARGIN + box_w / 2 - 30}" y2="{y - 2}" stroke="#374151" '
                'marker-end="url(#head)"/>'
            )
            out.append(
                f'<line x1="{MARGIN + box_w / 2 + 30}" y1="{y - 2}" '
                f'x2="{MARGIN + box_w / 2 + 30}" y2="{top + 2}" stroke="#374151" '
                'marker-end="url(#head)"/>'
            )
    side = MARGIN + box_w + 20
    core_top = MARGIN + 2 * (box_h + gap)
    out.append(
        f'<text x="{side}" y="{MARGIN + 40}" fill="#92400e">IO, no decisions</text>'
        f'<text x="{side}" y="{core_top + 20}" fill="#1e3a8a">pure core:</text>'
        f'<text x="{side}" y="{core_top + 38}" fill="#1e3a8a">no IO, no clock</text>'
        f'<text x="{side}" y="{height - MARGIN - 30}" fill="#374151">↓ commands, bytes out</text>'
        f'<text x="{side}" y="{height - MARGIN - 12}" fill="#374151">↑ bytes in, events</text>'
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def bar_chart_svg(
    title: str,
    groups: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    unit: str,
    footer: str = "",
    colours: Sequence[str] = COLOURS,
    bar_labels: bool = False,
) -> str:
    """Grouped bars: one group per ``groups`` entry, one bar per series (a missing value
    is None and draws no bar; ``colours[i]`` fills series i), a legend on the right, y from
    zero; ``bar_labels`` writes each value (``170k``) above its bar."""
    values = [v for _, row in series for v in row if v is not None] or [1.0]
    top = max(values)
    magnitude = 10 ** math.floor(math.log10(top)) if top > 0 else 1
    step = next(s * magnitude for s in (0.2, 0.5, 1, 2, 5, 10) if top / (s * magnitude) <= 6)
    ymax = step * math.ceil(top / step)
    width = max(820, 140 + len(groups) * (len(series) * 14 + 30) + 200)
    height = 470
    left, right, plot_top, bottom = 90, 200, 50, 350
    plot_w, plot_h = width - left - right, bottom - plot_top
    group_w = plot_w / len(groups)
    bar_w = group_w / (len(series) + 1)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT}>',
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2:.0f}" y="24" text-anchor="middle" font-size="15" '
        f'font-weight="bold">{escape(title)} ({escape(unit)})</text>',
    ]
    tick = 0.0
    while tick <= ymax + step / 2:
        y = bottom - tick / ymax * plot_h
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e5e7eb"/>'
            f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end">{tick:,.{_decimals(step)}f}'
            "</text>"
        )
        tick += step
    for g, group in enumerate(groups):
        x0 = left + g * group_w + bar_w / 2
        for i, (name, row) in enumerate(series):
            value = row[g]
            if value is None:
                continue
            h = value / ymax * plot_h
            x = x0 + i * bar_w
            out.append(
                f'<rect x="{x + 1:.1f}" y="{bottom - h:.1f}" '
                f'width="{bar_w - 2:.1f}" height="{h:.1f}" fill="{colours[i % len(colours)]}">'
                f"<title>{escape(name)}, {escape(group)}: {value:,}</title></rect>"
            )
            if bar_labels:
                short = f"{value / 1000:,.0f}k" if value >= 1000 else f"{value:,.0f}"
                out.append(
                    f'<text x="{x + bar_w / 2:.1f}" y="{bottom - h - 4:.1f}" '
                    f'text-anchor="middle" font-size="10">{short}</text>'
                )
        out.append(
            f'<text transform="translate({left + (g + 0.5) * group_w:.1f},{bottom + 14}) '
            f'rotate(30)" font-size="11">{escape(group)}</text>'
        )
    out.append(
        f'<line x1="{left}" y1="{bottom}" x2="{left + plot_w}" y2="{bottom}" stroke="#374151"/>'
    )
    for i, (name, _) in enumerate(series):
        y = plot_top + 10 + i * 22
        out.append(
            f'<rect x="{left + plot_w + 20}" y="{y}" width="14" height="14" '
            f'fill="{colours[i % len(colours)]}"/>'
            f'<text x="{left + plot_w + 40}" y="{y + 11}">{escape(name)}</text>'
        )
    if footer:
        out.append(
            f'<text x="{left}" y="{height - 8}" font-size="11" fill="#4b5563">'
            f"{escape(footer)}</text>"
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _decimals(step: float) -> int:
    return 0 if step >= 1 else max(0, -math.floor(math.log10(step)))
