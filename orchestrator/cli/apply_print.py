"""What `orch apply` prints of its preview and its changes: the plan (one entry per job waiting for a machine,
each within 80 columns), the created/updated/unchanged/pruned lines, what becomes of a pruned job's machine, and
the note on updated running jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.cli.common import money, out
from orchestrator.cli.errors import wrap
from orchestrator.words import plural

if TYPE_CHECKING:
    from orchestrator.app.apply_preview import ApplyPreview, PlannedLaunch
    from orchestrator.app.status import InstanceView
    from orchestrator.store.repo import ApplyResult


def print_changes(result: ApplyResult, prefix: str = "") -> None:
    for change, names in (("created", result.created), ("updated", result.updated),
                          ("unchanged", result.unchanged), ("pruned", result.pruned)):
        for name in names:   # a long name (63 characters) after "would be unchanged" goes on the next line, whole
            out(wrap(f"{prefix}{change:<10}{name}", " " * 10))
    out(f"{prefix}{len(result.created)} created, {len(result.updated)} updated, {len(result.unchanged)} unchanged, "
         f"{len(result.pruned)} pruned")


def print_ending(machines: Sequence[InstanceView], ender: str | None) -> None:
    """Each machine of a pruned job: it bills until its cloud confirms it gone, so say who ends it (``ender``:
    this command or the daemon) and where to watch, or (nobody ticks the engine now) how to end it."""
    from orchestrator.redaction import safe_line

    for m in machines:
        what = f"{m.job}: its machine {m.provider} {m.instance_id or m.launch_id}"
        if ender is None:
            out(wrap(safe_line(f"note: {what} still runs and bills, and nothing ends it now (no daemon runs and "
                               f"this command launched nothing): run `orch down {m.job} --yes` to end it"), "    "))
        else:
            out(wrap(safe_line(f"ending    {what} is being terminated by {ender}; it bills until its cloud "
                               "confirms it gone: watch `orch status`"), " " * 10))


def ending_json(machines: Sequence[InstanceView], ender: str | None) -> list[dict[str, Any]]:
    """``--json``'s ``ending``: each machine of a pruned job, and who ends it (null: nobody now)."""
    return [{**m.to_json(), "ended_by": ender} for m in machines]


def print_updated_running(preview: ApplyPreview) -> None:
    """An updated job already on a machine keeps running as launched (orch does not roll it out): say so."""
    for name in preview.updated_running:
        out(wrap(f"note: {name} keeps running as launched: the change takes effect at its next launch (to "
                 f"relaunch it now: `orch down {name} --yes`, then `orch apply` again)"))


def print_plan(preview: ApplyPreview, launcher: str | None) -> None:
    if not preview.launches:
        out("plan: no job waits for a machine: nothing to launch")
        return
    total = preview.estimated_total_usd
    n = len(preview.will_launch)
    who = f" by {launcher}" if launcher else " (by `orch apply` or a daemon, later)"
    out(wrap(f"plan: {plural(n, 'job')} to launch{who}, {money(preview.price_hr)}/h"
             + (f", estimated {money(total)} in all" if total is not None and n else "")))
    for launch in preview.launches:
        out(plan_line(launch))


def plan_line(launch: PlannedLaunch) -> str:
    p = launch.planned
    if p is None:
        return wrap(f"  {launch.job:<20} no eligible offer: it waits (see `orch plan`)", "    ")
    o = p.offer
    nodes = f" x{p.nodes}" if p.nodes > 1 else ""
    place = o.region + (f"/{o.zone}" if o.zone else "")
    # Within 80 columns like the rest of the plan: a refusal or a boot problem is a sentence or three.
    line = wrap(f"  {launch.job:<20} {o.provider} {o.instance_type}{nodes} ({place}, {o.market.value})", "    ")
    if launch.refusal:
        return f"{line}\n{wrap(f'refused, it waits: {launch.refusal}', '      ', '    ')}"
    if launch.boot_problem:
        return f"{line}\n{wrap(f'not launched, it waits: {launch.boot_problem}', '      ', '    ')}"
    hours = f" for {launch.estimated_hours:g} h" if launch.estimated_hours else ""
    total = f", ~{money(p.expected_cost_usd)}{hours}" if p.expected_cost_usd is not None else ""
    return f"{line}\n    {money(p.total_price_hr)}/h{total}"
