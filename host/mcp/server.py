"""The memory as MCP tools: `memory_put`, `memory_get`, `memory_search`, `memory_forget`,
`rules_for`, built on the official `mcp` SDK's `MCPServer` (docs/mcp.md).

    server = build_server(memories, config, rules=rules)   # memories: a `host.library.AsyncStore`
    await serve_stdio(server)                               # or: await serve_http(server, config)

The tools stand on the library layer: a memory is a `host.library.Memory`, stored through an
`AsyncStore` (`host.library.EntryStoreMemories` over the host's SQLite store in `a2e-host mcp`),
so a memory written here is an entry a WebSocket client reads, and the other way round.

Results are JSON: `memory_put` returns the stored memory (`Memory.to_dict()`), `memory_get` the
memory or null, `memory_search` a list of `{memory, relevance_score, combined_score}`: the
`relevance` and `combined` a `memory/retrieve` of every tier reports for the same query, with
`supersedes` and `collapsed` (ids) where its judgement puts them (the
`AsyncStore` searches with the host's `SearchEngine`, see `host.library.entry_store`).
The time of a fact is the wire's (docs/protocol.md): `memory_put` takes `valid_from` /
`valid_until`, `memory_search` takes `as_of` (epoch seconds or ISO 8601 text with a zone, read by
`protocol.validity`'s rule through the library's `Memory`); a memory carries its bounds only when
it has them. The text
content of each result is that same JSON; the structured content is the object itself, or
`{"result": ...}` for a list or null (the SDK's convention). Caller mistakes (an unknown memory
type or importance, an empty query, `k` out of range, content over the size limit, a malformed
instant or a `valid_until` not after `valid_from`) come back as
a tool error (`isError: true`) whose text says what to change; any other failure is logged with
its traceback on stderr and the caller sees only `Error executing tool <name>`.
"""

# No `from __future__ import annotations`: the SDK reads the tools' annotations at registration,
# and `k`'s bound comes from the config, in the enclosing function.
import asyncio
import contextlib
import inspect
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, BeforeValidator, Field, ValidationError

from host.config import Config
from host.core.auth import Authenticator
from host.library.models import (
    Memory,
    MemoryImportance,
    MemoryType,
    RetrievalResult,
    as_of_seconds,
)
from host.library.protocol import AsyncStore
from host.library.sqlite_store import StoreFullError
from host.lifecycle import on_signals
from host.mcp.auth import BearerGate
from host.text.keyword import query_terms

__all__ = ["RulesFn", "build_server", "serve_http", "serve_stdio"]

log = logging.getLogger("a2e_host.mcp")

# The rules lookup `rules_for` wraps: (path, module) -> rules, most specific first.
RulesFn = Callable[[str, str | None], Awaitable[list[dict[str, Any]]]]

SERVER_NAME = "a2e-memory"

INSTRUCTIONS = (
    "Long-term memory for this agent. Save what is worth remembering with memory_put, recall it "
    "with memory_search (by topic) or memory_get (by id), and delete it with memory_forget. "
    "Search before answering questions about the user, past work or project conventions."
)


class ForgetResult(BaseModel):
    """What `memory_forget` did."""

    memory_id: str
    deleted: bool


def _lower(value: Any) -> Any:
    """Accept `EPISODIC`, ` High ` and the like: enum values are lower case."""
    return value.strip().lower() if isinstance(value, str) else value


MemoryTypeArg = Annotated[
    MemoryType,
    BeforeValidator(_lower),
    Field(
        description=(
            "What kind of memory this is. episodic: something that happened (an event, a "
            "conversation, an outcome); semantic: a fact or preference; procedural: how to do "
            "something, a rule to follow; working: a scratch note kept only while this server "
            "runs. episodic and working memories are private to this agent; semantic and "
            "procedural ones are shared with every agent of the namespace."
        )
    ),
]
ImportanceArg = Annotated[
    MemoryImportance,
    BeforeValidator(_lower),
    Field(description="How much it matters; higher importance ranks first in searches."),
]


def _not_bool(value: Any) -> Any:
    """An instant is a number or a text: `true` is neither (pydantic would read it as 1.0)."""
    if isinstance(value, bool):
        raise ValueError("an instant is epoch seconds or ISO-8601 text with a zone, not true"
                         " or false")
    return value


