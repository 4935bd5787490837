"""How the core reports what is worth a log line (docs/observability.md#logging): it calls
the logging module itself, one logger per area, at DEBUG (requests) and INFO (lifecycle
transitions) only. Anything a user must act on is an event or a raised error, never a
WARNING or ERROR line from the core: the adapter that hands the error over decides whether
it also logs it."""

from __future__ import annotations

import ast
import pathlib

import pytest

import kafkastate.core

CORE = pathlib.Path(kafkastate.core.__file__).parent
FILES = sorted(CORE.rglob("*.py"))
ABOVE_INFO = {"warning", "warn", "error", "exception", "critical", "fatal"}
LEVELS = {"DEBUG", "INFO"}
AREAS = {"admin", "connection", "consumer", "group", "producer", "txn"}


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]


def _level_names(node: ast.expr) -> set[str]:
    """The logging level names an expression can evaluate to (``logging.INFO if ... else
    logging.DEBUG`` gives both); an unknown shape gives ``{"?"}``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return {node.attr} if node.value.id == "logging" else {"?"}
    if isinstance(node, ast.IfExp):
        return _level_names(node.body) | _level_names(node.orelse)
    return {"?"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CORE)))
def test_core_logs_at_debug_and_info_only(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    for call in _calls(tree):
        func = call.func
        if not isinstance(func, ast.Attribute) or not isinstance(func.value, ast.Name):
            continue
        if func.value.id not in {"log", "logger", "logging"}:
            continue
        where = f"{path.name}:{call.lineno}"
        assert func.attr not in ABOVE_INFO, f"{where}: {func.attr}() in the core: make it an event"
        if func.attr == "log":
            assert _level_names(call.args[0]) <= LEVELS, f"{where}: a level above INFO"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(CORE)))
def test_core_loggers_are_named_by_area(path: pathlib.Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    for call in _calls(tree):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "getLogger":
            (arg,) = call.args
            assert isinstance(arg, ast.Constant), f"{path.name}:{call.lineno}"
            prefix, _, area = str(arg.value).partition(".")
            assert prefix == "kafkastate" and area in AREAS, arg.value


def test_the_rule_can_fail() -> None:
    bad = ast.parse("log.warning('x')\nlog.log(logging.WARNING, 'y')")
    calls = _calls(bad)
    assert calls[0].func.attr in ABOVE_INFO  # type: ignore[attr-defined]
    assert not _level_names(calls[1].args[0]) <= LEVELS
