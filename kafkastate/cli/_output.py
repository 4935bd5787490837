"""Where a command writes: rich tables, colours and progress on a terminal; plain,
machine-readable lines when piped (tab-separated rows, or JSON with ``--json``), with no
colour and no progress. Messages and summaries for people go to stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

__all__ = ["Output", "jsonable"]


def jsonable(value: Any) -> Any:
    """``value`` as JSON can hold it: bytes as text (or base64 when not UTF-8), sets and
    tuples as lists, other objects as their text."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


class Output:
    """A command's output streams."""

    def __init__(self, *, as_json: bool = False, stdout: TextIO | None = None) -> None:
        self.stdout = stdout or sys.stdout
        self.as_json = as_json
        self.terminal = self.stdout.isatty()
        """Whether stdout is a terminal (tables, colour, progress) or piped (plain)."""
        self.console = Console(file=self.stdout, highlight=False)
        self.err = Console(stderr=True, highlight=False)
        self._live: Progress | None = None

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Rows: a rich table on a terminal, tab-separated lines when piped, JSON objects
        (one list) with ``--json``."""
        if self.as_json:
            self.json([dict(zip(columns, row, strict=True)) for row in rows])
        elif self.terminal:
            table = Table(title=title, title_justify="left")
            for column in columns:
                table.add_column(column)
            for row in rows:
                table.add_row(*("" if v is None else str(v) for v in row))
            self.console.print(table)
        else:
            for row in rows:
                print("\t".join("" if v is None else str(v) for v in row), file=self.stdout)

    def json(self, value: Any) -> None:
        """One JSON document on one line."""
        print(json.dumps(jsonable(value), sort_keys=False), file=self.stdout)

    def done(self, text: str, data: dict[str, Any] | None = None) -> None:
        """A command's outcome: ``text`` for people (stderr, or stdout on a terminal), and
        with ``--json`` (or piped, when there is ``data``) a JSON line on stdout."""
        if data is not None and (self.as_json or not self.terminal):
            self.json(data)
            return
        (self.console if self.terminal else self.err).print(text, markup=False)

    def note(self, text: str) -> None:
        """A message for people (kcat's ``%`` lines), on stderr when it is a terminal."""
        if self.err.is_terminal:
            self.err.print(text, markup=False, style="dim")

    def data(self, raw: bytes) -> None:
        """A command's data as it is (a consumed record, rendered): its bytes when piped;
        on a terminal, text above the progress line."""
        if self._live is not None:
            text = raw.decode("utf-8", "backslashreplace").removesuffix("\n")
            self._live.console.print(text, markup=False, highlight=False, soft_wrap=True)
            return
        buffer = getattr(self.stdout, "buffer", None)
        if buffer is None:
            self.stdout.write(raw.decode("utf-8", "backslashreplace"))
        else:
            self.stdout.flush()
            buffer.write(raw)

    def flush(self) -> None:
        """Push what was written out (before offsets are committed)."""
        self.stdout.flush()
        buffer = getattr(self.stdout, "buffer", None)
        if buffer is not None:
            buffer.flush()

    @contextmanager
    def progress(self, what: str) -> Iterator[Progress | None]:
        """A live counter with the rate on a terminal (None when piped): task 0,
        ``advance`` it and set its ``rate`` field."""
        if not self.terminal:
            yield None
            return
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            TextColumn("{task.completed} records"),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        with progress:
            progress.add_task(what, total=None, rate="")
            self._live = progress
            try:
                yield progress
            finally:
                self._live = None
