"""An operator's mistakes, each run as a real `a2e-host` subprocess: one line naming the path and
the fix, exit 2, no traceback, nothing created; what `serve` says when it starts; the version.

Root may write in a folder of mode 0555, so the read-only folder tests take the process's
power to override file permissions away (the capability bounding set, dropped in the child
before it runs Python); the read-only file system is a tmpfs mounted read-only in a private
mount namespace, where the sandbox allows one.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tomllib
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.hosts import run_cli
from support.procs import HostProcess

from host import __version__
from host.cli._progress import Progress, human_bytes
from host.client import MemoryClient

ROOT = Path(__file__).resolve().parent.parent
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def _one_line_error(proc: subprocess.CompletedProcess[bytes], *needles: str) -> str:
    """The one `a2e-host: ...` line of a failed command (exit 2), checked: no traceback, and
    each of `needles` in it."""
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if not line.startswith("{")]  # JSON log lines
    assert len(lines) == 1 and lines[0].startswith("a2e-host: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else b"<dir>"
            for p in sorted(folder.rglob("*"))}


def _foreign_db(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.close()


MISTAKES: dict[str, tuple[Callable[[Path], str], str]] = {
    # name: (make the mistake in a folder, returning the --db; what the message says)
    "a text file": (lambda d: (d / "notes.txt").write_text("hello\n") and str(d / "notes.txt"),
                    "is not a SQLite database"),
    "a folder": (lambda d: (d / "data").mkdir() or str(d / "data"), "is a folder"),
    "a file where a folder should be": (
        lambda d: (d / "notes.txt").write_text("hello\n") and str(d / "notes.txt" / "x.db"),
        "is a file, not a folder"),
    "a missing folder": (lambda d: str(d / "nowhere" / "x.db"), "does not exist"),
    "another application's database": (lambda d: _foreign_db(d / "app.db") or str(d / "app.db"),
                                       "another application's SQLite database"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_serve_refuses_a_bad_db_in_one_line_creating_nothing(tmp_path: Path, mistake: str) -> None:
    """`serve --db` on a text file, a folder, a path under a file, a missing folder or another
    application's SQLite file exits 2 with one line naming the path and the fix, and leaves
    every file as it was."""
    make, says = MISTAKES[mistake]
    db = make(tmp_path)
    before = _listing(tmp_path)
    line = _one_line_error(run_cli("serve", "--port", "0", "--db", db), says)
    assert str(Path(db).parent) in line or db in line
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("command", [["stats"], ["gc"], ["export"], ["vacuum"], ["reindex"],
                                     ["import", "-"], ["backup", "copy.db"]])
def test_store_commands_refuse_a_bad_db_in_one_line(tmp_path: Path, command: list[str]) -> None:
    """Each store command refuses a text file, a folder and another application's database
    with exit 2 and one line, changing nothing."""
    for mistake in ("a text file", "a folder", "another application's database"):
        folder = tmp_path / mistake.replace(" ", "_").replace("'", "")
        folder.mkdir()
        make, says = MISTAKES[mistake]
        db = make(folder)
        before = _listing(folder)
        _one_line_error(run_cli(*command, "--db", db, input=b"", cwd=folder), says, db)
        assert _listing(folder) == before, mistake


def test_backup_into_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    """`backup` into a folder that does not exist, or onto a folder, exits 2 with one line
    naming it; the source is untouched and no partial file is left."""
    db = tmp_path / "a.db"
    assert run_cli("import", "-", "--db", str(db), input=b"").returncode == 0
    before = _listing(tmp_path)
    _one_line_error(run_cli("backup", str(tmp_path / "no" / "b.db"), "--db", str(db)),
                    str(tmp_path / "no"), "does not exist")
    _one_line_error(run_cli("backup", str(tmp_path), "--db", str(db)), "is a folder")
    assert _listing(tmp_path) == before


def _without_root_powers() -> None:
    """In the child before exec: drop the capabilities that let root write anywhere."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _run_restricted(*args: str) -> subprocess.CompletedProcess[bytes]:
    """`a2e-host ARGS` as a process the file permissions bind (root without its override)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2E_HOST_")}
    return subprocess.run([sys.executable, "-m", "host.cli", *args], env=env, input=b"",
                          capture_output=True, timeout=60, cwd=ROOT,
                          preexec_fn=_without_root_powers if os.geteuid() == 0 else None)


def test_a_read_only_folder_is_one_line(tmp_path: Path) -> None:
    """A new database in a folder the process may not write, and an existing one there: serve
    and import exit 2 with one line naming the folder; nothing is created."""
    if os.geteuid() == 0:
        probe = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=_without_root_powers,
                               capture_output=True)
        if probe.returncode != 0:
            pytest.skip("cannot drop root's file-permission override here")
    folder = tmp_path / "locked"
    folder.mkdir()
    old = folder / "old.db"
    assert run_cli("import", "-", "--db", str(old), input=b"").returncode == 0
    (folder / "old.db-reserve").unlink(missing_ok=True)
    folder.chmod(0o555)
    try:
        before = _listing(folder)
        for db in (folder / "new.db", old):
            _one_line_error(_run_restricted("serve", "--port", "0", "--db", str(db)),
                            f"cannot write in {folder}", "permission denied")
            _one_line_error(_run_restricted("import", "-", "--db", str(db)),
                            f"cannot write in {folder}")
        assert _listing(folder) == before
    finally:
        folder.chmod(0o755)


def test_a_read_only_file_system_is_one_line(tmp_path: Path) -> None:
    """`serve` and `stats` on a read-only file system exit 2 with one line that says so."""
    mnt = tmp_path / "ro"
    mnt.mkdir()
    probe = subprocess.run(["unshare", "-m", "mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(mnt)],
                           capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no private mount namespace here (unshare -m)")
    cli = f"{sys.executable} -m host.cli"
    script = (f"mount -t tmpfs tmpfs {mnt} && {cli} import - --db {mnt}/old.db </dev/null"
              f" && mount -o remount,ro {mnt}"
              f" && {cli} serve --port 0 --db {mnt}/new.db; echo serve-new $?"
              f"; {cli} serve --port 0 --db {mnt}/old.db; echo serve-old $?"
              f"; {cli} stats --db {mnt}/old.db; echo stats $?")
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2E_HOST_")}
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, cwd=ROOT,
                          env=env, timeout=120)
    out, err = proc.stdout.decode(), proc.stderr.decode()
    assert "serve-new 2" in out and "serve-old 2" in out and "stats 2" in out, out + err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("a2e-host: ")]
    assert len(lines) == 3, err
    assert all(f"cannot write in {mnt} (a read-only file system)" in line for line in lines)


def test_a_start_on_a_taken_port_creates_no_database(tmp_path: Path) -> None:
    """`serve` on a port another process holds exits 2 with one line naming the address, and
    leaves no database and no reserve file behind."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_cli("serve", "--port", str(port), "--db", str(tmp_path / "a2e-host.db"))
    _one_line_error(proc, f"127.0.0.1:{port}", "already in use", "--port")
    assert _listing(tmp_path) == {}


