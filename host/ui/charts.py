"""Small charts drawn as inline SVG by our own code: no chart service, no script needed.

`line_chart` draws one or two series over the same samples; `bar` draws a value in [0, 1] as a
filled share of a track (the Search page's score parts). Coordinates only, no inline style:
colours come from the stylesheet (the page's Content-Security-Policy allows no inline style).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

__all__ = ["bar", "line_chart"]

_W, _H = 300, 64


def _segments(values: Sequence[float | None], top: float) -> list[list[tuple[float, float]]]:
    """The runs of consecutive finite values as (x, y) points; a gap (None) splits a run."""
    n = len(values)
    runs: list[list[tuple[float, float]]] = [[]]
    for i, v in enumerate(values):
        if v is None or not math.isfinite(v):
            if runs[-1]:
                runs.append([])
            continue
        x = _W * i / (n - 1) if n > 1 else _W / 2
        y = _H - 2 - (_H - 4) * (min(v, top) / top if top > 0 else 0.0)
        runs[-1].append((x, y))
    return [r for r in runs if r]


def line_chart(series: Sequence[Sequence[float | None]], label: str) -> str:
    """An SVG of up to two series (the second with class `second`) on one scale from 0 to
    their largest value; a gap in a series breaks its line, a lone value is a dot. `label` is
    the chart's accessible name."""
    finite = [v for s in series for v in s if v is not None and math.isfinite(v)]
    top = max(finite) if finite else 0.0
    marks = []
    for j, s in enumerate(series[:2]):
        cls = ' class="second"' if j else ""
        for run in _segments(s, top):
            if len(run) == 1:
                x, y = run[0]
                marks.append(f'<circle{cls} cx="{x:.1f}" cy="{y:.1f}" r="2"/>')
            else:
                pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in run)
                marks.append(f'<polyline{cls} points="{pts}"/>')
    return (f'<svg viewBox="0 0 {_W} {_H}" preserveAspectRatio="none" role="img"'
            f' aria-label="{escape(label)}"><line class="axis" x1="0" y1="{_H - 1}"'
            f' x2="{_W}" y2="{_H - 1}"/>{"".join(marks)}</svg>')


def bar(value: float | None) -> str:
    """An SVG track filled to `value` in [0, 1] (clamped; None draws an empty track)."""
    share = 0.0 if value is None or not math.isfinite(value) else min(max(value, 0.0), 1.0)
    return (f'<svg viewBox="0 0 100 6" preserveAspectRatio="none" aria-hidden="true">'
            f'<rect x="0" y="0" height="6" width="{100 * share:.1f}"/></svg>')
