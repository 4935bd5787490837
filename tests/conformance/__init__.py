"""Cross-runtime conformance: the same scripted scenarios on asyncio, trio, anyio on asyncio,
blocking code (and the simulator where a scenario is about group policy); each run's trace
must be identical (see docs/conformance.md)."""
