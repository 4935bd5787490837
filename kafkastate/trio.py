"""kafkastate for trio users.

:func:`open_producer` here *is* :func:`kafkastate.anyio.open_producer` (and likewise
:func:`open_consumer`, :func:`open_admin` and every other name of :mod:`kafkastate.anyio`):
the async adapter (:mod:`kafkastate.adapters.anyio`), which runs natively on trio (trio's
clock, cancellation and ``trio.Cancelled``, its ``MockClock`` included). It is re-exported
so trio code reads naturally::

    import trio
    from kafkastate.trio import open_producer

    async def main() -> None:
        async with open_producer("localhost:9092") as producer:
            await producer.send("events", b"hello")

    trio.run(main)
"""

from __future__ import annotations

# The same objects as kafkastate.anyio, under the same names. The admin values are also
# star-imported from their own module: type checkers do not follow the anyio face's
# ``__all__ +=`` into them.
from kafkastate.admin import *  # noqa: F403
from kafkastate.anyio import *  # noqa: F403
from kafkastate.anyio import __all__  # noqa: F401
