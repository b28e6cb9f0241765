"""``GuardCallback``: the runtime guard inside a Lightning ``Trainer.fit``.

::

    from runtime_guard.integrations.lightning import GuardCallback

    guard = GuardCallback(groups=2, json_path="card.json")
    trainer = lightning.pytorch.Trainer(accumulate_grad_batches=4, callbacks=[guard])
    trainer.fit(model, loader)
    print(guard.report)

The probe attaches at the first ``on_train_batch_start`` (after ``GradientAccumulationScheduler``
has set this epoch's A) with the LightningModule, ``trainer.optimizers[0]``, the first LR scheduler,
the precision plugin's GradScaler and A = ``trainer.accumulate_grad_batches``; it detaches once the
probed groups and the next microbatch were seen (at ``on_train_batch_end``), at ``on_train_end``,
or on an exception.

The contract it relies on (lightning 2.6.6, read in the installed package):

* automatic optimization divides the loss returned by ``training_step`` by
  ``accumulate_grad_batches`` before backward (``loops/optimization/automatic.py``,
  ``ClosureResult.from_training_step_output(..., normalize)``): per-token weights that sum to 1
  over a group are that division, not a finding; a user ``loss / A`` on top sums to 1/A (ACC101);
* it resets the gradients inside the closure of each group's first batch, after that batch's
  forward and before its backward (``Closure.closure`` and ``_make_zero_grad_fn``:
  ``batch_idx % accumulate_grad_batches == 0``), through ``optimizer_zero_grad`` →
  ``optimizer.zero_grad()`` on the raw optimizer — before the group's first backward, so not ACC001;
* the group's last batch runs its forward and backward *inside* ``optimizer.step(closure)``
  (``plugins/precision/precision.py`` ``Precision.optimizer_step``): torch calls step pre-hooks
  before the closure, so the probe records the update when the closure returns;
* ``interval="step"`` schedulers are stepped once per optimizer update
  (``loops/training_epoch_loop.py`` ``update_lr_schedulers``: skipped while ``_should_accumulate``);
* manual optimization (``automatic_optimization = False``) forces ``accumulate_grad_batches == 1``:
  the loop's A is then the user's; pass ``accumulation_steps=`` (otherwise it is inferred);
  ``self.optimizers()`` returns a ``LightningOptimizer`` whose ``zero_grad`` is torch's, bound to the
  wrapper (``core/optimizer.py``), so the callback wraps it as well;
* strategies that own accumulation (``strategy.handles_gradient_accumulation``, DeepSpeed) step an
  engine every batch: the card marks updates, resets and normalization as not observable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

from accumlint import frameworks as fw
from accumlint.frameworks.contracts import Owner
from runtime_guard import frameworks
from runtime_guard.integrations._session import GuardSession, SessionCallback
from runtime_guard.probe import OnFinding
from runtime_guard.undo import wrap_instance_method

__all__ = ["GuardCallback"]

_SRC = f"lightning {pl.__version__}"


class GuardCallback(SessionCallback, pl.Callback):
    """Run the runtime guard on the first ``groups`` accumulation groups of ``Trainer.fit``.

    One idea for two frameworks: ``runtime_guard.integrations.transformers.GuardCallback`` is the
    same callback for Hugging Face Transformers (one probe session,
    one report; each reads A from its own trainer), hence the same name.

    Args:
        groups: accumulation groups to probe (plus the next microbatch, to see the reset).
        accumulation_steps: A; ``None`` reads ``trainer.accumulate_grad_batches`` in automatic
            optimization and infers A from the observed groups in manual optimization.
        module: the module whose ``forward`` runs once per microbatch: ``None`` for the
            LightningModule (``training_step`` calls ``self(...)``), an attribute name of the
            LightningModule (``"model"``), or a module.
        on_finding: ``"collect"``, ``"warn"`` (a ``GuardWarning`` per finding) or ``"raise"``
            (``GuardFindingError`` from the Lightning hook that publishes the report).
        json_path: write the report there as JSON (global rank 0 only).
        print_report: print the rendered report when the probe finishes (global rank 0 only).
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
        module: str | Any = None,
        on_finding: OnFinding = "collect",
        json_path: str | Path | None = None,
        print_report: bool = False,
        **probe_options: Any,
    ) -> None:
        super().__init__()
        self._session = GuardSession("lightning", groups=groups, on_finding=on_finding, json_path=json_path,
                                     print_report=print_report, probe_options=probe_options)
        self.accumulation_steps = accumulation_steps
        self.module = module
        self._publish = True

    # -- Lightning hooks -----------------------------------------------------------------
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """Attach before the first training batch (once)."""
        if self._session.started:
            self._session.poll(self._publish)
            return
        self._publish = bool(trainer.is_global_zero)
        self._attach(trainer, pl_module)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Detach once the probed groups and the next microbatch were seen."""
        self._session.poll(self._publish)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """Detach when fit ends before the probe saw all its groups."""
        self.detach()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Detach on an exception (no warn/raise then: the report is kept as observed)."""
        self._session.finish(clean=False, publish=self._publish, no_forward_hint=self._no_forward_hint())

    # -- setup ---------------------------------------------------------------------------
    def _no_forward_hint(self) -> str:
        return ("no grad-enabled forward of the probed module was seen: when training_step does not call "
                "self(...), pass GuardCallback(module='<attribute of the LightningModule>')")

    def _forward_module(self, pl_module: Any) -> Any:
        if self.module is None:
            return pl_module
        if isinstance(self.module, str):
            return getattr(pl_module, self.module)
        return self.module

    def _attach(self, trainer: Any, pl_module: Any) -> None:
        automatic = bool(pl_module.automatic_optimization)
        notes: list[str] = []
        unobservable: list[str] = []
        a = self.accumulation_steps
        source = "given to GuardCallback"
        if a is None and automatic:
            a = int(trainer.accumulate_grad_batches)
            source = "trainer.accumulate_grad_batches (Lightning automatic optimization)"
        if automatic:
            notes.append(f"Lightning automatic optimization ({_SRC}): the loss returned by training_step is divided "
                         "by accumulate_grad_batches before backward (per-token weights summing to 1 over a group "
                         "are that division); the reset runs in the first batch's closure, after its forward; "
                         "the last batch's forward and backward run inside optimizer.step(closure)")
        else:
            notes.append(f"Lightning manual optimization ({_SRC}): accumulation, division, resets and scheduler "
                         "steps are the user's (accumulate_grad_batches must be 1)"
                         + ("" if a is not None else "; A inferred: pass GuardCallback(accumulation_steps=A)"))
        if len(trainer.optimizers) > 1:
            notes.append(f"{len(trainer.optimizers)} optimizers: only the first is followed")
        strategy = trainer.strategy
        if getattr(strategy, "handles_gradient_accumulation", False):
            unobservable.append(f"{type(strategy).__name__}: the strategy's engine owns the optimizer update, the "
                                "reset and the loss division (Lightning steps it every batch)")
        if type(strategy).__name__ not in ("SingleDeviceStrategy",):
            notes.append(f"strategy {type(strategy).__name__}: the probe watches the LightningModule, not the "
                         "data-parallel wrapper (DDP sync flags are not read)")
        configs = list(getattr(trainer, "lr_scheduler_configs", []) or [])
        scheduler, owner = None, ""
        if configs and automatic:
            config = configs[0]
            scheduler = config.scheduler
            if config.interval == "step":
                if config.frequency != 1:
                    notes.append(f"scheduler frequency {config.frequency}: Lightning tests it against batch_idx + 1, "
                                 "not against the update count")
            else:
                # loops/training_epoch_loop.py update_lr_schedulers("epoch") runs at the epoch's end only:
                # inside the probed groups only the user's code can step it
                owner = f"Lightning steps it once per epoch (interval={config.interval!r}, {_SRC})"
                notes.append(f"scheduler interval {config.interval!r}: Lightning steps it at the epoch's end, "
                             "never inside the probed groups; a step from training_step is the user's (ACC306)")
        elif configs:
            scheduler = configs[0].scheduler  # manual optimization: stepped by the user
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        optimizer = trainer.optimizers[0]
        batches = trainer.num_training_batches
        if a and isinstance(batches, int) and batches < a * (self._session.groups + 1):
            notes.append(f"the epoch has {batches} batches: the probed groups reach the epoch end, where Lightning "
                         "steps a final partial group still divided by A (ACC005)")
        contract = fw.lightning.CONTRACT  # automatic optimization: Lightning divides and steps the scheduler
        probe = self._session.start(
            self._forward_module(pl_module), optimizer, accumulation_steps=a, accumulation_source=source,
            scheduler=scheduler, scaler=scaler, notes=notes, unobservable=unobservable, scheduler_owner=owner,
            user_normalizes=frameworks.lightning_manual_normalizes(pl_module),
            facts={"version": pl.__version__, fw.lightning.AUTOMATIC_OPTIMIZATION_ATTR: automatic,
                   fw.lightning.ACCUMULATION_KEYWORD: int(trainer.accumulate_grad_batches),
                   "strategy": type(strategy).__name__,
                   "divides_loss_by_A": automatic and contract.divides is Owner.FRAMEWORK,
                   "steps_scheduler_per_update": automatic and contract.steps_scheduler is Owner.FRAMEWORK},
        )
        # self.optimizers() hands out LightningOptimizer wrappers whose zero_grad is torch's, bound to the
        # wrapper: wrap those too, so a reset from training_step is seen by name
        for wrapper in getattr(strategy, "_lightning_optimizers", []) or []:
            if getattr(wrapper, "optimizer", None) is optimizer:
                wrap_instance_method(probe._state.undo, wrapper, "zero_grad",
                                     probe._resets.zero_grad_wrapper("optimizer.zero_grad"))
