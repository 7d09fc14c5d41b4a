"""SQLiteStore beyond the contract: one engine with the host, tiers, scopes and quotas."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from host.app import Host
from host.library import Memory, MemoryImportance, MemoryType, SQLiteStore, StoreFullError
from host.library.mapping import memory_to_entry
from host.store.records import Quotas


async def test_host_serves_library_memories(host: Host, db_path: Path,
                                            connect: Callable[..., Any]) -> None:
    """What the library stores, a host on the same file returns over WebSocket, and back."""
    with SQLiteStore(db_path, namespace="ns", agent="a1") as store:
        fact = Memory(content="the staging database is on port 5433",
                      memory_type=MemoryType.SEMANTIC, importance=MemoryImportance.HIGH)
        howto = Memory(content="deploy with make release", memory_type=MemoryType.PROCEDURAL)
        store.set(fact.id, fact)
        store.set(howto.id, howto)

        client = await connect()
        await client.init("ns", {"agent": "a1"})
        got = await client.retrieve(keys=[{"id": fact.id}])
        assert got.entries[0]["content"] == memory_to_entry(fact)["content"]
        assert got.entries[0]["score"] == 0.75
        procedural = await client.retrieve(tags=["type:procedural"])
        assert [e["key"] for e in procedural.entries] == [{"id": howto.id}]
        hits = await client.retrieve(query="staging database port")
        assert hits.entries[0]["key"] == {"id": fact.id}

        await client.store([{"key": {"id": "from-wire"}, "content": "the wiki moved to notion",
                             "tier": "episodic", "score": 0.25}])
        wired = store.get("from-wire")
        assert wired is not None and wired.content == "the wiki moved to notion"
        assert wired.memory_type is MemoryType.EPISODIC
        assert wired.importance is MemoryImportance.LOW
        assert [h.memory.id for h in store.search("wiki")] == ["from-wire"]


def test_working_memory_kept_in_episodic_tier(tmp_path: Path) -> None:
    """A working memory persists (in the agent's episodic tier) and comes back as working."""
    db = tmp_path / "m.db"
    m = Memory(content="scratch", memory_type=MemoryType.WORKING)
    with SQLiteStore(db) as s:
        s.set(m.id, m)
    with SQLiteStore(db) as s:
        got = s.get(m.id)
        assert got is not None and got.memory_type is MemoryType.WORKING


def test_key_moves_between_tiers(tmp_path: Path) -> None:
    """Re-setting a key with a type of another tier replaces it there: one memory per key."""
    with SQLiteStore(tmp_path / "m.db") as s:
        s.set("k", Memory(content="first note", memory_type=MemoryType.EPISODIC))
        s.set("k", Memory(content="second note", memory_type=MemoryType.SEMANTIC))
        got = s.get("k")
        assert got is not None and got.memory_type is MemoryType.SEMANTIC
        assert [h.memory.content for h in s.search("note")] == ["second note"]
        assert s.delete("k") is True and s.get("k") is None


def test_agents_see_their_episodic_and_shared_semantic(tmp_path: Path) -> None:
    """Another agent of the namespace sees semantic memories but not episodic ones."""
    db = tmp_path / "m.db"
    with SQLiteStore(db, agent="a") as a, SQLiteStore(db, agent="b") as b, \
            SQLiteStore(db, namespace="other", agent="a") as elsewhere:
        a.set("mine", Memory(content="private", memory_type=MemoryType.EPISODIC))
        a.set("ours", Memory(content="shared", memory_type=MemoryType.SEMANTIC))
        assert b.get("mine") is None
        assert b.get("ours") is not None
        assert elsewhere.get("ours") is None


def test_quota_refuses_and_changes_nothing(tmp_path: Path) -> None:
    """Past the agent's quota `set` raises StoreFullError and the store is unchanged."""
    with SQLiteStore(tmp_path / "m.db", quotas=Quotas(max_entries_per_agent=2)) as s:
        s.set("a", Memory(content="one"))
        s.set("b", Memory(content="two"))
        with pytest.raises(StoreFullError):
            s.set("c", Memory(content="three"))
        assert s.get("c") is None
        s.set("a", Memory(content="one again"))  # replacing stays within the quota


# Facts and questions sharing no content word with them: only meaning links them.
_BY_MEANING = [
    ("Maria adopted a beagle named Toby last week.", "Who got a new dog recently?"),
    ("The dentist appointment is on Friday at 3 pm.", "When do I see the tooth doctor?"),
    ("We keep our passwords in Bitwarden.", "Which tool stores our login secrets?"),
]
_OTHERS = ["The quarterly budget review is on Monday.", "The office printer is out of toner.",
           "Lunch on Friday is pizza.", "The staging server runs Debian."]


def test_search_finds_by_meaning_with_the_relevance_a_host_reports(tmp_path: Path) -> None:
    """After `embed_pending`, a question sharing no word with a fact finds it among the 3 best,
    and the keyword-only store (embedder "none") does not."""
    from host.config import SearchConfig

    db = tmp_path / "m.db"
    facts = [Memory(content=f) for f, _q in _BY_MEANING]
    with SQLiteStore(db) as s:
        s.set_many([(m.id, m) for m in [Memory(content=t) for t in _OTHERS] + facts])
        assert s.embed_pending() == len(_OTHERS) + len(_BY_MEANING)
        for fact, (_f, question) in zip(facts, _BY_MEANING, strict=True):
            hits = s.search(question, k=3)
            assert fact.id in [h.memory.id for h in hits], question
            assert all(0 < h.relevance_score < 1 for h in hits)
        assert s.embed_pending() == 0
    with SQLiteStore(db, search=SearchConfig(embedder="none")) as keywords:
        assert keywords.search(_BY_MEANING[0][1], k=3) == []


def test_an_embedder_that_cannot_load_leaves_a_keyword_search(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store whose embedder cannot be loaded says so in the log and searches by keywords."""
    from host.config import SearchConfig

    cfg = SearchConfig(embedder="sentence-transformers", model=str(tmp_path / "no-such-model"))
    with caplog.at_level("WARNING", logger="a2e_host.library"), \
            SQLiteStore(tmp_path / "m.db", search=cfg) as s:
        s.set("dog", Memory(content=_BY_MEANING[0][0]))
        assert [h.memory.content for h in s.search("beagle", k=3)] == [_BY_MEANING[0][0]]
        assert s.search(_BY_MEANING[0][1], k=3) == []
        assert s.embed_pending() == 0
    assert any("keyword-only" in r.getMessage() for r in caplog.records)
