"""``orch status`` as text that fits 80 columns: one line per job (where it runs, $/h burning now at the
charged price, spent) with its last event beneath (and, for a failed or waiting job, its typed failure: the
cause, the first line of the node's words, and the fix), then one line per live machine with its QUOTED $/h (the
offer it was launched on) beside the ACTUAL $/h its cloud reports ("-" where the cloud reports none), then the
totals (the spend counts the deleted jobs' too: it is what was paid). Instance types, launch ids and every other
field are in ``orch status --json``."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from orchestrator.cli.errors import wrap
from orchestrator.redaction import safe_line
from orchestrator.words import plural

if TYPE_CHECKING:
    from orchestrator.app.status import InstanceView, JobView, StatusReport

WIDTH = 80


def money(usd: float) -> str:
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.4f}"


def cell(text: str, width: int) -> str:
    """``text`` in ``width`` columns: padded, or cut with a '~' where it is longer."""
    return text.ljust(width) if len(text) <= width else text[:width - 1] + "~"


def status_lines(report: StatusReport) -> list[str]:
    lines: list[str] = []
    if not report.jobs:
        lines.append("no jobs (apply some manifests: orch apply PATH)")
    else:
        lines.append(f"{'JOB':<18}{'STATUS':<11}{'WHERE':<24}{'$/H':>8}{'SPENT':>12}{'RL':>4}")
        for j in report.jobs:
            lines += _job_lines(j)
    lines += _legend(report.jobs)
    if report.instances:
        lines += ["", f"  {'PROVIDER':<9}{'INSTANCE':<20}{'STATE':<12}{'QUOTED':>9}{'ACTUAL':>9}  JOB"]
        lines += [_instance_line(i) for i in report.instances]
    return [*lines, "", *_total_lines(report)]


def _total_lines(report: StatusReport) -> list[str]:
    """The totals, wrapped (never cut: they are money). The spend is the bill's: the jobs listed and the deleted
    ones, whose machines are gone but whose hours were paid; the deleted jobs' part is said where there is one."""
    spent = f"spent {money(report.spent_usd)}"
    if report.deleted_spent_usd > 0:
        spent += f" (deleted jobs: {money(report.deleted_spent_usd)})"
    return wrap(f"total: {plural(len(report.instances), 'live instance')}, burning {money(report.burn_hr)}/h, "
                f"{spent}").splitlines()


#: What the marks after a job's status mean; a legend line is printed for each mark a table shows.
_LEGEND = {"!": "!: its machine is not confirmed gone and still bills (see the machines below)",
           "*": "*: no longer wanted (orch down, apply --prune); no machine of it bills"}


def shown_status(j: JobView) -> str:
    """The STATUS cell: the job's status, or ``stopping!`` while a machine of a job that is over or no longer
    wanted is not confirmed gone (never ``stopped`` then: it still bills), ``<status>*`` for one no longer
    wanted whose machines are gone."""
    from orchestrator.engine.states import DesiredState, JobStatus

    if j.still_billing:
        # A job down or stopped is being stopped; a job that succeeded or failed keeps that word.
        stopping = j.desired_state is not DesiredState.ACTIVE or j.status is JobStatus.STOPPED
        return f"{'stopping' if stopping else j.status.value}!"
    return j.status.value if j.desired_state is DesiredState.ACTIVE else f"{j.status.value}*"


def _legend(jobs: tuple[JobView, ...]) -> list[str]:
    marks = {shown_status(j)[-1] for j in jobs}
    return [_LEGEND[m] for m in _LEGEND if m in marks]


def _job_lines(j: JobView) -> list[str]:
    cur = j.current
    where = f"{cur.provider} {cur.region} {cur.market}" if cur else "-"
    status = shown_status(j)
    lines = [f"{cell(j.name, 17)} {cell(status, 10)} {cell(where, 23)} {money(j.burn_hr):>8}"
             f"{money(j.spent_usd):>12}{j.relaunches:>4}".rstrip()]
    if j.last_event:
        lines.append(cell(f"  {j.last_event.kind}: {j.last_event.message}", WIDTH).rstrip())
    if j.failure is not None:
        # The typed cause and the node's first line, then the fix: wrapped, never cut.
        lines += textwrap.wrap(safe_line(f"cause {j.failure.headline()}"), WIDTH, initial_indent="  ",
                               subsequent_indent="    ", max_lines=3, placeholder=" ...")
        lines += textwrap.wrap(f"fix: {j.failure.cause.fix}", WIDTH, initial_indent="  ", subsequent_indent="    ")
    return lines


def _instance_line(i: InstanceView) -> str:
    actual = "-" if i.actual_price_hr is None else money(i.actual_price_hr)
    state = i.state.value if i.state is not None else "?"    # None: no machine row yet (orch down's view)
    return cell(f"  {cell(i.provider, 8)} {cell(i.instance_id or '?', 19)} {cell(state, 11)} "
                f"{money(i.price_hr):>9} {actual:>8}  {i.job or '-'}", WIDTH).rstrip()
