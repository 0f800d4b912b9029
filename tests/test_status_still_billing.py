"""``orch status`` never calls a job ``stopped`` while a machine of it is not confirmed gone: a job over or no
longer wanted whose machine still bills reads ``stopping!`` (or ``succeeded!``/``failed!``), a legend line says
what each mark shown means, and ``--json`` carries the fact as ``still_billing``."""

from __future__ import annotations

from orchestrator.app.status import InstanceView, JobView, StatusReport
from orchestrator.cli.status_table import shown_status, status_lines
from orchestrator.engine.states import DesiredState, JobStatus
from providers.base import InstanceState, Market


def _machine(job: str) -> InstanceView:
    return InstanceView(job, "vastai", "123", "l1", "RTX_4090", "US", Market.SPOT, InstanceState.STOPPING, 0.4)


def _job(name: str, status: JobStatus, desired: DesiredState, live: bool) -> JobView:
    return JobView(name, status, desired, (_machine(name),) if live else (), 0.0, 0.0, 0, None)


def test_a_job_whose_machine_still_bills_is_never_shown_stopped() -> None:
    cases = [(JobStatus.STOPPED, DesiredState.DELETED, True, "stopping!"),
             (JobStatus.RUNNING, DesiredState.DELETED, True, "stopping!"),
             (JobStatus.STOPPED, DesiredState.ACTIVE, True, "stopping!"),      # stopped by policy, machine ending
             (JobStatus.SUCCEEDED, DesiredState.ACTIVE, True, "succeeded!"),
             (JobStatus.STOPPED, DesiredState.DELETED, False, "stopped*"),
             (JobStatus.RUNNING, DesiredState.ACTIVE, True, "running"),
             (JobStatus.STOPPED, DesiredState.ACTIVE, False, "stopped")]
    for status, desired, live, shown in cases:
        job = _job("a", status, desired, live)
        assert shown_status(job) == shown, (status, desired, live)
        assert job.to_json()["still_billing"] is shown.endswith("!")
        assert job.to_json()["live_instances"] == int(live)


def test_the_legend_says_each_mark_shown_and_only_those_within_80_columns() -> None:
    billing = _job("a", JobStatus.STOPPED, DesiredState.DELETED, True)
    gone = _job("b", JobStatus.STOPPED, DesiredState.DELETED, False)
    lines = status_lines(StatusReport((billing, gone), billing.instances))
    assert "!: its machine is not confirmed gone and still bills (see the machines below)" in lines
    assert "*: no longer wanted (orch down, apply --prune); no machine of it bills" in lines
    assert max(map(len, lines)) <= 80
    only_gone = status_lines(StatusReport((gone,), ()))
    assert any(ln.startswith("*:") for ln in only_gone) and not any(ln.startswith("!:") for ln in only_gone)
    running = _job("c", JobStatus.RUNNING, DesiredState.ACTIVE, True)
    assert not any(ln.startswith(("!:", "*:")) for ln in status_lines(StatusReport((running,), running.instances)))
