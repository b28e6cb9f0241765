"""Gradient resets: where ``zero_grad`` (or ``p.grad = None``) may and may not run (P2, P3)."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import libcst as cst

from accumlint.checks.base import Hit, Rule
from accumlint.checks.group_traces import TraceVerdict, trace_hits, with_traces
from accumlint.checks.shared.leaks import models_reached, switches_requires_grad, trained_models
from accumlint.model import Cadence, EventKind, FileModel, LoopStyle, Role
from accumlint.model.names import dotted, keyword
from accumlint.model.simulation import BY_NAME, Simulation

_ONCE_PER_GROUP = (Cadence.UPDATE, Cadence.FRAMEWORK_GATED)
#: backwards whose gradient a later microbatch's reset would wipe
_CONTRIBUTES = (Cadence.MICROBATCH, Cadence.NON_BOUNDARY)


class ZeroGradInsideGroup(Rule):
    """ACC001: a gradient reset on a path that runs every microbatch while the update runs once per group."""

    code = "ACC001"

    @with_traces
    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is not True:
                continue
            updates = group.of_kind(EventKind.UPDATE)
            grouped = {dotted(u.target) for u in updates if group.cadence(u) in _ONCE_PER_GROUP}
            every_microbatch = {dotted(u.target) for u in updates if group.cadence(u) is Cadence.MICROBATCH}
            off_boundary = any(group.cadence(u) is Cadence.NON_BOUNDARY for u in updates)
            if group.style is not LoopStyle.DEEPSPEED and not grouped:
                continue
            backwards = [b for b in group.of_kind(EventKind.BACKWARD) if group.cadence(b) in _CONTRIBUTES]
            if not backwards:
                continue  # no contribution accumulates across microbatches for a reset to wipe
            if _writes_gradients(group):
                continue  # the loop moves gradients by hand (per-example buffers, DP-SGD): not decidable
            for reset in group.of_kind(EventKind.RESET):
                cadence = group.cadence(reset)
                if cadence is Cadence.NON_BOUNDARY:
                    # on the microbatches before the last one, after one of their backwards: what the
                    # group accumulated so far is wiped (before the backward it may be the group start)
                    if not any(b.order < reset.order and b.site.inside(group.loop) and not b.site.excludes(reset.site)
                               for b in backwards):
                        continue
                    if off_boundary or (reset.role.role is Role.OPTIMIZER and dotted(reset.target) not in grouped):
                        continue  # something updates on those microbatches (alternating optimizers): whose reset?
                elif cadence is not Cadence.MICROBATCH:
                    continue
                target = dotted(reset.target)
                if reset.role.role is Role.OPTIMIZER:
                    # pair the reset with its own optimizer: a GAN's discriminator may update every microbatch
                    if target in every_microbatch or (target not in grouped and every_microbatch):
                        continue
                elif every_microbatch:
                    continue  # a module reset next to an optimizer that updates every microbatch: whose params?
                what = target or "the gradients"
                when = "on every microbatch" + ("" if cadence is Cadence.MICROBATCH else " but a group's last")
                yield Hit(
                    reset.node,
                    f"`{what}` is reset {when} while the optimizer update runs once per group, "
                    "so each update sees only the last microbatch's gradient and accumulation has no effect",
                )


def _kept(model: FileModel, simulation: Simulation, verdict: TraceVerdict) -> bool:
    """Whether ACC002's trace ``verdict`` is reported: not where the file spells a reset (the
    runs may not see it), nor, in a module that does not import torch, for an optimizer known
    by its name alone (``opt``); as the patterns."""
    return not _spells_reset(model) and (model.imports.imports_module("torch") or not _by_name(simulation, verdict))


def _spells_reset(model: FileModel) -> bool:
    return any(e.kind is EventKind.RESET for e in model.all_events()) or _mentions_reset(model)


def _by_name(simulation: Simulation, verdict: TraceVerdict) -> bool:
    """Whether the optimizer ``verdict``'s update steps is one by its name alone (``opt``)."""
    return any(fact.label == verdict.event.target and fact.evidence == BY_NAME for fact in simulation.roles)


class MissingGradReset(Rule):
    """ACC002: an optimizer update that nothing in the file ever resets the gradients for.

    Read off the simulated runs (:mod:`accumlint.checks.group_traces`): a run that updates one
    model's parameters twice with no reset anywhere (a fresh optimizer over fresh tensors each
    iteration accumulates nothing). Silent where the file spells a reset the runs may not see (a
    ``clear_grads()`` helper) and, in a module that does not import torch, for an optimizer known
    by its name alone.
    """

    code = "ACC002"

    def check(self, model: FileModel) -> Iterator[Hit]:
        yield from trace_hits(model, self.code, functools.partial(_kept, model))


