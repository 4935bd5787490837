"""The simulator's invariants (../shared/DST.md A3.6), checked after every event unless
marked (E) end of run.

Group world (:class:`GroupInvariants`): G0 legal coordinator transitions (the coordinator
model asserts them), G1 generations move by +1, (L) G2 a Stable group's assignments cover
every partition once, G3 no partition owned by two live members,
G4 callback order (and eager members revoke before JoinGroup), G5 the coordinator accepts
only commits its rules allow, G6 an accepted commit comes from the partition's owner in that
generation, G7 a member is removed by session expiry no earlier than its session allows, C1
no skipped offsets while ownership is stable (the application model checks it as it reads),
P4 every record read at offset ``n`` of partition ``p`` is the value written there,
PI a member that has not polled for ``max_poll_interval`` owns nothing, (E) C2 every record
consumed, (E) L1 the group settles with every partition owned once; USER, the application's
own check.

Transactional world (:class:`TxnInvariants`): T1 the reader never gets a record of an
aborted or still open transaction, nor one at or above the LSO; T2 (E) every transaction the
client saw commit is visible whole, none it saw abort is visible at all; T3 the epoch per
transactional id never decreases, and once an incarnation's InitProducerId took the
transactional id over, no request of an older one takes effect; T4 every transition of each
TransactionManager is in its table; T5 (the cluster's) no coordinator transaction, marker or
transactional offset mixes requests of two client transactions; P2 no value twice in an
input partition; P1 every value the feeder saw acknowledged is in the log at its offset
(online, and again at the end); P3 the feeder's values reach each input partition in the
order it sent them; P4 acknowledgements and fetches (the pipelines' of the input, the
reader's of the output) show one value per offset; C3 (E) the reader's view of each
output partition is the transform of each input record exactly once, in order; L1 (E)
after the faults heal, no transaction is left open and every input is processed.

D1 (determinism) and NET (the harness's own network keeps each pipe in order) are the
scheduler's and the network's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs

from kafkastate.core.consumer.assignors import RebalanceProtocol, decode_assignment
from kafkastate.core.consumer.group import GroupMember, MemberState
from kafkastate.core.producer.accumulator import RecordsAcknowledged
from kafkastate.core.producer.transactions import TRANSITIONS
from kafkastate.sim.app import GROUP, TOPIC, GroupApp, _GroupHost
from kafkastate.sim.coordinator import GroupState
from kafkastate.sim.entropy import Entropy
from kafkastate.sim.eos import GROUP as EOS_GROUP
from kafkastate.sim.eos import INPUT, OUTPUT, EosApp
from kafkastate.sim.scheduler import InvariantViolation
from kafkastate.sim.txncluster import COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY, TxnCluster
from kafkastate.structs import TopicPartition

if TYPE_CHECKING:
    from kafkastate.sim.txnworld import TxnConfig

__all__ = ["GroupInvariants", "TxnInvariants"]

# a classic member in these states has applied its generation's assignment
_HAS_ASSIGNMENT = (MemberState.ASSIGNING, MemberState.STABLE)  # a tuple: no Enum.__hash__
# (On Python 3.11 ``EnumClass.MEMBER`` goes through EnumType.__getattr__'s slow lookup,
# several times a global's: the hot paths below compare with these module constants.)
_STABLE = GroupState.STABLE


@attrs.frozen
class _OwnershipView:
    """The applications' ownership as of one key (see ``_ownership_view``)."""

    key: int
    text: str  # the trace line's part
    overlap: bool  # two alive hosts own a partition in common


