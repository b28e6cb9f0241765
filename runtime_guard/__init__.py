"""runtime_guard: re-checks the accumulation rules on the events of a real training loop.

Two lines around the unchanged loop::

    with runtime_guard.probe(model, optimizer, accumulation_steps=4) as p:
        ...  # the loop
    print(p.report())

Findings carry the linter's rule codes; the card records m, A, D, tokens, precision,
normalization, updates, memory. Needs torch (the ``guard`` extra); the linter never imports it.
"""

from runtime_guard.checks import RUNTIME_CHECKS
from runtime_guard.probe import Probe, probe
from runtime_guard.report import Finding, GuardFindingError, GuardWarning, Report

__all__ = ["RUNTIME_CHECKS", "Finding", "GuardFindingError", "GuardWarning", "Probe", "Report", "probe"]
__version__ = "0.1.0"
