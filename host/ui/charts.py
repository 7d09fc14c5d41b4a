"""Small charts drawn as inline SVG by our own code: no chart service, no script needed.

`line_chart` draws a series over the samples on a linear scale from 0; `column_chart` draws a
value a sample as a column on a logarithmic scale (latencies, which span decades), nothing
where a sample has none. Both have a labelled value axis (with its unit) and a time axis (the
first and last sample's time, UTC). `bar` draws a value in [0, 1] as a filled share of a track
(the Search page's score parts). Coordinates only, no inline style: colours and type sizes
come from the stylesheet (the page's Content-Security-Policy allows no inline style).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

__all__ = ["bar", "column_chart", "line_chart", "nice_top"]

_W, _H = 320, 118  # the viewBox; the SVG keeps its proportions (text is not stretched)
_X0, _X1 = 50, _W - 6  # the plot area: value labels at its left ...
_Y0, _Y1 = 8, _H - 20  # ... and the time labels under it

Fmt = Callable[[float], str]


def nice_top(peak: float, whole: bool = False) -> float:
    """The top of a linear axis: the smallest 1, 2, 2.5 or 5 times a power of ten at or
    above `peak` (1 when there is nothing to show; at least 2 for whole numbers, so that the
    middle tick is one)."""
    if not math.isfinite(peak) or peak <= 0:
        return 2.0 if whole else 1.0
    power = 10.0 ** math.floor(math.log10(peak))
    top = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= peak * (1 - 1e-12))
    return max(top, 2.0) if whole else top


def _x(i: int, n: int) -> float:
    """The middle of sample `i`'s slot of `n` across the plot area."""
    return _X0 + (_X1 - _X0) * (i + 0.5) / max(n, 1)


def _frame(label: str, ticks: Sequence[tuple[float, str]], times: tuple[str, str],
           marks: str) -> str:
    """The SVG: a gridline and a label a value tick (`ticks`: y and text), the time axis with
    the first and last sample's time, then the `marks`."""
    grid = "".join(
        f'<line class="grid" x1="{_X0}" y1="{y:.1f}" x2="{_X1}" y2="{y:.1f}"/>'
        f'<text class="tick" x="{_X0 - 4}" y="{y + 3:.1f}" text-anchor="end">{escape(t)}</text>'
        for y, t in ticks)
    first, last = times
    axis = (f'<line class="axis" x1="{_X0}" y1="{_Y1}" x2="{_X1}" y2="{_Y1}"/>'
            f'<text class="tick" x="{_X0}" y="{_H - 6}">{escape(first)}</text>'
            f'<text class="tick" x="{_X1}" y="{_H - 6}" text-anchor="end">{escape(last)}</text>')
    return (f'<svg viewBox="0 0 {_W} {_H}" role="img" aria-label="{escape(label)}">'
            f"{grid}{axis}{marks}</svg>")


def line_chart(values: Sequence[float | None], label: str, fmt: Fmt,
               times: tuple[str, str], whole: bool = False) -> str:
    """A line over the samples on a scale from 0 to a round top above their largest value,
    with ticks at 0, half and the top labelled by `fmt` (the unit with it); `whole`: the
    values are counts (no tick between two whole numbers). A gap (None) breaks the line; a
    lone value is a short dash."""
    finite = [v for v in values if v is not None and math.isfinite(v)]
    top = nice_top(max(finite, default=0.0), whole)

    def y(v: float) -> float:
        return _Y1 - (_Y1 - _Y0) * min(max(v, 0.0), top) / top

    mid = top / 2
    ticks = [(y(0.0), fmt(0.0)), (y(top), fmt(top))]
    if not whole or mid.is_integer():
        ticks.insert(1, (y(mid), fmt(mid)))
    n = len(values)
    runs: list[list[tuple[float, float]]] = [[]]
    for i, v in enumerate(values):
        if v is None or not math.isfinite(v):
            runs.append([])
        else:
            runs[-1].append((_x(i, n), y(v)))
    marks = []
    for run in (r for r in runs if r):
        if len(run) == 1:  # a dash the width of its slot: a lone sample still reads as a level
            (x, yy), half = run[0], max((_X1 - _X0) / max(n, 1) / 2, 1.5)
            run = [(x - half, yy), (x + half, yy)]
        marks.append(f'<polyline points="{" ".join(f"{x:.1f},{yy:.1f}" for x, yy in run)}"/>')
    return _frame(label, ticks, times, "".join(marks))


def column_chart(values: Sequence[float | None], label: str, fmt: Fmt,
                 times: tuple[str, str], floor: float) -> str:
    """A column a sample on a logarithmic scale of whole decades, each a labelled tick
    (`fmt`), from the decade below the smallest value (so that it still has a column: a
    latency bucket's bound is an upper bound) to the one at or above the largest; `floor`,
    the smallest value there can be, places the scale when there is none. A sample without
    a value (None) has no column. Columns are drawn with class `second`."""
    finite = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    lo_exp = math.ceil(math.log10(max(min(finite, default=floor), floor)) - 1e-9) - 1
    hi_exp = math.ceil(math.log10(max(finite, default=floor)) - 1e-9)
    hi_exp = max(hi_exp, lo_exp + 1)
    decades = hi_exp - lo_exp

    def y(v: float) -> float:
        share = (math.log10(max(v, 10.0 ** lo_exp)) - lo_exp) / decades
        return _Y1 - (_Y1 - _Y0) * min(share, 1.0)

    step = 1 if decades <= 4 else 2
    ticks = [(y(10.0 ** e), fmt(10.0 ** e)) for e in range(lo_exp, hi_exp + 1, step)]
    n = len(values)
    width = max((_X1 - _X0) / max(n, 1) * 0.7, 1.0)
    marks = []
    for i, v in enumerate(values):
        if v is None or not math.isfinite(v) or v <= 0:
            continue
        top = min(y(v), _Y1 - 1.5)  # the smallest value still shows a column
        marks.append(f'<rect class="second" x="{_x(i, n) - width / 2:.1f}" y="{top:.1f}"'
                     f' width="{width:.1f}" height="{_Y1 - top:.1f}"/>')
    return _frame(label, ticks, times, "".join(marks))


def bar(value: float | None) -> str:
    """An SVG track filled to `value` in [0, 1] (clamped; None draws an empty track)."""
    share = 0.0 if value is None or not math.isfinite(value) else min(max(value, 0.0), 1.0)
    return (f'<svg viewBox="0 0 100 6" preserveAspectRatio="none" aria-hidden="true">'
            f'<rect x="0" y="0" height="6" width="{100 * share:.1f}"/></svg>')
