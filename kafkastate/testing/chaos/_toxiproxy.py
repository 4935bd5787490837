"""Toxiproxy (Shopify's TCP fault proxy): build it once into the harness cache, run its
server on loopback, drive it over its HTTP API.

The binary is built from source with the Go toolchain (``go install
github.com/Shopify/toxiproxy/v2/cmd/server@<version>``) into
``<cache root>/toxiproxy-<version>/``, like the Kafka jars: later runs reuse it without the
network. ``$KAFKASTATE_TOXIPROXY`` names a binary to use instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .._config import HOST, free_ports
from .._errors import HarnessError, PrerequisiteError
from .._maven import _locked, cache_root
from .._process import _pdeathsig_prefix, tail

__all__ = ["TOXIPROXY_VERSION", "Toxiproxy", "ensure_toxiproxy"]

TOXIPROXY_VERSION = "2.12.0"
_MODULE = "github.com/Shopify/toxiproxy/v2/cmd/server"
_GO_CANDIDATES = ("go", "/usr/local/go/bin/go")


def _find_go() -> str:
    for candidate in _GO_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    raise PrerequisiteError("go", f"to build Toxiproxy {TOXIPROXY_VERSION} (the chaos proxy)")


def ensure_toxiproxy(version: str = TOXIPROXY_VERSION, *, timeout: float = 900.0) -> Path:
    """The Toxiproxy server binary, built into the harness cache on first use.

    Args:
        version: the Toxiproxy release to build.
        timeout: seconds ``go install`` may take (a cold module cache on 2 cores takes
            minutes).

    Returns:
        The executable.

    Raises:
        PrerequisiteError: no Go toolchain and no cached binary.
        HarnessError: the build failed (the message has go's output).
    """
    explicit = os.environ.get("KAFKASTATE_TOXIPROXY")
    if explicit:
        return Path(explicit)
    directory = cache_root() / f"toxiproxy-{version}"
    binary = directory / "toxiproxy-server"
    if binary.exists():
        return binary
    directory.mkdir(parents=True, exist_ok=True)
    with _locked(directory / ".lock"):
        if binary.exists():
            return binary
        go = _find_go()
        env = {**os.environ, "GOBIN": str(directory), "GOFLAGS": "-mod=mod"}
        done = subprocess.run(
            [go, "install", f"{_MODULE}@v{version}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode != 0:
            raise HarnessError(f"go install {_MODULE}@v{version} failed:\n{done.stderr[-3000:]}")
        (directory / "server").replace(binary)
    return binary


API_TIMEOUT = 120.0
"""Seconds one call of toxiproxy's HTTP API may take. Adding or removing a toxic waits for
every link of the proxy to take it up, and a link inside a slow toxic (16 KB/s of
bandwidth, mid-way through a large write) finishes its chunk first: 13.8 s was seen under
the long run's load, past an earlier 10 s limit, which failed the run although the toxic
was in place."""


class Toxiproxy:
    """A Toxiproxy server process on a free loopback port, and its HTTP API.

    Use as a context manager, or call :meth:`stop`.
    """

    def __init__(
        self, binary: Path, log_file: Path, *, port: int | None = None, seed: int = 0
    ) -> None:
        self.port = port if port is not None else free_ports(1)[0]
        self.seed = seed
        self.log_file = log_file
        self._binary = binary
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> Toxiproxy:
        """Launch the server and wait until its API answers.

        Returns:
            This proxy.

        Raises:
            HarnessError: it exited or did not answer in time.
        """
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                [
                    *_pdeathsig_prefix(),  # gone with this thread even if we are SIGKILLed
                    *(str(self._binary), "-host", HOST, "-port", str(self.port)),
                    *("-seed", str(self.seed)),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise HarnessError(f"toxiproxy exited:\n{tail(self.log_file)}")
            try:
                self._call("GET", "/version")
                return self
            except (OSError, HarnessError):
                time.sleep(0.1)
        self.stop()
        raise HarnessError(f"toxiproxy did not answer in {timeout} s:\n{tail(self.log_file)}")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def __enter__(self) -> Toxiproxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the HTTP API ----------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"http://{HOST}:{self.port}{path}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=API_TIMEOUT) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            raise HarnessError(f"toxiproxy {method} {path}: {exc.code} {exc.read()!r}") from exc
        return json.loads(raw) if raw.strip() else None

    def create_proxy(self, name: str, listen_port: int, upstream_port: int) -> None:
        """Listen on ``127.0.0.1:listen_port`` and forward to ``127.0.0.1:upstream_port``."""
        self._call(
            "POST",
            "/proxies",
            {
                "name": name,
                "listen": f"{HOST}:{listen_port}",
                "upstream": f"{HOST}:{upstream_port}",
                "enabled": True,
            },
        )

    def set_enabled(self, name: str, enabled: bool) -> None:
        """Disable a proxy (its connections are closed and its port refuses new ones: a
        network partition of that broker from the clients) or enable it again."""
        self._call("POST", f"/proxies/{name}", {"enabled": enabled})

    def add_toxic(
        self,
        proxy: str,
        name: str,
        kind: str,
        attributes: dict[str, int],
        *,
        stream: str = "downstream",
        toxicity: float = 1.0,
    ) -> None:
        """Add a toxic (``latency``, ``bandwidth``, ``reset_peer``...) to a proxy."""
        self._call(
            "POST",
            f"/proxies/{proxy}/toxics",
            {
                "name": name,
                "type": kind,
                "stream": stream,
                "toxicity": toxicity,
                "attributes": attributes,
            },
        )

    def remove_toxic(self, proxy: str, name: str) -> None:
        """Remove a toxic from a proxy."""
        self._call("DELETE", f"/proxies/{proxy}/toxics/{name}")

    def reset(self) -> None:
        """Enable every proxy and remove every toxic."""
        self._call("POST", "/reset")
