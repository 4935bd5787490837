"""MkDocs hooks for the documentation site (mkdocs.yml names this file).

- The nav tolerates pages coming and going: an entry whose page does not exist is dropped,
  and a docs/ page the nav does not list is added under "More", so pages added on other
  branches appear without a conflict in mkdocs.yml.
- Generated at build time, so they cannot go stale: the state diagrams (one SVG per
  machine, drawn from its ``StateTable``), the layer diagram, the state-machines page
  (tools/gen_state_diagrams.py, pictures instead of Mermaid) and the options page
  (tools/gen_options_doc.py, from the one option layer).
"""

from __future__ import annotations

import pathlib
import re
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `mkdocs build` does not put the project on the path
    sys.path.insert(0, str(ROOT))

from mkdocs.config.defaults import MkDocsConfig  # noqa: E402
from mkdocs.structure.files import File, Files  # noqa: E402
from mkdocs.structure.pages import Page  # noqa: E402

from kafkastate.core.states import registered_tables  # noqa: E402
from tools import gen_options_doc, gen_state_diagrams  # noqa: E402
from tools.svg_diagrams import layers_svg, state_svg  # noqa: E402

MORE = "More"


def _present(entries: list[Any], docs: pathlib.Path) -> list[Any]:
    """The nav without entries whose page is missing (sections left empty go too)."""
    kept: list[Any] = []
    for entry in entries:
        if isinstance(entry, dict):
            ((title, value),) = entry.items()
            if isinstance(value, list):
                value = _present(value, docs)
                if value:
                    kept.append({title: value})
            elif "://" in value or (docs / value).exists():
                kept.append(entry)
        elif "://" in entry or (docs / entry).exists():
            kept.append(entry)
    return kept


def _listed(entries: list[Any]) -> set[str]:
    found: set[str] = set()
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found |= _listed(value) if isinstance(value, list) else {value}
    return found


def nav_of(nav: list[Any], docs: pathlib.Path) -> list[Any]:
    """``nav`` with missing pages dropped and unlisted pages added under "More"."""
    kept = _present(nav, docs)
    listed = _listed(kept)
    extra = sorted(
        path.relative_to(docs).as_posix()
        for path in docs.rglob("*.md")
        if path.relative_to(docs).as_posix() not in listed
    )
    return [*kept, {MORE: extra}] if extra else kept


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    config.nav = nav_of(config.nav or [], pathlib.Path(config.docs_dir))
    return config


def diagram_path(machine: str) -> str:
    return f"diagrams/{machine}.svg"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for name, table in registered_tables().items():
        files.append(File.generated(config, diagram_path(name), content=state_svg(table)))
    files.append(File.generated(config, "diagrams/layers.svg", content=layers_svg()))
    return files


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    # relative to the page: state-machines.md sits at the top of docs/
    if page.file.src_uri == "state-machines.md":
        return gen_state_diagrams.page(image=diagram_path)
    if page.file.src_uri == "options.md":
        return gen_options_doc.page()
    return markdown


# Docstrings use Sphinx roles (:meth:`start`); mkdocstrings renders the code and leaves the
# role in front of it. Drop the role and a leading "~" (Sphinx's "short name" mark).
ROLE = re.compile(r":(?:py:)?(?:meth|func|class|mod|data|attr|exc|obj|const):(<code[^>]*>)~?")


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    return ROLE.sub(r"\1", html)
