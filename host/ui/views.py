"""The memory browser's page bodies: plain functions from data to HTML (escaped, no script).

`host.ui.app` gathers the data (through the store, the memory plugin and the metrics) and
wraps these bodies in `host.ui.html.layout`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from host.ops.gc import GarbageCollector
from host.ops.metrics import LATENCY_BUCKETS
from host.search.judgement import Judged
from host.search.rank import ScoreParts
from host.store.records import BrowsedEntry, NamespaceOverview, StoredEntry
from host.ui.charts import bar, column_chart, line_chart
from host.ui.health import HealthSample
from host.ui.html import (
    compact_json,
    esc,
    fmt_bytes,
    fmt_clock,
    fmt_duration,
    fmt_instant,
    fmt_ms,
    fmt_time,
    pretty_json,
    url,
)

__all__ = [
    "Quota",
    "confirm_export",
    "confirm_forget",
    "entries_page",
    "entry_card",
    "change_cards",
    "health_page",
    "live_page",
    "namespaces_page",
    "no_namespace",
    "search_page",
    "signin_page",
]

TIER_CHOICES = ("", "episodic", "semantic")


@dataclass(frozen=True)
class Quota:
    """The namespace quotas the Namespaces page measures use against."""

    entries: int
    bytes: int


def _hidden(**fields: str) -> str:
    return "".join(f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">'
                   for k, v in fields.items())


def _select(name: str, value: str, choices: Sequence[str], label: str) -> str:
    opts = "".join(
        f'<option value="{esc(c)}"{" selected" if c == value else ""}>{esc(c or "every tier")}'
        "</option>" for c in choices)
    return f'<label>{esc(label)}<select name="{esc(name)}">{opts}</select></label>'


def _input(name: str, value: str, label: str, kind: str = "text", extra: str = "",
           wide: bool = False) -> str:
    cls = ' class="wide"' if wide else ""
    return (f'<label{cls}>{esc(label)}<input type="{kind}" name="{esc(name)}"'
            f' value="{esc(value)}"{extra}></label>')


def signin_page(error: str, csrf: str) -> str:
    """The sign-in form: one field, `token`, posted (never in a URL)."""
    err = f'<p class="error" role="alert">{esc(error)}</p>' if error else ""
    return (
        f'<div class="signin">{err}<form method="post" action="/ui/signin">'
        f'{_hidden(csrf=csrf)}<label for="token">Admin token</label>'
        '<input id="token" name="token" type="password" autocomplete="current-password"'
        ' required autofocus><button type="submit">Sign in</button></form>'
        '<p class="muted">A token with the <code>admin</code> right (see <code>a2e-host token'
        " new</code>). It is kept in an HttpOnly cookie of this browser until you sign out."
        "</p></div>"
    )


def _share(used: int, limit: int) -> str:
    """`used` as a share of `limit`: `12%`, `0.4%`, `<0.1%` (some, but less than shown)."""
    pct = 100 * used / limit if limit > 0 else 0.0
    if 0 < pct < 0.1:
        return "<0.1%"
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.1f}%"


def _quota_use(entries: int, size: int, quota: Quota) -> str:
    """The namespace's use of its two quotas, each with its unit: entries and bytes."""
    return (f'<span class="quotas"><span>{entries:,} of {quota.entries:,} entries'
            f" ({_share(entries, quota.entries)})</span>"
            f"<span>{fmt_bytes(size)} of {fmt_bytes(quota.bytes)}"
            f" ({_share(size, quota.bytes)})</span></span>")


def _agent_use(use: tuple[int, int] | None, quota: Quota | None) -> str:
    """An agent's use of its own quotas, the fuller of entries and bytes ("" when unknown)."""
    if use is None or quota is None:
        return ""
    n, b = use
    fuller = max(n / quota.entries if quota.entries else 0, b / quota.bytes if quota.bytes else 0)
    title = (f"{n:,} of {quota.entries:,} entries, {fmt_bytes(b)} of {fmt_bytes(quota.bytes)}"
             " (limits.max_entries_per_agent, max_bytes_per_agent)")
    return (f'; <span class="agent-quota" title="{esc(title)}">quota'
            f" {_share(round(fuller * 1000), 1000)}</span>")


