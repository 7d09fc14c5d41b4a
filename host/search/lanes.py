"""`Lane`: one daemon thread that runs blocking calls (embeddings) in order for the event loop
(made of `host.search.index.daemon`'s two halves, as a vector index's builds are).

Why not `concurrent.futures.ThreadPoolExecutor`: its threads are joined when the interpreter
exits, so a process told to stop waits for every call still queued. A lane's thread is a
daemon: at shutdown the calls not started are dropped, a call in progress is abandoned (its
result never delivered, so what it would have written is not written: the entries stay queued
for the next start, see `host.search.worker`), and `settle()` waits a bounded time for that one
call to return, because a native library (onnxruntime) still computing while the interpreter
tears down aborts the process.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from host.search.index.daemon import daemon, deliver

__all__ = ["Lane"]

T = TypeVar("T")


class Lane:
    """A daemon thread running submitted calls one at a time, oldest first."""

    def __init__(self, name: str, nice: int = 0) -> None:
        self.name = name
        self.nice = nice  # added to the thread's scheduling niceness (background work: > 0)
        self._q: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.busy = False  # a call is running now

    def run(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run `fn(*args)` on the lane's thread; a future of the running loop for its result."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        if self._thread is None:
            self._thread = daemon(self._main, self.name)
        self._q.put((loop, fut, fn, args))
        return fut

    def _main(self) -> None:
        if self.nice:
            try:  # Linux: a thread's niceness is its own (the requests' threads keep theirs)
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
            except (OSError, AttributeError):
                pass
        while True:
            item = self._q.get()
            if item is None:
                return
            loop, fut, fn, args = item
            result: Any = None
            exc: BaseException | None = None
            self.busy = True
            try:
                result = fn(*args)
            except BaseException as e:  # noqa: BLE001 - delivered to the awaiting coroutine
                exc = e
            finally:
                self.busy = False
            deliver(loop, fut, result, exc)

    def close(self) -> None:
        """Drop the calls not started and let the thread end; does not wait."""
        while True:
            try:
                item = self._q.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item[0].call_soon_threadsafe(item[1].cancel)
        if self._thread is not None:
            self._q.put(None)
            self._thread = None

    async def settle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the call in progress (if any) to return; True
        when none runs any more."""
        deadline = time.monotonic() + timeout
        while self.busy and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return not self.busy
