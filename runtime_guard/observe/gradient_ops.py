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
from runtime_guard.observe import Observer
from runtime_guard.observe.replicas import ReplicaObserver
from runtime_guard.observe.services import ProbeServices
from runtime_guard.observe.state import ProbeState
from runtime_guard.observe.updates import UpdateObserver


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


class GradientOpsObserver(Observer):
    """Clips and the GradScaler: a clip closes no group, ``scaler.step`` closes it through ``updates``."""

    def __init__(self, state: ProbeState, services: ProbeServices, updates: UpdateObserver,
                 replicas: ReplicaObserver) -> None:
        super().__init__(state, services)
        self.updates = updates
        self.replicas = replicas

    def observe_clip(self, original: UserCall, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                      name: str) -> Any:
        """A call of ``torch.nn.utils.<name>`` on the loop's thread (``undo.patch_function``, through
        :func:`~runtime_guard.contain.call_through`): a clip event when it clips some of the probed
        model's parameters; a clip of another model's (a GAN's other network) is not one of this model's
        and is only counted in the card's notes."""
        s = self.state
        if not self.services.entry():
            return original(*args, **kwargs)
        args, kwargs, params = _clipped_parameters(args, kwargs)
        original.arguments = (args, kwargs)  # a generator was read: should the guard fail, torch gets the list
        if params and not any(id(p) in s.param_ids for p in params):
            s.other_model_calls[name] += 1
            return original(*args, **kwargs)
        self.services.note_unseen_change(self.services.grads())
        before, result, after = self.services.around_grads(original, args, kwargs)
        s.grads_expected = after
        self.services.event(CLIP, function=name, changed=not before.same_values(after))
        return result

    def scale_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The wrapper of ``scaler.scale``: the scale the microbatch's loss is multiplied by."""
        s = self.state

        @functools.wraps(original)
        def scale(outputs: Any) -> Any:
            result = original(outputs)
            if self.services.entry():
                value = float(s.scaler.get_scale())
                if s.mb is not None:
                    s.mb.scale = value
                self.services.event(SCALE, scale=value)
            return result

        return scale

    def _other_model(self, optimizer: Any, call: str) -> bool:
        """``optimizer`` updates none of the probed parameters (a GAN's other optimizer on a shared
        GradScaler): its ``call`` is not the probed model's (counted for the card's notes). An optimizer
        without readable ``param_groups`` is taken as the probed model's, as before."""
        groups = getattr(optimizer, "param_groups", None)
        if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) for g in groups):
            return False
        if any(id(p) in self.state.param_ids for g in groups for p in g.get("params", ())):
            return False
        self.state.other_model_calls[call] += 1
        return True

    def unscale_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The wrapper of ``scaler.unscale_``: an unscale of the probed optimizer's grads, fingerprinted after."""
        s = self.state

        @functools.wraps(original)
        def unscale_(optimizer: Any) -> Any:
            if not self.services.entry() or self._other_model(optimizer, "scaler.unscale_"):
                return original(optimizer)
            self.services.take_snapshot()
            self.services.note_unseen_change(self.services.grads())
            self.services.event(UNSCALE, inside_scaler_step=s.scaler_step_depth > 0, scale=float(s.scaler.get_scale()))
            result = original(optimizer)
            s.grads_expected = self.services.grads()
            return result

        return unscale_

    def scaler_step_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The wrapper of ``scaler.step``: the update attempt closes the group (its optimizer step may be
        skipped on inf/NaN; ``found_inf`` says so)."""
        s = self.state

        @functools.wraps(original)
        def step(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if not self.services.entry():
                return original(optimizer, *args, **kwargs)
            if self._other_model(optimizer, "scaler.step"):
                s.other_steps += 1  # the scaler's next update follows a step, not the probed optimizer's
                return original(optimizer, *args, **kwargs)
            event = self.services.event(SCALER_STEP, scale=float(s.scaler.get_scale()))
            self.updates.close_group(event, self.services.grads(measure=self.replicas.compares_replicas()))
            group = s.group
            s.scaler_step_depth += 1
            try:
                return original(optimizer, *args, **kwargs)
            finally:
                s.scaler_step_depth -= 1
                state = getattr(s.scaler, "_per_optimizer_states", {}).get(id(optimizer), {})
                found = state.get("found_inf_per_device", {})
                if group is not None and found:
                    group.found_inf = bool(sum(float(v) for v in found.values()))

        return step

    def scaler_update_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The wrapper of ``scaler.update``: the scale before and after, and whether torch raised."""
        s = self.state

        @functools.wraps(original)
        def update(*args: Any, **kwargs: Any) -> Any:
            if not self.services.entry():
                return original(*args, **kwargs)
            before = float(s.scaler.get_scale())
            raised = True
            try:
                result = original(*args, **kwargs)
                raised = False
            finally:  # torch raises when no scaler.step() recorded inf checks since the last update
                self.services.event(SCALER_UPDATE, scale_before=before, scale_after=float(s.scaler.get_scale()),
                            raised=raised, enabled=bool(getattr(s.scaler, "is_enabled", lambda: True)()),
                            other_steps=s.other_steps)
                s.other_steps = 0
            return result

        return update
