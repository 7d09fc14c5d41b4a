"""A LangGraph agent whose long-term memory is an A2E memory host.

Install LangGraph with the store (`pip install -e '.[langgraph]'`; `--tools` also needs
`pip install langmem`), start a host (`a2e-host serve`), then remember something in one
process and find it from another, with the host's own offline search (no embedding API key):

    python examples/langgraph_memory.py --remember "The user prefers concise Python answers"
    python examples/langgraph_memory.py --recall "how should code answers look?"

The graph's nodes reach the store through `runtime.store`, as with any LangGraph store; the
store is `A2EStore`, so every process (and every host sharing the database) sees the same
memories, per A2E namespace and agent. `--tools` does the same through langmem's memory
tools, invoked directly (no LLM needed).
"""

from __future__ import annotations

import argparse
import uuid
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime

from host.langgraph import A2EStore


class State(TypedDict, total=False):
    user: str
    remember: str
    recall: str
    found: list[str]


def remember(state: State, runtime: Runtime) -> State:
    """Write the text to remember (if any) under the user's namespace."""
    if state.get("remember") and runtime.store is not None:
        runtime.store.put(("memories", state["user"]), str(uuid.uuid4()),
                          {"text": state["remember"]})
    return {}


def recall(state: State, runtime: Runtime) -> State:
    """Search the user's memories for the question (if any), best first."""
    if not state.get("recall") or runtime.store is None:
        return {"found": []}
    hits = runtime.store.search(("memories", state["user"]), query=state["recall"], limit=3)
    return {"found": [h.value["text"] for h in hits]}


def build(store: A2EStore):  # noqa: ANN201 - LangGraph's compiled graph type
    """The graph: remember, then recall, with `store` as its long-term memory."""
    g = StateGraph(State)
    g.add_node("remember", remember)
    g.add_node("recall", recall)
    g.add_edge(START, "remember")
    g.add_edge("remember", "recall")
    g.add_edge("recall", END)
    return g.compile(store=store)


def with_tools(store: A2EStore, user: str, text: str, query: str) -> None:
    """langmem's manage and search tools on the same store."""
    try:
        from langmem import create_manage_memory_tool, create_search_memory_tool
    except ImportError:
        raise SystemExit("--tools needs langmem: pip install langmem") from None

    manage = create_manage_memory_tool(("memories", user), store=store)
    search = create_search_memory_tool(("memories", user), store=store)
    if text:
        print(manage.invoke({"content": text, "action": "create"}))
    if query:
        print(search.invoke({"query": query}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="ws://127.0.0.1:8765", help="the host (ws:// or http://)")
    ap.add_argument("--namespace", default="langgraph-example", help="the A2E namespace")
    ap.add_argument("--token", default=None, help="a bearer token, when the host has them")
    ap.add_argument("--user", default="alice", help="the LangGraph namespace's user")
    ap.add_argument("--remember", default="", help="text to remember")
    ap.add_argument("--recall", default="", help="a question to search the memories for")
    ap.add_argument("--tools", action="store_true", help="use langmem's memory tools")
    args = ap.parse_args()
    with A2EStore.from_conn_string(args.url, namespace=args.namespace,
                                   token=args.token) as store:
        if args.tools:
            with_tools(store, args.user, args.remember, args.recall)
            return
        out = build(store).invoke({"user": args.user, "remember": args.remember,
                                   "recall": args.recall})
        for text in out.get("found", []):
            print(text)


if __name__ == "__main__":
    main()
