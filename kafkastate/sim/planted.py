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

import attrs
from kio.index import load_response_schema
from kio.serial import entity_reader

from kafkastate.core.consumer.assignors import (
    Assignment,
    CooperativeStickyAssignor,
    RangeAssignor,
    decode_assignment,
)
from kafkastate.core.consumer.consumer import ListenerCallRequested
from kafkastate.core.metadata import NodeId
from kafkastate.core.producer.accumulator import RecordId, RecordsAcknowledged, RecordsFailed
from kafkastate.core.protocol.framing import FrameDecoder, encode_request
from kafkastate.core.protocol.requests import build, nested_type
from kafkastate.core.protocol.versions import ApiKey, request_type
from kafkastate.sim.cluster import Request, parse_request, response_frame
from kafkastate.sim.coordinator import ClassicCoordinator, GroupState
from kafkastate.sim.txncluster import TxnCluster, _restamp, _split_batches
from kafkastate.structs import TopicPartition

__all__ = [
    "CommitsOthers",
    "CommitsPlan",
    "SkipsRecords",
    "aborts_on_commit",
    "hasty_sessions",
    "hides_the_tail",
    "skips_generations",
    "stalls_rebalances",
    "syncs_while_preparing",
    "unfenced_transactions",
    "DropsLastPartition",
    "GreedyCooperative",
    "IgnoresAbortedTransactions",
    "IgnoresPollInterval",
    "ReordersSends",
    "RepeatsRecords",
    "SkipsRevocation",
    "lenient_commits",
    "loses_acked_writes",
    "misnumbers_fetches",
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


class DropsLastPartition(RangeAssignor):
    """``assignor_drops_partition``: a range assignor that forgets the last partition of
    each topic, so a Stable group leaves it unowned (only G2 sees it: nobody owns it twice,
    nobody commits it)."""

    def assign(self, partitions_per_topic: Any, subscriptions: Any) -> dict[str, Assignment]:
        out = super().assign(partitions_per_topic, subscriptions)
        dropped = {(t, n - 1) for t, n in partitions_per_topic.items() if n > 1}
        return {
            m: Assignment(partitions=tuple(tp for tp in a.partitions if tp not in dropped))
            for m, a in out.items()
        }


def loses_acked_writes(cluster: TxnCluster, topic: str, every: int = 4) -> None:
    """``broker_loses_acked_writes``: the partition leader acknowledges every
    ``every``-th data batch of ``topic`` and then loses it (as an unclean leader election
    would): the answer carries the offset, the log does not keep the records."""
    real = cluster._append_produce
    written = [0]

    def losing(node: int, tp: tuple[str, int], records: bytes) -> tuple[int, int]:
        before = cluster.parts[tp].end if tp in cluster.parts else -1
        code, base = real(node, tp, records)
        part = cluster.parts.get(tp)
        if code or tp[0] != topic or part is None or part.end == before:
            return code, base
        written[0] += 1
        if written[0] % every == 0:
            lost = part.txn_batches.pop()
            part.end = lost.base
            cluster.appended.pop()
        return code, base

    cluster._append_produce = losing  # type: ignore[method-assign]


def misnumbers_fetches(cluster: TxnCluster, topic: str) -> None:
    """``broker_misnumbers_fetches``: Fetch answers for ``topic`` carry every batch one
    offset too high (the log itself is right, and so are the acknowledgements)."""
    real = cluster._read_partition

    def off_by_one(
        node: int, tp: tuple[str, int], offset: int, limit: int, *, committed_only: bool
    ) -> tuple[int, bytes, int, int, list[tuple[int, int]]]:
        code, data, end, lso, aborted = real(node, tp, offset, limit, committed_only=committed_only)
        if tp[0] == topic and data:
            data = b"".join(
                _restamp(b, struct.unpack_from(">q", b)[0] + 1, struct.unpack_from(">i", b, 12)[0])
                for b in _split_batches(data)
            )
        return code, data, end, lso, aborted

    cluster._read_partition = off_by_one  # type: ignore[method-assign]


def skips_generations(coordinator: ClassicCoordinator) -> None:
    """``coordinator_skips_generation``: the coordinator begins each generation at the
    old one + 2 (only G1 sees it: members learn the generation it answers with)."""
    real = coordinator._complete_join

    def skipping(group: Any, now: float) -> None:
        begun = len(group.generations)
        real(group, now)
        if len(group.generations) > begun and group.generations[-1] > 1:
            group.generation += 1
            group.generations[-1] = group.generation

    coordinator._complete_join = skipping  # type: ignore[method-assign]


def stalls_rebalances(coordinator: ClassicCoordinator) -> None:
    """``coordinator_stalls_rebalances``: after the first generation the coordinator never
    completes a join phase: members wait in JoinGroup for ever (nothing unsafe happens;
    only L1, after the heal, sees that the group never settles)."""
    real = coordinator._complete_join

    def stalling(group: Any, now: float) -> None:
        if group.generation >= 1:
            group.join_deadline = None  # the phase's timer is dropped, not re-armed
            return
        real(group, now)

    coordinator._complete_join = stalling  # type: ignore[method-assign]


def syncs_while_preparing(coordinator: ClassicCoordinator) -> None:
    """``coordinator_syncs_while_preparing``: the coordinator takes the leader's SyncGroup
    of the current generation during PreparingRebalance and makes the group Stable -- a
    transition Kafka's table does not have (only G0 sees it)."""
    real = coordinator._sync

    def syncing(token: Any, version: int, req: Any, now: float) -> None:
        group = coordinator.groups.get(req.group_id)
        if (
            group is not None
            and group.state is GroupState.PREPARING_REBALANCE
            and req.member_id == group.leader
            and req.generation_id == group.generation
        ):
            group.transition(GroupState.STABLE)
        real(token, version, req, now)

    coordinator._sync = syncing  # type: ignore[method-assign]


def hasty_sessions(coordinator: ClassicCoordinator, ahead: float = 3.0) -> None:
    """``coordinator_expires_early``: the coordinator's timers run ``ahead`` seconds
    early, so a member can be removed before its session timeout (only G7 sees it)."""
    get_timer, handle_timer = coordinator.get_timer, coordinator.handle_timer

    def early() -> float | None:
        due = get_timer()
        return None if due is None else due - ahead

    def handle(*, now: float) -> None:
        handle_timer(now=now + ahead)

    coordinator.get_timer = early  # type: ignore[method-assign]
    coordinator.handle_timer = handle  # type: ignore[method-assign]


def hides_the_tail(cluster: Any) -> None:
    """``broker_hides_tail``: Fetch never returns a partition's last batch (the high
    watermark it reports stops before it): consumers wait for it forever, without a gap
    in what they read (only C2 sees it)."""
    real = cluster._read_partition

    def hiding(
        node: int, tp: tuple[str, int], offset: int, limit: int, *, committed_only: bool
    ) -> tuple[int, bytes, int, int, list[tuple[int, int]]]:
        code, data, end, lso, aborted = real(node, tp, offset, limit, committed_only=committed_only)
        log = cluster.logs.get(tp)
        if code or log is None or not log.batches:
            return code, data, end, lso, aborted
        base, _count, last = log.batches[-1]
        if data.endswith(last):
            data = data[: len(data) - len(last)]
        return code, data, base, base, aborted

    cluster._read_partition = hiding


def aborts_on_commit(cluster: TxnCluster, topic: str) -> None:
    """``broker_aborts_committed``: a partition leader of ``topic`` writes an ABORT marker
    where the coordinator sent COMMIT for partition 0, so a committed transaction's records
    there are never visible (closed, not hanging: only T2 sees it)."""
    real = cluster._apply_marker

    def flipping(node: int, tp: tuple[str, int], **kwargs: Any) -> int:
        if tp == (topic, 0):
            kwargs["commit"] = False
        return real(node, tp, **kwargs)

    cluster._apply_marker = flipping  # type: ignore[method-assign]


def unfenced_transactions(cluster: TxnCluster) -> None:
    """``coordinator_ignores_epoch``: the transaction coordinator takes requests of any
    epoch of a transactional id, so a fenced incarnation's AddPartitionsToTxn or EndTxn
    still takes effect (only T3 sees it first)."""
    real = cluster._check_txn

    def unfenced(node: int, tid: str, pid: int, epoch: int) -> tuple[int, Any]:
        meta = cluster.txns.get(tid)
        if meta is not None and meta.pid == pid:
            epoch = meta.epoch
        return real(node, tid, pid, epoch)

    cluster._check_txn = unfenced  # type: ignore[method-assign]


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


class _OnTheWire(_Wrapper):
    """A wrapper that reads the frames the machine sends and receives: a decoder per node
    and direction, started afresh with each connection."""

    def __init__(self, machine: Any) -> None:
        super().__init__(machine)
        self._sent: dict[NodeId, FrameDecoder] = {}
        self._received: dict[NodeId, FrameDecoder] = {}

    def _reset(self, node: NodeId) -> None:
        self._sent.pop(node, None)
        self._received.pop(node, None)

    @staticmethod
    def _frames(decoders: dict[NodeId, FrameDecoder], node: NodeId, data: bytes) -> list[bytes]:
        """The whole frames (without size prefixes) ``data`` completes on ``node``."""
        decoder = decoders.setdefault(node, FrameDecoder())
        decoder.feed(data)
        out = []
        while (frame := decoder.next_frame()) is not None:
            out.append(bytes(frame))
        return out

    def connection_made(self, node: NodeId, *, now: float) -> None:
        self._reset(node)
        self.wrapped.connection_made(node, now=now)

    def connection_lost(self, node: NodeId, *, now: float) -> None:
        self._reset(node)
        self.wrapped.connection_lost(node, now=now)


class IgnoresAbortedTransactions(_OnTheWire):
    """``consumer_ignores_aborted``: a read_committed consumer that ignores the
    AbortedTransactions list: the list is taken out of each Fetch response before the
    machine reads it."""

    def __init__(self, machine: Any) -> None:
        super().__init__(machine)
        self._fetches: dict[tuple[NodeId, int], int] = {}  # -> the Fetch request's version

    def data_to_send(self) -> list[tuple[NodeId, bytes]]:
        out = list(self.wrapped.data_to_send())
        for node, data in out:
            for frame in self._frames(self._sent, node, data):
                api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 0)
                if api_key == ApiKey.FETCH:
                    self._fetches[(node, correlation_id)] = version
        return out

    def receive_data(self, node: NodeId, data: bytes, *, now: float) -> None:
        out = bytearray()
        for payload in self._frames(self._received, node, data):
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