class GroupInvariants(GroupApp):
    """The group world's invariants (after every event; a check that only new state can
    fail reads only that: the callbacks, commits and generations since the last event, the
    ownership once an application's changed)."""

    _ownership_cache: _OwnershipView | None = None
    _stable_seen: tuple[Any, ...] | None = None  # (generation, *members) of the last Stable

    _user_check: Callable[[Any], None] | None
    _generation: int
    _generations_seen: int
    # member (instance id or member id) -> generation -> its assignment then
    _assigned: dict[str, dict[int, set[tuple[str, int]]]]
    # member (instance id or member id) -> the generations whose assignment it received
    _received: dict[str, set[int]]

    def _coordinator_timer(self) -> None:
        """G7: the coordinator's deadlines remove no member before its session ends."""
        group = self.cluster.coordinator.groups.get(GROUP)
        deadlines = (
            {}
            if group is None
            else {m: member.heartbeat_deadline for m, member in group.members.items()}
        )
        phase_over = group is not None and any(
            t is not None and t <= self._s() for t in (group.join_deadline, group.sync_deadline)
        )  # members that missed a join or sync deadline go too, whatever their session says
        super()._coordinator_timer()
        after = self._members_at_generation()
        for member_id, deadline in deadlines.items():
            if member_id not in after:
                self.stats["session expired"] += 1
                if self._s() < deadline and not phase_over:  # G7: not before its session ends
                    raise InvariantViolation(
                        "G7", f"{member_id} expired {deadline - self._s():.3f} s early", at=self.now
                    )

    def _members_at_generation(self) -> dict[str, int]:
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is None:
            return {}
        return {m: group.generation for m in group.members}

    def live_owners(self) -> dict[str, set[tuple[str, int]]]:
        """Hosts the coordinator has at its current generation, with what their
        application owns."""
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is None:
            return {}
        out = {}
        for name, host in self.hosts.items():
            member = host.machine.member
            if (
                host.alive
                and isinstance(member, GroupMember)
                and member.member_id in group.members
                and member.generation == group.generation
            ):
                out[name] = host.app.owned
        return out

    def _check_safety(self, kind: str) -> None:
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is not None and self._generations_seen != len(group.generations):
            # every generation begun is the one before + 1 (several may begin in one event:
            # a join completing, then the group emptying); a failover loads the last
            # generation written, never one ahead of the group's
            for i in range(self._generations_seen, len(group.generations)):
                generation = group.generations[i]
                if i in group.loaded:
                    if generation > self._generation:
                        raise InvariantViolation(
                            "G1",
                            f"generation {generation} loaded after {self._generation}",
                            at=self.now,
                        )
                    self._generation = generation
                    continue
                if generation != self._generation + 1:
                    raise InvariantViolation(
                        "G1", f"generation {self._generation} -> {generation}", at=self.now
                    )
                self._generation = generation
            self._generations_seen = len(group.generations)
        ownership = self._ownership_view()
        if ownership.overlap:  # only then can two *live* owners share a partition (G3)
            self._check_double_ownership()
        for host in self.hosts.values():
            app = host.app
            member = host.classic
            if member is None or not host.alive:
                if app.history_checked != len(app.history):
                    self._check_callback_order(host)
                continue
            if member.generation >= 0 and host.noted != (member.member_id, member.generation):
                self._note_received(host, member)  # (its cheapest test first, inlined)
            if (  # cheapest tests first: this runs for every host after every event
                app.owned
                and "join" in member.requests_in_flight
                and member.config.rebalance_protocol is RebalanceProtocol.EAGER
            ):
                raise InvariantViolation(
                    "G4",
                    f"{host.name} sent JoinGroup owning {sorted(app.owned)} (eager)",
                    at=self.now,
                )
            if app.history_checked != len(app.history):
                self._check_callback_order(host)
        self._check_commits()
        self.trace.append(f"{self.now} {kind} gen={self._generation} {ownership.text}")
        if self._user_check is not None:
            try:
                self._user_check(self)
            except AssertionError as exc:
                raise InvariantViolation("USER", str(exc), at=self.now) from exc

    def _assignment_applied(self, host: _GroupHost) -> None:
        # As it happens, not only as the state after the event shows it: a member can apply
        # an assignment and leave STABLE to rejoin within one event (a cooperative member
        # that revoked something; seed 27 at 56fa3db, a rejoin asked for before the
        # assignment came), and the generation it received went unnoted -- its later
        # commit of what that generation gave it (revoking it in the next) failed G6.
        if host.classic is not None:
            self._note_received(host, host.classic)

    def _note_received(self, host: _GroupHost, member: GroupMember) -> None:
        """G6's bookkeeping: the generations whose assignment each member id received (its
        SyncGroup answered, the assignment applied). Only those count as what it owns: the
        coordinator stores an assignment the member may never get, or not get yet. (A host
        notes each (member id, generation) once; noted as the application is given the
        assignment, and from the member's state after every event.)"""
        generation = member.generation
        if generation >= 0 and member.state in _HAS_ASSIGNMENT:
            noted = (member.member_id, generation)
            if host.noted != noted:
                host.noted = noted
                self._received.setdefault(member.member_id, set()).add(generation)

    def _ownership_view(self) -> _OwnershipView:
        """What the applications own, as the trace line shows it and whether two alive
        hosts' sets overlap; recomputed only when an application's ownership or a host
        changed (the key), not after every event."""
        key = self._owned_serial  # moves when an application's ownership or a host changes
        view = self._ownership_cache
        if view is None or view.key != key:
            seen: set[tuple[str, int]] = set()
            overlap = False
            for h in self.hosts.values():
                if h.alive:
                    overlap = overlap or not seen.isdisjoint(h.app.owned)
                    seen |= h.app.owned
            view = self._ownership_cache = _OwnershipView(key, self._ownership(), overlap)
        return view

    def _check_double_ownership(self) -> None:
        """G3: no partition owned by two hosts the coordinator has at its generation."""
        seen: dict[tuple[str, int], str] = {}
        for name, owned in sorted(self.live_owners().items()):
            for tp in sorted(owned):
                if tp in seen:
                    raise InvariantViolation(
                        "G3", f"{tp} owned by {seen[tp]} and {name} in one generation", at=self.now
                    )
                seen[tp] = name

    def _check_callback_order(self, host: _GroupHost) -> None:
        """G4 per partition: assigned, then revoked or lost, then assigned... (only the
        callbacks since the last check are read)."""
        app = host.app
        for what, tp in app.history[app.history_checked :]:
            before = app.callback_state.get(tp, "revoked")
            if (what == "assigned") == (before == "assigned"):
                raise InvariantViolation(
                    "G4", f"{host.name}: {what} {tp} after {before}", at=self.now
                )
            app.callback_state[tp] = "assigned" if what == "assigned" else "revoked"
        app.history_checked = len(app.history)

    def _check_commits(self) -> None:
        """G5/G6: every commit the coordinator accepted since the last check came from a
        member of the current generation, for a partition the member had *received*: its
        assignment of this generation once the SyncGroup answer reached it, or of the last
        earlier generation whose assignment it received (cooperative members commit what
        they revoke after the new generation started; a member whose SyncGroup was refused
        -- REBALANCE_IN_PROGRESS -- or lost kept the assignment before, not the one the
        coordinator stored for it). A member cannot own what it has not been told."""
        coordinator = self.cluster.coordinator
        group = coordinator.groups.get(GROUP)
        if group is None:
            return
        stable = (group.generation, *group.members) if group.state is _STABLE else None
        if stable is not None and stable != self._stable_seen:
            self._stable_seen = stable  # the members' assignments of this Stable group
            for member_id, member in group.members.items():
                if not member.assignment:
                    continue
                # by instance id when static: a restarted static member has a new member id
                history = self._assigned.setdefault(member.instance_id or member_id, {})
                if group.generation not in history:
                    history[group.generation] = set(decode_assignment(member.assignment).partitions)
        while coordinator.accepted:
            member_id, generation, tp, current = coordinator.accepted.pop(0)
            if generation < 0:
                continue  # a manual commit to an empty group
            if generation != current:
                raise InvariantViolation(
                    "G5",
                    f"a commit of generation {generation} accepted in generation {current}",
                    at=self.now,
                )
            committer = group.members.get(member_id)
            history = self._assigned.get(
                member_id if committer is None else committer.instance_id or member_id, {}
            )
            if generation not in history:
                continue  # not seen stable yet
            received = self._received.get(member_id, set())
            earlier = [g for g in history if g < generation and g in received]
            allowed = history[max(earlier)] if earlier else set()
            if generation in received:
                allowed = allowed | history[generation]
            if tp not in allowed:
                unreceived = tp in history[generation]
                raise InvariantViolation(
                    "G6",
                    f"{member_id} committed {tp} of generation {generation} before it received "
                    "that assignment"
                    if unreceived
                    else f"{member_id} committed {tp} it does not own",
                    at=self.now,
                )

    def _check_poll_interval(self, host: _GroupHost) -> None:
        """PI: an application that has not polled for max_poll_interval owns nothing (time
        the whole process stood still does not count: its member could not act either)."""
        since = host.app.last_poll
        stalled = sum(max(0, min(end, self.now) - max(start, since)) for start, end in host.pauses)
        idle = self.now - since - stalled  # a stalled process cannot notice anything
        limit = self.config.max_poll_ms + self.config.heartbeat_ms + 2_000
        if idle > limit and host.app.owned and not host.machine.rebalancing:
            raise InvariantViolation(
                "PI",
                f"{host.name} did not poll for {idle} ms and still owns {sorted(host.app.owned)}",
                at=self.now,
            )

    def _ownership(self) -> str:
        return " ".join(
            f"{n}:{sorted(p for _t, p in h.app.owned)}"
            for n, h in sorted(self.hosts.items())
            if h.alive
        )

    def _settled(self) -> bool:
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is None or group.state is not GroupState.STABLE:
            return False
        owners = self.live_owners()
        alive = [h for h in self.hosts.values() if h.alive]
        every = sorted(tp for owned in owners.values() for tp in owned)
        wanted = [(TOPIC, p) for p in range(self.config.partitions)]
        return len(owners) == len(alive) == len(group.members) and every == wanted

    def _all_consumed(self) -> bool:
        return all(
            len(self.consumed[(TOPIC, p)]) >= self.written for p in range(self.config.partitions)
        )

    def _check_stable_coverage(self) -> None:
        """G2 (L): a Stable group's assignments, as the coordinator keeps them, give every
        subscribed partition to exactly one member."""
        group = self.cluster.coordinator.groups.get(GROUP)
        if group is None or group.state is not GroupState.STABLE:
            return
        owner: dict[tuple[str, int], str] = {}
        for member_id, member in sorted(group.members.items()):
            for tp in decode_assignment(member.assignment).partitions:
                if tp in owner:
                    raise InvariantViolation(
                        "G2", f"{tp} assigned to {owner[tp]} and {member_id}", at=self.now
                    )
                owner[tp] = member_id
        missing = [p for p in range(self.config.partitions) if (TOPIC, p) not in owner]
        if missing:
            raise InvariantViolation(
                "G2",
                f"Stable at generation {group.generation}, partitions {missing} of {TOPIC} "
                "assigned to no member",
                at=self.now,
            )

    def _check_liveness(self) -> None:
        self._check_stable_coverage()
        if not self._settled():
            raise InvariantViolation(
                "L1", f"the group did not settle: {self._ownership()}", at=self.now
            )
        missing = {
            p: self.written - len(self.consumed[(TOPIC, p)])
            for p in range(self.config.partitions)
            if len(self.consumed[(TOPIC, p)]) < self.written
        }
        if missing:
            raise InvariantViolation("C2", f"records never consumed: {missing}", at=self.now)


