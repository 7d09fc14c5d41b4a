"""The memory browser in a real browser: headless Chromium (Debian's) driven by Selenium, one
browser session for the module, against a host subprocess with authentication on. Entries are
written and checked over real WebSocket connections ("through the wire")."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from support.browser import BrowsedHost, as_json, chromium, demo_entries

from host.client import MemoryClient

NS = "demo"
PHONE = (390, 844)  # CSS pixels of a common phone


async def _wire(host: BrowsedHost, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """Run memory calls as agent a1 (the writer token) in namespace NS; their replies."""
    async with await MemoryClient.connect(
            host.ws, additional_headers={"Authorization": f"Bearer {host.writer}"}) as c:
        await c.init(NS, {"agent": "a1"})
        return [await getattr(c, name)(**kwargs) for name, kwargs in calls]


def wire(host: BrowsedHost, *calls: tuple[str, dict[str, Any]]) -> list[Any]:
    """`_wire` from a synchronous test."""
    return asyncio.run(_wire(host, *calls))


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowsedHost]:
    """One host for the module, with the demo entries stored in NS."""
    host = BrowsedHost(tmp_path_factory.mktemp("ui-browser"), "[ui]\nhealth_interval = 1.0")
    try:
        wire(host, ("store", {"entries": demo_entries()}))
        yield host
    finally:
        host.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium session for the module."""
    with chromium() as driver:
        yield driver


def _sign_out(browser: Any, served: BrowsedHost) -> None:
    browser.get(served.base + "/ui/signin")
    browser.delete_all_cookies()


def _sign_in(browser: Any, served: BrowsedHost, token: str) -> None:
    browser.get(served.base + "/ui/signin")
    field = browser.find_element(By.NAME, "token")
    field.clear()
    field.send_keys(token)
    _submit(browser, field)


