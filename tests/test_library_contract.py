"""The `Store` contract (host/library/protocol.py), run against every backend."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from host.config import Config
from host.library import (
    AsyncStore,
    AsyncStoreAdapter,
    InMemoryStore,
    JSONFileStore,
    Memory,
    MemoryImportance,
    MemoryType,
    SQLiteStore,
    Store,
    StoreClosedError,
)
from host.library.entry_store import EntryStoreMemories
from host.library.protocol import Closing
from host.store.records import Scope
from host.store.sqlite.store import SQLiteEntryStore

Factory = Callable[[], Any]


def _memory_backend(tmp_path: Path) -> Factory:
    return InMemoryStore


def _json_backend(tmp_path: Path) -> Factory:
    return lambda: JSONFileStore(tmp_path / "memories.json", flush_delay=0)


def _sqlite_backend(tmp_path: Path) -> Factory:
    return lambda: SQLiteStore(tmp_path / "memories.db")


class EntryStoreBackend(Closing):
    """`EntryStoreMemories` (an `AsyncStore` over the host's async `SQLiteEntryStore`, what the
    MCP tools use) driven from these synchronous tests through an event loop in a thread.

    Closing closes the `SQLiteEntryStore`; calls after that raise `StoreClosedError` here, in
    this plumbing, as `EntryStoreMemories` itself has no close.
    """

    def __init__(self, path: Path) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._closed = False
        self._entries = SQLiteEntryStore(path)
        self._run(self._entries.open())
        self._memories = EntryStoreMemories(self._entries, Scope("default", "default"), Config())

    def _run(self, coro: Any) -> Any:
        if self._closed:
            coro.close()
            raise StoreClosedError("closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def get(self, key: str) -> Memory | None:
        return self._run(self._memories.get(key))  # type: ignore[no-any-return]

    def set(self, key: str, memory: Memory) -> None:
        self._run(self._memories.set(key, memory))

    def delete(self, key: str) -> bool:
        return self._run(self._memories.delete(key))  # type: ignore[no-any-return]

    def search(self, query: str, k: int = 5, *, supersede: bool = True,
               collapse: bool = False, as_of: Any = None) -> list[Any]:
        return self._run(self._memories.search(  # type: ignore[no-any-return]
            query, k, supersede=supersede, collapse=collapse, as_of=as_of))

    def close(self) -> None:
        if self._closed:
            return
        self._run(self._entries.close())
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def _entry_store_backend(tmp_path: Path) -> Factory:
    return lambda: EntryStoreBackend(tmp_path / "entries.db")


BACKENDS: dict[str, Callable[[Path], Factory]] = {
    "memory": _memory_backend,
    "json": _json_backend,
    "sqlite": _sqlite_backend,
    "entry-store": _entry_store_backend,
}
# Backends whose contents survive closing the store and opening it again.
PERSISTENT = ("json", "sqlite", "entry-store")


@pytest.fixture(params=sorted(BACKENDS))
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    """A factory of stores of one backend; every store it made is closed after the test."""
    made: list[Any] = []
    factory = BACKENDS[request.param](tmp_path)

    def make() -> Any:
        store = factory()
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def store(make_store: Factory) -> Any:
    """One open store of the backend under test."""
    return make_store()


def _same_but_access(a: Memory, b: Memory) -> bool:
    return a.model_dump(exclude={"last_accessed"}) == b.model_dump(exclude={"last_accessed"})


def _ago(**kwargs: float) -> datetime:
    return datetime.now(UTC) - timedelta(**kwargs)


def test_is_a_store(store: Any) -> None:
    """Every backend satisfies the runtime-checkable `Store` protocol."""
    assert isinstance(store, Store)


def test_set_then_get(store: Any) -> None:
    """A stored memory comes back with every field but `last_accessed` unchanged."""
    m = Memory(
        content="deploys happen on Tuesdays",
        memory_type=MemoryType.PROCEDURAL,
        importance=MemoryImportance.HIGH,
        created_at=_ago(days=3),
        last_accessed=_ago(days=2),
        metadata={"source": "standup", "n": [1, 2.5, None, {"x": True}]},
    )
    store.set(m.id, m)
    got = store.get(m.id)
    assert got is not None and _same_but_access(got, m)


def test_get_missing_is_none(store: Any) -> None:
    """An unknown key reads as None."""
    assert store.get("nope") is None


def test_get_records_the_access(store: Any) -> None:
    """`get` sets `last_accessed` to the time of the call, in the result and in the store."""
    m = Memory(content="x", last_accessed=_ago(days=30))
    store.set(m.id, m)
    before = datetime.now(UTC)
    first = store.get(m.id)
    assert first is not None and first.last_accessed >= before
    second = store.get(m.id)
    assert second is not None and second.last_accessed >= first.last_accessed
    assert second.created_at == m.created_at


def test_set_is_an_upsert(store: Any) -> None:
    """Setting an existing key replaces its memory."""
    m = Memory(content="old")
    store.set("k", m)
    store.set("k", m.model_copy(update={"content": "new"}))
    got = store.get("k")
    assert got is not None and got.content == "new"


def test_key_need_not_be_the_id(store: Any) -> None:
    """A memory is found under the key it was stored under, keeping its own id."""
    m = Memory(content="x")
    store.set("custom-key", m)
    got = store.get("custom-key")
    assert got is not None and got.id == m.id
    assert store.get(m.id) is None


def test_delete(store: Any) -> None:
    """`delete` removes the memory and says whether there was one."""
    m = Memory(content="x")
    store.set(m.id, m)
    assert store.delete(m.id) is True
    assert store.get(m.id) is None
    assert store.delete(m.id) is False


def test_store_keeps_its_own_copy(store: Any) -> None:
    """Changing the caller's memory after `set`, or a memory `get` returned, changes nothing."""
    m = Memory(content="original", metadata={"tags": ["a"]})
    store.set(m.id, m)
    m.content = "changed"
    m.metadata["tags"].append("b")  # type: ignore[union-attr]
    got = store.get(m.id)
    assert got is not None and got.content == "original" and got.metadata == {"tags": ["a"]}
    got.metadata["tags"].append("c")  # type: ignore[union-attr]
    again = store.get(m.id)
    assert again is not None and again.metadata == {"tags": ["a"]}