def namespaces_page(
    rows: Sequence[NamespaceOverview], working: Mapping[str, int], quota: Quota,
    browsable: bool, agent_quota: Quota | None = None,
    agent_use: Mapping[str, Mapping[str, tuple[int, int]]] | None = None,
) -> str:
    """Every namespace the token may read: entries by tier and agent, bytes, quota use, the
    embedding backlog, links to its pages. With `agent_use` ({namespace: {agent: (entries,
    bytes)}}), each agent's use of its own quota (`agent_quota`) beside it."""
    if not browsable:
        return ('<p class="notice">This store does not offer browsing; Search and Health'
                " work.</p>")
    names = sorted({r.namespace for r in rows} | set(working))
    if not names:
        return '<p class="notice">No namespace holds entries yet.</p>'
    by_name = {r.namespace: r for r in rows}
    body = ['<div class="table-wrap"><table><thead><tr><th>namespace</th>'
            '<th class="num">episodic</th><th class="num">semantic</th>'
            '<th class="num">working</th><th class="num">bytes</th><th class="num">quota use</th>'
            '<th class="num">backlog</th><th>agents</th><th>pages</th></tr></thead><tbody>']
    for ns in names:
        r = by_name.get(ns)
        tiers = r.tiers if r else {}
        entries = sum(tiers.values())
        size = r.bytes if r else 0
        uses = (agent_use or {}).get(ns, {})
        agents = ", ".join(
            f"{esc(a)} ({' + '.join(f'{n} {t[:3]}' for t, n in sorted(per.items()))}"
            f"{_agent_use(uses.get(a), agent_quota)})"
            for a, per in sorted((r.agents if r else {}).items()))
        links = " · ".join(
            f'<a href="{url(f"/ui/{p}", {"ns": ns})}">{p.capitalize()}</a>'
            for p in ("entries", "search", "live", "export"))
        body.append(
            f'<tr><td data-label="namespace"><a href="{url("/ui/entries", {"ns": ns})}">'
            f"{esc(ns)}</a></td>"
            f'<td class="num" data-label="episodic">{tiers.get("episodic", 0)}</td>'
            f'<td class="num" data-label="semantic">{tiers.get("semantic", 0)}</td>'
            f'<td class="num" data-label="working">{working.get(ns, 0)}</td>'
            f'<td class="num" data-label="bytes">{fmt_bytes(size)}</td>'
            f'<td class="num" data-label="quota use">{_quota_use(entries, size, quota)}</td>'
            f'<td class="num" data-label="backlog">{r.backlog if r else 0}</td>'
            f'<td data-label="agents">{agents}</td><td data-label="pages">{links}</td></tr>')
    body.append("</tbody></table></div>"
                '<p class="muted">Working entries live in the open sessions of connected'
                " agents and are not listed entry by entry. Quota use: the namespace's persisted"
                " entries and bytes against its quotas (<code>limits.max_entries_per_namespace"
                "</code>, <code>limits.max_bytes_per_namespace</code>); an agent's quota: its"
                " share of its own (<code>limits.max_entries_per_agent</code>,"
                " <code>limits.max_bytes_per_agent</code>, the fuller of the two; the entries it"
                " wrote last). Backlog: entries waiting for their vector.</p>")
    return "".join(body)


def _vector(state: str) -> str:
    text = {"written": "written", "queued": "waiting", "none": "none"}.get(state, state)
    return f'<span class="vec-{esc(state)}">{esc(text)}</span>'


def _ttl_left(ttl: int, updated_at: float, now: float) -> str:
    if ttl <= 0:
        return "never expires"
    return f"{fmt_duration(updated_at + ttl - now)} left"


def _tags(tags: Sequence[str]) -> str:
    return "".join(f'<span class="tag">{esc(t)}</span>' for t in tags) or '<span class="muted">—</span>'


