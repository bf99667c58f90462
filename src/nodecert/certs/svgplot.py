"""Small inline-SVG charts for the reports: no plotting library, no network assets.

Each function returns one self-contained <svg> element (markup safe to embed:
every label is XML-escaped) with a title, axes with tick labels and a legend.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any
from xml.sax.saxutils import escape as _escape_text

from nodecert.core.textsafe import clean

_QUOTES = {'"': "&quot;", "'": "&#x27;"}


def escape(text: str) -> str:
    """Safe in element text and in an attribute value of either quote: &, <, >, both
    quotes, and no control characters (node text reaches these labels)."""
    return _escape_text(clean(str(text)), _QUOTES)

W, H = 640, 260
L, R, T, B = 60, 120, 30, 40  # margins: room for the y ticks and the legend
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")

Series = tuple[str, Sequence[tuple[float, float]]]


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values from at or below lo to at or above hi (the axis range)."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    ticks = [math.floor(lo / step) * step]
    while ticks[-1] < hi - step * 1e-9:
        ticks.append(ticks[-1] + step)
    return ticks


def _fmt(v: float) -> str:
    if abs(v) >= 1 << 30 and v == int(v) and int(v) % (1 << 30) == 0:
        return f"{int(v) >> 30}G"
    if abs(v) >= 1 << 20 and v == int(v) and int(v) % (1 << 20) == 0:
        return f"{int(v) >> 20}M"
    if abs(v) >= 1024 and v == int(v) and int(v) % 1024 == 0:
        return f"{int(v) >> 10}K"
    return f"{v:g}" if abs(v) < 1e5 else f"{v:.3g}"


def _frame(title: str, xlabel: str, ylabel: str, body: list[str], kind: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" data-plot="{escape(kind)}" '
            f'viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
            f'aria-label="{escape(title)}">'
            f'<title>{escape(title)}</title>'
            f'<text x="{W / 2}" y="16" text-anchor="middle" font-size="13" '
            f'font-weight="bold">{escape(title)}</text>'
            f'<text x="{L + (W - L - R) / 2}" y="{H - 6}" text-anchor="middle" '
            f'font-size="11">{escape(xlabel)}</text>'
            f'<text x="14" y="{T + (H - T - B) / 2}" text-anchor="middle" font-size="11" '
            f'transform="rotate(-90 14 {T + (H - T - B) / 2})">{escape(ylabel)}</text>'
            + "".join(body) + "</svg>")


def line_chart(title: str, series: Sequence[Series], *, xlabel: str, ylabel: str,
               log_x: bool = False, kind: str = "line") -> str:
    pts = [(x, y) for _, s in series for x, y in s if not log_x or x > 0]
    if not pts:
        return _frame(title, xlabel, ylabel, [f'<text x="{W / 2}" y="{H / 2}" '
                                              'text-anchor="middle">no data</text>'], kind)

    def fx(v: float) -> float:
        return math.log2(v) if log_x else v
    xs, ys = [fx(x) for x, _ in pts], [y for _, y in pts]
    x0, x1 = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    yt = _ticks(min(0.0, *ys), max(ys) * 1.05 if max(ys) > 0 else 1.0)
    y0, y1 = yt[0], yt[-1]

    def px(x: float) -> float:
        return L + (fx(x) - x0) / (x1 - x0) * (W - L - R)

    def py(y: float) -> float:
        return H - B - (y - y0) / (y1 - y0) * (H - T - B)
    body = [f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="#333"/>',
            f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="#333"/>']
    for t in yt:
        body.append(f'<line x1="{L}" y1="{py(t):.1f}" x2="{W - R}" y2="{py(t):.1f}" '
                    f'stroke="#ddd"/><text x="{L - 4}" y="{py(t) + 4:.1f}" '
                    f'text-anchor="end" font-size="10">{escape(_fmt(t))}</text>')
    xt = ([2 ** k for k in range(math.ceil(x0), math.floor(x1) + 1, max(
        1, math.ceil((x1 - x0) / 8)))] if log_x else _ticks(x0, x1))
    for t in xt:
        if x0 <= fx(t) <= x1:
            body.append(f'<text x="{px(t):.1f}" y="{H - B + 14}" text-anchor="middle" '
                        f'font-size="10">{escape(_fmt(t))}</text>')
    for k, (name, s) in enumerate(series):
        color = COLORS[k % len(COLORS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s if not log_x or x > 0)
        body.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.5"'
                    f' points="{path}"><title>{escape(name)}</title></polyline>')
        ly = T + 12 + 14 * k
        if ly < H - B:
            body.append(f'<rect x="{W - R + 10}" y="{ly - 8}" width="10" height="3" '
                        f'fill="{color}"/><text x="{W - R + 24}" y="{ly - 4}" '
                        f'font-size="10">{escape(name)}</text>')
    return _frame(title, xlabel, ylabel, body, kind)


def bar_chart(title: str, bars: Sequence[tuple[str, float]], *, ylabel: str,
              floor: float | None = None, kind: str = "bar") -> str:
    if not bars:
        return _frame(title, "", ylabel, [f'<text x="{W / 2}" y="{H / 2}" '
                                          'text-anchor="middle">no data</text>'], kind)
    top = max([v for _, v in bars] + ([floor] if floor else []))
    yt = _ticks(0.0, top * 1.05 if top > 0 else 1.0)
    y1 = yt[-1]

    def py(y: float) -> float:
        return H - B - y / y1 * (H - T - B)
    bw = (W - L - R) / len(bars)
    body = [f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="#333"/>']
    for t in yt:
        body.append(f'<line x1="{L}" y1="{py(t):.1f}" x2="{W - R}" y2="{py(t):.1f}" '
                    f'stroke="#ddd"/><text x="{L - 4}" y="{py(t) + 4:.1f}" '
                    f'text-anchor="end" font-size="10">{escape(_fmt(t))}</text>')
    for k, (name, v) in enumerate(bars):
        x = L + k * bw + bw * 0.15
        low = floor is not None and v < floor
        body.append(f'<rect class="bar" x="{x:.1f}" y="{py(v):.1f}" width="{bw * 0.7:.1f}" '
                    f'height="{H - B - py(v):.1f}" fill="{"#d62728" if low else "#1f77b4"}">'
                    f'<title>{escape(name)}: {v:g}</title></rect>'
                    f'<text x="{x + bw * 0.35:.1f}" y="{H - B + 14}" text-anchor="middle" '
                    f'font-size="10">{escape(name)}</text>')
    if floor is not None:
        body.append(f'<line x1="{L}" y1="{py(floor):.1f}" x2="{W - R}" y2="{py(floor):.1f}" '
                    f'stroke="#d62728" stroke-dasharray="4 3"/><text x="{W - R + 4}" '
                    f'y="{py(floor) + 4:.1f}" font-size="10" fill="#d62728">floor '
                    f'{floor:g}</text>')
    return _frame(title, "", ylabel, body, kind)


def _no_data(title: str, kind: str) -> str:
    return _frame(title, "", "", [f'<text x="{W / 2}" y="{H / 2}" '
                                  'text-anchor="middle">no data</text>'], kind)


# What a grid draws in one cell: (the rect's class, its fill, its tooltip), or None for
# a cell left blank.
Paint = Callable[[str, str, Any], "tuple[str, str, str] | None"]


def _grid(rows: Sequence[tuple[str, Sequence[Any]]], columns: Sequence[str],
          body: list[str], paint: Paint) -> None:
    """A grid into `body`: its column labels under it, its row labels left of it, and
    each cell as `paint(row name, column name, value)` says."""
    cw = (W - L - R) / max(len(columns), 1)
    ch = (H - T - B) / len(rows)
    for k, c in enumerate(columns):
        body.append(f'<text x="{L + (k + 0.5) * cw:.1f}" y="{H - B + 14}" text-anchor="middle" '
                    f'font-size="10">{escape(c)}</text>')
    for j, (name, row) in enumerate(rows):
        y = T + j * ch
        body.append(f'<text x="{L - 4}" y="{y + ch / 2 + 3:.1f}" text-anchor="end" '
                    f'font-size="{min(10.0, ch * 0.9):.1f}">{escape(name)}</text>')
        for k, value in enumerate(row):
            cell = paint(name, columns[k], value)
            if cell is None:
                continue
            cls, fill, tip = cell
            body.append(f'<rect class="{cls}" x="{L + k * cw:.1f}" y="{y:.1f}" '
                        f'width="{cw - 1:.1f}" height="{max(ch - 1, 1):.1f}" fill="{fill}">'
                        f"<title>{escape(tip)}</title></rect>")


def heat_map(title: str, rows: Sequence[tuple[str, Sequence[float | None]]], *,
             columns: Sequence[str], unit: str, low: float | None = None,
             kind: str = "heatmap") -> str:
    """A grid of cells (a row per tray, a column per GPU), shaded from the lowest value
    (dark) to the highest (light); a cell below `low` is red, a cell without a value
    is hatched grey and says so in its tooltip."""
    vals = [v for _, r in rows for v in r if v is not None]
    if not rows or not vals:
        return _no_data(title, kind)
    lo, hi = min(vals), max(vals)

    def paint(name: str, column: str, v: float | None) -> tuple[str, str, str]:
        if v is None:
            return "cell", "#bbbbbb", f"{name} {column}: not measured"
        share = (v - lo) / (hi - lo) if hi > lo else 1.0
        shade = int(90 + 150 * share)
        return ("cell", "#d62728" if low is not None and v < low
                else f"#{shade // 3:02x}{shade // 2 + 40:02x}{shade:02x}",
                f"{name} {column}: {v:g} {unit}")
    body: list[str] = []
    _grid(rows, columns, body, paint)
    body.append(f'<text x="{W - R + 6}" y="{T + 10}" font-size="10">{escape(_fmt(hi))} '
                f'{escape(unit)}</text><text x="{W - R + 6}" y="{H - B}" font-size="10">'
                f'{escape(_fmt(lo))} {escape(unit)}</text>')
    return _frame(title, "", "", body, kind)


def histogram(title: str, values: Sequence[float], *, unit: str,
              marked: Sequence[tuple[str, float]] = (), median: float | None = None,
              bins: int = 30, kind: str = "histogram") -> str:
    """The distribution of `values` (counts per bin, log-free), the median as a dashed
    line, and each `marked` value (name, value: an outlier) as a red tick below the
    axis with its name in the tooltip -- a bin holding one is red too."""
    if not values:
        return _frame(title, unit, "nodes", [f'<text x="{W / 2}" y="{H / 2}" '
                                             'text-anchor="middle">no data</text>'], kind)
    lo, hi = min(values), max(values)
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    width = (hi - lo) / bins
    counts = [0] * bins
    for v in values:
        counts[min(int((v - lo) / width), bins - 1)] += 1
    red = {min(int((v - lo) / width), bins - 1) for _, v in marked if lo <= v <= hi}
    yt = _ticks(0.0, max(counts) * 1.05)
    y1 = yt[-1]

    def px(x: float) -> float:
        return L + (x - lo) / (hi - lo) * (W - L - R)

    def py(y: float) -> float:
        return H - B - y / y1 * (H - T - B)
    body = [f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="#333"/>']
    for t in yt:
        body.append(f'<line x1="{L}" y1="{py(t):.1f}" x2="{W - R}" y2="{py(t):.1f}" '
                    f'stroke="#ddd"/><text x="{L - 4}" y="{py(t) + 4:.1f}" '
                    f'text-anchor="end" font-size="10">{escape(_fmt(t))}</text>')
    for t in _ticks(lo, hi):
        if lo <= t <= hi:
            body.append(f'<text x="{px(t):.1f}" y="{H - B + 14}" text-anchor="middle" '
                        f'font-size="10">{escape(_fmt(t))}</text>')
    for k, c in enumerate(counts):
        if not c:
            continue
        x = px(lo + k * width)
        body.append(f'<rect class="bin" x="{x:.1f}" y="{py(c):.1f}" '
                    f'width="{max((W - L - R) / bins - 1, 1):.1f}" height="{H - B - py(c):.1f}" '
                    f'fill="{"#d62728" if k in red else "#1f77b4"}"><title>'
                    f'{escape(_fmt(lo + k * width))}-{escape(_fmt(lo + (k + 1) * width))} '
                    f'{escape(unit)}: {c}</title></rect>')
    if median is not None and lo <= median <= hi:
        body.append(f'<line x1="{px(median):.1f}" y1="{T}" x2="{px(median):.1f}" y2="{H - B}" '
                    f'stroke="#333" stroke-dasharray="4 3"/><text x="{px(median) + 3:.1f}" '
                    f'y="{T + 10}" font-size="10">median {escape(_fmt(median))}</text>')
    for name, v in marked:
        body.append(f'<line class="outlier" x1="{px(v):.1f}" y1="{H - B}" x2="{px(v):.1f}" '
                    f'y2="{H - B + 6}" stroke="#d62728" stroke-width="2"><title>'
                    f'{escape(name)}: {escape(_fmt(v))} {escape(unit)}</title></line>')
    return _frame(title, unit, "count", body, kind)


def link_grid(title: str, rows: Sequence[tuple[str, Sequence[tuple[str, str] | None]]], *,
              columns: Sequence[str], legend: Sequence[tuple[str, str]] = (),
              kind: str = "cabling") -> str:
    """A grid of links (a row per node, a column per rail): each cell's (status, tip),
    green when "ok", red for any other status (its tip says what was found), blank where
    no link is planned. `legend`: (status word, label) pairs shown at the right."""
    if not rows or not columns:
        return _no_data(title, kind)

    def paint(_: str, __: str, cell: tuple[str, str] | None) -> tuple[str, str, str] | None:
        if cell is None:
            return None
        status, tip = cell
        ok = status == "ok"
        return f"link {'ok' if ok else 'wrong'}", "#2ca02c" if ok else "#d62728", tip
    body: list[str] = []
    _grid(rows, columns, body, paint)
    for k, (status, label) in enumerate(legend):
        y = T + 4 + k * 16
        fill = "#2ca02c" if status == "ok" else "#d62728"
        body.append(f'<rect x="{W - R + 6}" y="{y}" width="10" height="10" fill="{fill}"/>'
                    f'<text x="{W - R + 20}" y="{y + 9}" font-size="10">{escape(label)}</text>')
    return _frame(title, "", "", body, kind)


__all__ = ["bar_chart", "heat_map", "histogram", "line_chart", "link_grid"]
