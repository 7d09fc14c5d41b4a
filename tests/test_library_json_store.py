"""JSONFileStore beyond the contract: the file, the writer thread, the lock, other stores."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from host.config import SearchConfig
from host.library import JSONFileStore, Memory, StoreFormatError, StoreLockedError
from host.library.files import FileLock
from host.library.json_store import FORMAT, FORMAT_VERSION, read_file


def _wait_until(cond, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Poll `cond` until true; fail after `timeout` (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_file_carries_format_and_version(tmp_path: Path) -> None:
    """The file names its format and version and holds each memory's `to_dict()` by key."""
    path = tmp_path / "m.json"
    m = Memory(content="x", metadata={"a": 1})
    with JSONFileStore(path) as s:
        s.set("k", m)
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and data["version"] == FORMAT_VERSION
    assert data["memories"] == {"k": m.to_dict()}


def test_flush_makes_changes_durable(tmp_path: Path) -> None:
    """When flush() returns, the file holds every change made before it, without closing."""
    path = tmp_path / "m.json"
    with JSONFileStore(path, flush_delay=60) as s:
        ms = [Memory(content=str(i)) for i in range(50)]
        for m in ms:
            s.set(m.id, m)
        s.delete(ms[0].id)
        s.flush()
        on_disk = read_file(path)
        assert set(on_disk) == {m.id for m in ms[1:]}


def test_burst_is_coalesced(tmp_path: Path) -> None:
    """A burst of changes inside the flush delay costs a single file write."""
    path = tmp_path / "m.json"
    with JSONFileStore(path, flush_delay=60) as s:
        for i in range(200):
            s.set(f"k{i}", Memory(content=str(i)))
        s.flush()
        assert s.writes == 1
        s.flush()  # nothing new: no write
        assert s.writes == 1


def test_writer_flushes_in_background(tmp_path: Path) -> None:
    """Without flush() or close(), the writer thread puts changes on disk by itself."""
    path = tmp_path / "m.json"
    with JSONFileStore(path, flush_delay=0) as s:
        s.set("k", Memory(content="x"))
        _wait_until(lambda: "k" in read_file(path))


def test_access_times_ride_along(tmp_path: Path) -> None:
    """An access recorded by get() starts no write, and is on disk after flush()."""
    path = tmp_path / "m.json"
    with JSONFileStore(path, flush_delay=0) as s:
        s.set("k", Memory(content="x"))
        s.flush()
        writes = s.writes
        got = s.get("k")
        assert got is not None and s.writes == writes
        s.flush()
        assert read_file(path)["k"].memory.last_accessed == got.last_accessed


def test_no_temporary_file_left(tmp_path: Path) -> None:
    """After writes, the folder holds only the data file and its lock file."""
    path = tmp_path / "m.json"
    with JSONFileStore(path) as s:
        for i in range(10):
            s.set(str(i), Memory(content="x"))
            s.flush()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json", "m.json.lock"]


def test_newer_version_refused_and_kept(tmp_path: Path) -> None:
    """A file of a newer format version is refused and left unchanged."""
    path = tmp_path / "m.json"
    text = json.dumps({"format": FORMAT, "version": FORMAT_VERSION + 1, "memories": {}})
    path.write_text(text)
    with pytest.raises(StoreFormatError):
        JSONFileStore(path)
    assert path.read_text() == text


@pytest.mark.parametrize("text", ["{not json", "[]", '{"format": "other"}',
                                  json.dumps({"format": FORMAT, "version": 1, "memories": {"k": {}}})])
def test_foreign_or_damaged_file_refused(tmp_path: Path, text: str) -> None:
    """A file that is not a store file, or holds an invalid memory, is refused."""
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(StoreFormatError):
        JSONFileStore(path)


def test_lock_timeout(tmp_path: Path) -> None:
    """Opening waits for the lock and gives up with StoreLockedError after the timeout."""
    path = tmp_path / "m.json"
    holder = FileLock(tmp_path / "m.json.lock", timeout=1)
    holder.acquire()
    try:
        with pytest.raises(StoreLockedError):
            JSONFileStore(path, lock_timeout=0.2)
    finally:
        holder.close()
    JSONFileStore(path).close()


def test_failed_write_is_reported_and_retried(tmp_path: Path) -> None:
    """A write that fails makes flush() raise; the changes stay queued and a later flush writes them."""
    path = tmp_path / "m.json"
    blocker = tmp_path / "m.json.tmp"
    with JSONFileStore(path, flush_delay=60, retry_delay=60) as s:
        blocker.mkdir()  # the temporary file cannot be created
        s.set("k", Memory(content="x"))
        with pytest.raises(OSError):
            s.flush()
        assert not path.exists()
        blocker.rmdir()
        s.flush()
        assert set(read_file(path)) == {"k"}


