"""Names and numbers a hostile client sends, over real sockets on both backends: names with
control characters or a trailing newline, integers beyond 64 bits or beyond a double, and a
malformed vector space on an entry without vectors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from host.client import MemoryClient, RemoteError
from host.search.client_vectors import space_key, space_of

pytestmark = [pytest.mark.all_backends, pytest.mark.all_transports("websocket")]

# a control character of each kind (C0, U+0000, DEL, C1), a trailing newline, a long name
BAD_NAMES = ["z\x00default", "ns\n", "tab\there", "del\x7f", "c1\x85", "x" * 257]


async def session(connect: Callable[..., Any], ns: str = "ns") -> MemoryClient:
    """A client with a session in `ns` as agent a1."""
    c: MemoryClient = await connect()
    await c.init(ns, {"agent": "a1"})
    return c


async def bad(coro: Any) -> str:
    """The `detail.field` of the `invalid_message` that `coro` must raise."""
    with pytest.raises(RemoteError) as err:
        await coro
    assert err.value.code == "invalid_message", err.value
    return str(err.value.detail.get("field"))


def entry(k: int, content: Any, **kw: Any) -> dict[str, Any]:
    return {"key": {"k": k}, "content": content, "tier": "semantic", **kw}


async def test_namespaces_and_agents_with_control_characters_are_refused(
    connect: Callable[..., Any],
) -> None:
    """A namespace, a `scope.agent` or a handshake `agent_id` holding a control character
    (U+0000, a newline, DEL, a C1 one) or over 256 bytes is `invalid_message` naming its
    field, and no session opens; a name of 256 bytes of any other text is taken."""
    c: MemoryClient = await connect()
    for name in BAD_NAMES:
        assert await bad(c.init(name)) == "namespace", name
        assert await bad(c.init("ns", {"agent": name})) == "scope.agent", name
    assert c.memory_id is None
    await c.init("é" * 128, {"agent": "ü" * 128})  # 256 bytes each
    assert (await c.store([entry(1, "v")])).stored == [{"k": 1}]
    other: MemoryClient = await connect()
    await other.handshake(agent_id="a\x00b")
    assert await bad(other.init("ns")) == "agent_id"


async def test_a_namespace_holding_nul_cannot_reach_another_namespaces_space(
    connect: Callable[..., Any],
) -> None:
    """`z\\u0000default` (once the key of namespace z's space `default`) opens no session, and
    z's 8-dimension space keeps answering its own vectors."""
    z = await session(connect, "z")
    assert (await z.store([entry(1, "v", vectors=[[1.0] * 8])])).errors == []
    attacker: MemoryClient = await connect()
    assert await bad(attacker.init("z\x00default")) == "namespace"
    found = await z.retrieve(vector=[1.0] * 8)
    assert [e["key"] for e in found.entries] == [{"k": 1}]


def test_space_keys_of_different_names_never_meet() -> None:
    """Every (namespace, space) pair has its own index key, read back whole, even for names
    holding U+0000; none is the own key of a namespace the host takes (the namespace)."""
    pairs = [("z", "default"), ("z\x00default", "default"), ("a\x00b", "c"), ("a", "b\x00c"),
             ("", "x"), ("\x00", ""), ("z", "default\x00")]
    keys = [space_key(ns, sp) for ns, sp in pairs]
    assert len(set(keys)) == len(pairs)
    assert [space_of(k) for k in keys] == pairs
    assert not {"z", "a", "default", "x"} & set(keys)


async def test_names_with_a_trailing_newline_are_refused(connect: Callable[..., Any]) -> None:
    """A vector space, a filter member, a `key_prefix` member or a paths `field` ending in a
    newline is refused with its field named (an entry's space: that entry's error)."""
    c = await session(connect)
    assert await bad(c.retrieve(vector=[1.0, 0.0], vector_space="sp\n")) == "vector_space"
    assert await bad(c.retrieve(filter={"n\n": 1})) == "filter"
    assert await bad(c.retrieve(filter={"a": {"b\n": 1}})) == "filter"
    assert await bad(c.retrieve(key_prefix={"ns\n": ["a"]})) == "key_prefix"
    assert await bad(c.paths(field="ns\n")) == "field"
    reply = await c.store([entry(1, "v", vectors=[[1.0, 0.0]], vector_space="sp\n"),
                           entry(2, "w", vectors=[[1.0, 0.0]], vector_space="sp")])
    assert reply.stored == [{"k": 2}] and len(reply.errors) == 1
    assert reply.errors[0].startswith("entries[0]: invalid_message")


async def test_a_malformed_space_without_vectors_is_only_that_entrys_error(
    connect: Callable[..., Any],
) -> None:
    """An entry without vectors naming a malformed `vector_space` fails alone, as with vectors:
    the request's other entries are stored."""
    c = await session(connect)
    reply = await c.store([entry(1, "v", vector_space="bad name"), entry(2, "w"),
                           entry(3, "x", vector_space="sp\n")])
    assert reply.stored == [{"k": 2}]
    assert [e.split(":")[0] for e in reply.errors] == ["entries[0]", "entries[2]"]
    assert all("invalid_message" in e and "vector_space" in e for e in reply.errors)


async def test_filter_integers_beyond_64_bits_compare_as_doubles(
    connect: Callable[..., Any],
) -> None:
    """An integer of a filter beyond 64 bits is compared as the double it rounds to (on the
    persistent tiers and the working tier alike); one beyond a double is `invalid_message`
    naming `filter`, never `internal_error`."""
    c = await session(connect)
    big = 2**63
    await c.store([entry(0, {"n": 5}), entry(1, {"n": big}), entry(2, {"n": 1e20}),
                   entry(3, {"n": 10**20}), entry(4, {"n": big}, tier="working")])

    async def keys(spec: dict[str, Any]) -> list[int]:
        reply = await c.retrieve(filter=spec, limit=100)
        return sorted(e["key"]["k"] for e in reply.entries)

    assert await keys({"n": big}) == [1, 4]
    assert await keys({"n": {"$gt": 100000000000000000000}}) == []
    assert await keys({"n": {"$gte": 100000000000000000000}}) == [2, 3]
    assert await keys({"n": {"$lt": -(2**70)}}) == []
    assert await keys({"n": {"$gt": 18446744073709551616, "$lt": 10**19}}) == []
    assert await keys({"n": {"$ne": big}}) == [0, 2, 3]
    assert await bad(c.retrieve(filter={"n": 10**400})) == "filter"
    assert await bad(c.retrieve(filter={"n": {"$gt": -(10**400)}})) == "filter"
    assert await bad(c.retrieve(filter={"a": [1, 10**400]})) == "filter"
    assert await keys({"n": 5}) == [0]  # the connection goes on


async def test_a_content_integer_beyond_a_double_is_that_entrys_error(
    connect: Callable[..., Any],
) -> None:
    """Content holding a 400-digit integer is that entry's `invalid_message`; 400 digits in a
    string and an integer a double holds are stored."""
    c = await session(connect)
    reply = await c.store([entry(0, {"n": 10**400}), entry(1, {"s": "1" * 400}),
                           entry(2, [10**300, -(2**64)]), entry(3, [[{"deep": -(10**400)}]])])
    assert reply.stored == [{"k": 1}, {"k": 2}]
    assert [e.split(":")[0] for e in reply.errors] == ["entries[0]", "entries[3]"]
    assert all("invalid_message" in e for e in reply.errors)
    found = await c.retrieve(keys=[{"k": 0}, {"k": 1}, {"k": 2}, {"k": 3}])
    assert sorted(e["key"]["k"] for e in found.entries) == [1, 2]


async def test_integer_fields_beyond_an_exact_double_are_refused(
    connect: Callable[..., Any],
) -> None:
    """`limit`, `offset` and `max_depth` of 2^53 or a 400-digit integer are `invalid_message`
    naming the field."""
    c = await session(connect)
    for n in (2**53, 10**400):
        assert await bad(c.retrieve(limit=n)) == "limit"
        assert await bad(c.retrieve(offset=n)) == "offset"
        assert await bad(c.paths(max_depth=n)) == "max_depth"
        assert await bad(c.paths(limit=n)) == "limit"
    assert (await c.retrieve(limit=2**53 - 1)).entries == []


def test_patterns_outside_the_wire_match_whole_names_too() -> None:
    """A LangGraph filter key and a TOML bare key with a trailing newline are refused or
    quoted, as the wire's names are (a `$` let the newline through)."""
    from host.cli.reference import toml_value
    from host.langgraph.mapping import check_filter

    check_filter({"kind": 1})
    with pytest.raises(ValueError):
        check_filter({"kind\n": 1})
    assert toml_value({"k\n": 1}) == '{ "k\\n" = 1 }' and toml_value({"k": 1}) == "{ k = 1 }"
