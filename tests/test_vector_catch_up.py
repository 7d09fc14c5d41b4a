"""The vectors another process wrote on one SQLite file reach this process's index in chunks,
and the event loop runs between chunks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
from support.turns import turns_while

from host.config import Config
from host.search.index import VectorIndexes
from host.search.worker import LocalWorker
from host.store.records import NewEntry, Scope
from host.store.sqlite.store import SQLiteEntryStore

DIM = 8


class _Dim:
    """What `LocalWorker` reads of an embedder when nothing is queued: its name and dimension."""

    name = "test-dim-8"
    dim = DIM


@asynccontextmanager
async def reader_after_writes(tmp_path: Path, chunk: int) -> AsyncIterator[LocalWorker]:
    """A worker reading `chunk` vectors a read, loaded before another store on the same file
    wrote 30 vectors in six writes of 5 (each write one number of the counter)."""
    path = str(tmp_path / "one.db")
    reader_store = SQLiteEntryStore(path)
    await reader_store.open()
    reader = LocalWorker(reader_store, _Dim(), Config().search,  # type: ignore[arg-type]
                         VectorIndexes(DIM))
    reader.catch_up_rows = chunk
    await asyncio.to_thread(reader.load)  # nothing stored yet
    writer = SQLiteEntryStore(path)
    await writer.open()
    try:
        await writer.put(Scope("ns", "a1"), [
            NewEntry(tier="semantic", key=b'{"id":"m%d"}' % i, content=b'"note %d"' % i)
            for i in range(30)], time.time())
        queued = await writer.pending_vectors(100)
        assert len(queued) == 30
        rng = np.random.default_rng(7)
        for first in range(0, 30, 5):
            rows = []
            for p, _digest in queued[first:first + 5]:
                v = rng.standard_normal(DIM).astype(np.float32)
                rows.append((p.id, p.text, (v / np.linalg.norm(v)).tobytes()))
            assert len(await writer.write_vectors(rows)) == 5
        yield reader
    finally:
        await writer.close()
        await reader_store.close()


async def test_catching_up_on_another_process_vectors_lets_the_loop_run(tmp_path: Path) -> None:
    """A worker reading 30 vectors another store wrote (writes of 5), 10 a chunk, adds all 30
    to its index and lets the other tasks of its event loop run between the chunks."""
    async with reader_after_writes(tmp_path, 10) as reader:
        # nothing queued: it reads what the other store wrote
        _, turns = await turns_while(reader.embed_pending())
        index = reader.index.get("ns")
        assert index is not None and len(index) == 30
        assert turns >= 3  # the ticker ran between the chunks, not only at the end


async def test_a_read_limit_inside_a_write_loses_none_of_its_vectors(tmp_path: Path) -> None:
    """A worker catching up 7 rows a read on 30 vectors another store wrote in writes of 5
    (the limit falls inside a write every time) adds all 30 to its index."""
    async with reader_after_writes(tmp_path, 7) as reader:
        await reader.embed_pending()  # nothing queued: it reads what the other store wrote
        index = reader.index.get("ns")
        assert index is not None and len(index) == 30
