"""The group simulator's application model: what each consumer host's application does.

Each consumer host runs a :class:`~kafkastate.core.consumer.consumer.ConsumerMachine` (its
policy included: the auto-commit before a revocation and the rebalance sequence around the
listener are the machine's) and a small application: it polls, "processes" each batch for a
drawn time (handing it to the user's ``process`` first, when a test gives an application),
commits what it processed, and runs the listener calls the machine asks for (taking
``revoke_ms`` over a revocation), keeping the books the invariants read.

The application is event-driven, like a ``poll(timeout)`` loop: once it has processed a
batch it polls again at once, and with nothing to hand out it sleeps in ``poll`` until its
consumer machine has records (:class:`~kafkastate.core.consumer.fetcher.RecordsFetched`)
or fails (:class:`~kafkastate.core.consumer.fetcher.GroupFailed`), its poll timeout
(:data:`POLL_TIMEOUT_MS`) passes, or its own periodic commit is due. Every poll -- the
timed-out ones too -- restarts the member's ``max.poll.interval`` clock, as a consumer
blocked in ``poll`` does; an application that processes (or stalls) for longer stops
polling, which is what PI and the ``pause`` fault exercise. Listener calls run as the
machine asks for them (:meth:`GroupApp._group_step`), whatever the application is doing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import attrs

from kafkastate.core.consumer.consumer import (
    AutoCommitted,
    ConsumerMachine,
    ListenerCallRequested,
)
from kafkastate.core.consumer.fetcher import GroupFailed, OffsetsCommitted, RecordsFetched
from kafkastate.core.consumer.group import GroupMember
from kafkastate.errors import KafkaError
from kafkastate.sim.host import HostDriver, _Host
from kafkastate.sim.network import _token
from kafkastate.sim.scheduler import InvariantViolation
from kafkastate.structs import TopicPartition

if TYPE_CHECKING:
    from kafkastate.sim.world import SimConfig

__all__ = ["AUTO_COMMIT_MS", "GROUP", "POLL_TIMEOUT_MS", "TOPIC", "GroupApp"]

GROUP: Final = "sim-group"
TOPIC: Final = "events"
POLL_TIMEOUT_MS: Final = 1_000
"""The application's ``poll`` timeout: how long it sleeps in poll with nothing handed out
(less than any drawn ``max.poll.interval``: an idle application keeps its membership)."""
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
    turn: int | None = None  # the scheduled event of its next turn (None: none pending)
    turn_at: int = 0  # and when it is due


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
        member = machine.member  # fixed for the machine's life
        self.classic: GroupMember | None = member if isinstance(member, GroupMember) else None
        """The classic group member, read by the checks after every event (None for a
        KIP-848 member)."""
        self.noted: tuple[str, int] | None = None  # G6's last noted (member, generation)


class GroupApp(HostDriver[_GroupHost]):
    """The consumer applications of the group world."""

    config: SimConfig
    consumed: dict[tuple[str, int], set[int]]
    written: int
    _owned_serial = 0  # moves whenever an application's ``owned`` or a host's life changes

    def _on_machine_event(self, host: _GroupHost, event: Any) -> bool:
        match event:
            case ListenerCallRequested():
                host.app.calls.append(event)
            case OffsetsCommitted(error=error) | AutoCommitted(error=error):
                self.stats["commit ok" if error is None else "commit failed"] += 1
            case RecordsFetched():
                self._wake(host)  # poll has something to hand out
            case GroupFailed(error=error):
                self._line(f"{host.name} group failed {error!r}")
                self._wake(host)  # poll raises it
            case _:
                pass
        return True

    def _turn_at(self, host: _GroupHost, t: int) -> None:
        """Have the application's next turn at ``t``, unless one is due before: one turn
        is pending at a time, and a later one is taken off the schedule."""
        app = host.app
        if app.turn is not None:
            if app.turn_at <= t:
                return
            self._cancel(app.turn)
        app.turn_at = t
        app.turn = self._at(t, "app", (host.name, host.incarnation))

    def _crash_host(self, host: _GroupHost) -> None:
        super()._crash_host(host)
        self._owned_serial += 1
        if host.app.turn is not None:
            self._cancel(host.app.turn)  # the process is gone, its turns with it
            host.app.turn = None

    def _wake(self, host: _GroupHost) -> None:
        """The machine has news for an application sleeping in ``poll``: it returns now
        (one still processing polls when it is done)."""
        if host.app.busy_until <= self.now:
            self._turn_at(host, self.now)

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
                self._assignment_applied(host)
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

    def _assignment_applied(self, host: _GroupHost) -> None:
        """The machine asked for ``on_partitions_assigned``: its member holds the new
        generation's assignment now (G6's bookkeeping, the invariants')."""

    def _on_app(self, name: str, incarnation: int) -> None:
        """One turn of the application: poll, process, commit; then its next turn."""
        host = self._live(name, incarnation)
        if host is None:
            return
        app, m = host.app, host.machine
        app.turn = None
        if host.paused_until > self.now:  # a stalled process does nothing until it ends
            self._turn_at(host, host.paused_until)
            return
        if self.now < app.busy_until:
            self._turn_at(host, app.busy_until)
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
        if app.busy_until > self.now:
            self._turn_at(host, app.busy_until)  # it polls again once the batch is done
        elif took and m.fetcher.has_records():
            self._turn_at(host, self.now)  # more fetched than one poll hands out
        else:  # asleep in poll: until its timeout, its commit, or _wake
            due = self.now + POLL_TIMEOUT_MS
            if periodic and app.processed:
                due = min(due, app.next_commit)
            self._turn_at(host, due)

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