_INSTANT = ("epoch seconds or ISO-8601 text with a zone, e.g. 2026-03-01T00:00:00Z or"
            " 2026-03-01T09:00:00+01:00")
ValidFromArg = Annotated[
    float | str | None,
    BeforeValidator(_not_bool),
    Field(description=f"When the fact starts to hold (included), if known: {_INSTANT}."),
]
ValidUntilArg = Annotated[
    float | str | None,
    BeforeValidator(_not_bool),
    Field(description="When the fact stops holding (excluded; after valid_from), if known: "
          f"{_INSTANT}. It is not a deletion: memory_search still finds it without as_of."),
]
AsOfArg = Annotated[
    float | str | None,
    BeforeValidator(_not_bool),
    Field(description="Only the memories valid at this instant (those without valid_from / "
          f"valid_until hold at every time): {_INSTANT}. Omit it to search every memory."),
]


def _why(err: ValidationError) -> str:
    """The messages of a `Memory`'s ValidationError, as the library's rule words them."""
    return "; ".join(str(e.get("ctx", {}).get("error", e["msg"])) for e in err.errors())


# Hints of a tool that only reads this memory, one that adds to it, and one that deletes from it.
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
ADDS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
DELETES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


def _tool(
    server: MCPServer[Any], title: str, annotations: ToolAnnotations
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as a tool whose description is its docstring (dedented)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        server.add_tool(fn, title=title, description=inspect.getdoc(fn), annotations=annotations)
        return fn

    return register


def _reply(payload: Any, wrap: bool = False) -> CallToolResult:
    """A result whose text is the JSON of `payload` and whose structured content is `payload`
    (wrapped as `{"result": payload}` when it is not an object)."""
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
        structured_content={"result": payload} if wrap else payload,
    )


def _hit(h: RetrievalResult) -> dict[str, Any]:
    """One `memory_search` hit as JSON: the memory, its scores, and what the judgement says
    it carries (`supersedes`, `collapsed`: ids), only when it carries something."""
    out: dict[str, Any] = {"memory": h.memory.to_dict(), "relevance_score": h.relevance_score,
                           "combined_score": h.combined_score}
    if h.supersedes:
        out["supersedes"] = h.supersedes
    if h.collapsed:
        out["collapsed"] = h.collapsed
    return out