def validity_facts(valid_from: float | None, valid_until: float | None, now: float
                   ) -> tuple[list[tuple[str, str]], str]:
    """An entry's time of a fact (`protocol.validity`: [valid_from, valid_until), each
    bound only when set) as the facts of its card, each bound with how far it is from `now`,
    and a mark for its head when the fact no longer holds or does not hold yet ("" while it
    holds, and for an entry without bounds)."""
    facts = []
    if valid_from is not None:
        when = (f"in {fmt_duration(valid_from - now)}" if valid_from > now
                else f"{fmt_duration(now - valid_from)} ago")
        facts.append(("valid from", f'{fmt_instant(valid_from)} <span class="muted">'
                                    f"({when})</span>"))
    if valid_until is not None:
        when = (f"ended {fmt_duration(now - valid_until)} ago" if valid_until <= now
                else f"in {fmt_duration(valid_until - now)}")
        facts.append(("valid until", f'{fmt_instant(valid_until)} <span class="muted">'
                                     f"({when})</span>"))
    mark = ""
    if valid_until is not None and valid_until <= now:
        mark = ('<span class="validity ended" title="its valid_until has passed: a retrieve'
                ' as of now leaves it out">no longer valid</span>')
    elif valid_from is not None and valid_from > now:
        mark = ('<span class="validity pending" title="its valid_from is still to come: a'
                ' retrieve as of now leaves it out">not valid yet</span>')
    return facts, mark


def entry_card(
    e: BrowsedEntry | StoredEntry, ns: str, now: float, *, may_forget: bool, back: str,
    vector: str | None = None, extra: str = "", rank: int | None = None,
) -> str:
    """One entry: key, tier, writer, content (pretty JSON, folded when long), tags, score,
    TTL left, created and updated, its time of a fact (`validity_facts`, when it has one),
    whether its vector is written, and a Forget link."""
    agent = e.agent if isinstance(e, BrowsedEntry) else (e.owner or "")
    state = e.vector if isinstance(e, BrowsedEntry) else vector
    actions = ""
    if may_forget and e.id is not None:
        actions = (f'<span class="actions"><a class="button danger" href="'
                   f'{url("/ui/forget", {"ns": ns, "id": e.id, "back": back})}">Forget…</a></span>')
    num = f'<span class="rank">#{rank}</span>' if rank is not None else ""
    who = f'<span class="muted">by {esc(agent)}</span>' if agent else ""
    facts = [
        ("tags", _tags(e.tags)),
        ("score", f"{e.score:g}"),
        ("TTL", _ttl_left(e.ttl, e.updated_at, now)),
        ("created", fmt_time(e.created_at)),
        ("updated", fmt_time(e.updated_at)),
    ]
    valid, mark = validity_facts(e.valid_from, e.valid_until, now)
    facts += valid
    if state is not None:
        facts.append(("vector", _vector(state)))
    if e.source:
        facts.append(("source", esc(e.source)))
    dl = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts)
    return (f'<article class="entry" id="e{e.id}">'
            f'<div class="head">{num}<span class="key">{esc(compact_json(e.key))}</span>'
            f'<span class="tier">{esc(e.tier)}</span>{mark}{who}{actions}</div>'
            f"{pretty_json(e.content)}<dl>{dl}</dl>{extra}</article>")


def _as_of_input(text: str, now: float) -> str:
    """The `as_of` field of a filter form: an instant, as a retrieve's `as_of` takes it."""
    example = fmt_instant(math.floor(now)).split('"', 2)[1]  # now, in an ISO-8601 form it takes
    why = ("only the entries valid at this instant: ISO-8601 with a zone (2026-03-01T09:00:00Z,"
           " 2026-03-01T10:00:00+01:00) or epoch seconds")
    return _input("as_of", text, "as of (instant)",
                  extra=f' placeholder="{esc(example)}" title="{esc(why)}" maxlength="64"'
                        ' spellcheck="false"')


def as_of_line(as_of: float | None) -> str:
    """What an `as_of` filter kept, said under the form ("" without one)."""
    if as_of is None:
        return ""
    return (f'<p class="muted" id="as-of">Only the entries valid at {fmt_instant(as_of)}'
            " (<code>as_of</code>: no <code>valid_from</code> after it, no"
            " <code>valid_until</code> at or before it; an entry without bounds holds at every"
            " time).</p>")


