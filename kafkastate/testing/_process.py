"""A JVM the harness runs in its own process group: launch, signal, wait, kill.

On Linux the kernel SIGKILLs it when the thread that started it dies (``setpriv
--pdeathsig``), unless it is detached (the CLI's ``up``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ._errors import HarnessError

__all__ = ["JvmProcess", "pid_alive", "tail"]


def _pdeathsig_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL`` (util-linux): the kernel SIGKILLs the JVM when the thread
    that started it dies, even if this process is SIGKILLed and atexit never runs. setpriv
    execs java, so the pid stays the JVM's. Absent (macOS, busybox): atexit only."""
    if not sys.platform.startswith("linux"):
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "KILL", "--"] if setpriv else []


def pid_alive(pid: int, marker: str | None) -> bool:
    """Whether ``pid`` runs and (on Linux, if ``marker`` is given) its command line has it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    proc = Path(f"/proc/{pid}")
    if proc.exists():
        try:
            stat = (proc / "stat").read_text()
            if stat.rsplit(")", 1)[-1].split()[0] == "Z":
                return False
            if marker is not None and marker not in (proc / "cmdline").read_bytes().decode(
                errors="replace"
            ):
                return False  # the pid was reused by something else
        except OSError:
            return False
    return True


def tail(path: Path, lines: int = 40) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return f"({path} not readable)"
    return "\n".join(text.splitlines()[-lines:])


class JvmProcess:
    """One JVM the harness launched in its own process group, with its stdout log."""

    def __init__(self, name: str, node_dir: Path, argv: list[str], marker: Path, *, detached: bool):
        self._name = name
        self._node_dir = node_dir
        self._argv = argv
        self._marker = marker
        self._detached = detached
        self._popen: subprocess.Popen[bytes] | None = None
        self._pid: int | None = None
        self._paused = False
        self._killed_at: float | None = None

    @property
    def stdout_file(self) -> Path:
        """The JVM's stdout+stderr (crashes, JVM errors), appended across restarts."""
        return self._node_dir / "logs" / "stdout.log"

    @property
    def pid(self) -> int | None:
        """The JVM's process id while it runs (it leads its own process group)."""
        return self._pid if self.is_running else None

    @property
    def is_running(self) -> bool:
        """Whether the JVM process exists (a paused one counts as running)."""
        if self._pid is None:
            return False
        if self._popen is not None:
            return self._popen.poll() is None
        return pid_alive(self._pid, str(self._marker))

    def _launch(self) -> None:
        if self.is_running:
            raise HarnessError(f"{self._name} is already running (pid {self._pid})")
        (self._node_dir / "logs").mkdir(parents=True, exist_ok=True)
        with open(self.stdout_file, "ab") as out:
            out.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting ===\n".encode())
            out.flush()
            prefix = [] if self._detached else _pdeathsig_prefix()
            self._popen = subprocess.Popen(
                [*prefix, *self._argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self._node_dir,
                start_new_session=True,
            )
        self._pid = self._popen.pid
        self._paused = False

    def _signal(self, sig: int) -> None:
        if self._pid is None or not self.is_running:  # never signal a reaped/reused pid
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._pid, sig)

    def _wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if self._popen is not None:
            try:
                self._popen.wait(timeout=max(0.0, timeout))
            except subprocess.TimeoutExpired:
                return False
            return True
        while self.is_running:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    def kill(self) -> None:
        """SIGKILL the JVM (no controlled shutdown, like a crash) and reap it."""
        if self._pid is None:
            return
        self._signal(signal.SIGKILL)
        self._paused = False
        self._wait_exit(30.0)
        self._killed_at = time.monotonic()