class TxnInvariants(EosApp):
    """The transactional world's invariants."""

    def __init__(self, entropy: Entropy, config: TxnConfig, cluster: TxnCluster) -> None:
        super().__init__(entropy, config, cluster)
        self._appended_seen = 0
        self._accepted_seen = 0
        self._holders: dict[str, tuple[str, int]] = {}  # transactional id -> (pipe, k)
        self._input_values: dict[int, set[bytes]] = defaultdict(set)
        # P4: (topic, partition) -> offset -> the value an ack or a fetch showed there
        self._observed: dict[tuple[str, int], dict[int, bytes]] = defaultdict(dict)
        self._acked: list[tuple[tuple[str, int], int, bytes]] = []  # P1: what the feeder saw acked
        self._last_fed: dict[int, int] = {}  # P3: input partition -> last send index in the log

    def _check_safety(self, kind: str) -> None:
        cluster = self.cluster
        # A fenced incarnation's request that took effect (T3) is checked before what the
        # coordinator model saw go wrong in the same step: mixing two client transactions
        # (T5) is then its consequence, not the cause.
        for what, tid, tag in cluster.accepted[self._accepted_seen :]:
            if not isinstance(tag, tuple):
                continue
            holder = self._holders.get(tid)
            if what == "init":
                self._holders[tid] = tag[:2]  # every other incarnation is fenced now
            elif holder is not None and tag[:2] != holder:
                raise InvariantViolation(
                    "T3",
                    f"{tid!r}: {what} of {tag} accepted after incarnation {holder[1]} took the "
                    "transactional id over (a fenced producer's request took effect)",
                    at=self.now,
                )
        self._accepted_seen = len(cluster.accepted)
        if cluster.violations:
            invariant, message = cluster.violations[0]
            raise InvariantViolation(invariant, message, at=self.now)
        for tp, batch in cluster.appended[self._appended_seen :]:
            if tp[0] == INPUT:
                seen = self._input_values[tp[1]]
                for value in batch.values:
                    if value in seen:
                        raise InvariantViolation(
                            "P2", f"{value!r} written twice to {tp}", at=self.now
                        )
                    seen.add(value)
                    self._check_send_order(tp[1], value)
        self._appended_seen = len(cluster.appended)
        for proc in self.procs.values():
            if proc.phase == "dead":
                continue
            txn = self._producer(proc.name).transactions
            assert txn is not None
            for before, after in txn.transitions[proc.checked :]:
                if before not in TRANSITIONS[after]:
                    raise InvariantViolation(
                        "T4", f"{proc.name}: {before.name} -> {after.name}", at=self.now
                    )
            proc.checked = len(txn.transitions)
        self.trace.append(f"{self.now} {kind} {self._state_line()}")

    def _check_send_order(self, partition: int, value: bytes) -> None:
        """P3: the feeder's values (``p:n``, ``n`` its send order on partition ``p``)
        reach the log in the order it sent them."""
        n = int(value.rsplit(b":", 1)[1])
        last = self._last_fed.get(partition, -1)
        if n <= last:
            raise InvariantViolation(
                "P3",
                f"{INPUT}-{partition}: the feeder sent {n} after {last}, the log has it after",
                at=self.now,
            )
        self._last_fed[partition] = n

    def _observe(self, topic: str, partition: int, offset: int, value: bytes) -> None:
        """P4: every acknowledgement and every fetch shows one value per offset."""
        seen = self._observed[(topic, partition)]
        before = seen.setdefault(offset, value)
        if before != value:
            raise InvariantViolation(
                "P4",
                f"{topic}-{partition}@{offset} was {before!r}, now {value!r}",
                at=self.now,
            )

    def _fed_acknowledged(self, event: RecordsAcknowledged) -> None:
        """P1 as the acknowledgement arrives (the model never truncates a log, so it must
        hold from then on; the end of the run checks again), then P4."""
        for rid, offset, _ts in event.results():
            partition, value = self._fed_ids[rid]
            tp = (INPUT, partition)
            self._acked.append((tp, offset, value))
            self._check_acked(tp, offset, value)
            self._observe(INPUT, partition, offset, value)

    def _check_acked(self, tp: tuple[str, int], offset: int, value: bytes) -> None:
        batch = self.cluster.batch_at(tp, offset)
        there = None if batch is None else batch.values[offset - batch.base]
        if there != value:
            raise InvariantViolation(
                "P1",
                f"{value!r} acknowledged at {tp[0]}-{tp[1]}@{offset}, the log has {there!r}",
                at=self.now,
            )

    def _state_line(self) -> str:
        procs = " ".join(
            f"{p.name}:{p.phase}/{p.txn}" for p in self.procs.values() if p.phase != "dead"
        )
        lso = ",".join(
            f"{self.cluster.parts[(OUTPUT, p)].lso()}/{self.cluster.parts[(OUTPUT, p)].end}"
            for p in range(self.config.partitions)
        )
        return f"{procs} out={lso}"

    def _check_read(self, partition: int, offset: int, value: bytes) -> None:
        """T1: what the reader got is committed and below the LSO."""
        tp = (OUTPUT, partition)
        batch = self.cluster.batch_at(tp, offset)
        if batch is None or batch.status not in ("committed", "plain"):
            status = None if batch is None else batch.status
            raise InvariantViolation(
                "T1",
                f"the read_committed reader got {value!r} at {OUTPUT}-{partition}@{offset} "
                f"of a transaction that is {status}",
                at=self.now,
            )
        if offset >= self.cluster.parts[tp].lso():
            raise InvariantViolation(
                "T1", f"the reader got offset {offset} at or above the LSO of {tp}", at=self.now
            )
        self.read[partition].append(value)

    def _check_offsets(self) -> None:
        """T2 for offsets: the group's committed offset of each input partition is one a
        transaction committed (or whose outcome its client never learned), no lower than
        any the client saw commit, and -- everything processed -- the input's end."""
        group = self.cluster.coordinator.groups.get(EOS_GROUP)
        offsets = {} if group is None else group.offsets
        for p in range(self.config.partitions):
            tp = TopicPartition(INPUT, p)
            actual = offsets.get((INPUT, p), -1)
            known = [
                o[tp]
                for tag, o in self.txn_offsets.items()
                if tp in o and self.outcomes[tag][0] == "committed"
            ]
            possible = {
                o[tp]
                for tag, o in self.txn_offsets.items()
                if tp in o and self.outcomes[tag][0] != "aborted"
            }
            end = self.cluster.parts[(INPUT, p)].end
            if (possible and actual not in possible) or (known and actual < max(known)):
                raise InvariantViolation(
                    "T2",
                    f"committed offset {actual} of {INPUT}-{p} is not one a committed "
                    f"transaction sent (committed: {sorted(set(known))[-3:]})",
                    at=self.now,
                )
            if actual != end and end:
                raise InvariantViolation(
                    "C3", f"{INPUT}-{p}: committed offset {actual}, input end {end}", at=self.now
                )

    def _expected(self, partition: int) -> list[bytes]:
        return [self.transform(v) for v in self.cluster.committed_values((INPUT, partition))]

    def _caught_up(self) -> bool:
        settled = all(
            m.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT) for m in self.cluster.txns.values()
        )
        return (
            settled
            and not self._feed_queue
            and all(
                [v.rsplit(b"|", 1)[0] for v in self.read[p]] == self._expected(p)
                and self.cluster.parts[(OUTPUT, p)].lso() == self.cluster.parts[(OUTPUT, p)].end
                for p in range(self.config.partitions)
            )
        )

    def _check_end(self) -> None:
        cluster = self.cluster
        for tp, offset, value in self._acked:
            self._check_acked(tp, offset, value)  # P1 in the final log
        for tp, part in sorted(cluster.parts.items()):
            if part.open:
                raise InvariantViolation(
                    "L1",
                    f"transactions of producers {sorted(part.open)} left open on {tp}: the LSO "
                    f"is stuck at {part.lso()} (end {part.end})",
                    at=self.now,
                )
        for tid, meta in sorted(cluster.txns.items()):
            if meta.state not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
                raise InvariantViolation(
                    "L1", f"transaction of {tid!r} still {meta.state} after healing", at=self.now
                )
        visible = {
            p: set(cluster.committed_values((OUTPUT, p))) for p in range(self.config.partitions)
        }
        for tag, (outcome, values) in sorted(self.outcomes.items()):
            shown = [v for p, v in values if v in visible[p]]
            if outcome == "committed" and len(shown) != len(values):
                raise InvariantViolation(
                    "T2",
                    f"transaction {tag} committed, but {len(values) - len(shown)} of its "
                    f"{len(values)} records are not visible",
                    at=self.now,
                )
            if outcome == "aborted" and shown:
                raise InvariantViolation(
                    "T2", f"transaction {tag} aborted, but {shown[:3]} are visible", at=self.now
                )
        if self._feed_queue:
            raise InvariantViolation("L1", "the feeder could not write its records", at=self.now)
        self._check_offsets()
        for p in range(self.config.partitions):
            got = [v.rsplit(b"|", 1)[0] for v in self.read[p]]
            want = self._expected(p)
            if got != want:
                missing = [v for v in want if v not in got]
                doubled = sorted({v for v in got if got.count(v) > 1})
                raise InvariantViolation(
                    "C3",
                    f"{OUTPUT}-{p}: read_committed view has {len(got)} records for {len(want)} "
                    f"inputs; missing {missing[:5]}, duplicated {doubled[:5]}"
                    + ("" if missing or doubled else " (order differs)"),
                    at=self.now,
                )