def _gone(element: Any) -> bool:
    """True once `element`'s document has been replaced. Selenium's `staleness_of`, plus the
    error Chromium answers while the old document is being torn down ("Node with given id
    does not belong to the document"), which means the same."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as err:
        if "does not belong to the document" in str(err):
            return True
        raise
    return False


def _submit(browser: Any, field: Any) -> None:
    """Submit `field`'s form and wait for the page it leads to: `submit()` returns before
    the next page is loaded (WebDriver's submit is the page's own `form.submit()`)."""
    field.submit()
    WebDriverWait(browser, 20, poll_frequency=0.1).until(lambda _d: _gone(field))
    WebDriverWait(browser, 20, poll_frequency=0.1).until(
        lambda d: d.execute_script("return document.readyState") == "complete")


def _signed_in(browser: Any, served: BrowsedHost) -> None:
    if browser.get_cookie("a2e_ui_token") is None:
        _sign_in(browser, served, served.admin)
    assert browser.get_cookie("a2e_ui_token") is not None


def _shown(browser: Any, selector: str) -> Any:
    """The first element matching `selector` once the page a click led to shows it (a click
    that submits a form returns before the next page is loaded)."""
    WebDriverWait(browser, 20, poll_frequency=0.1).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, selector))
    return browser.find_element(By.CSS_SELECTOR, selector)


def test_a_wrong_token_is_refused(browser: Any, served: BrowsedHost) -> None:
    """A wrong token stays on the sign-in form with an error, and no sign-in cookie is set."""
    _sign_out(browser, served)
    browser.get(served.base + "/ui")
    assert browser.current_url.endswith("/ui/signin")
    _sign_in(browser, served, "a2e_this-is-not-a-token")
    assert "not valid" in browser.find_element(By.CSS_SELECTOR, ".error").text
    assert browser.get_cookie("a2e_ui_token") is None
    assert "this-is-not-a-token" not in browser.current_url


def test_a_non_admin_token_is_refused(browser: Any, served: BrowsedHost) -> None:
    """A valid token without the admin right is refused, from loopback too."""
    _sign_out(browser, served)
    for token in (served.writer, served.reader):
        _sign_in(browser, served, token)
        assert "no admin right" in browser.find_element(By.CSS_SELECTOR, ".error").text
        assert browser.get_cookie("a2e_ui_token") is None


def test_sign_in_and_see_a_namespaces_entries(browser: Any, served: BrowsedHost) -> None:
    """An admin token signs in (an HttpOnly cookie, not in the URL); the namespace is listed
    and its entries page shows every demo entry, newest first."""
    _sign_out(browser, served)
    _sign_in(browser, served, served.admin)
    cookie = browser.get_cookie("a2e_ui_token")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert served.admin not in browser.current_url
    assert browser.current_url.endswith("/ui/namespaces")
    browser.find_element(By.LINK_TEXT, NS).click()
    _shown(browser, ".entry .key")
    keys = [k.text for k in browser.find_elements(By.CSS_SELECTOR, ".entry .key")]
    assert keys == [as_json(e["key"]) for e in reversed(demo_entries())]
    long = browser.find_element(By.CSS_SELECTOR, f"#{_entry_id(browser, 'plans')} details")
    assert long.get_attribute("open") is None  # long content folded


def _entry_id(browser: Any, topic: str) -> str:
    for card in browser.find_elements(By.CSS_SELECTOR, ".entry"):
        if card.find_element(By.CSS_SELECTOR, ".key").text == as_json({"topic": topic}):
            return str(card.get_attribute("id"))
    raise AssertionError(f"no entry {topic} on the page")


def test_search_shows_the_expected_entry_first_with_its_score_parts(
        browser: Any, served: BrowsedHost) -> None:
    """Searching (field `q`) shows the entry the query is about first, with relevance,
    combined, keyword, vector, importance and recency."""
    _signed_in(browser, served)
    # wait for the embedding worker: the backlog column reaches 0
    def embedded(driver: Any) -> bool:
        driver.get(served.base + "/ui/namespaces")
        row = driver.find_element(By.XPATH, f"//tr[td/a[text()='{NS}']]")
        return bool(row.find_elements(By.CSS_SELECTOR, "td")[6].text == "0")

    WebDriverWait(browser, 30, poll_frequency=0.5).until(embedded)
    browser.get(f"{served.base}/ui/search?ns={NS}")
    box = browser.find_element(By.NAME, "q")
    box.send_keys("peanut allergy")
    _submit(browser, box)
    first = _shown(browser, "#hits .entry")
    assert first.find_element(By.CSS_SELECTOR, ".key").text == as_json({"topic": "allergy"})
    parts = {p.get_attribute("data-part"): p.find_element(By.TAG_NAME, "strong").text
             for p in first.find_elements(By.CSS_SELECTOR, ".part")}
    assert set(parts) == {"combined", "relevance", "fused", "keyword", "vector", "importance", "recency"}
    assert parts["keyword"].startswith("BM25 ") and parts["vector"].startswith("cosine ")
    assert parts["vector"] != "cosine —" and parts["importance"] == "1.000"


def test_search_as_of_a_time_through_the_form(browser: Any, served: BrowsedHost) -> None:
    """The Search form's "as of" field: typed with an offset, the hits are the facts valid
    then, each card showing its bounds in UTC (the ended one marked); a date without a zone
    is refused with the rule's message, and no hit is shown."""
    _signed_in(browser, served)
    wire(served, ("store", {"entries": [
        {"key": {"fact": "home", "v": 1}, "content": "I live in Boston.", "tier": "semantic",
         "valid_until": "2026-03-01T00:00:00Z"},
        {"key": {"fact": "home", "v": 2}, "content": "I live in Denver.", "tier": "semantic",
         "valid_from": "2026-03-01T00:00:00Z"}]}))

    def search(as_of: str) -> None:
        browser.get(f"{served.base}/ui/search?ns={NS}")
        browser.find_element(By.NAME, "q").send_keys("Where do I live?")
        field = browser.find_element(By.NAME, "as_of")
        field.send_keys(as_of)
        _submit(browser, field)

    def hits() -> dict[str, Any]:  # the hits about the facts, by key
        _shown(browser, "#hits .entry")
        cards = browser.find_elements(By.CSS_SELECTOR, "#hits .entry")
        return {k: c for c in cards
                if (k := c.find_element(By.CSS_SELECTOR, ".key").text).startswith('{"fact"')}

    boston, denver = as_json({"fact": "home", "v": 1}), as_json({"fact": "home", "v": 2})
    search("2026-02-28T23:30:00-01:00")  # 00:30 UTC on 1 March: Denver's fact, not Boston's
    found = hits()
    assert list(found) == [denver]
    assert "2026-03-01 00:30:00 UTC" in browser.find_element(By.ID, "as-of").text
    assert "valid from\n2026-03-01 00:00:00 UTC" in found[denver].text
    assert browser.find_element(By.NAME, "as_of").get_attribute("value") == \
        "2026-02-28T23:30:00-01:00"
    search("2026-02-28T23:30:00+00:00")
    found = hits()
    assert list(found) == [boston]
    assert found[boston].find_element(By.CSS_SELECTOR, ".validity").text == "no longer valid"
    search("2026-02-28")
    assert "needs a zone" in _shown(browser, ".error").text
    assert not browser.find_elements(By.CSS_SELECTOR, "#hits .entry")


