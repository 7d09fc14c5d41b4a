"""What the memory browser's pages say to someone reading them for the first time: charts with
axes and units, one time zone, the navigation item of the page shown, quotas with units, an
unknown namespace answered 404, the search's figures in plain words with the wire's names,
and the host's version. The app is driven directly over a real host (SQLite, no embedder);
the Health page's body is also built from samples given to it."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from importlib.metadata import version
from pathlib import Path

import pytest
from support.hosts import make_config, running_host
from uikit import UiClient, text

from host.app import Host
from host.client import MemoryClient
from host.ui import UiApp
from host.ui.health import HealthSample


@pytest.fixture
async def small_host(tmp_path: Path) -> AsyncIterator[Host]:
    """A host (authentication off, no embedder) with quotas of 10 entries and 4 KiB a
    namespace, and three entries in "proj"."""
    config = make_config(tmp_path / "a2e.db", search={"embedder": "none"},
                         limits={"max_entries_per_namespace": 10,
                                 "max_bytes_per_namespace": 4096})
    async with running_host(config) as host:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init("proj", {"agent": "a1"})
            await c.store([
                {"key": {"k": i}, "content": f"tomatoes, note {i}", "tier": "semantic"}
                for i in range(3)])
        yield host


def _ui(host: Host) -> UiClient:
    assert host.ui is not None
    app: UiApp = host.ui
    return UiClient(app)


def _here(page: str) -> list[str]:
    """The navigation items marked as the page shown."""
    return re.findall(r'<a href="[^"]*" class="here">([^<]+)</a>', page)


async def test_each_page_marks_its_own_navigation_item(small_host: Host) -> None:
    """The navigation marks the page shown: Export on the Export page, not Namespaces."""
    ui = _ui(small_host)
    for path, item in (("/ui/namespaces", "Namespaces"), ("/ui/entries?ns=proj", "Entries"),
                       ("/ui/search?ns=proj", "Search"), ("/ui/live?ns=proj", "Live"),
                       ("/ui/export?ns=proj", "Export"), ("/ui/health", "Health")):
        assert _here(text(await ui.get(path))) == [item], path


async def test_quota_use_names_entries_bytes_and_percent(small_host: Host) -> None:
    """The Namespaces page gives each quota's use with its unit: entries x of N, bytes x of
    N, and the percent of each."""
    page = text(await _ui(small_host).get("/ui/namespaces"))
    cell = page.split('data-label="quota use">', 1)[1].split("</td>", 1)[0]
    words = re.sub(r"<[^>]+>", " ", cell)
    assert "3 of 10 entries (30%)" in words
    assert re.search(r"\d+ B of 4\.0 KiB \(\d+(\.\d)?%\)", words), words


async def test_an_unknown_namespace_is_404_no_such_namespace(small_host: Host) -> None:
    """Every page of a namespace that holds nothing answers 404 "No such namespace" instead
    of an empty page; the same pages of a namespace with entries answer 200, an export of an
    unknown one downloads nothing."""
    ui = _ui(small_host)
    for page in ("entries", "search", "live", "export"):
        known = await ui.get(f"/ui/{page}?ns=proj&q=tomatoes")
        assert known.status == 200, page
        r = await ui.get(f"/ui/{page}?ns=nowhere&q=tomatoes")
        assert r.status == 404 and "No such namespace" in text(r), page
        assert "<strong>nowhere</strong>" in text(r)
    assert (await ui.post("/ui/export", {"ns": "nowhere"})).status == 404
    filtered = await ui.get("/ui/entries?ns=proj&tags=absent")
    assert filtered.status == 200 and "No entry matches" in text(filtered)


async def test_forgetting_the_last_entry_says_it_was_forgotten(tmp_path: Path) -> None:
    """Forgetting a namespace's last entry leads to its 404 page, which still says that the
    entry was forgotten."""
    config = make_config(tmp_path / "a2e.db", search={"embedder": "none"})
    async with running_host(config) as host:
        async with await MemoryClient.connect(f"ws://127.0.0.1:{host.port}") as c:
            await c.init("solo", {"agent": "a1"})
            await c.store([{"key": {"k": 1}, "content": "alone", "tier": "semantic"}])
        ui = _ui(host)
        page = text(await ui.get("/ui/entries?ns=solo"))
        ident = page.split('id="e', 1)[1].split('"', 1)[0]
        await ui.get(f"/ui/forget?ns=solo&id={ident}")  # the confirmation, its CSRF token
        done = await ui.post("/ui/forget", {"ns": "solo", "id": ident})
        after = await ui.get(done.header("Location") or "")
        assert after.status == 404 and "The entry was forgotten." in text(after)


async def test_search_speaks_plain_words_and_the_wires_names(small_host: Host) -> None:
    """The Search page names its threshold as the wire does (`min_score`) and explains each
    figure without statistics jargon."""
    ui = _ui(small_host)
    form = text(await ui.get("/ui/search?ns=proj"))
    assert re.search(r"<label>min_score[^<]*<input[^>]*name=\"min_score\"", form)
    assert "min relevance" not in form
    page = text(await ui.get("/ui/search?ns=proj&q=tomatoes"))
    assert 'id="hits"' in page
    assert "z-score" not in page and "candidates" not in page and "calibrated" not in page
    for figure in ("relevance", "keyword", "vector", "fused", "importance", "recency",
                   "combined"):
        assert f"<strong>{figure}</strong>:" in page, figure
    bad = text(await ui.get("/ui/search?ns=proj&q=tomatoes&min_score=2"))
    assert "min_score a number from 0 to 1" in bad


async def test_every_page_shows_the_hosts_version_and_time_zone(small_host: Host) -> None:
    """Every page's footer names the host's version and that its times are UTC."""
    ui = _ui(small_host)
    for path in ("/ui/namespaces", "/ui/entries?ns=proj", "/ui/health", "/ui/search?ns=nowhere"):
        page = text(await ui.get(path))
        assert f"a2e-host {version('a2e-host')} · times in UTC</footer>" in page, path


def _samples(n: int) -> list[HealthSample]:
    """`n` samples a second apart ending now; retrieves answered in every third interval
    only (a sparse p99), one of them slow."""
    start = time.time() - n
    out = []
    for i in range(n):
        busy = i % 3 == 1
        p99 = {"memory/retrieve": 0.25 if i == 4 else 0.0025} if busy else {}
        out.append(HealthSample(start + i, {"memory/retrieve": 12.0 if busy else 0.0}, p99,
                                connections=i % 4, in_flight=0, backlog=7))
    return out


def _charts(page: str) -> dict[str, str]:
    """Each chart's SVG by its accessible name."""
    return dict(re.findall(r'<svg [^>]*aria-label="([^"]+)">(.*?)</svg>', page))


