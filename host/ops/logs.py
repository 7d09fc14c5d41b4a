"""The daemon's logs: one JSON object a line on stderr, or plain text on a terminal.

    setup_logging(config.log)          # once at start, again on SIGHUP (level, format)
    log.info("connection opened", extra={"conn": "c1"})

Extra fields passed with `extra=` (connection id `conn`, request id `req`, message `type`,
`duration_ms`, `outcome`, ...) become keys of the JSON object, or `key=value` pairs in text.
Entry content is never passed to the log: only ids, types, counts and timings.
"""

from __future__ import annotations

import json
import logging
import random
import sys
from collections.abc import Callable
from typing import Any, TextIO

from host.config import LogConfig

__all__ = ["QUIET_LIBRARIES", "JsonFormatter", "RequestLog", "TextFormatter", "quiet_libraries",
           "setup_logging"]

# Libraries whose INFO lines say nothing an operator acts on: websockets logs every handshake
# failure and connection, faiss which CPU build it tried ("Could not load library with AVX512
# support"), httpx every request to an embeddings server. Their warnings and errors still show.
QUIET_LIBRARIES: tuple[str, ...] = ("websockets", "faiss", "httpx", "httpcore")

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "taskName",
}


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, msg, the record's extras, exc if any."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update(_extras(record))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """`time LEVEL logger message key=value ...` for a person at a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = _extras(record)
        if extras:
            tail = " ".join(f"{k}={v}" for k, v in extras.items())
            head, sep, rest = line.partition("\n")  # keep a traceback below the pairs
            line = f"{head} {tail}{sep}{rest}"
        return line


def setup_logging(config: LogConfig, stream: TextIO | None = None) -> None:
    """Send the root logger to `stream` (stderr) at `config.level` in `config.format`.

    `auto` picks text when the stream is a terminal, JSON otherwise. Safe to call again
    (SIGHUP): the previous handler is replaced, not duplicated.
    """
    stream = stream if stream is not None else sys.stderr
    fmt = config.format
    if fmt == "auto":
        fmt = "text" if stream.isatty() else "json"
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(config.level.upper())
    quiet_libraries()


def quiet_libraries() -> None:
    """Keep `QUIET_LIBRARIES` at WARNING, whatever the host's level (at DEBUG websockets
    would log frames, which carry entry content)."""
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


class RequestLog:
    """Logs answered requests (a `RequestHook`): every one at DEBUG, a sample at INFO.

    Reads `config.request_sample` at each call, so a reload applies at once. A record carries
    `conn`, `req`, `type`, `duration_ms` and `outcome` ("ok" or the error code), never content.
    """

    def __init__(self, config_of: Callable[[], LogConfig],
                 logger: logging.Logger | None = None) -> None:
        self._config_of = config_of  # the current one
        self.log = logger or logging.getLogger("a2e_host.request")

    def __call__(self, conn_id: str, req_id: str, msg_type: str, code: str, seconds: float) -> None:
        log = self.log
        if log.isEnabledFor(logging.DEBUG):
            level = logging.DEBUG
        else:
            sample = self._config_of().request_sample
            if not sample or random.random() >= sample or not log.isEnabledFor(logging.INFO):
                return
            level = logging.INFO
        log.log(level, "request", extra={
            "conn": conn_id, "req": req_id, "type": msg_type,
            "duration_ms": round(seconds * 1000, 3), "outcome": code,
        })
