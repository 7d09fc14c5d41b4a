"""`Opens`: `async with thing:` for anything with `async open()` and `async close()` (the
stores, the MCP app), so each does not write the two methods again, and `open_with` /
`close_after` for what runs over an opened thing (a search engine over its store); `Periodic`: a step run
every so many seconds in a task of its own (the TTL collection, the Health page's samples, the
polls of the change log), so each does not write the loop, its error handling and its stop;
`on_signals`: signal handlers on the running loop for the length of a block (the commands that
run until a signal); `waited`: whether something came within a time (a close, a drain)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Self

__all__ = ["Opens", "Periodic", "close_after", "on_signals", "open_with", "waited"]


class Opens:
    """Mixin: `async with x:` awaits `x.open()` on entry and `x.close()` on leaving."""

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def open_with(opened: Opens, start: Callable[[], Awaitable[object]]) -> None:
    """Open `opened`, then `start()` what runs over it; when the start fails, close `opened`
    again (nothing is left open) and the failure goes on."""
    await opened.open()
    try:
        await start()
    except BaseException:
        await opened.close()
        raise


async def close_after(stop: Callable[[], Awaitable[object]], opened: Opens) -> None:
    """`stop()` what runs over `opened`, then close it, even when the stop fails."""
    try:
        await stop()
    finally:
        await opened.close()


@dataclass(eq=False, slots=True)
class Periodic:
    """`step` every `interval` seconds in a task of the running loop, from `start()` until
    `stop()` (`first`: once at the start too, else after the first interval). A step that
    raises is logged on `log` as `failed` (with its traceback) and the next one runs on time."""

    step: Callable[[], Awaitable[object]]
    interval: float
    log: logging.Logger
    failed: str
    first: bool = field(default=False, kw_only=True)
    name: str | None = field(default=None, kw_only=True)
    _task: asyncio.Task[None] | None = field(default=None, init=False, repr=False)

    @property
    def running(self) -> bool:
        """True between `start()` and `stop()`."""
        return self._task is not None

    def start(self) -> None:
        """Start the task (once: a second start does nothing)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the task and wait for it to end."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        if not self.first:
            await asyncio.sleep(self.interval)
        while True:
            try:
                await self.step()
            except Exception:
                self.log.exception(self.failed)
            await asyncio.sleep(self.interval)


@contextlib.contextmanager
def on_signals(handlers: Mapping[int, Callable[[], object]]) -> Iterator[None]:
    """Within the block, each signal of `handlers` calls its handler on the running loop; on
    leaving, the handlers are removed."""
    loop = asyncio.get_running_loop()
    for sig, handler in handlers.items():
        loop.add_signal_handler(sig, handler)
    try:
        yield
    finally:
        for sig in handlers:
            loop.remove_signal_handler(sig)


async def waited(aw: Awaitable[object], seconds: float) -> bool:
    """Await `aw` for at most `seconds`: True when it finished in time, False when it was
    cancelled at the end of them."""
    try:
        async with asyncio.timeout(seconds):
            await aw
    except TimeoutError:
        return False
    return True
