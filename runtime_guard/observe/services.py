"""What every observer calls: the entry guard, recording an event, gradient fingerprints around the user's
calls, the replay snapshot, containing the guard's failures and the device memory figures.

:class:`ProbeServices` works on the probe's :class:`~runtime_guard.observe.state.ProbeState`; the one thing it
cannot do itself, detaching, it is given by the probe (a due auto-detach runs at the next entry on the loop's
thread).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch

from runtime_guard.contain import contained_hook, describe
from runtime_guard.fingerprint import GradState, bit_checksums, bit_samples, grad_state, rescale_factor, versions
from runtime_guard.observe import eager
from runtime_guard.observe.state import ProbeState
from runtime_guard.trace import ObservedEvent
from runtime_guard.user_frames import warnings_at_caller


class ProbeServices:
    """The shared services of the probe's observers.

    Args:
        state: the probe's state.
        detach: ``detach(clean)`` removes everything the probe installed and builds its report.
    """

    def __init__(self, state: ProbeState, detach: Callable[[bool], None]) -> None:
        self.state = state
        self.detach = detach
        self._last_grads: GradState | None = None  # the last fingerprint, reused while the grads are unchanged
        # the parameters' versions and sampled bits at the last checksum, and those checksums
        self._param_key: tuple[Any, ...] = ()
        self._param_checksums: tuple[int, ...] | None = None

    # -- entry and events ---------------------------------------------------------------
    def entry(self) -> bool:
        """Called first by every observer: False when nothing must be recorded. Runs a due
        auto-detach here, on the user's thread (never inside the autograd engine)."""
        s = self.state
        if not s.attached or not s.hooks_installed:
            return False
        if s.done and threading.get_ident() == s.thread:
            self.detach(True)
            return False
        return not s.done

    def event(self, kind: str, **detail: Any) -> ObservedEvent:
        """Record an event of ``kind`` in the open group (before the first forward: the record's list)."""
        s = self.state
        group = s.group
        microbatch = group.microbatches[-1].index if group is not None and group.microbatches else None
        event = ObservedEvent(s.seq, kind, group.index if group is not None else -1, microbatch, detail)
        s.seq += 1
        (group.events if group is not None else s.record.before_first_forward).append(event)
        return event

    # -- the guard's failures -----------------------------------------------------------
    def hook(self, where: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` as a hook body: kept out of ``torch.compile`` and its failures contained
        (:meth:`hook_failed`), never raised into the loop."""
        return eager(contained_hook(self.hook_failed, where, fn))

    def hook_failed(self, where: str, error: Exception) -> None:
        """The guard's own code at ``where`` raised ``error`` (contained): the probe stops observing (it
        detaches at its next call on the loop's thread) and its card says every check is "not observed"
        with the reason, instead of judging a trace with a hole in it."""
        self.state.record.guard_failures.append(f"the guard's {where} failed ({describe(error)})")
        self.state.done = True

    # -- gradients ----------------------------------------------------------------------
    def grads(self, measure: bool = False) -> GradState:
        """The grads' fingerprint, reused while they are unchanged (same tensors, version counters
        and sampled bits); ``measure`` also takes the exact values (a pass over the grads)."""
        params = self.state.params
        last = self._last_grads
        if last is None or not last.still_current(params):
            last = self._last_grads = grad_state(params)
        return last.measure(params) if measure else last

    def around_grads(self, original: Callable[..., Any], args: tuple,
                     kwargs: dict) -> tuple[GradState, Any, GradState]:
        """Run the user's call ``original`` (a reset, a clip) between two fingerprints of the grads,
        its warnings at the caller's line: (before, its result, after)."""
        self.take_snapshot()
        before = self.grads()
        with warnings_at_caller():
            result = original(*args, **kwargs)
        return before, result, self.grads()

    def take_snapshot(self) -> None:
        """Copy the grads of the last backward, before a call that may change them (reset, clip,
        unscale, update); a forward in between drops the pending copy (more backwards follow)."""
        s = self.state
        if s.snapshot_pending is None:
            return
        grads, scale = s.snapshot_pending
        s.snapshot_pending = None
        if grads.still_current(s.params):
            s.snapshot = ([None if p.grad is None else p.grad.detach().clone() for p in s.params], scale)
        else:
            s.snapshot = ("not compared: the gradients were changed after the last backward by an operation "
                          "the probe did not see")

    def note_unseen_change(self, now: GradState) -> None:
        """At the entry of a clip, an unscale or an update: a change of the grads since the last backward or
        the last observed clip or unscale that no observed call made (``p.grad.div_(A)`` before a clip) is one
        of the group's ``rescaled_by``, kept apart from what the observed call then does to the grads."""
        expected = self.state.grads_expected
        if expected is not None and not expected.same_values(now):
            self.state.rescales.append(rescale_factor(expected, now, self.state.params))

    def lrs(self) -> list[float]:
        """The optimizer's learning rate per parameter group, now."""
        return [float(g["lr"]) for g in self.state.optimizer.param_groups]

    # -- parameters and memory ----------------------------------------------------------
    def param_checksums(self) -> tuple[tuple[int, ...] | None, tuple[Any, ...]]:
        """The parameters' checksums (``None`` at the probe's first microbatch) and their sampled bits.

        Parameters are only checksummed after a write: a version counter bumped, or sampled bits changed
        (writes through .data bypass the counter). The first microbatch (where the zero-code mode attaches,
        inside the script's first forward) takes only the samples; the next call fills its checksums in
        when neither versions nor samples changed since, else they stay ``None``."""
        s = self.state
        current = (versions(s.params), bit_samples(s.params))
        if not self._param_key:
            self._param_key = current
            return None, current[1]
        if current != self._param_key or self._param_checksums is None:
            unchanged = current == self._param_key
            self._param_key = current
            self._param_checksums = bit_checksums(s.params)
            if s.params_unsummed is not None and unchanged:
                s.params_unsummed.params_at_forward = self._param_checksums
            s.params_unsummed = None
        return self._param_checksums, current[1]

    def device_memory(self) -> dict[str, int]:
        """Bytes allocated now on each CUDA device that holds probed parameters (``{}`` without CUDA)."""
        if not torch.cuda.is_available():
            return {}
        devices = {p.device for p in self.state.params if p.device.type == "cuda"}
        return {str(d): torch.cuda.memory_allocated(d) for d in sorted(devices, key=str)}

    def device_peaks(self, reset: bool) -> dict[str, int]:
        """Peak bytes allocated on each CUDA device that holds probed parameters since the last ``reset``
        (``{}`` without CUDA); ``reset`` starts a new peak."""
        if not torch.cuda.is_available():
            return {}
        peaks = {}
        for d in sorted({p.device for p in self.state.params if p.device.type == "cuda"}, key=str):
            peaks[str(d)] = torch.cuda.max_memory_allocated(d)
            if reset:
                torch.cuda.reset_peak_memory_stats(d)
        return peaks
