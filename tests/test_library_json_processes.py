"""JSONFileStore across real processes: SIGKILL in the middle of writing, two writers on one file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from host.library.json_store import read_file

BATCH = 25

# A child that writes forever: a batch of sets, a delete of an older key, flush(), then it
# reports the batch on stdout. Report `f` (from 0) is made after flush number `f`.
CRASH_CHILD = f"""
import sys
from host.library import JSONFileStore, Memory
path, prefix = sys.argv[1], sys.argv[2]
store = JSONFileStore(path, flush_delay=0)
flushes = 0
i = 0
while True:
    batch = []
    for _ in range({BATCH}):
        key = f"{{prefix}}-{{i}}"
        store.set(key, Memory(content=("payload " * 40) + key, metadata={{"i": i}}))
        batch.append(key)
        i += 1
    if flushes >= 2:
        store.delete(f"{{prefix}}-{{(flushes - 2) * {BATCH}}}")
    store.flush()
    flushes += 1
    sys.stdout.write(" ".join(batch) + "\\n")
    sys.stdout.flush()
"""

TWO_CHILD = """
import sys
from host.library import JSONFileStore, Memory
path, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with JSONFileStore(path, flush_delay=0) as store:
    print("ready", flush=True)
    sys.stdin.readline()  # wait for "go": both opened the file before either writes
    for i in range(n):
        store.set(f"{prefix}-{i}", Memory(content=f"{prefix} {i}"))
        if i % 5 == 4:
            store.delete(f"{prefix}-{i - 2}")
        if i % 20 == 19:
            store.flush()
"""


def _read_reports(proc: subprocess.Popen[str], count: int, timeout: float = 60.0) -> list[str]:
    """Read `count` report lines from the child's stdout (fails if it dies; killed if it hangs)."""
    assert proc.stdout is not None
    guard = threading.Timer(timeout, proc.kill)
    guard.start()
    try:
        lines = []
        for _ in range(count):
            line = proc.stdout.readline()
            assert line, "child exited before reporting"
            lines.append(line)
        return lines
    finally:
        guard.cancel()


def test_sigkill_never_loses_flushed_entries(tmp_path: Path) -> None:
    """After SIGKILL mid-write the file loads and holds every entry whose flush() returned."""
    path = tmp_path / "m.json"
    must_have: set[str] = set()
    must_not: set[str] = set()
    for round_no, reports in enumerate((3, 8, 5, 13)):
        prefix = f"r{round_no}"
        proc = subprocess.Popen(
            [sys.executable, "-c", CRASH_CHILD, str(path), prefix],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            lines = _read_reports(proc, reports)
            time.sleep(0.003 * round_no)  # land the kill at different points of a write
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL
        assert proc.stdout is not None
        # Reports the child made before it died but we had not read yet are in the pipe.
        lines += [line for line in proc.stdout.readlines() if line.endswith("\n")]
        proc.stdout.close()
        for line in lines:
            must_have.update(line.split())
        # Flush f deleted key (f - 2) * BATCH; the kill may have come after the delete of the
        # first unreported flush, so that one key may be either present or absent.
        deleted = {f"{prefix}-{(f - 2) * BATCH}" for f in range(2, len(lines))}
        maybe = f"{prefix}-{(len(lines) - 2) * BATCH}"
        must_not |= deleted
        must_have -= deleted | {maybe}
        on_disk = set(read_file(path))  # raises if the file were damaged
        assert must_have <= on_disk
        assert not (must_not & on_disk)


def test_two_processes_lose_nothing(tmp_path: Path) -> None:
    """Two processes writing one file at once through the lock leave every write of each."""
    path = tmp_path / "m.json"
    n = 300
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TWO_CHILD, str(path), prefix, str(n)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        for prefix in ("a", "b")
    ]
    for proc in procs:
        assert _read_reports(proc, 1) == ["ready\n"]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    expected = set()
    for prefix in ("a", "b"):
        keys = {f"{prefix}-{i}" for i in range(n)}
        keys -= {f"{prefix}-{i - 2}" for i in range(n) if i % 5 == 4}
        expected |= keys
    assert set(read_file(path)) == expected
