"""The memory browser's app (host/ui) over a real host: sign-in, access rules, CSRF, pages,
actions. Requests go straight to the sans-I/O `UiApp`; entries are written and read back over
real WebSocket connections, on a real SQLite file."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from authkit import connect as auth_connect
from authkit import issue, running
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hosts import make_config, running_host
from uikit import UiClient, text

from host.app import Host
from host.cli.transfer import decode_line
from host.client import MemoryClient
from host.ui import Request, UiApp
from host.ui.app import EXPORT_PAGE, SEARCH_AGENTS
from host.ui.health import p99_of

SECRET = "the-launch-code-is-7429"


@pytest.fixture
async def filled_host(tmp_path: Path) -> AsyncIterator[Host]:
    """A host (authentication off, no embedder) with the entries of `_fill` in "proj"."""
    config = make_config(tmp_path / "a2e.db", search={"embedder": "none"})
    async with running_host(config) as host:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await _fill(c, "proj")
        yield host


def _app(host: Host) -> UiApp:
    assert host.ui is not None
    return host.ui


async def _admin_host(tmp_path: Path, namespaces: tuple[str, ...] = ("*",)):  # type: ignore[no-untyped-def]
    admin, admin_spec = issue("ops", namespaces, ["admin"])
    agent, agent_spec = issue("a1", ("*",), ["read_semantic", "write_semantic", "forget"])
    return admin, agent, running(tmp_path / "a2e.db", [admin_spec, agent_spec])


async def _fill(c: MemoryClient, ns: str) -> None:
    await c.init(ns, {"agent": "a1"})
    await c.store([
        {"key": {"k": "old"}, "content": {"note": "first written"}, "tier": "episodic",
         "tags": ["t1"]},
        {"key": {"k": "shared"}, "content": "a semantic fact about tomatoes", "tier": "semantic",
         "tags": ["t1", "t2"], "score": 0.4},
        {"key": {"k": "new"}, "content": {"note": SECRET}, "tier": "episodic", "ttl": 3600},
    ])


async def test_pages_need_a_signed_in_admin_token(tmp_path: Path) -> None:
    """Without the sign-in cookie every page redirects to the sign-in form, which posts one
    field named `token`; JSON and actions are refused 401."""
    admin, _, ctx = await _admin_host(tmp_path)
    async with ctx as host:
        ui = UiClient(_app(host))
        r = await ui.get("/ui/namespaces")
        assert r.status == 303 and r.header("Location") == "/ui/signin"
        assert (await ui.get("/ui/live.json?ns=x")).status == 401
        form = text(await ui.get("/ui/signin"))
        assert '<form method="post" action="/ui/signin">' in form
        assert form.count("<input") == 2  # the CSRF field and `token`
        assert 'name="token" type="password"' in form
        assert (await ui.post("/ui/forget", {"ns": "x", "id": "1"})).status == 401


async def test_admin_token_signs_in_into_an_httponly_strict_cookie(tmp_path: Path) -> None:
    """An admin token signs in: it comes back only in an HttpOnly SameSite=Strict cookie
    (never in the redirect's URL), and the pages then answer."""
    admin, _, ctx = await _admin_host(tmp_path)
    async with ctx as host:
        ui = UiClient(_app(host))
        r = await ui.sign_in(admin)
        assert r.status == 303 and admin not in (r.header("Location") or "")
        cookie = next(v for n, v in r.headers if n == "Set-Cookie" and "a2e_ui_token" in v)
        assert f"a2e_ui_token={admin};" in cookie
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
        page = await ui.get("/ui/namespaces")
        assert page.status == 200 and "agent ops" in text(page)
        assert admin not in text(page)
        out = await ui.post("/ui/signout", {})
        assert out.status == 303 and "a2e_ui_token" not in ui.cookies
        assert (await ui.get("/ui/namespaces")).status == 303


async def test_wrong_and_non_admin_tokens_are_refused(tmp_path: Path) -> None:
    """An unknown token is refused 401 and a valid token without `admin` 403, from loopback
    too; neither sets the sign-in cookie."""
    _, agent, ctx = await _admin_host(tmp_path)
    async with ctx as host:
        ui = UiClient(_app(host))
        bad = await ui.sign_in("a2e_not-a-real-token")
        assert bad.status == 401 and "not valid" in text(bad)
        weak = await ui.sign_in(agent)
        assert weak.status == 403 and "no admin right" in text(weak)
        assert "a2e_ui_token" not in ui.cookies
        assert (await ui.get("/ui/namespaces")).status == 303


async def test_posts_without_the_csrf_token_or_from_another_site_are_refused(
        tmp_path: Path) -> None:
    """A POST without the page's CSRF token, with another binding cookie, or whose Origin
    is another site is refused 403 and deletes nothing."""
    admin, agent, ctx = await _admin_host(tmp_path)
    async with ctx as host:
        c = await auth_connect(host, agent)
        await _fill(c, "ns")
        ui = UiClient(_app(host))
        await ui.sign_in(admin)
        page = text(await ui.get("/ui/entries?ns=ns"))
        ident = page.split('id="e', 1)[1].split('"', 1)[0]
        form = {"ns": "ns", "id": ident}
        assert (await ui.post("/ui/forget", form, csrf=False)).status == 403
        assert (await ui.post("/ui/forget", {**form, "csrf": "0" * 64}, csrf=False)).status == 403
        assert (await ui.post("/ui/forget", form, Origin="http://evil.example")).status == 403
        assert (await ui.post("/ui/forget", form, **{"Sec-Fetch-Site": "cross-site"})).status == 403
        assert (await ui.post("/ui/forget", form, Origin="null")).status == 403
        other = UiClient(_app(host))
        await other.sign_in(admin)
        other.csrf = ui.csrf  # a token of another browser's binding cookie
        assert (await other.post("/ui/forget", form)).status == 403
        assert (await c.retrieve(tier="")).total == 3
        await c.close()


async def test_without_authentication_only_loopback_clients_are_served(host: Host) -> None:
    """With authentication off the pages answer loopback peers under a loopback Host name;
    another peer address, or a foreign Host name (DNS rebinding), is refused 403."""
    app = _app(host)
    assert (await UiClient(app).get("/ui/namespaces")).status == 200
    assert (await UiClient(app, host="localhost:1234").get("/ui/namespaces")).status == 200
    assert (await UiClient(app, remote="::1", host="[::1]:80").get("/ui/namespaces")).status == 200
    assert (await UiClient(app, remote="10.1.2.3").get("/ui/namespaces")).status == 403
    assert (await UiClient(app, host="attacker.example").get("/ui/namespaces")).status == 403
    assert (await UiClient(app).get("/ui/signin")).status == 303


async def test_a_token_sees_only_the_namespaces_it_names(tmp_path: Path) -> None:
    """An admin token for namespace "a" lists "a" and not "b", and pages of "b" are 404."""
    admin, agent, ctx = await _admin_host(tmp_path, ("a",))
    async with ctx as host:
        c = await auth_connect(host, agent)
        await _fill(c, "a")
        await _fill(c, "b")
        ui = UiClient(_app(host))
        await ui.sign_in(admin)
        page = text(await ui.get("/ui/namespaces"))
        assert 'href="/ui/entries?ns=a"' in page and "ns=b" not in page
        for path in ("entries", "search", "live", "live.json", "export", "forget"):
            assert (await ui.get(f"/ui/{path}?ns=b&q=tomatoes&id=1")).status == 404, path
        assert (await ui.post("/ui/export", {"ns": "b"})).status == 404
        await c.close()


async def test_namespaces_page_counts_tiers_agents_and_backlog(host: Host) -> None:
    """The Namespaces page shows each namespace's entries by tier, its writers, bytes,
    quota use and working entries of open sessions."""
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await _fill(c, "proj")
        await c.store([{"key": {"w": 1}, "content": "scratch", "tier": "working"}])
        page = text(await UiClient(_app(host)).get("/ui/namespaces"))
        row = page.split('href="/ui/entries?ns=proj">proj</a>', 1)[1].split("</tr>", 1)[0]
        cells = [c.split(">", 1)[1] for c in row.split("</td>")[1:6]]
        assert cells == ["2", "1", "1", cells[3], cells[4]]  # episodic, semantic, working
        assert "B" in cells[3] and "%" in cells[4]
        assert "a1 (" in row


async def test_entries_page_lists_newest_first_with_every_field(host: Host) -> None:
    """Entries come newest first with key, pretty content, tags, score, TTL left, created,
    updated and the vector state; content is escaped."""
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await _fill(c, "proj")
        await c.store([{"key": {"k": "xss"}, "content": "<script>alert(1)</script>",
                        "tier": "episodic"}])
        page = text(await UiClient(_app(host)).get("/ui/entries?ns=proj"))
        order = [page.index(f"&quot;{k}&quot;") for k in ("xss", "new", "shared", "old")]
        assert order == sorted(order)
        assert "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
        assert "59m" in page and "left" in page and "never expires" in page
        for label in ("tags", "score", "TTL", "created", "updated", "vector"):
            assert f"<dt>{label}</dt>" in page
        assert "{\n  &quot;note&quot;: " in page  # pretty JSON, not the stored text
        assert "1–4 of 4" in page


async def test_the_browser_keeps_the_hosts_time(host: Host) -> None:
    """The browser lists what the wire would return at the host's clock: an entry past its TTL
    is gone from both (the `host` fixture's clock is moved on, not slept)."""
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await _fill(c, "proj")
        ui = UiClient(_app(host))
        assert "&quot;new&quot;" in text(await ui.get("/ui/entries?ns=proj"))
        host.clock.advance(3601)  # type: ignore[attr-defined]
        assert (await c.retrieve(keys=[{"k": "new"}])).total == 0
        page = text(await ui.get("/ui/entries?ns=proj"))
        assert "&quot;new&quot;" not in page and "1–2 of 2" in page


async def test_entries_filters_and_paging(tmp_path: Path) -> None:
    """Tier, agent, tags and key-text filters narrow the list; pages hold `ui.page_size`."""
    config = make_config(tmp_path / "a2e.db", ui={"page_size": 2}, search={"embedder": "none"})
    async with running_host(config) as host, \
            await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await _fill(c, "proj")
        await c.init("proj", {"agent": "a2"})
        await c.store([{"key": {"k": "by-a2"}, "content": 1, "tier": "episodic"}])
        ui = UiClient(_app(host))

        async def keys(query: str) -> list[str]:
            page = text(await ui.get(f"/ui/entries?ns=proj&{query}"))
            return [p.split("&quot;", 1)[0] for p in page.split('class="key">{&quot;k&quot;: &quot;')[1:]]

        assert await keys("tier=semantic") == ["shared"]
        assert await keys("agent=a2") == ["by-a2"]
        assert await keys("tags=t1") == ["shared", "old"]
        assert await keys("tags=t1,t2") == ["shared"]
        assert await keys("key=sha") == ["shared"]
        assert await keys("key=%25") == []  # LIKE wildcards are taken literally
        assert await keys("") == ["by-a2", "new"]
        assert await keys("page=2") == ["shared", "old"]
        assert "older →" in text(await ui.get("/ui/entries?ns=proj"))
        assert (await ui.get("/ui/entries?ns=proj&tier=working")).status == 400


async def test_search_ranks_as_retrieve_and_shows_score_parts(host: Host) -> None:
    """Search runs the retrieve a client would: the same entry first, with relevance,
    combined and the keyword, vector, importance and recency parts."""
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await _fill(c, "proj")
        await host.search.drain()
        wire = await c.retrieve(query="tomatoes", tier="")
        page = text(await UiClient(_app(host)).get("/ui/search?ns=proj&q=tomatoes&agent=a1"))
        first = page.split('<span class="rank">#1</span>', 1)[1].split("</article>", 1)[0]
        assert wire.entries[0]["key"] == {"k": "shared"}
        assert "&quot;shared&quot;" in first
        for part in ("combined", "relevance", "fused", "keyword", "vector", "importance", "recency"):
            assert f'data-part="{part}"' in first
        shown = first.split('data-part="combined"', 1)[1].split("<strong>", 1)[1].split("<", 1)[0]
        assert abs(float(shown) - wire.entries[0]["combined"]) < 2e-3
        assert "BM25 " in first and "cosine " in first and "cosine —" not in first
        assert (await UiClient(_app(host)).get("/ui/search?ns=proj&q=x&limit=abc")).status == 200


async def test_search_of_a_paraphrase_shows_the_wire_hits_and_relevance(host: Host) -> None:
    """A question sharing no word with a fact: the browser's Search lists the hits a retrieve
    returns, in its order, each with the relevance and combined score the wire reports."""
    facts = ["Maria adopted a beagle named Toby last week.",
             "The quarterly budget review is on Monday.", "The office printer is out of toner.",
             "Lunch on Friday is pizza.", "The staging server runs Debian."]
    question = "Who got a new dog recently?"
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await c.init("proj", {"agent": "a1"})
        await c.store([{"key": {"n": i}, "content": f, "tier": "semantic"}
                       for i, f in enumerate(facts)])
        await host.search.drain()
        wire = (await c.retrieve(query=question, limit=5)).entries
        qs = urlencode({"ns": "proj", "q": question, "agent": "a1", "limit": 5})
        page = text(await UiClient(_app(host)).get(f"/ui/search?{qs}"))
    assert wire and wire[0]["key"] == {"n": 0}
    cards = page.split('<span class="rank">#')[1:]
    assert len(cards) == len(wire)
    for card, e in zip(cards, wire, strict=True):
        assert f"&quot;n&quot;: {e['key']['n']}" in card or f"&quot;n&quot;:{e['key']['n']}" in card
        for part in ("relevance", "combined"):
            shown = card.split(f'data-part="{part}"', 1)[1].split("<strong>", 1)[1]
            assert abs(float(shown.split("<", 1)[0]) - e[part]) < 2e-3, part


async def test_search_covers_every_agent_unless_an_agent_is_named(
        filled_host: Host) -> None:
    """Search with no agent finds the matches of every agent of the namespace, each entry
    once (semantic ones too); an agent narrows it to that agent's episodic entries and the
    namespace's semantic ones, as a retrieve of that agent would."""
    host = filled_host
    for agent in ("a2", "a3"):
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init("proj", {"agent": agent})
            await c.store([{"key": {"k": f"{agent}-note"}, "content": f"tomatoes, as {agent} saw",
                            "tier": "episodic"}])
    ui = UiClient(_app(host))

    def hits(page: str) -> list[str]:
        return [card.split('<span class="key">', 1)[1].split("</span>", 1)[0]
                for card in page.split('<span class="rank">')[1:]]

    every = hits(text(await ui.get("/ui/search?ns=proj&q=tomatoes")))
    assert sorted(every) == sorted(f"{{&quot;k&quot;: &quot;{k}&quot;}}"
                                   for k in ("shared", "a2-note", "a3-note"))
    narrowed = hits(text(await ui.get("/ui/search?ns=proj&q=tomatoes&agent=a2")))
    assert sorted(narrowed) == sorted(f"{{&quot;k&quot;: &quot;{k}&quot;}}" for k in ("shared", "a2-note"))
    only = hits(text(await ui.get("/ui/search?ns=proj&q=tomatoes&tier=episodic")))
    assert len(only) == 2 and all("note" in k for k in only)
    form = text(await ui.get("/ui/search?ns=proj"))
    assert "every agent" in form


async def test_search_of_every_agent_is_bounded_and_says_so(tmp_path: Path) -> None:
    """Search with no agent reads the episodic entries of at most SEARCH_AGENTS agents (those
    with the most), says so when there are more, and the agent field reaches the others."""
    names = [f"ag{i:03d}" for i in range(SEARCH_AGENTS + 1)]
    last = names[-1]  # every agent has one entry: ties go by name, the last is left out
    config = make_config(tmp_path / "a2e.db", search={"embedder": "none"})
    async with running_host(config) as host:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            for name in names:  # one session an agent on one connection
                await c.init("proj", {"agent": name})
                await c.store([{"key": {"k": name}, "content": f"radishes noted by {name}",
                                "tier": "episodic"}])
        ui = UiClient(_app(host))
        page = text(await ui.get(f"/ui/search?ns=proj&q=radishes&limit={len(names)}"))
        assert f"the {SEARCH_AGENTS} agents with the most of {len(names)}" in page
        assert page.count('<span class="rank">') == SEARCH_AGENTS
        assert f"&quot;{last}&quot;" not in page
        alone = text(await ui.get(f"/ui/search?ns=proj&q=radishes&agent={last}"))
        assert f"&quot;{last}&quot;" in alone and "agents with the most" not in alone


async def test_forget_asks_first_then_deletes_for_the_wire(tmp_path: Path) -> None:
    """Forget shows a confirmation (GET changes nothing), then the POST deletes the entry, which
    a wire client no longer retrieves."""
    admin, agent, ctx = await _admin_host(tmp_path)
    async with ctx as host:
        c = await auth_connect(host, agent)
        await _fill(c, "ns")
        ui = UiClient(_app(host))
        await ui.sign_in(admin)
        page = text(await ui.get("/ui/entries?ns=ns&key=new"))
        ident = page.split('id="e', 1)[1].split('"', 1)[0]
        confirm = await ui.get(f"/ui/forget?ns=ns&id={ident}")
        assert confirm.status == 200 and "Forget this entry" in text(confirm)
        assert (await c.retrieve(keys=[{"k": "new"}])).total == 1
        r = await ui.post("/ui/forget", {"ns": "ns", "id": ident})
        assert r.status == 303 and "done=forgot" in (r.header("Location") or "")
        assert (await c.retrieve(keys=[{"k": "new"}])).total == 0
        assert (await c.retrieve(tier="")).total == 2
        again = await ui.post("/ui/forget", {"ns": "ns", "id": ident})
        assert "done=gone" in (again.header("Location") or "")
        await c.close()


async def test_export_downloads_the_namespace_as_json_lines(host: Host) -> None:
    """Export confirms with the entry count, then the POST answers the namespace's entries
    as JSON Lines in the `a2e-host export` format, as an attachment."""
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await _fill(c, "proj")
        await _fill(c, "other")
        ui = UiClient(_app(host))
        assert "the 3 live persisted entries" in text(await ui.get("/ui/export?ns=proj"))
        r = await ui.post("/ui/export", {"ns": "proj"})
        assert r.status == 200 and r.header("Content-Type") == "application/x-ndjson"
        assert r.header("Content-Disposition") == 'attachment; filename="proj.jsonl"'
        lines = [json.loads(x) for x in r.body.decode().splitlines()]
        assert sorted(x["key"]["k"] for x in lines) == ["new", "old", "shared"]
        assert {x["namespace"] for x in lines} == {"proj"}
        read = [decode_line(x) for x in r.body.splitlines()]  # what `a2e-host import` reads
        assert sorted(e.tier for e in read) == ["episodic", "episodic", "semantic"]


async def test_a_big_export_streams_page_after_page_over_http(tmp_path: Path) -> None:
    """An export of more entries than a page (EXPORT_PAGE) comes over real HTTP as a chunked
    stream holding every entry once, in row order, and readable by `a2e-host import`."""
    n = EXPORT_PAGE * 2 + 7
    config = make_config(tmp_path / "a2e.db", search={"embedder": "none"})
    async with running_host(config) as host:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init("big", {"agent": "a1"})
            for start in range(0, n, 1000):
                await c.store([{"key": {"i": i}, "content": i, "tier": "episodic"}
                               for i in range(start, min(n, start + 1000))])
        ui = UiClient(_app(host), host=f"127.0.0.1:{host.port}")
        await ui.get("/ui/export?ns=big")  # its CSRF token and cookie
        cookie = "; ".join(f"{k}={v}" for k, v in ui.cookies.items())
        status, headers, body = await asyncio.to_thread(
            _post_raw, host.port, "/ui/export", {"ns": "big", "csrf": ui.csrf}, cookie)
        assert status == 200 and headers.get("transfer-encoding") == "chunked"
        keys = [bytes(decode_line(x).key) for x in body.splitlines()]
        assert keys == [json.dumps({"i": i}, separators=(",", ":")).encode() for i in range(n)]


def _post_raw(port: int, path: str, form: dict[str, str], cookie: str
              ) -> tuple[int, dict[str, str], bytes]:
    """One form POST over a real socket, as a browser on the page sends it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path, urlencode(form), {
            "Content-Type": "application/x-www-form-urlencoded", "Host": f"127.0.0.1:{port}",
            "Origin": f"http://127.0.0.1:{port}", "Cookie": cookie})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


async def test_live_json_returns_the_change_log_after_the_cursor(host: Host) -> None:
    """The Live page shows the latest writes and the change log's head; its JSON endpoint
    returns the changes after that cursor (stores and forgets), and a cursor past them."""
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await _fill(c, "proj")
        ui = UiClient(_app(host))
        page = text(await ui.get("/ui/live?ns=proj"))
        after = page.split('data-after="', 1)[1].split('"', 1)[0]
        empty = json.loads((await ui.get(f"/ui/live.json?ns=proj&after={after}")).body)
        assert empty["count"] == 0 and empty["after"] == after
        await c.store([{"key": {"k": "later"}, "content": "fresh news", "tier": "semantic"}])
        await c.forget(keys=[{"k": "old"}])
        fresh = json.loads((await ui.get(f"/ui/live.json?ns=proj&after={after}")).body)
        assert fresh["count"] == 2 and int(fresh["after"]) > int(after)
        html = fresh["html"]
        assert html.index(">stored<") < html.index(">forgotten<")
        assert "fresh news" in html and "&quot;later&quot;" in html and "&quot;old&quot;" in html
        again = json.loads((await ui.get(f"/ui/live.json?ns=proj&after={fresh['after']}")).body)
        assert again["count"] == 0
        assert (await ui.get("/ui/live.json?ns=proj&after=nope")).status == 400


async def test_live_json_reads_a_bounded_page_of_the_change_log(host: Host) -> None:
    """One poll of the Live page's JSON reads (and holds) about a MiB of the change log, not
    a hundred changes of any size: big changes come a few a poll, and following its cursor
    shows each of them once, in order."""
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await c.init("big", {"agent": "a1"})
        ui = UiClient(_app(host))
        for i in range(6):  # six changes of about 600 KB each
            await c.store([{"key": {"i": i, "j": j}, "content": "x" * 60_000,
                            "tier": "semantic"} for j in range(10)])
        first = json.loads((await ui.get("/ui/live.json?ns=big&after=0")).body)
        assert first["count"] <= 20  # two changes at most: the one that passes a MiB ends it
        after, seen = "0", []
        while True:
            page = json.loads((await ui.get(f"/ui/live.json?ns=big&after={after}")).body)
            if not page["count"]:
                break
            seen.append(page["count"])
            assert int(page["after"]) > int(after)
            after = page["after"]
        assert sum(seen) == 60 and int(after) == 6


async def test_health_page_charts_the_hosts_own_metrics(host: Host) -> None:
    """After requests, the Health page draws a requests-a-second and a p99 chart of each
    message type as inline SVG, with connections, backlog and the last GC."""
    app = _app(host)
    await app.health.sample()
    async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
        await _fill(c, "proj")
        await host.gc.collect_once()
        await app.health.sample()
        page = text(await UiClient(app).get("/ui/health"))
    assert "<h3>memory/store</h3>" in page or "<h3>memory/store/req</h3>" in page
    assert page.count("<svg") >= 5 and "<polyline" in page
    assert "0 deleted" in page and "connections open" in page


def test_p99_is_the_bucket_holding_the_99th_percentile() -> None:
    """p99 of two bucket snapshots is the upper bound of the first bucket reaching 99%."""
    zero = (0,) * 15
    fast = (0, 0, 0, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 100)
    assert p99_of(zero, fast) == 0.001
    slow = (0, 0, 0, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 100)
    assert p99_of(zero, slow) == float("inf")
    assert p99_of(fast, fast) is None


async def test_static_files_and_security_headers(host: Host) -> None:
    """CSS and script are served by the host itself; pages forbid framing, foreign sources
    and caching."""
    ui = UiClient(_app(host))
    css = await ui.get("/ui/static/ui.css")
    assert css.status == 200 and css.header("Content-Type", ) == "text/css; charset=utf-8"
    assert (await ui.get("/ui/static/../app.py")).status == 404
    page = await ui.get("/ui/namespaces")
    csp = page.header("Content-Security-Policy") or ""
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert page.header("Cache-Control") == "no-store"
    assert "http://" not in text(page) and "https://" not in text(page)
    r = await _app(host).handle(Request.build("DELETE", "/ui/namespaces",
                                              [("Host", "127.0.0.1")], remote="127.0.0.1"))
    assert r.status == 405


async def test_no_entry_content_in_any_log_line_the_ui_causes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Signing in, browsing, searching, following, exporting and forgetting log no entry
    content, at any level."""
    admin, agent, ctx = await _admin_host(tmp_path)
    async with ctx as host:
        c = await auth_connect(host, agent)
        await _fill(c, "ns")
        ui = UiClient(_app(host))
        with caplog.at_level(logging.DEBUG):
            await ui.sign_in("a2e_wrong")
            await ui.sign_in(admin)
            page = text(await ui.get("/ui/entries?ns=ns"))
            await ui.get("/ui/search?ns=ns&q=launch")
            await ui.get("/ui/live.json?ns=ns&after=0:0")
            await ui.post("/ui/export", {"ns": "ns"})
            ident = page.split('id="e', 1)[1].split('"', 1)[0]
            await ui.post("/ui/forget", {"ns": "ns", "id": ident})
        assert SECRET in page
        logged = "\n".join(r.getMessage() for r in caplog.records)
        assert "ui: agent ops signed in" in logged and "forgot entry" in logged
        assert SECRET not in logged and admin not in logged
        await c.close()


async def test_ui_disabled_builds_no_app(tmp_path: Path) -> None:
    """With `ui.enabled = false` the host has no memory browser."""
    async with running_host(make_config(tmp_path / "a2e.db", ui={"enabled": False},
                                        search={"embedder": "none"})) as host:
        assert host.ui is None


_PARAMS = ("ns", "tier", "agent", "tags", "key", "page", "q", "limit", "min_score", "after",
           "id", "back", "done", "as_of")
_odd = st.one_of(st.text(max_size=40), st.sampled_from(
    ["", "0", "-1", "1e999", "nan", "9" * 30, "episodic", "working", "proj", "%", "_", "\\",
     "a,b," * 40, "../", "//evil.example", "0:0", "1:x", "x" * 5000, "2026-03-01T00:00:00Z",
     "9999-12-31T23:59:59-01:00", "-62135596800", "2026-03-01"]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/ui/namespaces", "/ui/entries", "/ui/search", "/ui/live",
                             "/ui/live.json", "/ui/health", "/ui/forget", "/ui/export",
                             "/ui/nope", "/ui/static/x"]),
       params=st.dictionaries(st.sampled_from(_PARAMS), _odd, max_size=6),
       method=st.sampled_from(["GET", "POST"]))
async def test_no_parameter_makes_a_server_error(
        filled_host: Host, path: str, params: dict[str, str], method: str) -> None:
    """Whatever the query or form parameters, every page answers without a server error."""
    ui = UiClient(_app(filled_host))
    await ui.get("/ui/namespaces")  # a CSRF token for the posts
    target = f"{path}?{urlencode(params)}"
    r = await (ui.get(target) if method == "GET" else ui.post(target, params))
    assert r.status < 500, (r.status, text(r))