class ReordersSends(_Wrapper):
    """``producer_reorders_sends``: a producer whose per-partition order is broken: of
    every two records sent to a partition, the second reaches the accumulator first. Each
    record is still written once and acknowledged at its offset (only P3 sees it)."""

    def __init__(self, machine: Any) -> None:
        super().__init__(machine)
        self._held: dict[int, tuple[str, dict[str, Any], RecordId]] = {}
        self._alias: dict[RecordId, RecordId] = {}  # the real id -> the id handed out
        self._next = -1

    def send(self, topic: str, **kwargs: Any) -> RecordId:
        partition = int(kwargs["partition"])
        if partition not in self._held:
            stand_in = RecordId(self._next)
            self._next -= 1
            self._held[partition] = (topic, kwargs, stand_in)
            return stand_in
        first = self.wrapped.send(topic, **kwargs)  # may raise: the held one stays held
        held_topic, held_kwargs, stand_in = self._held.pop(partition)
        self._alias[self.wrapped.send(held_topic, **held_kwargs)] = stand_in
        return first  # type: ignore[no-any-return]

    def next_event(self) -> Any:
        event = self.wrapped.next_event()
        if isinstance(event, RecordsAcknowledged | RecordsFailed):
            ids = tuple(self._alias.get(r, r) for r in event.record_ids)
            event = attrs.evolve(event, record_ids=ids)
        return event


