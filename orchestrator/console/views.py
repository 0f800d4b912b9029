"""The console's pages: each reads the store through ``console_queries`` and renders one template.

Templates live in templates/ and are rendered with autoescaping on (every value a page shows is escaped;
only the SVG that ``charts`` builds, itself escaped, goes in as markup).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from orchestrator.console import charts, formatting
from orchestrator.console.budgets import budget_views, configured_views
from orchestrator.console.timeline import build_timeline
from orchestrator.money.budgets import Budget
from orchestrator.store import console_queries as q
from orchestrator.store.console_values import EventFilter, FleetNode
from orchestrator.store.db import Store
from orchestrator.store.spend_series import spend_series

TEMPLATES = Path(__file__).resolve().parent / "templates"
EVENTS_PER_PAGE = 50
FLEET_REFRESH_S = 15


@cache
def environment() -> Any:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"], default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(money=formatting.money, money_hr=formatting.money_hr, pct=formatting.pct,
                       utc=formatting.utc, path=formatting.path_segment, duration=formatting.duration)
    env.globals.update(colour=charts.colour)
    return env


@dataclass(frozen=True)
class Page:
    """A rendered page: its HTTP status and HTML."""

    status: int
    html: str


@dataclass(frozen=True)
class Chrome:
    """What every page's frame needs: the time, the active tab, the CSRF token, whether to offer log out."""

    now: datetime
    csrf: str
    token_required: bool


def render(template: str, chrome: Chrome, *, status: int = 200, **context: object) -> Page:
    env = environment()
    html = env.get_template(template).render(now=chrome.now, csrf=chrome.csrf, token_required=chrome.token_required,
                                             ago=lambda ts: formatting.ago(ts, chrome.now), **context)
    return Page(status, html)


# -- fleet ---------------------------------------------------------------------------------------------

def fleet_page(store: Store, chrome: Chrome) -> Page:
    from orchestrator.app.status import failures_by_job

    with store.transaction() as tx:
        fleet = q.fleet(tx, now=chrome.now)
        failures = failures_by_job(tx, [(j.id, j.status) for j in fleet.jobs])
    start = chrome.now - timedelta(hours=1)

    def spark(node: FleetNode) -> Any:
        return charts.sparkline(node.util, start, chrome.now) if node.util else None

    return render("fleet.html", chrome, tab="fleet", fleet=fleet, spark=spark, refresh_s=FLEET_REFRESH_S,
                  failures=failures)


# -- spend ---------------------------------------------------------------------------------------------

class SpendRange(Enum):
    DAY = ("24h", timedelta(hours=24), timedelta(hours=1), "last 24 hours, per hour")
    WEEK = ("7d", timedelta(days=7), timedelta(hours=6), "last 7 days, per 6 hours")
    MONTH = ("30d", timedelta(days=30), timedelta(days=1), "last 30 days, per day")

    @property
    def key(self) -> str:
        return self.value[0]

    @classmethod
    def parse(cls, text: str | None) -> SpendRange:
        return next((r for r in cls if r.key == text), cls.WEEK)


def spend_page(store: Store, chrome: Chrome, range_key: str | None) -> Page:
    rng = SpendRange.parse(range_key)
    _, span, step, caption = rng.value
    with store.transaction() as tx:
        series = spend_series(tx, since=chrome.now - span, until=chrome.now, step=step)
    by_job = charts.stacked_bars(series.by_job, series.starts, step, label=f"spend per job, {caption}")
    by_provider = charts.stacked_bars(series.by_provider, series.starts, step,
                                      label=f"spend per provider, {caption}")
    return render("spend.html", chrome, tab="spend", series=series, ranges=list(SpendRange), current=rng,
                  caption=caption, by_job=by_job, by_provider=by_provider)


# -- budgets -------------------------------------------------------------------------------------------

def budgets_page(store: Store, chrome: Chrome, budgets: Sequence[Budget] = ()) -> Page:
    """The jobs' own budgets and, first, the config's (``budgets``, against this month's ledger)."""
    from orchestrator.money.budgets import review
    from orchestrator.store.budget_watch import read_ledger

    with store.transaction() as tx:
        configured = configured_views(review(budgets, read_ledger(tx, chrome.now))) if budgets else []
        page = budget_views(q.job_budgets(tx), configured=configured)
    return render("budgets.html", chrome, tab="budgets", page=page, configured=bool(budgets))


