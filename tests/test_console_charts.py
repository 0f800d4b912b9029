"""The console's pure parts: which attempts are relaunches, the timeline's lanes and marks, chart axes, budgets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orchestrator.console.budgets import BudgetLevel, BudgetPeriod, BudgetScope, BudgetView, budget_views
from orchestrator.console.charts import nice_ceiling, sparkline, stacked_bars, time_ticks, x_labels
from orchestrator.console.timeline import MarkKind, build_timeline, relaunches
from orchestrator.engine.states import AttemptState, DesiredState, JobStatus
from orchestrator.store.console_values import AttemptView, CheckpointView, JobBudget, JobDetail, UtilPoint
from orchestrator.store.spend_series import Series, bucket_starts
from providers.base import Market

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
M = timedelta(minutes=1)


def _a(id_: int, gen: int, rank: int, state: AttemptState, created: datetime, started: datetime | None = None,
       ended: datetime | None = None, instance: str | None = "i") -> AttemptView:
    return AttemptView(id=id_, generation=gen, node_rank=rank, launch_id=f"L{id_}", state=state, provider="aws",
                       instance_id=instance, instance_type="x", region="r", zone=None, market=Market.SPOT,
                       quoted_hr=1.0, actual_hr=None, created_at=created, started_at=started, ended_at=ended,
                       reason=None, checkpoint_restored=None)


def test_a_relaunch_follows_a_preemption_once_per_gang_and_not_a_refused_launch() -> None:
    attempts = [
        _a(1, 1, 0, AttemptState.FAILED, T0, instance=None, ended=T0),          # refused by the cloud
        _a(2, 2, 0, AttemptState.PREEMPTED, T0 + M, T0 + 2 * M, T0 + 10 * M),   # a gang of two, preempted
        _a(3, 2, 1, AttemptState.PREEMPTED, T0 + M, T0 + 2 * M, T0 + 10 * M),
        _a(4, 3, 0, AttemptState.FAILED, T0 + 11 * M, instance=None, ended=T0 + 11 * M),   # refused: tries on
        _a(5, 4, 0, AttemptState.FAILED, T0 + 11 * M, T0 + 12 * M, T0 + 20 * M),        # lost after running
        _a(6, 4, 1, AttemptState.TERMINATED, T0 + 11 * M, T0 + 12 * M, T0 + 20 * M),
        _a(7, 5, 0, AttemptState.RUNNING, T0 + 21 * M, T0 + 22 * M),
    ]
    assert relaunches(attempts) == {5: 1, 7: 2}


def _detail(attempts: list[AttemptView], checkpoints: tuple[CheckpointView, ...] = (),
            status: JobStatus = JobStatus.RUNNING) -> JobDetail:
    return JobDetail(id=1, name="j", status=status, status_reason=None, desired=DesiredState.ACTIVE, relaunches=1,
                     created_at=T0, applied_at=T0, spent_usd=0.0, budget_usd=None, gpu="", market="",
                     source_path=None, attempts=tuple(attempts), checkpoints=checkpoints, events=(), events_total=0,
                     open_relaunch=None)


def test_the_timeline_has_a_lane_per_machine_with_its_marks() -> None:
    now = T0 + 60 * M
    detail = _detail([_a(1, 1, 0, AttemptState.FAILED, T0, instance=None, ended=T0),
                      _a(2, 2, 0, AttemptState.PREEMPTED, T0 + M, T0 + 4 * M, T0 + 30 * M),
                      _a(3, 3, 0, AttemptState.RUNNING, T0 + 31 * M, T0 + 35 * M)],
                     checkpoints=(CheckpointView("s3://c/1", 100, T0 + 20 * M, 2),))
    tl = build_timeline(detail, now)
    assert [lane.label for lane in tl.lanes] == ["gen 2 · node 0 · aws spot", "gen 3 · node 0 · aws spot"]
    assert (tl.start, tl.end) == (T0 + M, now)
    first, second = tl.lanes
    assert [s.kind.value for s in first.spans] == ["boot", "run"] and first.spans[1].end == T0 + 30 * M
    assert [(m.kind, m.at) for m in first.marks] == [(MarkKind.CHECKPOINT, T0 + 20 * M),
                                                     (MarkKind.PREEMPTION, T0 + 30 * M)]
    assert [(m.kind, m.at) for m in second.marks] == [(MarkKind.RELAUNCH, T0 + 31 * M)]
    assert second.spans[-1].end == now


def test_axes_fall_on_round_times_and_amounts() -> None:
    assert [nice_ceiling(v) for v in (0, 0.003, 0.7, 1.2, 23, 251)] == [1.0, 0.005, 1.0, 2.0, 25.0, 500.0]
    ticks = time_ticks(T0 - 5 * 60 * M + 7 * M, T0 + 7 * M)
    assert ticks[0] == T0 - 4 * 60 * M and all(t.minute == 0 for t in ticks) and len(ticks) <= 8
    day = bucket_starts(T0 - timedelta(hours=24), T0, timedelta(hours=1))
    labels = x_labels(day, timedelta(hours=1))
    assert len(labels) <= 8 and labels[0][1].startswith("Feb 28") and ("Mar 1" in dict(labels).values())
    week = bucket_starts(T0 - timedelta(days=7), T0, timedelta(hours=6))
    assert all(day_label.count(" ") == 1 for _, day_label in x_labels(week, timedelta(hours=6)))


def test_charts_draw_one_shape_per_value() -> None:
    starts = bucket_starts(T0, T0 + 3 * 60 * M, 60 * M)
    svg = str(stacked_bars([Series("a", (1.0, 0.0, 2.0)), Series("b", (0.5, 0.5, 0.0))], starts, 60 * M,
                           label="spend"))
    assert svg.count('class="bar c0"') == 2 and svg.count('class="bar c1"') == 2
    spark = str(sparkline([UtilPoint(T0 + i * M, 50.0, 60.0) for i in range(5)] + [UtilPoint(T0 + 30 * M, 9.0, 9.0)],
                          T0, T0 + 60 * M))
    assert spark.count("<polyline") == 1 and spark.count("<circle") == 2   # a gap splits the line


def test_budgets_are_one_typed_list_configured_ones_first() -> None:
    jobs = [JobBudget("a", JobStatus.RUNNING, 10.0, 9.0), JobBudget("b", JobStatus.RUNNING, None, 3.0),
            JobBudget("c", JobStatus.RUNNING, 10.0, 12.0), JobBudget("d", JobStatus.PENDING, 0.0, 0.0)]
    monthly = BudgetView(BudgetScope.GLOBAL, "account", BudgetPeriod.MONTHLY, 1000.0, 100.0)
    page = budget_views(jobs, configured=[monthly])
    assert [(v.scope, v.name) for v in page.budgets] == [(BudgetScope.GLOBAL, "account"), (BudgetScope.JOB, "d"),
                                                        (BudgetScope.JOB, "c"), (BudgetScope.JOB, "a")]
    levels = {v.name: (v.level, v.meter) for v in page.budgets}
    assert levels == {"account": (BudgetLevel.OK, 2), "a": (BudgetLevel.NEAR, 18), "c": (BudgetLevel.OVER, 20),
                      "d": (BudgetLevel.OVER, 20)}
    assert [u.job for u in page.unbudgeted] == ["b"]
    assert page.budgets[-1].left_usd == pytest.approx(1.0)
