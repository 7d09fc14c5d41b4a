"""Each store sub-command run as a real subprocess against a real database file."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from support.dumps import jsonl, sorted_rows
from support.hosts import make_config, run_cli, running_host, url_of
from support.procs import HostProcess

from host.cli._progress import Progress
from host.client import MemoryClient


async def _fill(client: MemoryClient) -> None:
    await client.store([
        {"key": {"k": i}, "content": {"text": f"note {i} about apples"}, "tier": "episodic",
         "tags": ["fruit", f"n{i % 3}"], "score": 0.5, "source": "test"}
        for i in range(30)
    ])
    await client.store([
        {"key": {"fact": "sky"}, "content": "the sky is blue", "tier": "semantic", "ttl": 3600},
        {"key": {"fact": "sea"}, "content": "the sea is salty", "tier": "semantic"},
    ])


async def test_export_import_round_trip(client: MemoryClient, db_path: Path, tmp_path: Path) -> None:
    """Export, import into an empty database, export again: the same entries, timestamps kept;
    importing twice changes nothing; the imported entries are searchable."""
    await _fill(client)
    dump = tmp_path / "dump.jsonl"
    proc = run_cli("export", "--db", str(db_path), "--output", str(dump))
    assert proc.returncode == 0, proc.stderr.decode()
    first = jsonl(dump.read_bytes())
    assert len(first) == 32
    assert all("embedding" not in r for r in first)
    assert {"namespace", "tier", "owner", "key", "content", "tags", "source", "score", "ttl",
            "created_at", "updated_at"} <= set(first[0])

    target = tmp_path / "copy.db"
    for _ in range(2):  # the second import must change nothing
        proc = run_cli("import", str(dump), "--db", str(target))
        assert proc.returncode == 0, proc.stderr.decode()
        assert b"imported 32 entries" in proc.stderr
        again = run_cli("export", "--db", str(target))
        assert again.returncode == 0, again.stderr.decode()
        assert sorted_rows(jsonl(again.stdout)) == sorted_rows(first)

    async with running_host(make_config(target)) as h:
        c = await MemoryClient.connect(url_of(h))
        await c.init("ns", {"agent": "a1"})
        found = await c.retrieve(query="apples", limit=5)
        assert len(found.entries) == 5
        await c.close()


async def test_export_one_namespace_to_stdout(connect, db_path: Path) -> None:
    """--namespace exports only that namespace; without --output the lines go to stdout."""
    a = await connect()
    await a.init("alpha", {"agent": "x"})
    await a.store([{"key": {"k": 1}, "content": 1, "tier": "episodic"}])
    b = await connect()
    await b.init("beta", {"agent": "x"})
    await b.store([{"key": {"k": 2}, "content": 2, "tier": "semantic"}])
    proc = run_cli("export", "--db", str(db_path), "--namespace", "beta")
    rows = jsonl(proc.stdout)
    assert [(r["namespace"], r["key"]) for r in rows] == [("beta", {"k": 2})]
    assert b"\r" not in proc.stderr  # no progress bar when stderr is not a terminal


def test_import_from_stdin_and_bad_line(tmp_path: Path) -> None:
    """`import -` reads stdin; a bad line stops the import naming its line number."""
    db = tmp_path / "in.db"
    good = json.dumps({"namespace": "n", "tier": "semantic", "key": {"a": 1}, "content": "x",
                       "created_at": 1000.0, "updated_at": 2000.0})
    proc = run_cli("import", "-", "--db", str(db), input=(good + "\n").encode())
    assert proc.returncode == 0, proc.stderr.decode()
    rows = jsonl(run_cli("export", "--db", str(db)).stdout)
    assert [(r["created_at"], r["updated_at"], r["agent"]) for r in rows] == [
        (1000.0, 2000.0, "a2e-host-import")]
    bad = good + "\n" + json.dumps({"namespace": "n", "tier": "working", "key": {"a": 2},
                                    "content": 1})
    proc = run_cli("import", "-", "--db", str(db), input=bad.encode())
    assert proc.returncode == 2 and b"line 2" in proc.stderr


def test_gc_stats_and_vacuum(tmp_path: Path) -> None:
    """gc deletes expired entries, stats counts by namespace and tier, vacuum shrinks the file."""
    db = tmp_path / "g.db"
    old = time.time() - 1000
    lines = [
        json.dumps({"namespace": "n1", "tier": "episodic", "owner": "a", "key": {"i": i},
                    "content": "x" * 2000, "ttl": 10, "created_at": old, "updated_at": old})
        for i in range(300)
    ] + [
        json.dumps({"namespace": "n2", "tier": "semantic", "key": {"i": i}, "content": i})
        for i in range(4)
    ]
    assert run_cli("import", "-", "--db", str(db), input="\n".join(lines).encode()).returncode == 0
    stats = json.loads(run_cli("stats", "--db", str(db), "--json").stdout)
    assert stats["entries"] == 4  # expired entries are not counted
    assert [(r["namespace"], r["tier"], r["entries"]) for r in stats["namespaces"]] == [
        ("n2", "semantic", 4)]
    proc = run_cli("gc", "--db", str(db))
    assert proc.returncode == 0 and b"deleted 300 expired entries" in proc.stdout
    before = json.loads(run_cli("stats", "--db", str(db), "--json").stdout)["database_bytes"]
    proc = run_cli("vacuum", "--db", str(db))
    assert proc.returncode == 0, proc.stderr.decode()
    after = json.loads(run_cli("stats", "--db", str(db), "--json").stdout)["database_bytes"]
    assert after < before
    text = run_cli("stats", "--db", str(db)).stdout.decode()
    assert "n2" in text and "semantic" in text and "total entries: 4" in text


def test_commands_refuse_a_missing_database(tmp_path: Path) -> None:
    """A mistyped --db is an error (exit 2), not a new empty database."""
    for cmd in (["stats"], ["gc"], ["export"], ["vacuum"], ["backup", str(tmp_path / "b.db")]):
        proc = run_cli(*cmd, "--db", str(tmp_path / "nope.db"))
        assert proc.returncode == 2 and b"no database" in proc.stderr, cmd
    assert not (tmp_path / "nope.db").exists()


def test_postgres_url_is_refused_by_file_commands() -> None:
    """The file commands say they need SQLite, with the URL's password masked."""
    proc = run_cli("backup", "x.db", "--db", "postgresql://u:pw@h/db")
    assert proc.returncode == 2
    assert b"SQLite" in proc.stderr and b"pw@" not in proc.stderr


