"""Charts drawn on the server as inline SVG: GPU sparklines, stacked spend bars, a job's timeline.

No JavaScript and no inline styles (the pages' Content-Security-Policy allows neither): shapes carry CSS
classes from static/console.css (series colours are ``c0``..``c9``). Every text and attribute value is
escaped here (markupsafe), so a job or provider name can never become markup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timedelta

from markupsafe import Markup, escape

from orchestrator.console.formatting import money
from orchestrator.console.timeline import MarkKind, SpanKind, Timeline
from orchestrator.store.console_values import UtilPoint
from orchestrator.store.spend_series import Series

PALETTE = 10   # colour classes c0..c9


def colour(index: int) -> str:
    return f"c{index % PALETTE}"


class _Svg:
    """Collects escaped SVG elements."""

    def __init__(self, width: float, height: float, css_class: str, label: str) -> None:
        self.parts: list[str] = []
        self.head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="{escape(css_class)}" width="{width:.0f}" '
                     f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
                     f'aria-label="{escape(label)}">')

    def el(self, tag: str, text: str | None = None, title: str | None = None, **attrs: object) -> None:
        rendered = " ".join(f'{k.rstrip("_").replace("_", "-")}="{escape(_num(v))}"' for k, v in attrs.items()
                            if v is not None)
        inner = (f"<title>{escape(title)}</title>" if title else "") + (str(escape(text)) if text else "")
        self.parts.append(f"<{tag} {rendered}>{inner}</{tag}>" if inner else f"<{tag} {rendered}/>")

    def open(self, tag: str, title: str | None = None, **attrs: object) -> None:
        rendered = " ".join(f'{k.rstrip("_").replace("_", "-")}="{escape(_num(v))}"' for k, v in attrs.items()
                            if v is not None)
        self.parts.append(f"<{tag} {rendered}>" + (f"<title>{escape(title)}</title>" if title else ""))

    def close(self, tag: str) -> None:
        self.parts.append(f"</{tag}>")

    def markup(self) -> Markup:
        return Markup(self.head + "".join(self.parts) + "</svg>")


def _num(v: object) -> str:
    return f"{v:.1f}" if isinstance(v, float) else str(v)


# -- sparkline -----------------------------------------------------------------------------------------

def sparkline(points: Sequence[UtilPoint], start: datetime, end: datetime, *, width: int = 100,
              height: int = 26) -> Markup:
    """Mean GPU utilization per minute from ``start`` to ``end`` (0-100 %); gaps where no minute was stored."""
    svg = _Svg(width, height, "spark", "GPU utilization, last hour")
    svg.el("rect", x=0, y=0, width=width, height=height, class_="spark-bg")
    span = max((end - start).total_seconds(), 1.0)
    pad = 2.0

    def xy(p: UtilPoint) -> tuple[float, float]:
        x = (p.minute - start).total_seconds() / span * (width - 2 * pad) + pad
        return min(max(x, pad), width - pad), height - pad - p.mean_pct / 100 * (height - 2 * pad)

    runs: list[list[UtilPoint]] = []
    for p in sorted(points, key=lambda p: p.minute):
        if runs and p.minute - runs[-1][-1].minute <= timedelta(minutes=2):
            runs[-1].append(p)
        else:
            runs.append([p])
    for run in runs:
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in map(xy, run))
        if len(run) == 1:
            x, y = xy(run[0])
            svg.el("circle", cx=x, cy=y, r=1.5, class_="spark-dot")
        else:
            svg.el("polyline", points=coords, class_="spark-line")
    if points:
        last = max(points, key=lambda p: p.minute)
        x, y = xy(last)
        svg.el("circle", cx=x, cy=y, r=2.0, class_="spark-dot",
               title=f"{last.minute:%H:%M} UTC: mean {last.mean_pct:.0f}%, busiest GPU {last.max_pct:.0f}%")
    return svg.markup()


# -- spend bars ----------------------------------------------------------------------------------------

def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at or above ``value`` (1 for nothing)."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    for factor in (1, 2, 2.5, 5, 10):
        if factor * magnitude >= value * (1 - 1e-12):
            return factor * magnitude
    return 10 * magnitude


def x_labels(starts: Sequence[datetime], step: timedelta, most: int = 8) -> list[tuple[int, str]]:
    """(bucket index, label) for at most ``most`` bucket starts, evenly spaced on round UTC times (every k
    buckets, k chosen so the labels fall on divisors or multiples of a day). Midnights and spacings of a day or
    more are labelled with the date; the first label has the date and the time."""
    if not starts:
        return []
    epoch = datetime(1970, 1, 1, tzinfo=starts[0].tzinfo)
    day = timedelta(days=1)
    picked: list[int] = []
    interval = step
    for k in (1, 2, 3, 4, 6, 8, 12, 24, 48, 96, 168, 336, 720, 1440):
        interval = step * k
        if interval < day and day % interval:
            continue
        picked = [i for i, t in enumerate(starts) if (t - epoch) % interval == timedelta(0)]
        if len(picked) <= most:
            break
    labels: list[tuple[int, str]] = []
    for i in picked:
        t = starts[i]
        if interval >= day or (t.hour, t.minute) == (0, 0):
            labels.append((i, f"{t:%b} {t.day}"))
        else:
            labels.append((i, f"{t:%b} {t.day} {t:%H:%M}" if not labels else f"{t:%H:%M}"))
    return labels


def stacked_bars(series: Sequence[Series], starts: Sequence[datetime], step: timedelta, *, label: str,
                 width: int = 900, height: int = 240) -> Markup:
    """Spend per bucket, one stacked colour per series (series i is ``colour(i)``)."""
    left, right, top, bottom = 64, 12, 12, 30
    svg = _Svg(width, height, "chart bars", label)
    n = len(starts)
    totals = [sum(s.values[i] for s in series) for i in range(n)]
    tick = nice_ceiling(max(totals, default=0.0) / 4)
    ticks = max(1, math.ceil(max(totals, default=0.0) / tick - 1e-9))
    y_max = tick * ticks
    plot_w, plot_h = width - left - right, height - top - bottom

    def y_of(v: float) -> float:
        return top + plot_h - v / y_max * plot_h

    for k in range(ticks + 1):
        v = tick * k
        svg.el("line", x1=left, x2=width - right, y1=y_of(v), y2=y_of(v), class_="grid")
        svg.el("text", money(v), x=left - 6, y=y_of(v) + 4, class_="axis-label", text_anchor="end")
    if n == 0:
        return svg.markup()
    slot = plot_w / n
    bar_w = max(slot * 0.78, 1.0)
    for i, text in x_labels(starts, step):
        x = left + i * slot
        svg.el("line", x1=x, x2=x, y1=top + plot_h, y2=top + plot_h + 4, class_="axis")
        svg.el("text", text, x=x, y=height - 10, class_="axis-label", text_anchor="middle" if i else "start")
    for i, t in enumerate(starts):
        x = left + i * slot + (slot - bar_w) / 2
        base = 0.0
        for s_index, s in enumerate(series):
            v = s.values[i]
            if v <= 0:
                continue
            y_top, y_bottom = y_of(base + v), y_of(base)
            svg.el("rect", x=x, y=y_top, width=bar_w, height=max(y_bottom - y_top, 0.5),
                   class_=f"bar {colour(s_index)}", data_series=s.name, data_start=t.isoformat(),
                   data_usd=f"{v:.6f}", title=f"{s.name}, {t:%b} {t.day} {t:%H:%M}–{t + step:%H:%M} UTC: {money(v)}")
            base += v
    svg.el("line", x1=left, x2=width - right, y1=top + plot_h, y2=top + plot_h, class_="axis")
    return svg.markup()


# -- a job's timeline ----------------------------------------------------------------------------------

_TICKS = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=10), timedelta(minutes=15),
          timedelta(minutes=30), timedelta(hours=1), timedelta(hours=2), timedelta(hours=3), timedelta(hours=6),
          timedelta(hours=12), timedelta(days=1), timedelta(days=2), timedelta(days=7))


def time_ticks(start: datetime, end: datetime, most: int = 8) -> list[datetime]:
    """Round instants (on UTC minutes, hours, days) between ``start`` and ``end``, at most ``most`` of them."""
    span = end - start
    step = next((s for s in _TICKS if span / s <= most), _TICKS[-1] * max(1, int(span / _TICKS[-1] / most) + 1))
    epoch = datetime(1970, 1, 1, tzinfo=start.tzinfo)
    t = epoch + -((epoch - start) // step) * step
    ticks = []
    while t <= end:
        ticks.append(t)
        t += step
    return ticks


def timeline_svg(tl: Timeline, *, width: int = 1000) -> Markup:
    label_w, right, lane_h, axis_h = 230, 16, 30, 26
    height = axis_h + max(len(tl.lanes), 1) * lane_h + 8
    svg = _Svg(width, height, "chart timeline", "the job's machines over time")
    span = max((tl.end - tl.start).total_seconds(), 1.0)
    plot_w = width - label_w - right

    def x_of(t: datetime) -> float:
        return label_w + (t - tl.start).total_seconds() / span * plot_w

    prev_day = None
    for t in time_ticks(tl.start, tl.end):
        x = x_of(t)
        svg.el("line", x1=x, x2=x, y1=axis_h - 4, y2=height - 4, class_="grid")
        text = f"{t:%H:%M}" if t.date() == prev_day else f"{t:%b} {t.day} {t:%H:%M}"
        prev_day = t.date()
        svg.el("text", text, x=x, y=axis_h - 10, class_="axis-label", text_anchor="middle")
    for i, lane in enumerate(tl.lanes):
        y = axis_h + i * lane_h
        svg.el("text", lane.label, x=label_w - 10, y=y + lane_h / 2 + 4, class_="lane-label", text_anchor="end")
        for s in lane.spans:
            x0, x1 = x_of(s.start), x_of(s.end)
            cls = "span-boot" if s.kind is SpanKind.BOOT else f"span-run state-{lane.state.value}"
            svg.el("rect", x=x0, y=y + 7, width=max(x1 - x0, 1.5), height=lane_h - 14, rx=3, class_=cls,
                   title=f"{lane.label}: {s.kind.value} {s.start:%H:%M}–{s.end:%H:%M} UTC ({lane.state.value})")
        for m in lane.marks:
            _mark(svg, m.kind, x_of(m.at), y, lane_h, f"{m.label}, {m.at:%Y-%m-%d %H:%M} UTC")
    if not tl.lanes:
        svg.el("text", "no machine yet", x=label_w, y=axis_h + 18, class_="axis-label")
    return svg.markup()


def _mark(svg: _Svg, kind: MarkKind, x: float, y: float, lane_h: float, title: str) -> None:
    mid = y + lane_h / 2
    if kind is MarkKind.CHECKPOINT:
        svg.el("polygon", points=f"{x:.1f},{mid - 6:.1f} {x + 5:.1f},{mid:.1f} {x:.1f},{mid + 6:.1f} "
               f"{x - 5:.1f},{mid:.1f}", class_="mark tl-checkpoint", title=title)
    elif kind is MarkKind.PREEMPTION:
        svg.open("g", class_="mark tl-preemption", title=title)
        svg.el("line", x1=x - 6, y1=mid - 6, x2=x + 6, y2=mid + 6)
        svg.el("line", x1=x - 6, y1=mid + 6, x2=x + 6, y2=mid - 6)
        svg.close("g")
    else:
        svg.open("g", class_="mark tl-relaunch", title=title)
        svg.el("line", x1=x, y1=y + 1, x2=x, y2=y + lane_h - 1)
        svg.el("polygon", points=f"{x:.1f},{y + 1:.1f} {x + 10:.1f},{y + 5:.1f} {x:.1f},{y + 9:.1f}")
        svg.close("g")
