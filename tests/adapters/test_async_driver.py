"""The async driver against a scripted machine, on trio's virtual clock: it runs timers
when they are due, including a timer that handling the machine's events set (it reads the
deadline again after handling them instead of sleeping until an older, later one)."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.abc
import pytest
import trio

from kafkastate.adapters._common import READ_MAX, READ_MIN
from kafkastate.adapters.anyio.driver import AsyncDriver, _asyncio_transport

KIB = 1 << 10


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


class ScriptedStream:
    """A byte stream whose reads fill the size asked for (``True``) or not (``False``),
    then end; it records the sizes asked for."""

    def __init__(self, fills: list[bool]) -> None:
        self.fills = fills
        self.asked: list[int] = []

    async def receive(self, max_bytes: int) -> bytes:
        self.asked.append(max_bytes)
        if not self.fills:
            raise anyio.EndOfStream
        return b"x" * (max_bytes if self.fills.pop(0) else 10)


@pytest.mark.trio
async def test_reads_ask_for_64_kib_and_grow_only_while_they_fill() -> None:
    """A read allocates the whole size it asks for: 1 MiB reads of small responses left
    glibc's heap fragmented (a trio process's RSS grew with every connect/close cycle)."""
    received: list[int] = []
    machine = Machine()
    machine.receive_data = lambda node, data, now: received.append(len(data))  # type: ignore[attr-defined]
    driver = AsyncDriver(machine, on_event=lambda event: None)  # type: ignore[arg-type]
    stream = ScriptedStream([True] * 6 + [False, True, False])
    scope = anyio.CancelScope()
    driver._scopes[1] = scope  # type: ignore[index]
    await driver._read(1, stream, scope, ("127.0.0.1", 9092))  # type: ignore[arg-type]
    kib = 1 << 10
    assert [n // kib for n in stream.asked] == [64, 128, 256, 512, 1024, 1024, 1024, 64, 128, 64]
    assert received[-1] == 0  # the end of the stream reached the machine


def test_asyncio_transport_reads_ask_for_the_driver_read_size() -> None:
    """On asyncio the transport reads the socket (``recv(max_size)``, 256 KiB in CPython)
    and anyio's ``receive(n)`` only splits what came: the driver sets the transport's
    ``max_size`` to its read size, so a small response no longer costs a 256 KiB buffer
    shrunk to fit (which fragmented glibc's heap: an asyncio process's RSS grew with every
    connect/close cycle on three brokers)."""
    big = 3 * 256 * KIB
    reads: list[tuple[int, int]] = []  # (bytes one recv returned, the size it asked for)

    async def main() -> None:
        first = anyio.Event()

        async def serve(client: anyio.abc.SocketStream) -> None:
            async with client:
                await client.send(b"x" * 100)
                await first.wait()  # the small answer was read on its own
                await client.send(b"y" * big)

        machine = Machine()
        received: list[int] = []

        def receive_data(node: int, data: bytes, now: float) -> None:
            received.append(len(data))
            first.set()

        machine.receive_data = receive_data  # type: ignore[attr-defined]
        driver = AsyncDriver(machine, on_event=lambda event: None)  # type: ignore[arg-type]
        async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
            port = listener.extra(anyio.abc.SocketAttribute.local_port)
            async with anyio.create_task_group() as tg:
                tg.start_soon(listener.serve, serve)
                stream = await anyio.connect_tcp("127.0.0.1", port)
                transport = stream._transport  # type: ignore[attr-defined]
                protocol = stream._protocol  # type: ignore[attr-defined]
                assert _asyncio_transport(stream) is transport
                delivered = protocol.data_received

                def data_received(data: bytes) -> None:
                    reads.append((len(data), transport.max_size))
                    delivered(data)

                protocol.data_received = data_received
                scope = anyio.CancelScope()
                driver._scopes[1] = scope  # type: ignore[index]
                async with stream:
                    await driver._read(1, stream, scope, ("127.0.0.1", port))  # type: ignore[arg-type]
                tg.cancel_scope.cancel()
        assert sum(received) == 100 + big and received[-1] == 0

    anyio.run(main, backend="asyncio")
    assert reads[0] == (100, READ_MIN)  # not 256 KiB for a small answer
    assert all(got <= asked <= READ_MAX for got, asked in reads), reads
    assert sum(got for got, _asked in reads) == 100 + big
