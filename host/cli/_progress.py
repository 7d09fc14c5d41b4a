"""A progress bar on stderr for long CLI runs, with a rate and the time left; silent when
stderr is not a terminal. `human_bytes` writes a byte count as people read it (`16.0 MiB`).

    with Progress("import", total_bytes, unit="bytes") as bar:
        bar.advance(len(line))
    # import [###########                   ]  14.2 MiB / 38.0 MiB  37%  9.8 MiB/s  2 s left
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "human_bytes", "human_seconds"]

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def human_bytes(n: float) -> str:
    """`n` bytes in binary units: `512 B`, `1.5 KiB`, `16.0 MiB`, `2.3 GiB`."""
    for unit in _UNITS:
        if abs(n) < 1024 or unit == _UNITS[-1]:
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def human_seconds(s: float) -> str:
    """A duration as `0.4 s`, `12 s`, `3 min 05 s` or `2 h 01 min`."""
    if s < 10:
        return f"{s:.1f} s"
    s = round(s)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """`with Progress("export", total) as bar: bar.advance(n)`; draws at most 10 times a second.

    Shows what is done (of `total` when known, with a bar and a percentage), the rate since
    the start and, with a total, the time left at that rate. `unit` "bytes" shows sizes
    (`human_bytes`); any other unit counts items. Nothing is written unless `stream` is a
    terminal, so a piped or logged run stays quiet. `watch(read)` polls `read()` (what is done,
    e.g. the size of a file being written) from a thread, for work that reports no progress.
    """

    def __init__(self, label: str, total: int | None, stream: TextIO | None = None,
                 unit: str = "") -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self.started = time.monotonic()
        self._drawn = 0.0
        self._width = 0  # characters of the last line drawn (a shorter one pads)
        self._lock = threading.Lock()
        self._watching: threading.Event | None = None
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        """Count `n` more units done; redraw if the last draw is older than 0.1 s."""
        self.done += n
        if self.enabled and time.monotonic() - self._drawn >= 0.1:
            self._draw()

    def watch(self, read: Callable[[], int], every: float = 0.2) -> None:
        """Set `done` to `read()` every `every` seconds on a thread until `close()` (for work
        whose only sign of progress is a growing file); a failing `read` counts as no change."""
        if not self.enabled or self._watcher is not None:
            return
        stop = self._watching = threading.Event()

        def poll() -> None:
            while not stop.wait(every):
                try:
                    now = read()
                except OSError:
                    continue
                self.advance(max(0, now - self.done))

        self._watcher = threading.Thread(target=poll, name="progress", daemon=True)
        self._watcher.start()

    def _amount(self, n: float) -> str:
        return human_bytes(n) if self.unit == "bytes" else f"{int(n):,}"

    def text(self, now: float | None = None) -> str:
        """The line the bar draws (without the leading carriage return)."""
        elapsed = max((now if now is not None else time.monotonic()) - self.started, 1e-9)
        rate = self.done / elapsed
        per = f"{human_bytes(rate)}/s" if self.unit == "bytes" else f"{rate:,.0f}/s"
        done = self._amount(self.done)
        if not self.total:
            return f"{self.label} {done}  {per}  {human_seconds(elapsed)}"
        frac = min(1.0, self.done / self.total)
        bar = "#" * int(frac * 30)
        left = (f"{human_seconds((self.total - self.done) / rate)} left"
                if 0 < rate and self.done < self.total else human_seconds(elapsed))
        return (f"{self.label} [{bar:<30}] {done}/{self._amount(self.total)} {frac:4.0%}"
                f"  {per}  {left}")

    def _draw(self) -> None:
        with self._lock:
            self._drawn = time.monotonic()
            line = self.text(self._drawn)
            pad = " " * max(0, self._width - len(line))
            self._width = len(line)
            self.stream.write(f"\r{line}{pad}")
            self.stream.flush()

    def close(self) -> None:
        """Stop watching; draw the final state and end the line (terminal only)."""
        if self._watching is not None and self._watcher is not None:
            self._watching.set()
            self._watcher.join()
            self._watching = self._watcher = None
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
