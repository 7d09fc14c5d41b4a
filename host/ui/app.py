"""`UiApp`: the memory browser, a sans-I/O web app under `/ui` (docs/ui.md).

    app = UiApp(deps)                 # what it reads: store, memory plugin, auth, metrics ...
    response = await app.handle(Request.build("GET", "/ui/namespaces", headers, remote="127.0.0.1"))

Pages (GET): `/ui/namespaces`, `/ui/entries`, `/ui/search`, `/ui/live` (+ `/ui/live.json`,
the store's change log after a cursor, what its script polls), `/ui/health`, the sign-in form `/ui/signin`, and the confirmations
`/ui/forget` and `/ui/export`. Actions (POST, each with the CSRF check of
`host.ui.signin`): sign in, sign out, forget an entry, export a namespace.

Every request first passes `Gatekeeper.network` (authentication off: loopback only), then,
with authentication on, needs the sign-in cookie of an `admin` token. A namespace the token
does not name is answered 404, as if it did not exist; tiers follow `host.memory.access`.
No log line carries entry content: actions log the namespace, the tier and the row id.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from http import HTTPStatus
from importlib import resources

import msgspec

from host.config import Config
from host.core.auth import Authenticator
from host.memory.plugin import MemoryPlugin
from host.ops.gc import GarbageCollector
from host.ops.metrics import Metrics
from host.search import judgement
from host.search.rank import RankWeights, score_parts
from host.store.changes import decode_entries
from host.store.growth import UsageOf
from host.store.interface import EntryStore
from host.store.records import (
    PERSISTENT_TIERS,
    BrowsedEntry,
    BrowseFilter,
    Query,
    Scope,
    StoredEntry,
)
from host.ui import views
from host.ui.health import HealthSampler
from host.ui.html import layout
from host.ui.params import (
    Refused,
    back_to,
    instant_of,
    number,
    query_string,
    tags_of,
    text_of,
    with_done,
)
from host.ui.signin import Gatekeeper, Viewer
from host.ui.web import (
    MAX_BODY,
    PREFIX,
    Request,
    Response,
    html_response,
    redirect,
    refusal,
    typed,
)
from protocol.clock import Clock, wall_clock

__all__ = ["PREFIX", "UiApp", "UiDeps", "export_line"]

log = logging.getLogger("a2e_host.ui")
_encode = msgspec.json.Encoder().encode

_LIVE_RECENT = 30  # entries the Live page shows at load
_LIVE_BATCH = 100  # changes one poll reads at most ...
_LIVE_BYTES = 1024 * 1024  # ... and at most this many bytes of them (one change beyond)
_LIVE_EVERY_MS = 2000
_STATIC = {"ui.css": "text/css; charset=utf-8", "ui.js": "text/javascript; charset=utf-8"}
EXPORT_PAGE = 1000  # entries an export reads (and holds) at a time
SEARCH_AGENTS = 50  # agents whose episodic entries one Search with no agent reads, at most


@dataclass
class UiDeps:
    """What the memory browser reads of a host (`host.app.Host` builds it)."""

    config: Config
    auth: Authenticator
    store: EntryStore
    memory: MemoryPlugin
    metrics: Metrics
    gc: GarbageCollector
    connections: Callable[[], int]  # WebSocket connections open
    in_flight: Callable[[], int]  # requests read and not answered yet
    working: Callable[[], dict[str, int]]  # namespace -> working entries in open sessions
    clock: Clock = wall_clock  # the host's clock: what is live, what expired (tests move it)


class UiApp:
    """The memory browser over one host. `start()` starts the Health sampler."""

    def __init__(self, deps: UiDeps) -> None:
        self.deps = deps
        cfg = deps.config
        self.gate = Gatekeeper(deps.auth, secure=bool(cfg.server.tls_cert))
        self.weights = RankWeights.from_config(cfg.ranking)
        # every store has the operator's reads, the change log and the embedding queue
        store = deps.store
        self._browser: EntryStore | None = store
        self._changes: EntryStore | None = store

        async def _backlog() -> int:
            return int(await store.vector_queue())

        self.health = HealthSampler(deps.metrics.latency_snapshot, deps.connections,
                                    deps.in_flight, _backlog, cfg.ui.health_interval,
                                    cfg.ui.health_samples)
        self._pages: dict[str, Callable[[Request, Viewer], Awaitable[Response]]] = {
            "/ui/namespaces": self._namespaces,
            "/ui/entries": self._entries,
            "/ui/search": self._search,
            "/ui/live": self._live,
            "/ui/live.json": self._live_json,
            "/ui/health": self._health,
            "/ui/forget": self._confirm_forget,
            "/ui/export": self._confirm_export,
        }
        self._actions: dict[str, Callable[[Request, Viewer, dict[str, str]], Awaitable[Response]]]
        self._actions = {
            "/ui/signout": self._signout,
            "/ui/forget": self._forget,
            "/ui/export": self._export,
        }

    @property
    def browsable(self) -> bool:
        """True when the store offers the operator's reads (`EntryStore.browse`)."""
        return self._browser is not None

    async def start(self) -> None:
        """Start sampling the Health page's figures."""
        self.health.start()

    async def stop(self) -> None:
        """Stop the sampler."""
        await self.health.stop()

    # -- dispatch ----------------------------------------------------------------------------

    def owns(self, path: str) -> bool:
        """True for the paths this app answers (`/ui` and below)."""
        return path == PREFIX or path.startswith(PREFIX + "/")

    async def handle(self, req: Request) -> Response:
        """Answer one request under `/ui`. Never raises for bad input: a refusal instead."""
        refused = self.gate.network(req)
        if refused is not None:
            return refused
        if len(req.body) > MAX_BODY:
            return refusal(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "request body too large")
        bind, set_bind = self.gate.binding(req)
        try:
            response = await self._route(req, Viewer(None, self.gate.csrf_for(bind)))
        except Refused as r:
            response = r.response
        except Exception:  # a bug, not bad input: the traceback to the log, no detail out
            log.exception("ui: internal error answering %s %s", req.method, req.path)
            response = refusal(HTTPStatus.INTERNAL_SERVER_ERROR, "internal error (see the log)")
        if set_bind is not None:
            response.headers.append(set_bind)
        return response

    async def _route(self, req: Request, anonymous: Viewer) -> Response:
        path = req.path.rstrip("/") or "/"
        if path.startswith("/ui/static/"):
            return self._static(req, path.rsplit("/", 1)[1])
        if path == "/ui/signin":
            return await self._signin(req, anonymous)
        if req.method not in ("GET", "HEAD", "POST"):
            return Response(HTTPStatus.METHOD_NOT_ALLOWED, [("Allow", "GET, POST")], b"")
        form = req.form() if req.method == "POST" else {}
        if req.method == "POST" and not self.gate.same_site(req, form):
            log.warning("ui: POST %s refused from %s: CSRF check failed", path, req.remote or "?")
            return refusal(HTTPStatus.FORBIDDEN, "the form is stale or comes from another site:"
                           " reload the page and try again")
        viewer = anonymous
        if self.deps.auth.enabled:
            grant = self.gate.signed_in(req)
            if grant is None:
                if req.method == "GET" and not path.endswith(".json"):
                    return redirect("/ui/signin")
                return refusal(HTTPStatus.UNAUTHORIZED, "sign in first")
            viewer = Viewer(grant, anonymous.csrf)
        if path == PREFIX:
            return redirect("/ui/namespaces")
        if req.method == "POST":
            action = self._actions.get(path)
            if action is None:
                return refusal(HTTPStatus.NOT_FOUND, "no such action")
            return await action(req, viewer, form)
        page = self._pages.get(path)
        if page is None:
            return refusal(HTTPStatus.NOT_FOUND, "no such page")
        return await page(req, viewer)

    def _page(self, title: str, body: str, viewer: Viewer, here: str, ns: str = "",
              status: int = HTTPStatus.OK, head_extra: str = "") -> Response:
        return html_response(layout(
            title, body, here=here, namespace=ns, who=viewer.label, csrf=viewer.csrf,
            signout=viewer.grant is not None, head_extra=head_extra), status)

    def _namespace(self, req: Request, viewer: Viewer, value: str | None = None) -> str:
        """The `ns` of the request, which the token must allow (else 404, as if absent)."""
        ns = (value if value is not None else req.arg("ns")).strip()
        if not ns:
            raise Refused(redirect("/ui/namespaces"))
        if not viewer.allows(ns):
            raise Refused(self._no_namespace(ns, viewer))
        return ns

    def _no_namespace(self, ns: str, viewer: Viewer, notice: str = "") -> Response:
        """The 404 page of a namespace that holds nothing, or that the token may not read
        (the same page: the token cannot tell the two apart)."""
        return self._page("No such namespace", views.no_namespace(ns, notice), viewer, "",
                          status=HTTPStatus.NOT_FOUND)

    async def _known(self, ns: str, now: float) -> bool:
        """True when the namespace holds a live persisted entry or a working one of an open
        session (what the Namespaces page lists); True too when the store cannot tell."""
        if self.deps.working().get(ns) or self._browser is None:
            return True
        return bool(await self._browser.overview([ns], now))

    def _browse(self) -> EntryStore:
        if self._browser is None:
            raise Refused(refusal(HTTPStatus.NOT_IMPLEMENTED,
                                   "this store does not offer browsing"))
        return self._browser

    # -- static files and sign-in --------------------------------------------------------------

    def _static(self, req: Request, name: str) -> Response:
        kind = _STATIC.get(name)
        if kind is None or req.method not in ("GET", "HEAD"):
            return refusal(HTTPStatus.NOT_FOUND, "no such file")
        body = resources.files("host.ui").joinpath("static", name).read_bytes()
        return typed(body, kind)

    async def _signin(self, req: Request, anonymous: Viewer) -> Response:
        if not self.deps.auth.enabled:
            return redirect("/ui/namespaces")
        if req.method == "GET":
            if self.gate.signed_in(req) is not None:
                return redirect("/ui/namespaces")
            return self._signin_page(anonymous, "")
        if req.method != "POST":
            return Response(HTTPStatus.METHOD_NOT_ALLOWED, [("Allow", "GET, POST")], b"")
        form = req.form()
        if not self.gate.same_site(req, form):
            return self._signin_page(anonymous, "The form was stale: try again.",
                                     HTTPStatus.FORBIDDEN)
        token = form.get("token", "").strip()
        grant, why = self.gate.sign_in(req, token)
        if grant is None:
            status = HTTPStatus.UNAUTHORIZED if why.startswith("That token is not") \
                else HTTPStatus.FORBIDDEN
            return self._signin_page(anonymous, why, status)
        return redirect("/ui/namespaces", [self.gate.token_cookie(token)])

    def _signin_page(self, viewer: Viewer, error: str,
                     status: int = HTTPStatus.OK) -> Response:
        return html_response(layout("Sign in", views.signin_page(error, viewer.csrf), nav=False),
                             status)

    async def _signout(self, req: Request, viewer: Viewer, form: dict[str, str]) -> Response:
        if viewer.grant is not None:
            log.info("ui: agent %s signed out", viewer.grant.agent)
        return redirect("/ui/signin" if self.deps.auth.enabled else "/ui/namespaces",
                        [self.gate.signout_cookie()])

    # -- pages -------------------------------------------------------------------------------

    async def _namespaces(self, req: Request, viewer: Viewer) -> Response:
        now = self.deps.clock()
        rows = await self._browse().overview(viewer.namespaces, now) if self.browsable else []
        working = {ns: n for ns, n in self.deps.working().items() if viewer.allows(ns) and n}
        limits = self.deps.config.limits
        store = self.deps.store
        agent_use = (await store.agents_usage([r.namespace for r in rows])
                     if rows and isinstance(store, UsageOf) else None)
        body = views.namespaces_page(
            rows, working, views.Quota(limits.max_entries_per_namespace,
                                       limits.max_bytes_per_namespace), self.browsable,
            views.Quota(limits.max_entries_per_agent, limits.max_bytes_per_agent), agent_use)
        return self._page("Namespaces", body, viewer, "namespaces")

    def _may_forget(self, viewer: Viewer) -> dict[str, bool]:
        return {t: viewer.may_forget(t) for t in PERSISTENT_TIERS}

    def _tier_filter(self, viewer: Viewer, tier: str) -> tuple[str, ...]:
        if tier and tier not in PERSISTENT_TIERS:
            raise Refused(refusal(HTTPStatus.BAD_REQUEST, "tier must be episodic or semantic"))
        return tuple(t for t in viewer.tiers if not tier or t == tier)

    async def _entries(self, req: Request, viewer: Viewer) -> Response:
        ns = self._namespace(req, viewer)
        store = self._browse()
        tier, agent, tags, key = req.arg("tier"), text_of(req, "agent"), req.arg("tags"), \
            text_of(req, "key")
        size = self.deps.config.ui.page_size
        page = number(req.arg("page"), 1, 1, 1_000_000, "page")
        as_of_text, error = req.arg("as_of"), ""
        try:  # the rule of a retrieve's `as_of` (protocol.validity); a bad one reads nothing
            as_of = instant_of(as_of_text, "as_of")
        except ValueError as e:
            as_of, error = None, _instant_error(e)
        f = BrowseFilter(tiers=self._tier_filter(viewer, tier), agent=agent, tags=tags_of(tags),
                         key_text=key, limit=size, offset=(page - 1) * size, as_of=as_of)
        now = self.deps.clock()
        entries, total = await store.browse(ns, f, now) if not error else ([], 0)
        notice = {"forgot": "The entry was forgotten.",
                  "gone": "That entry was already gone."}.get(req.arg("done"), "")
        if not total and not await self._known(ns, now):
            return self._no_namespace(ns, viewer, notice)
        back = back_to(f"/ui/entries?{query_string(req, drop=('done',))}", ns)
        body = views.entries_page(ns, entries, total, now, tier=tier, agent=agent, tags=tags,
                                  key=key, page=page, page_size=size,
                                  may_forget=self._may_forget(viewer), notice=notice, back=back,
                                  as_of=as_of_text, as_of_at=as_of, error=error)
        return self._page(f"Entries of {ns}", body, viewer, "entries", ns,
                          status=HTTPStatus.BAD_REQUEST if error else HTTPStatus.OK)

    async def _search(self, req: Request, viewer: Viewer) -> Response:
        ns = self._namespace(req, viewer)
        q, tier, tags = req.arg("q"), req.arg("tier"), req.arg("tags")
        limit_text, min_text, agent = req.arg("limit"), req.arg("min_score"), text_of(req, "agent")
        collapse = req.arg("collapse") == "1"
        notes: dict[int, judgement.Judged] = {}
        error = note = ""
        hits: list = []
        total = 0
        now = self.deps.clock()
        try:
            limit = number(limit_text, 10, 1, self.deps.config.limits.max_limit, "limit")
            min_score = float(min_text) if min_text else 0.0
            if not 0.0 <= min_score <= 1.0:
                raise ValueError
        except (Refused, ValueError):
            error = "limit must be a whole number and min_score a number from 0 to 1"
            limit, min_score = 10, 0.0
        as_of_text = req.arg("as_of")
        try:  # the rule of a retrieve's `as_of` (protocol.validity); a bad one reads nothing
            as_of = instant_of(as_of_text, "as_of")
        except ValueError as e:
            as_of, error = None, ". ".join(filter(None, (error, _instant_error(e))))
        tiers = self._tier_filter(viewer, tier)
        if q and not error:
            query = Query(tiers=tiers, tags=tags_of(tags), min_score=min_score, limit=limit,
                          as_of=as_of)
            ranked, note = await self._ranked(ns, agent, query, q, now)
            engine = self.deps.memory.search
            if engine.embedder is not None:  # judged as a retrieve's reply is
                ranked, notes = await judgement.judge(ranked, engine.store, engine.embedder.dim,
                                                      collapse=collapse,
                                                      now=now if as_of is None else as_of)
            total = len(ranked)
            hits = [(e, score_parts(e.relevance or 0.0, e.score, e.updated_at, now,
                                    self.weights, keyword=e.keyword, vector=e.similarity,
                                    fused=e.fused))
                    for _, e in ranked[:limit]]
        if not hits and not await self._known(ns, now):
            return self._no_namespace(ns, viewer)
        back = back_to(f"/ui/search?{query_string(req)}", ns)
        body = views.search_page(ns, q=q, tier=tier, tags=tags, limit=limit_text,
                                 min_score=min_text, agent=agent, hits=hits, total=total, now=now,
                                 error=error, may_forget=self._may_forget(viewer), back=back,
                                 note=note, collapse=collapse, judged=notes,
                                 as_of=as_of_text, as_of_at=as_of)
        return self._page(f"Search {ns}", body, viewer, "search", ns)

    async def _ranked(self, ns: str, agent: str, query: Query, q: str, now: float
                      ) -> tuple[list[tuple[float, StoredEntry]], str]:
        """The matches Search shows, best first by combined score, and a note when some
        agents were left out. With `agent`: what a retrieve of that agent finds (its episodic
        entries, the namespace's semantic ones). Without: every agent's, as the Entries page
        lists them: the semantic tier once, then the episodic entries of each agent that has
        some (the `SEARCH_AGENTS` with the most; their relevance is on one calibrated scale,
        so the lists merge by combined score)."""
        memory = self.deps.memory
        if agent:
            return await memory.ranked(Scope(ns, agent), query, q, now), ""
        found: list[tuple[float, StoredEntry]] = []
        if "semantic" in query.tiers:
            found += await memory.ranked(Scope(ns, "default"),
                                         replace(query, tiers=("semantic",)), q, now)
        note = ""
        if "episodic" in query.tiers and self.browsable:
            rows = await self._browse().overview([ns], now)
            counts = rows[0].agents if rows else {}
            owners = sorted((a for a, tiers in counts.items() if tiers.get("episodic")),
                            key=lambda a: (-counts[a]["episodic"], a))
            if len(owners) > SEARCH_AGENTS:
                note = (f"Searched the episodic entries of the {SEARCH_AGENTS} agents with the"
                        f" most of {len(owners)}: name an agent to search another.")
            for owner in owners[:SEARCH_AGENTS]:
                found += await memory.ranked(Scope(ns, owner),
                                             replace(query, tiers=("episodic",)), q, now)
        found.sort(key=lambda hit: -hit[0])
        return found, note

    async def _live(self, req: Request, viewer: Viewer) -> Response:
        ns = self._namespace(req, viewer)
        store = self._browse()
        now = self.deps.clock()
        log = self._changes
        # the cursor first: a change committed between the two reads shows twice, none is lost
        after = str(await log.change_head(ns)) if log is not None else ""
        recent, _ = await store.browse(ns, BrowseFilter(tiers=viewer.tiers, limit=_LIVE_RECENT),
                                       now)
        if not recent and not await self._known(ns, now):
            return self._no_namespace(ns, viewer)
        body = views.live_page(ns, recent, after, now, self._may_forget(viewer), _LIVE_EVERY_MS,
                               back_to(f"/ui/live?{query_string(req)}", ns))
        extra = f'<noscript><meta http-equiv="refresh" content="{_LIVE_EVERY_MS // 1000 * 5}">' \
                "</noscript>"
        return self._page(f"Live: {ns}", body, viewer, "live", ns, head_extra=extra)

    async def _live_json(self, req: Request, viewer: Viewer) -> Response:
        """The changes of the namespace's change log after the cursor `after` (a sequence
        number), as event cards for the Live page, and the cursor past them."""
        ns = self._namespace(req, viewer)
        log = self._changes
        if log is None:
            return refusal(HTTPStatus.NOT_IMPLEMENTED, "this store keeps no change log")
        after = number(req.arg("after"), -1, -1, 2**63 - 1, "after")
        if after < 0:
            return refusal(HTTPStatus.BAD_REQUEST, "after must be a change sequence number")
        changes = await log.changes_after(ns, after, _LIVE_BATCH, _LIVE_BYTES)
        events = [(c.op, json.loads(bytes(e.wire))) for c in changes
                  for e in decode_entries(c.entries) if e.tier in viewer.tiers]
        newest = str(changes[-1].seq) if changes else str(after)
        body = json.dumps({"after": newest, "count": len(events),
                           "html": views.change_cards(events, self.deps.clock())})
        return typed(body.encode(), "application/json")

    async def _health(self, req: Request, viewer: Viewer) -> Response:
        cfg = self.deps.config.ui
        body = views.health_page(list(self.health.samples), self.deps.gc, cfg.health_interval,
                                 int(cfg.health_interval * 1000))
        return self._page("Health", body, viewer, "health")

    # -- actions -----------------------------------------------------------------------------

    async def _entry(self, viewer: Viewer, ns: str, id_text: str):  # type: ignore[no-untyped-def]
        store = self._browse()
        ident = number(id_text, 0, 0, 2**63 - 1, "id")
        e = await store.browse_entry(ns, ident, self.deps.clock()) if ident else None
        if e is not None and e.tier not in viewer.tiers:
            e = None
        return e

    async def _confirm_forget(self, req: Request, viewer: Viewer) -> Response:
        ns = self._namespace(req, viewer)
        back = back_to(req.arg("back"), ns)
        e = await self._entry(viewer, ns, req.arg("id"))
        if e is None:
            return redirect(with_done(back, "gone"))
        if not viewer.may_forget(e.tier):
            return refusal(HTTPStatus.FORBIDDEN, f"the token may not forget in {e.tier}")
        body = views.confirm_forget(e, ns, self.deps.clock(), viewer.csrf, back)
        return self._page("Forget an entry", body, viewer, "entries", ns)

    async def _forget(self, req: Request, viewer: Viewer, form: dict[str, str]) -> Response:
        ns = self._namespace(req, viewer, form.get("ns", ""))
        back = back_to(form.get("back", ""), ns)
        e = await self._entry(viewer, ns, form.get("id", ""))
        if e is None:
            return redirect(with_done(back, "gone"))
        if not viewer.may_forget(e.tier):
            return refusal(HTTPStatus.FORBIDDEN, f"the token may not forget in {e.tier}")
        agent = e.owner or e.agent  # the owner of an episodic entry; any agent for semantic
        n = await self.deps.store.forget(Scope(ns, agent), [e.tier], [e.key], [], self.deps.clock())
        self.deps.memory.search.notify()  # drop its vector from memory
        log.info("ui: %s forgot entry %d (%s tier) of namespace %r: %d deleted", viewer.label,
                 e.id, e.tier, ns, n)
        return redirect(with_done(back, "forgot" if n else "gone"))

    async def _confirm_export(self, req: Request, viewer: Viewer) -> Response:
        ns = self._namespace(req, viewer)
        now = self.deps.clock()
        rows = await self._browse().overview([ns], now)
        if not rows and not await self._known(ns, now):
            return self._no_namespace(ns, viewer)
        count = sum(rows[0].tiers.values()) if rows else 0
        body = views.confirm_export(ns, count, viewer.csrf)
        return self._page(f"Export {ns}", body, viewer, "export", ns)

    async def _export(self, req: Request, viewer: Viewer, form: dict[str, str]) -> Response:
        ns = self._namespace(req, viewer, form.get("ns", ""))
        store = self._browse()
        if set(viewer.tiers) != set(PERSISTENT_TIERS):
            return refusal(HTTPStatus.FORBIDDEN, "exporting needs the right to read every tier")
        now = self.deps.clock()
        if not await self._known(ns, now):
            return self._no_namespace(ns, viewer)

        async def lines() -> AsyncIterator[bytes]:  # a page of entries in memory at a time
            after, sent = 0, 0
            while True:
                page = await store.export_namespace(ns, now, after, EXPORT_PAGE)
                if page:
                    yield b"".join(export_line(ns, e) for e in page)
                    after, sent = page[-1].id, sent + len(page)
                if len(page) < EXPORT_PAGE:
                    break
            log.info("ui: %s exported namespace %r: %d entries", viewer.label, ns, sent)

        name = re.sub(r"[^A-Za-z0-9._-]+", "_", ns)[:80] or "namespace"
        return typed(lines(), "application/x-ndjson",
                     [("Content-Disposition", f'attachment; filename="{name}.jsonl"')])


def _instant_error(e: ValueError) -> str:
    """The message of a bad `as_of`: the rule's own words, and what it takes."""
    return (f"{e}. An instant is ISO-8601 text with a zone (2026-03-01T09:00:00Z,"
            " 2026-03-01T10:00:00+01:00) or epoch seconds; nothing was read.")


def export_line(namespace: str, e: BrowsedEntry) -> bytes:
    """One line of an export file (the format `a2e-host export` writes and `a2e-host import`
    reads, `host.cli.transfer`, the bounds of the time of a fact included when the entry has
    them; a test checks that it reads these back)."""
    line: dict[str, object] = {
        "namespace": namespace, "tier": e.tier, "owner": e.owner, "agent": e.agent,
        "key": msgspec.Raw(e.key), "content": msgspec.Raw(e.content), "tags": e.tags,
        "source": e.source, "score": e.score, "ttl": e.ttl, "created_at": e.created_at,
        "updated_at": e.updated_at,
    }
    if e.valid_from is not None:
        line["valid_from"] = e.valid_from
    if e.valid_until is not None:
        line["valid_until"] = e.valid_until
    return _encode(line) + b"\n"
