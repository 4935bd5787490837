"""Counting how often an awaited call gives the event loop a turn, on asyncio and trio."""

from __future__ import annotations

import types
from typing import Any


@types.coroutine
def counting_suspensions(coro: Any, counter: list[int]) -> Any:
    """Run ``coro`` to its end from inside the calling task, counting how often it
    suspends (gives the event loop a turn): a count that does not depend on which task the
    scheduler picks next, as asyncio's and trio's do."""
    sent: Any = None
    thrown: BaseException | None = None
    while True:
        try:
            trap = coro.send(sent) if thrown is None else coro.throw(thrown)
        except StopIteration as stop:
            return stop.value
        counter[0] += 1
        sent, thrown = None, None
        try:
            sent = yield trap
        except BaseException as exc:  # handed to the coroutine (Cancelled too)
            thrown = exc
