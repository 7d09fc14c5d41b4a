"""The memory browser's Search page judges its hits as a client's retrieve does, on both
backends: a hit that supersedes an older entry names its key and ranks above it, and with
"collapse near-duplicates" a hit names the entries it stands for; the Live page names a
consolidation on write, what was done and what decided it."""

from __future__ import annotations

import html
import json
import re
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
from support.hosts import make_config, running_host
from uikit import UiClient, text

from host.app import Host
from host.client import MemoryClient
from protocol.codec import new_id, now
from protocol.messages import VERSION, MemoryStoreRequest

pytestmark = pytest.mark.all_backends

TEXTS = ["My climbing gym is Boulderhaus on Canal Street.",
         "The quarterly budget review is on Monday.", "The office printer is out of toner.",
         "I switched gyms: I now climb at Vertical World near the station.",
         "The user prefers concise answers with Python examples.",
         "The user prefers concise answers with examples in Python."]


@pytest.fixture
async def host(store_db: str) -> AsyncIterator[Host]:
    """A host (default embedder, authentication off) whose namespace "proj" holds the texts,
    keyed {"k": i} in the order written, their vectors written."""
    async with running_host(make_config(store_db)) as h:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{h.port}") as c:
            await c.init("proj", {"agent": "a1"})
            for i, t in enumerate(TEXTS):
                await c.store([{"key": {"k": i}, "content": t, "tier": "semantic"}])
        await h.search.drain()
        yield h


# a fact that ended in 2023, unrelated texts, its successor since then (not saying it
# changed), an ended fact with no successor (docs/protocol.md, "Time of a fact")
ENDED = [("Alice works at Acme.", None, "2023-01-01T00:00:00Z"),
         ("The office printer is out of toner.", None, None),
         ("Lunch on Friday is pizza.", None, None),
         ("Alice is a senior engineer at Globex.", "2023-01-01T00:00:00Z", None),
         ("Bob lived in a flat in Paris near the river.", None, "2023-01-01T00:00:00Z")]


@pytest.fixture
async def ended_host(store_db: str) -> AsyncIterator[Host]:
    """A host whose namespace "proj" holds the `ENDED` facts with their bounds, keyed
    {"k": i} in the order written, their vectors written."""
    async with running_host(make_config(store_db)) as h:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{h.port}") as c:
            await c.init("proj", {"agent": "a1"})
            for i, (t, start, end) in enumerate(ENDED):
                e = {"key": {"k": i}, "content": t, "tier": "semantic"}
                e.update({k: v for k, v in (("valid_from", start), ("valid_until", end)) if v})
                await c.store([e])
        await h.search.drain()
        yield h


async def hits(host: Host, **query: str) -> list[tuple[str, dict[str, str]]]:
    """The Search page's hits for `query`: each card's key and what its judgement says
    (`supersedes`, `stands for N`: the keys shown), in rank order."""
    assert host.ui is not None
    page = text(await UiClient(host.ui).get("/ui/search?" + urlencode({"ns": "proj", **query})))
    out = []
    for card in page.split('<article class="entry')[1:]:
        key = html.unescape(re.findall(r'<span class="key">([^<]*)</span>', card)[0])
        judged = {dt: " ".join(html.unescape(k) for k in re.findall(r"<code>([^<]*)</code>", dd))
                  for dt, dd in re.findall(r"<dt>([^<]*)</dt><dd>(.*?)</dd>",
                                           card.split('<dl class="judged">')[1])
                  } if '<dl class="judged">' in card else {}
        out.append((key, judged))
    return out


async def test_a_hit_names_what_it_supersedes_and_ranks_above_it(host: Host) -> None:
    """The update ranks first on the Search page and names the fact's key under
    "supersedes"; the fact is still listed below it."""
    got = await hits(host, q="Which climbing gym do I go to?")
    assert got[0] == ('{"k": 3}', {"supersedes": '{"k": 0}'}), got
    assert '{"k": 0}' in [k for k, _j in got[1:]]


async def test_the_fact_that_holds_ranks_above_the_one_that_ended(ended_host: Host) -> None:
    """The Search page reads the bounds at the time of the search, as a retrieve does: the
    current fact first, naming the ended one under "supersedes", which is still listed; an
    ended fact with no successor comes first for its question."""
    got = await hits(ended_host, q="Where does Alice work?")
    assert got[0] == ('{"k": 3}', {"supersedes": '{"k": 0}'}), got
    assert '{"k": 0}' in [k for k, _j in got[1:]]
    assert (await hits(ended_host, q="Where did Bob live?"))[0] == ('{"k": 4}', {})


async def test_collapse_near_duplicates_names_what_a_hit_stands_for(host: Host) -> None:
    """With "collapse near-duplicates" ticked, two sayings of one preference show as the
    newer, which names the older under "stands for 1"; unticked, both are listed."""
    q = "How should answers for this user look?"
    folded = [h for h in await hits(host, q=q, collapse="1") if h[0] in ('{"k": 4}', '{"k": 5}')]
    assert folded == [('{"k": 5}', {"stands for 1": '{"k": 4}'})], folded
    every = [k for k, j in await hits(host, q=q) if not j.get("stands for 1")]
    assert {'{"k": 4}', '{"k": 5}'} <= set(every)


async def test_live_names_a_consolidation_and_what_decided_it(host: Host) -> None:
    """A store that supersedes a near-duplicate shows on the Live page as a `consolidated`
    card naming the action, the new entry's key and the similarity."""
    assert host.ui is not None
    ui = UiClient(host.ui)
    after = json.loads(text(await ui.get("/ui/live.json?ns=proj&after=0")))["after"]
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await c.init("proj", {"agent": "a1"})
        reply = await c.request(MemoryStoreRequest(
            id=new_id(), version=VERSION, ts=now(), memory_id=c._mid(None),
            entries=[{"key": {"k": 9}, "content": "I switched gyms: now I climb at Vertical"
                      " World, near the station.", "tier": "semantic"}],
            consolidate="supersede"))
    [merge] = reply.consolidated
    cards = json.loads(text(await ui.get(f"/ui/live.json?ns=proj&after={after}")))["html"]
    card = cards.split('<article class="entry change op-consolidated">')[1]
    assert f"<dd>{merge['action']}</dd>" in card
    assert "<code>{&quot;k&quot;: 9}</code>" in card
    assert f"<dd>{merge['similarity']:.3f}</dd>" in card
