"""Text rendering of a report or a saved card.

Findings, the card table, group timelines and memory per microbatch as a terminal sparkline."""

from __future__ import annotations

from typing import Any

from runtime_guard.events import EVENTS, legend, timeline_legend

BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    """One block character per value, scaled between 0 and the maximum (``""`` for no values)."""
    if not values:
        return ""
    top = max(values)
    if top <= 0:
        return BARS[0] * len(values)
    return "".join(BARS[min(len(BARS) - 1, int(v / top * (len(BARS) - 1) + 0.5))] for v in values)


def human_bytes(n: float | None) -> str:
    """``1536`` -> ``"1.5 KiB"``."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def memory_series(card: dict[str, Any]) -> dict[str, list[float]]:
    """Per device, one value per microbatch: CUDA peaks where recorded, else saved activations (CPU)."""
    rows = card.get("memory", {}).get("per_microbatch", [])
    series: dict[str, list[float]] = {}
    for row in rows:
        peaks = row.get("device_peak_bytes") or {}
        for device, value in peaks.items():
            series.setdefault(device, []).append(value)
    if not series:
        series["saved activations (cpu)"] = [row.get("saved_activation_peak_bytes", 0) for row in rows]
    return series


def format_value(value: Any) -> str:
    """A card value as text: dicts as ``key: value`` pairs, lists in brackets, ``None`` as "not known"."""
    if isinstance(value, dict):
        return ", ".join(f"{k}: {format_value(v)}" for k, v in value.items() if v is not None) or "-"
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return "not known" if value is None else str(value)


def _or(value: Any, why: str) -> Any:
    """``value``, or the reason it is missing (the card never shows a bare None)."""
    return why if value is None or value == {} else value


def _loss_weights(card: dict[str, Any]) -> str:
    """Per group: the measured weight sum and its factor relative to the convention, or why not observed."""
    entries = card.get("normalization_groups") or []
    if not entries:
        return "not observed (no closed group)"
    return "; ".join(
        f"group {e['group']}: {e['shape']}" if e["weight_sum"] is None else
        f"group {e['group']}: sum {e['weight_sum']:.4g} = {e['factor']:.4g}x the {e['convention']} convention "
        f"({e['convention_source']}, expected {e['expected_sum']:.6g})" for e in entries)


def _logged_rates(card: dict[str, Any]) -> str:
    """Each rate the loop logged with what it was found to count (ACC903)."""
    rows = card.get("logged_rates") or []
    return "; ".join(f"{r['name']} = {r['value']:.4g} ({r.get('source', 'runtime_guard.log')}, group {r['group']}): "
                     f"{r['verdict']}" for r in rows) or "none logged through runtime_guard.log() or a hooked logger"


def _at_attach(card: dict[str, Any]) -> str:
    """The optimizer's own update count and the scheduler's position when the probe attached (ACC904)."""
    at = card.get("at_attach") or {}
    updates, position = at.get("optimizer_updates"), at.get("scheduler_position")
    return (f"optimizer updates {'not counted' if updates is None else updates} (state['step']), scheduler "
            f"position {'no scheduler' if position is None else position}")


def card_rows(card: dict[str, Any]) -> list[tuple[str, Any]]:
    """The card's facts as (label, value) rows, a reason in place of each missing value."""
    tokens = card.get("supervised_tokens_per_group") or {}
    tokens = {k: v for k, v in tokens.items() if v is not None} or None
    all_reduce = card.get("all_reduce", {})
    return [
        ("m (examples / microbatch)", _or(card.get("m"), "not observed (no tensor input)")),
        ("A (accumulation steps)", f"{_or(card.get('A'), 'not known')}  ({card.get('A_source')})"),
        ("D (data-parallel replicas)", f"{_or(card.get('D'), 'not known')}  ({card.get('D_source')})"),
        ("effective batch m·A·D", _or(card.get("effective_batch"), "not known (m, A or D not known)")),
        ("group sizes", card.get("group_sizes")),
        ("supervised tokens / group", _or(tokens, "not counted (normalization not inferred)")),
        ("precision", card.get("precision")),
        ("normalization", card.get("normalization")),
        ("loss weights / group", _loss_weights(card)),
        ("last group", card.get("last_group")),
        ("updates", card.get("updates")),
        ("scheduler steps / update", _or(card.get("scheduler_steps_per_update"),
                                         "no scheduler given or found, or no update attempt")),
        ("all-reduce rounds / group", _or(all_reduce.get("rounds_per_group"), all_reduce.get("how", "not known"))),
        ("BatchNorm (ACC901)", card.get("batchnorm", {}).get("modules") or "none"),
        ("counts (ACC902)", card.get("counts")),
        ("logged rates (ACC903)", _logged_rates(card)),
        ("at attach (ACC904)", _at_attach(card)),
    ]


