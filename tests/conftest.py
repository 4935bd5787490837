"""Fixtures and markers shared by the whole suite (the suite's only conftest).

* ``anyio_backend`` -- every ``@pytest.mark.anyio`` test runs on asyncio and on trio
  (STYLE.md §11). Trio-only tests are ``@pytest.mark.trio`` (pytest-trio, ``trio_mode`` off).
"""

from __future__ import annotations

import pytest

# -- async backends ---------------------------------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run each ``@pytest.mark.anyio`` test once on asyncio and once on trio."""
    return str(request.param)
