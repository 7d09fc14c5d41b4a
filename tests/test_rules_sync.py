"""Tests for host/rules/sync.py and `a2e-host rules load`: rules stored as procedural memories."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from host.app import Host
from host.client import MemoryClient
from host.config import Config, load_config
from host.rules.memory import rule_content, tag_queries
from host.rules.resolver import RulesIndex
from host.rules.sync import load_into_store, rules_for
from host.store.records import Query, Scope
from host.store.sqlite.store import SQLiteEntryStore

SAMPLE = Path(__file__).parent / "data" / "rules"


@pytest.fixture
def rules_root(tmp_path: Path) -> Path:
    """A copy of the sample rules tree that a test may change."""
    return Path(shutil.copytree(SAMPLE, tmp_path / "rules"))


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[SQLiteEntryStore]:
    """An open SQLite entry store on the test's database file."""
    async with SQLiteEntryStore(db_path) as s:
        yield s


async def stored_rules(store: SQLiteEntryStore, namespace: str = "ns") -> list[tuple[str, str]]:
    """(source, section) of every rule entry in the namespace, sorted."""
    found, total = await store.find(
        Scope(namespace, "x"), Query(tiers=("semantic",), tags=("rule",), limit=1000), 0.0
    )
    assert total == len(found)
    return sorted((json.loads(e.key)["rule"], json.loads(e.key)["section"]) for e in found)


async def run_cli(*args: str) -> tuple[int, str, str]:
    """Run `a2e-host` in a real subprocess; (exit status, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "host.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_reload_replaces_the_set(store: SQLiteEntryStore, rules_root: Path) -> None:
    """Reloading stores no duplicates, and deleted files and sections disappear."""
    config = Config()
    first = await load_into_store(store, "ns", rules_root, config)
    assert (first.stored, first.removed, first.problems) == (9, 0, ())
    again = await load_into_store(store, "ns", rules_root, config)
    assert (again.stored, again.removed) == (9, 0)
    assert len(await stored_rules(store)) == 9
    (rules_root / "file-specific" / "py.cursorrules").unlink()
    (rules_root / "general.cursorrules").write_text("# General\nBe kind.\n")
    third = await load_into_store(store, "ns", rules_root, config)
    assert (third.stored, third.removed) == (7, 2)
    after = await stored_rules(store)
    assert ("file-specific/py.cursorrules", "Python") not in after
    assert ("general.cursorrules", "Commits") not in after
    assert ("general.cursorrules", "") in after and len(after) == 7


async def test_a_malformed_file_keeps_its_old_rules(
    store: SQLiteEntryStore, rules_root: Path
) -> None:
    """A file that stops parsing is reported and its stored rules stay until it is fixed."""
    await load_into_store(store, "ns", rules_root, Config())
    (rules_root / "modules" / "store.cursorrules").write_text("## SQL\n```\nunclosed\n")
    report = await load_into_store(store, "ns", rules_root, Config())
    assert [(p.source, p.line) for p in report.problems] == [("modules/store.cursorrules", 2)]
    assert ("modules/store.cursorrules", "SQL") in await stored_rules(store)
    assert report.removed == 0


async def test_namespaces_are_separate(store: SQLiteEntryStore, rules_root: Path) -> None:
    """Loading into one namespace neither shows nor removes another namespace's rules."""
    await load_into_store(store, "a", rules_root, Config())
    shutil.rmtree(rules_root / "modules")
    await load_into_store(store, "b", rules_root, Config())
    assert len(await stored_rules(store, "a")) == 9
    assert len(await stored_rules(store, "b")) == 7


async def test_oversized_section_is_a_problem(store: SQLiteEntryStore, rules_root: Path) -> None:
    """A section over the entry size limit is reported with its line, the rest is stored."""
    (rules_root / "modules" / "big.cursorrules").write_text("## Small\nx\n## Big\n" + "y" * 5000)
    config = load_config(None, {"limits": {"max_entry_bytes": 2000}})
    report = await load_into_store(store, "ns", rules_root, config)
    assert [(p.source, p.line) for p in report.problems] == [("modules/big.cursorrules", 3)]
    assert ("modules/big.cursorrules", "Small") in await stored_rules(store)


