"""The async driver against a scripted machine, on trio's virtual clock: it runs timers
when they are due, including a timer that handling the machine's events set (it reads the
deadline again after handling them instead of sleeping until an older, later one)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from kafkastate.adapters.anyio.driver import AsyncDriver


class Machine:
    """The IO surface the driver uses, with a timer the test sets."""

    def __init__(self) -> None:
        self.timer: float | None = None
        self.events: list[Any] = []
        self.fired: list[float] = []

    def get_timer(self) -> float | None:
        return self.timer

    def handle_timer(self, *, now: float) -> None:
        if self.timer is not None and now >= self.timer:
            self.fired.append(now)
            self.timer = None

    def next_event(self) -> Any:
        return self.events.pop(0) if self.events else None

    def data_to_send(self) -> list[Any]:
        return []


@pytest.mark.trio
@pytest.mark.parametrize("timers_when_due", [True, False])
async def test_a_timer_set_while_events_are_handled_fires_on_time(
    autojump_clock: Any, timers_when_due: bool
) -> None:
    machine = Machine()
    start = trio.current_time()
    machine.timer = start + 1000.0  # far away: what the pump reads first
    machine.events.append("news")

    def on_event(event: Any) -> None:
        assert event == "news"
        machine.timer = trio.current_time() + 1.0  # handling it needs the timer sooner

    driver = AsyncDriver(machine, on_event=on_event, timers_when_due=timers_when_due)  # type: ignore[arg-type]
    async with driver:
        with trio.fail_after(10):
            while not machine.fired:
                await trio.sleep(0.01)
    assert machine.fired[0] - start == pytest.approx(1.0, abs=0.05)
