"""Tests for host/rules/memory.py: rules as memories (key, content, tags) and tag queries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from host.rules.memory import rule_content, rule_from_content, rule_key, rule_tags, tag_queries
from host.rules.model import Level, Rule
from host.rules.resolver import RulesIndex

SAMPLE = Path(__file__).parent / "data" / "rules"


def test_tags_per_level() -> None:
    """Each level carries `rule`, `type:procedural`, its level tag, and its module, file or extension tag."""
    def rule(level: Level, target: str) -> Rule:
        return Rule(level=level, source="s", target=target, title="t", body="b")

    assert rule_tags(rule(Level.GENERAL, "")) == ["rule", "type:procedural", "level:general"]
    assert rule_tags(rule(Level.CROSS_MODULE, "logs")) == ["rule", "type:procedural", "level:cross-module"]
    assert rule_tags(rule(Level.MODULE, "api")) == ["rule", "type:procedural", "level:module", "module:api"]
    assert rule_tags(rule(Level.FILE_SPECIFIC, "Dockerfile")) == [
        "rule", "type:procedural", "level:file-specific", "file:Dockerfile", "ext:dockerfile",
    ]
    assert rule_tags(rule(Level.FILE_SPECIFIC, "setup.py")) == [
        "rule", "type:procedural", "level:file-specific", "file:setup.py",
    ]


def test_content_round_trips_through_json() -> None:
    """A rule written as content and read back through JSON is the same rule, key included."""
    index = RulesIndex.from_root(SAMPLE)
    for rule in index.rules:
        assert rule_from_content(json.loads(json.dumps(rule_content(rule)))) == rule
        assert rule_key(rule) == {"rule": rule.source, "section": rule.title}
    with pytest.raises(ValueError):
        rule_from_content({**rule_content(index.rules[0]), "level": "everything"})


@pytest.mark.parametrize(
    ("path", "module"),
    [
        ("host/store/sqlite.py", "store"),
        ("pkg/setup.py", None),
        ("Dockerfile", "server"),
        ("prod.DOCKERFILE", None),
        ("notes.txt", "unknown"),
        ("py", None),
        ("", None),
    ],
)
def test_tag_queries_fetch_exactly_what_resolve_returns(path: str, module: str | None) -> None:
    """Filtering rules by the tag queries gives the resolver's rules in the resolver's order."""
    index = RulesIndex.from_root(SAMPLE)
    fetched: list[Rule] = []
    for query in tag_queries(path, module):
        group = [r for r in index.rules if set(query) <= set(rule_tags(r))]
        fetched.extend(r for r in sorted(group, key=lambda r: (r.source, r.order))
                       if r not in fetched)
    assert fetched == index.resolve(path, module)
