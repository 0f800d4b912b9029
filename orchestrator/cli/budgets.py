"""``orch budgets``: each budget of orch's config, how much of it is spent this month and what burns now."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.common import fail_store
from orchestrator.cli.errors import EXIT_BAD_INPUT, fail
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app

if TYPE_CHECKING:
    from orchestrator.money.budgets import Standing


def _money(usd: float, compact_from: float = 10_000) -> str:
    """Dollars and cents below ``compact_from``, else ``$12.3k``/``$4.5M``/``$1.0B``: a monthly cap of $250,000
    and what was spent of it fit the column."""
    if usd < compact_from:
        return f"${usd:,.2f}"
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if round(usd / size, 1) >= 1:      # $999,999,999.99 is $1.0B, not $1,000.0M
            return f"${usd / size:,.1f}{unit}"
    return f"${usd:,.0f}"


@app.command("budgets")
def budgets_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="One object per budget (fields: docs/cli.md).")] = False,
) -> None:
    """Each budget: spent this month of its cap, $/h burning now of its ceiling, and whether it holds."""
    from orchestrator.clock import utcnow
    from orchestrator.config.errors import ConfigError
    from orchestrator.config.file import load_config
    from orchestrator.money.budgets import month_label
    from orchestrator.store import StoreError, open_store
    from orchestrator.store.budget_watch import standings

    try:
        config = load_config()
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT, as_json=as_json)
    if not config.budgets:
        if as_json:
            sys.stdout.write("[]\n")
        else:
            sys.stdout.write("no budgets configured (add budgets: to orch's config; see docs/configuration.md)\n")
        return
    try:
        store = open_store()
    except StoreError as exc:
        fail_store(exc, as_json)
    now = utcnow()
    try:
        review = standings(store, config.budgets, now)
    finally:
        store.close()
    if as_json:
        sys.stdout.write(dumps([s.to_json() for s in review.standings], indent=2) + "\n")
        return
    sys.stdout.write(f"{'BUDGET':<14}{'COUNTS':<16}{'SPENT IN ' + month_label(now):>22}  {'$/H NOW':>18}  STATE\n")
    for s in review.standings:
        sys.stdout.write(_lines(s) + "\n")


def _lines(s: Standing) -> str:
    """The budget's row (80 columns at most) and, when it stops launches, what it stops on the line beneath
    (at cap or over its ceiling is the line that matters most, and it was the one past 80 columns)."""
    from orchestrator.cli.status_table import cell
    from orchestrator.money.budgets import CapStop

    b = s.budget
    spent = _money(s.spent_usd) + (f" of {_money(b.monthly_usd)}" if b.monthly_usd is not None else "")
    burn = _money(s.burn_hr, 1_000) + (f" of {_money(b.max_usd_per_hour, 1_000)}"
                                        if b.max_usd_per_hour is not None else "")
    stops = ""
    if s.at_cap:
        ends = {CapStop.SPOT: ", spot stops", CapStop.ALL: ", paid machines stop"}
        stops = "at cap: no launches" + ends.get(b.stop_at_cap, "")
    elif s.over_ceiling:
        stops = "over $/h: no launches"
    state = f"{s.fraction:.0%}" if s.fraction is not None else ("over" if s.over_ceiling else "ok")
    row = f"{cell(b.name, 13)} {cell(b.match.describe(), 15)} {spent:>22}  {burn:>18}  {state}"
    return row + (f"\n  {stops}" if stops else "")
