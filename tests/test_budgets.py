"""orchestrator.money.budgets: the config section, launch verdicts, thresholds and the cap (pure: no store)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.config.budgets import parse_budgets
from orchestrator.config.errors import ConfigError, ConfigLines
from orchestrator.config.file import load_config
from orchestrator.engine.budget import refusal_data
from orchestrator.money.budget_launch import Refusal, check_launch, refused_limits, refused_limits_from
from orchestrator.money.budgets import (
    Budget,
    BudgetLedger,
    BudgetLimit,
    BudgetMatch,
    CapStop,
    JobFacts,
    Standing,
    ThresholdKey,
    alerted_from,
    month_label,
    month_start,
    next_month_start,
    review,
)

MID_JULY = datetime(2025, 7, 15, 12, 0, tzinfo=UTC)
GLOBAL = Budget("everything", monthly_usd=1000.0, max_usd_per_hour=50.0, alert_at=(0.5, 0.8, 1.0))
NLP = Budget(
    "nlp",
    BudgetMatch(frozenset({"nlp"})),
    monthly_usd=200.0,
    max_usd_per_hour=10.0,
    alert_at=(0.5, 1.0),
    stop_at_cap=CapStop.SPOT,
)


def ledger(*jobs: JobFacts, alerted: frozenset[ThresholdKey] = frozenset(), now: datetime = MID_JULY) -> BudgetLedger:
    return BudgetLedger(now, tuple(jobs), alerted)


# -- the config section -----------------------------------------------------------------------------------


def test_parse_budgets_reads_every_field_with_defaults() -> None:
    budgets = parse_budgets(
        [
            {"name": "everything", "monthly_usd": "$5,000", "max_usd_per_hour": 60},
            {
                "name": "nlp",
                "match": {"project": ["nlp", "speech"]},
                "monthly_usd": 2000,
                "alert_at": [1.0, 0.25],
                "stop_spot_at_cap": True,
            },
            {"name": "burst", "max_usd_per_hour": 5.5},
        ],
        ConfigLines("config.yaml"),
    )
    everything, nlp, burst = budgets
    assert everything == Budget("everything", BudgetMatch(), 5000.0, 60.0, (0.5, 0.8, 1.0), CapStop.NONE)
    assert nlp.match.projects == {"nlp", "speech"} and nlp.alert_at == (0.25, 1.0) and nlp.stop_at_cap is CapStop.SPOT
    assert nlp.max_usd_per_hour is None
    assert burst.monthly_usd is None and burst.alert_at == ()  # no monthly cap: nothing to alert on
    assert parse_budgets(None, ConfigLines("config.yaml")) == ()


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"name": "a"}, "budgets.a: give monthly_usd, max_usd_per_hour or both"),
        ({"name": "a", "monthly_usd": 0}, "budgets.a.monthly_usd: must be a finite number > 0"),
        ({"name": "a", "monthly_usd": "lots"}, "budgets.a.monthly_usd: must be a number, got 'lots'"),
        ({"name": "a", "monthly_usd": float("inf")}, "budgets.a.monthly_usd: must be a finite number > 0"),
        ({"name": "a", "max_usd_per_hour": True}, "budgets.a.max_usd_per_hour: must be a number"),
        ({"name": "a", "monthly_usd": 10, "alert_at": [0.5, 1.5]}, "budgets.a.alert_at[1]: 1.5 is a fraction"),
        ({"name": "a", "max_usd_per_hour": 1, "alert_at": [0.5]}, "budgets.a.alert_at: needs monthly_usd"),
        (
            {"name": "a", "max_usd_per_hour": 1, "stop_spot_at_cap": True},
            "budgets.a.stop_spot_at_cap: needs monthly_usd",
        ),
        (
            {"name": "a", "monthly_usd": 1, "stop_spot_at_cap": "yes"},
            "budgets.a.stop_spot_at_cap: must be true or false",
        ),
        (
            {"name": "a", "max_usd_per_hour": 1, "stop_at_cap": "all"},
            "budgets.a.stop_at_cap: needs monthly_usd",
        ),
        ({"name": "a", "monthly_usd": 1, "stop_at_cap": "some"}, "stop_at_cap: 'some': choose none, spot or all"),
        ({"name": "a", "monthly_usd": 1, "stop_at_cap": True}, "stop_at_cap: must be none, spot or all, got a boolean"),
        (
            {"name": "a", "monthly_usd": 1, "stop_at_cap": "all", "stop_spot_at_cap": True},
            "budgets.a.stop_spot_at_cap: true says stop_at_cap: spot, but stop_at_cap is all (keep stop_at_cap and "
            "drop stop_spot_at_cap, its older form)",
        ),
        (
            {"name": "a", "monthly_usd": 1, "stop_at_cap": "spot", "stop_spot_at_cap": False},
            "budgets.a.stop_spot_at_cap: false says stop_at_cap: none, but stop_at_cap is spot",
        ),
        ({"name": "a", "monthly_usd": 1, "match": {"team": "x"}}, "budgets.a.match.team: unknown key (known: owner, "),
        ({"name": "a", "monthly_usd": 1, "match": {"owner": "Alice"}}, "budgets.a.match.owner: 'Alice' is not an orch"),
        ({"name": "a", "monthly_usd": 1, "match": {"owner": []}}, "budgets.a.match.owner: an empty list"),
        (
            {"name": "a", "monthly_usd": 1, "match": {"project": "NLP"}},
            "budgets.a.match.project: 'NLP' is not a project",
        ),
        ({"name": "a", "monthly_usd": 1, "match": {"project": []}}, "budgets.a.match.project: an empty list"),
        ({"name": "a", "monthly_usd": 1, "cap": 3}, "budgets.a.cap: unknown key"),
        ({"monthly_usd": 1}, "budgets[0]: needs a name"),
        ({"name": "a b", "monthly_usd": 1}, "budgets[0].name: 'a b'"),
        ("team-a", "budgets[0]: must be a mapping, got text"),
    ],
)
def test_parse_budgets_names_the_bad_key(raw: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_budgets([raw], ConfigLines("config.yaml"))
    assert str(err.value).startswith("config.yaml: ") and message in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("keys", "stop"),
    [
        ({}, CapStop.NONE),
        ({"stop_at_cap": "all"}, CapStop.ALL),
        ({"stop_at_cap": " Spot "}, CapStop.SPOT),
        ({"stop_at_cap": "none"}, CapStop.NONE),
        ({"stop_spot_at_cap": True}, CapStop.SPOT),  # the older key keeps working
        ({"stop_spot_at_cap": False}, CapStop.NONE),
        ({"stop_spot_at_cap": True, "stop_at_cap": "spot"}, CapStop.SPOT),  # both, agreeing
        ({"stop_spot_at_cap": False, "stop_at_cap": "none"}, CapStop.NONE),
    ],
)
def test_stop_at_cap_and_the_older_stop_spot_at_cap_read_as_one_stop(keys: dict[str, object], stop: CapStop) -> None:
    [budget] = parse_budgets([{"name": "a", "monthly_usd": 10, **keys}], ConfigLines("config.yaml"))
    assert budget.stop_at_cap is stop


def test_a_stop_at_cap_that_disagrees_with_stop_spot_at_cap_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("owner: tester\nbudgets:\n  - name: nlp\n    monthly_usd: 100\n    stop_at_cap: all\n"
                    "    stop_spot_at_cap: true\n")
    with pytest.raises(ConfigError, match=rf"^{path}:6: budgets\.nlp\.stop_spot_at_cap: true says stop_at_cap: spot, "
                       r"but stop_at_cap is all \(keep stop_at_cap and drop stop_spot_at_cap, its older form\)$"):
        load_config(path)


def test_duplicate_names_and_a_non_list_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"budgets\.a: two budgets have this name"):
        parse_budgets([{"name": "a", "monthly_usd": 1}, {"name": "a", "monthly_usd": 2}], ConfigLines("c.yaml"))
    with pytest.raises(ConfigError, match="budgets: must be a list, got a mapping"):
        parse_budgets({"a": {"monthly_usd": 1}}, ConfigLines("c.yaml"))


def test_load_config_carries_budgets_and_reports_errors_with_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("owner: tester\nbudgets:\n  - {name: all, monthly_usd: 100}\n")
    assert load_config(path).budgets == (Budget("all", monthly_usd=100.0, alert_at=(0.5, 0.8, 1.0)),)
    path.write_text("owner: tester\nbudgets:\n  - {name: all, monthly_usd: -1}\n")
    with pytest.raises(ConfigError, match=rf"^{path}:3: budgets\.all\.monthly_usd: "):
        load_config(path)


# -- months -------------------------------------------------------------------------------------------------


def test_months_are_calendar_months_in_utc() -> None:
    assert month_start(MID_JULY) == datetime(2025, 7, 1, tzinfo=UTC)
    assert next_month_start(datetime(2025, 12, 31, 23, tzinfo=UTC)) == datetime(2026, 1, 1, tzinfo=UTC)
    assert month_label(MID_JULY) == "2025-07"
    assert ledger(now=datetime(2025, 7, 31, 22, tzinfo=UTC)).hours_left_in_month() == pytest.approx(2.0)


# -- launches -----------------------------------------------------------------------------------------------


def test_a_launch_within_every_budget_is_allowed() -> None:
    facts = ledger(JobFacts(1, "a", "nlp", month_usd=50, burn_hr=4))
    verdict = check_launch([GLOBAL, NLP], facts, project="nlp", price_hr=5.0, hours=10)
    assert verdict.allowed and verdict.reason() == ""


def test_a_launch_over_the_hourly_ceiling_is_refused_with_the_numbers() -> None:
    facts = ledger(JobFacts(1, "a", "nlp", burn_hr=6.0), JobFacts(2, "b", None, burn_hr=30.0))
    verdict = check_launch([GLOBAL, NLP], facts, project="nlp", price_hr=4.5, hours=1)
    [refusal] = verdict.refusals
    assert not verdict.allowed
    assert (refusal.budget, refusal.limit) == ("nlp", BudgetLimit.HOURLY)
    assert refusal.message() == "budget nlp: $6.00/h running + $4.50/h would exceed its ceiling of $10.00/h"
    # exactly at the ceiling is within it
    assert check_launch([NLP], facts, project="nlp", price_hr=4.0, hours=1).allowed
    # the global ceiling counts every job's burn: 36 + 15 > 50
    assert [r.budget for r in check_launch([GLOBAL, NLP], facts, project=None, price_hr=15, hours=1).refusals] == [
        "everything"
    ]


def test_a_launch_that_would_cross_the_monthly_cap_is_refused() -> None:
    facts = ledger(JobFacts(1, "a", "nlp", month_usd=180.0))
    verdict = check_launch([NLP], facts, project="nlp", price_hr=3.0, hours=10)
    [refusal] = verdict.refusals
    assert refusal.limit is BudgetLimit.MONTHLY and refusal.adding_usd == pytest.approx(30.0)
    assert (
        "$180.00 spent this month + ~$30.00 for this launch would exceed its monthly cap of $200.00" in verdict.reason()
    )
    assert check_launch([NLP], facts, project="nlp", price_hr=2.0, hours=10).allowed  # 180 + 20 = 200


def test_the_monthly_estimate_stops_at_the_end_of_the_month() -> None:
    late = datetime(2025, 7, 31, 22, tzinfo=UTC)  # 2 h left in July
    facts = ledger(JobFacts(1, "a", "nlp", month_usd=150.0), now=late)
    monthly = Budget("m", monthly_usd=200.0)
    assert check_launch([monthly], facts, project="nlp", price_hr=20.0, hours=100).allowed  # ~$40 in July
    [refusal] = check_launch([monthly], facts, project="nlp", price_hr=30.0, hours=100).refusals
    assert refusal.adding_usd == pytest.approx(60.0)


def test_at_the_cap_nothing_paid_launches_but_free_machines_do() -> None:
    facts = ledger(JobFacts(1, "a", "nlp", month_usd=200.0))
    assert not check_launch([NLP], facts, project="nlp", price_hr=0.01, hours=0.001).allowed
    assert check_launch([NLP], facts, project="nlp", price_hr=0.0, hours=10).allowed
    assert check_launch([NLP], facts, project="vision", price_hr=5.0, hours=10).allowed  # not NLP's job


def test_hours_default_to_one_and_several_launches_add_up() -> None:
    facts = ledger(JobFacts(1, "a", "nlp", burn_hr=2.0))
    assert check_launch([NLP], facts, project="nlp", price_hr=8.0, hours=None).allowed
    after = facts.with_launch(2, "b", "nlp", 8.0)
    assert after.burn(NLP) == pytest.approx(10.0) and facts.burn(NLP) == pytest.approx(2.0)
    assert not check_launch([NLP], after, project="nlp", price_hr=0.5, hours=None).allowed
    assert after.with_launch(1, "a", "nlp", 1.0).burn(NLP) == pytest.approx(11.0)


def test_a_job_is_counted_by_every_budget_that_covers_it() -> None:
    facts = ledger(JobFacts(1, "a", "nlp", month_usd=990.0))
    verdict = check_launch([GLOBAL, NLP], facts, project="nlp", price_hr=11.0, hours=1)
    assert {(r.budget, r.limit) for r in verdict.refusals} == {
        ("everything", BudgetLimit.MONTHLY),
        ("nlp", BudgetLimit.MONTHLY),
        ("nlp", BudgetLimit.HOURLY),
    }


# -- thresholds and the cap ---------------------------------------------------------------------------------


def test_review_reports_each_threshold_once_per_month() -> None:
    facts = ledger(JobFacts(1, "a", "nlp", month_usd=120.0), JobFacts(2, "b", None, month_usd=700.0))
    first = review([GLOBAL, NLP], facts)
    assert [(c.budget, c.threshold) for c in first.crossings] == [
        ("everything", 0.5),
        ("everything", 0.8),
        ("nlp", 0.5),
    ]
    crossing = first.crossings[-1]
    assert crossing.message() == "budget nlp: $120.00 of $200.00 spent in 2025-07 (60%), past its 50% alert"
    alerted = alerted_from([c.data() for c in first.crossings], "2025-07")
    assert review([GLOBAL, NLP], ledger(*facts.jobs, alerted=alerted)).crossings == ()
    # last month's alerts do not count in August
    august = datetime(2025, 8, 2, tzinfo=UTC)
    assert alerted_from([c.data() for c in first.crossings], month_label(august)) == frozenset()


def test_at_the_cap_spot_machines_of_its_jobs_stop_only_when_configured() -> None:
    facts = ledger(JobFacts(1, "a", "nlp", month_usd=200.0), JobFacts(2, "b", "nlp"), JobFacts(3, "c", None))
    result = review([GLOBAL, NLP], facts)
    assert result.capped == ("nlp",)
    assert [(s.job_id, s.stop, s.budgets) for s in result.cap_stops] == [(1, CapStop.SPOT, ("nlp",)),
                                                                          (2, CapStop.SPOT, ("nlp",))]
    [cap] = [c for c in result.crossings if c.threshold == 1.0]
    assert cap.at_cap and cap.message().endswith("at its cap: no more launches this month")
    no_stop = Budget("nlp", NLP.match, 200.0, None, (1.0,), stop_at_cap=CapStop.NONE)
    assert review([no_stop], facts).cap_stops == ()


def test_at_the_cap_the_widest_stop_of_the_budgets_over_a_job_holds() -> None:
    everything = Budget("everything", monthly_usd=500.0, alert_at=(), stop_at_cap=CapStop.ALL)
    facts = ledger(JobFacts(1, "a", "nlp", month_usd=400.0), JobFacts(2, "b", None, month_usd=100.0))
    result = review([NLP, everything], facts)      # both at their cap: nlp stops spot, everything all
    assert [(s.job_id, s.stop, s.budgets) for s in result.cap_stops] == [(1, CapStop.ALL, ("nlp", "everything")),
                                                                          (2, CapStop.ALL, ("everything",))]
    assert review([NLP, replace(everything, monthly_usd=600.0)], facts).cap_stops[0].stop is CapStop.SPOT


def test_a_stop_ends_only_paid_machines_of_its_markets() -> None:
    assert [(s.ends(spot=True, price_hr=1.0), s.ends(spot=False, price_hr=1.0)) for s in CapStop] == [
        (False, False), (True, False), (True, True)]
    assert not CapStop.ALL.ends(spot=False, price_hr=0.0) and not CapStop.SPOT.ends(spot=True, price_hr=0.0)


def test_standings_say_how_close_each_budget_is() -> None:
    facts = ledger(JobFacts(1, "a", "nlp", month_usd=50.0, burn_hr=12.0))
    everything, nlp = review([GLOBAL, NLP], facts).standings
    assert everything.fraction == pytest.approx(0.05) and not everything.over_ceiling
    assert nlp.fraction == pytest.approx(0.25) and nlp.over_ceiling and not nlp.at_cap
    doc = nlp.to_json()
    assert doc["match"] == ["nlp"] and doc["burn_usd_per_hour"] == 12.0 and doc["over_ceiling"] is True
    # stop_at_cap; stop_spot_at_cap, the older key, stays in the JSON: true when spot machines end at the cap
    assert (doc["stop_at_cap"], doc["stop_spot_at_cap"]) == ("spot", True)
    docs = [Standing(replace(NLP, stop_at_cap=stop), 0.0, 0.0).to_json() for stop in (CapStop.ALL, CapStop.NONE)]
    assert [(d["stop_at_cap"], d["stop_spot_at_cap"]) for d in docs] == [("all", True), ("none", False)]
    hourly_only = review([Budget("h", max_usd_per_hour=1.0)], facts).standings[0]
    assert hourly_only.fraction is None and not hourly_only.at_cap


# -- the manifest's project: ------------------------------------------------------------------------------


def test_a_manifest_names_its_project_and_a_bad_one_is_reported_where_it_is(tmp_path: Path) -> None:
    from orchestrator.manifest import ManifestError, load_manifests

    path = tmp_path / "job.yaml"
    body = (
        "apiVersion: orch/v1\nkind: Job\nname: train\nproject: {project}\nresources: {{gpu: A100-80G}}\n"
        "run: {{launcher: command, command: nvidia-smi}}\n"
    )
    path.write_text(body.format(project="nlp"))
    [loaded] = load_manifests([path])
    assert loaded.manifest.project == "nlp" and loaded.manifest.to_json()["project"] == "nlp"
    path.write_text(body.format(project="Team_A"))
    with pytest.raises(ManifestError) as err:
        load_manifests([path])
    assert err.value.errors[0].format().startswith(f"{path}:4:10: project:")


def test_an_owner_budget_counts_the_jobs_that_owners_engine_launches() -> None:
    [alice] = parse_budgets(
        [{"name": "alice", "match": {"owner": "alice"}, "max_usd_per_hour": 10}], ConfigLines("c.yaml")
    )
    assert alice.match == BudgetMatch(owners=frozenset({"alice"})) and alice.match.describe() == "owner alice"
    facts = ledger(
        JobFacts(1, "a", None, burn_hr=6.0, owner="alice"), JobFacts(2, "b", None, burn_hr=30.0, owner="bob")
    )
    assert facts.burn(alice) == 6.0
    [refusal] = check_launch([alice], facts, project=None, price_hr=5.0, hours=1, owner="alice").refusals
    assert (refusal.budget, refusal.limit, refusal.current_usd) == ("alice", BudgetLimit.HOURLY, 6.0)
    assert check_launch([alice], facts, project=None, price_hr=5.0, hours=1, owner="bob").allowed
    both = Budget("nlp-alice", BudgetMatch(frozenset({"nlp"}), frozenset({"alice"})), max_usd_per_hour=1.0)
    assert both.match.describe() == "project nlp, owner alice"
    assert check_launch([both], facts, project="cv", price_hr=5.0, hours=1, owner="alice").allowed
    assert not check_launch([both], facts, project="nlp", price_hr=5.0, hours=1, owner="alice").allowed
    assert facts.with_launch(3, "c", None, 2.0, "alice").burn(alice) == 8.0


def test_a_refusal_events_data_gives_back_its_limits_and_other_data_gives_none() -> None:
    refusals = (Refusal("nlp", BudgetLimit.HOURLY, 15.0, 10.0, 10.0),
                Refusal("all", BudgetLimit.MONTHLY, 1e3, 990.0, 20.0))
    assert refused_limits_from(refusal_data(refusals)) == refused_limits(refusals) == frozenset(
        {("nlp", BudgetLimit.HOURLY), ("all", BudgetLimit.MONTHLY)})
    for data in ({}, {"refusals": []}, {"refusals": "nlp"}, {"refusals": [{"budget": "nlp"}]},
                 {"refusals": [{"budget": "nlp", "limit": "weekly_usd"}]}, {"refusals": [["nlp", "monthly_usd"]]}):
        assert refused_limits_from(data) is None, data
