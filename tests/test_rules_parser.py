"""Tests for host/rules/parser.py: the `.cursorrules` section parser and its renderer."""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from host.rules.parser import RulesDoc, RulesSyntaxError, Section, parse, parse_bytes, render

# Lines shaped like the parser's cases: titles, headings, fences, look-alikes, plain text.
_WORD = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\n", exclude_categories=("Cs",)),
    max_size=12,
)
_FENCY = st.sampled_from(["```", "```python", "~~~", "````", "   ```", "    ```"])
_ODD = st.sampled_from(["##", "#", "", " ", "\r", "##x", " ## not a heading", "#\tx", "text\r"])
_LINE = st.one_of(
    st.builds(lambda w: "# " + w, _WORD),
    st.builds(lambda w: "## " + w, _WORD),
    st.builds(lambda w: "### " + w, _WORD),
    _ODD,
    _WORD,
    _WORD,
    _FENCY,
)
_TEXT = st.builds(
    lambda lines, end: "\n".join(lines) + end, st.lists(_LINE, max_size=25), st.sampled_from(["", "\n"])
)
# Body lines that can never open a section or a fence.
_BODY_LINE = _WORD.filter(lambda s: not s.startswith("## ") and "```" not in s and "~~~" not in s)
_TITLE_TEXT = _WORD.map(str.strip).filter(bool)


@settings(max_examples=300)
@given(_TEXT)
def test_parse_render_parse_gives_the_same_sections(text: str) -> None:
    """For any text, parse either reports a line in the file or survives render and reparse."""
    try:
        doc = parse(text, "t.cursorrules")
    except RulesSyntaxError as exc:
        event("syntax error")
        assert exc.source == "t.cursorrules"
        assert 1 <= exc.line <= text.count("\n") + 1
        return
    event(f"sections={min(len(doc.sections), 3)}")
    rendered = render(doc)
    again = parse(rendered, "t.cursorrules")
    assert again == doc
    assert render(again) == rendered


@given(
    st.one_of(st.none(), _TITLE_TEXT),
    st.lists(
        st.tuples(_TITLE_TEXT, st.lists(_BODY_LINE, max_size=5)),
        max_size=6,
        unique_by=lambda s: s[0],
    ),
)
def test_section_bodies_are_kept_verbatim(title: str | None, sections: list) -> None:
    """Bodies under `## ` headings come back character for character; render gives the text back."""
    text = "" if title is None else f"# {title}\n"
    expected = []
    for name, lines in sections:
        body = "".join(line + "\n" for line in lines)
        text += f"## {name}\n{body}"
        expected.append(Section(name, body))
    doc = parse(text)
    assert doc == RulesDoc(title, tuple(expected))
    assert render(doc) == text


def test_a_file_without_headings_is_one_preamble_section() -> None:
    """Plain guidance with no heading is kept whole as the untitled preamble."""
    doc = parse("\n\nAlways write tests.\nPrefer small modules.\n")
    assert doc.title is None
    assert doc.sections == (Section("", "Always write tests.\nPrefer small modules.\n"),)
    assert doc.sections[0].line == 3


def test_title_preamble_and_sections() -> None:
    """A `# ` first line is the title, text before the first heading the preamble."""
    doc = parse("# Python rules\nIntro.\n## Style\nBlack.\n### Detail\nmore\n## Tests\npytest")
    assert doc.title == "Python rules"
    assert [(s.title, s.body, s.line) for s in doc.sections] == [
        ("", "Intro.\n", 2),
        ("Style", "Black.\n### Detail\nmore\n", 3),
        ("Tests", "pytest", 7),
    ]


def test_headings_inside_a_code_fence_are_body_text() -> None:
    """A `## ` line between fences belongs to the section's body."""
    text = "## Example\n```markdown\n## not a section\n```\nafter\n## Next\nx\n"
    doc = parse(text)
    assert [s.title for s in doc.sections] == ["Example", "Next"]
    assert "## not a section" in doc.sections[0].body


def test_a_fence_closes_only_with_as_many_of_its_own_character() -> None:
    """A shorter run or the other fence character does not close a fence."""
    text = "## A\n````\n```\n~~~~\n## inside\n````\n## B\nx\n"
    assert [s.title for s in parse(text).sections] == ["A", "B"]
    with pytest.raises(RulesSyntaxError) as caught:
        parse("## A\n    ```\n## B\n~~~\n## C\n```x\n")
    assert caught.value.line == 4  # the indented line was body text; ~~~ opens, never closes


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("## A\nx\n```\n## B\n", 3, "never closed"),
        ("## A\nx\n## A\n", 3, "duplicate section 'A' (first at line 1)"),
        ("intro\n##  \n", 2, "empty section title"),
        ("\n# \n", 2, "empty title"),
    ],
)
def test_bad_files_name_the_line(text: str, line: int, words: str) -> None:
    """Each syntax error names the source and the line where it is."""
    with pytest.raises(RulesSyntaxError) as caught:
        parse(text, "modules/api.cursorrules")
    assert caught.value.line == line
    assert words in caught.value.message
    assert str(caught.value).startswith(f"modules/api.cursorrules:{line}: ")


def test_parse_bytes_rejects_bad_utf8_and_nul_with_the_line() -> None:
    """Undecodable or binary bytes are syntax errors on the line of the first bad byte."""
    with pytest.raises(RulesSyntaxError) as bad_utf8:
        parse_bytes(b"ok\nok\n\xff\n", "f.cursorrules")
    assert bad_utf8.value.line == 3 and "UTF-8" in bad_utf8.value.message
    with pytest.raises(RulesSyntaxError) as nul:
        parse_bytes(b"ok\n\x00", "f.cursorrules")
    assert nul.value.line == 2
    assert parse_bytes("\ufeff# T\n".encode()).title == "T"
