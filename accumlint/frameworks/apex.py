"""NVIDIA apex: every class of ``apex.optimizers`` is an optimizer (FusedAdam, FusedLAMB...)."""

from __future__ import annotations

from accumlint.frameworks.contracts import Role

CONSTRUCTOR_PREFIXES: tuple[tuple[str, Role], ...] = (("apex.optimizers.", Role.OPTIMIZER),)
