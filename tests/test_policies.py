"""Idle detection, recovery decisions and spend accrual: pure policy, injected time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.engine.idle_rule import IdlePolicy, UtilSample, idle_verdict
from orchestrator.engine.recovery_policy import DefaultRecoveryPolicy, Preemption, RecoveryAction, RecoveryContext
from orchestrator.money.spend import accrued_usd, would_break_budget
from providers.base import Market

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
POLICY = IdlePolicy(min_gpu_util_pct=5, window=timedelta(minutes=15))


def samples(utils: list[tuple[float, ...]], every_s: int = 60, end: datetime = T0) -> list[UtilSample]:
    n = len(utils)
    return [UtilSample(end - timedelta(seconds=every_s * (n - 1 - i)), u) for i, u in enumerate(utils)]


def test_idle_for_the_whole_window() -> None:
    v = idle_verdict(samples([(2.0, 1.0)] * 20), POLICY, T0)
    assert v.idle and "every GPU under 5%" in v.reason


def test_idle_for_less_than_the_window_is_kept() -> None:
    v = idle_verdict(samples([(2.0, 2.0)] * 10), POLICY, T0)
    assert not v.idle and "history" in v.reason


def test_one_busy_gpu_or_a_recent_burst_keeps_it() -> None:
    assert not idle_verdict(samples([(2.0, 90.0)] * 20), POLICY, T0).idle
    burst = [(2.0, 2.0)] * 19 + [(60.0, 1.0)]
    assert not idle_verdict(samples(burst), POLICY, T0).idle
    # A burst older than the window no longer counts.
    old_burst = [(80.0, 80.0)] * 3 + [(1.0, 1.0)] * 20
    assert idle_verdict(samples(old_burst), POLICY, T0).idle


def test_no_job_is_idle_at_once() -> None:
    assert idle_verdict([], POLICY, T0, has_job=False).idle


def ctx(**kw: object) -> RecoveryContext:
    base: dict[str, object] = dict(now=T0, relaunch_count=0, max_relaunches=3, markets=frozenset(Market),
                                   preemptions=(), cooldown=timedelta(minutes=30))
    base.update(kw)
    return RecoveryContext(**base)  # type: ignore[arg-type]


def test_relaunch_excludes_zones_inside_the_cooldown_only() -> None:
    pre = [Preemption(T0 - timedelta(minutes=5), "aws", "use1-az1", "us-east-1"),
           Preemption(T0 - timedelta(hours=2), "aws", "use1-az2", "us-east-1"),
           Preemption(T0 - timedelta(minutes=1), "gcp", None, "us-central1")]
    d = DefaultRecoveryPolicy().decide(ctx(preemptions=pre))
    assert d.action is RecoveryAction.RELAUNCH
    assert d.exclude_places == {"use1-az1", "us-central1"}


@pytest.mark.parametrize(
    ("kw", "needle"),
    [({"relaunch_count": 3}, "max relaunches"),
     ({"spent_usd": 50.0, "budget_usd": 50.0}, "budget"),
     ({"deadline": T0 - timedelta(minutes=1)}, "deadline")],
)
def test_gives_up_at_limits(kw: dict[str, object], needle: str) -> None:
    d = DefaultRecoveryPolicy().decide(ctx(**kw))
    assert d.action is RecoveryAction.GIVE_UP and needle in d.reason


def test_falls_back_to_on_demand_when_spot_cannot_meet_the_deadline() -> None:
    tight = DefaultRecoveryPolicy().decide(ctx(deadline=T0 + timedelta(hours=5), remaining_hours=4.5))
    assert tight.markets == {Market.ON_DEMAND} and "on-demand" in tight.reason
    loose = DefaultRecoveryPolicy().decide(ctx(deadline=T0 + timedelta(hours=10), remaining_hours=4.5))
    assert loose.markets == frozenset(Market)


def test_spend() -> None:
    assert accrued_usd(3.0, T0, T0 + timedelta(minutes=30)) == pytest.approx(1.5)
    assert accrued_usd(3.0, T0, T0 - timedelta(minutes=30)) == 0.0
    assert would_break_budget(9.0, 2.0, 0.5, 10.0)          # a launch counts at least one hour
    assert not would_break_budget(7.0, 2.0, 0.5, 10.0)
    assert not would_break_budget(1e9, 2.0, 1.0, None)
