"""Runtime adapters: the IO around the pure core (blocking today; asyncio, trio, anyio next)."""
