"""What a loaded rule is: one section of one rules file, with the level its path gives it.

Levels, most specific first: `file-specific` > `module` > `cross-module` > `general`. Within
`file-specific`, a rule for a file name beats a rule for an extension (see `host.rules.resolver`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["Level", "Rule", "RulesProblem"]


class Level(str, Enum):
    """The level of a rules file, from its path relative to the rules root."""

    FILE_SPECIFIC = "file-specific"
    MODULE = "module"
    CROSS_MODULE = "cross-module"
    GENERAL = "general"


@dataclass(frozen=True, slots=True)
class Rule:
    """One section of a rules file.

    `source` is the file's path relative to the rules root, with `/` separators. `target` is what
    the file applies to: the module name (`module`), the extension or file name
    (`file-specific`), the file's name without `.cursorrules` (`cross-module`), `""` (`general`).
    `title` is the section title (`""` for the preamble), `body` its text verbatim, `order` its
    index in the file, `file_title` the file's `# ` title, `line` the 1-based heading line.
    """

    level: Level
    source: str
    target: str
    title: str
    body: str
    order: int = 0
    file_title: str | None = None
    line: int = 0


@dataclass(frozen=True, slots=True)
class RulesProblem:
    """A rules file that was skipped: its `source` (relative path), `line` (None when the
    problem is the file as a whole, e.g. its place in the tree) and a human `message`."""

    source: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = self.source if self.line is None else f"{self.source}:{self.line}"
        return f"{where}: {self.message}"
