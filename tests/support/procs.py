"""Process helpers shared by the tests and the scripts that start servers: a free port, waiting
until a process listens, `a2e-host serve` in a subprocess (`HostProcess`), stopping a process
(SIGTERM, then SIGKILL after a grace period), and the CPU time a process or thread has used."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

__all__ = ["LOAD_LIMITS", "HostProcess", "cpu_seconds", "free_port", "stop_process", "wait_port"]

# The `[limits]` of a host under a benchmark's load: its defaults, except the limits that would
# refuse the load itself (every connection comes from 127.0.0.1, and one connection sends far
# more than 5,000 frames a second).
LOAD_LIMITS = """\
[limits]
max_connections = 20000
max_connections_per_ip = 20000
requests_per_second = 0
"""

TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    """Return once something listens on `port`; `RuntimeError` if `proc` exits first (with its
    stderr when that is a pipe), `TimeoutError` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"server exited with {proc.returncode}: {err}".rstrip(": "))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


def stop_process(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGTERM `proc` (if still running) and wait; SIGKILL it after `grace` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class HostProcess:
    """`a2e-host serve` on `db` (a file or a `postgresql://` URL) on a free loopback port, in a
    subprocess, started and listening. `extra` are more `serve` arguments; `env` is added to
    this process's environment, without the variables named in `unset`; `stdout`/`stderr` as
    for `subprocess.Popen`."""

    def __init__(
        self, db: str | Path, *extra: str, transport: str | None = None,
        log_level: str | None = None, cwd: str | Path | None = None,
        env: dict[str, str] | None = None, stdout: int | IO[Any] | None = subprocess.PIPE,
        stderr: int | IO[Any] | None = subprocess.PIPE, timeout: float = 30.0,
        unset: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "host.cli"]
        if log_level is not None:
            cmd += ["--log-level", log_level]
        cmd += ["serve", "--port", str(self.port), "--db", str(db)]
        if transport is not None:
            cmd += ["--transport", transport]
        child_env = {k: v for k, v in os.environ.items() if k not in unset}
        self.proc = subprocess.Popen([*cmd, *extra], cwd=cwd, env={**child_env, **(env or {})},
                                     stdout=stdout, stderr=stderr)
        try:
            wait_port(self.port, self.proc, timeout)
        except BaseException:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send `sig` and wait for the exit code (`subprocess.TimeoutExpired` after `timeout`)."""
        self.proc.send_signal(sig)
        return self.proc.wait(timeout)

    def terminate(self, grace: float = 30.0) -> None:
        """SIGTERM it if still running and wait; SIGKILL after `grace` seconds."""
        stop_process(self.proc, grace)


def cpu_seconds(stat_path: str) -> float:
    """User + system CPU seconds in a /proc stat file: `/proc/PID/stat` counts every thread of
    the process, `/proc/PID/task/TID/stat` one thread. `OSError` if it is gone."""
    with open(stat_path) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid: int) -> float:
    """The resident memory of process `pid` in MiB (VmRSS of `/proc/PID/status`); 0.0 when
    the file has no such line."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0
