"""A library store dropped without `close()` releases its search engine: the thread, the
database connections and the temporary copy it started go when the store is collected."""

from __future__ import annotations

import gc
import os
import threading
import time
from pathlib import Path

from host.config import SearchConfig
from host.library import InMemoryStore, Memory
from host.library.sqlite_store import SQLiteStore

KEYWORDS = SearchConfig(embedder="none")


def _search_threads() -> int:
    return sum(t.name == "a2e-library-search" for t in threading.enumerate())


def _open_files_under(folder: str) -> int:
    """Files of this process open under `folder` (its descriptors in /proc)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith(folder)
        except OSError:
            continue
    return n


def _wait_until(cond, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Poll `cond` until true; fail after `timeout` (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_dropped_in_memory_store_releases_its_engine() -> None:
    """Three InMemoryStores searched and dropped without close() leave no search thread and
    no open file of their temporary copies once collected."""
    before = _search_threads()
    folders = []
    for _ in range(3):
        s = InMemoryStore(search=KEYWORDS)
        s.set("a", Memory(content="a dog named Max"))
        assert [h.memory.content for h in s.search("dog", k=1)] == ["a dog named Max"]
        assert s._mirror is not None
        folders.append(s._mirror._folder)
        del s
    gc.collect()
    _wait_until(lambda: _search_threads() == before)
    for folder in folders:
        _wait_until(lambda f=folder: _open_files_under(f) == 0 and not os.path.exists(f))


def test_a_dropped_sqlite_store_releases_its_engine(tmp_path: Path) -> None:
    """A SQLiteStore dropped without close() leaves no search thread and no open file of its
    database once collected, and what it wrote is there for the next store."""
    before = _search_threads()
    path = tmp_path / "m.db"
    s = SQLiteStore(path, namespace="ns", agent="a1", search=KEYWORDS)
    s.set("a", Memory(content="a dog named Max"))
    assert [h.memory.content for h in s.search("dog", k=1)] == ["a dog named Max"]
    del s
    gc.collect()
    _wait_until(lambda: _search_threads() == before)
    _wait_until(lambda: _open_files_under(str(path)) == 0)
    with SQLiteStore(path, namespace="ns", agent="a1", search=KEYWORDS) as again:
        assert [h.memory.content for h in again.search("dog", k=1)] == ["a dog named Max"]
