"""A real LangGraph graph and langmem's memory tools on A2EStore: what one process's graph
stores, another process's graph finds; the tools create, search, update and delete."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langmem import create_manage_memory_tool, create_search_memory_tool

from host.langgraph import A2EStore

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "langgraph_memory.py"


def run_example(url: str, *args: str) -> str:
    """The example's output, run as a process of its own."""
    done = subprocess.run([sys.executable, str(EXAMPLE), "--url", url, *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_graph_finds_what_another_process_stored(
    host_process: Callable[..., Any], tmp_path: Path,
) -> None:
    """A StateGraph compiled with A2EStore writes through `runtime.store` in one process; the
    same graph in a second process finds it by a question about it, and a graph of another
    A2E namespace does not."""
    host = host_process(tmp_path / "a2e.db")
    assert run_example(host.url, "--remember", "The user prefers concise Python answers") == ""
    assert run_example(host.url, "--recall", "what style of python answers?") == (
        "The user prefers concise Python answers\n")
    assert run_example(host.url, "--namespace", "another", "--recall",
                       "what style of python answers?") == ""


def test_langmem_tools_manage_and_search_on_the_store(
    host_process: Callable[..., Any], tmp_path: Path,
) -> None:
    """langmem's manage-memory tool creates, updates and deletes memories in an A2EStore and
    its search-memory tool finds them, invoked directly."""
    host = host_process(tmp_path / "a2e.db")
    with A2EStore.from_conn_string(host.url, namespace="tools") as store:
        manage = create_manage_memory_tool(("memories", "bob"), store=store)
        search = create_search_memory_tool(("memories", "bob"), store=store,
                                           response_format="content_and_artifact")
        created = manage.invoke({"content": "Bob's dog is called Rex", "action": "create"})
        memory_id = created.split()[-1]
        assert store.get(("memories", "bob"), memory_id).value == {
            "content": "Bob's dog is called Rex"}
        _, found = search.func(query="what is the dog called")  # type: ignore[misc]
        assert [f.key for f in found] == [memory_id]
        manage.invoke({"content": "Bob's dog is called Max", "action": "update",
                       "id": memory_id})
        assert store.get(("memories", "bob"), memory_id).value["content"].endswith("Max")
        manage.invoke({"action": "delete", "id": memory_id})
        assert store.get(("memories", "bob"), memory_id) is None
        assert store.search(("memories", "bob")) == []