def test_search_finds_matches_only(store: Any) -> None:
    """Search returns memories sharing a term with the query, with relevance in (0, 1]."""
    a = Memory(content="The user prefers Python")
    b = Memory(content="The weather is sunny")
    store.set(a.id, a)
    store.set(b.id, b)
    hits = store.search("python")
    assert [h.memory.id for h in hits] == [a.id]
    assert 0 < hits[0].relevance_score <= 1 and 0 < hits[0].combined_score <= 1


def test_search_without_terms_matches_nothing(store: Any) -> None:
    """A query with no terms (only punctuation) returns no results."""
    store.set("k", Memory(content="anything"))
    assert store.search("?!") == []


def test_search_limits_to_k(store: Any) -> None:
    """At most `k` results come back; `k` < 1 is a ValueError."""
    for i in range(10):
        m = Memory(content=f"note number {i}")
        store.set(m.id, m)
    assert len(store.search("note", k=3)) == 3
    assert len(store.search("note")) == 5
    with pytest.raises(ValueError):
        store.search("note", k=0)


def test_search_orders_by_relevance(store: Any) -> None:
    """At equal importance and age, a memory matching more query terms ranks first."""
    when = _ago(hours=1)
    one = Memory(content="python", created_at=when, last_accessed=when)
    both = Memory(content="python style guide", created_at=when, last_accessed=when)
    store.set(one.id, one)
    store.set(both.id, both)
    hits = store.search("python style")
    assert [h.memory.id for h in hits] == [both.id, one.id]
    assert hits[0].relevance_score > hits[1].relevance_score


