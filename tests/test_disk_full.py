"""A full disk, for real: a small tmpfs mounted by the test holds the SQLite store.

Promises (docs/durability.md, "A full disk"): a store that finds no room is refused with
`memory_full`, `detail.reason` "disk_full", and nothing of it is kept; `/readyz` is 503 and
says why; forgets still run (the reserve gives the WAL room); writes resume by themselves once
the disk has room; every acknowledged write is still there after a restart. Mounting needs
root (CAP_SYS_ADMIN): where the machine refuses it, the test is skipped with that reason.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.hosts import make_config, running_host
from support.http import get

from host.client import MemoryClient, RemoteError

MIB = 1024 * 1024
RESERVE = 512 * 1024


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """An 8 MiB tmpfs mounted at a fresh folder; unmounted after the test."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "tmpfs", str(mnt)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN): "
                    f"{(out.stderr or out.stdout).strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: Path, leave: int) -> Path:
    """A ballast file that leaves about `leave` bytes free on `path`'s filesystem."""
    ballast = path / "ballast"
    with open(ballast, "wb") as f:
        f.write(b"\0" * max(0, free_bytes(path) - leave))
    return ballast


def big(i: int) -> dict[str, Any]:
    return {"key": {"n": i}, "content": f"entry {i} " + "x" * 30_000, "tier": "episodic"}


async def test_full_disk_refuses_stores_keeps_forgets_and_recovers(small_disk: Path) -> None:
    db = small_disk / "a2e.db"
    config = make_config(db, store={"disk_reserve_bytes": RESERVE},
                         search={"embedder": "none"})
    acked: set[int] = set()
    async with running_host(config) as host:
        assert (small_disk / "a2e.db-reserve").stat().st_size == RESERVE
        assert (await get(host.port, "/readyz"))[0] == 200
        ballast = fill(small_disk, 1 * MIB)
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init("ns", {"agent": "a"})
            refused: RemoteError | None = None
            for r in range(200):  # 4 x 30 KB a request: the disk is full well before 200
                batch = [big(4 * r + j) for j in range(4)]
                try:
                    reply = await c.store(batch)
                except RemoteError as err:
                    refused = err
                    lost = [e["key"]["n"] for e in batch]
                    break
                assert reply.errors == []
                acked.update(e["key"]["n"] for e in batch)
            assert refused is not None, "the disk never filled"
            assert acked, "the disk was full before the first store"
            # the answer: memory_full with the reason, not a retryable internal error
            assert refused.code == "memory_full"
            assert refused.detail.get("reason") == "disk_full"
            assert refused.retryable is False
            assert "disk" in refused.reply.message
            # nothing of the refused request is kept
            assert (await c.retrieve(keys=[{"n": n} for n in lost])).total == 0
            # the operator sees it
            status, _type, body = await get(host.port, "/readyz")
            assert status == 503 and "disk full" in body
            # a store now is refused the same way, without being tried
            with pytest.raises(RemoteError) as again:
                await c.store([big(10_000)])
            assert again.value.code == "memory_full"
            assert again.value.detail.get("reason") == "disk_full"
            # forgets still run: an agent can free space
            gone = sorted(acked)[:3]
            assert await c.forget(keys=[{"n": n} for n in gone]) == 3
            acked.difference_update(gone)
            assert (await c.retrieve(keys=[{"n": n} for n in gone])).total == 0
            # the operator frees space: writes resume with no restart
            ballast.unlink()
            reply = await c.store([big(20_000)])
            assert reply.errors == [] and len(reply.stored) == 1
            acked.add(20_000)
            assert (await get(host.port, "/readyz"))[0] == 200
            assert (small_disk / "a2e.db-reserve").stat().st_size == RESERVE
            every = await c.retrieve(limit=1000)
            assert {e["key"]["n"] for e in every.entries} == acked
    # every acknowledged write survived, and nothing else
    with sqlite3.connect(db) as conn:
        keys = {row[0] for row in conn.execute("SELECT key FROM entries")}
    assert len(keys) == len(acked)


async def test_full_disk_at_start_is_not_ready_until_there_is_room(small_disk: Path) -> None:
    """A host started on a disk with no room for its reserve opens, reads, and refuses stores
    (`/readyz` 503) until space is freed."""
    db = small_disk / "a2e.db"
    config = make_config(db, store={"disk_reserve_bytes": 2 * MIB},
                         search={"embedder": "none"})
    async with running_host(config) as host:  # creates the schema with room to spare
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init("ns", {"agent": "a"})
            await c.store([big(1)])
    (small_disk / "a2e.db-reserve").unlink()
    ballast = fill(small_disk, 1 * MIB)  # less than the reserve
    async with running_host(config) as host:
        status, _type, body = await get(host.port, "/readyz")
        assert status == 503 and "disk full" in body
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init("ns", {"agent": "a"})
            assert (await c.retrieve(keys=[{"n": 1}])).total == 1
            with pytest.raises(RemoteError) as err:
                await c.store([big(2)])
            assert err.value.detail.get("reason") == "disk_full"
            ballast.unlink()
            assert len((await c.store([big(2)])).stored) == 1
        assert (await get(host.port, "/readyz"))[0] == 200


async def test_without_a_reserve_a_full_disk_is_still_a_clear_answer(small_disk: Path) -> None:
    """With `store.disk_reserve_bytes = 0` a full disk is still `memory_full` / `disk_full`
    (never `internal_error`), and stores resume once the disk has room again."""
    db = small_disk / "a2e.db"
    config = make_config(db, store={"disk_reserve_bytes": 0}, search={"embedder": "none"})
    async with running_host(config) as host:
        assert not (small_disk / "a2e.db-reserve").exists()
        ballast = fill(small_disk, 1 * MIB)
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init("ns", {"agent": "a"})
            with pytest.raises(RemoteError) as err:
                for r in range(200):
                    await c.store([big(4 * r + j) for j in range(4)])
            assert err.value.code == "memory_full"
            assert err.value.detail.get("reason") == "disk_full"
            assert (await get(host.port, "/readyz"))[0] == 503
            ballast.unlink()
            assert len((await c.store([big(20_000)])).stored) == 1
            assert (await get(host.port, "/readyz"))[0] == 200