class SkipsRecords(_Wrapper):
    """``consumer_skips_records``: a consumer that loses the second record of every run
    of three or more it hands out (only C1 sees it first: the application's offsets jump
    while it owns the partition)."""

    def poll(self, *args: Any, **kwargs: Any) -> Any:
        runs = self.wrapped.poll(*args, **kwargs)
        return [
            (tp, [r for i, r in enumerate(records) if i != 1 or len(records) < 3], *rest)
            for tp, records, *rest in runs
        ]


class CommitsOthers(_Wrapper):
    """``consumer_commits_unowned``: a consumer that adds, to every commit, offset 0 of a
    partition it does not own (only G6 sees it: the commit is of the current generation
    from a valid member)."""

    def __init__(self, machine: Any, partitions: int, topic: str) -> None:
        super().__init__(machine)
        self._all = [(topic, p) for p in range(partitions)]

    def commit(self, offsets: Any = None, *, now: float) -> Any:
        if offsets:
            owned = {tuple(tp) for tp in self.wrapped.assignment()}
            others = [tp for tp in self._all if tp not in owned and tp not in offsets]
            if others:
                offsets = {**offsets, TopicPartition(*others[0]): 0}
        return self.wrapped.commit(offsets, now=now)


class CommitsPlan(_OnTheWire):
    """``consumer_commits_before_assignment``: a group leader that acts on its own share of
    the plan as soon as it sends it: right behind its SyncGroup, on the same connection, it
    commits offset 0 of every partition the plan gives it -- before the SyncGroup answer
    has told it anything. The coordinator takes the SyncGroup first (the group is Stable at
    the new generation) and then the commit: of the current generation, from a member,
    for partitions the generation gives it (only G6, which asks that the member has
    received that assignment, sees it).

    The commit is put on the wire by this wrapper: the machine's correlation ids are moved
    up by one per commit put in (a broker reads them in order), the commits' answers are
    taken out, and the machine's answers given back their ids."""

    VERSION = 8
    """OffsetCommit version of the commits put in (generation, member id, instance id)."""

    def __init__(self, machine: Any) -> None:
        super().__init__(machine)
        self._shift: dict[NodeId, int] = {}
        self._ids: dict[tuple[NodeId, int], int | None] = {}  # wire id -> machine's (None: ours)

    def _reset(self, node: NodeId) -> None:
        super()._reset(node)
        self._shift.pop(node, None)
        self._ids = {k: v for k, v in self._ids.items() if k[0] != node}

    def data_to_send(self) -> list[tuple[NodeId, bytes]]:
        out = []
        for node, data in self.wrapped.data_to_send():
            wire = bytearray()
            for frame in self._frames(self._sent, node, data):
                request = bytearray(frame)
                (correlation_id,) = struct.unpack_from(">i", request, 4)
                shift = self._shift.get(node, 0)
                struct.pack_into(">i", request, 4, correlation_id + shift)
                self._ids[(node, correlation_id + shift)] = correlation_id
                wire += struct.pack(">i", len(request)) + request
                commit = self._commit_of(parse_request(frame))
                if commit is not None:
                    ours = correlation_id + shift + 1
                    self._shift[node] = shift + 1
                    self._ids[(node, ours)] = None
                    wire += encode_request(commit, correlation_id=ours, client_id="planted")
            out.append((node, bytes(wire)))
        return out

    def _commit_of(self, request: Request) -> Any:
        """The OffsetCommit a leader's SyncGroup makes it send (None: not a leader's)."""
        body = request.body
        if request.api_key != ApiKey.SYNC_GROUP or not body.assignments:
            return None
        mine = [bytes(a.assignment) for a in body.assignments if a.member_id == body.member_id]
        planned = decode_assignment(mine[0]).partitions if mine and mine[0] else ()
        if not planned:
            return None
        cls = request_type(ApiKey.OFFSET_COMMIT, self.VERSION)
        part_cls = nested_type(cls, "OffsetCommitRequestPartition")
        topics: dict[str, list[Any]] = {}
        for topic, partition in sorted(planned):
            topics.setdefault(topic, []).append(
                build(
                    part_cls,
                    partition_index=partition,
                    committed_offset=0,
                    committed_leader_epoch=-1,
                    committed_metadata="",
                )
            )
        return build(
            cls,
            group_id=body.group_id,
            generation_id_or_member_epoch=body.generation_id,
            member_id=body.member_id,
            group_instance_id=body.group_instance_id,
            topics=tuple(
                build(nested_type(cls, "OffsetCommitRequestTopic"), name=t, partitions=tuple(ps))
                for t, ps in topics.items()
            ),
        )

    def receive_data(self, node: NodeId, data: bytes, *, now: float) -> None:
        out = bytearray()
        for frame in self._frames(self._received, node, data):
            response = bytearray(frame)
            (wire,) = struct.unpack_from(">i", response, 0)
            correlation_id = self._ids.pop((node, wire), wire)
            if correlation_id is None:
                continue  # the answer to a commit put in: the machine never asked
            struct.pack_into(">i", response, 0, correlation_id)
            out += struct.pack(">i", len(response)) + response
        if out:
            self.wrapped.receive_data(node, bytes(out), now=now)


class RepeatsRecords(_Wrapper):
    """``consumer_repeats_records``: a consumer that hands each run of records out twice
    in a row (each copy is a committed record below the LSO at its right offset: only the
    exactly-once view, C3, sees it)."""

    def poll(self, *args: Any, **kwargs: Any) -> Any:
        return [
            (tp, [*records, *records], *rest)
            for tp, records, *rest in self.wrapped.poll(*args, **kwargs)
        ]