def _ticks(svg: str) -> list[str]:
    return re.findall(r'<text class="tick"[^>]*>([^<]*)</text>', svg)


async def test_health_charts_have_value_and_time_axes_with_units(small_host: Host) -> None:
    """Each Health chart labels its value axis with round values and their unit (counts,
    requests a second, p99 in ms and s on a log scale) and its time axis with the first and
    last sample's time, UTC; a p99 that only some intervals have is a column each of them,
    not scattered dots."""
    assert small_host.ui is not None
    kept = small_host.ui.health.samples
    kept.clear()
    samples = _samples(12)
    kept.extend(samples)
    charts = _charts(text(await _ui(small_host).get("/ui/health")))
    first = time.strftime("%H:%M:%S", time.gmtime(samples[0].at))
    last = time.strftime("%H:%M:%S UTC", time.gmtime(samples[-1].at))
    for name, svg in charts.items():
        assert _ticks(svg)[-2:] == [first, last], name
    assert _ticks(charts["connections open"])[:-2] == ["0", "5"]  # counts 0 to 3
    assert _ticks(charts["entries waiting for a vector"])[:-2] == ["0", "5", "10"]
    assert _ticks(charts["memory/retrieve requests a second"])[:-2] == ["0/s", "10/s", "20/s"]
    p99 = charts["memory/retrieve p99 latency"]
    assert _ticks(p99)[:-2] == ["1 ms", "10 ms", "100 ms", "1 s"]
    assert p99.count("<rect") == 4 and "<circle" not in p99  # the 4 busy intervals of 12
