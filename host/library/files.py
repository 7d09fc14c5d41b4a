"""File primitives of the JSON file store: an inter-process lock and an atomic, durable replace.

`FileLock` is an exclusive `flock` on a lock file beside the data file. The kernel releases it
when its holder dies (even by SIGKILL), so a crashed writer never leaves a stale lock. The lock
file also carries a *generation token*: each writer writes a fresh token into it (under the lock,
before it replaces the data file), so another store can tell, by reading a few bytes, whether the
data file may have changed since its own last write. The lock file is never deleted (deleting a
flock'ed file lets two processes lock two different files). POSIX only.

`atomic_write` writes a temporary file, fsyncs it, renames it over the target and fsyncs the
folder: after it returns the new contents survive a crash; if the process dies before the rename,
the old file is untouched (a stale temporary file may remain and is overwritten next time).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Self

__all__ = ["FileLock", "StoreLockedError", "atomic_write"]

_TOKEN_BYTES = 64


class StoreLockedError(TimeoutError):
    """Another process held the store's lock file for longer than the lock timeout."""


class FileLock:
    """An exclusive inter-process lock on `path` (created if missing), with a generation token.

    Use as a context manager, or `acquire()`/`release()`. Not reentrant. `close()` releases it
    and closes the file.
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = path
        self.timeout = timeout
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def acquire(self) -> None:
        """Take the lock, waiting up to `timeout` seconds; `StoreLockedError` after that."""
        deadline = time.monotonic() + self.timeout
        pause = 0.001
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StoreLockedError(
                        f"{self.path} stayed locked by another process for {self.timeout} s"
                    ) from None
                time.sleep(pause)
                pause = min(pause * 2, 0.05)

    def release(self) -> None:
        """Release the lock."""
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def read_token(self) -> str:
        """The generation token (call with the lock held); "" for a new lock file."""
        return os.pread(self._fd, _TOKEN_BYTES, 0).decode("ascii", "replace")

    def write_token(self, token: str) -> None:
        """Replace the generation token (call with the lock held)."""
        data = token.encode("ascii")
        if len(data) > _TOKEN_BYTES:
            raise ValueError("token too long")
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def close(self) -> None:
        """Release the lock (if held) and close the lock file. Closing twice is harmless."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def fsync_dir(folder: Path) -> None:
    """Make a rename or creation in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, chunks: list[str]) -> None:
    """Replace `path` with the UTF-8 text `chunks` atomically and durably (see module docstring).

    Raises `OSError` (disk full, permissions); the old file is then unchanged.
    """
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", buffering=1 << 20) as fh:
            fh.writelines(chunks)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)
