"""kafkastate.sim: deterministic simulation of consumer groups (see ../shared/DST.md).

* :mod:`kafkastate.sim.world` -- :class:`~kafkastate.sim.world.Sim`: virtual time, a TCP-like
  network with faults, a simulated cluster, consumer hosts running kafkastate's own machines,
  and the invariants checked after every event.
* :mod:`kafkastate.sim.cluster` -- brokers that speak the wire protocol.
* :mod:`kafkastate.sim.coordinator` -- a pure model of Kafka's classic group coordinator.
* :mod:`kafkastate.sim.entropy` -- seeded, replayed and Hypothesis-driven decisions.
* ``python -m kafkastate.sim run|sweep|replay`` -- the command line.
"""
