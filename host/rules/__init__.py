"""The rules subsystem: `.cursorrules` files as procedural memory (see docs/rules.md).

`parser` reads one file, `loader` walks a rules root, `resolver` indexes the rules and answers
which apply to a path, most specific first. `memory` maps a rule to a semantic-tier entry (key,
content, tags) and `sync` loads a root into an `EntryStore` and reads rules back (`rules_for`).
"""

from host.rules.loader import LoadResult, load_rules
from host.rules.model import Level, Rule, RulesProblem
from host.rules.parser import RulesDoc, RulesSyntaxError, Section, parse, render
from host.rules.resolver import RulesIndex

__all__ = [
    "Level",
    "LoadResult",
    "Rule",
    "RulesDoc",
    "RulesIndex",
    "RulesProblem",
    "RulesSyntaxError",
    "Section",
    "load_rules",
    "parse",
    "render",
]
