"""Tests for host/rules/loader.py and host/rules/resolver.py on rule trees in a temporary folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from host.rules.loader import classify, load_rules
from host.rules.model import Level
from host.rules.resolver import RulesIndex, file_name_and_extension

SAMPLE = Path(__file__).parent / "data" / "rules"  # 8 rules files and a README


def make_tree(root: Path, extra: dict[str, str | bytes] | None = None) -> Path:
    """Copy the sample tree to `root`, add `extra` (relative path -> text or bytes), return root."""
    shutil.copytree(SAMPLE, root)
    for rel, data in (extra or {}).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data, encoding="utf-8")
    return root


def titles(rules: list) -> list[tuple[str, str]]:
    return [(r.level.value, r.title) for r in rules]


def test_each_level_resolves_most_specific_first(tmp_path: Path) -> None:
    """A path in a module gets file-specific, module, cross-module then general rules."""
    index = RulesIndex.from_root(make_tree(tmp_path / "rules"))
    assert index.problems == ()
    assert titles(index.resolve("host/store/sqlite.py", module="store")) == [
        ("file-specific", "Python"),
        ("module", "SQL"),
        ("cross-module", "Contracts"),
        ("cross-module", "Logs"),
        ("general", ""),
        ("general", "Commits"),
    ]
    first = index.resolve("a.py", module="store")[0]
    assert first.source == "file-specific/py.cursorrules" and first.level is Level.FILE_SPECIFIC


def test_file_name_rule_beats_extension_rule(tmp_path: Path) -> None:
    """`setup.py.cursorrules` comes before `py.cursorrules` for a file named setup.py."""
    index = RulesIndex.from_root(make_tree(tmp_path / "rules"))
    assert titles(index.resolve("pkg/setup.py"))[:2] == [
        ("file-specific", "Setup"),
        ("file-specific", "Python"),
    ]
    assert [r.title for r in index.resolve("other.py")][:1] == ["Python"]
    assert "Setup" not in [r.title for r in index.resolve("other.py")]


def test_dotless_target_matches_file_name_and_extension(tmp_path: Path) -> None:
    """`Dockerfile.cursorrules` applies to `Dockerfile` and to `prod.Dockerfile`, once each."""
    index = RulesIndex.from_root(make_tree(tmp_path / "rules"))
    for path in ("deploy/Dockerfile", "prod.Dockerfile"):
        docker = [r for r in index.resolve(path) if r.title == "Docker"]
        assert len(docker) == 1


def test_unknown_module_adds_no_rules_and_no_error(tmp_path: Path) -> None:
    """An unknown module resolves to the other levels only."""
    index = RulesIndex.from_root(make_tree(tmp_path / "rules"))
    rules = index.resolve("x.py", module="nowhere")
    assert Level.MODULE not in {r.level for r in rules}
    assert titles(rules)[0] == ("file-specific", "Python")
    assert index.for_module("nowhere") == []


def test_folders_in_the_path_never_select_a_module(tmp_path: Path) -> None:
    """Without `module`, a path under a folder named like a module gets no module rules."""
    index = RulesIndex.from_root(make_tree(tmp_path / "rules"))
    assert Level.MODULE not in {r.level for r in index.resolve("store/x.txt")}


def test_index_by_module_and_extension(tmp_path: Path) -> None:
    """The index lists modules and extensions and answers for each, extensions in any case."""
    index = RulesIndex.from_root(make_tree(tmp_path / "rules"))
    assert index.modules() == ["server", "store"]
    assert index.extensions() == ["dockerfile", "py"]
    assert [r.title for r in index.for_module("store")] == ["SQL"]
    assert [r.title for r in index.for_extension(".PY")] == ["Python"]
    assert [r.title for r in index.resolve("MAIN.PY")][:1] == ["Python"]


def test_rules_root_under_a_folder_named_modules(tmp_path: Path) -> None:
    """Levels come from the path below the root, not from folder names above it."""
    root = make_tree(tmp_path / "modules" / "file-specific" / "rules")
    index = RulesIndex.from_root(root)
    assert index.problems == ()
    general = [r for r in index.rules if r.source == "general.cursorrules"]
    assert {r.level for r in general} == {Level.GENERAL}
    assert index.modules() == ["server", "store"]


def test_malformed_files_are_reported_and_do_not_stop_the_others(tmp_path: Path) -> None:
    """Bad files come back as problems with file and line; good files still load."""
    bad = {
        "modules/broken.cursorrules": "## A\nok\n```\n## B\n",
        "modules/latin1.cursorrules": b"## A\n\xe9t\xe9\n",
        "modules/deep/nested.cursorrules": "## A\nx\n",
        "file-specific/.cursorrules": "## A\nx\n",
        "stray.cursorrules": "## A\nx\n",
    }
    index = RulesIndex.from_root(make_tree(tmp_path / "rules", bad))
    problems = {p.source: p for p in index.problems}
    assert set(problems) == set(bad)
    assert problems["modules/broken.cursorrules"].line == 3
    assert "never closed" in str(problems["modules/broken.cursorrules"])
    assert problems["modules/latin1.cursorrules"].line == 2
    assert problems["stray.cursorrules"].line is None
    assert "layout" in problems["modules/deep/nested.cursorrules"].message
    assert index.modules() == ["server", "store"]
    assert len(index.resolve("a.py", module="store")) == 6


def test_reload_after_a_file_is_deleted(tmp_path: Path) -> None:
    """A reload drops the rules of a deleted file and leaves the old index as it was."""
    root = make_tree(tmp_path / "rules")
    before = RulesIndex.from_root(root)
    (root / "file-specific" / "py.cursorrules").unlink()
    (root / "modules" / "store.cursorrules").write_text("## Migrations\nNumbered.\n")
    after = before.reload()
    assert "Python" not in [r.title for r in after.resolve("a.py", module="store")]
    assert [r.title for r in after.for_module("store")] == ["Migrations"]
    assert after.extensions() == ["dockerfile"]
    assert before.extensions() == ["dockerfile", "py"]


def test_load_result_lists_files_and_classifies_paths(tmp_path: Path) -> None:
    """load_rules reports the files it loaded; classify maps relative paths to levels."""
    loaded = load_rules(make_tree(tmp_path / "rules"))
    assert len(loaded.files) == 8 and "README.md" not in loaded.files
    assert classify("modules/api.cursorrules") == (Level.MODULE, "api")
    assert classify("file-specific/setup.py.cursorrules") == (Level.FILE_SPECIFIC, "setup.py")
    with pytest.raises(ValueError):
        classify("rules/modules/api.cursorrules")


def test_root_that_is_not_a_folder_raises(tmp_path: Path) -> None:
    """A missing root or a file as root is the caller's error, raised."""
    with pytest.raises(FileNotFoundError):
        RulesIndex.from_root(tmp_path / "missing")
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError):
        load_rules(tmp_path / "f")


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a/b/app.tar.gz", ("app.tar.gz", "gz")),
        ("Dockerfile", ("Dockerfile", "")),
        (".bashrc", (".bashrc", "")),
        ("src\\win\\main.py", ("main.py", "py")),
        (Path("x") / "y.rs", ("y.rs", "rs")),
    ],
)
def test_file_name_and_extension(path: str | Path, expected: tuple[str, str]) -> None:
    """Only the last component counts; its last suffix is the extension."""
    assert file_name_and_extension(path) == expected


def test_plain_root_cursorrules_is_general(tmp_path: Path) -> None:
    """A project's single `.cursorrules` at the root loads as a general rule, not a problem."""
    root = tmp_path / "project"
    root.mkdir()
    (root / ".cursorrules").write_text("# Team\n## Style\nBe concise.\n", encoding="utf-8")
    assert classify(".cursorrules") == (Level.GENERAL, "")
    index = RulesIndex.from_root(root)
    assert index.problems == ()
    assert titles(index.resolve("any/file.txt")) == [("general", "Style")]
