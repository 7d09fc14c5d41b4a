"""Walk a rules root and parse every rules file in it; a bad file never stops the others.

The layout, relative to the root (the level comes from this relative path only, never from the
names of folders above the root):

    general.cursorrules                      general
    .cursorrules                             general (a project's usual single rules file)
    cross-module/<name>.cursorrules          cross-module (target: <name>)
    modules/<module>.cursorrules             module       (target: <module>)
    file-specific/<ext or name>.cursorrules  file-specific (target: `py`, `Dockerfile`, `setup.py`)

Any other `*.cursorrules` file below the root is reported as a problem and skipped; other files
(a README, say) are ignored. Symbolic links to folders are not followed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from host.rules.model import Level, Rule, RulesProblem
from host.rules.parser import RulesSyntaxError, parse_bytes

__all__ = ["RULES_SUFFIX", "LoadResult", "classify", "load_rules"]

RULES_SUFFIX = ".cursorrules"
_GENERAL = "general" + RULES_SUFFIX
_GENERAL_NAMES = {(_GENERAL,), (RULES_SUFFIX,)}
_FOLDERS = {
    "cross-module": Level.CROSS_MODULE,
    "modules": Level.MODULE,
    "file-specific": Level.FILE_SPECIFIC,
}
_LAYOUT = (
    "expected general.cursorrules (or .cursorrules), cross-module/<name>.cursorrules, "
    "modules/<module>.cursorrules or file-specific/<ext or file name>.cursorrules"
)


@dataclass(frozen=True, slots=True)
class LoadResult:
    """What `load_rules` found: the rules of every good file (in file order, files sorted by
    source), the sources it loaded, and a problem for each file it skipped."""

    rules: tuple[Rule, ...]
    files: tuple[str, ...]
    problems: tuple[RulesProblem, ...]


def classify(source: str) -> tuple[Level, str]:
    """The level and target of a rules file from its `/`-separated path relative to the root.

    Raises `ValueError` with a human message for a path outside the layout.
    """
    parts = PurePosixPath(source).parts
    if parts in _GENERAL_NAMES:
        return Level.GENERAL, ""
    if len(parts) == 2 and parts[0] in _FOLDERS and parts[1].endswith(RULES_SUFFIX):
        target = parts[1][: -len(RULES_SUFFIX)]
        if not target:
            raise ValueError(f"no name before {RULES_SUFFIX}")
        return _FOLDERS[parts[0]], target
    raise ValueError(f"not part of the rules layout ({_LAYOUT})")


def _rules_files(root: Path) -> list[str]:
    """Every `*.cursorrules` file below `root`, as sorted `/`-separated relative paths."""
    found: list[str] = []
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        rel = Path(folder).relative_to(root)
        found.extend(
            (rel / name).as_posix() for name in names if name.endswith(RULES_SUFFIX)
        )
    return sorted(found)


def load_rules(root: str | Path) -> LoadResult:
    """Load every rules file below `root`.

    Raises `NotADirectoryError` (or `FileNotFoundError`) when `root` is not a folder; every
    problem with a single file (its place, its bytes, its syntax) goes into `problems` instead.
    """
    root = Path(root)
    if not root.is_dir():
        if not root.exists():
            raise FileNotFoundError(f"rules root {str(root)!r} does not exist")
        raise NotADirectoryError(f"rules root {str(root)!r} is not a folder")
    rules: list[Rule] = []
    files: list[str] = []
    problems: list[RulesProblem] = []
    for source in _rules_files(root):
        try:
            level, target = classify(source)
            doc = parse_bytes((root / source).read_bytes(), source)
        except RulesSyntaxError as exc:
            problems.append(RulesProblem(source, exc.line, exc.message))
            continue
        except ValueError as exc:
            problems.append(RulesProblem(source, None, str(exc)))
            continue
        except OSError as exc:
            problems.append(RulesProblem(source, None, f"unreadable: {exc.strerror or exc}"))
            continue
        files.append(source)
        rules.extend(
            Rule(
                level=level, source=source, target=target, title=section.title,
                body=section.body, order=i, file_title=doc.title, line=section.line,
            )
            for i, section in enumerate(doc.sections)
        )
    return LoadResult(rules=tuple(rules), files=tuple(files), problems=tuple(problems))
