"""What ``orch apply`` would do, before it does it (like ``kubectl diff`` / ``dstack apply``).

The changes it would record (created, updated, unchanged, pruned) and, for every job that would then wait
for a machine (the applied ones and any other pending job in the store: the engine launches them all),
the offer the engine would choose (provider, type, region, market), its $/h and estimated total, and the
budget that would refuse it, if any. Computed by applying inside a transaction that is rolled back:
exactly what ``apply`` would record, and nothing written.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlmodel import Session

    from orchestrator.app.plan import JobPlan
    from orchestrator.app.preflight import BootCheck
    from orchestrator.manifest import LoadedManifest
    from orchestrator.money.budgets import Budget, BudgetLedger
    from orchestrator.offers.planner import PlannedOffer
    from orchestrator.offers.sources import OfferSources
    from orchestrator.store import Store
    from orchestrator.store.repo import ApplyResult


@dataclass(frozen=True, slots=True)
class PlannedLaunch:
    """One job the engine would launch next: on ``planned`` (None: no eligible offer, it waits)."""

    job: str
    planned: PlannedOffer | None
    estimated_hours: float | None
    refusal: str | None = None          # a budget would refuse this launch (the engine then does not make it)
    boot_problem: str | None = None     # its machine could not start it (runtime/preflight.py): not launched

    @property
    def launches(self) -> bool:
        return self.planned is not None and self.refusal is None and self.boot_problem is None

    def to_json(self) -> dict[str, Any]:
        p = self.planned
        return {"job": self.job, "estimated_hours": self.estimated_hours, "refused_by_budget": self.refusal,
                "boot_problem": self.boot_problem, "offer": p.to_json() if p is not None else None}


@dataclass(frozen=True, slots=True)
class ApplyPreview:
    changes: ApplyResult
    launches: tuple[PlannedLaunch, ...]
    #: Updated jobs with a machine (a live attempt): it runs as launched; the new manifest is for the next launch.
    updated_running: tuple[str, ...] = ()

    @property
    def will_launch(self) -> tuple[PlannedLaunch, ...]:
        """The launches that would go ahead: an offer, and no budget against them."""
        return tuple(launch for launch in self.launches if launch.launches)

    @property
    def price_hr(self) -> float:
        return sum(launch.planned.total_price_hr for launch in self.will_launch if launch.planned)

    @property
    def estimated_total_usd(self) -> float | None:
        """The launches' estimated totals (None when a launching job has no ``estimated_hours``)."""
        costs = [launch.planned.expected_cost_usd for launch in self.will_launch if launch.planned]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)

    def to_json(self) -> dict[str, Any]:
        c = self.changes
        total = self.estimated_total_usd
        return {"changes": {"created": list(c.created), "updated": list(c.updated), "unchanged": list(c.unchanged),
                            "pruned": list(c.pruned)},
                "launches": [launch.to_json() for launch in self.launches],
                "total_price_hr": round(self.price_hr, 4),
                "estimated_total_usd": None if total is None else round(total, 2),
                "updated_running": list(self.updated_running)}


class _Rollback(Exception):
    def __init__(self, result: ApplyResult, pending: list[LoadedManifest], ids: dict[str, int],
                 spent: dict[str, float], running: tuple[str, ...]) -> None:
        super().__init__("preview only")
        self.result, self.pending, self.ids, self.spent, self.running = result, pending, ids, spent, running


def preview_apply(store: Store, loaded: Sequence[LoadedManifest], sources: OfferSources, *, prune: bool = False,
                  only_providers: Sequence[str] | None = None, budgets: Sequence[Budget] = (),
                  owner: str | None = None, now: datetime, boot_check: BootCheck | None = None) -> ApplyPreview:
    """What ``app.jobs.apply(store, loaded, prune=prune)`` would record, and what the engine would then
    launch from ``sources`` (``only_providers``: the configured ones; ``owner``: the orch owner whose engine
    launches, for budgets matching owners). Writes nothing."""
    from orchestrator.app.errors import BadInputError
    from orchestrator.app.plan import plan_jobs
    from orchestrator.store import repo

    try:
        with store.transaction() as tx:
            result = repo.apply_jobs(tx, [_spec(m) for m in loaded], prune=prune, now=now)
            pending, ids = _awaiting_launch(tx, loaded)
            # A relaunched job's own budget counts what it has spent already, as the engine's check does.
            spent = {name: repo.total_spend(tx, job_id) for name, job_id in ids.items()}
            raise _Rollback(result, pending, ids, spent, _with_machines(tx, result.updated))
    except _Rollback as done:
        result, pending, ids, spent = done.result, done.pending, done.ids, done.spent
        running = done.running
    except ValueError as exc:
        raise BadInputError(str(exc)) from None
    plans = plan_jobs(pending, sources, alternatives=0, only_providers=only_providers, now=now,
                      boot_check=boot_check)
    launches = _with_budgets(store, plans, pending, ids, budgets, owner, now, spent)
    return ApplyPreview(result, tuple(_with_boot(launches, plans)), running)