def _writes_gradients(group) -> bool:
    """Whether the loop assigns gradients itself (``p.grad = buffer``), other than resetting them
    or rescaling them in place (``p.grad /= A``: normalization on the gradient side)."""
    for site in group.region_sites:
        if isinstance(site.augmented, (cst.DivideAssign, cst.MultiplyAssign)):
            continue
        for target in site.targets:
            if target and target.endswith(".grad") and not (
                    isinstance(site.value, cst.Name) and site.value.value == "None"):
                return True
    return False


def _mentions_reset(model: FileModel) -> bool:
    """A reset we could not classify (a helper from another module, a custom method) counts as one."""
    for event_scope in model.scopes:
        for site in event_scope.sites:
            if site.call is not None:
                name = (dotted(site.call.func) or "").lower()
                if "zero_grad" in name or "reset_grad" in name or "clear_grad" in name:
                    return True
            if any(t and t.endswith(".grad") for t in site.targets):
                return True
    return False


class ResetBetweenBackwardAndStep(Rule):
    """ACC003: a reset after the group's last backward and before its update wipes the group.

    Read off the simulated runs (:mod:`accumlint.checks.group_traces`): every group of a run
    with whole groups holds a reset between its last backward and its update (a reset every
    microbatch is ACC001's).
    """

    code = "ACC003"

    def check(self, model: FileModel) -> Iterator[Hit]:
        yield from trace_hits(model, self.code)


class GradLeakAcrossModels(Rule):
    """ACC008: a backward reaches the parameters of a second model that accumulates with its own optimizer.

    Flags, in a loop where two optimizers built over two models (``Adam(net_g.parameters())``,
    ``Adam(net_d.parameters())``) both update once per group of A > 1, a per-microbatch backward
    whose loss flows through both models' forwards while another per-microbatch backward
    reaches only one of them (that model's own loss): the GAN generator loss backpropagated
    through the discriminator. Its gradients stay in the discriminator's ``.grad``, which is
    reset only at its own boundary, and its next update applies them. Exempt: ``.detach()`` of
    the other model's input; ``requires_grad_``/``requires_grad =`` toggles in the loop;
    ``backward(inputs=...)``; a reset that runs every microbatch; optimizers or models the
    model cannot name.
    """

    code = "ACC008"

    def check(self, model: FileModel) -> Iterator[Hit]:
        for group in model.loops:
            if group.accumulates is not True or group.style not in (LoopStyle.GATED, LoopStyle.MICRO_LOOP):
                continue
            owners = {trained[0]: u for u in group.of_kind(EventKind.UPDATE)
                      if group.cadence(u) is Cadence.UPDATE and len(trained := trained_models(model, u)) == 1}
            if len(owners) < 2 or _toggles_requires_grad(group):
                continue
            if any(group.cadence(r) is Cadence.MICROBATCH for r in group.of_kind(EventKind.RESET)):
                continue
            models = set(owners)  # type: ignore[arg-type]
            backwards = [b for b in group.of_kind(EventKind.BACKWARD)
                         if group.cadence(b) is Cadence.MICROBATCH
                         and b.site.call is not None and keyword(b.site.call, "inputs") is None]
            reached = [(b, *models_reached(b, models, model.roles)) for b in backwards]
            # a model's own loss: it reaches that model alone and cuts the other one off with .detach()
            own = {next(iter(found)): cut for _, found, cut in reached if len(found) == 1 and cut}
            for backward, found, _ in reached:
                if len(found) < 2:
                    continue
                for victim in sorted(found):
                    others = sorted(found - {victim})
                    if victim not in own or not set(others) & own[victim]:
                        continue
                    other = others[0]
                    yield Hit(
                        backward.node,
                        f"this backward of `{other}`'s loss also flows through `{victim}`'s forward: its gradients "
                        f"stay in `{victim}`'s `.grad`, which is reset only at `{victim}`'s own group boundary, so "
                        f"`{victim}`'s next update applies them (its own loss detaches `{other}`'s output)",
                        f"switch `{victim}`'s parameters to `requires_grad_(False)` around this pass, or "
                        f"backpropagate it with `torch.autograd.grad(..., inputs=...)` / `backward(inputs=...)` "
                        f"over `{other}`'s parameters only",
                    )
                    break


def _toggles_requires_grad(group) -> bool:
    """Whether the loop switches ``requires_grad``: the stray gradients are then not computed."""
    return any(switches_requires_grad(site) for site in group.region_sites)
