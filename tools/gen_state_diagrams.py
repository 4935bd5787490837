"""Write docs/state-machines.md from the machines' state tables (kafkastate.core.states).

Run: python tools/gen_state_diagrams.py > docs/state-machines.md
(tests/core/test_states.py fails when the page and the tables disagree.)
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from kafkastate.core.states import StateTable, registered_tables


def diagram(table: StateTable[enum.Enum]) -> list[str]:
    """One Mermaid ``stateDiagram-v2`` block: the initial state, then every transition in
    the enum's order (a state that may be re-entered gets a loop)."""
    lines = ["```mermaid", "stateDiagram-v2", f"    [*] --> {table.initial.name}"]
    for state in table.states:
        for target in table.states:  # the enum's order, not the frozenset's
            if target in table.transitions[state]:
                lines.append(f"    {state.name} --> {target.name}")
        if not table.transitions[state]:
            lines.append(f"    {state.name} --> [*]")
    lines.append("```")
    return lines


def commands(table: StateTable[enum.Enum]) -> list[str]:
    """The commands each state allows, as a table (machines that have them)."""
    if not table.commands:
        return []
    kinds = sorted({kind for allowed in table.commands.values() for kind in allowed})
    lines = [
        "",
        "Commands allowed per state:",
        "",
        "| state | " + " | ".join(f"`{kind}`" for kind in kinds) + " |",
        "| --- |" + " :-: |" * len(kinds),
    ]
    for state in table.states:
        marks = ("yes" if kind in table.commands[state] else "" for kind in kinds)
        lines.append(f"| {state.name} | " + " | ".join(marks) + " |")
    return lines


def page(image: Callable[[str], str] | None = None) -> str:
    """The whole page; with ``image``, each machine is drawn as the picture at
    ``image(machine name)`` (the site's build-time SVG) instead of a Mermaid block."""
    lines = [
        "# State machines",
        "",
        "Every machine's states and legal transitions, generated from the `StateTable` next",
        "to its enum (see [the States section of the architecture page](architecture.md#states)).",
        "A transition not drawn here raises `LocalProtocolError`. Do not edit by hand:",
        "`python tools/gen_state_diagrams.py > docs/state-machines.md`.",
    ]
    if image:
        lines += [
            "",
            "The pictures are drawn from the same tables each time the site is built",
            "(`tools/svg_diagrams.py`): dashed curves on the right go back to an earlier",
            "state, curves on the left skip ahead, a bold box is a state with no way out.",
        ]
    for name, table in registered_tables().items():
        enum_path = f"{table.states.__module__}.{table.states.__qualname__}"
        lines += ["", f"## {name}", "", f"States: `{enum_path}`.", ""]
        lines += [f"![{name} states]({image(name)})"] if image else diagram(table)
        lines += commands(table)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(page(), end="")
