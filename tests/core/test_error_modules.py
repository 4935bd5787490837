"""The error modules depend one way: kafkastate.errors -> _error_codes -> _error_base.

_error_codes.py is generated (tools/gen_error_codes.py); if it imported kafkastate.errors
again, importing it first would fail half-way through the circle."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

import kafkastate
from kafkastate import _error_base, _error_codes, errors

PACKAGE = pathlib.Path(kafkastate.__file__).parent


def imported(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", ["_error_codes.py", "_error_base.py"])
def test_error_bases_do_not_import_errors(module: str) -> None:
    names = imported(PACKAGE / module)
    assert "kafkastate.errors" not in names
    if module == "_error_base.py":
        assert not {n for n in names if n.startswith("kafkastate")}
    else:
        assert {n for n in names if n.startswith("kafkastate")} == {"kafkastate._error_base"}


@pytest.mark.parametrize("first", ["kafkastate._error_codes", "kafkastate._error_base"])
def test_each_error_module_imports_first_in_a_fresh_interpreter(first: str) -> None:
    code = (
        "import sys\n"
        f"import {first}\n"
        "assert 'kafkastate.errors' not in sys.modules, 'the circle is back'\n"
        "import kafkastate.errors\n"
        "from kafkastate.errors import NotLeaderForPartitionError, error_for_code\n"
        "assert error_for_code(6) is NotLeaderForPartitionError\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_bases_are_the_public_classes() -> None:
    for name in _error_base.__all__:
        cls = getattr(errors, name)
        assert cls is getattr(_error_base, name)
        assert cls.__module__ == "kafkastate.errors"
        assert name in errors.__all__
    for name in _error_codes.__all__:
        assert getattr(errors, name) is getattr(_error_codes, name)
