"""``GuardCallback``: the runtime guard inside a Hugging Face ``Trainer.train``.

::

    from runtime_guard.integrations.transformers import GuardCallback

    guard = GuardCallback(groups=2, json_path="card.json")
    trainer = transformers.Trainer(model=model, args=args, train_dataset=ds, callbacks=[guard])
    trainer.train()
    print(guard.report)

The probe attaches at ``on_train_begin`` with the callback's ``model``, the torch optimizer
inside the Trainer's ``AcceleratedOptimizer``, ``lr_scheduler``, the optimizer's GradScaler (fp16)
and A = ``args.gradient_accumulation_steps``; it detaches once the probed groups and the next
microbatch were seen (at ``on_substep_end`` / ``on_step_end``) or at ``on_train_end``.

The contract it relies on (transformers 5.24.0, read in the installed ``transformers/trainer.py``):

* the Trainer owns the loop and leaves Accelerate's A at 1: it groups the batches itself
  (``_run_epoch``: ``get_batch_samples`` per update, fewer for the epoch's last update), sets
  ``gradient_state._set_sync_gradients`` per microbatch and calls ``self.optimizer.step()``,
  ``self.lr_scheduler.step()`` (unless the step was skipped) and ``model.zero_grad()`` once per
  update. The probe is given the torch optimizer inside the ``AcceleratedOptimizer``, so group
  structure findings keep their plain codes (ACC004/ACC006), not Accelerate's ACC501;
* ``training_step`` divides the loss by ``current_gradient_accumulation_steps`` (the group's real
  microbatch count) unless ``loss_is_scaled_for_ga``: a model taking loss kwargs with
  ``num_items_in_batch`` (labels != -100 over the whole group) or a ``compute_loss_func`` returns
  ``sum / num_items_in_batch`` and is not divided again. Either way the per-token weights of a
  group sum to 1 — the framework's division is never ACC101; a ``compute_loss`` override dividing
  by A again sums to 1/A (ACC101), one returning a per-microbatch mean while the Trainer believes it
  scaled sums to A or weighs every microbatch alike (ACC105: the Trainer left the normalization to it);
* clipping goes through ``accelerator.clip_grad_norm_`` → ``torch.nn.utils.clip_grad_norm_``
  (accelerate 1.15.0 ``accelerator.py``), observed by the probe at the boundary.

The HF callback API has no exception hook: if ``train()`` raises before the probe finished, call
``callback.detach()`` (e.g. in a ``finally``) to remove the hooks.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import transformers

from accumlint import frameworks as fw
from accumlint.frameworks.contracts import Owner
from runtime_guard import frameworks
from runtime_guard.integrations._session import GuardSession, SessionCallback
from runtime_guard.probe import OnFinding

__all__ = ["GuardCallback"]

_SRC = f"transformers {transformers.__version__}"


def _accepts_loss_kwargs(model: Any) -> bool:
    """The Trainer's own test (transformers 5.24.0 ``Trainer.__init__``): ``accepts_loss_kwargs`` when the
    model declares it, else a ``**kwargs`` in ``forward``."""
    inner = getattr(model, "module", model)
    if hasattr(inner, "accepts_loss_kwargs"):
        return bool(inner.accepts_loss_kwargs)
    params = inspect.signature(inner.forward).parameters.values()
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params)


class GuardCallback(SessionCallback, transformers.TrainerCallback):
    """Run the runtime guard on the first ``groups`` accumulation groups of ``Trainer.train``.

    One idea for two frameworks: ``runtime_guard.integrations.lightning.GuardCallback`` is the
    same callback for Lightning (one probe session,
    one report; each reads A from its own trainer), hence the same name.

    Args:
        groups: accumulation groups to probe (plus the next microbatch, to see the reset).
        accumulation_steps: A; ``None`` reads ``args.gradient_accumulation_steps``.
        on_finding: ``"collect"``, ``"warn"`` (a ``GuardWarning`` per finding) or ``"raise"``
            (``GuardFindingError`` out of ``trainer.train()``, after the hooks were removed).
        json_path: write the report there as JSON (world process zero only).
        print_report: print the rendered report when the probe finishes (world process zero only).
        **probe_options: further keyword arguments of :class:`runtime_guard.Probe`
            (``normalization``, ``labels``, ``effective_batch``, ...).

    Attributes:
        report: the :class:`runtime_guard.Report` once the probe finished, else ``None``.
        probe: the :class:`runtime_guard.Probe` once attached, else ``None``.
    """

    def __init__(
        self,
        groups: int = 2,
        *,
        accumulation_steps: int | None = None,
        on_finding: OnFinding = "collect",
        json_path: str | Path | None = None,
        print_report: bool = False,
        **probe_options: Any,
    ) -> None:
        self._session = GuardSession("transformers", groups=groups, on_finding=on_finding, json_path=json_path,
                                     print_report=print_report, probe_options=probe_options)
        self.accumulation_steps = accumulation_steps
        self._publish = True

    # -- Trainer events ------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Attach with the Trainer's model, optimizer, scheduler and A (once)."""
        if self._session.started:
            return
        model, optimizer = kwargs.get("model"), kwargs.get("optimizer")
        if model is None or optimizer is None:
            raise RuntimeError("GuardCallback: the Trainer passed no model or optimizer to on_train_begin")
        self._publish = bool(state.is_world_process_zero)
        a = self.accumulation_steps
        source = "given to GuardCallback"
        if a is None:
            a = int(args.gradient_accumulation_steps)
            source = "TrainingArguments.gradient_accumulation_steps (HF Trainer)"
        loss_kwargs = _accepts_loss_kwargs(model)
        notes = [
            f"HF Trainer ({_SRC}): the Trainer groups the batches, steps the optimizer and the scheduler and calls "
            "model.zero_grad() once per update; Accelerate's own A is 1",
            "the Trainer normalizes the loss: " + (
                "the model takes loss kwargs, so it returns sum / num_items_in_batch (supervised tokens of the "
                "whole group) and the Trainer does not divide again"
                if loss_kwargs else
                "the model takes no loss kwargs, so the Trainer divides each microbatch loss by the group's "
                "microbatch count (a mean of microbatch means)"
            ) + "; a compute_loss override or loss_is_scaled_for_ga changes this",
        ]
        inner = getattr(model, "module", model)
        quirk = False
        if (loss_kwargs and getattr(inner, "loss_type", "") is None
                and getattr(getattr(inner, "config", None), "is_encoder_decoder", False) is False
                and type(inner).__name__.endswith(("LMHeadModel", "ForCausalLM"))):
            notes.append(
                f"{type(inner).__name__}.loss_type is None: the Trainer ({_SRC}, _loss_shifts_labels) counts "
                "num_items_in_batch over all labels while the default ForCausalLMLoss shifts them, so supervised "
                "position-0 labels are counted but never predicted (per-token weights sum slightly below 1)")
            quirk = True
        unobservable = []
        if frameworks.is_deepspeed_engine(model) or "DeepSpeed" in type(optimizer).__name__:
            unobservable.append("DeepSpeed engine: it owns the optimizer update, the gradient reset and the loss "
                                "division (the Trainer passes scale_wrt_gas=False)")
        probe = self._session.start(
            model, frameworks.unwrap_optimizer(optimizer), accumulation_steps=a, accumulation_source=source,
            scheduler=kwargs.get("lr_scheduler"), scaler=getattr(optimizer, "scaler", None), notes=notes,
            unobservable=unobservable,
            user_normalizes=frameworks.hf_user_normalizes(SimpleNamespace(model_accepts_loss_kwargs=loss_kwargs)),
            facts={"version": transformers.__version__, fw.transformers.ACCUMULATION_KEYWORD: int(
                args.gradient_accumulation_steps), fw.transformers.LOSS_KWARGS_ATTR: loss_kwargs,
                   "divides_loss": "by num_items_in_batch (model)" if loss_kwargs else "by the group's microbatches",
                   "steps_scheduler_per_update": fw.transformers.CONTRACT.steps_scheduler is Owner.FRAMEWORK},
        )
        probe.record.weight_sum_explained = quirk

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Detach once the probed groups and the next microbatch were seen."""
        self._session.poll(self._publish)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Detach once the probed groups and the next microbatch were seen."""
        self._session.poll(self._publish)

    def _no_forward_hint(self) -> str:
        return _NO_FORWARD

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Detach when training ends before the probe saw all its groups."""
        self.detach()


_NO_FORWARD = "no grad-enabled forward of the Trainer's model was seen"
