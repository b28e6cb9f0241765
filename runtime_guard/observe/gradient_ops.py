"""Operations on the accumulated gradients: the clip functions (patched process-wide while
attached; only the loop thread's calls on the probed parameters are the model's clips) and the
GradScaler's ``scale``, ``unscale_``, ``step`` and ``update``."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable
from typing import Any

import torch

from runtime_guard.contain import UserCall
from runtime_guard.events import CLIP, SCALE, SCALER_STEP, SCALER_UPDATE, UNSCALE
from runtime_guard.fingerprint import GradState, rescale_factor


def _clipped_parameters(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[tuple, dict, list[Any] | None]:
    """The clip call's arguments with its ``parameters`` (first argument) read into a list, and that
    list (``None``: no or no iterable ``parameters`` argument, torch raises its own error). An iterator
    is consumed here, so torch gets the list instead, or a fresh generator over it when it was a
    generator (torch warns on an empty generator, torch 2.13 nn/utils/clip_grad.py)."""
    in_kwargs = "parameters" in kwargs
    if not args and not in_kwargs:
        return args, kwargs, None
    given = kwargs["parameters"] if in_kwargs else args[0]
    if isinstance(given, torch.Tensor):
        return args, kwargs, [given]
    if not isinstance(given, Iterable):
        return args, kwargs, None
    params = list(given)
    passed = (p for p in params) if isinstance(given, types.GeneratorType) else params
    if in_kwargs:
        return args, {**kwargs, "parameters": passed}, params
    return (passed, *args[1:]), kwargs, params


class GradientOpsObserver:
    """Mixed into :class:`runtime_guard.probe.Probe` (clips and the GradScaler); works on its state."""

    def _observe_clip(self, original: UserCall, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                      name: str) -> Any:
        """A call of ``torch.nn.utils.<name>`` on the loop's thread (``undo.patch_function``, through
        :func:`~runtime_guard.contain.call_through`): a clip event when it clips some of the probed
        model's parameters; a clip of another model's (a GAN's other network) is not one of this model's
        and is only counted in the card's notes."""
        if not self._entry():
            return original(*args, **kwargs)
        args, kwargs, params = _clipped_parameters(args, kwargs)
        original.arguments = (args, kwargs)  # a generator was read: should the guard fail, torch gets the list
        if params and not any(id(p) in self._param_ids for p in params):
            self._other_model_calls[name] += 1
            return original(*args, **kwargs)
        self._note_unseen_change(self._grads())
        before, result, after = self._around_grads(original, args, kwargs)
        self._grads_expected = after
        self._event(CLIP, function=name, changed=not before.same_values(after))
        return result

    def _note_unseen_change(self, now: GradState) -> None:
        """At the entry of a clip, an unscale or an update: a change of the grads since the last backward or
        the last observed clip or unscale that no observed call made (``p.grad.div_(A)`` before a clip) is one
        of the group's ``rescaled_by``, kept apart from what the observed call then does to the grads."""
        expected = self._grads_expected
        if expected is not None and not expected.same_values(now):
            self._rescales.append(rescale_factor(expected, now, self.params))

    def _scale_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def scale(outputs: Any) -> Any:
            result = original(outputs)
            if self._entry():
                value = float(self.scaler.get_scale())
                if self._mb is not None:
                    self._mb.scale = value
                self._event(SCALE, scale=value)
            return result

        return scale

    def _other_model(self, optimizer: Any, call: str) -> bool:
        """``optimizer`` updates none of the probed parameters (a GAN's other optimizer on a shared
        GradScaler): its ``call`` is not the probed model's (counted for the card's notes). An optimizer
        without readable ``param_groups`` is taken as the probed model's, as before."""
        groups = getattr(optimizer, "param_groups", None)
        if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
            return False
        if any(id(p) in self._param_ids for g in groups for p in g.get("params", ())):
            return False
        self._other_model_calls[call] += 1
        return True

    def _unscale_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def unscale_(optimizer: Any) -> Any:
            if not self._entry() or self._other_model(optimizer, "scaler.unscale_"):
                return original(optimizer)
            self._take_snapshot()
            self._note_unseen_change(self._grads())
            self._event(UNSCALE, inside_scaler_step=self._scaler_step_depth > 0, scale=float(self.scaler.get_scale()))
            result = original(optimizer)
            self._grads_expected = self._grads()
            return result

        return unscale_

    def _scaler_step_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def step(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._entry():
                return original(optimizer, *args, **kwargs)
            if self._other_model(optimizer, "scaler.step"):
                self._other_steps += 1  # the scaler's next update follows a step, not the probed optimizer's
                return original(optimizer, *args, **kwargs)
            event = self._event(SCALER_STEP, scale=float(self.scaler.get_scale()))
            self._close_group(event, self._grads(measure=self._compares_replicas()))
            group = self._group
            self._scaler_step_depth += 1
            try:
                return original(optimizer, *args, **kwargs)
            finally:
                self._scaler_step_depth -= 1
                state = getattr(self.scaler, "_per_optimizer_states", {}).get(id(optimizer), {})
                found = state.get("found_inf_per_device", {})
                if group is not None and found:
                    group.found_inf = bool(sum(float(v) for v in found.values()))

        return step

    def _scaler_update_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def update(*args: Any, **kwargs: Any) -> Any:
            if not self._entry():
                return original(*args, **kwargs)
            before = float(self.scaler.get_scale())
            raised = True
            try:
                result = original(*args, **kwargs)
                raised = False
            finally:  # torch raises when no scaler.step() recorded inf checks since the last update
                self._event(SCALER_UPDATE, scale_before=before, scale_after=float(self.scaler.get_scale()),
                            raised=raised, enabled=bool(getattr(self.scaler, "is_enabled", lambda: True)()),
                            other_steps=self._other_steps)
                self._other_steps = 0
            return result

        return update
