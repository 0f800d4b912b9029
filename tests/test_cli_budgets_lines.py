"""``orch budgets`` in 80 columns with realistic long values: a long name or match is cut with '~' (``--json``
has it whole), money is never cut, and a state too long to sit beside the amounts goes on the line beneath."""

from __future__ import annotations

from orchestrator.cli.budgets import budget_lines
from orchestrator.money.budgets import Budget, BudgetMatch, Standing

LONG = Budget("research-platform-gpu-spend-2026", BudgetMatch(frozenset({"ml-research", "vision-team"})),
              monthly_usd=50_000, max_usd_per_hour=200, stop_spot_at_cap=True)


def test_an_at_cap_budget_keeps_every_amount_and_its_whole_state_within_80_columns() -> None:
    lines = budget_lines(Standing(LONG, spent_usd=51_234.5, burn_hr=123.45))
    assert max(map(len, lines)) <= 80, lines
    assert lines[0].startswith("research-pla~ project ml-res~ ")     # cut, and marked cut
    assert "$51,234.50 of $50,000.00" in lines[0] and "$123.45 of $200.00" in lines[0]
    assert lines[1:] == ["  at cap: no launches, spot stops"]


def test_over_the_ceiling_says_so_beneath_and_a_short_state_stays_beside() -> None:
    over = budget_lines(Standing(LONG, spent_usd=10.0, burn_hr=250.0))
    assert max(map(len, over)) <= 80 and over[1:] == ["  over $/h: no launches"], over
    [line] = budget_lines(Standing(Budget("team-a", monthly_usd=1000), spent_usd=250.0, burn_hr=1.5))
    assert line.split() == ["team-a", "every", "job", "$250.00", "of", "$1,000.00", "$1.50", "25%"]


def test_millions_wrap_between_words_never_inside_an_amount() -> None:
    big = Budget("all", monthly_usd=20_000_000, max_usd_per_hour=50_000)
    lines = budget_lines(Standing(big, spent_usd=19_876_543.21, burn_hr=49_999.99))
    assert max(map(len, lines)) <= 80, lines
    said = " ".join(" ".join(lines).split())
    assert "$19,876,543.21 of $20,000,000.00" in said and "$49,999.99 of $50,000.00 99%" in said
