"""kafkastate: an Apache Kafka client for Python with a sans-IO core.

The protocol logic lives in :mod:`kafkastate.core` as pure state machines; adapters for
asyncio, trio, anyio and blocking code drive them. :mod:`kafkastate.testing` starts real
Apache Kafka brokers for tests. kafka-python's serializers are importable from here, as
from ``kafka``; its clients from :mod:`kafkastate.sync`.
"""

from kafkastate import _kio  # noqa: F401 -- kio without Hypothesis, before any kio import
from kafkastate._version import __version__
from kafkastate.serializer import DefaultSerializer, Deserializer, JsonSerializer, Serializer

__all__ = ["DefaultSerializer", "Deserializer", "JsonSerializer", "Serializer", "__version__"]
