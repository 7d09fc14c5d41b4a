"""The `Store` protocol (FR-3) and its async variant; every backend implements one of them.

The contract, for every backend (checked by `tests/test_library_contract.py`):
- `set(key, memory)` stores a copy of `memory` under `key` (an upsert); later changes to the
  caller's object do not reach the store.
- `get(key)` returns a copy of the stored memory, or None. It records the access: the returned
  memory's `last_accessed` (and the stored one's) is the time of this call. Nothing else changes.
- `delete(key)` removes the memory; True when there was one.
- `search(query, k)` returns at most `k` `RetrievalResult`s, best first (see
  `host.library.search`); `k` < 1 raises `ValueError`. It changes nothing. With `as_of` (an
  aware datetime, epoch seconds or ISO 8601 text) only the memories valid then
  (`Memory.valid_from` / `valid_until`) are searched; a malformed one raises `ValueError`.
- `set` of a memory whose window is bad (`Memory.window`) raises `ValueError`, storing nothing.
- A closed store raises `StoreClosedError` from every method.

A new backend is a class with these four methods; nothing needs to inherit from anything.
One that holds resources also has `close()` (`Closable`; `Closing` gives the rest).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

from host.library.models import Memory, RetrievalResult

__all__ = ["AsyncStore", "AsyncStoreAdapter", "Closable", "Closing", "Store", "StoreClosedError"]

T = TypeVar("T")


class StoreClosedError(RuntimeError):
    """The store was closed; open a new one."""


@runtime_checkable
class Store(Protocol):
    """A synchronous memory store (see the module docstring for the contract)."""

    def get(self, key: str) -> Memory | None:
        """The memory stored under `key` (a copy, its access recorded), or None."""
        ...

    def set(self, key: str, memory: Memory) -> None:
        """Store a copy of `memory` under `key`, replacing what was there."""
        ...

    def delete(self, key: str) -> bool:
        """Remove the memory under `key`; True when there was one."""
        ...

    def search(self, query: str, k: int = 5, *, supersede: bool = True,
               collapse: bool = False, as_of: datetime | float | str | None = None,
               ) -> list[RetrievalResult]:
        """The best `k` matches of `query`, best first, judged as a `memory/retrieve` judges
        its reply: an update ranks above what it `supersede`s (by default), near-duplicates
        `collapse` into one (when asked); each result names the ids of both. With `as_of`,
        among the memories valid then only."""
        ...


@runtime_checkable
class AsyncStore(Protocol):
    """The same contract as `Store`, as coroutines (for the host's event loop)."""

    async def get(self, key: str) -> Memory | None:
        """The memory stored under `key` (a copy, its access recorded), or None."""
        ...

    async def set(self, key: str, memory: Memory) -> None:
        """Store a copy of `memory` under `key`, replacing what was there."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove the memory under `key`; True when there was one."""
        ...

    async def search(self, query: str, k: int = 5, *, supersede: bool = True,
                     collapse: bool = False, as_of: datetime | float | str | None = None,
                     ) -> list[RetrievalResult]:
        """The best `k` matches of `query`, best first, judged, at `as_of` (see
        `Store.search`)."""
        ...


@runtime_checkable
class Closable(Protocol):
    """Optional capability of a `Store`: it holds resources that `close()` releases."""

    def close(self) -> None:
        """Release the store's resources; every method raises `StoreClosedError` after."""
        ...


class AsyncStoreAdapter:
    """An `AsyncStore` over a `Store`.

    By default get, set and delete run inline on the event loop, without a thread hop: right
    for stores whose methods do not block on I/O (`InMemoryStore`, and `JSONFileStore`, which
    writes in its own thread). With `in_thread=True` each call runs in a worker thread
    (`asyncio.to_thread`): right for `SQLiteStore`, whose writes wait for a commit. `search`
    always runs in a worker thread: every library store's search waits for the host's search
    engine, on a thread of its own (it embeds the query, and may wait for vectors).
    `aclose()` always closes the wrapped store in a worker thread.
    """

    def __init__(self, store: Store, *, in_thread: bool = False) -> None:
        self.store = store
        self.in_thread = in_thread
        self._closable = store if isinstance(store, Closable) else None  # checked once

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self.in_thread:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def get(self, key: str) -> Memory | None:
        """See `Store.get`."""
        return await self._call(self.store.get, key)

    async def set(self, key: str, memory: Memory) -> None:
        """See `Store.set`."""
        await self._call(self.store.set, key, memory)

    async def delete(self, key: str) -> bool:
        """See `Store.delete`."""
        return await self._call(self.store.delete, key)

    async def search(self, query: str, k: int = 5, *, supersede: bool = True,
                     collapse: bool = False, as_of: datetime | float | str | None = None,
                     ) -> list[RetrievalResult]:
        """See `Store.search` (in a worker thread: it waits for the search engine). The
        judgement's arguments and `as_of` are passed only when they are not the defaults, so
        a `Store` written before they existed still serves a plain search."""
        extra: dict[str, Any] = {}
        if not supersede or collapse:
            extra.update(supersede=supersede, collapse=collapse)
        if as_of is not None:
            extra["as_of"] = as_of
        return await asyncio.to_thread(self.store.search, query, k, **extra)

    async def aclose(self) -> None:
        """Close the wrapped store (if it has `close`) without blocking the event loop."""
        if self._closable is not None:
            await asyncio.to_thread(self._closable.close)


class Closing:
    """`with`, `async with` and `aclose()` for a backend that defines `close()`.

    `async with` and `aclose()` run `close()` in a worker thread: closing may wait for a write.
    A backend sets `_closed` when it closes and calls `_check_open()` before each operation.
    """

    _closed = False

    def _check_open(self) -> None:
        """Raise `StoreClosedError` once the backend is closed."""
        if self._closed:
            raise StoreClosedError(f"{type(self).__name__} is closed")

    def close(self) -> None:
        """Release the backend's resources (each backend defines it)."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """`close()` without blocking the event loop."""
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