def test_two_stores_merge(tmp_path: Path) -> None:
    """Two stores on one file each keep the other's writes, deletes included."""
    path = tmp_path / "m.json"
    with JSONFileStore(path, flush_delay=60) as a, JSONFileStore(path, flush_delay=60) as b:
        a.set("a1", Memory(content="from a"))
        b.set("b1", Memory(content="from b"))
        b.set("b2", Memory(content="from b"))
        a.flush()
        b.flush()  # b sees a's write, adds its own
        a.flush()  # a picks up b's
        assert set(a.keys()) == set(b.keys()) == {"a1", "b1", "b2"}
        a.delete("b2")
        a.flush()
        b.flush()
        assert set(b.keys()) == {"a1", "b1"}
    assert set(read_file(path)) == {"a1", "b1"}


def test_search_finds_what_another_store_wrote_and_forgets_what_it_deleted(
    tmp_path: Path,
) -> None:
    """A store whose search engine already runs, once it picks up another store's writes,
    finds that store's new memory by meaning and no longer finds the one it deleted."""
    path = tmp_path / "m.json"
    with JSONFileStore(path, flush_delay=60) as a, JSONFileStore(path, flush_delay=60) as b:
        b.set("printer", Memory(content="The office printer is out of toner."))
        b.set("lunch", Memory(content="Lunch on Friday is pizza."))
        b.flush()
        assert [h.memory.content for h in b.search("toner", k=5)] == [
            "The office printer is out of toner."]
        a.flush()  # a picks up b's memories
        a.set("dog", Memory(content="Maria adopted a beagle named Toby last week."))
        a.delete("printer")
        a.flush()
        b.flush()  # b's table is replaced by the merged file
        b.embed_pending()
        found = [h.memory.content for h in b.search("Who got a new dog recently?", k=3)]
        assert "Maria adopted a beagle named Toby last week." in found
        assert b.search("toner", k=5) == []


def test_search_sees_metadata_another_store_changed(tmp_path: Path) -> None:
    """After picking up another store's change of a memory's metadata alone (same text, same
    type), search scores the memory as a store that never saw the old metadata does."""
    path = tmp_path / "m.json"
    keywords = SearchConfig(embedder="none")
    query = "Lisbon zephyr"
    with JSONFileStore(path, flush_delay=60, search=keywords) as a, \
            JSONFileStore(path, flush_delay=60, search=keywords) as b:
        b.set("trip", Memory(content="Booked the flights to Lisbon.",
                             metadata={"project": "alpha"}))
        b.flush()
        before = [h.relevance_score for h in b.search(query, k=5)]
        a.flush()  # a picks up b's memory
        trip = a.get("trip")
        assert trip is not None
        a.set("trip", trip.model_copy(update={"metadata": {"project": "zephyr"}}))
        a.flush()
        b.flush()  # b's table is replaced by the merged file
        after = [(h.memory.metadata, h.relevance_score) for h in b.search(query, k=5)]
    with JSONFileStore(path, flush_delay=60, search=keywords) as fresh:
        expected = [(h.memory.metadata, h.relevance_score) for h in fresh.search(query, k=5)]
    assert expected[0][0] == {"project": "zephyr"} and expected[0][1] > before[0]
    assert after == expected


def test_same_key_later_flush_wins(tmp_path: Path) -> None:
    """When two stores write one key, the later write wins and other keys are kept."""
    path = tmp_path / "m.json"
    with JSONFileStore(path, flush_delay=60) as a, JSONFileStore(path, flush_delay=60) as b:
        a.set("k", Memory(content="a"))
        a.set("ka", Memory(content="a"))
        b.set("k", Memory(content="b"))
        a.flush()
        b.flush()
        a.flush()
        got = a.get("k")
        assert got is not None and got.content == "b"
        assert "ka" in set(b.keys())


def test_normal_exit_flushes(tmp_path: Path) -> None:
    """A process that exits without closing its store still leaves its changes on disk."""
    path = tmp_path / "m.json"
    code = (
        "import sys\n"
        "from host.library import JSONFileStore, Memory\n"
        "s = JSONFileStore(sys.argv[1], flush_delay=60)\n"
        "for i in range(100):\n"
        "    s.set(f'k{i}', Memory(content=str(i)))\n"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    assert len(read_file(path)) == 100
