"""``broker``: a local Apache Kafka from the project's harness (:mod:`kafkastate.testing`)
for a quick try-out. It prints the bootstrap on stdout (then the other listeners' lines on
stderr) and runs until Ctrl-C, which stops it and deletes its files."""

from __future__ import annotations

import signal
import threading

import click

from kafkastate.cli._app import CONTEXT, CommandError


@click.command(context_settings=CONTEXT)
@click.option("--sasl", is_flag=True, help="Add a SASL_PLAINTEXT listener (user alice).")
@click.option("--ssl", is_flag=True, help="Add an SSL listener (its CA is printed).")
@click.option("--brokers", type=click.IntRange(1, 5), default=1, show_default=True)
@click.option("--kafka-version", metavar="VERSION", help="[default: the harness's]")
def broker(sasl: bool, ssl: bool, brokers: int, kafka_version: str | None) -> int:
    """Start a local broker, print its bootstrap, and keep it up until Ctrl-C."""
    from kafkastate.testing import HarnessError, KafkaCluster  # noqa: PLC0415 -- slow import

    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        try:
            cluster = KafkaCluster.start(kafka_version, brokers, sasl=sasl, ssl=ssl)
        except HarnessError as exc:
            raise CommandError(str(exc).splitlines()[0] if str(exc) else repr(exc)) from exc
        try:
            click.echo(cluster.bootstrap)
            for name, value in cluster.env().items():
                if name != "KAFKASTATE_BOOTSTRAP":
                    click.echo(f"{name}={value}", err=True)
            click.echo("% broker up; Ctrl-C stops it", err=True)
            while not stop.wait(0.5):
                pass
        finally:
            cluster.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo("% broker stopped", err=True)
    return 0