def render_card(card: dict[str, Any]) -> str:
    """The card as a two-column table, the group timelines and the memory sparkline."""
    rows = card_rows(card)
    width = max(len(k) for k, _ in rows)
    lines = [f"  {k.ljust(width)}  {format_value(v)}" for k, v in rows]
    lines.append("  memory peaks per group:")
    for g in card.get("memory", {}).get("per_group", []):
        devices = g.get("device_peak_bytes") or {}
        dev = "  ".join(f"{d} {human_bytes(b)}" for d, b in devices.items())
        label = f"group {g['group']}" + (" (tail)" if g.get("tail") else "")
        lines.append(f"    {label}: saved activations {human_bytes(g['saved_activation_peak_bytes'])}"
                     + (f"  {dev}" if dev else ""))
    lines.append("  memory per microbatch:")
    for device, values in memory_series(card).items():
        lines.append(f"    {device}: {sparkline(values)}  (max {human_bytes(max(values) if values else 0)})")
    lines.append("  timeline:")
    for g in card.get("groups", []):
        label = f"group {g['index']}" + ("*" if g.get("tail") else "")
        lines.append(f"    {label}: {g['timeline']}")
    marks = " ".join(g["timeline"] for g in card.get("groups", [])) + (
        " *" if any(g.get("tail") for g in card.get("groups", [])) else "")
    if marks.strip():
        lines.append(f"    legend: {timeline_legend(marks)}")
    for title, key in (("cannot observe", "unobservable"), ("notes", "notes")):
        for item in card.get(key) or []:
            lines.append(f"  {title}: {item}")
    return "\n".join(lines)


def render_findings(findings: list[dict[str, Any]]) -> str:
    """One block per finding: code, where, what was observed, evidence, meaning, fix."""
    if not findings:
        return "runtime guard: no findings in the probed groups."
    lines = [f"runtime guard: {len(findings)} finding(s)"]
    for f in findings:
        where = "run" if f["group"] is None else f"group {f['group']}" + (
            f", microbatch {f['microbatch']}" if f["microbatch"] is not None else "")
        lines.append(f"  {f['code']} [{f['severity']}] {f['name']} ({where}): {f['observed']}")
        if f.get("evidence"):
            lines.append(f"    evidence: {f['evidence']}")
        lines.append(f"    means: {f['meaning']}")
        lines.append(f"    help: {f['fix']}")
        lines.append(f"    see: {f['url']}")
    letters = legend(" ".join(f.get("evidence", "") for f in findings if is_trace(f.get("evidence", ""))))
    if letters:
        lines.append(f"  evidence letters: {letters}")
    return "\n".join(lines)


def is_trace(evidence: str) -> bool:
    """Evidence written in event letters (``F B Z F B S``), not a sentence."""
    return bool(evidence) and all(t in EVENTS or t in ("‖", "|") or t.rstrip("*") in EVENTS
                                  for t in evidence.split())


def render_report(report: dict[str, Any]) -> str:
    """Findings, then the card."""
    return render_findings(report.get("findings", [])) + "\ncard:\n" + render_card(report.get("card", {}))
