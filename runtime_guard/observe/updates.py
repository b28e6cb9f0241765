"""Optimizer update attempts: the step pre/post hooks (also ``step(closure)``), closing a group at
its update and, with ``normalization="replay"``, replaying it against the references."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from runtime_guard.contain import call_through
from runtime_guard.events import UPDATE
from runtime_guard.fingerprint import GradState
from runtime_guard.observe import Observer, figures
from runtime_guard.observe.copies import WeightCopies
from runtime_guard.observe.loggers import LoggersObserver
from runtime_guard.observe.replicas import ReplicaObserver
from runtime_guard.observe.services import ProbeServices
from runtime_guard.observe.state import ProbeState
from runtime_guard.replay import replay_group
from runtime_guard.trace import ObservedEvent, ObservedGroup


class UpdateObserver(Observer):
    """Optimizer update attempts: the step pre/post hooks; an attempt closes the open group."""

    def __init__(self, state: ProbeState, services: ProbeServices, replicas: ReplicaObserver, copies: WeightCopies,
                 loggers: LoggersObserver) -> None:
        super().__init__(state, services)
        self.replicas = replicas
        self.copies = copies
        self.loggers = loggers

    def close_group(self, event: ObservedEvent, grads: GradState) -> None:
        """Close the open group at its update attempt ``event`` (an optimizer step, or ``scaler.step``) with
        ``grads``, the gradients it updates from; with ``normalization="replay"`` replay it. A group already
        closed (the optimizer step inside ``scaler.step``) stays as it is."""
        s = self.state
        group = s.group
        if group is None or group.closed:
            return
        group.boundary_seq = event.seq
        group.updated_at = figures.clock()
        group.attempted = True
        group.grads_at_update = grads
        self.services.note_unseen_change(grads)
        group.rescaled_by, s.rescales = s.rescales, []
        group.device_peak_bytes = self.services.device_peaks(reset=True)
        if self.replicas.compares_replicas():
            checksums = self.replicas.gather(grads.checksums,
                                             f"replica gradient checksums at group {group.index}'s update")
            if checksums is not None:
                group.replicas_equal = all(c == checksums[0] for c in checksums)
        if s.scheduler is not None:
            group.lr_before = self.services.lrs()
        if s.normalization == "replay" and not group.tail and group.microbatches:
            self.services.take_snapshot()
            if isinstance(s.snapshot, str):
                group.replay, s.snapshot = s.snapshot, None
            elif s.snapshot is not None:
                self._replay(group)

    def _replay(self, group: ObservedGroup) -> None:
        s = self.state
        dp = s.record.data_parallel
        module = s.model.module if s.record.ddp else s.model
        captured = [s.captured.pop(mb.serial) for mb in group.microbatches if mb.serial in s.captured]
        if s.record.bn_training:
            group.replay = "not comparable: BatchNorm in train mode computes statistics per forward (ACC901)"
            return
        if s.record.fsdp2:
            group.replay = "not compared: the replay does not run FSDP2 (sharded parameters) modules"
            return
        if s.xrank is not None and s.xrank.failure is not None:
            group.replay = "not compared: the ranks stopped answering the guard's gathers (card notes)"
            return
        if any(mb.passes > 1 for mb in group.microbatches):
            group.replay = "not compared: the replay runs each microbatch's first pass only (several passes each)"
            return
        s.replaying = True
        s.tracker.active = False
        try:
            group.replay = replay_group(
                module, s.params, captured, *s.snapshot, s.labels, s.ignore_index,
                replicas=(dp.size or 1) if dp is not None else 1, group=dp.group if dp is not None else None,
            )
        finally:
            s.replaying = False
            s.tracker.active = True
            s.snapshot = None

    def on_step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        """The optimizer's step pre-hook: an update attempt, recorded now or, for ``step(closure)``, when the
        closure returns."""
        if not self.services.entry():
            return None
        self.state.step_begun = True  # cleared by its post-hook: a post-hook without it began before the hooks
        # torch 2.13 optim/optimizer.py profile_hook_step: ``args`` starts with the optimizer itself
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
        if callable(closure):
            # optimizer.step(closure): torch runs the pre-hooks before the step body calls the closure, and
            # the closure may run the forward and backward of the group's last microbatch (Lightning's
            # automatic optimization: lightning 2.6.6 plugins/precision/precision.py optimizer_step). The
            # update attempt is recorded when the closure returns, right before the parameters change.
            wrapped = self._closure_wrapper(closure)
            if "closure" in kwargs:
                return args, {**kwargs, "closure": wrapped}
            return (args[0], wrapped, *args[2:]), kwargs
        self._record_step()
        return None

    def _closure_wrapper(self, closure: Callable[..., Any]) -> Callable[..., Any]:
        calls = 0

        def observe(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            result = call(*args, **kwargs)
            if calls == 1 and self.services.entry():  # a re-evaluating optimizer (LBFGS) calls it again: one attempt
                self._record_step()
            return result

        @functools.wraps(closure)
        def run_closure(*args: Any, **kwargs: Any) -> Any:
            return call_through(self.services.hook_failed, "optimizer step closure wrapper", closure,
                                lambda call: observe(call, *args, **kwargs), args, kwargs)

        return run_closure

    def _record_step(self) -> None:
        s = self.state
        self.loggers.hook_loggers()  # a logger imported since the last update (ACC903)
        group = s.group
        self.copies.check_shadows(inside=group is not None and not group.closed and bool(group.microbatches))
        grads = self.services.grads(measure=self.replicas.compares_replicas())
        event = self.services.event(UPDATE, inside_scaler_step=s.scaler_step_depth > 0)
        if s.scaler_step_depth == 0:
            self.close_group(event, grads)

    def on_step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The update was applied. A post-hook with no pre-hook before it belongs to an
        ``optimizer.step(closure)`` that began before the probe's hooks: the probe attached inside its
        closure (the zero-code mode attaches at the first forward; Lightning and Fabric run it in the
        closure). torch 2.13 ``optim/optimizer.py`` ``profile_hook_step`` reads the post-hooks after the step
        body returned, so this hook runs for that step: its update attempt is recorded here, after the
        closure's microbatch and before the next call of the loop."""
        s = self.state
        if s.step_begun:
            s.step_begun = False
        elif self.services.entry() and s.group is not None and not s.group.closed and s.group.microbatches:
            s.record.notes.append(f"an optimizer step begun before the probe's hooks (the probe attached inside its "
                                     f"closure) was seen at its end: group {s.group.index}'s update")
            self._record_step()
        if s.attached and s.group is not None and s.group.closed:
            s.group.applied += 1
