"""Planted bugs: deliberately broken variants the harness must catch (its self-test).

Each is built from public surface only: the simulator's own coordinator gets a lenient
commit check; an assignor implements the assignor interface badly; and the others wrap the
machine the simulator drives -- a wrapper forwards the machine's surface and alters what
passes through it, the way a buggy client would behave on the wire or towards its
application. No planted bug subclasses a core class to override a private method.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader

from kafkastate.core.consumer.assignors import Assignment, CooperativeStickyAssignor
from kafkastate.core.consumer.consumer import ListenerCallRequested
from kafkastate.core.metadata import NodeId
from kafkastate.core.protocol.framing import FrameDecoder
from kafkastate.core.protocol.versions import ApiKey
from kafkastate.sim.cluster import Request, response_frame
from kafkastate.sim.coordinator import ClassicCoordinator

__all__ = [
    "GreedyCooperative",
    "IgnoresAbortedTransactions",
    "IgnoresPollInterval",
    "SkipsRevocation",
    "lenient_commits",
]


def lenient_commits(coordinator: ClassicCoordinator) -> None:
    """``coordinator_ignores_generation``: the coordinator accepts commits of other
    generations and unknown members (fencing off)."""
    real = coordinator.commit_error

    def lenient(group_id: str, generation: int, member_id: str, inst: str | None) -> int:
        code = real(group_id, generation, member_id, inst)
        return 0 if code in (22, 25) else code  # fencing of generation and member off

    coordinator.commit_error = lenient  # type: ignore[method-assign,assignment]


class GreedyCooperative(CooperativeStickyAssignor):
    """``cooperative_moves_owned``: a "cooperative" assignor that hands out partitions
    still owned elsewhere (a plain round robin that ignores ownership)."""

    def assign(self, partitions_per_topic: Any, subscriptions: Any) -> dict[str, Assignment]:
        members = sorted(subscriptions)
        everything = [
            (t, p) for t in sorted(partitions_per_topic) for p in range(partitions_per_topic[t])
        ]
        shift = sum(len(s.owned_partitions) for s in subscriptions.values())
        out: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
        for i, tp in enumerate(everything):
            out[members[(i + shift) % len(members)]].append(tp)
        return {m: Assignment(partitions=tuple(sorted(tps))) for m, tps in out.items()}


class _Wrapper:
    """Stands in for the machine it wraps: everything not overridden is the machine's."""

    def __init__(self, machine: Any) -> None:
        self.wrapped = machine

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


class SkipsRevocation(_Wrapper):
    """``assign_before_revoke``: a consumer whose revocations never reach the application
    (it answers them itself), so an eager member joins again while its application still
    works on the partitions it owned."""

    def __init__(self, machine: Any, clock: Callable[[], float]) -> None:
        super().__init__(machine)
        self._clock = clock

    def next_event(self) -> Any:
        while (event := self.wrapped.next_event()) is not None:
            if isinstance(event, ListenerCallRequested) and event.callback == (
                "on_partitions_revoked"
            ):
                self.wrapped.listener_done(event.call_id, error=None, now=self._clock())
                continue
            return event
        return None


class IgnoresPollInterval(_Wrapper):
    """``ignores_max_poll_interval``: a consumer that tells its group member the
    application polled whenever anything happens, so ``max_poll_interval`` never runs out."""

    def _noted(self, now: float) -> None:
        self.wrapped.fetcher.polled(now=now)

    def handle_timer(self, *, now: float) -> None:
        self._noted(now)
        self.wrapped.handle_timer(now=now)

    def receive_data(self, node: NodeId, data: bytes, *, now: float) -> None:
        self._noted(now)
        self.wrapped.receive_data(node, data, now=now)

    def connection_made(self, node: NodeId, *, now: float) -> None:
        self._noted(now)
        self.wrapped.connection_made(node, now=now)

    def connection_failed(self, node: NodeId, *, now: float) -> None:
        self._noted(now)
        self.wrapped.connection_failed(node, now=now)

    def connection_lost(self, node: NodeId, *, now: float) -> None:
        self._noted(now)
        self.wrapped.connection_lost(node, now=now)


class IgnoresAbortedTransactions(_Wrapper):
    """``consumer_ignores_aborted``: a read_committed consumer that ignores the
    AbortedTransactions list: the list is taken out of each Fetch response before the
    machine reads it."""

    def __init__(self, machine: Any) -> None:
        super().__init__(machine)
        self._sent: dict[NodeId, FrameDecoder] = {}
        self._received: dict[NodeId, FrameDecoder] = {}
        self._fetches: dict[tuple[NodeId, int], int] = {}  # -> the Fetch request's version

    def _reset(self, node: NodeId) -> None:
        self._sent.pop(node, None)
        self._received.pop(node, None)

    def connection_made(self, node: NodeId, *, now: float) -> None:
        self._reset(node)
        self.wrapped.connection_made(node, now=now)

    def connection_lost(self, node: NodeId, *, now: float) -> None:
        self._reset(node)
        self.wrapped.connection_lost(node, now=now)

    def data_to_send(self) -> list[tuple[NodeId, bytes]]:
        out = list(self.wrapped.data_to_send())
        for node, data in out:
            decoder = self._sent.setdefault(node, FrameDecoder())
            decoder.feed(data)
            while (frame := decoder.next_frame()) is not None:
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
                if api_key == ApiKey.FETCH:
                    self._fetches[(node, correlation_id)] = version
        return out

    def receive_data(self, node: NodeId, data: bytes, *, now: float) -> None:
        decoder = self._received.setdefault(node, FrameDecoder())
        decoder.feed(data)
        out = bytearray()
        while (frame := decoder.next_frame()) is not None:
            payload = bytes(frame)
            (correlation_id,) = struct.unpack_from(">i", payload, 0)
            version = self._fetches.pop((node, correlation_id), None)
            if version is None:
                out += struct.pack(">i", len(payload)) + payload
            else:
                out += _without_aborted(version, correlation_id, payload)
        if out:
            self.wrapped.receive_data(node, bytes(out), now=now)


def _without_aborted(version: int, correlation_id: int, payload: bytes) -> bytes:
    """A Fetch response frame with every partition's AbortedTransactions list empty."""
    schema = load_response_schema(ApiKey.FETCH, version)
    body: Any
    body, _size = entity_reader(schema)(payload, 5 if schema.__flexible__ else 4)
    responses = tuple(
        dataclasses.replace(
            topic,
            partitions=tuple(
                dataclasses.replace(p, aborted_transactions=()) if p.aborted_transactions else p
                for p in topic.partitions
            ),
        )
        for topic in body.responses
    )
    return response_frame(
        Request(ApiKey.FETCH, version, correlation_id, None),
        dataclasses.replace(body, responses=responses),
    )
