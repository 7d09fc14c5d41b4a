"""The `.cursorrules` file format: an optional title and `## ` sections, bodies kept verbatim.

Grammar (lines end with `\\n`; a `\\r` before it belongs to the line and is kept in bodies):

- Leading blank lines are skipped. If the first other line starts with `# `, the rest of it
  (stripped) is the file's title; an empty title is an error.
- Every line that starts with `## ` outside a fenced code block opens a section; the rest of the
  line (stripped) is the section's title. An empty or repeated title is an error.
- Everything between a heading line and the next heading (or the end of the file) is that
  section's body, verbatim. Text between the title and the first heading (or the whole file when
  there is no heading) is the preamble: a section with title `""`, kept only when it holds more
  than whitespace.
- Fenced code blocks (a line opening with three or more backticks or tildes, up to three spaces
  of indentation, closed by a line of at least as many of the same character) may hold `## `
  lines that are body text, not headings. A fence left open at the end is an error.

`parse` raises `RulesSyntaxError` (with source and 1-based line) for a bad file; it never
returns a partial document. `render(doc)` writes a document back so that
`parse(render(doc)) == doc` for every `doc` that `parse` returned.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["RulesDoc", "RulesSyntaxError", "Section", "parse", "parse_bytes", "render"]

_FENCE_OPEN = re.compile(r" {0,3}(`{3,}|~{3,})")
_TITLE = "# "
_HEADING = "## "


class RulesSyntaxError(ValueError):
    """A rules file that cannot be parsed: `source`, 1-based `line` and a human `message`."""

    def __init__(self, source: str, line: int, message: str) -> None:
        super().__init__(f"{source}:{line}: {message}")
        self.source = source
        self.line = line
        self.message = message


@dataclass(frozen=True, slots=True)
class Section:
    """One section: its `title` ("" for the preamble) and its `body`, verbatim.

    `line` is the 1-based line of the heading (of the first preamble line for the preamble);
    it is informative and takes no part in equality.
    """

    title: str
    body: str
    line: int = field(default=0, compare=False)


@dataclass(frozen=True, slots=True)
class RulesDoc:
    """A parsed rules file: optional `title` and its sections in file order."""

    title: str | None
    sections: tuple[Section, ...]


def _lines(text: str) -> Iterator[str]:
    """The lines of `text`, each with its `\\n` (the last one may lack it)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        if end < 0:
            yield text[start:]
            return
        yield text[start : end + 1]
        start = end + 1


def parse(text: str, source: str = "<string>") -> RulesDoc:
    """Parse one rules file's text. Raises `RulesSyntaxError` naming `source` and the line."""
    title: str | None = None
    seen_content = False
    sections: list[Section] = []
    first_line_of: dict[str, int] = {}
    cur_title, cur_line, cur_body = "", 1, []  # the preamble until the first heading
    fence: str | None = None  # the opening fence run while inside a fenced block
    fence_line = 0
    lineno = 0
    for lineno, line in enumerate(_lines(text), start=1):
        bare = line.removesuffix("\n")
        if fence is not None:
            stripped = bare.strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence) \
                    and len(bare) - len(bare.lstrip(" ")) <= 3:
                fence = None
            cur_body.append(line)
            continue
        if not seen_content and not bare.strip():
            cur_line = lineno + 1
            continue  # leading blank lines belong to nothing
        if not seen_content and bare.startswith(_TITLE):
            seen_content = True
            title = bare[len(_TITLE):].strip()
            if not title:
                raise RulesSyntaxError(source, lineno, "empty title after '# '")
            cur_line = lineno + 1
            continue
        seen_content = True
        if bare.startswith(_HEADING):
            _close(sections, cur_title, cur_line, cur_body)
            cur_title, cur_line, cur_body = bare[len(_HEADING):].strip(), lineno, []
            if not cur_title:
                raise RulesSyntaxError(source, lineno, "empty section title after '## '")
            if cur_title in first_line_of:
                raise RulesSyntaxError(
                    source, lineno,
                    f"duplicate section {cur_title!r} (first at line {first_line_of[cur_title]})",
                )
            first_line_of[cur_title] = lineno
            continue
        opened = _FENCE_OPEN.match(bare)
        if opened:
            fence, fence_line = opened.group(1), lineno
        cur_body.append(line)
    if fence is not None:
        raise RulesSyntaxError(source, fence_line, f"code fence {fence!r} is never closed")
    _close(sections, cur_title, cur_line, cur_body)
    return RulesDoc(title=title, sections=tuple(sections))


def _close(sections: list[Section], title: str, line: int, body: list[str]) -> None:
    """Append the section being read; a blank preamble is dropped."""
    text = "".join(body)
    if title or text.strip():
        sections.append(Section(title=title, body=text, line=line))


def parse_bytes(data: bytes, source: str = "<bytes>") -> RulesDoc:
    """Decode UTF-8 (a leading BOM is dropped) and `parse`.

    Raises `RulesSyntaxError` for bytes that are not UTF-8 or hold a NUL (a binary file), with
    the line of the first bad byte.
    """
    nul = data.find(b"\x00")
    if nul >= 0:
        raise RulesSyntaxError(source, data.count(b"\n", 0, nul) + 1, "NUL byte: not a text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise RulesSyntaxError(source, line, f"not UTF-8 ({exc.reason})") from None
    return parse(text, source)


def render(doc: RulesDoc) -> str:
    """Write `doc` as rules-file text; `parse(render(doc)) == doc` for any parsed `doc`.

    A body that does not end with a newline gets one when another section follows it (a parsed
    body only lacks one at the end of the file).
    """
    out: list[str] = []
    if doc.title is not None:
        out.append(f"{_TITLE}{doc.title}\n")
    for i, section in enumerate(doc.sections):
        if section.title:
            out.append(f"{_HEADING}{section.title}\n")
        out.append(section.body)
        last = i == len(doc.sections) - 1
        if not last and section.body and not section.body.endswith("\n"):
            out.append("\n")
    return "".join(out)
