"""Data-parallel communication delayed correctly: ``no_sync`` covers the forward, and the
last microbatch of each group runs with sync on (P10)."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from accumlint.checks.base import Hit, Rule
from accumlint.findings import Severity
from accumlint.model import EventKind, FileModel, LoopStyle, Role
from accumlint.model import frameworks as fw
from accumlint.model.dataflow import reaching_assignment
from accumlint.model.names import calls_in, dotted, keyword, method_name, positional, receiver
from accumlint.model.sites import FrameKind, Site


def _no_sync_call(model: FileModel, item: cst.BaseExpression, site: Site) -> tuple[cst.Call | None, bool]:
    """The no-sync call a ``with`` item enters (directly, or through a name bound to an
    expression containing one) and whether it is entered unconditionally."""
    candidates: list[tuple[cst.BaseExpression, bool]] = [(item, True)]
    name = dotted(item)
    if name is not None:
        definition = reaching_assignment(site.scope, name, site.order)
        if definition is not None and definition.value is not None:
            candidates.append((definition.value, False))
    for expression, direct in candidates:
        for call in calls_in(expression):
            if method_name(call) in fw.NO_SYNC_METHODS:
                unconditional = direct and isinstance(expression, cst.Call) and keyword(call, "enabled") is None
                return call, unconditional
    return None, False


def _synced_model(call: cst.Call) -> cst.BaseExpression | None:
    """The model whose sync the call switches: the receiver (``ddp.no_sync()``) or the first
    argument (``accelerator.no_sync(model)``, ``fabric.no_backward_sync(model)``)."""
    return positional(call, 0) or receiver(call)


class NoSyncMissesForward(Rule):
    """ACC401: a ``no_sync`` context around the backward but not the forward that produced its loss."""

    code = "ACC401"
    name = "no-sync-misses-forward"
    severity = Severity.WARNING
    principle = "P10"
    summary = "no_sync() wraps the backward but not the forward: DDP still all-reduces every microbatch"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            loop_sites = [s for s in group.scope.sites if s.inside(group.loop) and not s.in_helper]
            for backward in group.of_kind(EventKind.BACKWARD):
                for frame in backward.site.frames_inside(group.loop):
                    if frame.kind is not FrameKind.WITH:
                        continue
                    for item in frame.node.items:  # type: ignore[attr-defined]
                        call, _ = _no_sync_call(model, item.item, backward.site)
                        if call is None:
                            continue
                        owner = model.roles.of(receiver(call), backward.site)
                        if owner.role not in fw.FORWARD_DECIDES_SYNC and owner.role is not Role.MODEL:
                            continue
                        synced = dotted(_synced_model(call))
                        if synced is None or model.roles.named(synced, group.scope, backward.order).role is (
                                Role.FSDP_MODEL):
                            continue
                        forwards = [s for s in loop_sites if s.call is not None and dotted(s.call.func) == synced
                                    and s.order < backward.order]
                        if forwards and not any(s.inside(frame.node) for s in forwards):
                            yield Hit(
                                forwards[-1].node,
                                f"this forward of `{synced}` runs outside the `no_sync()` that wraps its backward; DDP "
                                "decides at forward time whether the next backward all-reduces, so the backward "
                                "still communicates on every microbatch (correct, but the saving is lost)",
                                "open the no-sync context before the forward so it covers forward and backward",
                            )
            yield from self._flag_assigned_late(model, group, loop_sites)

    def _flag_assigned_late(self, model: FileModel, group, loop_sites: list[Site]) -> Iterator[Hit]:
        for site in loop_sites:
            flag = next((t for t in site.targets if t and t.endswith(".require_backward_grad_sync")), None)
            if flag is None:
                continue
            owner = flag.rsplit(".", 1)[0]
            forwards = [s for s in loop_sites if s.call is not None and dotted(s.call.func) == owner
                        and s.order < site.order]
            later_backward = any(b.order > site.order for b in group.of_kind(EventKind.BACKWARD))
            if forwards and later_backward:
                yield Hit(
                    site.statement,
                    "`require_backward_grad_sync` is set after the forward; DDP reads it at forward time, "
                    "so the group synchronizes on the wrong microbatch",
                    "assign the flag before the forward of each microbatch",
                )


class NoSyncNeverSyncs(Rule):
    """ACC402: every microbatch runs under ``no_sync``: replicas never all-reduce."""

    code = "ACC402"
    name = "no-sync-never-syncs"
    severity = Severity.ERROR
    principle = "P10"
    summary = "every microbatch runs under no_sync(): gradients are never synchronized and replicas diverge"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.style not in (LoopStyle.GATED, LoopStyle.MICRO_LOOP):
                continue
            backwards = [b for b in group.of_kind(EventKind.BACKWARD) if group.in_loop(b)]
            after = [b for b in group.of_kind(EventKind.BACKWARD) if not group.in_loop(b)]
            if not backwards or after:
                continue
            contexts: list[cst.With] = []
            for backward in backwards:
                context = self._unconditional_context(model, group, backward)
                if context is None:
                    break
                contexts.append(context)
            else:
                yield Hit(
                    contexts[0],
                    "every microbatch, the last of each group included, runs under no_sync(): the gradients "
                    "are never all-reduced and the replicas silently diverge",
                    "run the last microbatch of each group outside no_sync() "
                    "(e.g. `ctx = model.no_sync() if (i + 1) % A != 0 else nullcontext()`)",
                )

    def _unconditional_context(self, model: FileModel, group, backward) -> cst.With | None:
        """The unconditional no-sync ``with`` covering the backward (or, for DDP, its forward)."""
        sites = [backward.site]
        if backward.loss is not None and dotted(backward.loss):
            definition = reaching_assignment(backward.site.scope, dotted(backward.loss) or "", backward.order,
                                             group.loop)
            if definition is not None:
                sites.append(definition)
        for site in sites:
            if group.style is LoopStyle.MICRO_LOOP and group.region_root is not None:
                frames = site.frames_inside(group.region_root)
            elif group.style is LoopStyle.MICRO_LOOP:
                frames = site.frames
            else:
                frames = site.frames_inside(group.loop)
            for index, frame in enumerate(frames):
                if frame.kind is not FrameKind.WITH:
                    continue
                if any(f.kind in (FrameKind.IF, FrameKind.GUARD) for f in frames[:index]):
                    continue
                for item in frame.node.items:  # type: ignore[attr-defined]
                    call, unconditional = _no_sync_call(model, item.item, site)
                    if call is not None and unconditional:
                        return frame.node  # type: ignore[return-value]
        return None
