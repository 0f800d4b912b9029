"""``orch simulate --plot``: its path checked before the run, and the plot drawn after (matplotlib, the 'plot'
extra, imported only here and only then)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.errors import EXIT_BAD_INPUT, fail
from orchestrator.redaction import shown

if TYPE_CHECKING:
    from orchestrator.policy.model import ProblemSpec


def check_plot(out: Path) -> None:
    """ValueError unless matplotlib can write ``out``: it is installed, the name ends in a format it writes and
    its folder exists. Checked before the simulation, which may take minutes: savefig would otherwise fail only
    after it (an unknown suffix as an internal error), or write ``out.png`` for a name with no suffix."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ModuleNotFoundError:
        raise ValueError("--plot needs matplotlib: pip install -e '.[plot]'") from None
    if out.is_dir():
        raise ValueError(f"--plot {shown(str(out))} is a directory: name the image file (e.g. "
                         f"{shown(str(out / 'cost.png'))})")
    if out.suffix.lower().removeprefix(".") not in FigureCanvasBase.get_supported_filetypes():
        raise ValueError(f"--plot {shown(str(out))}: name a .png, .svg or .pdf file (the format comes from the "
                         "name's suffix)")
    if not out.parent.is_dir():
        raise ValueError(f"--plot {shown(str(out))}: no such directory {shown(str(out.parent))}")


def draw_plot(spec: ProblemSpec, sets: list, names: tuple[str, ...], starts: int, notice: bool, out: Path,
              workers: int | None) -> None:
    """Mean normalized cost against deadline slack (D/C from tight to loose), one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from orchestrator.policy.evaluate import all_results, evaluate, summarize
    from orchestrator.policy.model import ProblemSpec

    ratios = [r for r in (1.1, 1.25, 1.5, 1.75, 2.0) if spec.work_h * r >= spec.work_h + 2 * spec.overhead_h]
    series: dict[str, list[float]] = {n: [] for n in names}
    series["optimum"] = []
    for r in ratios:
        s2 = ProblemSpec(spec.work_h, spec.work_h * r, spec.overhead_h, spec.spot_price)
        cases = evaluate(s2, sets, names, max(2, starts // 2), notice=notice, with_optimum=True, workers=workers)
        for n in names:
            series[n].append(summarize(n, all_results(cases, n)).mean_cost)
        vals = [v for c in cases for v in (c.optimum or ()) if v is not None]
        series["optimum"].append(sum(vals) / len(vals) if vals else float("nan"))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n, ys in series.items():
        ax.plot([100 * (r - 1) for r in ratios], ys, marker="o", label=n, linestyle="--" if n == "optimum" else "-")
    ax.set_xlabel("deadline slack (D - C) / C, %")
    ax.set_ylabel("cost / on-demand cost (mean)")
    ax.set_title(f"work {spec.work_h:g} h, overhead {spec.overhead_h:g} h, spot {spec.spot_price:g}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=120)
    except OSError as exc:
        fail(f"--plot: cannot write {out}: {exc.strerror or exc}", EXIT_BAD_INPUT)
    finally:
        plt.close(fig)