def build_server(
    memories: AsyncStore, config: Config, *, rules: RulesFn | None = None,
    subscriptions: Any = None, namespace: tuple[str, Callable[[], str]] | None = None,
) -> MCPServer[Any]:
    """An `MCPServer` whose tools read and write `memories` (which the caller opens and closes).

    `config.mcp.max_k` bounds `k`, `config.limits.max_entry_bytes` the content of a memory.
    `rules_for` is offered only when `rules` is given. `namespace` is (URI, text of it): a
    resource clients may listen to, updated through `subscriptions` (the SDK's subscription
    bus, see `host.mcp.changes`).
    """
    max_k = config.mcp.max_k
    max_bytes = config.limits.max_entry_bytes
    server: MCPServer[Any] = MCPServer(SERVER_NAME, instructions=INSTRUCTIONS,
                                       subscriptions=subscriptions)
    if namespace is not None:
        uri, describe = namespace
        server.resource(uri, name="namespace", title="This server's memory namespace",
                        description="The namespace the tools act in and the cursor of its"
                        " newest change you may read; listen to it to be told of changes.",
                        mime_type="application/json")(describe)

    @_tool(server, title="Remember something", annotations=ADDS)
    async def memory_put(
        content: Annotated[
            str,
            Field(
                min_length=1,
                description="The memory itself, as self-contained text (who, what, when).",
            ),
        ],
        memory_type: MemoryTypeArg = MemoryType.EPISODIC,
        importance: ImportanceArg = MemoryImportance.MEDIUM,
        valid_from: ValidFromArg = None,
        valid_until: ValidUntilArg = None,
    ) -> Annotated[CallToolResult, Memory]:
        """Save one new memory and return it with its id (keep the id to fetch or forget it).

        Each call creates a new memory, even for the same text. Pick memory_type by what the
        memory is (see the parameter) and importance by how much it should outrank others.
        When you know when a fact holds (a former address, a plan for next month), give
        valid_from and/or valid_until, so a search as_of a time finds what was true then.
        """
        if not content.strip():
            raise ToolError("content is blank: give the text of the memory")
        size = len(content.encode())
        if size > max_bytes:
            raise ToolError(
                f"content is {size} bytes, over the limit of {max_bytes}: shorten it or split it"
                " into several memories"
            )
        try:
            memory = Memory(content=content, memory_type=memory_type, importance=importance,
                            valid_from=valid_from, valid_until=valid_until)
        except ValidationError as err:
            raise ToolError(f"{_why(err)}: give each instant as {_INSTANT}") from None
        try:
            await memories.set(memory.id, memory)
        except StoreFullError as err:
            raise ToolError(
                f"memory is full: {err}; forget memories that are no longer needed"
            ) from None
        return _reply(memory.to_dict())

    @_tool(server, title="Recall a memory by id", annotations=READ_ONLY)
    async def memory_get(
        memory_id: Annotated[
            str,
            Field(min_length=1, description="The id memory_put or memory_search returned."),
        ],
    ) -> Annotated[CallToolResult, Memory | None]:
        """Fetch one memory by its id. Returns null when no memory has this id (never stored,
        forgotten, or private to another agent)."""
        memory = await memories.get(memory_id)
        return _reply(None if memory is None else memory.to_dict(), wrap=True)

    @_tool(server, title="Search memories", annotations=READ_ONLY)
    async def memory_search(
        query: Annotated[
            str,
            Field(
                min_length=1,
                description="What to recall: a question, a topic, a name. Memories are found "
                "by meaning as well as by their words.",
            ),
        ],
        k: Annotated[
            int, Field(ge=1, le=max_k, description=f"How many memories to return, 1 to {max_k}.")
        ] = 5,
        collapse: Annotated[
            bool, Field(description="Fold memories that say the same thing into one, which "
                        "lists the ids of the others in `collapsed`.")
        ] = False,
        as_of: AsOfArg = None,
    ) -> Annotated[CallToolResult, list[RetrievalResult]]:
        """Find the memories most relevant to `query`, best first (an empty list when none
        matches). Each hit gives the memory, relevance_score (0 to 1: how likely the memory is
        what the query is about, as the memory host reports it) and combined_score
        (relevance weighed with importance and recency; the order of the list). A newer
        memory that says an older one changed ranks above it and lists its id in
        `supersedes`; with `collapse`, near-duplicates come back as one, listing the others'
        ids in `collapsed` (the same judgement as the memory host's replies). With `as_of`,
        only the memories valid then: "where did I live in January?" is a search as_of
        January."""
        try:
            at = as_of_seconds(as_of)
        except ValueError as err:
            raise ToolError(f"{err}: give it as {_INSTANT}") from None
        if not query_terms(query):
            raise ToolError(
                f"query {query!r} has no searchable words: use a few words of the topic"
            )
        hits = await (memories.search(query, k, collapse=collapse) if at is None
                      else memories.search(query, k, collapse=collapse, as_of=at))
        return _reply([_hit(h) for h in hits], wrap=True)

    @_tool(server, title="Forget a memory", annotations=DELETES)
    async def memory_forget(
        memory_id: Annotated[
            str, Field(min_length=1, description="The id of the memory to delete.")
        ],
    ) -> Annotated[CallToolResult, ForgetResult]:
        """Delete one memory for good. `deleted` is false when no memory had this id, so calling
        it again is harmless."""
        deleted = await memories.delete(memory_id)
        return _reply({"memory_id": memory_id, "deleted": deleted})

    if rules is not None:
        _add_rules_tool(server, rules)
    return server


def _add_rules_tool(server: MCPServer[Any], rules: RulesFn) -> None:
    @_tool(server, title="Rules for a file", annotations=READ_ONLY)
    async def rules_for(
        path: Annotated[
            str,
            Field(
                min_length=1,
                description="The file about to be read or changed, e.g. src/app/models.py.",
            ),
        ],
        module: Annotated[
            str | None,
            Field(description="The module the file belongs to, if known (adds its rules)."),
        ] = None,
    ) -> Annotated[CallToolResult, list[dict[str, Any]]]:
        """The project's coding rules (from .cursorrules files) that apply to `path`, most
        specific first: rules for its file name or extension, then its module, then
        cross-module, then general rules. Follow them when editing the file; a rule listed
        earlier wins over a later one. An empty list means no rules were loaded for it."""
        return _reply(await rules(path, module or None), wrap=True)


