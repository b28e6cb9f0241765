"""A self-contained HTML page for a saved report or card: findings, the card table, the group
timelines and an inline SVG plot of memory per microbatch per device (no external assets)."""

from __future__ import annotations

import html
from typing import Any

from runtime_guard.render import human_bytes, memory_series, render_card

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]


def memory_svg(card: dict[str, Any], width: int = 640, height: int = 220) -> str:
    """An SVG line plot: x = microbatch (probe order), y = bytes, one line per device."""
    series = memory_series(card)
    rows = card.get("memory", {}).get("per_microbatch", [])
    top = max((max(v) for v in series.values() if v), default=0) or 1
    n = max((len(v) for v in series.values()), default=0)
    pad = 48
    def x(i: int) -> float:
        return pad + (width - 2 * pad) * (i / max(1, n - 1))

    def y(v: float) -> float:
        return height - pad + (2 * pad - height) * (v / top)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="memory per microbatch">',
             f'<line x1="{pad}" y1="{height - pad}" x2="{width - pad}" y2="{height - pad}" stroke="#999"/>',
             f'<line x1="{pad}" y1="{pad / 2}" x2="{pad}" y2="{height - pad}" stroke="#999"/>',
             f'<text x="4" y="{pad / 2 + 4}" font-size="11">{html.escape(human_bytes(top))}</text>',
             f'<text x="{width / 2}" y="{height - 12}" font-size="11" text-anchor="middle">microbatch '
             '(group boundaries dashed)</text>']
    for i in range(1, len(rows)):
        if rows[i]["group"] != rows[i - 1]["group"]:
            xb = (x(i - 1) + x(i)) / 2
            parts.append(f'<line x1="{xb:.1f}" y1="{pad / 2}" x2="{xb:.1f}" y2="{height - pad}" stroke="#ccc" '
                         'stroke-dasharray="4 3"/>')
    for k, (device, values) in enumerate(series.items()):
        color = COLORS[k % len(COLORS)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(values))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}"/>')
        parts.append(f'<text x="{width - pad}" y="{pad / 2 + 14 * (k + 1)}" font-size="11" fill="{color}" '
                     f'text-anchor="end">{html.escape(device)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def render_html(report: dict[str, Any]) -> str:
    """The page for ``{"findings": [...], "card": {...}}`` (a bare card works too)."""
    card = report.get("card", report)
    findings = report.get("findings", [])
    rows = "".join(
        f"<tr><td>{html.escape(f['code'])}</td><td>{html.escape(f['name'])}</td>"
        f"<td>{'run' if f['group'] is None else f['group']}</td>"
        f"<td>{'' if f['microbatch'] is None else f['microbatch']}</td>"
        f"<td>{html.escape(f['observed'])}<br><small>{html.escape(f['fix'])}</small></td></tr>"
        for f in findings
    ) or '<tr><td colspan="5">no findings in the probed groups</td></tr>'
    timelines = "".join(
        f"<div><b>group {g['index']}{'*' if g.get('tail') else ''}</b> <code>{html.escape(g['timeline'])}</code></div>"
        for g in card.get("groups", [])
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>runtime guard card</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:60em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top}}pre{{background:#f6f6f6;padding:1em}}
</style></head><body>
<h1>runtime guard</h1>
<h2>findings</h2>
<table><tr><th>code</th><th>name</th><th>group</th><th>microbatch</th><th>observed / fix</th></tr>{rows}</table>
<h2>timeline</h2>{timelines}
<h2>memory per microbatch</h2>{memory_svg(card)}
<h2>card</h2><pre>{html.escape(render_card(card))}</pre>
</body></html>
"""
