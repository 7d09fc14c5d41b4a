"""Rules as procedural memories in a namespace's semantic tier, through any `EntryStore`.

`load_into_store` makes the namespace's stored rules match a rules root: it upserts every rule
(one entry per section, see `host.rules.memory` for key, content and tags) in one write, then
forgets the namespace's rule entries the new set no longer has. Readers never see an empty set
in between, reloading creates no duplicates (keys are stable), and the rules of a removed file
or section disappear. A file that fails to load keeps its previously stored rules, so a typo
does not wipe guidance; it is reported in `LoadReport.problems`.

`rules_for` reads the rules that apply to a path back from the store, most specific first: the
plain function the MCP tool wraps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host.config import Config, RulesConfig
from host.rules.loader import load_rules
from host.rules.memory import (
    RULE_TAG,
    rule_content,
    rule_from_content,
    rule_key,
    rule_tags,
    tag_queries,
)
from host.rules.model import Level, Rule, RulesProblem
from host.rules.resolver import RulesIndex
from host.store.interface import EntryStore
from host.store.records import NewEntry, Query, Scope, StoredEntry
from host.text.searchable import searchable_text
from protocol.keys import canonical_key

__all__ = ["LoadReport", "load_into_store", "rule_entry", "rules_for"]

_TIER = "semantic"
_PAGE = 1000  # entries a find asks for first; more pages only when `total` says so
_FORGET_BATCH = 500  # keys a forget sends at once (well under SQLite's variable limit)


@dataclass(frozen=True, slots=True)
class LoadReport:
    """What a load did: the files it read, the rules stored, the stale rules removed, and a
    problem for each file (or section) it could not store."""

    namespace: str
    files: tuple[str, ...]
    stored: int
    removed: int
    problems: tuple[RulesProblem, ...]


def _score(level: Level, settings: RulesConfig) -> float:
    return {
        Level.FILE_SPECIFIC: settings.file_specific_score,
        Level.MODULE: settings.module_score,
        Level.CROSS_MODULE: settings.cross_module_score,
        Level.GENERAL: settings.general_score,
    }[level]


def rule_entry(rule: Rule, settings: RulesConfig) -> NewEntry:
    """The semantic-tier entry of `rule`; its searchable text is the rule's words and tags
    (not the content's member names, which every rule shares)."""
    tags = rule_tags(rule)
    content = json.dumps(rule_content(rule), ensure_ascii=False, separators=(",", ":"))
    return NewEntry(
        tier=_TIER,
        key=canonical_key(rule_key(rule)),
        content=content.encode(),
        tags=tags,
        source=rule.source,
        score=_score(rule.level, settings),
        text=searchable_text([rule.file_title or "", rule.title, rule.body, rule.target], tags),
    )


async def _find_all(
    store: EntryStore, scope: Scope, tags: Sequence[str], now: float
) -> list[StoredEntry]:
    """Every live semantic entry of the scope's namespace carrying all `tags`."""
    q = Query(tiers=(_TIER,), tags=tuple(tags), limit=_PAGE)
    entries, total = await store.find(scope, q, now)
    if total > len(entries):
        entries, _ = await store.find(scope, Query(tiers=(_TIER,), tags=tuple(tags), limit=total), now)
    return entries


async def load_into_store(
    store: EntryStore,
    namespace: str,
    root: str | Path,
    config: Config,
    now: float | None = None,
) -> LoadReport:
    """Replace the stored rules of `namespace` with those of the rules root `root`.

    `store` must be open. Uses `config.rules` (scores, writer agent) and
    `config.limits.max_entry_bytes` (a larger section is a problem, not stored). Raises
    `FileNotFoundError`/`NotADirectoryError` when `root` is not a folder; everything wrong with
    single files is in the report's `problems`.
    """
    now = time.time() if now is None else now
    loaded = load_rules(root)
    problems = list(loaded.problems)
    scope = Scope(namespace, config.rules.agent)
    entries: list[NewEntry] = []
    origins: list[Rule] = []
    for rule in loaded.rules:
        entry = rule_entry(rule, config.rules)
        if len(entry.content) > config.limits.max_entry_bytes:
            problems.append(RulesProblem(
                rule.source, rule.line,
                f"section {rule.title!r} is {len(entry.content)} bytes stored, over the limit of"
                f" {config.limits.max_entry_bytes}"))
            continue
        entries.append(entry)
        origins.append(rule)
    outcomes = await store.put(scope, entries, now) if entries else []
    fresh: set[bytes] = set()
    for entry, rule, outcome in zip(entries, origins, outcomes):
        if outcome is None:
            fresh.add(entry.key)
        else:
            problems.append(RulesProblem(rule.source, rule.line, f"not stored: {outcome}"))
    keep_sources = {p.source for p in problems}
    stale = [
        e.key for e in await _find_all(store, scope, (RULE_TAG,), now)
        if e.key not in fresh and _source_of(e.key) not in keep_sources
    ]
    removed = 0
    for i in range(0, len(stale), _FORGET_BATCH):
        removed += await store.forget(
            scope, (_TIER,), stale[i : i + _FORGET_BATCH], (RULE_TAG,), now
        )
    return LoadReport(
        namespace=namespace, files=loaded.files, stored=len(fresh), removed=removed,
        problems=tuple(problems),
    )


def _source_of(key: bytes) -> Any:
    """The `rule` member of a stored key (None when the key is not a rule's)."""
    try:
        return json.loads(key).get("rule")
    except (ValueError, AttributeError):
        return None


async def rules_for(
    store: EntryStore,
    namespace: str,
    path: str,
    module: str | None = None,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """The stored rules of `namespace` that apply to `path` (in `module`), most specific first,
    as JSON-ready dicts (`rule_content`: level, source, target, title, body, ...).

    Fetches by the tags of `host.rules.memory.tag_queries` and orders with `RulesIndex`, so the
    answer is what `RulesIndex.resolve` gives on the loaded folder. Entries tagged `rule` whose
    content is not a rule are skipped. `store` must be open.
    """
    now = time.time() if now is None else now
    scope = Scope(namespace, "")
    rules: dict[bytes, Rule] = {}
    for tags in tag_queries(path, module):
        for e in await _find_all(store, scope, tags, now):
            if e.key in rules:
                continue
            try:
                rules[e.key] = rule_from_content(json.loads(e.content))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
    return [rule_content(r) for r in RulesIndex(rules.values()).resolve(path, module)]
