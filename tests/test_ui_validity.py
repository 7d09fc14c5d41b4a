"""The memory browser and the time of a fact (docs/ui.md, docs/protocol.md "Time of a fact"),
over real HTTP to a real host, on both backends: an entry's card shows its bounds as UTC
instants and marks a fact that no longer holds or does not hold yet; Search's `as of` answers
what a wire retrieve with `as_of` answers; the Entries list's `as of` keeps what a wire read
with `as_of` keeps; a bad `as of` is a clear message, escaped, and reads nothing; the Live
page's cards and the export carry the bounds."""

from __future__ import annotations

import asyncio
import html
import http.client
import json
import re
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
from support.hosts import make_config, running_host

from host.app import Host
from host.cli.transfer import decode_line
from host.client import MemoryClient

pytestmark = pytest.mark.all_backends

MARCH = 1772323200  # 2026-03-01T00:00:00Z: Boston until then, Denver from then
FUTURE = 4102444800  # 2100-01-01T00:00:00Z
SUMMER = (1780272000, 1788220800)  # 2026-06-01T00:00:00Z to 2026-09-01T00:00:00Z
# (key, content, tier, bounds as the store request gives them), written in this order
FACTS = [
    ({"fact": "home", "v": 1}, "I live in Boston.", "semantic",
     {"valid_until": "2026-03-01T00:00:00Z"}),
    ({"fact": "home", "v": 2}, "I live in Denver.", "semantic", {"valid_from": MARCH}),
    ({"fact": "home", "v": 3}, "I will live in Lisbon.", "episodic",
     {"valid_from": "2100-01-01T00:00:00Z"}),
    ({"fact": "pet"}, "I live with a cat.", "semantic", {}),
    ({"fact": "trip"}, "I live in a tent in Oslo for the summer.", "episodic",
     {"valid_from": SUMMER[0], "valid_until": "2026-09-01T02:00:00+02:00"}),
]
BOSTON, DENVER, LISBON, PET, TRIP = (json.dumps(k, separators=(", ", ": ")) for k, *_ in FACTS)


@pytest.fixture
async def host(store_db: str) -> AsyncIterator[Host]:
    """A host (no embedder, authentication off, Entries pages of 2) whose namespace "proj"
    holds FACTS, written by agent a1."""
    config = make_config(store_db, search={"embedder": "none"}, ui={"page_size": 2})
    async with running_host(config) as h:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{h.port}") as c:
            await c.init("proj", {"agent": "a1"})
            for key, content, tier, bounds in FACTS:
                reply = await c.store([{"key": key, "content": content, "tier": tier, **bounds}])
                assert not reply.errors, reply.errors
        yield h


class Browser:
    """A browser over real HTTP: GETs and form POSTs to the host's port, cookies kept."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.cookies: dict[str, str] = {}

    def _call(self, method: str, target: str, body: bytes, headers: dict[str, str]
              ) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            hdrs = {"Host": f"127.0.0.1:{self.port}", **headers}
            if self.cookies:
                hdrs["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
            conn.request(method, target, body=body or None, headers=hdrs)
            r = conn.getresponse()
            for name, value in r.getheaders():
                if name.lower() == "set-cookie":
                    k, _, rest = value.partition("=")
                    self.cookies[k] = rest.split(";", 1)[0]
            return r.status, r.read()
        finally:
            conn.close()

    async def get(self, path: str, **params: str | int) -> tuple[int, str]:
        """GET `path` with `params` as its query: (status, page)."""
        target = f"{path}?{urlencode(params)}" if params else path
        status, body = await asyncio.to_thread(self._call, "GET", target, b"", {})
        return status, body.decode()

    async def post(self, path: str, form: dict[str, str]) -> tuple[int, bytes]:
        """POST `form` as the page's form does (its Origin)."""
        return await asyncio.to_thread(self._call, "POST", path, urlencode(form).encode(), {
            "Content-Type": "application/x-www-form-urlencoded",
            "Origin": f"http://127.0.0.1:{self.port}"})


def cards(page: str) -> dict[str, str]:
    """The entry cards of a page by key (the key's text as the card shows it)."""
    out = {}
    for card in page.split('<article class="entry')[1:]:
        key = html.unescape(re.findall(r'<span class="key">([^<]*)</span>', card)[0])
        out[key] = card
    return out


def ranked_keys(page: str) -> list[str]:
    """The keys of a Search page's hits, in rank order."""
    return list(cards(page.split('id="hits"', 1)[1])) if 'id="hits"' in page else []


def fact(card: str, name: str) -> str:
    """The value of the fact `name` of a card ("" when it has none)."""
    m = re.search(rf"<dt>{re.escape(name)}</dt><dd>(.*?)</dd>", card)
    return m.group(1) if m else ""


def wire_key(entry: dict[str, object]) -> str:
    """A reply entry's key as a card shows it."""
    return json.dumps(entry["key"], separators=(", ", ": "))


