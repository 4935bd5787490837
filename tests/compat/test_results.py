"""The compat results file, the table drawn from it, and the short run's version choice
(no broker: these check the bookkeeping around tests/compat)."""

from __future__ import annotations

import datetime
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from kafkastate.testing._versions import profile_for
from tests.compat.results import fold, write_results
from tests.compat.versions import SHORT_VERSIONS, short_version

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen", ROOT / "tools" / "gen_compat_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_row_folds_its_cases_worst_first() -> None:
    rows = fold(
        {
            "t[gzip]": ("codecs", "ok", None),
            "t[zstd]": ("codecs", "failed", None),
            "k": ("kip848", "lacks", "kip848-preview-off"),
            "s[PLAIN]": ("sasl", "skipped", None),
            "s[SCRAM]": ("sasl", "ok", None),
            "x": ("never", "skipped", None),
        }
    )
    assert rows == [
        {"row": "codecs", "outcome": "failed", "lacks": None},
        {"row": "kip848", "outcome": "lacks", "lacks": "kip848-preview-off"},
        {"row": "sasl", "outcome": "ok", "lacks": None},
        {"row": "never", "outcome": "skipped", "lacks": None},
    ]


def test_results_are_written_per_version_and_drawn_as_a_table(tmp_path: Path) -> None:
    old = {
        "a/test_compat.py::test_codecs[zstd]": ("codecs", "ok", None),
        "a/test_compat.py::test_kip848": ("KIP-848", "lacks", "consumer-group-heartbeat"),
    }
    new = {
        "a/test_compat.py::test_codecs[zstd]": ("codecs", "failed", None),
        "a/test_compat.py::test_kip848": ("KIP-848", "ok", None),
        "a/test_compat.py::test_late": ("late API", "ok", None),
    }
    write_results(tmp_path, profile_for("2.8.2"), old, full=True)
    path = write_results(tmp_path, profile_for("4.4.0"), new, full=False)
    data = json.loads(path.read_text())
    assert (data["kafka_version"], data["mode"], data["full"]) == ("4.4.0", "KRaft", False)
    assert data["cases"]["test_compat.py::test_codecs[zstd]"] == "failed"
    gen = _generator()
    runs = gen.load(tmp_path)
    assert [run["kafka_version"] for run in runs] == ["2.8.2", "4.4.0"]
    table = gen.render(runs).splitlines()
    assert table[0] == "| feature | 2.8.2 (ZooKeeper) | 4.4.0 (KRaft) |"
    assert table[2:6] == [
        "| codecs | ✓ | ✗ failed |",
        "| KIP-848 | clear error¹ | ✓ |",
        "| late API | not in this run | ✓ |",
        "| compat cases passed | 2/2 | 2/3 (short set) |",
    ]


def test_the_compatibility_page_shows_the_recorded_results() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_compat_table.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_every_footnote_of_the_table_is_explained_on_the_page() -> None:
    page = (ROOT / "docs" / "compatibility.md").read_text()
    table = page.split("<!-- compat-table -->")[1].split("<!-- /compat-table -->")[0]
    used = set(re.findall(r"clear error([¹²³⁴⁵⁶⁷⁸⁹])", table))
    assert used, "the table records no broker lacking a feature"
    for mark in used:
        assert re.search(rf"^{mark} ", page, re.MULTILINE), f"footnote {mark} is not explained"
    # every key the compat cases record has a footnote
    gen: Any = _generator()
    source = (ROOT / "tests" / "compat" / "test_compat.py").read_text()
    recorded = set(re.findall(r'record_property\("broker_lacks", "([a-z0-9-]+)"\)', source))
    assert recorded == set(gen.FOOTNOTES)


def test_the_short_run_alternates_between_a_kraft_3x_and_a_zookeeper_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KAFKASTATE_COMPAT_VERSION", raising=False)
    days = [datetime.date(2026, 1, 1) + datetime.timedelta(days=n) for n in range(4)]
    picked = [short_version(day) for day in days]
    assert picked == ["2.8.2", "3.9.1", "2.8.2", "3.9.1"]  # 1 January is day 1 (odd)
    assert set(picked) == set(SHORT_VERSIONS)
    assert {profile_for(v).zookeeper for v in SHORT_VERSIONS} == {True, False}
    monkeypatch.setenv("KAFKASTATE_COMPAT_VERSION", "3.6.2")
    assert short_version(days[0]) == "3.6.2"
