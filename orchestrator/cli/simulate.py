"""``orch simulate``: replay spot policies on availability traces; cost, deadlines, and the offline optimum.

Nothing heavy at module level: the policy package, numpy and matplotlib load inside the command.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from orchestrator.cli.errors import EXIT_BAD_INPUT, fail
from orchestrator.cli.jsonout import dumps
from orchestrator.cli.main import app
from orchestrator.redaction import shown
from orchestrator.words import plural

if TYPE_CHECKING:
    from rich.table import Table

    from orchestrator.policy.evaluate import CaseResult, PolicySummary
    from orchestrator.policy.model import ProblemSpec
    from orchestrator.policy.traces import ZoneSet

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(h|m|s|d)?\s*$", re.IGNORECASE)


class DurationError(ValueError):
    pass


#: A simulated job's window (deadline / the traces' gap) holds at most this many ticks: a two-week deadline at
#: 30 s ticks is 40,320, and the optimum costs about half a millisecond per tick and start. The gap is at
#: most MAX_GAP_PER_SLACK times the slack (deadline - work; the optimum's grid divides a tick by that ratio).
MAX_WINDOW_TICKS = 50_000
MAX_GAP_PER_SLACK = 500.0
MAX_HOURS = 10 * 365 * 24.0


def parse_duration_h(flag: str, text: str) -> float:
    """'48h', '12m', '0.2h', '720s', '2d' -> hours, at most ten years, read by orch's one duration parser
    (orchestrator/inputs/durations.py). A bare number is refused: everywhere else orch reads one as seconds,
    and here it used to mean hours, so a unit must say which."""
    from orchestrator.inputs.durations import HintedValueError, parse_duration

    m = _DURATION.fullmatch(text)
    if m and m.group(2) is None:
        raise DurationError(f"{flag}: {shown(text)} needs a unit ({m.group(1)}s, {m.group(1)}m, {m.group(1)}h or "
                            f"{m.group(1)}d)")
    try:
        hours = parse_duration(text).total_seconds() / 3600
    except HintedValueError as exc:
        if "ten years" in exc.message:
            raise DurationError(f"{flag}: {shown(text)} is longer than ten years") from None
        raise DurationError(f"{flag}: {shown(text)} is not a duration (examples: 48h, 12m, 0.2h, 720s)") from None
    if hours > MAX_HOURS:
        raise DurationError(f"{flag}: {shown(text)} is longer than ten years")
    return hours


def check_sets(spec: ProblemSpec, sets: list[ZoneSet]) -> None:
    """Refuse zone sets whose replay would be absurdly long (a tiny gap, a gap far coarser than the slack)."""
    from orchestrator.policy.simulator import window_ticks

    for zs in sets:
        ticks = window_ticks(spec, zs.gap_h)
        if ticks > MAX_WINDOW_TICKS:
            raise ValueError(f"{zs.name}: a {spec.deadline_h:g} h deadline is {ticks} ticks of "
                             f"{zs.gap_h * 3600:g} s, more than {MAX_WINDOW_TICKS}: use a coarser trace or a "
                             "shorter --deadline")
        if zs.gap_h > MAX_GAP_PER_SLACK * (spec.deadline_h - spec.work_h):
            raise ValueError(f"{zs.name}: the trace's ticks ({zs.gap_h * 3600:g} s) are too coarse for a slack "
                             f"of {(spec.deadline_h - spec.work_h) * 3600:g} s (--deadline minus --work)")


@app.command()
def simulate(
    traces: Annotated[list[Path], typer.Option("--traces", "-t", help="Trace files or directories (searched "
                                               "recursively; each directory is also one multi-zone set).")],
    work: Annotated[str, typer.Option("--work", help="Work the job needs (48h, 2880m, ...).")] = "48h",
    deadline: Annotated[str, typer.Option("--deadline", help="Deadline after the job's start.")] = "72h",
    overhead: Annotated[str, typer.Option("--overhead", help="Unproductive, billed start-up of every new "
                                          "instance.")] = "12m",
    spot_price: Annotated[float, typer.Option("--spot-price", help="Spot price relative to on-demand (0.3 = "
                                              "30%).")] = 0.3,
    trace_prices: Annotated[float | None, typer.Option("--trace-prices", help="Use the files' own spot price "
                            "series, divided by this on-demand price (USD/h).")] = None,
    policy: Annotated[list[str], typer.Option("--policy", "-p", help="Policy to run (repeatable): on-demand, "
                      "greedy, uniform-progress, orch, orch-v1, or an orch.policies entry point's name. Default: "
                      "on-demand, greedy, uniform-progress, orch and every --policy-file.")] = [],  # noqa: B006
    policy_file: Annotated[list[Path], typer.Option("--policy-file", help="A Python file defining POLICY (a "
                           "class or factory of a SpotPolicy: name, reset(spec, zones), decide(obs)); its policy is "
                           "run too (repeatable). The file runs as Python: load only files you trust.")]
    = [],  # noqa: B006
    starts: Annotated[int, typer.Option("--starts", help="Start times per trace, spread evenly over it.")] = 8,
    zones: Annotated[str, typer.Option("--zones", help="single (each file), multi (each directory as a zone "
                                       "set) or both.")] = "both",
    notice: Annotated[bool, typer.Option("--notice", help="Tell policies one tick ahead of a preemption.")]
    = False,
    no_optimum: Annotated[bool, typer.Option("--no-optimum", help="Skip the offline optimum.")] = False,
    optimum_cache: Annotated[bool, typer.Option("--optimum-cache/--no-optimum-cache", help="Keep the optimum's "
                             "values on disk by the traces' contents ($ORCH_CACHE_DIR/optimum, else "
                             "~/.cache/orch/optimum) and reuse them.")] = True,
    workers: Annotated[int | None, typer.Option("--workers", help="Processes (default: one per CPU).")] = None,
    per_trace: Annotated[bool, typer.Option("--per-trace", help="Also one row per trace and policy.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Summary and per-trace results as JSON.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="PNG of cost against deadline slack per policy "
                                              "(needs the 'plot' extra: matplotlib).")] = None,
) -> None:
    """Replay spot policies on availability traces: normalized cost, deadlines met, and the optimum."""
    from orchestrator.policy.evaluate import evaluate
    from orchestrator.policy.model import ProblemError, ProblemSpec
    from orchestrator.policy.registry import (
        POLICY_NAMES,
        PolicyFileError,
        UnknownPolicyError,
        load_policy_file,
        make_policy,
    )
    from orchestrator.policy.traces import TraceError, discover

    try:
        spec = ProblemSpec(parse_duration_h("--work", work), parse_duration_h("--deadline", deadline),
                           parse_duration_h("--overhead", overhead), spot_price)
        files = [str(f) for f in policy_file]
        own = [load_policy_file(Path(f)) for f in files]
        asked = [make_policy(p).name for p in policy] or list(POLICY_NAMES)
        names = tuple(dict.fromkeys([*asked, *own]))
        if not 1 <= starts <= 10_000:
            raise ValueError(f"--starts must be 1 to 10000, got {starts}")
        if zones not in ("single", "multi", "both"):
            raise ValueError(f"--zones must be single, multi or both, got {shown(zones)}")
        if trace_prices is not None and not (math.isfinite(trace_prices) and trace_prices > 0):
            raise ValueError(f"--trace-prices must be a positive on-demand price, got {trace_prices}")
        if workers is not None and not 1 <= workers <= 256:
            raise ValueError(f"--workers must be 1 to 256, got {workers}")
        if plot is not None:
            from orchestrator.cli.simulate_plot import check_plot

            check_plot(plot)
        sets = discover(traces, single=zones != "multi", multi=zones != "single", on_demand_price=trace_prices)
        check_sets(spec, sets)
    except (DurationError, ProblemError, UnknownPolicyError, PolicyFileError, TraceError, ValueError) as exc:
        fail(str(exc), EXIT_BAD_INPUT)

    from orchestrator.policy.optimum_cache import default_dir

    cases = evaluate(spec, sets, names, starts, notice=notice, with_optimum=not no_optimum, workers=workers,
                     policy_files=files, optimum_cache=str(default_dir()) if optimum_cache else None)
    if as_json:
        sys.stdout.write(dumps(_to_json(spec, names, cases), indent=2) + "\n")
    else:
        _print_table(spec, names, cases, per_trace)
    if plot is not None:
        from orchestrator.cli.simulate_plot import draw_plot

        draw_plot(spec, sets, names, starts, notice, plot, workers)
        if not as_json:
            sys.stdout.write(f"plot: {plot}\n")


def _summaries(names: tuple[str, ...], cases: list[CaseResult]) -> list[PolicySummary]:
    from orchestrator.policy.evaluate import all_results, summarize, summarize_optimum

    rows = [summarize(n, all_results(cases, n)) for n in names]
    opt = summarize_optimum(cases)
    return rows + ([opt] if opt is not None else [])


def _head(name: str) -> str:
    """A column header over two lines at its hyphens (``uniform-progress`` -> ``uniform-`` / ``progress``), so
    five policies' columns fit 80 (a header is never cut; Rich wraps only at spaces)."""
    return name.replace("-", "-\n")


