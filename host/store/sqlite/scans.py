"""The SQLite store's reads that may scan a namespace, off the event loop.

Reads run on the loop's own connection (`SQLiteEntryStore.reads_on_loop`): a point read costs
less than a thread hop. A read that may walk a whole namespace does not: a filter on content
values, a key prefix or a key-path listing evaluates JSON on every visible row (~1 us a row: a
100,000-entry namespace held every connection of the host for ~90 ms a request), and so does
counting the total of a large namespace. Such reads run here, on a few threads with a
connection each (a WAL snapshot: one read transaction a read, so a count and its page agree),
while the loop goes on serving the others. The namespaces waiting take turns: a tenant that
queues twenty scans delays another tenant's scan by at most one scan a thread, not twenty.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["SCAN_ON_LOOP", "ScanReader"]

# entries a namespace holds (its `usage` row, expired ones included) up to which a read that
# may scan it still runs on the loop: ~1 us a row, a few milliseconds at most
SCAN_ON_LOOP = 4000
_Job = tuple[Callable[..., Any], tuple[Any, ...], asyncio.Future[Any], asyncio.AbstractEventLoop]


def _settle(fut: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if fut.done():  # cancelled meanwhile (the connection went away)
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(value)


class ScanReader:
    """`threads` reader threads over one SQLite file, started on the first `submit`; jobs are
    taken one namespace after the other (round robin over the namespaces waiting)."""

    def __init__(self, connect: Callable[[], sqlite3.Connection], threads: int = 2) -> None:
        self._connect = connect
        self._threads: list[threading.Thread] = []
        self._size = max(1, threads)
        self._lock = threading.Condition()
        self._waiting: dict[str, deque[_Job]] = {}  # by namespace
        self._turns: deque[str] = deque()  # the namespaces with jobs, in the order they go
        self._stopping = False

    def submit(self, namespace: str, fn: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Queue `fn(conn, *args)` (in one read transaction); its future resolves on the
        calling loop."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._stopping:
                raise RuntimeError("store is not open")
            if not self._threads:
                self._start()
            queued = self._waiting.get(namespace)
            if queued is None:
                queued = self._waiting[namespace] = deque()
                self._turns.append(namespace)
            queued.append((fn, args, fut, loop))
            self._lock.notify()
        return fut

    def close(self) -> None:
        """Finish the reads under way, drop the queued ones (their futures are cancelled), end
        the threads (blocking). A later `submit` starts them again."""
        with self._lock:
            self._stopping = True
            dropped = [job for jobs in self._waiting.values() for job in jobs]
            self._waiting.clear()
            self._turns.clear()
            self._lock.notify_all()
        for _fn, _args, fut, loop in dropped:
            try:
                loop.call_soon_threadsafe(fut.cancel)
            except RuntimeError:  # that loop is closed: nobody waits
                pass
        for t in self._threads:
            t.join()
        with self._lock:  # a store opened again starts new threads
            self._threads = []
            self._stopping = False

    def _start(self) -> None:
        for i in range(self._size):
            t = threading.Thread(target=self._run, name=f"a2e-sqlite-scan-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def _next(self) -> _Job | None:
        """The next job, the namespaces taking turns; None when stopping."""
        with self._lock:
            while not self._turns and not self._stopping:
                self._lock.wait()
            if self._stopping:
                return None
            namespace = self._turns.popleft()
            jobs = self._waiting[namespace]
            job = jobs.popleft()
            if jobs:
                self._turns.append(namespace)
            else:
                del self._waiting[namespace]
            return job

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while (job := self._next()) is not None:
                fn, args, fut, loop = job
                if fut.done():  # cancelled while it waited
                    continue
                value, error = None, None
                try:
                    if conn is None:
                        conn = self._connect()
                    conn.execute("BEGIN")  # one snapshot for the whole read
                    try:
                        value = fn(conn, *args)
                    finally:
                        if conn.in_transaction:
                            conn.execute("COMMIT")
                except BaseException as exc:  # handed to the caller
                    error = exc
                try:
                    loop.call_soon_threadsafe(_settle, fut, value, error)
                except RuntimeError:  # the loop closed meanwhile
                    pass
        finally:
            if conn is not None:
                conn.close()
