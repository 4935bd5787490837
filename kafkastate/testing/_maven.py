"""Fetch Apache Kafka's broker jars from Maven Central into a per-version cache directory.

Layout: ``<cache root>/kafka-<version>/`` holds ``pom.xml``, ``mvn.log``, ``libs/*.jar`` and
``.complete`` (JSON, written only after a successful copy; its presence means "reuse"). A file
lock serialises concurrent fetches (pytest-xdist workers, two terminals).

Why a pom of our own: ``org.apache.kafka:kafka_2.13`` brings the broker and its runtime deps,
but Kafka's build marks the log4j2 SLF4J binding ``releaseOnly`` (tarball only), and 4.0.x also
leaves out log4j-api/core. Without a binding the broker's logging is silently dropped.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ._errors import HarnessError, PrerequisiteError
from ._versions import parse_version, profile_for

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "LOG4J_VERSIONS",
    "cache_root",
    "cached_libs",
    "fetch_kafka_libs",
    "log4j_version_for",
    "render_pom",
]

DEFAULT_KAFKA_VERSION = "4.4.0"
"""The Kafka version the harness runs by default (the whole suite passes on it).

Moved from 4.3.1 on 2026-11-26, after tests/integration, adapters, conformance, cli and
legacy ran on 4.4.0 (issue 25). Older versions (2.8.x with ZooKeeper, 3.x KRaft) run too:
see :mod:`kafkastate.testing._versions`.
"""

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"

LOG4J_VERSIONS: dict[str, str] = {
    "4.0.0": "2.24.3",
    "4.0.1": "2.24.3",
    "4.0.2": "2.24.3",
    "4.1.0": "2.24.3",
    "4.1.1": "2.24.3",
    "4.1.2": "2.25.3",
    "4.2.0": "2.25.3",
    "4.2.1": "2.25.4",
    "4.3.0": "2.25.4",
    "4.3.1": "2.25.4",
    "4.4.0": "2.25.5",
}
"""Kafka version -> the log4j2 version its ``kafka-server`` pom brings (4.0.x: its build's)."""

_FALLBACK_LOG4J = "2.25.5"
_MARKER = ".complete"


def cache_root() -> Path:
    """The harness cache root: ``$KAFKASTATE_CACHE_DIR``, else ``~/.cache/kafkastate``.

    ``$XDG_CACHE_HOME/kafkastate`` replaces ``~/.cache/kafkastate`` when XDG_CACHE_HOME is set.

    Returns:
        The directory (not created).
    """
    explicit = os.environ.get("KAFKASTATE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "kafkastate"


def check_version(kafka_version: str) -> str:
    """Validate a Kafka version string.

    Args:
        kafka_version: e.g. ``"4.3.1"``.

    Returns:
        The same string.

    Raises:
        HarnessError: it is not ``X.Y.Z`` (optionally ``-suffix``) or older than 2.8.
    """
    parse_version(kafka_version)
    return kafka_version


def log4j_version_for(kafka_version: str) -> str:
    """The log4j2 version to pin next to a Kafka version.

    Args:
        kafka_version: e.g. ``"4.3.1"``.

    Returns:
        The version from :data:`LOG4J_VERSIONS`, or the newest known one for other versions.
    """
    return LOG4J_VERSIONS.get(kafka_version, _FALLBACK_LOG4J)


def render_pom(kafka_version: str, log4j_version: str, *, slf4j2: bool = False) -> str:
    """The pom that ``copy-dependencies`` resolves.

    Args:
        kafka_version: ``org.apache.kafka:kafka_2.13`` version.
        log4j_version: log4j-api / log4j-core / binding version (Kafka 4.x; older versions
            take their log4j 1.2 / reload4j binding from :func:`profile_for`).
        slf4j2: use the SLF4J 2 binding (``log4j-slf4j2-impl``) instead of the 1.x one.

    Returns:
        The XML text.
    """
    logging = list(profile_for(kafka_version, log4j_version).logging_deps)
    if slf4j2:
        logging = [
            (g, a.replace("log4j-slf4j-impl", "log4j-slf4j2-impl"), v) for g, a, v in logging
        ]
    deps = [("org.apache.kafka", "kafka_2.13", kafka_version), *logging]
    body = "".join(
        "    <dependency>\n"
        f"      <groupId>{g}</groupId>\n"
        f"      <artifactId>{a}</artifactId>\n"
        f"      <version>{v}</version>\n"
        "    </dependency>\n"
        for g, a, v in deps
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
        "  <modelVersion>4.0.0</modelVersion>\n"
        "  <groupId>dev.kafkastate.testing</groupId>\n"
        "  <artifactId>kafka-broker-runtime</artifactId>\n"
        "  <version>0</version>\n"
        "  <packaging>pom</packaging>\n"
        "  <dependencies>\n"
        f"{body}"
        "  </dependencies>\n"
        "</project>\n"
    )


def version_dir(kafka_version: str, root: Path | None = None) -> Path:
    """``<cache root>/kafka-<version>``.

    Args:
        kafka_version: the Kafka version.
        root: the cache root (default :func:`cache_root`).

    Returns:
        The directory path (not created).
    """
    return (root or cache_root()) / f"kafka-{check_version(kafka_version)}"


def cached_libs(kafka_version: str, root: Path | None = None) -> Path | None:
    """The jar directory of a completed earlier fetch, if there is one.

    Args:
        kafka_version: the Kafka version.
        root: the cache root (default :func:`cache_root`).

    Returns:
        ``.../libs`` or ``None``.
    """
    directory = version_dir(kafka_version, root)
    libs = directory / "libs"
    if (directory / _MARKER).is_file() and (libs / f"kafka_2.13-{kafka_version}.jar").is_file():
        return libs
    return None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _copy(mvn: str, directory: Path, out: Path, pom: str, timeout: float) -> None:
    (directory / "pom.xml").write_text(pom)
    log = directory / "mvn.log"
    argv = [mvn, "-B", "-q", "-f", str(directory / "pom.xml")]
    argv += [f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime"]
    argv += [f"-DoutputDirectory={out}"]
    with open(log, "w") as handle:
        try:
            rc = subprocess.run(
                argv, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired as exc:
            raise HarnessError(f"mvn did not finish in {timeout:.0f} s; log: {log}") from exc
    if rc != 0:
        raise HarnessError(
            f"mvn copy-dependencies failed (exit {rc}); is this Kafka version fully published "
            f"on Maven Central? {' '.join(argv)}\nlog: {log}\n{_tail(log)}"
        )


def fetch_kafka_libs(
    kafka_version: str, *, root: Path | None = None, timeout: float = 900.0
) -> Path:
    """Return the directory of Kafka's broker jars, fetching them with Maven on first use.

    Args:
        kafka_version: the Kafka version, e.g. ``"4.3.1"``.
        root: the cache root (default :func:`cache_root`).
        timeout: seconds allowed for the Maven run.

    Returns:
        The ``libs`` directory; ``<libs>/*`` is the broker's classpath.

    Raises:
        PrerequisiteError: the jars are not cached and ``mvn`` is not on PATH.
        HarnessError: Maven failed (the message has the log tail).
    """
    cached = cached_libs(kafka_version, root)
    if cached is not None:
        return cached
    directory = version_dir(kafka_version, root)
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PrerequisiteError("mvn", f"to fetch the Kafka {kafka_version} jars into {directory}")
    with _locked(directory.with_name(directory.name + ".lock")):
        cached = cached_libs(kafka_version, root)
        if cached is not None:  # another process fetched while we waited
            return cached
        directory.mkdir(parents=True, exist_ok=True)
        libs = directory / "libs"
        tmp = directory / f"libs.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        log4j = log4j_version_for(kafka_version)
        _copy(mvn, directory, tmp, render_pom(kafka_version, log4j), timeout)
        jars = sorted(p.name for p in tmp.glob("*.jar"))
        if any(name.startswith("slf4j-api-2.") for name in jars):
            # a future Kafka on SLF4J 2 needs the other binding
            shutil.rmtree(tmp)
            _copy(mvn, directory, tmp, render_pom(kafka_version, log4j, slf4j2=True), timeout)
            jars = sorted(p.name for p in tmp.glob("*.jar"))
        if f"kafka_2.13-{kafka_version}.jar" not in jars:
            raise HarnessError(f"mvn ran but kafka_2.13-{kafka_version}.jar is not in {tmp}")
        shutil.rmtree(libs, ignore_errors=True)
        tmp.rename(libs)
        marker = {"kafka_version": kafka_version, "log4j_version": log4j, "jars": jars}
        (directory / _MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return libs
