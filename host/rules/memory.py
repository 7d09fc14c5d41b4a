"""How a rule looks as a procedural memory: its key, content and tags, and the way back.

One rule (one section of one file) is one semantic-tier entry:

- key: `{"rule": "<source relative to the rules root>", "section": "<section title>"}`;
- content: `{"kind": "procedural", "level", "source", "target", "title", "body", "order",
  "file_title", "line"}` (`rule_content`), read back by `rule_from_content`;
- tags (`rule_tags`): `rule`, `type:procedural` (the library's memory-type tag, so the library and
  the MCP tools read a rule as a procedural memory), `level:<level>`, and `module:<name>` for module rules,
  `file:<name>` for every file-specific rule, `ext:<ext>` (lower case) for a file-specific target
  without a dot.

`tag_queries(path, module)` lists the tag filters an agent sends, one retrieve each, to gather
every rule that applies to `path`, most specific first. Nothing here does I/O.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from host.library.mapping import TYPE_TAG_PREFIX
from host.library.models import MemoryType
from host.rules.model import Level, Rule
from host.rules.resolver import file_name_and_extension, matches_extension

__all__ = [
    "RULE_TAG",
    "rule_content",
    "rule_from_content",
    "rule_key",
    "rule_tags",
    "tag_queries",
]

RULE_TAG = "rule"
PROCEDURAL_TAG = TYPE_TAG_PREFIX + MemoryType.PROCEDURAL.value


def rule_key(rule: Rule) -> dict[str, str]:
    """The entry key of `rule`: its source file and section title."""
    return {"rule": rule.source, "section": rule.title}


def rule_tags(rule: Rule) -> list[str]:
    """The tags of `rule` (see the module docstring), without duplicates, in a fixed order."""
    tags = [RULE_TAG, PROCEDURAL_TAG, f"level:{rule.level.value}"]
    if rule.level is Level.MODULE:
        tags.append(f"module:{rule.target}")
    elif rule.level is Level.FILE_SPECIFIC:
        tags.append(f"file:{rule.target}")
        if matches_extension(rule.target):
            tags.append(f"ext:{rule.target.lower()}")
    return tags


def rule_content(rule: Rule) -> dict[str, Any]:
    """The JSON content of `rule`'s entry; `rule_from_content` reads it back."""
    return {
        "kind": "procedural",
        "level": rule.level.value,
        "source": rule.source,
        "target": rule.target,
        "title": rule.title,
        "body": rule.body,
        "order": rule.order,
        "file_title": rule.file_title,
        "line": rule.line,
    }


def rule_from_content(content: Mapping[str, Any]) -> Rule:
    """The rule stored as `content`. Raises `ValueError` (or `KeyError`/`TypeError`) when
    `content` is not a rule's content."""
    return Rule(
        level=Level(content["level"]),
        source=str(content["source"]),
        target=str(content["target"]),
        title=str(content["title"]),
        body=str(content["body"]),
        order=int(content.get("order", 0)),
        file_title=content.get("file_title"),
        line=int(content.get("line", 0)),
    )


def tag_queries(path: str | os.PathLike[str], module: str | None = None) -> list[list[str]]:
    """Tag filters (ANDed within one list) that together fetch every rule for `path`.

    In priority order: file name, extension (when `path` has one), module (when given),
    cross-module, general. A rule may come back from two of them (a dotless target matches by
    name and extension); callers drop repeats by key, keeping the first.
    """
    name, ext = file_name_and_extension(path)
    queries: list[list[str]] = []
    if name:
        queries.append([RULE_TAG, f"file:{name}"])
    if ext:
        queries.append([RULE_TAG, f"ext:{ext.lower()}"])
    if module is not None:
        queries.append([RULE_TAG, f"module:{module}"])
    queries.append([RULE_TAG, f"level:{Level.CROSS_MODULE.value}"])
    queries.append([RULE_TAG, f"level:{Level.GENERAL.value}"])
    return queries
