"""The console's budgets page shows the config's budgets (monthly cap and $/h ceiling, global and per
project) beside the jobs' own, from the same ledger ``orch budgets`` reads."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.console.app import ConsoleApp
from orchestrator.console.auth import Guard
from orchestrator.console.budgets import BudgetPeriod, BudgetScope, configured_views
from orchestrator.money.budgets import Budget, BudgetMatch
from orchestrator.store.budget_watch import standings
from orchestrator.store.db import Store, open_store
from tests.support import console_world
from tests.test_console_http import call

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
EVERYTHING = Budget("everything", monthly_usd=10_000.0, max_usd_per_hour=100.0, alert_at=(0.5,))
VISION = Budget("vision", BudgetMatch(frozenset({"vision"})), max_usd_per_hour=5.0)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite:///{tmp_path / 'orch.db'}")
    console_world.fill(s, NOW)
    try:
        yield s
    finally:
        s.close()


def test_configured_budgets_become_views_per_limit(store: Store) -> None:
    review = standings(store, [EVERYTHING, VISION], NOW)
    views = configured_views(review)
    assert [(v.scope, v.name, v.period) for v in views] == [
        (BudgetScope.GLOBAL, "everything", BudgetPeriod.MONTHLY),
        (BudgetScope.GLOBAL, "everything", BudgetPeriod.HOURLY),
        (BudgetScope.PROJECT, "vision (vision)", BudgetPeriod.HOURLY)]
    everything = review.standings[0]
    assert views[0].spent_usd == pytest.approx(everything.spent_usd) and views[1].spent_usd == everything.burn_hr
    assert everything.burn_hr > 0           # the world has machines running now


def test_the_budgets_page_lists_them_first(store: Store) -> None:
    page = call(ConsoleApp(store, Guard(None), clock=lambda: NOW, budgets=[EVERYTHING, VISION]), "GET", "/budgets")
    assert page.status == 200
    assert page.body.index(">everything<") < page.body.index("job lifetime")
    assert "$/h now" in page.body and "vision (vision)" in page.body and "$10,000.00" in page.body
    assert "budgets:</code> in orch's config" in page.body
    plain = call(ConsoleApp(store, Guard(None), clock=lambda: NOW), "GET", "/budgets")
    assert ">everything<" not in plain.body and "job lifetime" in plain.body
