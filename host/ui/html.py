"""HTML building blocks of the memory browser: the page layout and value formatting.

Every value that comes from the store or the request is escaped here or by the caller with
`esc`; pages are plain server-rendered HTML that reads fully without JavaScript.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import cache
from html import escape
from importlib.metadata import PackageNotFoundError, version
from urllib.parse import urlencode

import host

__all__ = [
    "esc",
    "fmt_bytes",
    "fmt_clock",
    "fmt_duration",
    "fmt_instant",
    "fmt_ms",
    "fmt_time",
    "host_version",
    "layout",
    "pretty_json",
    "compact_json",
    "url",
]

_FOLD_CHARS = 600
_FOLD_LINES = 12


def esc(value: object) -> str:
    """`value` as text safe inside HTML content and quoted attributes."""
    return escape(str(value), quote=True)


def url(path: str, params: Mapping[str, object] | None = None) -> str:
    """`path` with `params` (empty values left out) as its query string, HTML-escaped."""
    query = urlencode({k: v for k, v in (params or {}).items() if v not in ("", None)})
    return esc(path + ("?" + query if query else ""))


def fmt_time(ts: float) -> str:
    """Unix seconds as `2026-12-01 08:50:12 UTC`. Every time the browser shows is UTC, and
    says so (its script's too: host/ui/static/ui.js)."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def fmt_instant(ts: float) -> str:
    """An instant of the time extension (epoch seconds, years 1 to 9999:
    `protocol.validity`) as a `<time>` element: `2026-03-01 09:00:00 UTC` to read (a fraction
    of a second when it has one), its ISO-8601 form (`2026-03-01T09:00:00Z`, what a Search's
    `as of` takes) in `datetime` and `title`."""
    try:
        at = _EPOCH + timedelta(seconds=ts)
    except (OverflowError, ValueError):  # not an instant (a row written by another tool)
        return esc(ts)
    frac = f".{at.microsecond:06d}".rstrip("0") if at.microsecond else ""
    day = f"{at.year:04d}-{at.month:02d}-{at.day:02d}"
    clock = f"{at.hour:02d}:{at.minute:02d}:{at.second:02d}{frac}"
    iso = f"{day}T{clock}Z"
    return f'<time datetime="{iso}" title="{iso}">{day} {clock} UTC</time>'


def fmt_clock(ts: float, zone: bool = True) -> str:
    """Unix seconds as the time of day, `08:50:12 UTC` (`zone`: with the zone's name)."""
    return time.strftime("%H:%M:%S" + (" UTC" if zone else ""), time.gmtime(ts))


def fmt_ms(seconds: float) -> str:
    """A latency as `0.25 ms`, `12 ms` or `1.5 s`; infinite (beyond the last histogram
    bucket) as `> 2.5 s`."""
    if seconds == float("inf"):
        return "> 2.5 s"
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


@cache
def host_version() -> str:
    """The host's version: `host.__version__` when the package sets it, else the installed
    distribution's, else `unknown` (a source tree that was never installed)."""
    named = getattr(host, "__version__", None)
    if isinstance(named, str) and named:
        return named
    try:
        return version("a2e-host")
    except PackageNotFoundError:
        return "unknown"


def fmt_duration(seconds: float) -> str:
    """A duration as `3d 4h`, `2h 5m`, `4m 10s` or `12s`."""
    s = max(int(seconds), 0)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m}m"
    return f"{m}m {s}s" if m else f"{s}s"


def fmt_bytes(n: int) -> str:
    """A byte count as `512 B`, `3.2 KiB`, `1.5 MiB` ..."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # not reached


def compact_json(raw: bytes) -> str:
    """A stored JSON value (a key) as one line of text."""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False, separators=(", ", ": "))
    except ValueError:
        return raw.decode(errors="replace")


def pretty_json(raw: bytes) -> str:
    """A stored JSON value (a content) as indented HTML: `<pre>`, folded into `<details>`
    when it is long."""
    try:
        text = json.dumps(json.loads(raw), ensure_ascii=False, indent=2)
    except ValueError:
        text = raw.decode(errors="replace")
    lines = text.count("\n") + 1
    if len(text) <= _FOLD_CHARS and lines <= _FOLD_LINES:
        return f'<pre class="content">{esc(text)}</pre>'
    head = "\n".join(text.splitlines()[:4])[:240]
    return (f'<pre class="content preview">{esc(head)} …</pre>'
            f"<details><summary>whole content ({lines} lines, {len(raw)} bytes)</summary>"
            f'<pre class="content">{esc(text)}</pre></details>')


_NAV = (("namespaces", "Namespaces", False), ("entries", "Entries", True),
        ("search", "Search", True), ("live", "Live", True), ("export", "Export", True),
        ("health", "Health", False))


def layout(
    title: str, body: str, *, here: str = "", namespace: str = "", who: str = "",
    csrf: str = "", signout: bool = False, head_extra: str = "", nav: bool = True,
) -> str:
    """A whole page: header with the navigation (the namespace pages only when `namespace`
    is set; none without `nav`), who is signed in and a sign-out button (`signout`), then
    `body`."""
    links = []
    for name, text, per_ns in _NAV if nav else ():
        if per_ns and not namespace:
            continue
        href = url(f"/ui/{name}", {"ns": namespace} if per_ns else None)
        cls = ' class="here"' if name == here else ""
        links.append(f'<a href="{href}"{cls}>{text}</a>')
    who_html = ""
    if who:
        who_html = f'<span class="who"><span>{esc(who)}</span>'
        if signout:
            who_html += (f'<form method="post" action="/ui/signout">'
                         f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
                         f'<button class="plain" type="submit">Sign out</button></form>')
        who_html += "</span>"
    ns_html = f' <span class="muted">· {esc(namespace)}</span>' if namespace else ""
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · a2e-host</title>"
        '<link rel="icon" href="data:,"><link rel="stylesheet" href="/ui/static/ui.css">'
        f'<script src="/ui/static/ui.js" defer></script>{head_extra}</head><body>'
        f'<header><span class="brand">a2e-host memory{ns_html}</span>'
        f'<nav>{"".join(links)}</nav>{who_html}</header>'
        f"<main><h1>{esc(title)}</h1>{body}</main>"
        f"<footer>a2e-host {esc(host_version())} · times in UTC</footer></body></html>\n"
    )