def _table(title: str) -> Table:
    """A table without inner rules (box.SIMPLE_HEAD) and one space between columns: every table here fits 80
    columns with five policies, as kubectl's and gh's do (the terminal's width, or 80 when the output is not a
    terminal)."""
    from rich import box
    from rich.table import Table

    return Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)


def _print_table(spec: ProblemSpec, names: tuple[str, ...], cases: list[CaseResult], per_trace: bool) -> None:
    from rich.console import Console

    from orchestrator.policy.evaluate import summarize

    runs = sum(len(c.starts) for c in cases)
    table = _table(f"{len(cases)} zone sets x start times = {runs} jobs; work {spec.work_h:g} h, deadline "
                   f"{spec.deadline_h:g} h, overhead {spec.overhead_h:g} h, spot {spec.spot_price:g}")
    for col in ("policy", "cost", "worst", "score", "met", "finish h", "preempt", "switches"):
        table.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for s in _summaries(names, cases):
        table.add_row(s.policy, f"{s.mean_cost:.3f}", f"{s.worst_cost:.3f}", f"{s.score:.3f}", f"{s.met_pct:.1f}%",
                      "-" if s.mean_finish_h is None else f"{s.mean_finish_h:.1f}",
                      f"{s.mean_preemptions:.1f}", f"{s.mean_switches:.1f}")
    console = Console()
    console.print(table)
    console.print("cost: the mean run's cost / on-demand's; worst: the dearest run's; score = cost + 0.25 x std "
                  "of the runs' costs (the ADRS score; lower is better); met: deadlines met; preempt, switches: "
                  "per run")
    console.print(_scenario_table(names, cases))
    if per_trace:
        detail = _table("per zone set (mean over its start times)")
        for col in ("zone set", "zones", "starts", *names, *(["optimum"] if cases and cases[0].optimum else [])):
            detail.add_column(_head(col), justify="left" if col == "zone set" else "right",
                              overflow="fold" if col == "zone set" else "ellipsis")
        for c in cases:
            cells = []
            for n in names:
                s = summarize(n, c.results(n))
                cells.append(f"{s.mean_cost:.3f}" + ("" if s.met_pct == 100 else f" ({s.met_pct:.0f}% met)"))
            if c.optimum:
                vals = [v for v in c.optimum if v is not None]
                cells.append(f"{sum(vals) / len(vals):.3f}" if vals else "-")
            detail.add_row(c.zone_set, str(c.zones), str(len(c.starts)), *cells)
        console.print(detail)


