"""The disk under a SQLite store: a reserve that lets forgets run when the disk is full.

At open the store claims a reserve file beside the database (`<db>-reserve`,
`storage.disk_reserve_bytes`, allocated with `posix_fallocate` so the blocks are really taken).
When a write fails because the disk is full (SQLITE_FULL, ENOSPC), the writer calls `release()`:
the reserve file is deleted, which gives the WAL room for deletes, and the store is *full*:
writes that grow the database are refused (`StorageFull`, `memory_full` with
`detail.reason` "disk_full") without being tried, deletes and in-place updates still run, and
`/readyz` answers 503. `recover()` (from the writer, each group while full, and from `/readyz`:
one `statvfs`, ~2 us) claims the reserve again once the filesystem has room for twice the
reserve (with no reserve: 1 MiB free); that ends the full state, so writes resume with no
restart.

Used on the writer's thread (`release`, `recover` in a commit) and on the loop (`recover` from
`/readyz`); the one lock keeps the two from claiming at once.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
import time

__all__ = ["DiskSpace", "is_disk_full"]

log = logging.getLogger("a2e_host.store")

_SQLITE_FULL = 13
_NO_ROOM = (errno.ENOSPC, errno.EDQUOT)
NO_RESERVE_ROOM = 1 << 20  # with no reserve: free bytes that end the full state


def is_disk_full(exc: BaseException) -> bool:
    """True for the errors of a write that found no room on the disk."""
    if isinstance(exc, sqlite3.Error):  # the primary code, without the extended bits
        return getattr(exc, "sqlite_errorcode", 0) & 0xFF == _SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in _NO_ROOM


class DiskSpace:
    """The reserve of one database file and whether the disk is full (see the module)."""

    def __init__(self, db_path: str, reserve_bytes: int) -> None:
        self.path = f"{db_path}-reserve"
        self.folder = os.path.dirname(os.path.abspath(db_path))
        self.reserve_bytes = reserve_bytes
        self.full = False
        self.since = 0.0  # time.time() the disk was found full
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """False for `:memory:` databases and a reserve of 0 bytes."""
        return self.reserve_bytes > 0

    def claim(self) -> bool:
        """Allocate the reserve file (at open, and to end the full state); False when the disk
        has no room for it (the store is then full)."""
        if not self.enabled:
            return True
        with self._lock:
            return self._claim()

    def _claim(self) -> bool:
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.reserve_bytes)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno not in _NO_ROOM:
                log.warning("cannot allocate the disk reserve %s: %s", self.path, exc)
                return not self.full  # no reserve on this filesystem: leave the state as it is
            self._unlink()
            self._enter_full("the disk reserve cannot be allocated")
            return False
        if self.full:
            log.warning("the disk has room again: writes resume (reserve of %d bytes claimed)",
                        self.reserve_bytes)
        self.full = False
        return True

    def release(self) -> None:
        """A write found the disk full: give the reserve back for deletes; the store is full."""
        with self._lock:
            self._unlink()
            self._enter_full("a write found the disk full")

    def recover(self) -> bool:
        """True when not full, or the disk has room again (the reserve is claimed back)."""
        if not self.full:
            return True
        free = self.free_bytes()
        if free < (2 * self.reserve_bytes if self.enabled else NO_RESERVE_ROOM):
            return False
        with self._lock:
            if not self.full:
                return True
            if self.enabled:
                return self._claim()
            self.full = False
            log.warning("the disk has room again: writes resume (%d bytes free)", free)
            return True

    def free_bytes(self) -> int:
        """Bytes free on the database's filesystem for this user (-1 when unknown)."""
        try:
            st = os.statvfs(self.folder)
        except OSError:
            return -1
        return st.f_bavail * st.f_frsize

    def _unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot delete the disk reserve %s: %s", self.path, exc)

    def _enter_full(self, why: str) -> None:
        if not self.full:
            self.full = True
            self.since = time.time()
            log.error("disk full under %s (%s): stores are refused with memory_full until the"
                      " disk has room; forgets still run", self.folder, why)
