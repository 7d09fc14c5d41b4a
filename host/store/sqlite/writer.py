"""One writer thread per database: a queue of write operations, committed in groups.

Callers submit a function `fn(conn, *args)`; the writer gathers everything queued while the
previous commit ran (up to `batch_max`: the group grows with the load), runs them inside one
`BEGIN IMMEDIATE ... COMMIT`, and only then resolves the callers' futures on their event loop.
An operation that raises rolls back alone: the group runs first without savepoints (they cost
two statements an operation) and, if an operation raised, is rolled back and run again with
each operation in its own SAVEPOINT. So `fn` may run twice and must have no effect outside the
connection. A failed COMMIT fails the whole group. A future that resolves without an exception
means its writes are durable.

Operations may hold writes back in a `GroupWrites` given to the writer (and to them, as an
argument): the writer flushes it after the group's last operation, before COMMIT, clears it
when the group rolls back, and restores it to its mark when one operation rolls back to its
savepoint.

A full disk (`host.store.sqlite.space`): a group that fails for want of room releases the
store's disk reserve and is run again without the operations that grow the database (those
fail with `StorageFull`); while the disk stays full such operations are refused without being
tried, and the ones submitted with `grows=False` (deletes, in-place updates) still run.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from host.store.records import StorageFull
from host.store.sqlite.space import DiskSpace, is_disk_full

__all__ = ["Writer", "CommitObserver", "GroupWrites"]

CommitObserver = Callable[[int, float], None]  # (operations in the group, seconds)
_STOP = object()


class GroupWrites(Protocol):
    """Writes a group's operations held back for the end of the group
    (`host.store.sqlite.deferred.Deferred`)."""

    def mark(self) -> int:
        """A point to `restore` to."""

    def restore(self, mark: int) -> None:
        """Forget what was held since `mark`."""

    def clear(self) -> None:
        """Forget everything held."""

    def flush(self, conn: sqlite3.Connection) -> None:
        """Write what is held, inside the open transaction."""


def _settle(results: list[tuple[asyncio.Future, Any, BaseException | None]]) -> None:
    """Set each future's result or exception (on its event loop's thread)."""
    for fut, value, exc in results:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)


def _without_growing(
    batch: list[Any], refused: list[tuple[Any, Any, Any, BaseException | None]]
) -> list[Any]:
    """The operations of `batch` submitted with `grows=False`; the others are appended to
    `refused` as failed with `StorageFull` (the disk is full)."""
    refused += [(fut, loop, None, StorageFull()) for _f, _a, fut, loop, grows in batch if grows]
    return [item for item in batch if not item[4]]


class Writer:
    """The single writer of one SQLite file. Start with `start()`, stop with `stop()`."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        batch_max: int = 512,
        observer: CommitObserver | None = None,
        held: GroupWrites | None = None,
        space: DiskSpace | None = None,
    ) -> None:
        self._connect = connect
        self._held = held
        self._space = space
        self._batch_max = batch_max
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="a2e-sqlite-writer", daemon=True)
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.observer = observer

    def start(self) -> None:
        """Start the thread and wait until its connection is open. Re-raises an open error."""
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def submit(self, fn: Callable[..., Any], *args: Any, grows: bool = True) -> asyncio.Future:
        """Queue `fn(conn, *args)`; the future resolves after the group holding it committed.
        `grows=False` marks an operation that does not grow the database (a delete, an update
        in place): it still runs while the disk is full."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self._queue.put((fn, args, fut, loop, grows))
        return fut

    def stop(self) -> None:
        """Commit everything queued so far, then end the thread (blocking)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:  # reported by start()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        stopping = False
        try:
            while not stopping:
                item = self._queue.get()
                if item is _STOP:
                    break
                batch = [item]
                while len(batch) < self._batch_max:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is _STOP:
                        stopping = True
                        break
                    batch.append(nxt)
                self._commit(conn, batch)
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[Any]) -> None:
        started = time.perf_counter()
        space = self._space
        refused: list[tuple[Any, Any, Any, BaseException | None]] = []
        if space is not None and space.full and not space.recover():
            batch = _without_growing(batch, refused)
        results = self._run_group(conn, batch)
        if space is not None and any(e is not None and is_disk_full(e) for *_, e in results):
            space.release()  # room for the deletes; what grows fails
            batch = _without_growing(batch, refused)
            results = self._run_group(conn, batch)
        if space is not None:  # still no room (a delete bigger than the reserve): say so
            results = [(fut, loop, value, StorageFull() if e is not None and is_disk_full(e)
                        else e) for fut, loop, value, e in results]
        if self.observer is not None:
            self.observer(len(batch) + len(refused), time.perf_counter() - started)
        self._resolve(refused + results)

    def _run_group(
        self, conn: sqlite3.Connection, batch: list[Any]
    ) -> list[tuple[Any, Any, Any, BaseException | None]]:
        if not batch:
            return []
        results = self._apply(conn, batch, isolate=False, held=self._held)
        if results is None:  # an operation raised: run again, each in its own savepoint
            results = self._apply(conn, batch, isolate=True, held=self._held)
        return results or []

    @staticmethod
    def _apply(
        conn: sqlite3.Connection, batch: list[Any], isolate: bool, held: GroupWrites | None
    ) -> list[tuple[Any, Any, Any, BaseException | None]] | None:
        """Run `batch` in one transaction: one (future, loop, value, error) an operation, or
        None when `isolate` is off, the group has several operations and one of them raised
        (then everything was rolled back). `held` is flushed before COMMIT."""
        results: list[tuple[Any, Any, Any, BaseException | None]] = []
        in_op = False
        try:
            conn.execute("BEGIN IMMEDIATE")
            for fn, args, fut, loop, _grows in batch:
                if not isolate:
                    in_op = True
                    results.append((fut, loop, fn(conn, *args), None))
                    in_op = False
                    continue
                conn.execute("SAVEPOINT op")
                mark = held.mark() if held is not None else 0
                try:
                    value = fn(conn, *args)
                except Exception as exc:
                    if not conn.in_transaction:  # SQLite rolled it all back (a full disk)
                        raise
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    if held is not None:
                        held.restore(mark)
                    results.append((fut, loop, None, exc))
                else:
                    conn.execute("RELEASE op")
                    results.append((fut, loop, value, None))
            if held is not None:
                held.flush(conn)
            conn.execute("COMMIT")
        except Exception as group_error:
            if held is not None:
                held.clear()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if in_op and len(batch) > 1:
                return None
            results = [(fut, loop, None, group_error) for _fn, _args, fut, loop, _g in batch]
        return results

    @staticmethod
    def _resolve(results: list[tuple[Any, Any, Any, BaseException | None]]) -> None:
        """Hand each result to its future: one call a event loop."""
        by_loop: dict[Any, list[tuple[asyncio.Future, Any, BaseException | None]]] = {}
        for fut, loop, value, error in results:
            by_loop.setdefault(loop, []).append((fut, value, error))
        for loop, items in by_loop.items():
            try:
                loop.call_soon_threadsafe(_settle, items)
            except RuntimeError:  # the loop closed meanwhile: nobody waits any more
                pass
