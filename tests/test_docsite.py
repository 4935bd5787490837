"""The documentation site: it builds strict (MkDocs turns every warning, a broken link or
anchor among them, into a failure), every docs page is in the nav, every link and image in
the built HTML resolves, the generated diagrams and plots are there and current."""

from __future__ import annotations

import html.parser
import os
import pathlib
import subprocess
import sys
import textwrap
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")
pytest.importorskip("material", reason="the docs extra (mkdocs-material) is not installed")
pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings[python] is missing")

sys.path.insert(0, str(ROOT))
from tools import gen_plots  # noqa: E402
from tools.mkdocs_hooks import MORE, nav_of  # noqa: E402


def build(config: pathlib.Path, site: pathlib.Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=config.parent,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("docsite") / "site"
    done = build(ROOT / "mkdocs.yml", out)
    assert done.returncode == 0, done.stderr[-4000:]
    return out


class Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and (tag, name) in {("a", "href"), ("img", "src"), ("link", "href")}:
                self.targets.append(value)


def page_of(path: str) -> str:
    """docs/x.md -> x/index.html (use_directory_urls), index.md -> index.html."""
    stem = path.removesuffix(".md")
    return "index.html" if stem == "index" else f"{stem}/index.html"


def test_every_docs_page_is_built_and_in_the_nav(site: pathlib.Path) -> None:
    home = (site / "index.html").read_text()
    for md in sorted(DOCS.rglob("*.md")):
        rel = md.relative_to(DOCS).as_posix()
        built = site / page_of(rel)
        assert built.exists(), rel
        if rel != "index.md":
            url = page_of(rel).removesuffix("index.html")
            assert f'href="{url}"' in home, f"{rel} is not in the nav"


def test_every_internal_link_and_image_resolves(site: pathlib.Path) -> None:
    broken = []
    for page in sorted(site.rglob("*.html")):
        if page.name == "404.html":
            continue  # served from any depth, so its links are absolute
        parser = Links()
        parser.feed(page.read_text())
        for target in parser.targets:
            parts = urllib.parse.urlsplit(target)
            if parts.scheme or parts.netloc or not parts.path:
                continue  # external, or an anchor on the same page (MkDocs checks those)
            path = (page.parent / urllib.parse.unquote(parts.path)).resolve()
            if path.is_dir():
                path /= "index.html"
            if not path.exists():
                broken.append(f"{page.relative_to(site)} -> {target}")
    assert not broken, "\n".join(broken[:50])


def test_state_diagrams_and_layers_are_drawn(site: pathlib.Path) -> None:
    page = (site / "state-machines" / "index.html").read_text()
    for machine in (
        "GroupMember",
        "ConsumerGroupMember",
        "TransactionManager",
        "ProducerBatch",
        "FetchPosition",
    ):
        svg = site / "diagrams" / f"{machine}.svg"
        assert svg.read_text().startswith("<svg"), machine
        assert f"../diagrams/{machine}.svg" in page, machine
    assert "mermaid" not in page
    assert (site / "diagrams" / "layers.svg").exists()


def test_reference_pages_have_the_public_names(site: pathlib.Path) -> None:
    expected = {
        "asyncio": ("AIOKafkaProducer", "AIOKafkaConsumer", "getmany", "AIOKafkaAdminClient"),
        "anyio": ("open_producer", "open_consumer", "open_admin"),
        "sync": ("KafkaProducer", "KafkaConsumer", "KafkaAdminClient"),
        "legacy": ("SimpleProducer", "KeyedProducer", "SimpleConsumer", "KafkaClient"),
        "core": ("BrokerConnection", "ProducerMachine", "GroupMember", "TransactionManager"),
        "testing": ("KafkaCluster",),
        "sim": ("TxnSim",),
        "spark": ("KafkaStateDataSource",),
    }
    for page, names in expected.items():
        text = (site / "reference" / page / "index.html").read_text()
        for name in names:
            assert name in text, (page, name)


def test_plots_match_the_stored_results() -> None:
    assert gen_plots.main(["--check"]) == 0, "python tools/gen_plots.py"
    assert len(list((DOCS / "plots").glob("*.svg"))) >= 3


def test_nav_drops_missing_pages_and_adds_unlisted_ones(tmp_path: pathlib.Path) -> None:
    for name in ("index.md", "a.md", "zz-new.md"):
        (tmp_path / name).write_text("# page\n")
    nav = [{"Home": "index.md"}, {"Guides": [{"A": "a.md"}, {"Gone": "gone.md"}]}]
    assert nav_of(nav, tmp_path) == [
        {"Home": "index.md"},
        {"Guides": [{"A": "a.md"}]},
        {MORE: ["zz-new.md"]},
    ]


def test_a_broken_link_or_anchor_fails_the_build(tmp_path: pathlib.Path) -> None:
    """The strictness the site's own build relies on, shown on a two-page site."""
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        textwrap.dedent(
            """\
            site_name: t
            strict: true
            validation: {anchors: warn}
            """
        )
    )
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n[b](b.md#there)\n")
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## Here\n")
    assert build(config, tmp_path / "site").returncode != 0
    (tmp_path / "docs" / "index.md").write_text("# Home\n\n[b](b.md#here)\n")
    assert build(config, tmp_path / "site").returncode == 0
