"""Build script for the optional C accelerator; all other metadata is in pyproject.toml.

``optional=True``: where the extension does not compile (no compiler, no Python headers) the
install still succeeds and kafkastate runs its pure-Python record decoder.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafkastate.core.protocol._speedups",
            sources=["kafkastate/core/protocol/_speedups.c"],
            optional=True,
        )
    ]
)
