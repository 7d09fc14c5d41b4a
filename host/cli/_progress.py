"""A progress bar on stderr for long CLI runs; silent when stderr is not a terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """`with Progress("export", total) as bar: bar.advance(n)`; draws at most 10 times a second.

    With `total` None it shows a count. Nothing is written unless `stream` is a terminal, so a
    piped or logged run stays quiet.
    """

    def __init__(self, label: str, total: int | None, stream: TextIO | None = None) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty()
        self._drawn = 0.0

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        """Count `n` more units done; redraw if the last draw is older than 0.1 s."""
        self.done += n
        if self.enabled and time.monotonic() - self._drawn >= 0.1:
            self._draw()

    def _draw(self) -> None:
        self._drawn = time.monotonic()
        if self.total:
            frac = min(1.0, self.done / self.total)
            bar = "#" * int(frac * 30)
            text = f"\r{self.label} [{bar:<30}] {self.done}/{self.total} {frac:4.0%}"
        else:
            text = f"\r{self.label} {self.done}"
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        """Draw the final state and end the line (terminal only)."""
        if self.enabled:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()
