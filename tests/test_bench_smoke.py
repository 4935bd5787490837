"""The benchmark driver runs end to end: a short version of ``./ks bench`` in the suite.

No figure is checked (timings never pass or fail a test); what is checked is that every
part the driver was asked for ran and landed in its tables, so a driver broken by a
change (an option, a script's arguments) fails here rather than in the long run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH_ALL = ROOT / "bench" / "bench_all.py"


def _bench_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_all_under_test", BENCH_ALL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_run_script_runs_a_script_that_takes_no_cells(tmp_path: pathlib.Path) -> None:
    # The Spark and curve scripts take no --cells: the driver once looked for it in every
    # script's arguments and stopped the full run (ValueError) after the Java figures.
    bench_all = _bench_all()
    script = tmp_path / "tiny_bench.py"
    script.write_text(
        "import json, sys\n"
        "out = sys.argv[sys.argv.index('--json') + 1]\n"
        "json.dump({'rows': [{'kind': 'spark', 'argv': sys.argv[1:-2]}]}, open(out, 'w'))\n"
    )
    rows = bench_all.run_script(str(script), ["--bootstrap", "b:1"], tmp_path / "rows.json")
    assert rows == [{"kind": "spark", "argv": ["--bootstrap", "b:1"]}]
    # a --cells that --only emptied skips the script
    none = bench_all.run_script(str(script), ["--cells", ""], tmp_path / "none.json")
    assert none == [] and not (tmp_path / "none.json").exists()


@pytest.mark.integration
def test_quick_subset_writes_every_table(kafka_cluster: Any, tmp_path: pathlib.Path) -> None:
    for peer in ("aiokafka", "confluent_kafka"):
        if importlib.util.find_spec(peer) is None:
            pytest.skip(f"{peer} is not installed (the dev extra)")
    out, plots = tmp_path / "results", tmp_path / "plots"
    argv = [
        sys.executable,
        str(BENCH_ALL),
        "--quick",
        "--only",
        "produce/100B-p1-*,consume/100B-p1-*",
        "--no-java",
        "--no-spark",
        "--no-curves",
        "--bootstrap",
        kafka_cluster.bootstrap,
        "--out",
        str(out),
        "--plots",
        str(plots),
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        argv, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((out / "latest.json").read_text())
    rates = {(r["kind"], r["cell"], r["client"]): r["rate"] for r in result["rows"]}
    for kind, cell in (("producer", "100B-p1-acks1-none"), ("consumer", "100B-p1-none")):
        clients = {c for k, ce, c in rates if (k, ce) == (kind, cell)}
        assert "aiokafka" in clients, (kind, clients)
        assert any(c.startswith("confluent") for c in clients), (kind, clients)
        assert any(c.startswith("ks-") for c in clients), (kind, clients)
        assert all(rates[(kind, cell, c)] > 0 for c in clients)
    table = (out / "latest.md").read_text()
    for heading in ("### Produce", "### Consume", "### Memory", "### Spark"):
        assert heading in table
    assert "left out (--no-spark)" in table
    assert list(plots.glob("perf-*.svg")), "no chart written"
