"""What `orch plan` prints of a job's plan: the chosen offer and its alternatives, one per line where it fits
80 columns (wrapping under itself otherwise), then the notes, exclusions, near misses, warnings and hints."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.cli.common import PLAN_WIDTH, money, out
from orchestrator.words import plural

if TYPE_CHECKING:
    from orchestrator.app.plan import JobPlan
    from orchestrator.offers.planner import PlannedOffer


def say(text: str, indent: str = "  ", more: str = "           ") -> None:
    import textwrap

    for line in textwrap.wrap(text, PLAN_WIDTH, initial_indent=indent, subsequent_indent=more,
                              break_long_words=False, break_on_hyphens=False):
        out(line)


def print_plan(jp: JobPlan) -> None:
    from orchestrator.app.plan import NEAR_MISSES

    hours = f", estimated {jp.estimated_hours:g} h" if jp.estimated_hours else ""
    say(f"{jp.name} ({jp.source}{hours})", "", "  ")
    if jp.code is not None:
        dirty = " + uncommitted changes" if jp.code.dirty else ""
        say(f"code     commit {jp.code.commit[:12]}{dirty}, path {jp.code.path}: {jp.code.files} files, "
             f"{jp.code.bytes} bytes")
    if jp.plan.chosen is None:
        out("  no eligible offer")
    notes: list[str] = []          # said once, however many offers they apply to
    for n, p in enumerate(jp.options):
        print_offer("chosen" if n == 0 else f"alt {n}", p)
        if p.flags:
            say(f"flags: {', '.join(p.flags)}", "           ")
        notes += [note for note in p.notes if note not in notes]
    for note in notes:
        say(f"note: {note}", "  ", "        ")
    rest = len(jp.plan.eligible) - len(jp.options)
    if rest > 0:
        out(f"  ... {plural(rest, 'more eligible offer')}")
    counts = jp.plan.exclusion_counts()
    if counts:
        by_count = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0].value))
        say(f"excluded {plural(len(jp.plan.rejected), 'offer')}: {', '.join(f'{n} {c.value}' for c, n in by_count)}")
        for p in jp.plan.near_misses(NEAR_MISSES):
            print_offer("near", p)
            say(f"excluded: {'; '.join(e.detail for e in p.excluded)}", "           ")
    for warning in jp.warnings:
        say(f"warning: {warning}", "  ", "           ")
    for hint in jp.hints:
        say(f"hint: {hint}", "  ", "        ")


def print_offer(label: str, p: PlannedOffer) -> None:
    """One offer on one line where it fits 80 columns (the place and price line wrap under it otherwise)."""
    o = p.offer
    place = o.region + (f"/{o.zone}" if o.zone else "")
    total = f"  total {money(p.expected_cost_usd)}" if p.expected_cost_usd is not None else ""
    nodes = f" x{p.nodes} nodes" if p.nodes > 1 else ""
    say(f"{label:<7}{o.provider} {o.instance_type} {place} {o.market.value} {o.gpu_count}x{o.gpu}{nodes} "
         f"{money(p.total_price_hr)}/h{total} [{o.source}]", "  ", "         ")
