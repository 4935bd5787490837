"""The ``kafkastate`` command group, the options every cluster command shares, and the one
place errors become one line on stderr and an exit status.

Exit statuses: 0 done (a consume or a broker stopped with Ctrl-C included), 1 an error
(unreachable cluster, unknown topic, a broker's refusal...), 2 a bad option, argument or
``-X``/``-F`` property, 130 another command interrupted by Ctrl-C. Set
``KAFKASTATE_DEBUG=1`` to see a traceback instead of the one line.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kafkastate._version import __version__
from kafkastate.cli._options import DEFAULT_TIMEOUT, Connection
from kafkastate.errors import KafkaConfigurationError, KafkaError, error_for_code

__all__ = ["CommandError", "cli", "cluster_options", "refusal", "run"]

_F = TypeVar("_F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class CommandError(click.ClickException):
    """What a command refuses or fails at, said in one line (exit status 1)."""


def cluster_options(command: _F) -> _F:
    """Give ``command`` the shared ``-b``, ``-X``, ``-F`` and ``--timeout`` options, as one
    ``conn`` argument (:class:`~kafkastate.cli._options.Connection`)."""

    @functools.wraps(command)
    def wrapper(
        bootstrap: str | None,
        properties: tuple[str, ...],
        property_files: tuple[Path, ...],
        timeout: float,
        **kwargs: Any,
    ) -> Any:
        conn = Connection.build(bootstrap or "", properties, property_files, timeout)
        return command(conn=conn, **kwargs)

    decorators = [
        click.option(
            "-b",
            "--bootstrap",
            envvar="KAFKASTATE_BOOTSTRAP",
            metavar="HOST:PORT,...",
            help="Bootstrap servers [env KAFKASTATE_BOOTSTRAP; default localhost:9092].",
        ),
        click.option(
            "-X",
            "properties",
            multiple=True,
            metavar="KEY=VALUE",
            help="A client property: librdkafka/Java (security.protocol, sasl.mechanism, "
            "sasl.username, sasl.password, ssl.ca.location...) or Python name.",
        ),
        click.option(
            "-F",
            "property_files",
            multiple=True,
            type=click.Path(path_type=Path, dir_okay=False),
            metavar="FILE",
            help="A properties file (key=value lines) read before -X.",
        ),
        click.option(
            "--timeout",
            type=float,
            default=DEFAULT_TIMEOUT,
            show_default=True,
            metavar="SECONDS",
            help="How long to wait for the cluster.",
        ),
    ]
    for decorate in reversed(decorators):
        wrapper = decorate(wrapper)
    return wrapper  # type: ignore[return-value]


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, "-V", "--version", prog_name="kafkastate")
def cli() -> None:
    """kafkastate: produce, consume and administer Apache Kafka (kcat-like).

    Every command that talks to a cluster takes -b (or KAFKASTATE_BOOTSTRAP), -X
    key=value, -F file and --timeout. Tables on a terminal; tab-separated lines (or
    --json) when piped.
    """


def _register() -> None:
    from kafkastate.cli import _admin, _broker, _operate, _records, _stats  # noqa: PLC0415 -- after cli

    cli.add_command(_records.produce)
    cli.add_command(_records.consume)
    for group in (_admin.topics, _admin.groups, _admin.configs, _admin.acls):
        cli.add_command(group)
    cli.add_command(_admin.cluster)
    for command in (_operate.quotas, _operate.users, _operate.reassignments):
        cli.add_command(command)
    cli.add_command(_operate.elect_leaders)
    cli.add_command(_operate.transactions)
    cli.add_command(_stats.stats)
    cli.add_command(_broker.broker)


def refusal(code: int) -> str:
    """A broker's error code in words (``TopicAuthorizationFailedError: ...``)."""
    error = error_for_code(code)
    return f"{error.__name__}: {error.description}" if error.description else error.__name__


def _fail(message: str, status: int) -> int:
    text = " ".join(message.split())  # one line, whatever the message
    print(f"kafkastate: error: {text}", file=sys.stderr)
    return status


def describe(exc: BaseException) -> str:
    """An error in one line: its text, or its type when it has none."""
    text = str(exc).strip()
    return text if text else type(exc).__name__


def run(argv: list[str] | None = None) -> int:
    """Run a command; every error is one line on stderr.

    Returns:
        The exit status.
    """
    _register()
    debug = bool(os.environ.get("KAFKASTATE_DEBUG"))
    try:
        result = cli.main(args=argv, prog_name="kafkastate", standalone_mode=False)
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "kafkastate"
        return _fail(f"{exc.format_message()} (see '{where} --help')", 2)
    except click.ClickException as exc:
        return _fail(exc.format_message(), exc.exit_code)
    except BrokenPipeError:  # the reader went away (| head): stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except click.Abort:  # Ctrl-C, which click turns into Abort
        return _fail("interrupted", 130)
    except KafkaConfigurationError as exc:  # a bad -X/-F property or argument value
        if debug:
            raise
        return _fail(describe(exc), 2)
    except (KafkaError, OSError) as exc:
        if debug:
            raise
        return _fail(describe(exc), 1)
    except Exception as exc:
        if debug:
            raise
        return _fail(f"unexpected {type(exc).__name__}: {describe(exc)} "
                     "(KAFKASTATE_DEBUG=1 shows the traceback)", 1)  # fmt: skip
    return result if isinstance(result, int) else 0
