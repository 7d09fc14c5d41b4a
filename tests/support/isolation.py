"""The isolation matrix's layout and its tier rule, shared by the read paths' test
(`test_isolation`) and the change streams' (`test_watch_isolation`): five sessions, two agents,
two namespaces, three tiers; an entry of session W in tier T is visible to session O when
working: O is W; episodic: same agent and namespace; semantic: same namespace."""

from __future__ import annotations

from dataclasses import dataclass

from host.client import MemoryClient

__all__ = ["LAYOUT", "TIERS", "Session", "key", "visible"]

TIERS = ("working", "episodic", "semantic")
LAYOUT = (("s1", "a1", "n1"), ("s2", "a1", "n1"), ("s3", "a2", "n1"), ("s4", "a1", "n2"),
          ("s5", "a2", "n2"))


@dataclass
class Session:
    """One memory session of the matrix and the client it lives on."""

    name: str
    agent: str
    ns: str
    client: MemoryClient
    memory_id: str = ""


def key(s: Session, tier: str) -> dict[str, str]:
    """The key of the entry session `s` writes into `tier`."""
    return {"by": s.name, "tier": tier}


def visible(o: Session, w: Session, tier: str) -> bool:
    """The tier rule: may observer `o` see what `w` wrote into `tier`?"""
    if tier == "working":
        return o.name == w.name
    if tier == "episodic":
        return o.agent == w.agent and o.ns == w.ns
    return o.ns == w.ns
