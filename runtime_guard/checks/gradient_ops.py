"""Gradient operations and the GradScaler at run time (ACC301, ACC302, ACC303, ACC307): clips,
unscales, scaler steps and updates against the group's last backward."""

from __future__ import annotations

from collections.abc import Iterator

from runtime_guard.checks.base import backward_end_seq, finding, forward_seq, trace
from runtime_guard.events import CLIP, RESET, SCALER_STEP, SCALER_UPDATE, UNSCALE
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding
from runtime_guard.trace import ObservedEvent, ObservedGroup

#: the traced events that explain a change of .grad between two microbatches (no such event: ACC307)
_GRAD_TOUCHING = (RESET, CLIP, UNSCALE, SCALER_STEP, SCALER_UPDATE)


def gradient_ops(rec: RunRecord) -> Iterator[RuntimeFinding]:
    reported: set[str] = set()
    for g in rec.groups:
        last_b = g.last_backward_seq()
        first_f = g.events[0].seq if g.events else 0
        end = g.boundary_seq if g.closed else (g.events[-1].seq + 1 if g.events else 0)
        clips = [e for e in g.events if e.kind == CLIP and first_f < e.seq < end]
        early = [e for e in clips if last_b is not None and e.seq < last_b]
        if "ACC301" not in reported and (early or len(clips) > 1):
            reported.add("ACC301")
            yield finding("ACC301", g.index, clips[0].microbatch,
                           f"gradients clipped {len(clips)}x in group {g.index}"
                           + (f", {len(early)}x before its last backward" if early else ""), trace(g.events))
        if "ACC301" not in reported:
            for prev, mb in zip(g.microbatches, g.microbatches[1:], strict=False):
                before = prev.grads_after_backward
                after = mb.grads_at_forward
                if before is None or after.all_zero or before.same_values(after):
                    continue
                start = backward_end_seq(g, prev) or 0
                seen = [e for e in g.events if start < e.seq < forward_seq(g, mb.index) and e.kind in _GRAD_TOUCHING]
                if not seen:  # an in-place rescale of .grad (ACC307); a clip the probe saw is ACC301 above
                    reported.add("ACC307")
                    yield finding("ACC307", g.index, mb.index,
                                   f"gradients were rescaled in place between microbatch {prev.index} and {mb.index} "
                                   f"of group {g.index} by an operation the probe did not see (`p.grad.mul_`, "
                                   "`scale_grads`, or a clip function bound before the probe attached)",
                                   trace(g.events))
                    break
        if not rec.scaler_given:
            continue
        scales = {mb.scale for mb in g.microbatches if mb.scale is not None}
        if "ACC302" not in reported:
            for c in clips:
                unscaled = [e for e in g.events if e.kind == UNSCALE and e.seq < c.seq]
                if not unscaled and any(s != 1.0 for s in scales):
                    reported.add("ACC302")
                    yield finding("ACC302", g.index, c.microbatch,
                                   f"gradients clipped before scaler.unscale_ while the scale was {max(scales):g}",
                                   trace(g.events))
                    break
        if "ACC303" not in reported and last_b is not None:
            early_ops = [e for e in g.events if e.kind in (UNSCALE, SCALER_UPDATE, SCALER_STEP) and e.seq < last_b
                         and not e.detail.get("inside_scaler_step")]
            orphans = _updates_without_step(g)
            if early_ops or len(scales) > 1 or orphans:
                reported.add("ACC303")
                if early_ops:
                    what = ", ".join(sorted({_SCALER_WORDS[e.kind] for e in early_ops})) + " before the last backward"
                elif len(scales) > 1:
                    what = f"the scale changed inside the group ({sorted(scales)})"
                else:
                    raised = " (torch raised: no inf checks were recorded)" if orphans[0].detail.get("raised") else ""
                    what = (f"scaler.update() after microbatch {orphans[0].microbatch} with no scaler.step() since "
                            f"the previous update{raised}")
                first = (early_ops or orphans or [None])[0]
                yield finding("ACC303", g.index, first.microbatch if first else None,
                               f"group {g.index}: {what}", trace(g.events))


def _updates_without_step(group: ObservedGroup) -> list[ObservedEvent]:
    """``scaler.update()`` calls of an enabled scaler with no ``scaler.step()`` between them and the
    previous update (or the group's start): always a per-microbatch update (torch raises on them).
    A step of another model's optimizer on the same scaler (a GAN's) counts as a step."""
    orphans, stepped = [], False
    for e in group.events:
        if e.kind == SCALER_STEP:
            stepped = True
        elif e.kind == SCALER_UPDATE:
            if not stepped and not e.detail.get("other_steps") and e.detail.get("enabled", True):
                orphans.append(e)
            stepped = False
    return orphans


_SCALER_WORDS = {UNSCALE: "scaler.unscale_", SCALER_UPDATE: "scaler.update", SCALER_STEP: "scaler.step"}