def entries_page(
    ns: str, entries: Sequence[BrowsedEntry], total: int, now: float, *,
    tier: str, agent: str, tags: str, key: str, page: int, page_size: int,
    may_forget: Mapping[str, bool], notice: str, back: str, as_of: str = "",
    as_of_at: float | None = None, error: str = "",
) -> str:
    """The filter form and one page of a namespace's entries, newest first; with `as_of`
    (the text given, `as_of_at` the instant it names) only those valid then; `error` instead
    of any entry when a filter named nothing."""
    form = (f'<form class="filters" method="get" action="/ui/entries">{_hidden(ns=ns)}'
            f'{_select("tier", tier, TIER_CHOICES, "tier")}'
            f'{_input("agent", agent, "agent (writer)")}'
            f'{_input("tags", tags, "tags (all of, comma-separated)")}'
            f'{_input("key", key, "key contains", kind="search")}'
            f"{_as_of_input(as_of, now)}"
            '<button type="submit">Filter</button></form>')
    if error:
        return f'{form}<p class="error" role="alert">{esc(error)}</p>'
    note = f'<p class="notice" role="status">{esc(notice)}</p>' if notice else ""
    note += as_of_line(as_of_at)
    first = (page - 1) * page_size
    if not entries:
        return f'{form}{note}<p class="notice">No entry matches.</p>'
    shown = f"{first + 1}–{first + len(entries)} of {total}"
    cards = "".join(entry_card(e, ns, now, may_forget=may_forget.get(e.tier, False), back=back)
                    for e in entries)
    params = {"ns": ns, "tier": tier, "agent": agent, "tags": tags, "key": key, "as_of": as_of}
    prev = (f'<a href="{url("/ui/entries", {**params, "page": page - 1})}">← newer</a>'
            if page > 1 else "")
    nxt = (f'<a href="{url("/ui/entries", {**params, "page": page + 1})}">older →</a>'
           if first + len(entries) < total else "")
    pager = f'<nav class="pager"><span class="muted">{shown}</span>{prev}{nxt}</nav>'
    return f'{form}{note}{pager}<div class="entries">{cards}</div>{pager}'


def _part(name: str, value: float | None, shown: str, share: float | None = None) -> str:
    return (f'<div class="part" data-part="{esc(name)}"><span class="muted">{esc(name)}</span>'
            f' <strong>{esc(shown)}</strong><div class="bar">'
            f"{bar(share if share is not None else value)}</div></div>")


def _fmt(v: float | None, digits: int = 3) -> str:
    return "—" if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


def score_parts_html(p: ScoreParts, top_keyword: float) -> str:
    """A hit's relevance, combined score and their parts, each with a small bar."""
    kw_share = p.keyword / top_keyword if p.keyword is not None and top_keyword > 0 else None
    vec_share = (p.vector + 1) / 2 if p.vector is not None else None  # cosine in [-1, 1]
    return ('<div class="parts">'
            + _part("combined", p.combined, _fmt(p.combined))
            + _part("relevance", p.relevance, _fmt(p.relevance))
            + _part("fused", p.fused, _fmt(p.fused))
            + _part("keyword", p.keyword, "BM25 " + _fmt(p.keyword, 2), kw_share)
            + _part("vector", p.vector, "cosine " + _fmt(p.vector), vec_share)
            + _part("importance", p.importance, _fmt(p.importance))
            + _part("recency", p.recency, _fmt(p.recency))
            + "</div>")


def judged_html(j: Judged | None) -> str:
    """What a hit carries by the judgement of the reply: the keys of the older entries it
    supersedes (it ranks above them) and of the near-duplicates it stands for."""
    if j is None:
        return ""
    rows = []
    if j.supersedes:
        rows.append(("supersedes", j.supersedes))
    if j.collapsed:
        rows.append((f"stands for {len(j.collapsed)}", j.collapsed))
    dl = "".join(f"<div><dt>{esc(name)}</dt><dd>"
                 + " ".join(f"<code>{esc(compact_json(k))}</code>" for k in keys)
                 + "</dd></div>" for name, keys in rows)
    return f'<dl class="judged">{dl}</dl>'


