"""The time of a fact over the wire, on both backends: an entry's `valid_from` / `valid_until`
and a retrieve's `as_of` keep what was current then (by keys, tags, a query and a vector
search), bad instants are refused with nothing stored, replies without them are as before, and
without `as_of` nothing is filtered by validity."""

from __future__ import annotations

from typing import Any

import pytest

from host.app import Host
from host.client import MemoryClient, RemoteError

pytestmark = pytest.mark.all_backends

JAN = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MAR = 1_772_323_200.0  # 2026-03-01T00:00:00Z
JUN = 1_780_272_000.0  # 2026-06-01T00:00:00Z
HOME = {"fact": "home"}


def keys_of(entries: list[dict[str, Any]]) -> list[Any]:
    return [e["key"] for e in entries]


async def homes(client: MemoryClient, host: Host) -> None:
    """Where the user lived: Boston until March (ISO text, with an offset), Denver from March
    (epoch seconds), and a fact with no time."""
    reply = await client.store([
        {"key": {"fact": "home", "v": 1}, "content": "I live in Boston, near the harbour.",
         "tier": "semantic", "tags": ["home"], "valid_until": "2026-03-01T01:00:00+01:00"},
        {"key": {"fact": "home", "v": 2}, "content": "I live in Denver, near City Park.",
         "tier": "semantic", "tags": ["home"], "valid_from": MAR},
        {"key": {"fact": "pet"}, "content": "My dog is called Biscuit.", "tier": "semantic",
         "tags": ["home"]},
    ])
    assert not reply.errors and len(reply.stored) == 3
    await host.search.drain()


async def test_as_of_keeps_the_entries_valid_then(client: MemoryClient, host: Host) -> None:
    """Read by tag: before, inside and after the change of home, `as_of` keeps the entry
    valid then and the fact with no time; the bound is half-open (valid_until excluded)."""
    await homes(client, host)
    boston, denver, pet = {"fact": "home", "v": 1}, {"fact": "home", "v": 2}, {"fact": "pet"}
    for as_of, want in [(JAN, [boston, pet]), ("2026-02-15T12:00:00Z", [boston, pet]),
                        (MAR, [denver, pet]), (MAR - 0.001, [boston, pet]),
                        (JUN, [denver, pet])]:
        reply = await client.retrieve(tags=["home"], as_of=as_of)
        assert sorted(keys_of(reply.entries), key=str) == sorted(want, key=str), as_of
        assert reply.total == 2
    # by keys too, and the working tier alike
    reply = await client.retrieve(keys=[boston, denver], as_of=JAN)
    assert keys_of(reply.entries) == [boston]
    await client.store([{"key": {"w": 1}, "content": "Draft in Boston.", "tier": "working",
                         "valid_until": MAR}])
    assert keys_of((await client.retrieve(keys=[{"w": 1}], as_of=JUN)).entries) == []
    assert keys_of((await client.retrieve(keys=[{"w": 1}], as_of=JAN)).entries) == [{"w": 1}]


async def test_without_as_of_nothing_is_filtered_and_replies_echo_the_window(
        client: MemoryClient, host: Host) -> None:
    """Without `as_of` every entry is returned, a window long past too (a statement about the
    world, not a TTL); entries echo their bounds as epoch seconds, only the ones they have,
    and an entry without any replies with neither field."""
    await homes(client, host)
    got = {e["key"].get("v", 0): e for e in (await client.retrieve(tags=["home"])).entries}
    assert len(got) == 3
    assert got[1]["valid_until"] == MAR and "valid_from" not in got[1]
    assert got[2]["valid_from"] == MAR and "valid_until" not in got[2]
    assert "valid_from" not in got[0] and "valid_until" not in got[0]
    # a put without the fields replaces them: the entry holds at any time again
    await client.store([{"key": {"fact": "home", "v": 1}, "content": "I live in Boston.",
                         "tier": "semantic", "tags": ["home"]}])
    again = (await client.retrieve(keys=[{"fact": "home", "v": 1}], as_of=JUN)).entries
    assert len(again) == 1 and "valid_until" not in again[0]


async def test_a_query_with_as_of_answers_with_what_was_current(client: MemoryClient,
                                                                host: Host) -> None:
    """A similarity query: without `as_of` both homes answer "Where do I live?"; with it, the
    home of that time alone, the other neither returned nor counted."""
    await homes(client, host)
    both = await client.retrieve(query="Where do I live?", limit=10)
    assert {"fact": "home", "v": 1} in keys_of(both.entries)
    assert {"fact": "home", "v": 2} in keys_of(both.entries)
    for as_of, want, gone in [(JAN, 1, 2), (JUN, 2, 1)]:
        reply = await client.retrieve(query="Where do I live?", limit=10, as_of=as_of)
        found = keys_of(reply.entries)
        assert found[0] == {"fact": "home", "v": want}, found
        assert {"fact": "home", "v": gone} not in found
        assert reply.total == len(found)
    # ... and a search by a client's vector alike
    await client.store([
        {"key": {"vec": 1}, "content": "old", "tier": "semantic", "vectors": [[1.0, 0.0]],
         "valid_until": MAR},
        {"key": {"vec": 2}, "content": "new", "tier": "semantic", "vectors": [[0.9, 0.1]],
         "valid_from": MAR}])
    reply = await client.retrieve(vector=[1.0, 0.0], as_of=JAN)
    assert keys_of(reply.entries) == [{"vec": 1}] and reply.total == 1
    reply = await client.retrieve(vector=[1.0, 0.0], as_of=JUN)
    assert keys_of(reply.entries) == [{"vec": 2}] and reply.total == 1


@pytest.mark.parametrize("fields", [
    {"valid_from": "2026-03-01T00:00:00"},  # no zone: no instant
    {"valid_until": "2026-03-01"},
    {"valid_from": "next tuesday"},
    {"valid_from": "2026-03-01T00:00:00Z" + " " * 80},  # over the text bound
    {"valid_from": MAR, "valid_until": MAR},  # an empty window
    {"valid_from": JUN, "valid_until": "2026-03-01T00:00:00Z"},
    {"valid_until": 1e15},  # past the year 9999
    {"valid_from": True},
])
async def test_a_bad_window_is_refused_and_nothing_stored(client: MemoryClient,
                                                          fields: dict[str, Any]) -> None:
    """Each malformed window is the entry's `invalid_message` error; it is not stored, and
    the good entry beside it is."""
    reply = await client.store([{"key": HOME, "content": "x", "tier": "semantic", **fields},
                                {"key": {"ok": 1}, "content": "y", "tier": "semantic"}])
    assert reply.stored == [{"ok": 1}]
    assert len(reply.errors) == 1 and reply.errors[0].startswith("entries[0]: invalid_message")
    assert (await client.retrieve(keys=[HOME])).entries == []


@pytest.mark.parametrize("as_of", ["2026-03-01T00:00:00", "soon", "x" * 65, -1e13])
async def test_a_bad_as_of_is_refused(client: MemoryClient, as_of: Any) -> None:
    """A malformed `as_of` is `invalid_message` naming the field."""
    with pytest.raises(RemoteError) as err:
        await client.retrieve(query="home", as_of=as_of)
    assert err.value.code == "invalid_message"
    assert err.value.detail.get("field") in ("as_of", "$.as_of")