async def test_more_rules_than_one_page(store: SQLiteEntryStore, tmp_path: Path) -> None:
    """Reading and replacing work past the first page of stored rules (1000 entries)."""
    root = tmp_path / "many"
    (root / "modules").mkdir(parents=True)
    (root / "general.cursorrules").write_text("".join(f"## G{i}\nrule {i}\n" for i in range(1100)))
    (root / "modules" / "m.cursorrules").write_text("## M\nx\n")
    await load_into_store(store, "ns", root, Config())
    assert len(await rules_for(store, "ns", "a.txt", "m")) == 1101
    (root / "modules" / "m.cursorrules").unlink()
    report = await load_into_store(store, "ns", root, Config())
    assert (report.stored, report.removed) == (1100, 1)


async def test_rules_for_matches_the_resolver(store: SQLiteEntryStore, rules_root: Path) -> None:
    """rules_for over the store answers what RulesIndex.resolve answers on the folder."""
    await load_into_store(store, "ns", rules_root, Config())
    index = RulesIndex.from_root(rules_root)
    for path, module in [("host/store/sqlite.py", "store"), ("setup.py", None), ("Dockerfile", "x")]:
        expected = [rule_content(r) for r in index.resolve(path, module)]
        assert await rules_for(store, "ns", path, module) == expected
    assert await rules_for(store, "other", "a.py") == []


async def test_cli_load_then_retrieve_over_websocket(
    host: Host, connect, rules_root: Path, db_path: Path
) -> None:
    """`rules load` writes beside a running host; an agent gets a path's rules by tags."""
    status, out, err = await run_cli(
        "rules", "load", str(rules_root), "--namespace", "proj", "--db", str(db_path)
    )
    assert status == 0, err
    assert "loaded 9 rules from 8 files" in out

    agent: MemoryClient = await connect()
    await agent.init("proj", {"agent": "coder"})
    got: list[dict] = []
    for tags in tag_queries("host/store/sqlite.py", module="store"):
        reply = await agent.retrieve(tags=tags, tier="semantic", limit=100)
        group = sorted((e["content"] for e in reply.entries), key=lambda c: (c["source"], c["order"]))
        got.extend(c for c in group if c not in got)
    expected = RulesIndex.from_root(rules_root).resolve("host/store/sqlite.py", "store")
    assert got == [rule_content(r) for r in expected]
    assert [(c["level"], c["title"]) for c in got][:2] == [("file-specific", "Python"), ("module", "SQL")]

    by_ext = await agent.retrieve(tags=["rule", "ext:py"], tier="semantic")
    assert [e["key"] for e in by_ext.entries] == [
        {"rule": "file-specific/py.cursorrules", "section": "Python"}
    ]
    assert set(by_ext.entries[0]["tags"]) == {"rule", "type:procedural", "level:file-specific", "file:py", "ext:py"}
    everything = await agent.retrieve(tags=["rule"], tier="semantic", limit=100)
    levels = [e["content"]["level"] for e in everything.entries]
    assert everything.total == 9
    assert levels[0] == "file-specific" and levels[-1] == "general"  # stored score follows level
    searched = await agent.retrieve(query="type hints", tags=["rule"], tier="semantic")
    assert [e["content"]["title"] for e in searched.entries] == ["Python"]
    assert await rules_for(host.store, "proj", "x.py", "store") == [
        rule_content(r) for r in RulesIndex.from_root(rules_root).resolve("x.py", "store")
    ]


async def test_cli_reports_problems_and_bad_roots(rules_root: Path, db_path: Path) -> None:
    """A malformed file is named with its line on stderr (status 1); a missing root is status 2."""
    (rules_root / "modules" / "bad.cursorrules").write_text("## A\n## A\n")
    status, out, err = await run_cli(
        "rules", "load", str(rules_root), "--namespace", "ns", "--db", str(db_path)
    )
    assert status == 1
    assert "modules/bad.cursorrules:2: duplicate section 'A'" in err
    assert "loaded 9 rules" in out
    status, _, err = await run_cli(
        "rules", "load", str(rules_root / "missing"), "--namespace", "ns", "--db", str(db_path)
    )
    assert status == 2 and "does not exist" in err
