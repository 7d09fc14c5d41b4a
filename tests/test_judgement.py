"""Judgement of a query's reply over the wire, on both backends: an update ranks above the fact
it supersedes and says so, near-duplicates collapse into one entry when asked, similar but
different facts never merge, and the request can ask for the ranking alone."""

from __future__ import annotations

import json
from typing import Any

import pytest

from host.app import Host
from host.client import MemoryClient

pytestmark = pytest.mark.all_backends

# unrelated turns between the facts, as a conversation has them
CHATTER = [
    "The quarterly budget review is scheduled for Monday morning.",
    "The office printer on the third floor is out of toner again.",
    "Lunch on Friday is pizza from the place around the corner.",
    "The staging server runs Debian and PostgreSQL 16.",
    "We watched a documentary about octopuses last night.",
    "The train was twenty minutes late this morning.",
]
# (the fact, its update said later, the question both answer)
UPDATES = [
    ("My bike is a red Peugeot road bike.",
     "I sold the Peugeot and now ride a green Brompton folding bike.", "What bike do I ride?"),
    ("I do yoga at the studio on Baker Street.",
     "I switched from the Baker Street studio to a pilates class at the community centre.",
     "Where do I exercise?"),
    ("My team lead is Ingrid Solberg.",
     "Ingrid moved to another department, so my team lead is now Rafael Costa.",
     "Who is my team lead?"),
    ("I'm learning to play the ukulele.",
     "I stopped the ukulele and I'm learning the banjo instead.",
     "Which instrument am I learning?"),
]


def turns(texts: list[str], first: int = 0) -> list[dict[str, Any]]:
    """Episodic entries keyed by their turn number, as an agent stores what it is told."""
    return [{"key": {"turn": first + i}, "content": t, "tier": "episodic"}
            for i, t in enumerate(texts)]


def turn(e: dict[str, Any]) -> int:
    return int(e["key"]["turn"])


async def stored(client: MemoryClient, host: Host, texts: list[str]) -> None:
    await client.store(turns(texts))
    await host.search.drain()


async def test_an_update_outranks_the_fact_it_supersedes(client: MemoryClient, host: Host
                                                         ) -> None:
    """Of a fact and its later update (which says it changed), the update ranks first and
    names the fact's key in `supersedes`; the fact stays in the reply, below it; asked
    with `"supersede": false`, no entry says it supersedes anything."""
    texts = [old for old, _new, _q in UPDATES] + CHATTER + [new for _o, new, _q in UPDATES]
    await stored(client, host, texts)
    n = len(UPDATES)
    for i, (_old, _new, question) in enumerate(UPDATES):
        old, new = i, n + len(CHATTER) + i
        got = (await client.retrieve(query=question, limit=10)).entries
        order = [turn(e) for e in got]
        assert order[0] == new, (question, order)
        assert got[0]["supersedes"] == [{"turn": old}]
        assert old in order[1:]
        plain = (await client.retrieve(query=question, limit=10, supersede=False)).entries
        assert not any("supersedes" in e for e in plain)
        assert sorted(turn(e) for e in plain) == sorted(order)


async def test_similar_but_different_facts_never_merge(client: MemoryClient, host: Host
                                                      ) -> None:
    """Facts that differ in what they are about (a daughter and a partner, peanuts and
    penicillin, two projects' deadlines) neither collapse into one another nor supersede one
    another, and each keeps its rank, while the same fact said again does collapse."""
    pairs = [("My daughter Mia starts school in September.",
              "My partner Sam starts a new job in September."),
             ("I'm allergic to peanuts.", "I'm allergic to penicillin."),
             ("The Orion project deadline is 4 May.", "The Vega project deadline is 19 June."),
             ("The kitchen light needs a new bulb.", "The bathroom light needs a new bulb.")]
    again = "I'm allergic to peanuts, I said."
    texts = [a for a, _b in pairs] + CHATTER + [b for _a, b in pairs] + [again]
    await stored(client, host, texts)
    second = len(pairs) + len(CHATTER)
    for i, (a, b) in enumerate(pairs):
        members = {i: a, second + i: b}
        for asked, text in members.items():
            got = (await client.retrieve(query=text, limit=10, collapse=True)).entries
            plain = (await client.retrieve(query=text, limit=10, supersede=False)).entries
            for e in got:  # no entry stands for, or supersedes, both members of the pair
                said = {turn(e)} | {k["turn"] for k in e.get("supersedes", [])
                                    + e.get("collapsed", {}).get("keys", [])}
                assert not set(members) <= said, (text, e)
            # asked by its own words, the fact comes first (or the fact said again for it)
            assert turn(plain[0]) == asked
            assert asked in {turn(got[0])} | {
                k["turn"] for k in got[0].get("collapsed", {}).get("keys", [])}
    got = (await client.retrieve(query="Which food am I allergic to?", limit=10,
                                 collapse=True)).entries
    said = [e for e in got if turn(e) == len(texts) - 1]
    assert said and said[0]["collapsed"] == {"count": 1, "keys": [{"turn": 1}]}
    assert 1 not in [turn(e) for e in got] and second + 1 in [turn(e) for e in got]


async def test_a_collapsed_reply_names_what_it_collapsed(client: MemoryClient, host: Host
                                                        ) -> None:
    """With `"collapse": true`, three sayings of one fact come back as the newest of them,
    carrying the count and keys of the other two, and `total` counts it once; the same query
    without it (the default) returns every entry, none carrying `collapsed`."""
    sayings = ["My dog's name is Biscuit.", "My dog is named Biscuit.",
               "The name of my dog is Biscuit."]
    texts = [sayings[0]] + CHATTER[:3] + [sayings[1]] + CHATTER[3:] + [sayings[2]]
    await stored(client, host, texts)
    ids = [0, 4, len(texts) - 1]
    reply = await client.retrieve(query="What is my dog called?", limit=10, collapse=True)
    dogs = [e for e in reply.entries if turn(e) in ids]
    assert [turn(e) for e in dogs] == [ids[2]]
    assert dogs[0]["collapsed"]["count"] == 2
    assert sorted(k["turn"] for k in dogs[0]["collapsed"]["keys"]) == ids[:2]
    every = await client.retrieve(query="What is my dog called?", limit=10)
    assert sorted(turn(e) for e in every.entries if turn(e) in ids) == ids
    assert not any("collapsed" in e for e in every.entries)
    assert reply.total == every.total - 2
    assert json.loads(json.dumps(reply.entries))  # plain JSON


async def test_an_old_fact_that_alone_answers_keeps_its_place(client: MemoryClient, host: Host
                                                             ) -> None:
    """Newer entries that say something changed about other things leave an old fact that alone
    answers the question where its relevance put it: first, carrying nothing, the reply the
    same with and without judgement."""
    texts = ["My blood type is O negative.", *CHATTER,
             "I switched my phone plan to a cheaper one now.",
             "We moved the book club to the library instead."]
    await stored(client, host, texts)
    got = (await client.retrieve(query="What is my blood type?", limit=10)).entries
    plain = (await client.retrieve(query="What is my blood type?", limit=10,
                                   supersede=False)).entries
    assert turn(got[0]) == 0
    assert [turn(e) for e in got] == [turn(e) for e in plain]
    assert not any("supersedes" in e for e in got)
