"""The docs stand alone and agree with the repository: every file they name exists, they point
at nothing outside it, and the commands they give are the ones that work."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pytest
from support.procs import HostProcess, free_port, stop_process, wait_port
from websockets.sync.client import connect

from host.cli.main import build_parser
from host.cli.reference import _subparsers
from host.client import MemoryClient

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS]

# a name inside the repository: a top-level folder, then a path (no wildcard, brace or ellipsis;
# not a URL's host and path, as in postgresql://user@host/db)
_REPO_PATH = re.compile(
    r"(?<![\w./@:-])((?:docs|host|protocol|scripts|configs|examples|tests)/[\w./-]*[\w/])")
_LINK = re.compile(r"\]\(([^)\s]+)\)")  # a Markdown link's target
# what a reader of the repository alone cannot open: a folder beside the checkout, files of the
# contract the repository restates in its own words, an issue tracker's numbers
_OUTSIDE = re.compile(
    r"\.\./shared|/work/|semantics\.md|memory-capability\.txt|agentic-memory\.txt"
    r"|\bissues? \d+", re.IGNORECASE)


def _lines() -> list[tuple[str, int, str]]:
    return [(page.relative_to(ROOT).as_posix(), n, line)
            for page in PAGES
            for n, line in enumerate(page.read_text().splitlines(), start=1)]


def test_every_repository_path_the_docs_name_exists() -> None:
    """Each `docs/...`, `host/...`, `scripts/...`, `configs/...`, `examples/...` name in the
    README and docs/, and each relative link, is a file or folder of the repository."""
    missing = []
    for page, n, line in _lines():
        base = ROOT / Path(page).parent
        names = [(ROOT, m.group(1)) for m in _REPO_PATH.finditer(line)]
        names += [(base, t.split("#", 1)[0]) for t in _LINK.findall(line)
                  if not re.match(r"[a-z]+:|#", t)]
        for where, name in names:
            if name and "NNNN" not in name and not (where / name.rstrip(".")).exists():
                missing.append(f"{page}:{n}: {name}")
    assert not missing, "docs name files the repository lacks:\n" + "\n".join(missing)


def _anchors(page: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them (lower case, punctuation gone,
    spaces to hyphens), and the headings themselves."""
    heads = re.findall(r"(?m)^#+ (.+)$", page.read_text())
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads} | set(heads)


def test_every_section_the_docs_point_at_exists() -> None:
    """Each link to a `#section` and each `docs/x.md, "Section"` reference names a heading of
    that page (renaming a heading breaks no link unnoticed)."""
    missing = []
    for page, n, line in _lines():
        here = ROOT / page
        refs = [(t.split("#", 1)[0], t.split("#", 1)[1]) for t in _LINK.findall(line)
                if "#" in t and not re.match(r"[a-z]+:", t)]
        refs += re.findall(r"`?(docs/[\w-]+\.md)`?, \"([^\"]+)\"", line)
        for target, section in refs:
            dest = here if not target else (
                ROOT / target if target.startswith("docs/") else here.parent / target)
            if dest.exists() and section not in _anchors(dest):
                missing.append(f"{page}:{n}: {target}#{section}")
    assert not missing, "links to sections that do not exist:\n" + "\n".join(missing)


def test_docs_point_at_nothing_outside_the_repository() -> None:
    """No line of the README or docs/ sends the reader beside the checkout, to the spec's own
    files or to an issue number: the repository says the rule itself."""
    found = [f"{page}:{n}: {line.strip()}" for page, n, line in _lines() if _OUTSIDE.search(line)]
    assert not found, "docs point outside the repository:\n" + "\n".join(found)


def test_code_points_at_nothing_outside_the_repository() -> None:
    """The same holds for the code, the tests, the scripts and the build files: nothing names
    a folder beside the checkout, the spec's files or an issue number."""
    files = [ROOT / name for name in ("pyproject.toml", "Dockerfile", "docker-compose.yml",
                                      ".ci/run")]
    for top in ("host", "protocol", "tests", "scripts", "configs", "examples"):
        files += [f for f in (ROOT / top).rglob("*") if f.is_file()
                  and f.suffix in {".py", ".md", ".toml", ".sql", ".sh", ".yml", ".service"}]
    found = [f"{f.relative_to(ROOT)}:{n}: {line.strip()}"
             for f in files if f.exists() and f != Path(__file__)
             for n, line in enumerate(f.read_text().splitlines(), start=1)
             if _OUTSIDE.search(line)]
    assert not found, "files point outside the repository:\n" + "\n".join(found)


