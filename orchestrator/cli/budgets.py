"""``orch budgets``: each budget of orch's config, how much of it is spent this month and what burns now."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, EXIT_NO_MATCH, WIDTH, fail, wrap
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app

if TYPE_CHECKING:
    from orchestrator.money.budgets import Standing


def _money(usd: float) -> str:
    return f"${usd:,.2f}"


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
        fail(str(exc), EXIT_NO_MATCH, as_json=as_json)
    now = utcnow()
    try:
        review = standings(store, config.budgets, now)
    finally:
        store.close()
    if as_json:
        sys.stdout.write(dumps([s.to_json() for s in review.standings], indent=2) + "\n")
        return
    sys.stdout.write(f"{'BUDGET':<14}{'COUNTS':<16}{'SPENT IN ' + month_label(now):>22}  {'$/H NOW':>17}  STATE\n")
    for s in review.standings:
        sys.stdout.write("".join(line + "\n" for line in budget_lines(s)))


def budget_lines(s: Standing) -> list[str]:
    """One budget in 80 columns: a name or a match too long for its column ends in '~' (``--json`` has them
    whole); money is never cut; the state goes on the line beneath, indented, where it does not fit beside."""
    from orchestrator.cli.status_table import cell

    b = s.budget
    spent = _money(s.spent_usd) + (f" of {_money(b.monthly_usd)}" if b.monthly_usd is not None else "")
    burn = _money(s.burn_hr) + (f" of {_money(b.max_usd_per_hour)}" if b.max_usd_per_hour is not None else "")
    if s.at_cap:
        state = "at cap: no launches" + (", spot stops" if b.stop_spot_at_cap else "")
    elif s.over_ceiling:
        state = "over $/h: no launches"
    else:
        state = f"{s.fraction:.0%}" if s.fraction is not None else "ok"
    row = f"{cell(b.name, 13)} {cell(b.match.describe(), 15)} {spent:>22}  {burn:>17}"
    if len(row) + 2 + len(state) <= WIDTH:
        return [f"{row}  {state}"]
    # Amounts in the millions push the row past 80 too: it wraps between the amounts' words, never inside one.
    return [*wrap(row, " " * 32).splitlines(), f"  {state}"]
