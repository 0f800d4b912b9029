"""``orch plan``: every offer ranked for each manifest as the engine will rank it, with its warnings and hints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from orchestrator.app.errors import BadInputError
from orchestrator.clock import utcnow

if TYPE_CHECKING:
    from orchestrator.app.preflight import BootCheck
    from orchestrator.config.file import OrchConfig
    from orchestrator.manifest import LoadedManifest
    from orchestrator.manifest.code_spec import CodePin
    from orchestrator.manifest.schema import Manifest
    from orchestrator.offers.planner import Plan, PlannedOffer, PlanRequest
    from orchestrator.offers.sources import OfferSources
    from providers.base import Offer

#: Starts a plan warning that a machine of the chosen offer could not start the job (see runtime/preflight.py).
BOOT_WARNING = "boot: "


@dataclass(frozen=True, slots=True)
class JobPlan:
    """One job's plan: ``options`` are the chosen offer then up to ``alternatives`` more, cheapest first."""

    name: str
    source: str
    plan: Plan
    alternatives: int
    estimated_hours: float | None
    warnings: tuple[str, ...] = ()    # the model does not fit / is overprovisioned / image vs GPU (fit/planning)
    code: CodePin | None = None        # what every node gets: the commit and pack pinned at load (codepack)
    #: Cheaper offers of providers not configured ("configure gcp to save $X/h"): never chosen, apply cannot get them.
    hints: tuple[str, ...] = ()

    @property
    def options(self) -> tuple[PlannedOffer, ...]:
        return self.plan.eligible[: 1 + self.alternatives]

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.name,
            "source": self.source,
            "estimated_hours": self.estimated_hours,
            "chosen": planned_json(self.plan.chosen) if self.plan.chosen else None,
            "alternatives": [planned_json(p) for p in self.options[1:]],
            "eligible_count": len(self.plan.eligible),
            "rejected": [planned_json(p) for p in self.plan.rejected],
            "near_misses": [planned_json(p) for p in self.plan.near_misses(NEAR_MISSES)],
            "warnings": list(self.warnings),
            "code": self.code.model_dump(mode="json") if self.code is not None else None,
            "hints": list(self.hints),
        }


#: Rejected offers ``orch plan`` shows with what excluded them.
NEAR_MISSES = 3


def planned_json(p: PlannedOffer) -> dict[str, Any]:
    return p.to_json()


def plan_jobs(loaded: Sequence[LoadedManifest], sources: OfferSources, *, alternatives: int = 4,
              only_providers: Sequence[str] | None = None, now: datetime | None = None,
              boot_check: BootCheck | None = None) -> list[JobPlan]:
    """Rank every offer for each manifest, the way the engine will when it launches.

    ``sources``: orchestrator.offers.sources.offer_sources(...), as the engine builds it.
    ``only_providers`` (the configured ones, for ``--configured``) keeps offers of those providers only:
    what ``orch apply --launch`` can actually get."""
    from orchestrator.engine.jobspec import jobspec_from_manifest
    from orchestrator.offers.planner import plan

    if alternatives < 0:
        raise BadInputError(f"--alternatives must be 0 or more, got {alternatives}")
    now = now or utcnow()
    # What a model-only job's GPUs are chosen from, and what the fit warnings compare against.
    offers = [o for o in sources.catalog if only_providers is None or o.provider in only_providers]
    out: list[JobPlan] = []
    for m in loaded:
        req = jobspec_from_manifest(m.manifest, now, offers).plan
        everywhere = sources.offers(req.gpu_request())
        found = everywhere if only_providers is None else [o for o in everywhere if o.provider in only_providers]
        the_plan = plan(req, found)
        warnings = _fit_warnings(m.manifest, req, the_plan, offers)
        hints = () if only_providers is None else _unconfigured_hints(req, everywhere, the_plan, only_providers)
        if boot_check is not None:
            warnings += _boot_warnings(m.manifest, the_plan, boot_check)
        out.append(JobPlan(m.manifest.name, str(m.source), the_plan, alternatives, req.estimated_hours,
                           tuple(warnings), m.manifest.code.pin if m.manifest.code is not None else None, hints))
    return out


def launchable_providers(config: OrchConfig | None) -> tuple[str, ...]:
    """The providers ``orch apply`` (and the daemon) can launch on: the config's enabled ones; none without a
    config. ``orch plan`` and the apply preview plan on exactly these, so they choose what apply launches."""
    return tuple(config.enabled_providers()) if config is not None else ()


def _unconfigured_hints(req: PlanRequest, everywhere: Sequence[Offer], chosen_plan: Plan,
                        configured: Sequence[str]) -> tuple[str, ...]:
    """Per provider not configured, its cheapest eligible offer where it beats the chosen one (at most 3)."""
    from orchestrator.offers.planner import plan

    others = plan(req, [o for o in everywhere if o.provider not in configured]).eligible
    chosen = chosen_plan.chosen
    best: dict[str, PlannedOffer] = {}
    for p in others:
        if p.offer.provider not in best and (chosen is None or p.total_price_hr < chosen.total_price_hr - 0.005):
            best[p.offer.provider] = p
    hints = []
    for provider, p in list(best.items())[:3]:
        what = f"{p.offer.instance_type} ${p.total_price_hr:.2f}/h"
        hints.append(f"configure {provider} to save ${chosen.total_price_hr - p.total_price_hr:.2f}/h ({what})"
                     if chosen is not None else f"configure {provider} to launch it ({what})")
    return tuple(hints)


def _boot_warnings(manifest: Manifest, the_plan: Plan, boot_check: BootCheck) -> list[str]:
    """Nothing is launched that cannot start: say so now, not after the engine refused to launch it. The engine
    moves on from an offer whose provider cannot start the job; it waits only when no eligible provider can."""
    if the_plan.chosen is None:
        return []
    first: dict[str, Offer] = {}
    for p in the_plan.eligible:
        first.setdefault(p.offer.provider, p.offer)
    problems: list[str] = []
    for provider, offer in first.items():
        problem = boot_check(manifest, offer)
        if problem is None:
            if not problems:
                return []
            return [f"{'; '.join(problems)}; the engine moves on to {provider}"]
        problems.append(problem)
    return [f"{BOOT_WARNING}{'; '.join(problems)} (not launched until fixed)"]


def _fit_warnings(manifest: Manifest, req: PlanRequest, the_plan: Plan, offers: Sequence[Offer]) -> list[str]:
    """The memory model's and the image's warnings for one job (orchestrator.fit.planning)."""
    from orchestrator.fit.planning import allowed_offers, job_warnings

    allowed = [o for o in allowed_offers(offers, req.providers_allow, req.providers_deny, req.regions_allow,
                                         req.regions_deny) if o.market in req.markets]
    chosen = the_plan.chosen.offer if the_plan.chosen else None
    return job_warnings(req.fit, manifest.resources.gpu, req.count, req.nodes, chosen, allowed, manifest.image)