def test_readme_commands_are_the_ones_ci_runs() -> None:
    """The README's quick start is one line (venv, the core install, serve) and its test
    command installs what .ci/run installs (the test extra) and runs the command .ci/run runs;
    every extra a page installs is one pyproject.toml defines, installed from the checkout
    (the package is not on an index)."""
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    start = re.findall(r"(?m)^python3 -m venv \.venv && \. \.venv/bin/activate && "
                       r"pip install (-e \S+) && a2e-host serve$", readme)
    assert start == ["-e ."], "the README's start is one line: venv, the core install, serve"
    suite = re.findall(r"(?m)^pip install (-e '\.\[[\w,-]+\]') && python -m pytest$", readme)
    assert suite == ["-e '.[test]'"], "the README's test command: the test install, pytest"
    assert re.search(rf"pip install (-q )?{re.escape(suite[0])}", ci), (suite[0], "not in .ci/run")
    assert re.search(r"(?m)^python -m pytest$", ci)
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["project"]["optional-dependencies"])
    bad = []
    for page, n, line in _lines():
        if re.search(r"pip install '?a2e-host\[", line):
            bad.append(f"{page}:{n}: installs the package by name")
        for group in re.findall(r"\.\[([\w,-]+)\]", line):
            bad += [f"{page}:{n}: no extra {x!r}" for x in group.split(",") if x not in extras]
    assert not bad, "\n".join(bad)


def test_cli_table_lists_every_command() -> None:
    """docs/cli.md's table has a row for every command (each action of `config`, `rules` and
    `token`), and the README's list of commands names each one."""
    doc = (ROOT / "docs" / "cli.md").read_text()
    rows = set(re.findall(r"(?m)^\| `([\w ]+)`", doc))
    readme = (ROOT / "README.md").read_text()
    listed = readme.split("- **Commands**", 1)[1].split("\n- ", 1)[0]
    missing = []
    for name, sub in _subparsers(build_parser()).items():
        actions = list(_subparsers(sub)) or [""]
        missing += [f"cli.md: {name} {a}".rstrip() for a in actions
                    if f"{name} {a}".rstrip() not in rows]
        if f"`{name}" not in listed:
            missing.append(f"README: {name}")
    assert not missing, f"commands missing from the docs: {missing}"


def test_readme_names_every_doc() -> None:
    """Every page of docs/ is named in the README, so a reader of the README finds it."""
    readme = (ROOT / "README.md").read_text()
    assert DOCS and not [p.name for p in DOCS if f"docs/{p.name}" not in readme
                         and f"`{p.name}`" not in readme]


def test_readme_lists_every_extra() -> None:
    """The README's table of extras has a row for each extra pyproject.toml defines, and no
    other: a new optional part is found by who installs the host."""
    readme = (ROOT / "README.md").read_text()
    table = readme.split("| extra | for |", 1)[1].split("\n\n", 1)[0]
    rows = set(re.findall(r"(?m)^\| `([\w-]+)` \|", table))
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                 ["project"]["optional-dependencies"])
    assert rows == extras, f"README lacks {extras - rows}, names unknown {rows - extras}"


# -- every snippet runs as written ------------------------------------------------------------

# A fenced block: its indent, language and body. The HTML comment on the line right above it,
# if any, says `<!-- not run: REASON -->` (a runnable block this test skips, and why) or
# `<!-- prints: TEXT -->` (what the block's run must print).
_FENCE = re.compile(
    r"(?ms)^(?P<indent>[ ]*)```(?P<lang>[\w-]*)[ ]*\n(?P<body>.*?)^(?P=indent)```[ ]*$")
_MARK = re.compile(r"<!-- (not run|prints): (.*?) -->")
RUNNABLE = ("python", "sh")
AS_WRITTEN = "127.0.0.1:8765"  # the address the snippets name: the test host's stands in
# The install steps this test's environment has taken already: a virtual environment and an
# install of this checkout (the test extra, which holds every other; that the core install
# serves without any extra is tests/test_extras.py's). The rest of the line runs.
_INSTALL = re.compile(r"^(python3 -m venv \.venv && \. \.venv/bin/activate && )?"
                      r"pip install -e (\.|'\.\[[\w,-]+\]')( +#.*)?( && |$)")
SNIPPET_TIMEOUT = 120.0


