"""Screenshots of the memory browser's pages for docs/ui.md, taken in headless Chromium.

    python scripts/tools/ui_screenshots.py [--out docs/img]

Starts `a2e-host serve` with authentication on (tests/support/browser.py), stores a small demo
memory over the wire, makes some uneven traffic for the Health charts (busy and idle
intervals), signs in with the admin token and saves `ui-<page>.png` for each page at a
desktop's width (1200 CSS pixels, the whole page up to 1800 tall), then `ui-phone.png` (the
Entries page), `ui-phone-namespaces.png` and `ui-phone-health.png` at a phone's (390). The
Live page is shot after an entry was stored while it was open (the change on top);
`ui-as-of.png` is a Search as of a time, over two facts with bounds (FACTS). Takes about half
a minute. Needs Debian's `chromium` and `chromium-driver`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/support

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from support.browser import BrowsedHost, chromium, demo_entries  # noqa: E402

from host.client import MemoryClient  # noqa: E402

# two facts with the time they hold (docs/ui.md "The time of a fact"): one ended, one since
FACTS = [
    {"key": {"fact": "office"}, "content": "The team's office is on Canal Street.",
     "tier": "semantic", "tags": ["work"], "valid_until": "2026-09-01T00:00:00Z"},
    {"key": {"fact": "office", "since": "2026-09"}, "tier": "semantic", "tags": ["work"],
     "content": "The team's office moved to Harbour Road.", "valid_from": "2026-09-01T00:00:00Z"},
]
INTERVAL = 0.5  # the host's ui.health_interval here: a chart spans about 15 s of traffic
DESKTOP, PHONE = 1200, 390


async def _wire(host: BrowsedHost, ns: str, entries: list[dict[str, Any]]) -> MemoryClient:
    c = await MemoryClient.connect(host.ws, additional_headers={
        "Authorization": f"Bearer {host.writer}"})
    await c.init(ns, {"agent": "a1"})
    if entries:
        await c.store(entries)
    return c


async def _fill(host: BrowsedHost) -> None:
    """The demo memory, then 30 health intervals of uneven traffic: bursts of retrieves and
    stores, some intervals idle (no p99 for them)."""
    c = await _wire(host, "demo", demo_entries() + FACTS)
    try:
        await c.init("support-bot", {"agent": "a1"})
        await c.store([{"key": {"ticket": 4121}, "content": "Asked how to change the invoice"
                        " address; sent the settings link.", "tier": "episodic",
                        "tags": ["billing"]}])
        for step in range(30):
            burst = (0, 3, 8, 14, 6, 0, 0, 10, 4, 2)[step % 10]
            for i in range(burst):
                await c.retrieve(query="invoice address")
                if i % 2:
                    await c.store([{"key": {"scratch": i}, "content": "note", "tier": "working"}])
            await asyncio.sleep(INTERVAL)
    finally:
        await c.close()


async def _store_one(host: BrowsedHost) -> None:
    c = await _wire(host, "demo", [{"key": {"topic": "meeting"}, "content":
                                    "Standup moved to 9:30 on Thursdays.", "tier": "semantic",
                                    "tags": ["work"]}])
    await c.close()


def _shoot(d: Any, path: Path, width: int, tallest: int, mobile: bool = False) -> None:
    """Save the page shown as `path`, `width` CSS pixels wide and as tall as the page (at
    most `tallest`)."""
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": 700, "deviceScaleFactor": 1, "mobile": mobile})
    tall = d.execute_script("return document.documentElement.scrollHeight")
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": min(max(int(tall), 600), tallest), "deviceScaleFactor": 1,
        "mobile": mobile})
    time.sleep(0.2)  # the relayout at the new size
    d.save_screenshot(str(path))
    d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


def main() -> int:
    """Take the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        host = BrowsedHost(Path(folder), f"[ui]\nhealth_interval = {INTERVAL}")
        try:
            asyncio.run(_fill(host))
            with chromium(DESKTOP, 820) as d:
                d.get(host.base + "/ui/signin")
                _shoot(d, out / "ui-signin.png", DESKTOP, 700)
                d.find_element(By.NAME, "token").send_keys(host.admin)
                d.find_element(By.NAME, "token").submit()
                time.sleep(1.0)  # the backlog drains
                pages = {
                    "namespaces": "/ui/namespaces",
                    "entries": "/ui/entries?ns=demo",
                    "search": "/ui/search?ns=demo&q=food+allergy+or+garden+vegetables",
                    "as-of": "/ui/search?ns=demo&q=where+is+the+office"
                             "&as_of=2026-06-01T09%3A00%3A00%2B02%3A00",
                    "health": "/ui/health",
                }
                for name, path in pages.items():
                    d.get(host.base + path)
                    _shoot(d, out / f"ui-{name}.png", DESKTOP, 1800)
                d.get(host.base + "/ui/live?ns=demo")
                asyncio.run(_store_one(host))
                WebDriverWait(d, 20, poll_frequency=0.25).until(
                    lambda drv: drv.find_elements(By.CSS_SELECTOR, "#live-list .fresh"))
                _shoot(d, out / "ui-live.png", DESKTOP, 1800)
                for name, path in {"phone": "/ui/entries?ns=demo",
                                   "phone-namespaces": "/ui/namespaces",
                                   "phone-health": "/ui/health"}.items():
                    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                        "width": PHONE, "height": 844, "deviceScaleFactor": 1, "mobile": True})
                    d.get(host.base + path)
                    _shoot(d, out / f"ui-{name}.png", PHONE, 1600, mobile=True)
        finally:
            host.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