_WHY = (  # the figures under each hit, in the order the cards show them
    ("combined", "the order of this list, as a client's retrieve orders its reply: fused,"
     " importance and recency mixed with the host's <code>[ranking]</code> weights"),
    ("relevance", "how well the entry matches the query, from 0 to 1: what"
     " <code>min_score</code> filters on and the reply reports"),
    ("fused", "keyword and vector together, each compared with the other hits'"),
    ("keyword", "how strongly the query's words occur in the entry (BM25, higher is better)"),
    ("vector", "how close the entry's meaning is to the query's (cosine, from -1 to 1)"),
    ("importance", "the score the entry was stored with"),
    ("recency", "1 when just updated, lower as it ages"),
    ("supersedes", "the older entries this one says changed: it ranks just above them, as in"
     " a client's retrieve"),
    ("stands for", "with <em>collapse near-duplicates</em>: the entries saying the same thing"
     " that this one, the newest of them, replaces in the list"),
)


def search_page(
    ns: str, *, q: str, tier: str, tags: str, limit: str, min_score: str, agent: str,
    hits: Sequence[tuple[StoredEntry, ScoreParts]], total: int, now: float, error: str,
    may_forget: Mapping[str, bool], back: str, note: str = "", collapse: bool = False,
    judged: Mapping[int, Judged] | None = None, as_of: str = "", as_of_at: float | None = None,
) -> str:
    """The search box (field `q`) with the retrieve's filters, then the hits in rank order,
    each with its score parts and what the judgement of the reply says it carries (`judged`,
    by `id()` of the entry: the keys it supersedes, the near-duplicates it stands for when
    `collapse` was asked), and `note`, when the search left some agents out. `as_of`: the
    retrieve's `as_of` as typed, `as_of_at` the instant it names."""
    fields = [
        _input("q", q, "query", kind="search", wide=True),
        _select("tier", tier, TIER_CHOICES, "tier"),
        _input("tags", tags, "tags (all of)"),
        _input("limit", limit, "limit", kind="number", extra=" min=1"),
        _input("min_score", min_score, "min_score (relevance, 0 to 1)", kind="number",
               extra=" min=0 max=1 step=any"),
        _input("agent", agent, "agent (empty: every agent)"),
        _as_of_input(as_of, now),
        f'<label><input type="checkbox" name="collapse" value="1"'
        f'{" checked" if collapse else ""}> collapse near-duplicates</label>',
    ]
    form = (f'<form class="filters" method="get" action="/ui/search">{_hidden(ns=ns)}'
            f'{"".join(fields)}<button type="submit">Search</button></form>')
    if error:
        return f'{form}<p class="error" role="alert">{esc(error)}</p>'
    if not q:
        return (f'{form}<p class="muted">Runs the retrieve a client would send with this'
                " query and these filters, and shows why each hit ranked where it did.</p>")
    if note:
        form += f'<p class="notice">{esc(note)}</p>'
    form += as_of_line(as_of_at)
    if not hits:
        return f'{form}<p class="notice">No entry matches.</p>'
    top_kw = max((p.keyword or 0.0 for _, p in hits), default=0.0)
    cards = "".join(
        entry_card(e, ns, now, may_forget=may_forget.get(e.tier, False), back=back,
                   extra=score_parts_html(p, top_kw) + judged_html((judged or {}).get(id(e))),
                   rank=i)
        for i, (e, p) in enumerate(hits, start=1))
    why = "".join(f"<li><strong>{name}</strong>: {text}</li>" for name, text in _WHY)
    return (f'{form}<p class="muted">{len(hits)} shown of {total} matches, best first. Under'
            f' each hit, why it ranked there:</p><ul class="why muted">{why}</ul>'
            f'<div class="entries" id="hits">{cards}</div>')


def _bound(value: object) -> float | None:
    """A bound of a change log's entry (a number when set, `protocol.validity`)."""
    return float(value) if isinstance(value, int | float) else None


