"""A request's parameters as the memory browser's pages read them: whole numbers, tags and
texts within bounds (one out of them is refused with 400 through `Refused`, which `UiApp.handle`
answers), and return addresses that stay inside the browser.
"""

from __future__ import annotations

import re
from http import HTTPStatus
from urllib.parse import quote, urlencode

from host.ui.web import PREFIX, Request, Response, refusal
from protocol import validity

__all__ = [
    "MAX_TAGS",
    "MAX_TEXT",
    "Refused",
    "back_to",
    "instant_of",
    "number",
    "query_string",
    "quoted",
    "tags_of",
    "text_of",
    "with_done",
]

MAX_TAGS = 32  # tags in one filter
MAX_TEXT = 1024  # characters of one filter's text (a tag, the key text, an agent)


class Refused(Exception):
    """A request answered early (bad parameter, unknown namespace ...)."""

    def __init__(self, response: Response) -> None:
        self.response = response


def number(text: str, default: int, lo: int, hi: int, name: str) -> int:
    """The whole number `text` (`default` when empty) within `lo` and `hi`."""
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise Refused(refusal(HTTPStatus.BAD_REQUEST, f"{name} must be a whole number")) from None
    return min(max(value, lo), hi)


_SECONDS = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?")  # ASCII digits only (float() takes "١")


def instant_of(text: str, name: str) -> float | None:
    """The instant typed into a form's field `name` (a Search's `as_of`), as epoch seconds;
    None when empty. Plain decimal digits are epoch seconds (the wire's number), anything else
    ISO-8601 text with a zone (the wire's string), both by the rules of
    `protocol.validity.instant`: ValueError, whose text names `name`, when it names no
    instant of the years 1 to 9999."""
    text = text.strip()
    if not text:
        return None
    if len(text) <= validity.MAX_TEXT and _SECONDS.fullmatch(text):
        return validity.instant(float(text), name)
    return validity.instant(text, name)


def tags_of(text: str) -> tuple[str, ...]:
    """The comma-separated tags of a filter, each once, within `MAX_TAGS` and `MAX_TEXT`."""
    tags = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    if len(tags) > MAX_TAGS or any(len(t) > MAX_TEXT for t in tags):
        raise Refused(refusal(HTTPStatus.BAD_REQUEST,
                              f"at most {MAX_TAGS} tags of {MAX_TEXT} characters"))
    return tags


def text_of(req: Request, name: str) -> str:
    """The parameter `name` of the request, at most `MAX_TEXT` characters."""
    value = req.arg(name)
    if len(value) > MAX_TEXT:
        raise Refused(refusal(HTTPStatus.BAD_REQUEST, f"{name} is over {MAX_TEXT} characters"))
    return value


def back_to(text: str, ns: str) -> str:
    """A return address inside the browser: a same-origin path under /ui without control
    characters (CR LF would end the Location header), non-ASCII percent-encoded; anything
    else: the namespace's entries."""
    if text.startswith(PREFIX + "/") and "\\" not in text \
            and not any(c < " " or c == "\x7f" for c in text):
        return quote(text, safe="/?&=%:+,;@._~!$'()*-")
    return f"{PREFIX}/entries?ns={quoted(ns)}"


def quoted(text: str) -> str:
    """`text` as one percent-encoded component of a URL."""
    return quote(text, safe="")


def query_string(req: Request, drop: tuple[str, ...] = ()) -> str:
    """The request's query again, without the parameters named in `drop`."""
    return urlencode([(k, v) for k, vs in req.query.items() if k not in drop for v in vs])


def with_done(back: str, done: str) -> str:
    """The return address `back` with the outcome `done` its page shows as a notice."""
    return f"{back}{'&' if '?' in back else '?'}done={done}"
