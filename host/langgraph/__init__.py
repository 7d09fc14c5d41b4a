"""LangGraph's long-term memory (`BaseStore`) on an A2E memory host, over the wire.

    from host.langgraph import A2EStore

    with A2EStore.from_conn_string("ws://127.0.0.1:8765", namespace="my-app") as store:
        graph = builder.compile(store=store)

`A2EStore` is sync first, `AsyncA2EStore` async first (`async with
AsyncA2EStore.from_conn_string(...)`). Needs the `langgraph` extra
(`pip install 'a2e-host[langgraph]'`). How items map to entries: `host.langgraph.mapping`;
the guide: docs/langgraph.md.
"""

from host.extras import require

require("langgraph.store.base", "langgraph", "host.langgraph")

from host.langgraph.store import A2EStore, A2EStoreError, AsyncA2EStore  # noqa: E402

__all__ = ["A2EStore", "A2EStoreError", "AsyncA2EStore"]
