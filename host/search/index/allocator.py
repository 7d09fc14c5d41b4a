"""The C allocator, from the indexes: `trim` (its free pages returned to the system) and
`release` (pages of an array's unused room given back). glibc's calls through ctypes; nothing
where they are missing."""

from __future__ import annotations

import ctypes
import threading

__all__ = ["release", "trim", "trim_soon"]

_LIBC: ctypes.CDLL | None | bool = None
PAGE = 4096
MADV_DONTNEED = 4  # Linux


def _call(name: str, *args: object) -> None:
    """glibc's `name(*args)`; nothing (from then on) where it is missing."""
    global _LIBC
    try:
        if _LIBC is None:
            _LIBC = ctypes.CDLL("libc.so.6")
        if isinstance(_LIBC, ctypes.CDLL):
            getattr(_LIBC, name)(*args)
    except (OSError, AttributeError):  # not glibc
        _LIBC = False


def trim() -> None:
    """Ask the C allocator to return its free pages to the system (glibc's `malloc_trim`):
    numpy arrays freed by evictions and builds otherwise stay in its arenas, counted in RSS."""
    _call("malloc_trim", 0)


_TRIMMING = threading.Lock()


def trim_soon() -> None:
    """`trim` in a daemon thread of its own (none when one runs): from the event loop, where
    a trim after a million rows were read and freed held the loop tens of ms."""
    if not _TRIMMING.acquire(blocking=False):
        return

    def run() -> None:
        try:
            trim()
        finally:
            _TRIMMING.release()

    threading.Thread(target=run, name="a2e-trim", daemon=True).start()


def release(start: int, end: int) -> None:
    """The whole pages of the bytes `start`..`end` (addresses inside one allocation, never read
    again before they are written) given back to the system (`madvise(MADV_DONTNEED)`: they
    count in the RSS again only as they are written)."""
    first, last = -(-start // PAGE) * PAGE, end // PAGE * PAGE
    if last > first:
        _call("madvise", ctypes.c_void_p(first), ctypes.c_size_t(last - first), MADV_DONTNEED)