class _Uvicorn(uvicorn.Server):
    """uvicorn, with SIGTERM/SIGINT handled on the event loop and not re-raised afterwards (uvicorn
    re-raises a captured signal after its graceful shutdown, which would kill the process before
    the store is closed)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        with on_signals({sig: partial(self.handle_exit, sig, None)
                         for sig in (signal.SIGTERM, signal.SIGINT)}):
            yield


class _PipeLines:
    """The lines of a pipe as an async iterator of text, read by the event loop (no thread, so
    closing it or cancelling a read takes effect at once)."""

    def __init__(self, reader: asyncio.StreamReader, limit: int) -> None:
        self.reader = reader
        self.limit = limit

    def __aiter__(self) -> "_PipeLines":
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                line = await self.reader.readline()
            except ValueError:  # a line over the limit: dropped, the client gets no answer
                log.warning("dropped an MCP message over %d bytes", self.limit)
                continue
            if not line:
                raise StopAsyncIteration
            return line.decode("utf-8", errors="replace")


async def serve_stdio(server: MCPServer[Any], max_message_bytes: int) -> None:
    """Serve one client over this process's stdin/stdout until stdin closes, or SIGTERM or SIGINT
    (which count as stdin closing: the server finishes as if the client had left).

    Only JSON-RPC messages go to stdout; logs go to stderr. A message longer than
    `max_message_bytes` is dropped. When stdin is not a pipe or terminal (a regular file), the
    SDK's own reader is used and a signal ends the process without a clean exit.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=max_message_bytes)
    pipe = os.fdopen(os.dup(sys.stdin.fileno()), "rb", buffering=0)
    try:
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
    except ValueError:
        pipe.close()
        await server.run_stdio_async()
        return
    try:
        with on_signals({signal.SIGTERM: reader.feed_eof, signal.SIGINT: reader.feed_eof}):
            async with stdio_server(stdin=_PipeLines(reader, max_message_bytes)) as (read_stream, write_stream):  # type: ignore[arg-type]
                lowlevel = server._lowlevel_server  # what run_stdio_async runs, on our streams
                await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
    finally:
        transport.close()


async def serve_http(
    server: MCPServer[Any], config: Config, on_listening: Callable[[int], None] | None = None,
    config_path: str | Path | None = None,
) -> None:
    """Serve streamable HTTP on `config.mcp.host:port` at `config.mcp.path` until SIGTERM or
    SIGINT, then let uvicorn finish the requests in flight and return (the caller then closes
    its store and exits normally).

    `on_listening(port)` is called with the bound port once the socket is bound (useful with
    port 0). uvicorn's logs go to the root logger (stderr). Raises `OSError` when the address
    cannot be bound, `ValueError` for a non-loopback address without tokens (unless
    `auth.allow_anonymous_remote`). With tokens every request needs a bearer token fit for the
    server's agent and namespace (`host.mcp.auth`); SIGHUP re-reads them from `config_path`
    (a bad file is logged and the old tokens stay in force).
    """

    cfg = config.mcp
    auth = Authenticator(config.auth, config_path)
    auth.check_exposure(cfg.host, config.auth.allow_anonymous_remote)  # ValueError: refused
    sock = socket.create_server((cfg.host, cfg.port))
    try:
        port = int(sock.getsockname()[1])
        app: Any = server.streamable_http_app(streamable_http_path=cfg.path, host=cfg.host)
        if auth.enabled:
            app = BearerGate(app, auth, cfg)
        uv = _Uvicorn(uvicorn.Config(app, log_config=None, lifespan="on"))
        log.info("MCP server on http://%s:%d%s (authentication %s)", cfg.host, port, cfg.path,
                 "on" if auth.enabled else "off")
        if on_listening is not None:
            on_listening(port)
        with on_signals({signal.SIGHUP: partial(_reload_tokens, auth)}):
            await uv.serve(sockets=[sock])
    finally:
        sock.close()


def _reload_tokens(auth: Authenticator) -> None:
    """SIGHUP: re-read the tokens (see `Authenticator.reload`); a failure keeps the old ones."""
    try:
        n = auth.reload()
    except ValueError as err:
        log.error("SIGHUP: tokens not reloaded, the old ones stay in force: %s", err)
        return
    log.info("SIGHUP: %d tokens loaded", n)