async def test_backup_while_writing(host_process, tmp_path: Path) -> None:
    """A backup taken while a client keeps writing opens and holds every entry acknowledged
    before the backup started."""
    db = tmp_path / "live.db"
    hp: HostProcess = host_process(db)
    client = await MemoryClient.connect(hp.url)
    await client.init("ns", {"agent": "w"})
    acked: list[int] = []
    stop = asyncio.Event()

    async def writer() -> None:
        i = 0
        while not stop.is_set():
            await client.store([{"key": {"i": i}, "content": f"v{i}", "tier": "episodic"}])
            acked.append(i)
            i += 1

    task = asyncio.create_task(writer())
    while len(acked) < 50:
        await asyncio.sleep(0.01)
    before = set(acked)
    dest = tmp_path / "backup.db"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "host.cli", "backup", str(dest), "--db", str(db),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    stop.set()
    await task
    await client.close()
    assert proc.returncode == 0, err.decode()
    assert not Path(str(dest) + ".partial").exists()
    rows = jsonl(run_cli("export", "--db", str(dest)).stdout)
    held = {r["key"]["i"] for r in rows}
    assert before <= held
    assert held <= set(acked) | {max(acked) + 1}  # nothing that was never written


def test_progress_bar_draws_on_a_terminal() -> None:
    """The progress bar writes to a terminal and stays silent on a pipe."""
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as tty:
        with Progress("job", 10, tty) as bar:
            bar.advance(10)
        drawn = os.read(master, 1000)
    os.close(master)
    assert b"job [" in drawn and b"10/10" in drawn
    r, w = os.pipe()
    with os.fdopen(w, "w") as pipe:
        with Progress("job", 10, pipe) as bar:
            bar.advance(10)
    with os.fdopen(r, "rb") as fh:
        assert fh.read() == b""
