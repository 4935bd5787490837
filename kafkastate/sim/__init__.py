"""kafkastate.sim: deterministic simulation of consumer groups and transactions (see
../shared/DST.md).

* :mod:`kafkastate.sim.world` -- :class:`~kafkastate.sim.world.Sim`: virtual time, a TCP-like
  network with faults, a simulated cluster, consumer hosts running kafkastate's own machines,
  and the invariants checked after every event.
* :mod:`kafkastate.sim.cluster` -- brokers that speak the wire protocol.
* :mod:`kafkastate.sim.coordinator` -- a pure model of Kafka's classic group coordinator.
* :mod:`kafkastate.sim.txnworld` -- :class:`~kafkastate.sim.txnworld.TxnSim`: an
  exactly-once pipeline (kafkastate's transactional producer and read_committed consumer)
  under faults, with the transaction invariants T1-T5 and C3.
* :mod:`kafkastate.sim.txncluster` -- brokers with producer state, read_committed fetches,
  the transaction coordinator and markers.
* :mod:`kafkastate.sim.entropy` -- seeded, replayed and Hypothesis-driven decisions.
* :mod:`kafkastate.sim.planted` -- the planted bugs of the self-test (one per invariant).
* :mod:`kafkastate.sim.shrink` -- shrinking a failing tape (``run SEED --shrink``).
* :mod:`kafkastate.sim.coverage` -- which machine transitions and faults a sweep reached.
* :mod:`kafkastate.sim.api` -- :class:`~kafkastate.sim.api.KafkaSim`: your application's
  listener and processing in the simulation over many seeds, failures replayed (the pytest
  plugin's ``kafka_sim`` fixture).
* :mod:`kafkastate.sim.aio` -- :func:`~kafkastate.sim.aio.run_async`: your asyncio consumer
  code (``AIOKafkaConsumer``, listener, commits) on a virtual-time event loop over the
  simulated network (``kafka_sim``'s ``member=``); :mod:`kafkastate.sim.triosim` for trio
  code.
* :mod:`kafkastate.sim.conformance` -- scripted scenarios that run against the broker
  model and a real broker (tests/sim/test_sim_conformance.py).
* ``python -m kafkastate.sim run|sweep|replay [--workload txn]`` -- the command line;
  docs/simulation.md has the invariant table, shrinking and the coverage report.
"""
