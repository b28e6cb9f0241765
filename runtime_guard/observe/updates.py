"""Optimizer update attempts: the step pre/post hooks (also ``step(closure)``), closing a group at
its update and, with ``normalization="replay"``, replaying it against the references."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from runtime_guard.contain import call_through
from runtime_guard.events import UPDATE
from runtime_guard.fingerprint import GradState
from runtime_guard.observe import figures
from runtime_guard.replay import replay_group
from runtime_guard.trace import ObservedEvent, ObservedGroup


class UpdateObserver:
    """Mixed into :class:`runtime_guard.probe.Probe` (optimizer update attempts); works on the probe's state."""

    def _close_group(self, event: ObservedEvent, grads: GradState) -> None:
        group = self._group
        if group is None or group.closed:
            return
        group.boundary_seq = event.seq
        group.updated_at = figures.clock()
        group.attempted = True
        group.grads_at_update = grads
        self._note_unseen_change(grads)
        group.rescaled_by, self._rescales = self._rescales, []
        group.device_peak_bytes = self._device_peaks(reset=True)
        if self._compares_replicas():
            checksums = self._gather(grads.checksums, f"replica gradient checksums at group {group.index}'s update")
            if checksums is not None:
                group.replicas_equal = all(c == checksums[0] for c in checksums)
        if self.scheduler is not None:
            group.lr_before = self._lrs()
        if self.normalization == "replay" and not group.tail and group.microbatches:
            self._take_snapshot()
            if isinstance(self._snapshot, str):
                group.replay, self._snapshot = self._snapshot, None
            elif self._snapshot is not None:
                self._replay(group)

    def _take_snapshot(self) -> None:
        """Copy the grads of the last backward, before a call that may change them (reset, clip,
        unscale, update); a forward in between drops the pending copy (more backwards follow)."""
        if self._snapshot_pending is None:
            return
        state, scale = self._snapshot_pending
        self._snapshot_pending = None
        if state.still_current(self.params):
            self._snapshot = ([None if p.grad is None else p.grad.detach().clone() for p in self.params], scale)
        else:
            self._snapshot = ("not compared: the gradients were changed after the last backward by an operation "
                              "the probe did not see")

    def _replay(self, group: ObservedGroup) -> None:
        dp = self.record.data_parallel
        module = self.model.module if self.record.ddp else self.model
        captured = [self._captured.pop(mb.serial) for mb in group.microbatches if mb.serial in self._captured]
        if self.record.bn_training:
            group.replay = "not comparable: BatchNorm in train mode computes statistics per forward (ACC901)"
            return
        if self.record.fsdp2:
            group.replay = "not compared: the replay does not run FSDP2 (sharded parameters) modules"
            return
        if self._xrank is not None and self._xrank.failure is not None:
            group.replay = "not compared: the ranks stopped answering the guard's gathers (card notes)"
            return
        if any(mb.passes > 1 for mb in group.microbatches):
            group.replay = "not compared: the replay runs each microbatch's first pass only (several passes each)"
            return
        self._replaying = True
        self._tracker.active = False
        try:
            group.replay = replay_group(
                module, self.params, captured, *self._snapshot, self.labels, self.ignore_index,
                replicas=(dp.size or 1) if dp is not None else 1, group=dp.group if dp is not None else None,
            )
        finally:
            self._replaying = False
            self._tracker.active = True
            self._snapshot = None

    def _lrs(self) -> list[float]:
        return [float(g["lr"]) for g in self.optimizer.param_groups]

    def _on_step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> tuple[Any, Any] | None:
        if not self._entry():
            return None
        self._step_begun = True  # cleared by its post-hook: a post-hook without it began before the hooks
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
            if calls == 1 and self._entry():  # a re-evaluating optimizer (LBFGS) calls it again: one attempt
                self._record_step()
            return result

        @functools.wraps(closure)
        def run_closure(*args: Any, **kwargs: Any) -> Any:
            return call_through(self._hook_failed, "optimizer step closure wrapper", closure,
                                lambda call: observe(call, *args, **kwargs), args, kwargs)

        return run_closure

    def _record_step(self) -> None:
        self._hook_loggers()  # a logger imported since the last update (ACC903)
        group = self._group
        self._check_shadows(inside=group is not None and not group.closed and bool(group.microbatches))
        grads = self._grads(measure=self._compares_replicas())
        event = self._event(UPDATE, inside_scaler_step=self._scaler_step_depth > 0)
        if self._scaler_step_depth == 0:
            self._close_group(event, grads)

    def _on_step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The update was applied. A post-hook with no pre-hook before it belongs to an
        ``optimizer.step(closure)`` that began before the probe's hooks: the probe attached inside its
        closure (the zero-code mode attaches at the first forward; Lightning and Fabric run it in the
        closure). torch 2.13 ``optim/optimizer.py`` ``profile_hook_step`` reads the post-hooks after the step
        body returned, so this hook runs for that step: its update attempt is recorded here, after the
        closure's microbatch and before the next call of the loop."""
        if self._step_begun:
            self._step_begun = False
        elif self._entry() and self._group is not None and not self._group.closed and self._group.microbatches:
            self.record.notes.append(f"an optimizer step begun before the probe's hooks (the probe attached inside its "
                                     f"closure) was seen at its end: group {self._group.index}'s update")
            self._record_step()
        if self._attached and self._group is not None and self._group.closed:
            self._group.applied += 1
