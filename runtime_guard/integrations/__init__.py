"""Framework adapters: run the probe inside a trainer that owns the loop.

* :mod:`runtime_guard.integrations.lightning` — ``GuardCallback``, a Lightning ``Callback``
  (imports ``lightning.pytorch``, or ``pytorch_lightning`` when ``lightning`` is absent);
* :mod:`runtime_guard.integrations.transformers` — ``GuardCallback``, an HF
  ``transformers.TrainerCallback``.

Nothing here is imported by ``import runtime_guard``, and this package itself imports no
framework: each framework is imported only by its own submodule, when that is imported.
"""

__all__: list[str] = []