def _with_machines(tx: Session, names: Sequence[str]) -> tuple[str, ...]:
    """Those of ``names`` with a live attempt: a machine launched (or launching) on the manifest as it was."""
    from orchestrator.store import command_queries

    ids = command_queries.jobs_named(tx, names) if names else {}
    busy = {a.job_id for a in command_queries.live_attempts_of(tx, list(ids))} if ids else set()
    return tuple(name for job_id, name in sorted(ids.items(), key=lambda kv: kv[1]) if job_id in busy)


def _with_boot(launches: Sequence[PlannedLaunch], plans: Sequence[JobPlan]) -> list[PlannedLaunch]:
    """Each launch with the boot problem its plan found (the engine would not launch it)."""
    from dataclasses import replace

    from orchestrator.app.plan import BOOT_WARNING

    problems = {jp.name: next((w.removeprefix(BOOT_WARNING) for w in jp.warnings if w.startswith(BOOT_WARNING)),
                              None) for jp in plans}
    return [replace(launch, boot_problem=problems.get(launch.job)) for launch in launches]


def _spec(m: LoadedManifest) -> Any:
    from orchestrator.store import repo

    return repo.AppliedJob.from_loaded(*m)


def _awaiting_launch(tx: Session, loaded: Sequence[LoadedManifest]) -> tuple[list[LoadedManifest], dict[str, int]]:
    """Active jobs waiting for a machine (pending or recovering, no live attempt), as manifests."""
    from pydantic import ValidationError
    from sqlmodel import col, select

    from orchestrator.engine.states import FINAL_ATTEMPT_STATES, DesiredState, JobStatus
    from orchestrator.manifest import LoadedManifest, Manifest
    from orchestrator.store import repo
    from orchestrator.store.models import Attempt

    final = [s.value for s in FINAL_ATTEMPT_STATES]
    live = set(tx.exec(select(Attempt.job_id).where(col(Attempt.state).not_in(final))))
    given = {m.manifest.name: m for m in loaded}
    out: list[LoadedManifest] = []
    ids: dict[str, int] = {}
    for job in repo.list_jobs(tx, desired_states=[DesiredState.ACTIVE],
                              statuses=[JobStatus.PENDING, JobStatus.RECOVERING]):
        if job.id in live:
            continue
        found = given.get(job.name)
        if found is None:
            try:
                found = LoadedManifest(Manifest.model_validate(job.manifest), Path(job.source_path or "<store>"),
                                       job.manifest_hash)
            except ValidationError:
                continue   # a stored manifest this orch cannot read: the engine reports it
        out.append(found)
        ids[job.name] = int(job.id or 0)
    return out, ids


def _with_budgets(store: Store, plans: Sequence[JobPlan], pending: Sequence[LoadedManifest], ids: dict[str, int],
                  budgets: Sequence[Budget], owner: str | None, now: datetime,
                  spent: dict[str, float]) -> list[PlannedLaunch]:
    """The launch step simulated on a copy of the facts, job by job as the engine goes (engine/launch.py): each
    job tries its eligible offers cheapest first, skipping a machine of yours an earlier job of this preview
    took (one job per host), and an offer its own ``budget_usd`` refuses (``spent``: what each job has spent so
    far, per name: a relaunch's budget has that much less left); the config's budgets then judge it
    (each allowed launch counts for the next). A job refused or left without an offer waits."""
    from orchestrator.money.budget_launch import check_launch
    from orchestrator.money.spend import would_break_budget
    from orchestrator.store.budget_watch import read_ledger
    from providers.offer import OfferOrigin

    ledger: BudgetLedger | None = None
    if budgets:
        with store.transaction() as tx:
            ledger = read_ledger(tx, now)
    taken: set[tuple[object, ...]] = set()      # your own machines this preview has given a job
    out: list[PlannedLaunch] = []
    for jp, m in zip(plans, pending, strict=True):
        own_budget = m.manifest.policies.budget_usd
        hours = jp.estimated_hours or 1.0
        chosen: PlannedOffer | None = None
        refusal: str | None = None
        for option in jp.plan.eligible:
            o = option.offer
            if o.source is OfferOrigin.OWN and o.key in taken:
                continue
            so_far = spent.get(jp.name, 0.0)
            if would_break_budget(so_far, option.total_price_hr, hours, own_budget):
                refusal = refusal or (f"its own budget ${own_budget:,.2f} (${so_far:,.2f} spent, "
                                      f"${option.total_price_hr:,.2f}/h for {hours:g} h)")
                continue
            chosen, refusal = option, None
            break
        if chosen is None and refusal is None and jp.plan.chosen is not None:
            refusal = "your machines it could use are taken by the jobs above"
        if chosen is not None and ledger is not None:
            verdict = check_launch(budgets, ledger, project=m.manifest.project, price_hr=chosen.total_price_hr,
                                   hours=jp.estimated_hours, owner=owner)
            if verdict.allowed:
                ledger = ledger.with_launch(ids.get(jp.name, -1 - len(out)), jp.name, m.manifest.project,
                                            chosen.total_price_hr, owner)
            else:
                refusal = verdict.reason()
        if chosen is not None and refusal is None and chosen.offer.source is OfferOrigin.OWN:
            taken.add(chosen.offer.key)
        out.append(PlannedLaunch(jp.name, chosen or jp.plan.chosen, jp.estimated_hours, refusal))
    return out
