"""Data-parallel communication delayed correctly: ``no_sync`` covers the forward, and the
last microbatch of each group runs with sync on (P10).

The family's own analysis lives beside the rules: :mod:`.fsdp2` (FSDP2 models and the DDP-only
switches used on them).
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks.base import Hit, Rule
from accumlint.checks.gate import RuleGate, runs_loop
from accumlint.checks.group_traces import trace_hits
from accumlint.checks.sync.fsdp2 import ddp_switches_on_fsdp2
from accumlint.model import EventKind, FileModel, Role
from accumlint.model.events import BACKWARD_CALLS
from accumlint.model.names import dotted, receiver
from accumlint.model.scopes import FrameKind, Site
from accumlint.model.sync import (
    expression_root,
    from_parameter,
    no_sync_contexts,
    scope_name,
)


class NoSyncMissesForward(Rule):
    """ACC401: a ``no_sync`` context around the backward but not the forward that produced its loss."""

    code = "ACC401"
    #: a loop, or a backward with a no-sync context in the module (entered around it, in a loop or not)
    gate = RuleGate(facts=lambda facts: runs_loop(facts) or (
        facts.calls(BACKWARD_CALLS) and facts.mentions(fw.NO_SYNC_METHODS)))

    def check(self, model: FileModel) -> Iterator[Hit]:
        reported: set[int] = set()
        for scope in model.scopes:
            for backward in model.events[scope]:
                if backward.kind is not EventKind.BACKWARD:
                    continue
                for context, synced in self._forward_deciding_contexts(model, backward):
                    hit = self._forward_outside(model, backward, context, synced)
                    if hit is not None and id(hit.node) not in reported:
                        reported.add(id(hit.node))
                        yield hit
        for group in model.loops:
            yield from self._flag_assigned_late(model, group, group.loop_sites)

    def _forward_deciding_contexts(self, model: FileModel, backward) -> Iterator[tuple[cst.With, str]]:
        """The no-sync ``with`` statements around a backward whose model decides sync at forward time."""
        for context in no_sync_contexts(backward.site):
            owner = model.roles.of(receiver(context.call), backward.site)
            if owner.role is not Role.ACCELERATOR and owner.role is not Role.FABRIC:
                owner = model.roles.named(context.synced, backward.site.scope, backward.order)
            if context.synced is not None and model.frameworks.sync_decided_at_forward(owner) is True:
                yield context.node, context.synced

    def _forward_outside(self, model: FileModel, backward, context: cst.With, synced: str) -> Hit | None:
        """A hit when the forward producing the backward's loss ran outside ``context``."""
        scope = backward.site.scope
        loop = next((f.node for f in reversed(backward.site.frames) if f.kind is FrameKind.LOOP), None)
        region = [s for s in scope.sites if not s.in_helper and (loop is None or s.inside(loop))
                  and s.order < backward.order]
        forwards = [s for s in region if s.call is not None and dotted(s.call.func) == synced and not s.under_no_grad]
        if forwards:
            if any(s.inside(context) for s in forwards):
                return None
            return Hit(
                forwards[-1].node,
                f"this forward of `{synced}` runs outside the `no_sync()` that wraps its backward; DDP decides "
                "at forward time whether the next backward all-reduces, so the backward still communicates on "
                "every microbatch (correct, but the saving is lost)",
            )
        if backward.site.in_helper or not from_parameter(scope, expression_root(backward.loss), backward.site):
            return None
        return Hit(
            backward.node,
            "the loss backpropagated under `no_sync()` arrives as an argument, so its forward ran before the "
            "context was entered; DDP decided at that forward to all-reduce, and this backward still "
            "communicates (correct, but the saving is lost)",
            "in the caller, around the forward as well",
        )

    def _flag_assigned_late(self, model: FileModel, group, loop_sites: list[Site]) -> Iterator[Hit]:
        for site in loop_sites:
            flag = next((t for t in site.targets if t and t.endswith(".require_backward_grad_sync")), None)
            if flag is None:
                continue
            # read in the scope's own names: the flag and the forward may sit in helpers
            owner = scope_name(flag.rsplit(".", 1)[0], site, model.roles)
            forwards = [s for s in loop_sites if s.call is not None and s.order < site.order and not s.under_no_grad
                        and owner is not None and scope_name(dotted(s.call.func), s, model.roles) == owner]
            later_backward = any(b.order > site.order for b in group.of_kind(EventKind.BACKWARD))
            if forwards and later_backward:
                yield Hit(
                    site.statement,
                    "`require_backward_grad_sync` is set after the forward; DDP reads it at forward time, "
                    "so the group synchronizes on the wrong microbatch",
                    "assign the flag before the forward of each microbatch",
                )


