"""Before a store or a command opens a SQLite file: is this path a database the host may use?

`check_file` looks at it, changing nothing: a folder, a file that is not SQLite, another
application's SQLite database (tables but not the host's `entries` at a `user_version` of 1 or
more; joined only when asked, `serve --adopt`) and a path in a missing folder are refused with
an `UnusableDatabase` naming the path and the fix. An error while opening is said the same way
by `explain`, which finds what the folder or file refuses by trying to create a file there
(root passes permission bits, a read-only file system stops everyone). `remove_files` takes
away what a failed first start created.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
from contextlib import closing
from enum import Enum
from urllib.parse import quote

__all__ = ["FileState", "UnusableDatabase", "check_file", "check_folder", "explain", "remove_files"]

_HEADER = b"SQLite format 3\x00"
# the files a store's database has beside it (SQLite's and the disk reserve, sqlite/space.py)
_COMPANIONS = ("-wal", "-shm", "-journal", "-reserve")
_REASONS = {errno.EROFS: "a read-only file system", errno.EACCES: "permission denied",
            errno.EPERM: "permission denied", errno.ENOSPC: "no space left on the device",
            errno.EDQUOT: "disk quota exceeded"}


class UnusableDatabase(ValueError):
    """A database path the host cannot use: the message is one line naming the path and the
    fix (the CLI prints it and exits 2)."""


class FileState(Enum):
    """What `check_file` found at a database path."""

    ABSENT = "absent"  # no file: opening creates it (and removing it undoes a failed start)
    EMPTY = "empty"  # a file with no tables (0 bytes, or a SQLite file never written)
    OURS = "ours"  # the host's database
    ADOPTED = "adopted"  # another application's tables, which the host may join (`adopt`)

    @property
    def new(self) -> bool:
        """True when the host's tables are not there yet (opening creates them)."""
        return self is not FileState.OURS


def in_memory(path: str) -> bool:
    """True for SQLite's in-memory and URI names, which name no file to check."""
    return path == ":memory:" or path.startswith("file:")


def check_file(path: str, *, create: bool, adopt: bool = False, option: str = "--db") -> FileState:
    """Look at the database path `path` before opening it, changing nothing.

    Raises `UnusableDatabase` for a folder, a file that is not SQLite, another application's
    SQLite database (tables without the host's own) unless `adopt`, a missing file unless
    `create`, and a path whose folder is missing or is a file. The messages tell to change
    `option` (how the user gave the path).
    """
    if in_memory(path):
        return FileState.ABSENT
    full = os.path.abspath(path)
    if os.path.isdir(full):
        raise UnusableDatabase(
            f"{full} is a folder, not a database file: name a file in it, e.g. {option}"
            f" {os.path.join(full, 'a2e-host.db')}")
    try:
        with open(full, "rb") as fh:
            head = fh.read(len(_HEADER))
    except (FileNotFoundError, NotADirectoryError):
        if not create:
            raise UnusableDatabase(
                f"no database at {full}: check {option} (or store.db of the configuration);"
                " `a2e-host serve` creates a new one") from None
        check_folder(full, option)
        return FileState.ABSENT
    except OSError as exc:
        raise UnusableDatabase(f"cannot read the database {full} ({_reason(exc)}): run as a"
                               f" user who may read and write it, or choose another {option}"
                               ) from None
    if not head:
        return FileState.EMPTY
    if head != _HEADER:
        raise UnusableDatabase(
            f"{full} is not a SQLite database: point {option} at the host's database, or at a"
            " path where a new one may be created")
    try:  # read-write but only reading: its last close removes the -wal and -shm it opened
        with closing(sqlite3.connect(f"file:{quote(full)}?mode=rw", uri=True)) as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            tables = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")]
    except sqlite3.Error as exc:
        raise explain(full, exc, option) from None
    if not tables:
        return FileState.EMPTY
    if version >= 1 and "entries" in tables:
        return FileState.OURS
    if adopt:
        return FileState.ADOPTED
    shown = ", ".join(tables[:5]) + (f" and {len(tables) - 5} more" if len(tables) > 5 else "")
    raise UnusableDatabase(
        f"{full} is another application's SQLite database (tables {shown}): choose another"
        f" {option}, or start `a2e-host serve --adopt` once to add the host's tables beside"
        " them")


def check_folder(path: str, option: str = "--db") -> None:
    """Raise `UnusableDatabase` unless the folder a new file at `path` goes in exists."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(folder):
        return
    up = folder
    while not os.path.exists(up):  # the first ancestor that exists: a file, or the root
        up = os.path.dirname(up)
    if not os.path.isdir(up):
        raise UnusableDatabase(
            f"{up} is a file, not a folder, so nothing can be created at"
            f" {os.path.abspath(path)}: choose a {option} path in a folder")
    raise UnusableDatabase(
        f"the folder {folder} does not exist: create it (mkdir -p {folder}) or choose another"
        f" {option}")


def explain(path: str, exc: BaseException, option: str = "--db") -> UnusableDatabase:
    """The operator's message for `exc`, raised while opening or writing the database at
    `path`: what its folder or the file refuses (a read-only file system, no permission, a
    full disk), else the error itself."""
    full = os.path.abspath(path)
    folder = os.path.dirname(full)
    why = _unwritable_folder(folder)
    if why:
        return UnusableDatabase(
            f"cannot write in {folder} ({why}), where {full} and the files beside it go:"
            f" choose a {option} on a writable disk, or make the folder writable")
    if os.path.exists(full) and (why := _unwritable_file(full)):
        return UnusableDatabase(
            f"cannot write {full} ({why}): run as a user who may write it, or choose another"
            f" {option}")
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        return UnusableDatabase(f"{full} is damaged ({exc}): restore a backup"
                                f" (`a2e-host backup` makes them) or choose another {option}")
    detail = _reason(exc) if isinstance(exc, OSError) else str(exc)
    return UnusableDatabase(f"cannot open the database {full}: {detail}")


def _reason(exc: OSError) -> str:
    return _REASONS.get(exc.errno or 0) or exc.strerror or str(exc)


def _unwritable_folder(folder: str) -> str | None:
    """Why no file can be created in `folder` (None when one can): tried, not guessed, so a
    read-only file system and permissions (which root bypasses) both show."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".a2e-host-probe-", dir=folder)
    except OSError as exc:
        return _reason(exc)
    os.close(fd)
    os.unlink(probe)
    return None


def _unwritable_file(full: str) -> str | None:
    try:
        os.close(os.open(full, os.O_RDWR))
    except OSError as exc:
        return _reason(exc)
    return None


def remove_files(path: str) -> None:
    """Delete the database file at `path` and the files beside it (after a failed first start:
    a start that fails leaves nothing behind)."""
    if in_memory(path):
        return
    for suffix in ("", *_COMPANIONS):
        try:
            os.unlink(path + suffix)
        except OSError:  # not there (or, on a read-only disk, never made)
            pass