def _scenario_rows(names: tuple[str, ...], cases: list[CaseResult]) -> list[tuple[str, int, int, list[PolicySummary]]]:
    """Per scenario (a trace directory, single-zone or multi-zone): its sets, runs and each policy's summary
    (then the optimum's, when computed)."""
    from orchestrator.policy.evaluate import by_scenario

    return [(name, len(group), sum(len(c.starts) for c in group), _summaries(names, group))
            for name, group in by_scenario(cases).items()]


def _scenario_table(names: tuple[str, ...], cases: list[CaseResult]) -> Table:
    table = _table("per scenario: mean cost (worst run)")
    has_opt = bool(cases and cases[0].optimum)
    table.add_column("scenario", justify="left", overflow="fold")
    for col in (*names, *(["optimum"] if has_opt else [])):
        table.add_column(_head(col), justify="right")
    for name, n_sets, n_runs, rows in _scenario_rows(names, cases):
        name = name.rsplit("/", 1)[-1]   # the directory's own name (--json gives the whole path)
        cells = []
        for s in rows:
            cell = f"{s.mean_cost:.3f}\n({s.worst_cost:.3f})"
            cells.append(cell + ("" if s.policy == "optimum" or s.met_pct == 100 else f"\n{s.met_pct:.0f}% met"))
        table.add_row(f"{name}\n{plural(n_sets, 'set')}, {plural(n_runs, 'run')}", *cells)
    return table


def _to_json(spec: ProblemSpec, names: tuple[str, ...], cases: list[CaseResult]) -> dict[str, object]:
    from orchestrator.policy.evaluate import summarize

    def row(s: PolicySummary) -> dict[str, object]:
        return {"policy": s.policy, "runs": s.runs, "mean_cost": s.mean_cost, "worst_cost": s.worst_cost,
                "std_cost": s.std_cost, "score": s.score,
                "deadline_met_pct": s.met_pct, "mean_finish_h": s.mean_finish_h,
                "mean_preemptions": s.mean_preemptions, "mean_switches": s.mean_switches}

    return {
        "problem": {"work_h": spec.work_h, "deadline_h": spec.deadline_h, "overhead_h": spec.overhead_h,
                    "spot_price": spec.spot_price},
        "summary": [row(s) for s in _summaries(names, cases)],
        "scenarios": [{"scenario": name, "zone_sets": n_sets, "runs": n_runs, "policies": [row(s) for s in rows]}
                      for name, n_sets, n_runs, rows in _scenario_rows(names, cases)],
        "zone_sets": [
            {"zone_set": c.zone_set, "zones": c.zones, "starts": list(c.starts),
             "policies": [row(summarize(n, c.results(n))) for n in names],
             "optimum": list(c.optimum) if c.optimum is not None else None}
            for c in cases
        ],
    }
