"""Group commit for the PostgreSQL store: the writes that arrive while a commit runs go together.

Every write of a namespace (put, forget) takes the namespace's advisory lock and holds it until
its COMMIT has been flushed (a quota is an exact count), so writers of one namespace run one
transaction at a time and PostgreSQL's own WAL group commit cannot merge them: one namespace
would be capped near one write per WAL flush (~250/s on a disk whose flush takes 4 ms). A
`WriteBatcher` gathers the writes of one kind queued on this host while its previous batches
run, sorts them by namespace (so two hosts always take namespace locks in the same order and
never deadlock) and hands them to its `run` function, which sends them as one statement (one
transaction, one flush). A write that fails inside the batch fails alone (a subtransaction in
SQL; `run` returns a `BatchError` for it); a batch that fails to commit fails every write in
it. A write's future resolves only after its batch committed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from host.store.records import Scope

__all__ = ["BatchError", "MAX_BATCH_ENTRIES", "PendingWrite", "WriteBatcher"]

# Entries one batch gathers at most (a single larger write still goes, alone): a batch holds
# its namespaces' locks until it commits, so a few large puts must not make everyone wait long.
MAX_BATCH_ENTRIES = 1000


class BatchError(RuntimeError):
    """One write of a batch failed in the database (the others were committed)."""


@dataclass(slots=True)
class PendingWrite:
    """One queued write: its scope, time, what to write (`args`, the store's business) and
    how many entries it carries."""

    scope: Scope
    now: float
    args: Any
    size: int
    future: asyncio.Future[Any] = field(repr=False)


# (the writes of one batch, sorted by namespace) -> one result per write, in that order, a
# `BatchError` for a write that failed alone; raises when the batch failed as a whole.
RunBatch = Callable[[list[PendingWrite]], Awaitable[list[Any]]]


class WriteBatcher:
    """Runs queued writes in batches of at most `batch_max` writes and `MAX_BATCH_ENTRIES`
    entries, `writers` batches at once."""

    def __init__(self, run: RunBatch, batch_max: int = 512, writers: int = 2) -> None:
        self._run = run
        self._batch_max = batch_max
        self._writers = writers
        self._queue: deque[PendingWrite] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0

    def submit(self, scope: Scope, now: float, args: Any, size: int = 1) -> asyncio.Future[Any]:
        """Queue a write; the future resolves with its result after its batch committed."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(PendingWrite(scope, now, args, size, fut))
        if len(self._tasks) < self._writers:
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return fut

    async def close(self) -> None:
        """Wait until every queued write has been committed (or failed)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _take(self) -> list[PendingWrite]:
        batch: list[PendingWrite] = []
        entries = 0
        while self._queue and len(batch) < self._batch_max and (
                not batch or entries + self._queue[0].size <= MAX_BATCH_ENTRIES):
            write = self._queue.popleft()
            batch.append(write)
            entries += write.size
        batch.sort(key=lambda w: w.scope.namespace)
        return batch

    async def _drain(self) -> None:
        while self._queue:
            batch = self._take()
            try:
                results = await self._run(batch)
            except BaseException as exc:
                for write in batch:
                    if not write.future.done():
                        write.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            self.batches += 1
            for write, result in zip(batch, results, strict=True):
                if write.future.done():
                    continue
                if isinstance(result, BatchError):
                    write.future.set_exception(result)
                else:
                    write.future.set_result(result)