def test_search_critical_before_low(store: Any) -> None:
    """At equal relevance and age, a critical memory ranks before a low one."""
    when = _ago(hours=1)
    low = Memory(content="rotate the keys", importance=MemoryImportance.LOW,
                 created_at=when, last_accessed=when)
    crit = Memory(content="rotate the keys", importance=MemoryImportance.CRITICAL,
                  created_at=when, last_accessed=when)
    store.set(low.id, low)
    store.set(crit.id, crit)
    assert [h.memory.id for h in store.search("rotate keys")] == [crit.id, low.id]


def test_search_every_level_in_order(store: Any) -> None:
    """At equal relevance and age, importance levels rank critical, high, medium, low."""
    when = _ago(hours=1)
    ids = {}
    for level in MemoryImportance:
        m = Memory(content="backup policy", importance=level, created_at=when, last_accessed=when)
        store.set(m.id, m)
        ids[m.id] = level
    order = [ids[h.memory.id] for h in store.search("backup", k=10)]
    assert order == [MemoryImportance.CRITICAL, MemoryImportance.HIGH,
                     MemoryImportance.MEDIUM, MemoryImportance.LOW]


def test_search_fresher_before_older(store: Any) -> None:
    """At equal relevance and importance, the more recently accessed memory ranks first."""
    old = Memory(content="the build is green", created_at=_ago(days=60), last_accessed=_ago(days=60))
    new = Memory(content="the build is green", created_at=_ago(days=60), last_accessed=_ago(hours=1))
    store.set(old.id, old)
    store.set(new.id, new)
    assert [h.memory.id for h in store.search("build green")] == [new.id, old.id]


def test_search_changes_nothing(store: Any) -> None:
    """Search does not record an access."""
    m = Memory(content="quiet memory", last_accessed=_ago(days=5))
    store.set(m.id, m)
    hit = store.search("quiet")[0]
    assert hit.memory.last_accessed == m.last_accessed
    assert store.search("quiet")[0].memory.last_accessed == m.last_accessed


def test_search_skips_deleted(store: Any) -> None:
    """A deleted memory is no longer found by search."""
    m = Memory(content="ephemeral fact")
    store.set(m.id, m)
    store.delete(m.id)
    assert store.search("ephemeral") == []


def test_search_folds_case_and_accents(store: Any) -> None:
    """Query terms match regardless of case and diacritics."""
    m = Memory(content="Meet at the CAFÉ")
    store.set(m.id, m)
    assert [h.memory.id for h in store.search("cafe")] == [m.id]


def test_closed_store_refuses(make_store: Factory) -> None:
    """Every method of a closed store raises StoreClosedError; closing again is harmless."""
    s = make_store()
    s.close()
    s.close()
    with pytest.raises(StoreClosedError):
        s.get("k")
    with pytest.raises(StoreClosedError):
        s.set("k", Memory(content="x"))
    with pytest.raises(StoreClosedError):
        s.delete("k")
    with pytest.raises(StoreClosedError):
        s.search("x")


def test_context_manager_closes(make_store: Factory) -> None:
    """Leaving a `with` block closes the store."""
    with make_store() as s:
        s.set("k", Memory(content="x"))
    with pytest.raises(StoreClosedError):
        s.get("k")


@pytest.mark.parametrize("in_thread", [False, True])
async def test_async_adapter(make_store: Factory, in_thread: bool) -> None:
    """The async adapter serves the same contract as coroutines (inline or in a thread)."""
    adapter = AsyncStoreAdapter(make_store(), in_thread=in_thread)
    assert isinstance(adapter, AsyncStore)
    m = Memory(content="async python memory")
    await adapter.set(m.id, m)
    got = await adapter.get(m.id)
    assert got is not None and got.content == m.content
    assert [h.memory.id for h in await adapter.search("python")] == [m.id]
    assert await adapter.delete(m.id) is True
    await adapter.aclose()
    with pytest.raises(StoreClosedError):
        await adapter.get(m.id)


