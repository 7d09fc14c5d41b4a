"""`JSONFileStore`: the persistent backend (FR-3) -- an in-memory table written to one JSON file.

Durability model (see docs/library.md):
- The in-memory table is the truth for this process: get/set/delete/search never touch the disk
  and cost what `InMemoryStore`'s do.
- One background writer thread writes the whole table to the file after each change, waiting
  `flush_delay` seconds first so that a burst of changes costs one write; changes made while a
  write runs go into the next one. Each write is `files.atomic_write`: temporary file, fsync,
  rename over the old file, fsync of the folder. The file is therefore always either the old or
  the new complete version, whenever the process dies.
- `flush()` returns once every change made before the call is on disk (or raises the write's
  error); `close()` flushes and stops the writer; `with` and `async with` close on exit. Changes
  not yet flushed are lost if the process dies first. Stores still open when the interpreter
  exits normally are closed (flushed) by an `atexit` hook.
- Access times recorded by `get` do not start a write by themselves; they go out with the next
  write (or `flush()`).
- Other processes: every write happens under the lock file `<name>.lock`. A writer reads the
  lock's generation token first; if another store wrote since this one last did, it re-reads the
  file and applies its own changes since its last write on top (per key: its sets and deletes win,
  keys it did not touch keep the other process's version), writes the result and adopts it as its
  table. So two processes writing the same file lose nothing but what both wrote to the same key
  (the later write wins). A store sees other processes' writes when it next writes or flushes.
- The file carries `format` and `version`; a file of a newer version, or not a store file, is
  refused with `StoreFormatError` and left as it is.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import json
import secrets
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

from host.config import LibraryConfig, SearchConfig
from host.library.files import FileLock, atomic_write
from host.library.memory_store import InMemoryStore
from host.library.models import Memory
from host.library.search import Row, make_row
from host.library.table import Table
from host.search.rank import RankWeights

__all__ = ["FORMAT", "FORMAT_VERSION", "JSONFileStore", "StoreFormatError"]

FORMAT = "a2e-host/library-memories"
FORMAT_VERSION = 1

_OPEN: weakref.WeakSet[JSONFileStore] = weakref.WeakSet()


class StoreFormatError(ValueError):
    """The file is not a JSON file store, is damaged, or has a newer format version."""


def _with_access(row: Row, accessed: Row) -> Row:
    """`row` with the later of its and `accessed`'s last access (memory otherwise `row`'s)."""
    if accessed.accessed <= row.accessed:
        return row
    return make_row(row.memory.model_copy(update={"last_accessed": accessed.memory.last_accessed}))


def _apply(
    rows: dict[str, Row], pending: dict[str, Row | None], touched: dict[str, Row]
) -> None:
    """Apply a store's own changes on top of `rows` (in place)."""
    for key, row in pending.items():
        if row is None:
            rows.pop(key, None)
        else:
            rows[key] = row
    for key, accessed in touched.items():
        if key in rows:
            rows[key] = _with_access(rows[key], accessed)


def _chunks(rows: dict[str, Row]) -> list[str]:
    """The file's text: a header, then one memory a line (`fragment`s cached on the rows)."""
    header = json.dumps({"format": FORMAT, "version": FORMAT_VERSION})
    out = [header[:-1] + ', "memories": {']
    sep = "\n"
    for key, row in rows.items():
        frag = row.fragment
        if frag is None:
            frag = row.fragment = json.dumps(row.memory.to_dict(), ensure_ascii=False)
        out.append(sep + json.dumps(key, ensure_ascii=False) + ": " + frag)
        sep = ",\n"
    out.append("\n}}\n")
    return out