def test_forget_an_entry_and_see_it_gone_through_the_wire(
        browser: Any, served: BrowsedHost) -> None:
    """Forget asks for a confirmation, then the entry is gone for a wire client too."""
    _signed_in(browser, served)
    key = {"topic": "travel"}
    assert wire(served, ("retrieve", {"keys": [key]}))[0].total == 1
    browser.get(f"{served.base}/ui/entries?ns={NS}")
    card = browser.find_element(By.ID, _entry_id(browser, "travel"))
    card.find_element(By.LINK_TEXT, "Forget…").click()
    assert "cannot be brought back" in _shown(browser, ".confirm").text
    browser.find_element(By.XPATH, "//button[text()='Forget this entry']").click()
    assert "forgotten" in _shown(browser, ".notice").text
    assert as_json(key) not in [k.text for k in browser.find_elements(By.CSS_SELECTOR, ".key")]
    assert wire(served, ("retrieve", {"keys": [key]}))[0].total == 0


def test_live_page_follows_new_writes(browser: Any, served: BrowsedHost) -> None:
    """With the Live page open, an entry stored over the wire appears on top by itself."""
    _signed_in(browser, served)
    browser.get(f"{served.base}/ui/live?ns={NS}")
    wire(served, ("store", {"entries": [
        {"key": {"topic": "fresh"}, "content": "written while watching", "tier": "semantic"}]}))
    want = as_json({"topic": "fresh"})
    WebDriverWait(browser, 20, poll_frequency=0.25).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "#live-list .entry .key")[0].text == want)


def _seconds_apart(clock: str, now: datetime) -> float:
    """How far the time of day `clock` (HH:MM:SS) is from `now`'s, across midnight too."""
    h, m, sec = (int(x) for x in clock.split(":"))
    gap = abs(h * 3600 + m * 60 + sec - (now.hour * 3600 + now.minute * 60 + now.second))
    return min(gap, 86400 - gap)


