"""``orch budgets``' table within 80 columns: a budget at its cap (the row that matters most) ran to 92 columns with
its state, a cap of $250,000 pushed the row past its column, and a cap of 1e300 printed 300 digits (864 columns)."""

from __future__ import annotations

import pytest

from orchestrator.cli.budgets import _lines, _money
from orchestrator.config.budgets import BudgetSection
from orchestrator.money.budgets import Budget, BudgetMatch, CapStop, Standing


def test_rows_fit_80_columns_and_a_budget_at_its_cap_says_what_it_stops_beneath() -> None:
    rows = [
        Standing(Budget("a-very-long-budget-name", BudgetMatch(frozenset({"alpha-team-one", "beta"})), 250_000.0,
                        2_500.0, stop_at_cap=CapStop.SPOT), 251_234.5, 1_999.99),
        Standing(Budget("hourly", max_usd_per_hour=0.01), 0.1, 0.75),
        Standing(Budget("mid", monthly_usd=9_999.99, max_usd_per_hour=999.99), 9_000.0, 999.99),
        Standing(Budget("big", monthly_usd=1e9, max_usd_per_hour=999_999_999.99), 0.1, 0.0),
    ]
    text = "\n".join(_lines(s) for s in rows)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    lines = text.splitlines()
    assert lines[0].startswith("a-very-long-~ project alpha-~") and "$251.2k of $250.0k" in lines[0]
    assert "$2.0k of $2.5k" in lines[0] and lines[0].endswith("100%")
    assert lines[1] == "  at cap: no launches, spot stops"
    assert lines[2].endswith("over") and lines[3] == "  over $/h: no launches"
    assert "$9,000.00 of $9,999.99" in lines[4] and "$999.99 of $999.99" in lines[4]
    assert "$0.10 of $1.0B" in lines[5] and "$0.00 of $1.0B" in lines[5]


def test_a_budget_at_its_cap_says_which_machines_it_ends() -> None:
    """``stop_at_cap``: none ends nothing, spot its spot machines, all every paid one (on-demand too)."""
    capped = [_lines(Standing(Budget("b", monthly_usd=10.0, stop_at_cap=stop), 10.0, 0.0)).splitlines()[1]
              for stop in CapStop]
    assert capped == ["  at cap: no launches", "  at cap: no launches, spot stops",
                      "  at cap: no launches, paid machines stop"]


def test_money_is_dollars_and_cents_below_ten_thousand_then_compact() -> None:
    assert [_money(v) for v in (0, 1_000, 9_999.99, 12_345, 2_500_000, 999_999_999.99)] == [
        "$0.00", "$1,000.00", "$9,999.99", "$12.3k", "$2.5M", "$1.0B"]


@pytest.mark.parametrize("key", ["monthly_usd", "max_usd_per_hour"])
def test_a_budget_over_a_billion_dollars_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match="at most 1,000,000,000"):
        BudgetSection.model_validate({"name": "big", key: 1e300})
    assert getattr(BudgetSection.model_validate({"name": "ok", key: 1e9}), key) == 1e9