@dataclass(frozen=True)
class Snippet:
    """One fenced block of a page: where it starts, its language, its text (unindented), and
    its mark (`("not run", reason)`, `("prints", text)` or None)."""

    page: str
    line: int
    lang: str
    body: str
    mark: tuple[str, str] | None

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in RUNNABLE and (self.mark is None or self.mark[0] != "not run")

    @property
    def commands(self) -> str:
        """The text this test runs: install steps dropped (see `_INSTALL`)."""
        if self.lang != "sh":
            return self.body
        return "\n".join(line[m.end():] if (m := _INSTALL.match(line)) else line
                         for line in self.body.splitlines())

    @property
    def serves(self) -> bool:
        """A shell block that ends by starting the host in the foreground, as a reader does."""
        lines = [s for s in self.commands.splitlines() if s.strip() and not s.startswith("#")]
        return self.lang == "sh" and bool(lines) and lines[-1].startswith("a2e-host serve")


def _snippets(page: Path) -> list[Snippet]:
    text = page.read_text()
    found = []
    for m in _FENCE.finditer(text):
        above = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(above)
        found.append(Snippet(
            page.relative_to(ROOT).as_posix(), text.count("\n", 0, m.start()) + 1,
            m.group("lang"), textwrap.dedent(m.group("body")),
            (mark.group(1), mark.group(2)) if mark else None))
    return found


def test_every_snippet_mark_is_on_a_block_and_says_why() -> None:
    """A `not run` or `prints` mark sits right above a fence of a runnable block (none is left
    behind when a block moves), and a `not run` mark gives its reason."""
    bad = []
    for page in PAGES:
        marked = [s for s in _snippets(page) if s.mark is not None]
        marks = _MARK.findall(page.read_text())
        if len(marks) != len(marked):
            bad.append(f"{page.name}: {len(marks)} marks, {len(marked)} on a fence")
        bad += [f"{s}: {s.mark[0]} on a {s.lang or 'plain'} block" for s in marked
                if s.mark is not None and s.lang not in RUNNABLE]
        bad += [f"{s}: mark without its text" for s in marked
                if s.mark is not None and len(s.mark[1].strip()) < 8]
    assert not bad, "\n".join(bad)