class NoSyncNeverSyncs(Rule):
    """ACC402: the microbatch that ends each group runs under ``no_sync``: replicas never all-reduce.

    Read off the simulated runs (:mod:`accumlint.checks.group_traces`): a group whose last
    backward, and the forward of its microbatch, run under a ``no_sync()`` context, whatever
    chooses it (an unconditional ``with``, a conditional expression, an ``if`` that re-binds a
    null context); reported where the context is chosen. Exempt: a run that all-reduces the
    gradients by hand.
    """

    code = "ACC402"

    def check(self, model: FileModel) -> Iterator[Hit]:
        yield from trace_hits(model, self.code)


class NoSyncNoopUnderFsdp2(Rule):
    """ACC406: a DDP-only sync switch applied to a module sharded with FSDP2 ``fully_shard``.

    Flags ``model.no_sync()``, ``getattr(model, "no_sync", ...)`` and ``model.require_backward_grad_sync
    = ...`` where the same function (or class, for ``self.`` attributes) calls FSDP2's
    ``fully_shard(model)`` (or torchtune's ``training.shard_model(model, ...)``, which calls it:
    ``frameworks.FSDP2_SHARDS``). Exempt: FSDP2's ``set_requires_gradient_sync``, FSDP1's
    ``FullyShardedDataParallel.no_sync()``, and a module sharded in another function (the names
    may not be the same object).
    """

    code = "ACC406"
    #: FSDP2's ``fully_shard`` (or a helper that applies it) is called: it makes the sharded module
    gate = RuleGate(markers=tuple(sorted(name.encode() for name in fw.FSDP2_SHARD_NAMES)),
                facts=lambda facts: facts.calls(fw.FSDP2_SHARD_NAMES))

    def check(self, model: FileModel) -> Iterator[Hit]:
        for switch in ddp_switches_on_fsdp2(model):
            if switch.how == "flag":
                effect = ("FSDP2 never reads `require_backward_grad_sync`, so setting it changes nothing: every "
                          "microbatch's backward still reduce-scatters the gradients")
            elif switch.how == "getattr":
                effect = ("an FSDP2 module has no `no_sync`, so the fallback is entered and nothing is skipped: "
                          "every microbatch's backward still reduce-scatters the gradients")
            else:
                effect = ("an FSDP2 module has no `no_sync()` (AttributeError), and code that guards the call "
                          "falls back to syncing every microbatch")
            yield Hit(
                switch.node,
                f"`{switch.model}` is sharded with FSDP2 `fully_shard`: {effect}",
                f"call `{switch.model}.set_requires_gradient_sync(False)` before the group's non-final backwards "
                f"and `{switch.model}.set_requires_gradient_sync(True)` before its last one",
            )


class FsdpOffloadAccumulationOutsideNoSync(Rule):
    """ACC407: FSDP1 with CPU parameter offload, and a group's non-final backwards outside ``no_sync()``.

    Read off the simulated runs (:mod:`accumlint.checks.group_traces`): a group whose backward
    before the last runs with sync on, on a microbatch forwarded through a ``FullyShardedDataParallel``
    the run built with ``cpu_offload=CPUOffload(offload_params=True)``, wherever it was built (a helper,
    a trainer's ``__init__``, another module of the project). Silent where the offload setting is a
    value the run does not know, for FSDP2 ``fully_shard`` (with ``CPUOffloadPolicy`` it adds each reduced gradient
    to the CPU one: torch 2.13.0 ``_fully_shard/_fsdp_collectives.py`` ``foreach_reduce``), and
    without accumulation (A = 1).
    """

    code = "ACC407"

    def check(self, model: FileModel) -> Iterator[Hit]:
        yield from trace_hits(model, self.code)
