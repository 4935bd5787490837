"""kafkastate for anyio: ``async with open_producer(...)``, ``async with
open_consumer(...)`` and ``async with open_admin(...)``, on asyncio or trio.

The async adapter (:mod:`kafkastate.adapters.anyio`) runs natively on either backend: its
clock is the event loop's, cancellation is the host library's. Every decision is the
core's (:mod:`kafkastate.core`); options are resolved by :mod:`kafkastate.core.config`
(docs/options.md).
"""

from __future__ import annotations

from kafkastate import admin as _admin
from kafkastate.abc import ConsumerRebalanceListener
from kafkastate.adapters.anyio.admin import Admin, open_admin
from kafkastate.adapters.anyio.consumer import Consumer, open_consumer
from kafkastate.adapters.anyio.producer import (
    BatchBuilder,
    BatchRecord,
    Delivery,
    Producer,
    RecordMetadata,
    open_producer,
)
from kafkastate.admin import *  # noqa: F403

__all__ = [
    "Admin",
    "BatchBuilder",
    "BatchRecord",
    "Consumer",
    "ConsumerRebalanceListener",
    "Delivery",
    "Producer",
    "RecordMetadata",
    "open_admin",
    "open_consumer",
    "open_producer",
]
__all__ += _admin.__all__  # the admin values (kafkastate.admin)
