"""The KIP-848 workload (``--workload group848``): consumer groups on the "consumer" protocol.

Theory of operation
-------------------
The same world as :mod:`kafkastate.sim.world` -- virtual time, the TCP-like network, the
faults, the consumer application model -- with two changes: each consumer host's
:class:`~kafkastate.core.consumer.fetcher.FetcherMachine` runs the core's KIP-848 member
(:class:`~kafkastate.core.consumer.group848.ConsumerGroupMember`, ConsumerGroupHeartbeat,
``group.remote.assignor`` uniform or range), and the cluster's coordinator is
:class:`~kafkastate.sim.coordinator848.ConsumerCoordinator`: server-side assignment, member
and group epochs, reconciliation, fencing, session and rebalance timeouts, static members'
epoch -2 leave. A static member that crashes and comes back under a new member id within its
session gets UNRELEASED_INSTANCE_ID (fatal for the client, as in Java); its application
starts the consumer again a second later, as a supervisor would.

Invariants, in KIP-848 form (failures name them; ../shared/DST.md A3.6):

* G1 -- the group epoch only grows;
* G3 -- no partition is held (assigned or pending revocation) by two members at the
  coordinator, and no partition is owned by the applications of two live members (members
  the coordinator still has): a new owner gets a partition only after the previous owner's
  heartbeat no longer reports it;
* G4 -- per partition, the application's callbacks alternate assigned / revoked-or-lost;
* G5 -- every commit the coordinator accepted carried the member's current epoch and was
  for a partition the member held then;
* G6 -- and for a partition the member had received (a heartbeat answer gave it to the
  member, whose application was assigned it);
* G7 -- no member is removed for its session before the session ended;
* C1, P4, PI -- as in the classic workload (the application model checks them);
* (L) G2 -- once Stable, the target assignment gives every partition to one member;
  L1 -- after the heal the group is Stable, every live host a member, each application
  owning what the coordinator assigned it, every partition owned once; C2 -- every record
  consumed.

Planted bugs (the self-test): ``coordinator_skips_revocation`` (the coordinator hands a
partition to its new owner while the old one has not revoked it: G3) and
``coordinator_ignores_member_epoch`` (commits at a stale member epoch are accepted: G5).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

import attrs

from kafkastate.core.consumer.group848 import ConsumerGroupConfig
from kafkastate.core.protocol.versions import ApiKey
from kafkastate.errors import UnreleasedInstanceIdError
from kafkastate.sim.app import GROUP, TOPIC
from kafkastate.sim.cluster import SERVED_VERSIONS, SimCluster
from kafkastate.sim.coordinator848 import ConsumerCoordinator, ConsumerGroup, ConsumerGroupState
from kafkastate.sim.entropy import Entropy
from kafkastate.sim.scheduler import InvariantViolation
from kafkastate.sim.world import Sim, SimConfig

__all__ = [
    "PLANTED848_BUGS",
    "PLANTED848_CATCHES",
    "Cluster848",
    "Sim848",
    "Sim848Config",
    "run_seed848",
]

PLANTED848_BUGS: Final = ("coordinator_skips_revocation", "coordinator_ignores_member_epoch")
"""The KIP-848 workload's deliberately broken variants (the harness's self-test)."""
PLANTED848_CATCHES: Final = {
    "coordinator_skips_revocation": "G3",
    "coordinator_ignores_member_epoch": "G5",
}
"""The invariant that must catch each of them."""


class Cluster848(SimCluster):
    """The simulated cluster with KIP-848 groups: ConsumerGroupHeartbeat and OffsetCommit
    v9 (member epochs) served (the heartbeat is routed like the other coordinator APIs:
    NOT_COORDINATOR at another broker, :class:`SimCluster`'s)."""

    served: Mapping[int, tuple[int, int]] = MappingProxyType(
        {
            **SERVED_VERSIONS,
            ApiKey.OFFSET_COMMIT: (2, 9),
            ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
        }
    )

    def __init__(self, brokers: int, coordinator: ConsumerCoordinator) -> None:
        super().__init__(brokers, coordinator)
        self.consumer_coordinator = coordinator
        coordinator.topics = self.topics


@attrs.frozen(kw_only=True)
class Sim848Config(SimConfig):
    """One KIP-848 run's options: ``assignor`` is the server-side one (``uniform`` or
    ``range``); ``session_ms``/``heartbeat_ms`` are the broker's
    ``group.consumer.session.timeout.ms`` and ``group.consumer.heartbeat.interval.ms``;
    ``assignment_ms`` its ``group.consumer.assignment.interval.ms`` (KIP-1263 batching: 0,
    each target at once, unless a run asks for Kafka 4.4's 1000)."""

    assignor: str = "uniform"
    assignment_ms: int = 0

    @classmethod
    def draw(cls, entropy: Entropy, *, planted: str | None = None) -> Sim848Config:
        """The classic workload's swarm configuration (sizes, timeouts, fault kinds), with
        a server-side assignor."""
        base = attrs.asdict(SimConfig.draw(entropy), recurse=False)
        base["assignor"] = "range" if base["assignor"] in ("range", "sticky") else "uniform"
        if planted == "coordinator_ignores_member_epoch":
            base["faults"] = ("hold", "pause")  # zombies: members fenced behind their back
        return cls(**{**base, "planted": planted})


class Sim848(Sim):
    """One simulated run of the KIP-848 workload (see the module's docstring)."""

    config: Sim848Config
    cluster: Cluster848

    def __init__(self, entropy: Entropy, config: Sim848Config, **kwargs: Any) -> None:
        self._epochs_seen = 0
        self._removed_seen = 0
        self._told: dict[str, set[tuple[str, int]]] = {}
        """G6: member id -> every partition a heartbeat answer gave it (its application
        was assigned it)."""
        super().__init__(entropy, config, **kwargs)

    def _make_cluster(self, config: SimConfig) -> SimCluster:
        coordinator = ConsumerCoordinator(
            session_timeout=config.session_ms / 1000,
            heartbeat_interval=config.heartbeat_ms / 1000,
            assignor=config.assignor,
            assignment_interval=getattr(config, "assignment_ms", 0) / 1000,
        )
        if config.planted == "coordinator_skips_revocation":
            coordinator.hands_over_unrevoked = True
        elif config.planted == "coordinator_ignores_member_epoch":
            coordinator.ignores_member_epoch = True
        return Cluster848(config.brokers, coordinator)

    def _group_config(self, name: str) -> ConsumerGroupConfig:
        cfg = self.config
        return ConsumerGroupConfig(
            group_id=GROUP,
            max_poll_interval=cfg.max_poll_ms / 1000,
            request_timeout=max(10.0, cfg.session_ms / 1000),
            group_instance_id=f"static-{name}" if cfg.static else None,
            group_remote_assignor=cfg.assignor,
        )

    # UNRELEASED_INSTANCE_ID: the instance's previous member has not left nor expired
    restarted_on = (*Sim.restarted_on, UnreleasedInstanceIdError)

    # ------------------------------------------------------------ invariants

    def group(self) -> ConsumerGroup | None:
        """The workload's group at the coordinator."""
        return self.cluster.consumer_coordinator.consumer_groups.get(GROUP)

    def live_owners(self) -> dict[str, set[tuple[str, int]]]:
        """Hosts whose member the coordinator still has (not a static member that left),
        with what their application owns."""
        group = self.group()
        if group is None:
            return {}
        out = {}
        for name, host in self.hosts.items():
            member = group.members.get(host.machine.member.member_id)
            if host.alive and member is not None and member.epoch >= 0:
                out[name] = host.app.owned
        return out

    def _check_safety(self, kind: str) -> None:
        group = self.group()
        if group is not None:
            self._check_epochs(group)
            holders: dict[tuple[str, int], str] = {}
            for member_id, member in sorted(group.members.items()):
                for tp in sorted(member.holds()):
                    if tp in holders:
                        raise InvariantViolation(
                            "G3",
                            f"the coordinator gives {tp} to {holders[tp]} and {member_id}",
                            at=self.now,
                        )
                    holders[tp] = member_id
        owner: dict[tuple[str, int], str] = {}
        for name, owned in sorted(self.live_owners().items()):
            for tp in sorted(owned):
                if tp in owner:
                    raise InvariantViolation(
                        "G3", f"{tp} owned by {owner[tp]} and {name} at once", at=self.now
                    )
                owner[tp] = name
        for host in self.hosts.values():
            self._check_callback_order(host)
        for host in self.hosts.values():
            if host.alive and host.app.owned:
                self._told.setdefault(host.machine.member.member_id, set()).update(host.app.owned)
        self._check_commits848()
        epoch = -1 if group is None else group.epoch
        self.trace.append(f"{self.now} {kind} epoch={epoch} {self._ownership()}")
        if self._user_check is not None:
            try:
                self._user_check(self)
            except AssertionError as exc:
                raise InvariantViolation("USER", str(exc), at=self.now) from exc

    def _check_epochs(self, group: ConsumerGroup) -> None:
        """G1: the group epoch only grows; G7: no member removed for its session early."""
        for epoch in group.epochs[self._epochs_seen :]:
            if epoch <= self._generation:
                raise InvariantViolation(
                    "G1", f"group epoch {self._generation} -> {epoch}", at=self.now
                )
            self._generation = epoch
        self._epochs_seen = len(group.epochs)
        for member_id, why, when, deadline in group.removed[self._removed_seen :]:
            self.stats[f"member {why}"] += 1
            if why == "session expired" and when < deadline:
                raise InvariantViolation(
                    "G7", f"{member_id} expired {deadline - when:.3f} s early", at=self.now
                )
        self._removed_seen = len(group.removed)

    def _check_commits848(self) -> None:
        """G5: an accepted commit carried the member's epoch, for a partition it held; G6:
        a partition the member had received (a heartbeat answer carried it)."""
        commits = self.cluster.consumer_coordinator.commits
        while commits:
            commit = commits.pop(0)
            if commit.epoch < 0 and commit.member_epoch is None:
                continue  # a commit with no member, to a group that has none
            if commit.member_epoch != commit.epoch:
                raise InvariantViolation(
                    "G5",
                    f"{commit.member_id}'s commit at epoch {commit.epoch} accepted, its "
                    f"epoch being {commit.member_epoch}",
                    at=self.now,
                )
            if not commit.held:
                raise InvariantViolation(
                    "G5",
                    f"{commit.member_id} committed {commit.partition} it does not hold",
                    at=self.now,
                )
            if commit.partition not in self._told.get(commit.member_id, ()):
                raise InvariantViolation(
                    "G6",
                    f"{commit.member_id} committed {commit.partition} at epoch {commit.epoch} "
                    "before a heartbeat answer gave it that partition",
                    at=self.now,
                )

    def _settled(self) -> bool:
        group = self.group()
        if group is None or group.state is not ConsumerGroupState.STABLE:
            return False
        alive = [h for h in self.hosts.values() if h.alive]
        if {h.machine.member.member_id for h in alive} != set(group.members):
            return False
        owned: list[tuple[str, int]] = []
        for host in alive:
            if host.app.owned != group.members[host.machine.member.member_id].assigned:
                return False
            owned.extend(host.app.owned)
        return sorted(owned) == [(TOPIC, p) for p in range(self.config.partitions)]

    def _check_stable_coverage(self) -> None:
        """G2 (L): a Stable group's target gives every partition to exactly one member."""
        group = self.group()
        if group is None or group.state is not ConsumerGroupState.STABLE:
            return
        given = sorted(tp for target in group.target.values() for tp in target)
        wanted = [(TOPIC, p) for p in range(self.config.partitions)]
        if given != wanted:
            raise InvariantViolation(
                "G2", f"Stable at epoch {group.epoch} with target {given}", at=self.now
            )


def run_seed848(seed: int, *, planted: str | None = None, **overrides: Any) -> Sim848:
    """Run the KIP-848 swarm configuration of ``seed`` to its end.

    Args:
        seed: picks everything: sizes, timeouts, faults, delays.
        planted: one of :data:`PLANTED848_BUGS`, for the harness's self-test.
        overrides: :class:`Sim848Config` fields to fix instead of drawing them.

    Returns:
        The finished run.

    Raises:
        InvariantViolation: the first invariant that failed (its ``invariant`` id).
    """
    from kafkastate.sim.entropy import SeededEntropy  # noqa: PLC0415

    entropy = SeededEntropy(seed)
    config = attrs.evolve(Sim848Config.draw(entropy, planted=planted), **overrides)
    sim = Sim848(entropy, config)
    sim.run()
    return sim
