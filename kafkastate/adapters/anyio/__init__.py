"""The async adapter, on anyio: runs on asyncio and natively on trio.

- :mod:`~kafkastate.adapters.anyio.driver` -- :class:`AsyncDriver`: sockets, the core's
  timer and wake-ups, as tasks of the ``async with`` block.
- :mod:`~kafkastate.adapters.anyio.producer` -- :class:`Producer`, ``open_producer``.
- :mod:`~kafkastate.adapters.anyio.consumer` -- :class:`Consumer`, ``open_consumer``.
"""
