"""Index rules by module, extension and file name, and resolve the rules that apply to a path.

For a path and an optional module, `RulesIndex.resolve` returns, most specific first:

1. file-specific rules whose target is the path's file name (`Dockerfile`, `setup.py`);
2. file-specific rules whose target is the path's extension (`py` for `src/app.py`); only a
   target without a dot can be an extension, and extensions compare case-insensitively;
3. the module's rules, when `module` is given and has a rules file (an unknown module adds none);
4. every cross-module rule (they apply across all modules);
5. the general rules.

Within a level, files come in order of their source path and sections in file order. Only the
last component of the path counts; folders in it never select a module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from host.rules.loader import load_rules
from host.rules.model import Level, Rule, RulesProblem

__all__ = ["RulesIndex", "file_name_and_extension", "matches_extension"]

_SEPARATORS = re.compile(r"[\\/]")


def file_name_and_extension(path: str | os.PathLike[str]) -> tuple[str, str]:
    """The last component of `path` and its extension without the dot (`""` when none).

    `a/b/app.tar.gz` gives `("app.tar.gz", "gz")`; `.bashrc` and `Dockerfile` have no extension.
    Both `/` and `\\` separate components.
    """
    name = _SEPARATORS.split(os.fspath(path))[-1]
    return name, PurePosixPath(name).suffix[1:] if name else ""


def matches_extension(target: str) -> bool:
    """Whether a file-specific target can name an extension (it has no dot); a target with a
    dot names a file only."""
    return "." not in target


def _ordered(rules: Iterable[Rule]) -> list[Rule]:
    return sorted(rules, key=lambda r: (r.source, r.order))


class RulesIndex:
    """An immutable index of rules by module, extension and file name.

    Build one from rules (`RulesIndex(rules)`) or from a rules root (`RulesIndex.from_root`);
    `reload()` builds a fresh index from the same root, so deleted files drop out.
    """

    def __init__(
        self,
        rules: Iterable[Rule],
        *,
        root: Path | None = None,
        problems: Iterable[RulesProblem] = (),
    ) -> None:
        self.root = root
        self.rules: tuple[Rule, ...] = tuple(_ordered(rules))
        self.problems: tuple[RulesProblem, ...] = tuple(problems)
        self._by_module: dict[str, list[Rule]] = {}
        self._by_extension: dict[str, list[Rule]] = {}
        self._by_file_name: dict[str, list[Rule]] = {}
        self._cross: list[Rule] = []
        self._general: list[Rule] = []
        for rule in self.rules:
            if rule.level is Level.MODULE:
                self._by_module.setdefault(rule.target, []).append(rule)
            elif rule.level is Level.FILE_SPECIFIC:
                self._by_file_name.setdefault(rule.target, []).append(rule)
                if matches_extension(rule.target):
                    self._by_extension.setdefault(rule.target.lower(), []).append(rule)
            elif rule.level is Level.CROSS_MODULE:
                self._cross.append(rule)
            else:
                self._general.append(rule)

    @classmethod
    def from_root(cls, root: str | Path) -> RulesIndex:
        """Load `root` (see `host.rules.loader.load_rules`); skipped files are in `problems`.

        Raises `FileNotFoundError`/`NotADirectoryError` when `root` is not a folder.
        """
        root = Path(root)
        loaded = load_rules(root)
        return cls(loaded.rules, root=root, problems=loaded.problems)

    def reload(self) -> RulesIndex:
        """A fresh index of the same root. Raises `ValueError` for an index built from rules."""
        if self.root is None:
            raise ValueError("this index was not loaded from a rules root")
        return RulesIndex.from_root(self.root)

    def modules(self) -> list[str]:
        """The module names that have rules, sorted."""
        return sorted(self._by_module)

    def extensions(self) -> list[str]:
        """The extensions (lower case, no dot) that have rules, sorted."""
        return sorted(self._by_extension)

    def for_module(self, module: str) -> list[Rule]:
        """The module's own rules (no other level); `[]` for an unknown module."""
        return list(self._by_module.get(module, ()))

    def for_extension(self, extension: str) -> list[Rule]:
        """The rules for an extension, given with or without its dot, in any case."""
        return list(self._by_extension.get(extension.removeprefix(".").lower(), ()))

    def resolve(self, path: str | os.PathLike[str], module: str | None = None) -> list[Rule]:
        """The rules that apply to `path` (in `module`, if given), most specific first.

        See the module docstring for the order. A rule appears at most once.
        """
        name, ext = file_name_and_extension(path)
        candidates = [
            *self._by_file_name.get(name, ()),
            *(self._by_extension.get(ext.lower(), ()) if ext else ()),
            *(self._by_module.get(module, ()) if module is not None else ()),
            *self._cross,
            *self._general,
        ]
        seen: set[tuple[str, int]] = set()
        out: list[Rule] = []
        for rule in candidates:
            if (rule.source, rule.order) not in seen:
                seen.add((rule.source, rule.order))
                out.append(rule)
        return out
