"""What importing kafkastate pulls in: each Spark task's Python worker, each CLI call and each
user process pays for every module it imports. Checked in a fresh interpreter through
``sys.modules`` (never by timing): Hypothesis (which kio imports, with pytest and trio, when
it is installed) and the machines a client does not use stay out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Never imported by kafkastate outside a test session (kio's optional Hypothesis hook).
TEST_ONLY = ("hypothesis", "pytest", "_pytest", "trio")
# Imported by the functions that use them.
CODECS = ("cramjam", "lz4", "zstandard")


def imported_after(code: str) -> set[str]:
    """The modules loaded in a fresh interpreter after running ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def loaded(modules: set[str], *packages: str) -> list[str]:
    """The modules of ``packages`` (a package and its submodules) among ``modules``."""
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.mark.parametrize(
    "module",
    ["kafkastate", "kafkastate.sync", "kafkastate.asyncio", "kafkastate.errors"],
)
def test_no_test_libraries(module: str) -> None:
    modules = imported_after(f"import {module}")
    assert module in modules
    assert not loaded(modules, *TEST_ONLY)


def test_the_package_alone_is_light() -> None:
    modules = imported_after("import kafkastate")
    assert not loaded(modules, "kafkastate.core", "kafkastate.adapters", *CODECS)


def test_a_producer_imports_no_consumer_or_admin_machine() -> None:
    modules = imported_after("import kafkastate.adapters.blocking.producer")
    assert not loaded(
        modules, "kafkastate.core.consumer", "kafkastate.core.admin", *TEST_ONLY, *CODECS
    )


def test_a_consumer_imports_no_producer_or_admin_machine() -> None:
    modules = imported_after("import kafkastate.adapters.blocking.consumer")
    assert not loaded(
        modules, "kafkastate.core.producer", "kafkastate.core.admin", *TEST_ONLY, *CODECS
    )


def test_a_codec_is_imported_when_first_used() -> None:
    modules = imported_after(
        "from kafkastate.core.protocol.compression import Compression, compress\n"
        "compress(Compression.ZSTD, b'x' * 100)"
    )
    assert loaded(modules, "zstandard")
    assert not loaded(modules, "lz4", "cramjam")


def test_the_spark_source_imports_no_client() -> None:
    # What every Spark Python worker of a kafkastate query imports first (planners, tasks,
    # the commit): the data source classes; a task imports its client when it runs.
    pytest.importorskip("pyspark")
    modules = imported_after("import kafkastate.spark, pyspark_kafkastate")
    assert not loaded(
        modules,
        *TEST_ONLY,
        *CODECS,
        "kafkastate.adapters",
        "kafkastate.core.client",
        "kio.serial",
        "kafkastate.core.admin",
        "kafkastate.core.consumer",
        "kafkastate.core.producer",
        "kafkastate.sync",
        "pyarrow.compute",
    )


def test_hypothesis_still_works_after_kafkastate() -> None:
    # kio's Hypothesis hook is skipped, Hypothesis itself is not blocked
    modules = imported_after(
        "import kafkastate.core.protocol.framing\n"
        "import hypothesis.strategies as st\n"
        "assert st.integers(0, 3).example() in range(4)\n"
        "import kio.static._phantom as p\n"
        "assert p.hypothesis is None"
    )
    assert "hypothesis" in modules


def test_hypothesis_imported_first_keeps_kio_hooks() -> None:
    imported_after(
        "import hypothesis.strategies\n"
        "import kafkastate.core.protocol.framing\n"
        "import kio.static._phantom as p\n"
        "assert p.hypothesis is not None"
    )