async def test_async_with(make_store: Factory) -> None:
    """`async with` closes the store on exit."""
    async with make_store() as s:
        s.set("k", Memory(content="x"))
    with pytest.raises(StoreClosedError):
        s.get("k")


@pytest.mark.parametrize("backend", PERSISTENT)
def test_survives_reopening(backend: str, tmp_path: Path) -> None:
    """A persistent backend holds after reopening what it held when closed, accesses included."""
    factory = BACKENDS[backend](tmp_path)
    kept = [Memory(content=f"fact {i}", metadata={"i": i}) for i in range(20)]
    with factory() as s:
        for m in kept:
            s.set(m.id, m)
        s.set("other-key", kept[0])
        s.delete(kept[1].id)
        touched = s.get(kept[2].id)
    assert touched is not None
    expected = {m.id: m for m in kept[3:]}
    expected[touched.id] = touched
    with factory() as s:
        assert s.get(kept[1].id) is None
        found = {h.memory.id: h.memory for h in s.search("fact", k=100)}
        assert len(found) == len(expected) + 1  # kept[0] twice, under its id and "other-key"
        for mid, m in expected.items():
            assert found[mid] == m
        other = s.get("other-key")
        assert other is not None and other.id == kept[0].id


# -- the time of a fact: a memory's window, a search's `as_of` ---------------------------------

JAN = datetime(2026, 1, 1, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)
JUN = datetime(2026, 6, 1, tzinfo=UTC)


def _homes(store: Any) -> tuple[Memory, Memory, Memory]:
    """Boston until March (ISO text with an offset), Denver from March (epoch seconds), and a
    memory with no time, all about where the user lives."""
    boston = Memory(content="I live in Boston, near the harbour.",
                    valid_until="2026-03-01T01:00:00+01:00")
    denver = Memory(content="I live in Denver, near City Park.", valid_from=MAR.timestamp())
    always = Memory(content="I live with my dog Biscuit.")
    for m in (boston, denver, always):
        store.set(m.id, m)
    return boston, denver, always


def test_a_window_round_trips(make_store: Factory) -> None:
    """A memory's bounds come back from `get` and `search` as the same instants (a persistent
    store after reopening too), and a memory without them has none."""
    s = make_store()
    boston, denver, always = _homes(s)
    for m in (boston, denver, always):
        got = s.get(m.id)
        assert got is not None and (got.valid_from, got.valid_until) == (
            m.valid_from, m.valid_until)
    assert boston.valid_until == MAR and denver.valid_from == MAR
    found = {h.memory.id: h.memory for h in s.search("where do I live", k=10)}
    assert (found[boston.id].valid_from, found[boston.id].valid_until) == (None, MAR)
    assert (found[denver.id].valid_from, found[denver.id].valid_until) == (MAR, None)
    assert found[always.id].valid_from is None and found[always.id].valid_until is None


@pytest.mark.parametrize("backend", PERSISTENT)
def test_a_window_survives_reopening(backend: str, tmp_path: Path) -> None:
    """A persistent backend keeps a memory's bounds across reopening."""
    factory = BACKENDS[backend](tmp_path)
    m = Memory(content="Boston", valid_from=JAN, valid_until="2026-03-01T00:00:00Z")
    with factory() as s:
        s.set(m.id, m)
    with factory() as s:
        got = s.get(m.id)
    assert got is not None and (got.valid_from, got.valid_until) == (JAN, MAR)


def test_search_as_of_keeps_what_was_valid_then(store: Any) -> None:
    """With `as_of` a search finds only the memories valid then (the bound is half-open:
    `valid_until` excluded), in any of the instant's forms; without it, every one."""
    boston, denver, always = _homes(store)

    def at(as_of: Any) -> set[str]:
        return {h.memory.id for h in store.search("where do I live", k=10, as_of=as_of)}

    assert at(None) == {boston.id, denver.id, always.id}
    assert at(JAN) == at("2026-02-15T12:00:00Z") == {boston.id, always.id}
    assert at(MAR.timestamp() - 0.001) == {boston.id, always.id}
    assert at(MAR) == at(JUN.timestamp()) == {denver.id, always.id}


