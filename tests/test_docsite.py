"""The documentation site: it builds strict (MkDocs turns every warning, a broken link or
anchor among them, into a failure), every docs page is in the nav, every link and image in
the built HTML resolves, the generated diagrams and plots are there and current."""

from __future__ import annotations

import functools
import html.parser
import http.server
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import threading
import urllib.parse
from collections.abc import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

pytest.importorskip("mkdocs", reason="the docs extra (mkdocs) is not installed")
pytest.importorskip("material", reason="the docs extra (mkdocs-material) is not installed")
pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings[python] is missing")

sys.path.insert(0, str(ROOT))
from tools import gen_fuzz_table, gen_plots  # noqa: E402
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
        "oauth": ("OIDCTokenProvider", "AbstractTokenProvider"),
    }
    for page, names in expected.items():
        text = (site / "reference" / page / "index.html").read_text()
        for name in names:
            assert name in text, (page, name)
        # every reference page shows where its names are defined, with the source
        assert "Source code in <code>kafkastate/" in text, page


def test_plots_match_the_stored_results() -> None:
    assert gen_plots.main(["--check"]) == 0, "python tools/gen_plots.py"
    assert len(list((DOCS / "plots").glob("*.svg"))) >= 3


def test_fuzz_table_matches_the_stored_report() -> None:
    """docs/reliability.md's fuzzing figures are the campaign report's, regenerated."""
    assert gen_fuzz_table.main(["--check"]) == 0, "python tools/gen_fuzz_table.py"


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


CHROMIUMS = ("chromium-headless-shell", "chromium", "chromium-browser")
"""Debian's builds (./ks installs chromium-headless-shell); Playwright's own browser
download is not relied on."""


@pytest.fixture(scope="module")
def served(site: pathlib.Path) -> Iterator[str]:
    """The built site over HTTP on a free loopback port (the search worker needs HTTP)."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    "path", ["", "reference/asyncio/", "state-machines/", "producer/", "benchmarks/"]
)
def test_site_renders_in_a_browser(served: str, path: str, tmp_path: pathlib.Path) -> None:
    """Each page loads in headless Chromium with no console error, no failed request and
    every image decoded; a screenshot is left in KAFKASTATE_DOCS_SCREENSHOTS if set."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    executable = next(filter(None, map(shutil.which, CHROMIUMS)), None)
    if executable is None:
        pytest.skip(f"no Chromium on PATH ({', '.join(CHROMIUMS)}): apt-get install one")
    problems: list[str] = []
    shots = pathlib.Path(os.environ.get("KAFKASTATE_DOCS_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on(
                "console",
                lambda msg: (
                    problems.append(f"console: {msg.text}") if msg.type == "error" else None
                ),
            )
            page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
            page.on(
                "requestfailed", lambda request: problems.append(f"request failed: {request.url}")
            )
            page.goto(served + path, wait_until="networkidle")
            broken = page.evaluate(
                "Array.from(document.images)"
                ".filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"
            )
            images = page.evaluate("document.images.length")
            shot = shots / f"{path.strip('/').replace('/', '-') or 'home'}.png"
            page.screenshot(path=str(shot), full_page=False)
        finally:
            browser.close()
    assert not problems, problems
    assert not broken, f"images that did not load: {broken}"
    assert shot.stat().st_size > 10_000
    if path in ("", "state-machines/", "benchmarks/"):
        assert images >= 1