async def test_a_card_shows_the_bounds_and_marks_a_fact_not_holding_now(host: Host) -> None:
    """Each card shows the bounds it has as UTC instants (an offset given at store time is
    read as UTC), how far each is from now, and a mark when the fact no longer holds (Boston)
    or does not hold yet (Lisbon); a card without bounds shows none and no mark."""
    b = Browser(host.port)
    seen: dict[str, str] = {}
    for page in (1, 2, 3):
        status, body = await b.get("/ui/entries", ns="proj", page=page)
        assert status == 200
        seen |= cards(body)
    assert set(seen) == {BOSTON, DENVER, LISBON, PET, TRIP}
    boston = seen[BOSTON]
    assert '<time datetime="2026-03-01T00:00:00Z"' in fact(boston, "valid until")
    assert "2026-03-01 00:00:00 UTC" in fact(boston, "valid until")
    assert "ended" in fact(boston, "valid until") and not fact(boston, "valid from")
    assert 'class="validity ended"' in boston and "no longer valid" in boston
    denver = seen[DENVER]
    assert "2026-03-01 00:00:00 UTC" in fact(denver, "valid from") and "ago" in fact(
        denver, "valid from")
    assert not fact(denver, "valid until") and 'class="validity' not in denver
    lisbon = seen[LISBON]
    assert "2100-01-01 00:00:00 UTC" in fact(lisbon, "valid from")
    assert 'class="validity pending"' in lisbon and "not valid yet" in lisbon
    trip = seen[TRIP]  # "2026-09-01T02:00:00+02:00" is midnight UTC
    assert "2026-06-01 00:00:00 UTC" in fact(trip, "valid from")
    assert "2026-09-01 00:00:00 UTC" in fact(trip, "valid until")
    assert "no longer valid" in trip
    pet = seen[PET]
    assert not fact(pet, "valid from") and not fact(pet, "valid until")
    assert 'class="validity' not in pet


# as_of as the Search form takes it -> as the wire takes it; with the keys valid then
AS_OF = [
    ("2026-01-15T12:00:00+01:00", "2026-01-15T12:00:00+01:00", {BOSTON, PET}),
    (str(MARCH), MARCH, {DENVER, PET}),  # valid_from included, valid_until excluded
    (" 2026-07-01T00:00:00Z ", "2026-07-01T00:00:00Z", {DENVER, PET, TRIP}),
    ("4102444800.5", 4102444800.5, {DENVER, PET, LISBON}),
    ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z", {BOSTON, PET}),
]


async def test_search_as_of_answers_what_a_retrieve_with_as_of_answers(host: Host) -> None:
    """For each `as of` (ISO-8601 with a zone or an offset, epoch seconds, the earliest
    instant), Search of agent a1 lists the keys, in the order, of a1's wire retrieve with that
    `as_of`: the entries valid then; without `as of`, every entry."""
    b = Browser(host.port)
    q = "Where do I live?"
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await c.init("proj", {"agent": "a1"})
        for typed, wire, valid in AS_OF:
            reply = await c.retrieve(query=q, as_of=wire)
            status, page = await b.get("/ui/search", ns="proj", q=q, agent="a1", as_of=typed)
            assert status == 200
            assert {wire_key(e) for e in reply.entries} == valid, typed
            assert ranked_keys(page) == [wire_key(e) for e in reply.entries], typed
            assert 'id="as-of"' in page  # says which instant it kept
            assert f'value="{html.escape(typed.strip())}"' in page  # the form keeps it
        every = [wire_key(e) for e in (await c.retrieve(query=q)).entries]
    _, page = await b.get("/ui/search", ns="proj", q=q, agent="a1")
    assert sorted(ranked_keys(page)) == sorted(every) == sorted(
        [BOSTON, DENVER, LISBON, PET, TRIP])
    assert 'id="as-of"' not in page
    # every agent's entries (no agent named) at March: the same two
    _, page = await b.get("/ui/search", ns="proj", q=q, as_of="2026-03-01T00:00:00Z")
    assert set(ranked_keys(page)) == {DENVER, PET}


async def test_the_entries_list_as_of_keeps_what_a_read_with_as_of_keeps(host: Host) -> None:
    """The Entries list with `as of` lists the entries a wire read with that `as_of` finds
    (every page of it: the pager keeps `as of`), and counts them."""
    b = Browser(host.port)
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await c.init("proj", {"agent": "a1"})
        for typed, wire, valid in AS_OF:
            found = {wire_key(e) for e in (await c.retrieve(as_of=wire, limit=100)).entries}
            assert found == valid, typed
            seen: dict[str, str] = {}
            target: str | None = "/ui/entries?" + urlencode({"ns": "proj", "as_of": typed})
            while target is not None:
                status, page = await b.get(target)
                assert status == 200 and 'id="as-of"' in page
                assert f"of {len(valid)}</span>" in page  # "1–2 of 3"
                seen |= cards(page)
                older = re.search(r'<a href="([^"]*)">older →</a>', page)
                target = html.unescape(older.group(1)) if older else None
                assert target is None or "as_of=" in target
            assert set(seen) == valid, typed


