"""Every ```python block in docs/*.md runs, top to bottom per page, against the real broker."""

from __future__ import annotations

import pathlib
import re

import pytest

DOCS = pathlib.Path(__file__).parents[2] / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md") if "```python" in p.read_text())
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_pages_found() -> None:
    assert any(p.name == "architecture.md" for p in PAGES)


@pytest.mark.integration
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples_run(
    page: pathlib.Path, kafka_bootstrap_env: None, capsys: pytest.CaptureFixture[str]
) -> None:
    blocks = BLOCK.findall(page.read_text())
    assert blocks
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(blocks):
        exec(compile(code, f"{page.name}[block {i}]", "exec"), namespace)
