"""The request core (`host.net.pipeline`) driven without a socket: a transport adapter that
records what the pipeline sends and asks."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["Recorder"]


class Recorder:
    """A transport adapter that records what the pipeline sends and asks."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.reading: list[bool] = []

    def send(self, data: bytes) -> None:
        self.sent.append(json.loads(data))

    def set_reading(self, reading: bool) -> None:
        self.reading.append(reading)

    def ids(self) -> list[str]:
        return [m.get("req_id") or m["type"] for m in self.sent]