# -- events --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class EventQuery:
    """The events page's query string, parsed; ``problems`` names what was ignored and why."""

    flt: EventFilter
    page: int
    since_text: str
    until_text: str
    problems: tuple[str, ...]

    def link(self, page: int) -> str:
        params: list[tuple[str, str]] = []
        if self.flt.job:
            params.append(("job", self.flt.job))
        params.extend(("kind", k) for k in self.flt.kinds)
        if self.since_text and self.flt.since:
            params.append(("since", self.since_text))
        if self.until_text and self.flt.until:
            params.append(("until", self.until_text))
        params.append(("page", str(page)))
        return "/events?" + urlencode(params)


def _local_utc(text: str) -> datetime:
    """``YYYY-MM-DDTHH:MM`` (an HTML datetime-local value), read as UTC."""
    for fmt in ("%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(text)


def parse_event_query(args: Mapping[str, list[str]]) -> EventQuery:
    def first(name: str) -> str:
        values = args.get(name) or [""]
        return values[0].strip()[:100]

    problems: list[str] = []
    times: dict[str, datetime | None] = {"since": None, "until": None}
    for name in times:
        text = first(name)
        if text:
            try:
                times[name] = _local_utc(text)
            except ValueError:
                problems.append(f"{name}: not a date and time (YYYY-MM-DD HH:MM, UTC); ignored")
    page_text = first("page")
    page = int(page_text) if page_text.isdigit() and 0 < len(page_text) < 7 else 1
    kinds = tuple(k.strip()[:100] for k in args.get("kind", []) if k.strip())[:20]
    flt = EventFilter(job=first("job") or None, kinds=kinds, since=times["since"], until=times["until"])
    return EventQuery(flt, page, first("since"), first("until"), tuple(problems))


def events_page(store: Store, chrome: Chrome, args: Mapping[str, list[str]]) -> Page:
    query = parse_event_query(args)
    with store.transaction() as tx:
        page = q.event_page(tx, query.flt, page=query.page, per_page=EVENTS_PER_PAGE)
        kinds = q.event_kinds(tx)
        jobs = q.job_names(tx)
    return render("events.html", chrome, tab="events", page=page, query=query, kinds=kinds, jobs=jobs)


# -- a job ---------------------------------------------------------------------------------------------

class Done(Enum):
    """What an action did, shown once on the job page it redirects to (``?done=``)."""

    STOP = ("stop", "Marked for teardown: the engine terminates the job's machines on its next tick.")
    RELAUNCH = ("relaunch", "Relaunch requested: the engine ends the job's machines and launches it again from "
                            "its last committed checkpoint (from the start if it has none) on its next tick.")

    @classmethod
    def parse(cls, text: str | None) -> Done | None:
        return next((d for d in cls if d.value[0] == text), None)


def job_page(store: Store, chrome: Chrome, name: str, *, done: str | None = None, error: str | None = None,
             status: int = 200) -> Page:
    from orchestrator.app.status import failures_by_job

    with store.transaction() as tx:
        detail = q.job_detail(tx, name)
        failure = failures_by_job(tx, [(detail.id, detail.status)]).get(detail.id) if detail else None
    if detail is None:
        return not_found(chrome, f"no job named {name!r}")
    timeline = build_timeline(detail, chrome.now)
    flash = Done.parse(done)
    return render("job.html", chrome, status=status, tab="fleet", job=detail, timeline=charts.timeline_svg(timeline),
                  marks=timeline.marks, flash=flash.value[1] if flash else None, error=error, failure=failure,
                  events_link="/events?" + urlencode({"job": detail.name}))


def confirm_page(store: Store, chrome: Chrome, name: str, action: str) -> Page:
    with store.transaction() as tx:
        detail = q.job_detail(tx, name, event_limit=0)
    if detail is None:
        return not_found(chrome, f"no job named {name!r}")
    live = [a for a in detail.attempts if a.state.is_live]
    return render("confirm.html", chrome, tab="fleet", job=detail, action=action, live=live)


# -- frames --------------------------------------------------------------------------------------------

def not_found(chrome: Chrome, message: str) -> Page:
    return render("message.html", chrome, status=404, tab="", title="Not found", message=message)


def message(chrome: Chrome, status: int, title: str, text: str) -> Page:
    return render("message.html", chrome, status=status, tab="", title=title, message=text)


def login_page(chrome: Chrome, *, status: int, problem: str | None, next_path: str) -> Page:
    return render("login.html", chrome, status=status, tab="", problem=problem, next_path=next_path)


