"""The names the host keys memory by, each checked here and nowhere else.

A namespace and an agent (`scope.agent`, the handshake's `agent_id`) are any text but a control
character (U+0000-U+001F, U+007F-U+009F), at most `MAX_NAME_BYTES` of UTF-8: they are kept on
every row, in the keys of in-memory indexes and in file names, and compared byte for byte, so a
name with an invisible character would be another tenant's look-alike (U+0000 is a separator of
index keys). A vector space (`SPACE`) and a member of a filter path, `key_prefix` or
`memory/paths` (`MEMBER`) are narrower still. Every pattern matches the whole string
(`fullmatch`: a `$` lets a trailing newline through).
"""

from __future__ import annotations

import re

from protocol.errors import ErrorCode, ProtocolError

__all__ = ["MAX_NAME_BYTES", "MEMBER", "SPACE", "check_name", "is_member", "is_space",
           "name_problem"]

MAX_NAME_BYTES = 256  # a namespace or an agent, in UTF-8
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
MEMBER = re.compile(r"[A-Za-z0-9_-]{1,128}")  # a member of a filter path or a key
SPACE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # a client vector space


def name_problem(name: str) -> str | None:
    """What keeps `name` from being a namespace or an agent ("" is the caller's to judge), or
    None."""
    if len(name) > MAX_NAME_BYTES or len(
            name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:  # first: a short scan
        return f"is over {MAX_NAME_BYTES} bytes"
    bad = CONTROL.search(name)
    if bad is not None:
        return f"holds the control character U+{ord(bad.group()):04X}"
    return None


def check_name(name: str, field: str, req_id: str = "") -> str:
    """`name`, a namespace or an agent; `invalid_message` naming `field` if it cannot be one."""
    problem = name_problem(name)
    if problem is not None:
        raise ProtocolError(ErrorCode.INVALID_MESSAGE, f"{field} {problem}", req_id=req_id,
                            field=field)
    return name


def is_member(name: str) -> bool:
    """True for a member name of a filter path, `key_prefix` or `memory/paths`."""
    return MEMBER.fullmatch(name) is not None


def is_space(name: str) -> bool:
    """True for a client vector space's name."""
    return SPACE.fullmatch(name) is not None
