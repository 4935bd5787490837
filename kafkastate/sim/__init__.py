"""kafkastate.sim: pieces of the deterministic simulator (see ../shared/DST.md).

Today: :mod:`kafkastate.sim.coordinator`, a pure model of Kafka's classic group
coordinator that group-membership tests run members against in virtual time.
"""