def _messages(hp: HostProcess) -> list[str]:
    """The log messages of a stopped host process (JSON lines on its stderr)."""
    assert hp.proc.stderr is not None
    return [json.loads(line)["msg"] for line in hp.proc.stderr.read().decode().splitlines()
            if line.startswith("{")]


async def test_serve_names_its_database_and_the_browser(tmp_path: Path) -> None:
    """The start-up lines give the version, the address, the database's absolute path (the
    default ./a2e-host.db resolved in the working folder) with new or existing, and the
    memory browser's address."""
    ours = tuple(k for k in os.environ if k.startswith("A2E_HOST_"))
    for state in ("new", "existing"):
        hp = HostProcess("a2e-host.db", cwd=tmp_path, env={"PYTHONPATH": str(ROOT)}, unset=ours,
                         timeout=30)
        assert hp.stop() == 0
        said = _messages(hp)
        assert (f"a2e-host {__version__} listening on ws://127.0.0.1:{hp.port} (websockets"
                " transport, HTTP + SSE on the same port, authentication off)") in said
        assert f"database: {tmp_path / 'a2e-host.db'} ({state})" in said
        assert f"memory browser: http://127.0.0.1:{hp.port}/ui" in said


async def test_serve_adopts_another_applications_database_only_when_asked(tmp_path: Path) -> None:
    """Another application's SQLite file is refused without --adopt; with it the host adds its
    tables beside the others (which keep their rows) and serves; later starts need no flag."""
    db = tmp_path / "app.db"
    _foreign_db(db)
    _one_line_error(run_cli("serve", "--port", "0", "--db", str(db)), "--adopt")
    hp = HostProcess(db, "--adopt", timeout=30)
    try:
        client = await MemoryClient.connect(hp.url)
        await client.init("ns", {"agent": "a"})
        await client.store([{"key": {"k": 1}, "content": "kept", "tier": "semantic"}])
        await client.close()
    finally:
        assert hp.stop() == 0
    assert "database: " + str(db) + " (adopted: the host's tables added beside the others)" \
        in _messages(hp)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT name FROM users").fetchall() == [("ada",)]
    conn.close()
    again = HostProcess(db, timeout=30)
    assert again.stop() == 0
    assert f"database: {db} (existing)" in _messages(again)


