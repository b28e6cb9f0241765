"""runtime_guard: re-checks the accumulation rules on the events of a real training loop.

Two lines around the unchanged loop::

    with runtime_guard.probe(model, optimizer, accumulation_steps=4) as p:
        ...  # the loop
    print(p.report())

Findings carry the linter's rule codes; the card records m, A, D, tokens, precision,
normalization, updates, memory. Needs torch (the ``guard`` extra); the linter never imports it.
Without torch the package still imports (so that ``python -m runtime_guard`` can say how to
install it), and its public names raise ``ModuleNotFoundError`` with that hint.
"""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = [
    "RUNTIME_CHECKS", "Finding", "GuardFindingError", "GuardWarning", "Probe", "Report", "RuntimeFinding", "log",
    "probe",
]
__version__ = "0.3.0"

#: What to do when torch is missing (the guard's only extra dependency).
INSTALL_HINT = (
    "the runtime guard needs torch: pip install torch numpy "
    "(in a clone of accumlint: pip install '.[guard]')"
)

HAS_TORCH = importlib.util.find_spec("torch") is not None

if HAS_TORCH:
    from runtime_guard.checks import RUNTIME_CHECKS
    from runtime_guard.observe.figures import log
    from runtime_guard.probe import Probe, probe
    from runtime_guard.report import Finding, GuardFindingError, GuardWarning, Report, RuntimeFinding
else:
    def __getattr__(name: str) -> Any:
        if name in __all__:
            raise ModuleNotFoundError(INSTALL_HINT, name="torch")
        raise AttributeError(f"module 'runtime_guard' has no attribute {name!r}")
