"""docs/langgraph.md as a new user reads it: its Python example runs as written against a real
host and prints what it says, and the extra it installs holds what the example graph imports."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "langgraph.md"
DEFAULT_URL = "ws://127.0.0.1:8765"


def python_blocks(text: str) -> list[tuple[str, str]]:
    """The ```python blocks of a Markdown text, in order, each with the text of the
    `<!-- prints: TEXT -->` mark right above it ("" without one)."""
    return re.findall(r"(?:<!-- prints: (.*?) -->\n)?```python\n(.*?)```", text, flags=re.S)


def test_the_guides_example_prints_what_it_says(
    host_process: Callable[..., Any], tmp_path: Path,
) -> None:
    """The guide's first Python example, run as a process of its own against a fresh host (its
    address the only change), prints exactly the item its mark and its comment name: a search
    with a query that shares no word with the item still returns it."""
    host = host_process(tmp_path / "a2e.db")
    want, code = python_blocks(GUIDE.read_text())[0]
    assert DEFAULT_URL in code and want
    assert re.findall(r"print\(.*\)\s+# (.+)", code) == [want]
    done = subprocess.run([sys.executable, "-c", code.replace(DEFAULT_URL, host.url)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [want]


def test_the_extra_the_guide_installs_holds_langgraph_and_the_store_interface() -> None:
    """The extra the guide's install line names lists LangGraph (the example's
    `langgraph.graph`) and langgraph-checkpoint from 4.3 (`validate_op_namespace`)."""
    extra = re.search(r"pip install -e '\.\[(\w+)\]'", GUIDE.read_text())
    assert extra is not None
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = meta["project"]["optional-dependencies"][extra.group(1)]
    names = {re.split(r"[<>=!~ ]", r, maxsplit=1)[0]: r for r in reqs}
    assert "langgraph" in names
    assert ">=4.3" in names["langgraph-checkpoint"]
