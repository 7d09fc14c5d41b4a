"""Group commit for the PostgreSQL store: the puts that arrive while a commit runs go together.

Every put of a namespace takes the namespace's advisory lock and holds it until its COMMIT has
been flushed (a quota is an exact count), so writers of one namespace run one transaction at a
time and PostgreSQL's own WAL group commit cannot merge them: one namespace would be capped
near one put per WAL flush (~250/s on a disk whose flush takes 4 ms). `PutBatcher` gathers the
puts queued on this host while its previous batches run, sorts them by namespace (so two hosts
always take namespace locks in the same order and never deadlock) and sends them as one
statement (`a2e_put_batch`), one transaction, one flush. A put that fails inside the batch fails
alone (a subtransaction in SQL); a batch that fails to commit fails every put in it. A put's
future resolves only after its batch committed.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from host.store.base import Scope, StoreOutcome

__all__ = ["BatchError", "PendingPut", "PutBatcher"]


class BatchError(RuntimeError):
    """One put of a batch failed in the database (the others were committed)."""


@dataclass(slots=True)
class PendingPut:
    """One queued put: its scope, time, entry columns (see `PostgresEntryStore.put`)."""

    scope: Scope
    now: float
    columns: list[list[Any]]
    future: asyncio.Future[list[StoreOutcome]] = field(repr=False)

    @property
    def size(self) -> int:
        """Entries in the put."""
        return len(self.columns[0])


# (the puts of one batch, sorted) -> one outcome list per put, in that order; raises on a
# failed commit.
RunBatch = Callable[[list[PendingPut]], Awaitable[list[list[StoreOutcome]]]]


class PutBatcher:
    """Runs queued puts in batches of at most `batch_max` puts, `writers` batches at once."""

    def __init__(self, run: RunBatch, batch_max: int = 512, writers: int = 2) -> None:
        self._run = run
        self._batch_max = batch_max
        self._writers = writers
        self._queue: deque[PendingPut] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self.batches = 0

    def submit(self, scope: Scope, now: float, columns: list[list[Any]]) -> asyncio.Future[
            list[StoreOutcome]]:
        """Queue a put; the future resolves with its outcomes after its batch committed."""
        fut: asyncio.Future[list[StoreOutcome]] = asyncio.get_running_loop().create_future()
        self._queue.append(PendingPut(scope, now, columns, fut))
        if len(self._tasks) < self._writers:
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return fut

    async def close(self) -> None:
        """Wait until every queued put has been committed (or failed)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _take(self) -> list[PendingPut]:
        batch = [self._queue.popleft() for _ in range(min(len(self._queue), self._batch_max))]
        batch.sort(key=lambda p: p.scope.namespace)
        return batch

    async def _drain(self) -> None:
        while self._queue:
            batch = self._take()
            try:
                results = await self._run(batch)
            except BaseException as exc:
                for put in batch:
                    if not put.future.done():
                        put.future.set_exception(exc)
                if not isinstance(exc, Exception):
                    raise
                continue
            self.batches += 1
            for put, outcomes in zip(batch, results, strict=True):
                if put.future.done():
                    continue
                failed = next((o for o in outcomes if o and o.startswith("error: ")), None)
                if failed is not None:
                    put.future.set_exception(BatchError(failed[len("error: "):]))
                else:
                    put.future.set_result(outcomes)
