"""A self-contained HTML page for a saved report or card.

A header naming the run (script, model, parameters, torch and framework versions), the findings
(severity, rule linked to its page, what was observed, evidence, fix), the group timelines with
a legend, the card as a table, what each check could observe, and an inline SVG plot of memory
per microbatch per device. No external assets; the layout wraps instead of scrolling sideways (checked at 1280 px
in a headless browser by the tests)."""

from __future__ import annotations

import html
from typing import Any

from runtime_guard.events import legend, timeline_legend
from runtime_guard.render import card_rows, format_value, human_bytes, is_trace, memory_series

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]

STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1.5em;max-width:76em;line-height:1.4;color:#222}
h1{font-size:1.5em;margin:0 0 .4em}h2{font-size:1.15em;margin:1.6em 0 .5em}
table{border-collapse:collapse;width:100%;table-layout:fixed}
td,th{border:1px solid #ddd;padding:4px 8px;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f4f4f4}
code{font-family:ui-monospace,monospace;font-size:.92em;white-space:pre-wrap;overflow-wrap:anywhere}
.severity{font-weight:600}.error{color:#b00020}.warning{color:#a05a00}.info{color:#235}
.meta th{width:11em}.card th{width:16em}.checks th{width:7em}
.legend{color:#555;font-size:.9em}
svg{max-width:100%;height:auto}
small{color:#555}
"""


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

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="memory per microbatch">',
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


def _e(value: Any) -> str:
    return html.escape(format_value(value) if not isinstance(value, str) else value)


def _header(card: dict[str, Any]) -> str:
    versions = card.get("versions") or {"torch": card.get("torch")}
    framework = card.get("framework") or {}
    if framework.get("name") and framework.get("version") and framework["name"] not in versions:
        versions = {**versions, framework["name"]: framework["version"]}
    rows = [
        ("script", card.get("script") or "not recorded (a probe outside `python -m runtime_guard run`)"),
        ("model", card.get("model") or "not recorded"),
        ("parameters", f"{card['parameters']:,} trainable" if isinstance(card.get("parameters"), int)
         else "not recorded"),
        ("optimizer", card.get("optimizer") or "not recorded"),
        ("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v)),
    ]
    body = "".join(f'<tr><th scope="row">{k}</th><td data-field="{k}">{_e(v)}</td></tr>' for k, v in rows)
    return f'<header><h1>runtime guard card</h1><table class="meta" id="run">{body}</table></header>'


def _findings(findings: list[dict[str, Any]]) -> str:
    head = ("<tr><th>code</th><th>severity</th><th>rule</th><th>where</th><th>observed</th><th>evidence</th>"
            "<th>fix</th></tr>")
    rows = []
    for f in findings:
        where = "run" if f["group"] is None else f"group {f['group']}" + (
            f", microbatch {f['microbatch']}" if f["microbatch"] is not None else "")
        evidence = f.get("evidence") or ""
        rows.append(
            f'<tr class="finding" data-code="{html.escape(f["code"])}"><td>{html.escape(f["code"])}</td>'
            f'<td class="severity {html.escape(f["severity"])}">{html.escape(f["severity"])}</td>'
            f'<td><a href="{html.escape(f["url"])}">{html.escape(f["name"])}</a></td><td>{html.escape(where)}</td>'
            f'<td>{html.escape(f["observed"])}<br><small>{html.escape(f.get("meaning", ""))}</small></td>'
            f'<td><code>{html.escape(evidence)}</code></td><td>{html.escape(f["fix"])}</td></tr>')
    body = "".join(rows) or '<tr><td colspan="7">no findings in the probed groups</td></tr>'
    widths = "".join(f'<col style="width:{w}">' for w in ("6em", "6.5em", "12%", "8em", "27%", "19%", "22%"))
    letters = legend(" ".join(f.get("evidence") or "" for f in findings if is_trace(f.get("evidence") or "")))
    note = f'<p class="legend" id="evidence-legend">evidence letters: {html.escape(letters)}</p>' if letters else ""
    return f'<h2>findings</h2><table id="findings"><colgroup>{widths}</colgroup>{head}{body}</table>{note}'


def _timeline(card: dict[str, Any]) -> str:
    groups = card.get("groups", [])
    rows = "".join(
        f'<tr><th scope="row">group {g["index"]}{"*" if g.get("tail") else ""}</th>'
        f'<td><code>{html.escape(g["timeline"])}</code></td></tr>' for g in groups)
    marks = " ".join(g["timeline"] for g in groups) + (" *" if any(g.get("tail") for g in groups) else "")
    text = timeline_legend(marks) if marks.strip() else "no event observed"
    return (f'<h2>timeline</h2><table class="checks" id="timeline">{rows}</table>'
            f'<p class="legend" id="timeline-legend">legend: {html.escape(text)}</p>')


def _card(card: dict[str, Any]) -> str:
    rows = "".join(f'<tr><th scope="row">{html.escape(k)}</th><td>{_e(v)}</td></tr>' for k, v in card_rows(card))
    memory = "".join(
        f'<tr><th scope="row">memory peak, group {g["group"]}{" (tail)" if g.get("tail") else ""}</th><td>'
        f'saved activations {html.escape(human_bytes(g.get("saved_activation_peak_bytes")))}'
        + "".join(f", {html.escape(d)} {html.escape(human_bytes(b))}" for d, b in (g.get("device_peak_bytes") or {})
                  .items()) + "</td></tr>"
        for g in card.get("memory", {}).get("per_group", []))
    return f'<h2>card</h2><table class="card" id="card">{rows}{memory}</table>'


def _checks(card: dict[str, Any]) -> str:
    rows = "".join(f'<tr><th scope="row">{html.escape(code)}</th><td>{html.escape(status)}</td></tr>'
                   for code, status in (card.get("checks") or {}).items())
    return f'<h2>what each check observed</h2><table class="checks" id="checks">{rows}</table>' if rows else ""


def _notes(card: dict[str, Any]) -> str:
    items = [("cannot observe", n) for n in card.get("unobservable") or []] + [
        ("note", n) for n in card.get("notes") or []]
    if not items:
        return ""
    body = "".join(f"<li><b>{k}</b>: {html.escape(v)}</li>" for k, v in items)
    return f'<h2>notes</h2><ul id="notes">{body}</ul>'


def render_html(report: dict[str, Any]) -> str:
    """The page for ``{"findings": [...], "card": {...}}`` (a bare card works too)."""
    card = report.get("card", report)
    findings = report.get("findings", [])
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>runtime guard card: {html.escape(card.get("model") or "run")}</title>
<style>{STYLE}</style></head><body>
{_header(card)}
{_findings(findings)}
{_timeline(card)}
{_card(card)}
<h2>memory per microbatch</h2>{memory_svg(card)}
{_checks(card)}
{_notes(card)}
</body></html>
"""
