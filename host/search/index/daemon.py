"""Daemon threads for the event loop: `daemon` starts one, `deliver` hands a result to a loop's
future from it (nothing when the loop is closed), `in_daemon` runs one call so, as a future
of the running loop. Unlike `asyncio.to_thread` (or a `ThreadPoolExecutor`), the interpreter
does not wait for a daemon thread at exit: a graph build of a million rows takes minutes, an
embedding batch in progress is abandoned (`host.search.lanes.Lane`, a queue of calls on one
such thread)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["daemon", "deliver", "in_daemon"]

T = TypeVar("T")


def _settle(fut: asyncio.Future[T], result: T | None, exc: BaseException | None) -> None:
    if fut.done():  # (cancelled: no one waits)
        return
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(result)  # type: ignore[arg-type]


def deliver(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[T], result: T | None,
            exc: BaseException | None) -> None:
    """(From any thread.) `fut` of `loop` given `result`, or `exc` raised; nothing when the
    loop is closed (no one waits any more) or `fut` is already done."""
    try:
        loop.call_soon_threadsafe(_settle, fut, result, exc)
    except RuntimeError:  # the loop is closed
        pass


def daemon(target: Callable[[], object], name: str) -> threading.Thread:
    """`target()` started in a daemon thread: the interpreter does not wait for it at exit."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread


def in_daemon(fn: Callable[..., T], *args: object, name: str,
              track: set[threading.Thread] | None = None) -> asyncio.Future[T]:
    """`fn(*args)` in a daemon thread of its own, as a future of the running loop: unlike
    `asyncio.to_thread`, the interpreter does not wait for it at exit (a graph build of a
    million rows takes minutes). A loop closed before it ends is not called back. `track`:
    holds the thread while it runs (an exit may wait for them a bounded time)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[T] = loop.create_future()

    def run() -> None:
        result: T | None = None
        exc: BaseException | None = None
        try:
            result = fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the loop
            exc = e
        finally:
            if track is not None:
                track.discard(threading.current_thread())
        deliver(loop, fut, result, exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    if track is not None:
        track.add(thread)
    thread.start()
    return fut
