"""Screenshots of the memory browser's pages for docs/ui.md, taken in headless Chromium.

    python scripts/ui_screenshots.py [--out docs/img]

Starts `a2e-host serve` with authentication on (scripts/support/browser.py), stores a small demo
memory over the wire, makes some traffic for the Health charts, signs in with the admin token
and saves `ui-<page>.png` for each page (and `ui-phone.png`, the Entries page at a phone's
width). Needs Debian's `chromium` and `chromium-driver`.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from selenium.webdriver.common.by import By  # noqa: E402
from support.browser import BrowsedHost, chromium, demo_entries  # noqa: E402

from host.client import MemoryClient  # noqa: E402


async def _fill(host: BrowsedHost) -> None:
    headers = {"Authorization": f"Bearer {host.writer}"}
    async with await MemoryClient.connect(host.ws, additional_headers=headers) as c:
        await c.init("demo", {"agent": "a1"})
        await c.store(demo_entries())
        await c.init("support-bot", {"agent": "a1"})
        await c.store([{"key": {"ticket": 4121}, "content": "Asked how to change the invoice"
                        " address; sent the settings link.", "tier": "episodic",
                        "tags": ["billing"]}])
        for _ in range(40):  # traffic for the Health charts
            await c.retrieve(query="invoice address")
            await c.store([{"key": {"scratch": 1}, "content": "note", "tier": "working"}])
            await asyncio.sleep(0.05)


def main() -> int:
    """Take the screenshots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "img"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        host = BrowsedHost(Path(folder), "[ui]\nhealth_interval = 0.5")
        try:
            asyncio.run(_fill(host))
            with chromium(1200, 820) as d:
                d.get(host.base + "/ui/signin")
                d.save_screenshot(str(out / "ui-signin.png"))
                d.find_element(By.NAME, "token").send_keys(host.admin)
                d.find_element(By.NAME, "token").submit()
                time.sleep(2.0)  # the backlog drains, the Health page gathers samples
                pages = {
                    "namespaces": "/ui/namespaces",
                    "entries": "/ui/entries?ns=demo",
                    "search": "/ui/search?ns=demo&q=food+allergy+or+garden+vegetables",
                    "live": "/ui/live?ns=demo",
                    "health": "/ui/health",
                }
                for name, path in pages.items():
                    d.get(host.base + path)
                    tall = d.execute_script("return document.documentElement.scrollHeight")
                    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {  # the whole page
                        "width": 1200, "height": min(max(int(tall), 700), 1800),
                        "deviceScaleFactor": 1, "mobile": False})
                    d.save_screenshot(str(out / f"ui-{name}.png"))
                    d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
                    print(f"wrote {out / f'ui-{name}.png'}")
                d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                    "width": 390, "height": 1400, "deviceScaleFactor": 1, "mobile": True})
                d.get(host.base + "/ui/entries?ns=demo")
                d.save_screenshot(str(out / "ui-phone.png"))
                print(f"wrote {out / 'ui-phone.png'}")
        finally:
            host.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
