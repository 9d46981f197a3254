"""The HTML page of `gpuperf fleet`: the tables and a strip plot per metric, one dot per unit.

The plots are inline SVG written here (no matplotlib: a fleet page must render on a login node without the
'report' extra). The x axis is each unit's median against the fleet median on a log scale, with the tolerance
band drawn; LISTED units are red, SUSPECT orange, TAIL purple, BETTER blue, the rest grey; a dot's tooltip names
its unit.
"""

from __future__ import annotations

import html
import math
import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.cli.tables import cell_text, html_page, html_table
from pytest_gpuperf.core.stats.fleet import FleetRules, Standing

if TYPE_CHECKING:
    from pytest_gpuperf.cli.fleet import Fleet, Judged

WIDTH, HEIGHT, MARGIN = 720, 120, 40
COLOURS = {
    Standing.LISTED: "#c62828",
    Standing.SUSPECT: "#ef6c00",
    Standing.TAIL: "#8e24aa",
    Standing.EXPLAINED: "#f9a825",
    Standing.BETTER: "#1565c0",
    Standing.OK: "#757575",
}


def page(
    *,
    title: str,
    head: Sequence[str],
    rows: Sequence[dict[str, Any]],
    columns: Sequence[tuple[str, str]],
    notes: Sequence[str],
    fleet: Fleet,
    rules: FleetRules,
) -> str:
    cells = [[cell_text(row.get(key)) for key, _ in columns] for row in rows]
    top = "".join(f"<p>{html.escape(line)}</p>" for line in head)
    plots = "".join(strip_plot(judged, rules) for judged in fleet.judged)
    bottom = "".join(f"<p>{html.escape(note)}</p>" for note in notes)
    return html_page(title, top + html_table([h for _, h in columns], cells) + plots + bottom)


def strip_plot(judged: Judged, rules: FleetRules) -> str:
    """One metric: a dot per unit at log(median / fleet median), jittered vertically by a hash of its name."""
    fleet = judged.placement
    logs = [math.log(placed.median / fleet.median) for placed in fleet.placements]
    band = (math.log(1 - rules.tolerance), -math.log(1 - rules.tolerance))
    low = min([*logs, band[0]]) * 1.1
    high = max([*logs, band[1]]) * 1.1

    def x(value: float) -> float:
        return MARGIN + (value - low) / (high - low) * (WIDTH - 2 * MARGIN)

    parts = [
        f'<rect x="{x(band[0]):.1f}" y="10" width="{x(band[1]) - x(band[0]):.1f}" height="{HEIGHT - 40}" '
        'fill="#eef5ee"/>',
        f'<line x1="{x(0):.1f}" y1="10" x2="{x(0):.1f}" y2="{HEIGHT - 30}" stroke="#444" stroke-dasharray="3,3"/>',
    ]
    for value in _ticks(low, high):
        parts.append(
            f'<text x="{x(value):.1f}" y="{HEIGHT - 12}" font-size="11" text-anchor="middle">'
            f"{math.exp(value):.3g}x</text>"
        )
    for unit, placed, value in zip(judged.units, fleet.placements, logs):
        jitter = (zlib.crc32(unit.name.encode("utf-8", "backslashreplace")) % 1000) / 1000
        y = 18 + jitter * (HEIGHT - 56)
        marked = placed.standing is not Standing.OK
        tip = f"{unit.name}: {placed.ratio:.3f}x the others' median ({placed.standing.value})"
        parts.append(
            f'<circle cx="{x(value):.1f}" cy="{y:.1f}" r="{5 if marked else 3.5}" fill="{COLOURS[placed.standing]}" '
            f'fill-opacity="{0.95 if marked else 0.6}"><title>{html.escape(tip)}</title></circle>'
        )
        if marked:
            parts.append(
                f'<text x="{x(value) + 7:.1f}" y="{y + 4:.1f}" font-size="11" fill="{COLOURS[placed.standing]}">'
                f"{html.escape(unit.name)}</text>"
            )
    series = judged.series
    caption = (
        f"{series.test} {series.metric} ({series.unit}, {'higher' if series.higher_is_better else 'lower'} is "
        f"better): {len(judged.units)} units, fleet median {fleet.median:.4g}, spread {fleet.spread:.2%}"
    )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" role="img" '
        f'aria-label="{html.escape(caption)}">{"".join(parts)}</svg>'
    )
    return f"<figure><figcaption>{html.escape(caption)}</figcaption>{svg}</figure>"


def _ticks(low: float, high: float) -> list[float]:
    """About five ratio ticks between ``low`` and ``high`` (log scale), 1.0x among them."""
    step = (high - low) / 5
    if step <= 0:
        return [0.0]
    ticks = [0.0]
    value = step
    while value <= high:
        ticks.append(value)
        value += step
    value = -step
    while value >= low:
        ticks.append(value)
        value -= step
    return sorted(ticks)