def read_file(path: Path) -> dict[str, Row]:
    """The rows stored in `path` ({} when it does not exist); `StoreFormatError` if unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise StoreFormatError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise StoreFormatError(f"{path} is not a {FORMAT} file")
    version = data.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise StoreFormatError(
            f"{path} has format version {version!r}; this library reads up to {FORMAT_VERSION}"
        )
    memories = data.get("memories")
    if not isinstance(memories, dict):
        raise StoreFormatError(f"{path} has no memories object")
    try:
        with _gc_paused():
            return {key: make_row(Memory.from_dict(value)) for key, value in memories.items()}
    except ValueError as exc:
        raise StoreFormatError(f"{path} holds an invalid memory: {exc}") from None


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while building many objects that all stay alive (a 3-4x faster load:
    otherwise each collection walks every memory built so far)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class JSONFileStore(InMemoryStore):
    """A `Store` persisted to the JSON file `path` (see the module docstring).

    Opening reads the file under its lock (`StoreFormatError` for a bad file, `StoreLockedError`
    when another process holds the lock longer than `lock_timeout`) and starts the writer thread.
    Close it (`close()`, `with`, `async with`) to make the last changes durable and stop the thread.
    Unset timings come from `host.config.LibraryConfig`.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        weights: RankWeights | None = None,
        flush_delay: float | None = None,
        retry_delay: float | None = None,
        lock_timeout: float | None = None,
        search: SearchConfig | Literal[False] | None = None,
    ) -> None:
        super().__init__(weights=weights, search=search)
        cfg = LibraryConfig()
        self.path = Path(path)
        self.flush_delay = cfg.json_flush_delay if flush_delay is None else flush_delay
        self.retry_delay = cfg.json_retry_delay if retry_delay is None else retry_delay
        timeout = cfg.json_lock_timeout if lock_timeout is None else lock_timeout
        self._cond = threading.Condition(self._lock)
        self._pending: dict[str, Row | None] = {}  # changes since the last write; None = deleted
        self._touched: dict[str, Row] = {}  # rows read by get since the last write
        self._dirty = False
        self._force = False
        self._closing = False
        self._retry_wait = False
        self._cycle_started = 0
        self._cycle_finished = 0
        self._last_ok = 0
        self._error: BaseException | None = None
        self.writes = 0  # completed file writes (read it to watch coalescing)
        self._filelock = FileLock(self.path.with_name(self.path.name + ".lock"), timeout)
        try:
            with self._filelock:
                self._token = self._filelock.read_token()
                self._table = Table(read_file(self.path))
        except BaseException:
            self._filelock.close()
            raise
        self._thread = threading.Thread(
            target=self._run, name=f"JSONFileStore({self.path.name})", daemon=True
        )
        self._thread.start()
        _OPEN.add(self)

    # Hooks of InMemoryStore, called with the lock held.
    def _changed(self, key: str, row: Row | None) -> None:
        self._pending[key] = row
        self._touched.pop(key, None)
        self._dirty = True
        self._cond.notify_all()

    def _accessed(self, key: str, row: Row) -> None:
        self._touched[key] = row

    # The writer thread.
    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._dirty or self._force or self._closing):
                    self._cond.wait()
                if not (self._force or self._closing):
                    wait = self.retry_delay if self._retry_wait else self.flush_delay
                    deadline = time.monotonic() + wait
                    while not (self._force or self._closing):
                        left = deadline - time.monotonic()
                        if left <= 0:
                            break
                        self._cond.wait(left)
                if self._closing and not self._force:
                    return
                self._cycle_started += 1
                cycle = self._cycle_started
                self._force = self._dirty = False
                pending, self._pending = self._pending, {}
                touched, self._touched = self._touched, {}
                snapshot = dict(self._table.rows)
            try:
                self._write(pending, touched, snapshot)
            except BaseException as exc:  # flush() raises it; the changes are retried
                with self._cond:
                    for key, row in pending.items():
                        self._pending.setdefault(key, row)
                    for key, accessed in touched.items():
                        if key not in self._pending:
                            self._touched.setdefault(key, accessed)
                    self._dirty = self._dirty or bool(pending)
                    self._error = exc
                    self._retry_wait = True
                    self._cycle_finished = cycle
                    self._cond.notify_all()
                continue
            with self._cond:
                self._last_ok = self._cycle_finished = cycle
                self._retry_wait = False
                self._cond.notify_all()

    def _write(
        self, pending: dict[str, Row | None], touched: dict[str, Row], snapshot: dict[str, Row]
    ) -> None:
        """One write cycle, under the file lock (see the module docstring)."""
        with self._filelock:
            current = self._filelock.read_token()
            if current != self._token:
                snapshot = read_file(self.path)
                _apply(snapshot, pending, touched)
                with self._lock:
                    fresh = dict(snapshot)
                    _apply(fresh, self._pending, self._touched)
                    self._table = Table(fresh)
                self._token = current
            if not (pending or touched):
                return
            token = secrets.token_hex(16)
            self._filelock.write_token(token)
            self._token = token
            atomic_write(self.path, _chunks(snapshot))
            self.writes += 1

    def _flush_locked(self) -> None:
        want = self._cycle_started + 1
        self._force = True
        self._cond.notify_all()
        while self._cycle_finished < want:
            self._cond.wait()
        if self._last_ok < want and self._error is not None:
            raise self._error

    def flush(self) -> None:
        """Return once every change made before this call is on disk, and pick up other
        processes' writes. Raises the write's error (`OSError`, `StoreLockedError`,
        `StoreFormatError`); the changes stay queued and are retried."""
        with self._cond:
            self._check_open()
            self._flush_locked()

    def close(self) -> None:
        """Flush, stop the writer and release the lock file; later calls raise
        `StoreClosedError`. Raises the last write's error, after releasing everything.
        Closing twice is harmless."""
        error: BaseException | None = None
        with self._cond:
            if self._closed:
                return
            self._closed = True
            try:
                self._flush_locked()
            except BaseException as exc:  # raised after releasing everything
                error = exc
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self._filelock.close()
        _OPEN.discard(self)
        self._close_search()
        if error is not None:
            raise error

    async def aflush(self) -> None:
        """`flush()` without blocking the event loop."""
        await asyncio.to_thread(self.flush)


@atexit.register
def _close_open_stores() -> None:
    for store in list(_OPEN):
        try:
            store.close()
        except Exception:  # nothing to report to at exit
            pass
