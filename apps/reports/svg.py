"""Charts as inline SVG, drawn here so a report needs no script, no asset and no network.

Every text that goes into the markup is escaped, so the result may be marked safe.
"""

from __future__ import annotations

from html import escape

COLORS = ("#2f6fb0", "#d9822b", "#3b9c5a", "#9b59b6")
LABEL_W, PLOT_W, ROW_H, BAR_H, TOP = 170, 460, 12, 10, 40


def _svg(width: int, height: int, title: str, body: list[str]) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}" '
        f'font-family="sans-serif" font-size="11"><title>{escape(title)}</title>'
        f'<text x="0" y="14" font-size="13" font-weight="bold">{escape(title)}</text>'
        + "".join(body)
        + "</svg>"
    )


def _legend(names: list[str], y: int) -> list[str]:
    parts = []
    for i, name in enumerate(names):
        x = LABEL_W + i * 160
        parts.append(f'<rect x="{x}" y="{y - 9}" width="10" height="10" '
                     f'fill="{COLORS[i % len(COLORS)]}"/>'
                     f'<text x="{x + 14}" y="{y}">{escape(name)}</text>')  # fmt: skip
    return parts


def bar_chart(
    title: str,
    categories: list[str],
    series: list[tuple[str, list[float | None]]],
    *,
    unit: str = "x",
    baseline: float | None = 1.0,
) -> str:
    """Horizontal grouped bars, one group per category; a missing value draws no bar and is
    labelled "-". A dashed line marks the baseline (1x: as fast as the comparison)."""
    values = [v for _, vs in series for v in vs if v is not None]
    top = max([*values, baseline or 0.0, 1e-9]) * 1.15
    group_h = ROW_H * len(series) + 8
    height = TOP + group_h * len(categories) + 20
    body = _legend([name for name, _ in series], 30)
    for g, category in enumerate(categories):
        y0 = TOP + g * group_h
        body.append(f'<text x="{LABEL_W - 6}" y="{y0 + group_h / 2 + 2:.1f}" '
                    f'text-anchor="end">{escape(category[:28])}</text>')  # fmt: skip
        for s, (_, vs) in enumerate(series):
            value = vs[g]
            y = y0 + s * ROW_H
            if value is None:
                body.append(f'<text x="{LABEL_W + 2}" y="{y + BAR_H - 1}">-</text>')
                continue
            w = max(PLOT_W * value / top, 1.0)
            body.append(f'<rect x="{LABEL_W}" y="{y}" width="{w:.1f}" height="{BAR_H}" '
                        f'fill="{COLORS[s % len(COLORS)]}"/>'
                        f'<text x="{LABEL_W + w + 4:.1f}" y="{y + BAR_H - 1}">'
                        f'{value:.2f}{escape(unit)}</text>')  # fmt: skip
    if baseline is not None:
        x = LABEL_W + PLOT_W * baseline / top
        body.append(f'<line x1="{x:.1f}" y1="{TOP - 4}" x2="{x:.1f}" y2="{height - 16}" '
                    f'stroke="#555" stroke-dasharray="4 3"/>'
                    f'<text x="{x:.1f}" y="{height - 4}" text-anchor="middle">'
                    f'{baseline:g}{escape(unit)}</text>')  # fmt: skip
    return _svg(LABEL_W + PLOT_W + 70, height, title, body)


def latency_chart(title: str, points: list[tuple[int, float | None, bool, bool]]) -> str:
    """One operator's attempts (iteration, latency, correct, whether it became the incumbent):
    x the iteration, y the latency of each correct attempt (dots), the incumbent as a line
    (the journal's: a candidate with a lower latency timed minutes later may have lost when
    timed beside it); incorrect attempts as red crosses on the axis."""
    width, height, left, bottom, right = 420, 180, 50, 150, 410
    timed = [lat for _, lat, ok, _ in points if ok and lat]
    last = max([*(it for it, _, _, _ in points), 1])
    top = max([*timed, 1e-9]) * 1.1

    def xy(iteration: int, latency: float) -> tuple[float, float]:
        x = left + (right - left) * iteration / last
        return x, bottom - (bottom - 30) * latency / top

    body = [
        f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="#555"/>',
        f'<line x1="{left}" y1="30" x2="{left}" y2="{bottom}" stroke="#555"/>',
        f'<text x="{left - 4}" y="34" text-anchor="end">{top:.3g}</text>'
        if timed
        else f'<text x="{left + 8}" y="90">no correct attempt</text>',
        f'<text x="{left - 4}" y="{bottom}" text-anchor="end">0 ms</text>',
        f'<text x="{right}" y="{bottom + 14}" text-anchor="end">iteration {last}</text>',
    ]
    incumbent: float | None = None
    steps: list[str] = []
    for iteration, latency, ok, replaced in points:
        if not ok or not latency:
            x, _ = xy(iteration, 0)
            body.append(f'<text x="{x:.1f}" y="{bottom + 4}" fill="#c0392b" '
                        f'text-anchor="middle">x</text>')  # fmt: skip
            continue
        x, y = xy(iteration, latency)
        body.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COLORS[0]}"/>')
        before, incumbent = incumbent, latency if replaced else incumbent
        if before is not None and incumbent != before:  # a step, not a slope
            steps.append("{:.1f},{:.1f}".format(*xy(iteration, before)))
        if incumbent is not None:
            steps.append("{:.1f},{:.1f}".format(*xy(iteration, incumbent)))
    if len(steps) > 1:
        body.append(f'<polyline points="{" ".join(steps)}" fill="none" stroke="{COLORS[1]}" '
                    f'stroke-width="1.5"/>')  # fmt: skip
    return _svg(width, height, title, body)
