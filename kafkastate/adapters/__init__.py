"""Runtime adapters: the IO around the pure core, one package per runtime.

- :mod:`kafkastate.adapters.anyio` -- the async adapter on anyio (asyncio or trio natively):
  the driver (sockets, timers, wake-ups), the producer and the consumer behind
  ``open_producer``/``open_consumer``.
- :mod:`kafkastate.adapters.asyncio` -- aiokafka's ``AIOKafkaProducer``/``AIOKafkaConsumer``:
  aiokafka's ``start()``/``stop()`` lifecycle around the async adapter's objects.
- :mod:`kafkastate.adapters.blocking` -- blocking sockets and selectors: kafka-python's
  ``KafkaProducer`` (one IO thread) and ``KafkaConsumer`` (IO in the caller's thread inside
  ``poll()``, a heartbeat thread for a group member), and the small blocking clients.

An adapter opens the sockets the core asks for, writes its bytes, waits for readable
sockets, a user command or the core's deadline, runs the user code the core asks for, and
hands results back; it decides nothing (docs/architecture.md). The public modules
(``kafkastate.asyncio``, ``.anyio``, ``.trio``, ``.sync``) re-export from here.
"""
