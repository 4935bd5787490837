"""Command line for the real-broker harness, and the public names of the cluster API.

::

    python -m kafkastate.testing.broker up [--kafka-version V] [--brokers N]
        [--sasl] [--ssl] [--sasl-ssl]
    python -m kafkastate.testing.broker status
    python -m kafkastate.testing.broker down
    python -m kafkastate.testing.broker fetch [VERSION ...]

``up`` starts a local cluster in the background (its JVMs outlive the command), waits until it
is ready and prints ``KEY=VALUE`` lines (``KAFKASTATE_BOOTSTRAP=127.0.0.1:PORT`` and, when
asked for, the SASL/SSL addresses, credentials and CA file) that
:meth:`KafkaCluster.from_env` and the pytest fixtures read back, so
``eval "$(python -m kafkastate.testing.broker up --sasl)"`` points a test run at it.
The run is recorded in ``$KAFKASTATE_RUN_DIR`` (default ``~/.cache/kafkastate/run``); ``down``
stops it and removes its files; ``status`` prints it (exit 1 when nothing runs). ``fetch``
downloads the jars of the versions named (default: the harness default) into the cache and
prints each one's directory, so a test run needs no download on a cold machine.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from . import _probe
from ._cluster import (
    Broker,
    ClusterKind,
    KafkaCluster,
    default_kafka_version,
    default_run_dir,
    find_java,
)
from ._config import SaslCredentials
from ._errors import BrokerStartError, HarnessError, PrerequisiteError
from ._maven import DEFAULT_KAFKA_VERSION, fetch_kafka_libs

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "Broker",
    "BrokerStartError",
    "ClusterKind",
    "HarnessError",
    "KafkaCluster",
    "PrerequisiteError",
    "SaslCredentials",
    "default_kafka_version",
    "find_java",
    "main",
]

_STATE = "state.json"
_CLUSTER_DIR = "cluster"


@contextmanager
def _run_dir_lock(run_dir: Path) -> Iterator[None]:
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _load(run_dir: Path) -> tuple[KafkaCluster, dict[str, object]] | None:
    path = run_dir / _STATE
    if not path.is_file():
        return None
    try:
        state = json.loads(path.read_text())
        return KafkaCluster._from_state(state), state
    except (ValueError, KeyError, TypeError, HarnessError) as exc:
        print(f"ignoring unreadable harness state {path}: {exc}", file=sys.stderr)
        return None


def _save(run_dir: Path, cluster: KafkaCluster, options: dict[str, object]) -> None:
    state = cluster._to_state()
    state["options"] = options
    tmp = run_dir / f"{_STATE}.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(run_dir / _STATE)


def _print_env(cluster: KafkaCluster) -> None:
    for key, value in cluster.env().items():
        print(f"{key}={value}")


def _cmd_up(args: argparse.Namespace, run_dir: Path) -> int:
    options: dict[str, object] = {
        "kafka_version": args.kafka_version or default_kafka_version(),
        "brokers": args.brokers,
        "sasl": args.sasl,
        "ssl": args.ssl,
    }
    if args.sasl_ssl:  # only when asked: the state of an older `up` still compares equal
        options["sasl_ssl"] = True
    with _run_dir_lock(run_dir):
        loaded = _load(run_dir)
        if loaded is not None:
            cluster, state = loaded
            if any(b.is_running for b in cluster.brokers):
                if state.get("options") == options:
                    print(f"already running (state: {run_dir / _STATE})", file=sys.stderr)
                    _print_env(cluster)
                    return 0
                print(
                    f"a cluster with other options is running ({state.get('options')}); "
                    f"run `python -m kafkastate.testing.broker down` first",
                    file=sys.stderr,
                )
                return 1
            (run_dir / _STATE).unlink(missing_ok=True)
        workdir = run_dir / _CLUSTER_DIR
        shutil.rmtree(workdir, ignore_errors=True)
        try:
            cluster = KafkaCluster.start(
                args.kafka_version,
                args.brokers,
                sasl=args.sasl,
                ssl=args.ssl,
                sasl_ssl=args.sasl_ssl,
                workdir=workdir,
                timeout=args.timeout,
                detached=True,
            )
        except HarnessError as exc:
            print(f"kafkastate: could not start the cluster: {exc}", file=sys.stderr)
            return 1
        _save(run_dir, cluster, options)
    for broker in cluster.brokers:
        print(f"# node {broker.node_id}: pid {broker.pid}, log {broker.log_file}", file=sys.stderr)
    _print_env(cluster)
    return 0


def _cmd_down(args: argparse.Namespace, run_dir: Path) -> int:
    with _run_dir_lock(run_dir):
        loaded = _load(run_dir)
        if loaded is None:
            print("nothing to stop", file=sys.stderr)
            return 0
        cluster, _ = loaded
        running = sum(b.is_running for b in cluster.brokers)
        cluster.stop(remove=True, timeout=args.timeout)
        (run_dir / _STATE).unlink(missing_ok=True)
    print(f"stopped {running} broker(s)", file=sys.stderr)
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    for version in args.versions or [default_kafka_version()]:
        try:
            libs = fetch_kafka_libs(version)
        except HarnessError as exc:  # PrerequisiteError (no mvn) included
            print(f"fetch: {exc}", file=sys.stderr)
            return 1
        print(f"{version} {libs}")
    return 0


def _cmd_status(args: argparse.Namespace, run_dir: Path) -> int:
    loaded = _load(run_dir)
    if loaded is None:
        print("no cluster recorded in " + str(run_dir), file=sys.stderr)
        return 1
    cluster, state = loaded
    if not any(b.is_running for b in cluster.brokers):
        print(f"nothing running (stale state in {run_dir / _STATE})", file=sys.stderr)
        return 1
    _print_env(cluster)
    print(f"# kafka {cluster.kafka_version}, options {state.get('options')}, dir {cluster.workdir}")
    for broker in cluster.brokers:
        if not broker.is_running:
            print(f"# node {broker.node_id}: not running; log {broker.log_file}")
            continue
        try:
            _probe.api_versions(broker.host, broker.port, timeout=args.timeout)
            answer = "ApiVersions ok"
        except _probe.ProbeError as exc:
            answer = f"ApiVersions failed: {exc}"
        print(
            f"# node {broker.node_id}: pid {broker.pid} {broker.address} {answer}; "
            f"log {broker.log_file}"
        )
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kafkastate.testing.broker",
        description="Run a local Apache Kafka cluster (KRaft, loopback) for tests.",
    )
    parser.add_argument(
        "--run-dir",
        type=Path,
        default=None,
        help="where the running cluster is recorded (default $KAFKASTATE_RUN_DIR or "
        "~/.cache/kafkastate/run)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a cluster in the background and print its address")
    up.add_argument(
        "--kafka-version",
        default=None,
        help=f"Kafka version (default $KAFKASTATE_KAFKA_VERSION or {DEFAULT_KAFKA_VERSION})",
    )
    up.add_argument("--brokers", type=int, default=1, help="number of nodes (default 1)")
    up.add_argument("--sasl", action="store_true", help="add a SASL_PLAINTEXT listener")
    up.add_argument("--ssl", action="store_true", help="add an SSL listener (self-signed CA)")
    up.add_argument(
        "--sasl-ssl",
        action="store_true",
        help="add a SASL_SSL listener (every SASL mechanism over TLS; implies --sasl --ssl)",
    )
    up.add_argument("--timeout", type=float, default=None, help="readiness timeout, seconds")
    down = sub.add_parser("down", help="stop the cluster `up` started and delete its files")
    down.add_argument("--timeout", type=float, default=20.0, help="seconds before SIGKILL")
    status = sub.add_parser("status", help="print the running cluster (exit 1 if none)")
    status.add_argument("--timeout", type=float, default=2.0, help="probe timeout, seconds")
    fetch = sub.add_parser("fetch", help="download Kafka versions' jars into the harness cache")
    fetch.add_argument(
        "versions",
        nargs="*",
        metavar="VERSION",
        help=f"Kafka versions (default $KAFKASTATE_KAFKA_VERSION or {DEFAULT_KAFKA_VERSION})",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: the arguments (default ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 on failure (``status``: nothing running).
    """
    args = _parser().parse_args(argv)
    if args.command == "up" and args.brokers < 1:
        print("--brokers must be at least 1", file=sys.stderr)
        return 2
    run_dir = args.run_dir or default_run_dir()
    run_dir = Path(os.path.abspath(run_dir))
    if args.command == "up":
        return _cmd_up(args, run_dir)
    if args.command == "down":
        return _cmd_down(args, run_dir)
    if args.command == "fetch":
        return _cmd_fetch(args)
    return _cmd_status(args, run_dir)


if __name__ == "__main__":
    sys.exit(main())
