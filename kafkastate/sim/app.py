"""The group simulator's application model: what each consumer host's application does.

Each consumer host runs a :class:`~kafkastate.core.consumer.consumer.ConsumerMachine` (its
policy included: the auto-commit before a revocation and the rebalance sequence around the
listener are the machine's) and a small application: it polls, "processes" each batch for a
drawn time (handing it to the user's ``process`` first, when a test gives an application),
commits what it processed, and runs the listener calls the machine asks for (taking
``revoke_ms`` over a revocation), keeping the books the invariants read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from kafkastate.core.consumer.consumer import (
    AutoCommitted,
    ConsumerMachine,
    ListenerCallRequested,
)
from kafkastate.core.consumer.fetcher import GroupFailed, OffsetsCommitted
from kafkastate.errors import KafkaError
from kafkastate.sim.host import HostDriver, _Host
from kafkastate.sim.network import _token
from kafkastate.sim.scheduler import InvariantViolation
from kafkastate.structs import TopicPartition

if TYPE_CHECKING:
    from kafkastate.sim.world import SimConfig

__all__ = ["AUTO_COMMIT_MS", "GROUP", "TICK_MS", "TOPIC", "GroupApp"]

GROUP: Final = "sim-group"
TOPIC: Final = "events"
TICK_MS: Final = 100  # how often an idle application polls
AUTO_COMMIT_MS: Final = 2_000  # the application's commit period


@attrs.define
class _App:
    """The application around one machine: what it owns and is doing."""

    owned: set[tuple[str, int]] = attrs.Factory(set)
    busy_until: int = 0
    next_commit: int = 0
    last_poll: int = 0
    last_offset: dict[tuple[str, int], int] = attrs.Factory(dict)
    processed: dict[tuple[str, int], int] = attrs.Factory(dict)
    revoke_until: int | None = None
    calls: list[ListenerCallRequested] = attrs.Factory(list)  # the machine's, in order
    history: list[tuple[str, tuple[str, int]]] = attrs.Factory(list)  # callbacks per tp
    history_checked: int = 0  # how much of it G4 has read
    callback_state: dict[tuple[str, int], str] = attrs.Factory(dict)


class _AppListener:
    """What the machine is given as the listener: the simulator runs each call itself
    (bookkeeping, then the application's listener under test)."""

    def __init__(self, user: Any) -> None:
        if callable(getattr(user, "on_partitions_lost", None)):
            self.on_partitions_lost = self.on_partitions_revoked

    def on_partitions_revoked(self, revoked: Any) -> None:
        raise AssertionError("the simulator runs listener calls itself")

    def on_partitions_assigned(self, assigned: Any) -> None:
        raise AssertionError("the simulator runs listener calls itself")


class _GroupHost(_Host[ConsumerMachine]):
    """A consumer host: its machine and its application."""

    def __init__(self, name: str, machine: ConsumerMachine, incarnation: int) -> None:
        super().__init__(name, machine, incarnation)
        self.app = _App()
        self.listener: Any = None  # the application's, when a test gives one


class GroupApp(HostDriver[_GroupHost]):
    """The consumer applications of the group world."""

    config: SimConfig
    consumed: dict[tuple[str, int], set[int]]
    written: int
    _owned_serial = 0  # moves whenever an application's ``owned`` changes (the checks' cache)

    def _on_machine_event(self, host: _GroupHost, event: Any) -> bool:
        match event:
            case ListenerCallRequested():
                host.app.calls.append(event)
            case OffsetsCommitted(error=error) | AutoCommitted(error=error):
                self.stats["commit ok" if error is None else "commit failed"] += 1
            case GroupFailed(error=error):
                self._line(f"{host.name} group failed {error!r}")
            case _:
                pass
        return True

    def _after_drain(self, host: _GroupHost) -> None:
        self._group_step(host)

    def _group_step(self, host: _GroupHost) -> None:
        """Run the listener calls the machine asked for, in order (a revocation takes the
        application ``revoke_ms``), with the application's bookkeeping."""
        app, m = host.app, host.machine
        while app.calls:
            call = app.calls[0]
            if call.callback != "on_partitions_assigned":
                if self.config.revoke_ms and app.revoke_until is None:
                    app.revoke_until = self.now + self.config.revoke_ms
                    self._at(app.revoke_until, "revoked", (host.name, host.incarnation))
                if app.revoke_until is not None and self.now < app.revoke_until:
                    return  # the listener is still working
                app.revoke_until = None
                lost = call.callback == "on_partitions_lost"
                self._call_listener(host, call)
                for tp in call.partitions:
                    app.history.append(("lost" if lost else "revoked", tp))
                    app.owned.discard(tp)
                    app.last_offset.pop(tp, None)
                    app.processed.pop(tp, None)
                self._owned_serial += 1
                self._line(f"{host.name} revoked {list(call.partitions)} lost={lost}")
            else:
                self._call_listener(host, call)
                for tp in call.partitions:
                    app.history.append(("assigned", tp))
                    app.last_offset.pop(tp, None)
                app.owned = set(m.assignment())
                self._owned_serial += 1
                self._line(f"{host.name} assigned {list(m.assignment())} gen={m.member.generation}")
            app.calls.pop(0)
            m.listener_done(call.call_id, error=None, now=self._s())
            self._drain(host)  # what finishing the step set off (it may ask the next call)

    def _call_listener(self, host: _GroupHost, call: ListenerCallRequested) -> None:
        listener = host.listener
        if listener is None:
            return
        try:
            getattr(listener, call.method)({TopicPartition(*tp) for tp in call.partitions})
        except Exception as exc:
            raise InvariantViolation(
                "LISTENER", f"{host.name}: {call.callback} raised {exc!r}", at=self.now
            ) from exc

    def _user_process(self, host: _GroupHost, tp: tuple[str, int], records: list[Any]) -> None:
        """The application's own processing of a polled batch (its ``process``, if any)."""
        process = getattr(host.listener, "process", None)
        if process is None:
            return
        try:
            process(TopicPartition(*tp), list(records))
        except AssertionError as exc:
            raise InvariantViolation("USER", f"{host.name}: {exc}", at=self.now) from exc
        except Exception as exc:
            raise InvariantViolation(
                "APP", f"{host.name}: process({tp}) raised {exc!r}", at=self.now
            ) from exc

    def _on_revoked(self, name: str, incarnation: int) -> None:
        host = self._live(name, incarnation)
        if host is not None:
            self._pump(host)

    def _check_poll_interval(self, host: _GroupHost) -> None:
        """PI, before each poll (the invariants')."""
        raise NotImplementedError

    def _on_app(self, name: str, incarnation: int) -> None:
        """One turn of the application: poll, process, commit."""
        host = self._live(name, incarnation)
        if host is None or self._deferred(host, "app", (name, incarnation)):
            return
        app, m = host.app, host.machine
        if self.now < app.busy_until:
            self._at(app.busy_until, "app", (name, incarnation))
            return
        self._check_poll_interval(host)
        app.last_poll = self.now
        try:
            runs = m.poll(50, now=self._s())
        except KafkaError as exc:
            self._line(f"{name} poll error {exc!r}")
            runs = []
        took = 0
        for tp, records, _epoch in runs:
            for record in records:
                last = app.last_offset.get(tp)
                if last is not None and record.offset != last + 1:
                    raise InvariantViolation(
                        "C1", f"{name} skipped from {last} to {record.offset} on {tp}", at=self.now
                    )
                if record.value != f"{tp[1]}:{record.offset}".encode():
                    raise InvariantViolation(
                        "P4",
                        f"{name} read {record.value!r} at {tp}@{record.offset}",
                        at=self.now,
                    )
                app.last_offset[tp] = record.offset
                self.consumed[tp].add(record.offset)
                took += 1
            app.processed[tp] = records[-1].offset + 1
            self._user_process(host, tp, records)
        periodic = not self.config.commit_on_revoke  # else the auto-commit's timer does it
        if took or (periodic and app.processed and self.now >= app.next_commit):
            # after each batch, and every 2 s anyway
            m.commit(dict(app.processed), now=self._s())
            app.next_commit = self.now + AUTO_COMMIT_MS
        if took:
            self._line(f"{name} polled {took}")
            stall = self.entropy.below(10, "processing")
            app.busy_until = self.now + 10 * stall
            if (
                "pause" in self.config.faults
                and self._chaos
                and self.entropy.below(6, "slow app") == 1
            ):
                app.busy_until = (
                    self.now + self.config.max_poll_ms + self.config.heartbeat_ms + 5_000
                )
                self._line(f"{name} processes slowly until {app.busy_until}")
        self._pump(host)
        self._at(max(app.busy_until, self.now + TICK_MS), "app", (name, incarnation))

    def _on_write(self) -> None:
        """The producer side of the workload: records appended to every partition."""
        cfg = self.config
        for p in range(cfg.partitions):
            self.cluster.append(
                TOPIC,
                p,
                [f"{p}:{i}".encode() for i in range(self.written, self.written + cfg.records)],
            )
        self.written += cfg.records
        self._line("write")
        for token, request, body in self.cluster.due_fetches(self._s()):
            # (answered as every request is: the connection's next request is served
            # then -- sent straight down, a fetch answered early by new records stayed the
            # broker's outstanding request and everything behind it waited for ever)
            self._respond(self._conns[_token(token)[0]], request, body)
