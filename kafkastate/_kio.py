"""Import kio's phantom-type base without Hypothesis.

kio's ``kio.static._phantom`` (imported by every kio schema) runs ``import
hypothesis.strategies`` whenever Hypothesis is installed, only to register test strategies
for its own types: ~0.5-0.8 s and pytest, trio and numpy with it, in every process that
touches the protocol (each PySpark worker, each CLI call). kafkastate never uses those
strategies, so the first import of kafkastate imports that module with Hypothesis hidden.

A process that imported Hypothesis already (a test session) gets kio's usual behaviour;
nothing else changes: Hypothesis stays importable afterwards. Only kio's own types then
have no registered strategy (``st.from_type(kio.static.primitive.i32)``): import
Hypothesis before kafkastate to have them.
"""

from __future__ import annotations

import importlib
import sys

__all__: list[str] = []

_PHANTOM = "kio.static._phantom"


def _import_phantom_without_hypothesis() -> None:
    if _PHANTOM in sys.modules or "hypothesis" in sys.modules:
        return
    # None in sys.modules makes `import hypothesis.strategies` raise ImportError, which
    # kio catches; removed again at once, so later imports of Hypothesis work.
    sys.modules["hypothesis"] = None  # type: ignore[assignment]
    try:
        importlib.import_module(_PHANTOM)
    finally:
        if "hypothesis" in sys.modules and sys.modules["hypothesis"] is None:
            del sys.modules["hypothesis"]


_import_phantom_without_hypothesis()