def test_times_are_utc_and_charts_have_axes_in_a_far_time_zone(
        browser: Any, served: BrowsedHost) -> None:
    """In a browser whose time zone is not UTC, the Live page's "checked" time is UTC and
    says so, as the entries' times do; the Health charts show value and time labels at a
    readable size."""
    _signed_in(browser, served)
    browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": "Pacific/Kiritimati"})
    try:  # UTC+14: a local clock is hours away from UTC's
        browser.get(f"{served.base}/ui/live?ns={NS}")
        WebDriverWait(browser, 20, poll_frequency=0.25).until(
            lambda d: "checked" in d.find_element(By.ID, "live-status").text)
        status = browser.find_element(By.ID, "live-status").text
        m = re.search(r"checked (\d\d:\d\d:\d\d) UTC", status)
        assert m, status
        assert _seconds_apart(m.group(1), datetime.now(UTC)) < 120, status
        assert "UTC" in browser.find_element(By.CSS_SELECTOR, "#live-list .entry dl").text
        browser.get(f"{served.base}/ui/health")
        charts = browser.execute_script(
            "return Array.from(document.querySelectorAll('#charts svg')).map(s => ["
            " s.getAttribute('aria-label'), s.getBoundingClientRect().height,"
            " Array.from(s.querySelectorAll('text.tick')).map(t =>"
            "  [t.textContent, t.getBoundingClientRect().height])])")
        assert len(charts) >= 3
        for label, height, ticks in charts:
            assert height >= 80, (label, height)  # drawn to its proportions, not squashed
            assert len(ticks) >= 4 and ticks[-1][0].endswith(" UTC"), (label, ticks)
            assert all(h >= 8 for _, h in ticks), (label, ticks)  # labels of a readable size
    finally:
        browser.execute_cdp_cmd("Emulation.setTimezoneOverride", {"timezoneId": ""})


def test_read_only_views_work_without_javascript(browser: Any, served: BrowsedHost) -> None:
    """With scripts disabled, every read-only page still shows its content."""
    _signed_in(browser, served)
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    try:
        checks = {
            "/ui/namespaces": "td",
            f"/ui/entries?ns={NS}": ".entry .key",
            f"/ui/search?ns={NS}&q=tomatoes": "#hits .entry",
            f"/ui/live?ns={NS}": "#live-list .entry",
            "/ui/health": ".chart svg",
        }
        for path, selector in checks.items():
            browser.get(served.base + path)
            assert browser.find_elements(By.CSS_SELECTOR, selector), path
    finally:
        browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": False})


def test_pages_are_readable_at_a_phones_width(browser: Any, served: BrowsedHost) -> None:
    """At a phone's width no page scrolls sideways, nor does a table inside it, and the text
    stays at a readable size."""
    _signed_in(browser, served)
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 2, "mobile": True})
    try:
        for path in ("/ui/namespaces", f"/ui/entries?ns={NS}", f"/ui/search?ns={NS}&q=garden",
                     f"/ui/live?ns={NS}", "/ui/health"):
            browser.get(served.base + path)
            wide = browser.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth,"
                " parseFloat(getComputedStyle(document.body).fontSize),"
                " Array.from(document.querySelectorAll('.table-wrap'))"
                "  .every(w => w.scrollWidth <= w.clientWidth)]")
            assert wide[0] <= wide[1] and wide[2] >= 14 and wide[3], (path, wide)
    finally:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_the_ui_logged_no_entry_content(served: BrowsedHost) -> None:
    """After every page and action above, the host's log (at DEBUG) holds no entry content
    and no token."""
    text = served.logged()
    assert "ui: agent ops signed in" in text
    for secret in ("peanuts", "platform 4", "tomatoes and basil", "written while watching",
                   served.admin, served.writer):
        assert secret not in text, secret


def test_screenshots_dir_is_documented() -> None:
    """docs/ui.md shows a screenshot of each page, and each file is in docs/img/."""
    root = Path(__file__).resolve().parent.parent
    doc = (root / "docs" / "ui.md").read_text()
    for name in ("namespaces", "entries", "search", "live", "health", "signin", "phone",
                 "phone-namespaces", "phone-health"):
        assert f"img/ui-{name}.png" in doc, name
        assert (root / "docs" / "img" / f"ui-{name}.png").is_file(), name
