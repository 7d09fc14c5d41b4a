"""The `[history]` and `[consolidation]` sections: how much of an entry's past the host keeps
(`memory/history`), and the write policy of consolidation on write (docs/protocol.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from host.config.sections import _Section

__all__ = ["ConsolidationConfig", "HistoryConfig"]

Policy = Literal["keep", "skip", "supersede"]


class HistoryConfig(_Section):
    """History (`memory/history`): the earlier contents of entries a store replaced, and the
    entries consolidation on write retired, each readable until one of these bounds drops it."""

    keep: int = Field(
        10, ge=1, le=1000, description="Earlier versions kept a key (the newest); a store that"
        " changes an entry's content keeps the version it replaces.")
    days: float = Field(
        30.0, gt=0, description="Days an earlier version stays readable after it was replaced.")
    max_retired: int = Field(
        10_000, ge=0, description="Entries retired by consolidation (`supersede`) whose content"
        " a namespace keeps, the newest; with `keep` this bounds what history holds beside the"
        " live entries.")


class ConsolidationConfig(_Section):
    """Consolidation on write: what a store does when the namespace already holds a
    near-duplicate (docs/search.md, "Judgement of a reply: the present first, no repeats").
    A request's `consolidate` overrides it."""

    policy: Policy = Field(
        "keep", description="Every namespace's policy but those named in `namespaces`: `keep`"
        " (store every entry), `skip` (store nothing when a near-duplicate is stored already)"
        " or `supersede` (store it, and retire the older near-duplicate or the entry it"
        " updates into the history).")
    namespaces: dict[str, Policy] = Field(
        default_factory=dict, description="Policies of named namespaces, overriding `policy`.")
