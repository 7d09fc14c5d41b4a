"""`EngineSearcher`: the host's `SearchEngine` for a synchronous library store on a host database.

    searcher = EngineSearcher("memories.db", SearchConfig())   # starts its thread, loads vectors
    ticket = searcher.notify()                                   # after each committed write
    found = searcher.search(scope, query, text, now, candidates, ticket)
    searcher.close()

The engine is async (its store, its embedding worker, its query thread all belong to one event
loop), the library's `Store` is not: the searcher runs a private event loop in a daemon thread,
with a `SQLiteEntryStore` on the same file (its reads, and the vectors its worker writes) and a
`SearchEngine` over it, and the caller's thread waits for each answer. The library store keeps
writing through its own connection; the triggers of the schema queue each new or changed entry
for the worker, exactly as a host's writes do. So a search here is a `memory/retrieve`'s search:
the same candidates, the same calibrated `relevance`, the same ordering (`host.library.host_db`).

`config.embedder = "none"`, or an embedder that cannot be loaded (a missing optional package, an
unreachable endpoint: logged as a warning), gives a keyword-only engine: BM25 with the
keyword-only calibration, as a host with `embedder = "none"`.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import weakref
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from host.config import SearchConfig
from host.library.host_db import Ranked, judged
from host.lifecycle import close_after, open_with
from host.search.embed import Embedder, EmbedderError, make_embedder
from host.search.engine import SearchEngine
from host.store.records import Query, Scope, StoredEntry
from host.store.sqlite.store import SQLiteEntryStore

__all__ = ["EngineSearcher", "load_embedder"]

log = logging.getLogger("a2e_host.library")

T = TypeVar("T")

# Searchers not closed yet: closed at interpreter exit, so that no embedder call is still
# running when the process leaves (onnxruntime aborts a process that exits mid-call).
_OPEN: weakref.WeakSet[EngineSearcher] = weakref.WeakSet()


def load_embedder(cfg: SearchConfig) -> Embedder | None:
    """The embedder `cfg` names, or None (keyword-only) for "none" or one that cannot be
    loaded (logged): a bad model, an endpoint that fails, a missing extra (`MissingExtra`, an
    `ImportError`)."""
    try:
        return make_embedder(cfg)
    except (EmbedderError, ImportError) as err:
        log.warning("library search is keyword-only: embedder %r unavailable (%s)",
                    cfg.embedder, err)
        return None


class EngineSearcher:
    """A started `SearchEngine` over the SQLite file `path`, on a thread of its own."""

    def __init__(self, path: str, cfg: SearchConfig) -> None:
        self.cfg = cfg
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="a2e-library-search", daemon=True)
        self._thread.start()
        self.store = SQLiteEntryStore(path, max_term_docs=cfg.max_term_docs,
                                      max_matches=cfg.max_keyword_matches)
        self.engine = SearchEngine(self.store, load_embedder(cfg), cfg)
        self._closed = False
        try:
            self._run(self._start())
        except BaseException:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
            raise
        _OPEN.add(self)
        # a searcher collected without close() (its store dropped unclosed): stopped on a
        # thread of its own, whatever thread the collection ran on (at exit,
        # `_stop_open_searchers` does it instead)
        self._release = weakref.finalize(self, _release, self._loop, self._thread,
                                         self.engine, self.store)
        self._release.atexit = False

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result()

    async def _start(self) -> None:
        await open_with(self.store, self.engine.start)

    @property
    def enabled(self) -> bool:
        """True when vectors take part (an embedder was loaded)."""
        return self.engine.enabled

    def notify(self) -> int:
        """Tell the engine that entries were committed or deleted (its worker wakes); the
        write's ticket for `search`."""
        async def wrote() -> int:
            return self.engine.notify()
        return self._run(wrote())

    def search(self, scope: Scope, q: Query, text: str, now: float, candidates: int,
               ticket: int = 0) -> list[StoredEntry]:
        """The engine's candidates for `text` (see `SearchEngine.search`), after waiting, at
        most `vector_wait`, for the vectors of the writes up to `ticket`."""
        return self._run(self.engine.search(scope, q, text, now, candidates, None, ticket,
                                            f"library:{id(self):x}"))

    def judge(self, matches: list[tuple[float, StoredEntry]], supersede: bool = True,
              collapse: bool = False, now: float | None = None) -> Ranked:
        """`matches` (ranked) judged as a `memory/retrieve` judges its reply, over the vectors
        of the file, the bounds read at `now` (`host.library.host_db.judged`; keyword-only:
        as they were)."""
        emb = self.engine.embedder
        return self._run(judged(matches, self.store if emb is not None else None,
                                emb.dim if emb is not None else 0, supersede, collapse, now))

    def drain(self) -> int:
        """Embed everything queued now; the number of entries embedded."""
        return self._run(self.engine.drain())

    def close(self) -> None:
        """Stop the worker, close the store and the thread. Closing twice is harmless."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        self._release.detach()
        _shut(self._loop, self._thread, self.engine, self.store)


def _shut(loop: asyncio.AbstractEventLoop, thread: threading.Thread, engine: SearchEngine,
          store: SQLiteEntryStore) -> None:
    """Stop the engine, close the store, then the loop and its thread (blocking)."""
    try:
        asyncio.run_coroutine_threadsafe(close_after(engine.stop, store), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def _release(loop: asyncio.AbstractEventLoop, thread: threading.Thread, engine: SearchEngine,
             store: SQLiteEntryStore) -> None:
    """`_shut` on a new thread: the collection that calls this may run on the loop's thread
    or the store's writer, which the stop waits for."""
    def shut() -> None:
        try:
            _shut(loop, thread, engine, store)
        except Exception:  # nobody left to tell
            log.debug("releasing a library search engine failed", exc_info=True)
    threading.Thread(target=shut, name="a2e-library-search-release", daemon=True).start()


@atexit.register
def _stop_open_searchers() -> None:
    """At exit, stop the engines of the searchers left open: their embedding calls return
    before the process leaves. (Their stores are not closed: the interpreter has stopped its
    thread pools by now; every write they made is committed.)"""
    for searcher in list(_OPEN):
        try:
            searcher._run(searcher.engine.stop())
        except Exception:  # at exit: nothing left to tell
            log.debug("stopping a library search engine at exit failed", exc_info=True)