class _PageRun:
    """The snippets of one page run in order in `folder`, against one real host: the one the
    page starts itself (a shell block ending in `a2e-host serve`), else one started for the
    page when a snippet names the host's address. The host listens on a free port that stands
    in for the one the page names."""

    def __init__(self, folder: Path, snippets: list[Snippet]) -> None:
        self.folder = folder
        self.snippets = snippets
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("A2E_HOST_")}
        # the commands a page names (a2e-host, python) are this environment's, activated or not
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                            self.env.get("PATH", "")])
        self.host: HostProcess | None = None
        self.serving: subprocess.Popen[bytes] | None = None
        if any(s.serves for s in snippets):
            self.port = free_port()
        elif any(AS_WRITTEN in s.body for s in snippets):
            self.host = HostProcess(folder / "host.db", cwd=folder, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            self.port = self.host.port
        else:
            self.port = free_port()
        self.env["A2E_HOST_SERVER_PORT"] = str(self.port)

    def __enter__(self) -> _PageRun:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.host is not None:
            self.host.terminate()
        if self.serving is not None:
            if kind is not None:
                stop_process(self.serving)
                return
            self.serving.send_signal(signal.SIGTERM)
            code = self.serving.wait(30)
            assert code == 0, f"the page's host exited {code} after SIGTERM: {self._log()[-3000:]}"

    def _log(self) -> str:
        log = self.folder / "serve.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def text(self, s: Snippet) -> str:
        return s.commands.replace(AS_WRITTEN, f"127.0.0.1:{self.port}")

    def run(self, s: Snippet) -> None:
        if s.serves:
            assert self.serving is None, f"{s}: a second host on one page"
            lines = self.text(s).rstrip("\n").splitlines()
            script = "\n".join([*lines[:-1], "exec " + lines[-1]])
            with open(self.folder / "serve.log", "wb") as log:
                self.serving = subprocess.Popen(["bash", "-e", "-c", script], cwd=self.folder,
                                                env=self.env, stdout=log, stderr=log)
            wait_port(self.port, self.serving, 60)
            if s.mark is not None and s.mark[0] == "prints":
                want = s.mark[1].replace(AS_WRITTEN, f"127.0.0.1:{self.port}")
                deadline = time.monotonic() + 30
                while want not in self._log() and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert want in self._log(), f"{s}: the host did not print {want!r}"
            return
        if s.lang == "python":
            path = self.folder / f"snippet_{s.line}.py"
            path.write_text(self.text(s))
            cmd = [sys.executable, str(path)]
        else:
            cmd = ["bash", "-e", "-c", self.text(s)]
        done = subprocess.run(cmd, cwd=self.folder, env=self.env, capture_output=True,
                              text=True, timeout=SNIPPET_TIMEOUT)
        assert done.returncode == 0, (
            f"{s} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
        if s.mark is not None and s.mark[0] == "prints":
            assert s.mark[1] in done.stdout, f"{s} did not print {s.mark[1]!r}:\n{done.stdout}"

    def get(self, path: str) -> int:
        """The status of GET `path` on the page's host, redirects followed."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=30) as r:
            return int(r.status)


_TO_RUN = [page for page in PAGES if any(s.runs for s in _snippets(page))]


@pytest.mark.parametrize("page", _TO_RUN, ids=[p.relative_to(ROOT).as_posix() for p in _TO_RUN])
def test_snippets_run_as_written(page: Path, tmp_path: Path) -> None:
    """Every Python and shell block of the page that is not marked `not run` runs as written,
    in order, in one fresh folder, against a real host, and exits 0 (printing what its
    `prints` mark names); the host answers 200 at the addresses the page's text names (in
    bold or as code: `/ui`, `/`) and, when the page starts it itself, exits 0 on SIGTERM."""
    snippets = [s for s in _snippets(page) if s.runs]
    with _PageRun(tmp_path, snippets) as run:
        for s in snippets:
            run.run(s)
        named = re.findall(r"http://127\.0\.0\.1:8765(/[\w/-]*)(?:\*\*|`)", page.read_text())
        for path in sorted(set(named) if run.host or run.serving else ()):
            assert run.get(path) == 200, path


def _shape(value: object, user_data: bool = False) -> object:
    """The field names of a message, nested, without the values: what a page's example of a
    reply shows. Keys and contents are the client's own data, not the protocol's."""
    if user_data:
        return "data"
    if isinstance(value, dict):
        return {k: _shape(v, k in ("key", "content", "stored")) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return "value"


def _shown(line: str) -> dict[str, object]:
    """A message as the page shows it, its elided parts (`…`, `{…}`) read as values."""
    return dict(json.loads(line.replace("{…}", "{}").replace(":…", ":null")))


def test_readme_wire_example_is_what_the_host_answers(tmp_path: Path) -> None:
    """The README's wire example, its requests sent as written over a WebSocket to a real
    host (the `memory_id` the init returned in place of the example's): each reply has the
    fields the example shows, no more, no fewer."""
    block = next(s.body for s in _snippets(ROOT / "README.md")
                 if s.lang == "json" and '"memory/init/req"' in s.body)
    lines = [line for line in block.splitlines() if line.strip()]
    assert [json.loads(line)["type"] for line in lines[::2]] == [
        f"memory/{op}/req" for op in ("init", "store", "retrieve", "forget")]
    host = HostProcess(tmp_path / "wire.db", stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    try:
        with connect(host.url) as ws:
            memory_id = ""
            for req, resp in zip(lines[::2], lines[1::2], strict=True):
                sent = json.loads(req)
                if memory_id:
                    sent["memory_id"] = memory_id
                ws.send(json.dumps(sent))
                got = json.loads(ws.recv(timeout=30))
                memory_id = memory_id or got.get("memory_id", "")
                assert _shape(got) == _shape(_shown(resp)), (req, got)
    finally:
        host.terminate()


async def test_readme_total_with_a_query_is_what_paging_walks(tmp_path: Path) -> None:
    """What the README says of `total`: without a query it counts every match; with one it
    counts the candidates the search ranked (a common word's 300 holders give far fewer), and
    paging through them with `offset` returns exactly that many entries, each once."""
    host = HostProcess(tmp_path / "total.db", env={"A2E_HOST_SEARCH_EMBEDDER": "none"},
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async with await MemoryClient.connect(host.url) as c:
            await c.init("total", {"agent": "reader"})
            await c.store([{"key": {"n": n}, "content": f"apple note {n}", "tier": "episodic"}
                           for n in range(300)])
            assert (await c.retrieve(tier="episodic", limit=5)).total == 300
            total = (await c.retrieve(query="apple", limit=5)).total
            walked: list[str] = []
            while batch := (await c.retrieve(query="apple", limit=40,
                                             offset=len(walked))).entries:
                walked += [json.dumps(e["key"], sort_keys=True) for e in batch]
            assert 0 < total < 300 and len(walked) == len(set(walked)) == total
    finally:
        host.terminate()
