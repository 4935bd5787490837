"""Every ```python block in docs/*.md runs, top to bottom per page, against the real broker.

A page with content tabs (pymdownx.tabbed: ``=== "asyncio"`` then the tab's content indented
four spaces) runs once per tab label: that tab's blocks together with the page's untabbed
blocks, in page order, in one namespace. So a page of four runtimes runs four programs,
each with the shared setup above the tabs.
"""

from __future__ import annotations

import pathlib
import re
import textwrap

import pytest

DOCS = pathlib.Path(__file__).parents[2] / "docs"
TAB = re.compile(r'^=== "([^"]+)"\s*$')
FENCE = re.compile(r"^( *)```python\s*$")


def blocks(text: str) -> list[tuple[str | None, str]]:
    """(tab label or None, code) for each python block, in page order."""
    found: list[tuple[str | None, str]] = []
    lines = text.splitlines()
    tab: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if (heading := TAB.match(line)) is not None:
            tab = heading.group(1)
        elif line.strip() and not line.startswith(" "):
            tab = None  # a line at the margin ends the tabs
        if (fence := FENCE.match(line)) is not None:
            indent = fence.group(1)
            end = i + 1
            while lines[end].rstrip() != f"{indent}```":
                end += 1
            code = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
            found.append((tab if indent else None, code))
            i = end
        i += 1
    return found


def programs(page: pathlib.Path) -> dict[str, list[str]]:
    """The runs of one page: {"page": blocks} or {tab label: blocks} (see the module doc)."""
    found = blocks(page.read_text())
    labels = list(dict.fromkeys(tab for tab, _ in found if tab is not None))
    if not labels:
        return {"page": [code for _, code in found]} if found else {}
    return {label: [code for tab, code in found if tab in (None, label)] for label in labels}


CASES = [
    pytest.param(page, label, id=f"{page.name}[{label}]")
    for page in sorted(DOCS.glob("*.md"))
    for label in programs(page)
]


def test_pages_found() -> None:
    pages = {page.name for page, _ in (case.values for case in CASES)}
    assert "architecture.md" in pages


def test_tabbed_blocks_extracted() -> None:
    text = textwrap.dedent(
        """\
        ```python
        shared = 1
        ```

        === "asyncio"

            ```python
            a = shared
            ```

        === "trio"

            Some prose.

            ```python
            t = shared
            ```

        After the tabs.
        """
    )
    assert blocks(text) == [
        (None, "shared = 1\n"),
        ("asyncio", "a = shared\n"),
        ("trio", "t = shared\n"),
    ]


@pytest.mark.integration
@pytest.mark.parametrize(("page", "label"), CASES)
def test_page_examples_run(
    page: pathlib.Path, label: str, kafka_bootstrap_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    codes = programs(page)[label]
    assert codes
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(codes):
        exec(compile(code, f"{page.name}[{label} block {i}]", "exec"), namespace)
