"""kafkastate.core is pure: no IO, clock, threads or event-loop libraries (STYLE.md §1).
The simulator's world (kafkastate.sim, except its command line) is held to the same rules:
a run must be a function of its entropy alone."""

from __future__ import annotations

import ast
import pathlib

import pytest

import kafkastate.core
import kafkastate.sim

FORBIDDEN = {
    "asyncio",
    "trio",
    "anyio",
    "socket",
    "selectors",
    "ssl",
    "threading",
    "time",
    "secrets",
    "os",
    "subprocess",
    "multiprocessing",
    "concurrent",
    # the IO halves of SASL mechanisms live in the adapters layer
    "gssapi",
    "botocore",
    "boto3",
}

# The simulator's runtime bridges run a user's real asyncio/trio code in virtual time: they
# must import the event loop they drive (and socket for its address-family constants), but
# still no clock, thread, OS or entropy source -- the run stays a function of its seed.
RUNTIME_BRIDGES = {
    "aio.py": {"asyncio", "anyio", "selectors", "socket"},
    "triosim.py": {"trio", "socket"},
}

CORE = pathlib.Path(kafkastate.core.__file__).parent
SIM = pathlib.Path(kafkastate.sim.__file__).parent
FILES = sorted(CORE.rglob("*.py")) + sorted(p for p in SIM.glob("*.py") if p.name != "__main__.py")


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            names.add("<dynamic __import__>")
    return names


def test_core_has_files() -> None:
    assert len(FILES) >= 5


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CORE.parent)))
def test_no_forbidden_imports(path: pathlib.Path) -> None:
    allowed = RUNTIME_BRIDGES.get(path.name, set()) if path.parent == SIM else set()
    bad = {
        name
        for name in imported_modules(path)
        if (name.split(".")[0] in FORBIDDEN and name.split(".")[0] not in allowed)
        or name == "<dynamic __import__>"
    }
    assert not bad, f"{path} imports {sorted(bad)}"


def test_checker_catches_violations(tmp_path: pathlib.Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import time\nfrom asyncio import sleep\nimport random\n")
    assert imported_modules(sample) >= {"time", "asyncio"}


def test_no_global_random_calls() -> None:
    """Randomness only from a Random instance handed in: no module-level random.* calls."""
    offenders = []
    for path in FILES:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "random"
                and node.func.attr != "Random"
            ):
                offenders.append(f"{path}:{node.lineno} random.{node.func.attr}")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "random"
                and node.func.attr == "Random"
                and not node.args
            ):
                offenders.append(f"{path}:{node.lineno} unseeded random.Random()")
    assert not offenders