def change_cards(events: Sequence[tuple[str, dict[str, Any]]], now: float) -> str:
    """One card an entry of the change log, in the order given: what happened (`stored`,
    `forgotten`, `expired`, `evicted`, `consolidated`), the key, tier, tags, for a store its
    content, times and time of a fact (its bounds against `now`), for a consolidation what
    was done to the entry (`superseded`: retired into its history; `skipped`: the new one not
    stored), the new entry's key and the similarity that decided."""
    cards = []
    for op, e in events:
        facts = [("tags", _tags(e.get("tags", [])))]
        content = mark = ""
        if op == "stored":
            content = pretty_json(json.dumps(e.get("content")).encode())
            facts += [("score", f"{e.get('score', 0):g}"),
                      ("updated", fmt_time(float(e.get("updated_at", 0))))]
            valid, mark = validity_facts(_bound(e.get("valid_from")),
                                         _bound(e.get("valid_until")), now)
            facts += valid
        elif op == "consolidated":
            with_key = compact_json(json.dumps(e.get("with")).encode())
            facts += [("action", esc(str(e.get("action", "")))),
                      ("with", f"<code>{esc(with_key)}</code>"),
                      ("similarity", _fmt(float(e.get("similarity", 0.0))))]
        dl = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts)
        cards.append(
            f'<article class="entry change op-{esc(op)}"><div class="head">'
            f'<span class="op">{esc(op)}</span>'
            f'<span class="key">{esc(compact_json(json.dumps(e.get("key")).encode()))}</span>'
            f'<span class="tier">{esc(e.get("tier", ""))}</span>{mark}</div>{content}'
            f"<dl>{dl}</dl></article>")
    return "".join(cards)


def live_page(ns: str, recent: Sequence[BrowsedEntry], after: str, now: float,
              may_forget: Mapping[str, bool], every_ms: int, back: str) -> str:
    """The latest writes of a namespace, newest first; with a change log (`after`, its
    cursor) the script puts each change (stores, forgets, expiries) on top as it commits."""
    empty = '<p class="notice" id="live-empty">No entry yet.</p>' if not recent else ""
    follow = (" With JavaScript on, every change (stored, forgotten, expired, evicted,"
              " consolidated) appears"
              " on top as it is committed; without it, the page reloads itself every 10 s."
              if after else " Reload the page for newer ones (this store keeps no change log).")
    cards = "".join(entry_card(e, ns, now, may_forget=may_forget.get(e.tier, False), back=back)
                    for e in recent)
    return (f'<p class="muted" id="live-status">The latest writes, newest first.{follow}'
            ' <span id="live-checked"></span></p>'
            f'{empty}<div class="entries live-list" id="live-list" data-ns="{esc(ns)}"'
            f' data-after="{esc(after)}" data-every="{every_ms}">{cards}</div>')


def no_namespace(ns: str, notice: str = "") -> str:
    """The body of the 404 of a namespace that holds nothing (or that the token may not read:
    the same words), with the notice of the action that led here, if any."""
    note = f'<p class="notice" role="status">{esc(notice)}</p>' if notice else ""
    return (f'{note}<p class="error" role="alert">No such namespace: <strong>{esc(ns)}'
            "</strong>. Nothing is stored in it that you may read; a namespace appears when an"
            " agent stores its first entry in it.</p>"
            f'<p><a href="{url("/ui/namespaces")}">See the namespaces</a></p>')


def confirm_forget(e: BrowsedEntry, ns: str, now: float, csrf: str, back: str) -> str:
    """Forget one entry: the entry, a button that posts the forget, a way back."""
    return (f'<div class="confirm"><p>Forget this {esc(e.tier)} entry of <strong>{esc(ns)}'
            f"</strong>? It is deleted for every agent, and cannot be brought back.</p>"
            f"{entry_card(e, ns, now, may_forget=False, back=back)}<p>"
            f'<form method="post" action="/ui/forget">'
            f"{_hidden(csrf=csrf, ns=ns, id=str(e.id), back=back)}"
            '<button class="danger" type="submit">Forget this entry</button></form> '
            f'<a href="{esc(back)}">Cancel</a></p></div>')