BAD = ["2026-03-01", "2026-03-01T09:00:00", "yesterday", "nan", "inf", "1e9", "١٢٣",
       "-62135596801", "253402300800", "9999-12-31T23:59:59-01:00", "9" * 65,
       '"><script>alert(1)</script>', "2026-03-01T00:00:00Z<b>x</b>"]


async def test_a_bad_as_of_is_a_clear_message_escaped_and_reads_nothing(host: Host) -> None:
    """A malformed `as of` (no zone, no instant, a number that is not plain digits, out of
    the years 1 to 9999, too long, markup) answers the form with the rule's message and what
    an instant is (Search as for its other fields, the Entries list 400 as for its other
    filters), lists no entry, and never echoes the text unescaped."""
    b = Browser(host.port)
    for bad in BAD:
        for path, extra, code in (("/ui/search", {"q": "Where do I live?"}, 200),
                                  ("/ui/entries", {}, 400)):
            status, page = await b.get(path, ns="proj", as_of=bad, **extra)
            assert status == code, (path, bad)
            alert = re.search(r'<p class="error" role="alert">(.*?)</p>', page)
            assert alert is not None, (path, bad)
            assert html.unescape(alert.group(1)).startswith("as_of: ")
            assert "ISO-8601" in alert.group(1) and "nothing was read" in alert.group(1)
            assert not cards(page), (path, bad)
            assert "<script>alert" not in page and "<b>x</b>" not in page
    status, page = await b.get("/ui/search", ns="proj", q="x", as_of="2026-03-01")
    assert "needs a zone" in page


async def test_live_and_export_carry_the_bounds(host: Host) -> None:
    """The Live page's cards (the latest writes and the change log's) show an entry's bounds,
    and the export keeps them, as `a2e-host export` does, for `a2e-host import`."""
    b = Browser(host.port)
    _, page = await b.get("/ui/live", ns="proj")
    assert "2026-03-01 00:00:00 UTC" in fact(cards(page)[BOSTON], "valid until")
    _, log = await b.get("/ui/live.json", ns="proj", after=0)
    changes = cards(json.loads(log)["html"])
    assert "2100-01-01 00:00:00 UTC" in fact(changes[LISBON], "valid from")
    assert "not valid yet" in changes[LISBON] and "no longer valid" in changes[BOSTON]
    assert not fact(changes[PET], "valid from")
    status, page = await b.get("/ui/export", ns="proj")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)  # type: ignore[union-attr]
    status, body = await b.post("/ui/export", {"ns": "proj", "csrf": csrf})
    assert status == 200
    read = {json.dumps(json.loads(bytes(e.key)), separators=(", ", ": ")): e
            for e in map(decode_line, body.splitlines())}
    assert read[BOSTON].valid_until == MARCH and read[DENVER].valid_from == MARCH
    assert (read[TRIP].valid_from, read[TRIP].valid_until) == SUMMER
    assert "valid_from" not in json.loads(next(x for x in body.splitlines() if b'"pet"' in x))


def judged(page: str) -> list[tuple[str, str]]:
    """A Search page's hits in rank order: each key and the keys it supersedes ("" none)."""
    out = []
    for key, card in cards(page.split('id="hits"', 1)[1]).items():
        sup = re.search(r"<dt>supersedes</dt><dd>(.*?)</dd>", card)
        out.append((key, " ".join(html.unescape(k) for k in re.findall(
            r"<code>([^<]*)</code>", sup.group(1))) if sup else ""))
    return out


async def test_search_judges_at_its_as_of_as_a_retrieve_does(store_db: str) -> None:
    """With an embedder, Search judges its hits as a retrieve's reply, at the read's instant:
    `as_of` when given, else now. Now, Boston's fact has ended and Denver's (no bounds) holds,
    so Denver supersedes Boston; as of January both hold and nothing supersedes, on the wire
    as on the page."""
    q = "Where do I live?"
    async with running_host(make_config(store_db)) as h:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{h.port}") as c:
            await c.init("proj", {"agent": "a1"})
            await c.store([
                {"key": {"fact": "home", "v": 1}, "content": "I live in Boston.",
                 "tier": "semantic", "valid_until": MARCH},
                {"key": {"fact": "home", "v": 2}, "content": "I live in Denver.",
                 "tier": "semantic"}])
            await h.search.drain()
            b = Browser(h.port)
            for as_of in ("", "2026-01-15T00:00:00Z"):
                extra = {"as_of": as_of} if as_of else {}
                reply = await c.retrieve(query=q, supersede=True, **extra)
                wire = [(wire_key(e), " ".join(json.dumps(k, separators=(", ", ": "))
                                               for k in e.get("supersedes", [])))
                        for e in reply.entries]
                _, page = await b.get("/ui/search", ns="proj", q=q, agent="a1", **extra)
                assert judged(page) == wire, (as_of, wire)
                if as_of:
                    assert all(not sup for _, sup in wire)
                else:
                    assert wire[0] == (DENVER, BOSTON)
