"""Process helpers shared by the scripts that start servers: a free port, waiting until a
process listens, stopping it (SIGTERM, then SIGKILL after a grace period), and the CPU time a
process or thread has used."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

__all__ = ["cpu_seconds", "free_port", "stop_process", "wait_port"]

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


def cpu_seconds(stat_path: str) -> float:
    """User + system CPU seconds in a /proc stat file: `/proc/PID/stat` counts every thread of
    the process, `/proc/PID/task/TID/stat` one thread. `OSError` if it is gone."""
    with open(stat_path) as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS
