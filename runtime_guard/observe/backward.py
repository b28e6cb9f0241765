"""Backward hooks: the end of each microbatch's backward (after DDP's own callbacks), the gradient
fingerprint it left, and the weight a backward gave its mean-reduced loss."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from runtime_guard import frameworks
from runtime_guard.contain import contained_hook
from runtime_guard.events import BACKWARD
from runtime_guard.observe import Observer
from runtime_guard.trace import Microbatch

#: Backward nodes of a loss reduced by a mean (``reduction="mean"``; ``MeanBackward0`` is ``.mean()`` over
#: all elements): the gradient reaching them is the weight the loop gave that microbatch's mean loss.
_MEAN_LOSS_NODES = frozenset({
    "MseLossBackward0", "L1LossBackward0", "SmoothL1LossBackward0", "HuberLossBackward0", "NllLossBackward0",
    "BinaryCrossEntropyBackward0", "BinaryCrossEntropyWithLogitsBackward0", "KlDivBackward0",
})


_MEAN_REDUCTION = 1  # at::Reduction::Mean


def _mean_loss_node(tensors: Any) -> Any:
    """The backward node of the mean-reduced loss under a scalar root made of constant
    multiplications and divisions (``loss / A``, ``scaler.scale(loss * w)``), or ``None``."""
    if not isinstance(tensors, torch.Tensor) or tensors.numel() != 1 or tensors.grad_fn is None:
        return None
    node = tensors.grad_fn
    for _ in range(16):
        name = type(node).__name__
        if name == "MeanBackward0" or (name in _MEAN_LOSS_NODES
                                       and getattr(node, "_saved_reduction", None) == _MEAN_REDUCTION):
            return node
        if name not in ("MulBackward0", "DivBackward0") or not node.next_functions:
            return None
        node = node.next_functions[0][0]
        if node is None:
            return None
    return None



class BackwardObserver(Observer):
    """Backward hooks: the end of each microbatch's backward and the weight of its mean-reduced loss."""

    def on_output_grad(self, mb: Microbatch, grad: torch.Tensor) -> None:
        """The backward reached microbatch ``mb``'s output: a backward starts (FSDP2 with sync off runs no
        parameter hook)."""
        mb.output_reached = True
        self.on_param_grad(grad)

    def on_param_grad(self, param: torch.Tensor) -> None:
        """A probed parameter's gradient was accumulated: the first in a backward queues the end-of-backward
        callback (DDP's sync state read now)."""
        s = self.state
        if s.replaying or not s.attached or s.done or s.in_backward:
            return
        s.in_backward = True
        mb = s.mb
        if mb is not None and s.record.ddp:
            mb.sync_in_backward = frameworks.ddp_syncs(s.model)
        queue = torch.autograd.Variable._execution_engine.queue_callback
        queue(contained_hook(self.services.hook_failed, "end-of-backward callback", self._on_backward_queued))

    def _on_backward_queued(self) -> None:
        # DDP copies the all-reduced buckets into .grad in its own end-of-backward callback,
        # queued later than ours: re-queue so that we read .grad after it (design notes §1).
        queue = torch.autograd.Variable._execution_engine.queue_callback
        queue(contained_hook(self.services.hook_failed, "end-of-backward callback", self._on_backward_end))

    def _on_backward_end(self) -> None:
        s = self.state
        s.in_backward = False
        mb, group = s.mb, s.group
        if not s.attached or s.done or mb is None or group is None:
            return
        retained = s.tracker.retained_after_backward()
        mb.last_backward_serial = s.tracker.backward_serial
        s.tracker.backward_serial += 1
        grads = self.services.grads()
        if mb.backwards == 0:
            mb.grads_replaced_before_backward = mb.grads_at_forward.replaced_in(s.params)
        mb.backwards += 1
        mb.grads_after_backward = grads
        s.grads_expected, s.rescales = grads, []
        # the last backward decides: an earlier retain_graph=True whose graph a later backward of the same
        # microbatch went through again is a genuine multi-backward pattern (ACC202's exemption)
        mb.retained_saved_bytes = retained
        mb.saved_peak_bytes = max(mb.saved_peak_bytes, s.tracker.peak_bytes)
        group.saved_peak_bytes = max(group.saved_peak_bytes, s.tracker.peak_bytes)
        peaks = self.services.device_peaks(reset=False)
        mb.device_peak_bytes = peaks
        if s.normalization == "replay":  # copied only if this backward turns out to be the group's last
            s.snapshot, s.snapshot_pending = None, (grads, mb.scale or 1.0)
        if s.comm is not None:
            mb.allreduce_buckets = s.comm.buckets - s.comm_start
        self.services.event(BACKWARD, retained_saved_bytes=retained)
        if group.tail:
            s.done = True  # detach at the next call on the user's thread

    def observe_backward(self, original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``torch.autograd.backward`` (``Tensor.backward`` calls it) on the loop's thread, observed
        (``undo.patch_function``) when the probe infers the normalization or sits at an epoch end: when
        the root is a scalar loss that is a mean-reduced loss times constants, a pre-hook on the mean node
        reads dL/d(mean loss), i.e. the weight the loop gave this microbatch. It is the normalization's
        evidence where the output has no softmax cross-entropy logits (MSE, a contrastive cross entropy
        over a similarity matrix, a model that returns its loss), and the partial group's weight."""
        mb = self.state.mb
        tensors = args[0] if args else kwargs.get("tensors")
        node = _mean_loss_node(tensors) if self.services.entry() and mb is not None else None
        if node is None:
            return original(*args, **kwargs)

        terms: list[float] = []

        def seen(grad_outputs: tuple[torch.Tensor | None, ...]) -> None:
            grad = grad_outputs[0] if grad_outputs else None
            if grad is not None and grad.numel() == 1:
                terms.append(float(grad) / (mb.scale or 1.0))

        backwards = mb.backwards
        handle = node.register_prehook(self.services.hook("loss weight hook", seen))
        try:
            return original(*args, **kwargs)
        finally:
            handle.remove()
            if mb.backwards > backwards:  # only a backward that reached the probed model weighs its microbatch
                mb.loss_terms += terms
                mb.loss_weight = (mb.loss_weight or 0.0) + sum(terms)
                mb.loss_weights += len(terms)
