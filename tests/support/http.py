"""Plain HTTP GETs of a host's own routes (`/healthz`, `/readyz`, `/metrics`) over a real
socket, and a sample read out of a Prometheus exposition text."""

from __future__ import annotations

import asyncio
import re
import urllib.error
import urllib.request

__all__ = ["get", "http_get", "metric_value"]


def http_get(port: int, path: str) -> tuple[int, str, str]:
    """GET `path` of the host on `port`: the status, the Content-Type and the body's text
    (an error status too, not raised)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read().decode()


async def get(port: int, path: str) -> tuple[int, str, str]:
    """`http_get` in a worker thread (the host's loop keeps running)."""
    return await asyncio.to_thread(http_get, port, path)


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sample `name{labels}` of an exposition text (labels in any order); 0 if absent."""
    for line in text.splitlines():
        m = re.fullmatch(r"(\w+)(?:\{(.*)\})? (\S+)", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(m.group(3))
    return 0.0
