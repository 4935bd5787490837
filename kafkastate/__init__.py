"""kafkastate: an Apache Kafka client for Python with a sans-IO core.

The protocol logic lives in :mod:`kafkastate.core` as pure state machines; adapters for
asyncio, trio, anyio and blocking code drive them. :mod:`kafkastate.testing` starts real
Apache Kafka brokers for tests.
"""

from kafkastate._version import __version__

__all__ = ["__version__"]