def confirm_export(ns: str, entries: int, csrf: str) -> str:
    """Export a namespace: what it holds, a button that posts the export."""
    return (f'<div class="confirm"><p>Export the {entries} live persisted entries of'
            f" <strong>{esc(ns)}</strong> as JSON Lines (the format of <code>a2e-host"
            " export</code>, which <code>a2e-host import</code> reads back)? The file holds"
            " every entry's content.</p><p>"
            f'<form method="post" action="/ui/export">{_hidden(csrf=csrf, ns=ns)}'
            '<button type="submit">Download the export</button></form> '
            f'<a href="{url("/ui/namespaces")}">Cancel</a></p></div>')


def _card(title: str, now_text: str, chart: str, legend: str = "") -> str:
    leg = f'<div class="legend">{legend}</div>' if legend else ""
    return (f'<section class="chart"><h3>{esc(title)}</h3><div class="now">{esc(now_text)}'
            f"</div>{chart}{leg}</section>")


def _count(v: float) -> str:
    return f"{v:g}"


def _per_second(v: float) -> str:
    return f"{v:.3g}/s"


def health_page(samples: Sequence[HealthSample], gc: GarbageCollector, interval: float,
                every_ms: int) -> str:
    """Requests a second and p99 by message type, connections, the backlog and the last GC,
    as small charts over the samples kept, each with its value axis (unit included) and its
    time axis (UTC)."""
    span = f"the last {fmt_duration(interval * max(len(samples) - 1, 0))}" if samples else ""
    last = samples[-1] if samples else None
    times = (fmt_clock(samples[0].at, zone=False), fmt_clock(samples[-1].at)) if samples \
        else ("", "")
    gc_text = (f"{fmt_time(gc.last_run)}, {gc.last_deleted} deleted" if gc.last_run
               else "not run yet")

    def counts(title: str, values: Sequence[float | None], label: str) -> str:
        return _card(title, str(values[-1]) if values else "—",
                     line_chart(values, label, _count, times, whole=True))

    cards = [
        counts("connections open", [s.connections for s in samples], "connections open"),
        counts("requests in flight", [s.in_flight for s in samples], "requests in flight"),
        counts("embedding backlog", [s.backlog for s in samples], "entries waiting for a vector"),
        _card("last garbage collection", gc_text, "",
              f"every {fmt_duration(gc.interval)}; {gc.deleted_total} expired entries"
              " deleted since start"),
    ]
    kinds = sorted({k for s in samples for k in s.rates})
    for kind in kinds:
        rates = [s.rates.get(kind) for s in samples]
        p99 = [s.p99.get(kind) for s in samples]
        now_rate = last.rates.get(kind, 0.0) if last else 0.0
        seen = [v for v in p99 if v is not None]
        shown = [v if v is None or math.isfinite(v) else LATENCY_BUCKETS[-1] for v in p99]
        peak = max((r for r in rates if r is not None), default=0.0)
        p99_text = f"last p99 {fmt_ms(seen[-1])}" if seen else "no p99 yet"
        cards.append(_card(
            kind, f"{now_rate:.3g}/s · {p99_text}",
            f'<div class="legend one">requests a second (peak {peak:.3g}/s)</div>'
            + line_chart(rates, f"{kind} requests a second", _per_second, times)
            + f'<div class="legend two">p99 latency, log scale (peak'
            f' {fmt_ms(max(seen)) if seen else "—"})</div>'
            + column_chart(shown, f"{kind} p99 latency", fmt_ms, times, LATENCY_BUCKETS[0])))
    if not kinds:
        cards.append(_card("requests", "none yet", "",
                           "a chart a message type appears after its first request"))
    return (f'<p class="muted">Sampled from the host\'s own metrics every {interval:g} s;'
            f" {esc(span)}, times in UTC. An interval without a request of a kind has no p99"
            " column. The same figures are at <code>/metrics</code>.</p>"
            f'<div class="charts" id="charts" data-every="{every_ms}">{"".join(cards)}</div>')
