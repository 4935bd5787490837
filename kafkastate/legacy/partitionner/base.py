"""The seed's ``kafka.partitionner.base`` path: :mod:`kafkastate.legacy.partitioner.base`."""

from kafkastate.legacy.partitioner import base as _same
from kafkastate.legacy.partitioner.base import *  # noqa: F403

__all__ = _same.__all__
