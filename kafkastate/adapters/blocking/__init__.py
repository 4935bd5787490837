"""The blocking adapter: blocking sockets and selectors, no event loop.

- :mod:`~kafkastate.adapters.blocking.io` -- :class:`SocketLoop` (the socket loop any core
  machine is driven by) and small blocking clients (:class:`BlockingConnection`,
  :class:`BlockingClient`, :class:`BlockingAdmin`), re-exported here.
- :mod:`~kafkastate.adapters.blocking.producer` -- kafka-python's ``KafkaProducer``; its IO
  runs on one thread (:mod:`~kafkastate.adapters.blocking.thread`).
- :mod:`~kafkastate.adapters.blocking.consumer` -- kafka-python's ``KafkaConsumer``: IO in
  the caller's thread inside ``poll()``, a heartbeat thread for a group member.
- :mod:`~kafkastate.adapters.blocking.caller_thread` -- ``BlockingProducer``: a producer
  whose IO runs in the caller's thread.
"""

from kafkastate.adapters.blocking.io import (
    BlockingAdmin,
    BlockingClient,
    BlockingConnection,
    IOMachine,
    NewTopic,
    SocketLoop,
    TopicInfo,
    parse_bootstrap,
)

__all__ = [
    "BlockingAdmin",
    "BlockingClient",
    "BlockingConnection",
    "IOMachine",
    "NewTopic",
    "SocketLoop",
    "TopicInfo",
    "parse_bootstrap",
]
