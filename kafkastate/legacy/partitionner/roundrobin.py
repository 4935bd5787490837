"""The seed's ``kafka.partitionner.roundrobin`` path: the round-robin partitioner."""

from kafkastate.legacy.partitioner import roundrobin as _same
from kafkastate.legacy.partitioner.roundrobin import *  # noqa: F403

__all__ = _same.__all__
