"""The pure core: protocol machines with no IO, no clock, no global randomness.

Nothing under this package may import asyncio, trio, anyio, socket, selectors, ssl,
threading or time (``tests/core/test_core_purity.py`` enforces it).
"""