def test_version_is_the_projects() -> None:
    """`a2e-host --version` prints the version pyproject.toml declares, and `host.__version__`
    is the same."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    proc = run_cli("--version", text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"a2e-host {declared}"
    assert __version__ == declared


async def test_healthz_gives_the_version_as_json(tmp_path: Path) -> None:
    """`/healthz` asked for JSON answers `{"status": "ok", "version": ...}`; asked plainly it
    still answers `ok`."""
    hp = HostProcess(tmp_path / "h.db", timeout=30)
    try:
        def get(headers: dict[str, str]) -> tuple[str, bytes]:
            req = urllib.request.Request(f"http://127.0.0.1:{hp.port}/healthz", headers=headers)
            with urllib.request.urlopen(req, timeout=10) as reply:
                return reply.headers["Content-Type"], reply.read()

        kind, body = await asyncio.to_thread(get, {"Accept": "application/json"})
        assert kind == "application/json"
        assert json.loads(body) == {"status": "ok", "version": __version__}
        assert (await asyncio.to_thread(get, {}))[1] == b"ok\n"
    finally:
        assert hp.stop(signal.SIGTERM) == 0


def test_progress_shows_sizes_a_rate_and_the_time_left() -> None:
    """A long command's progress line gives sizes in binary units, the rate since the start and
    the time left at that rate; drawn on a terminal, silent on a pipe."""
    bar = Progress("import", 4 << 20, unit="bytes")
    bar.advance(1 << 20)
    assert bar.text(bar.started + 2.0).endswith(
        "1.0 MiB/4.0 MiB  25%  512.0 KiB/s  6.0 s left")
    count = Progress("reindex", 50_000)
    count.advance(500)
    assert count.text(count.started + 2.5).endswith(
        "500/50,000   1%  200/s  4 min 08 s left")
    assert [human_bytes(n) for n in (512, 1536, 16 << 20, 5 << 30)] == [
        "512 B", "1.5 KiB", "16.0 MiB", "5.0 GiB"]
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as tty, Progress("backup", 1 << 20, tty, unit="bytes") as shown:
        shown.advance(1 << 20)
    drawn = os.read(master, 1000).decode()
    os.close(master)
    assert "backup [" in drawn and "1.0 MiB/1.0 MiB 100%" in drawn and "/s" in drawn


async def test_library_info_lines_stay_out_of_the_log(tmp_path: Path) -> None:
    """At INFO a host that searches by meaning (which loads faiss) logs no line of faiss,
    websockets or httpx: only its own."""
    hp = HostProcess(tmp_path / "q.db", timeout=30)
    try:
        client = await MemoryClient.connect(hp.url)
        await client.init("ns", {"agent": "a"})
        await client.store([{"key": {"k": i}, "content": f"a note about apples {i}",
                             "tier": "episodic"} for i in range(5)])
        await client.retrieve(query="apples", limit=3)
        await client.close()
    finally:
        assert hp.stop() == 0
    assert hp.proc.stderr is not None
    loggers = {json.loads(line)["logger"] for line in hp.proc.stderr.read().decode().splitlines()
               if line.startswith("{")}
    assert loggers and all(name.startswith("a2e_host") for name in loggers), loggers


def test_a_postgresql_store_that_cannot_be_opened_is_one_line(pg_server: Any) -> None:
    """A PostgreSQL URL naming a database that does not exist, a role that does not exist or a
    port nobody listens on: `serve` and `stats` (and `mcp`, for the refusals) exit 2 with one
    line naming the URL (password masked) and the fix."""
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    closed = free.getsockname()[1]
    free.close()
    host = pg_server.url.split("@", 1)[1].split("/", 1)[0]
    cases = {
        pg_server.url_for("no_such_db"): ("no_such_db", "createdb"),
        f"postgresql://nobody:secret@{host}/postgres": ("nobody", "fix the user"),
        f"postgresql://u:secret@127.0.0.1:{closed}/db": (f"127.0.0.1:{closed}", "is the server"),
    }
    for url, says in cases.items():
        commands = [["serve", "--port", "0"], ["stats"]]
        if "secret" not in url or "nobody" in url:  # the refusals, also from `mcp`
            commands.append(["mcp"])
        for command in commands:
            line = _one_line_error(run_cli(*command, "--db", url, input=b""), "PostgreSQL", *says)
            assert "secret" not in line, line
