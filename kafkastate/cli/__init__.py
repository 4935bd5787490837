"""The ``kafkastate`` command line: kcat's everyday jobs (produce, consume) and the admin
client's (topics, groups, configs, cluster, ACLs), plus a local broker for a try-out.

It needs the ``cli`` extra (click and rich): ``pip install 'kafkastate[cli]'``. The
commands live in :mod:`kafkastate.cli._app`; this module only checks the extra is there,
so that the console script says what is missing in one line instead of a traceback.
Every option and policy is the library's (:mod:`kafkastate.core.config`); the command
line drives the blocking face, :mod:`kafkastate.sync`.
"""

from __future__ import annotations

import sys

__all__ = ["main"]

MISSING_EXTRA = (
    "kafkastate: the command line needs the 'cli' extra ({missing} is not installed): "
    "pip install 'kafkastate[cli]'"
)


def main(argv: list[str] | None = None) -> int:
    """Run the command line (the ``kafkastate`` console script).

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status (0 success, 1 an error, 2 a bad option, 130 interrupted).
    """
    try:
        import click  # noqa: F401, PLC0415 -- only to name a missing extra
        import rich  # noqa: F401, PLC0415
    except ImportError as exc:
        print(MISSING_EXTRA.format(missing=exc.name or "click/rich"), file=sys.stderr)
        return 1
    from kafkastate.cli._app import run  # noqa: PLC0415 -- needs the extra

    return run(argv)