def test_a_store_without_its_window_holds_at_every_time_again(store: Any) -> None:
    """Setting a key again without bounds replaces them: it is found at any `as_of`."""
    m = Memory(content="I live in Boston.", valid_until=MAR)
    store.set("home", m)
    assert store.search("Boston", as_of=JUN) == []
    store.set("home", m.model_copy(update={"valid_until": None}))
    assert [h.memory.id for h in store.search("Boston", as_of=JUN)] == [m.id]


@pytest.mark.parametrize("bounds", [
    {"valid_from": "2026-03-01"},  # no zone
    {"valid_from": "not a date"},
    {"valid_until": float("inf")},
    {"valid_from": 1e13},  # past the year 9999
    {"valid_from": datetime(2026, 1, 1)},  # naive
    {"valid_from": True},
    {"valid_from": MAR, "valid_until": MAR},  # empty
    {"valid_from": MAR, "valid_until": JAN},
])
def test_a_bad_window_is_refused_and_nothing_stored(store: Any, bounds: dict[str, Any]
                                                    ) -> None:
    """A bad window is refused where the memory is made (`ValidationError`, naming the
    field), and, assigned to a memory after that, by `set` (`ValueError`), which then changes
    nothing: the memory stored under the key before is still there, with its bounds."""
    with pytest.raises(ValueError, match="valid_"):
        Memory(content="Boston", **bounds)
    before = Memory(content="I live in Boston.", valid_from=JAN)
    store.set("home", before)
    bad = before.model_copy(update={"content": "I live in Denver.", **bounds})
    with pytest.raises(ValueError, match="valid_"):
        store.set("home", bad)
    got = store.get("home")
    assert got is not None and got.content == "I live in Boston." and got.valid_from == JAN
    with pytest.raises(ValueError, match="valid_"):
        store.set("other", bad)
    assert store.get("other") is None
    assert [h.memory.content for h in store.search("Denver Boston", k=10)] == [
        "I live in Boston."]


@pytest.mark.parametrize("as_of", ["2026-03-01", "yesterday", float("nan"), -1e12, True,
                                   datetime(2026, 1, 1)])
def test_a_bad_as_of_is_refused(store: Any, as_of: Any) -> None:
    """A malformed `as_of` is a `ValueError` naming it."""
    store.set("k", Memory(content="I live in Boston."))
    with pytest.raises(ValueError, match="as_of"):
        store.search("Boston", as_of=as_of)


async def test_the_async_adapter_passes_as_of(make_store: Factory) -> None:
    """`AsyncStoreAdapter.search` hands `as_of` to the store."""
    adapter = AsyncStoreAdapter(make_store())
    m = Memory(content="I live in Boston.", valid_until=MAR)
    await adapter.set(m.id, m)
    assert [h.memory.id for h in await adapter.search("Boston", as_of=JAN)] == [m.id]
    assert await adapter.search("Boston", as_of=JUN) == []


def test_the_own_keyword_search_keeps_what_was_valid(tmp_path: Path) -> None:
    """The in-process stores' own keyword search (`search=False`) filters by `as_of` too."""
    for s in (InMemoryStore(search=False),
              JSONFileStore(tmp_path / "own.json", flush_delay=0, search=False)):
        with s:
            boston, denver, always = _homes(s)
            assert {h.memory.id for h in s.search("live", k=10, as_of=JAN)} == {
                boston.id, always.id}
            assert {h.memory.id for h in s.search("live", k=10, as_of=JUN)} == {
                denver.id, always.id}
            assert len(s.search("live", k=10)) == 3
            with pytest.raises(ValueError, match="as_of"):
                s.search("live", as_of="March")
