"""bitsandbytes: every class of ``bitsandbytes.optim`` is an optimizer (8-bit and paged Adam...)."""

from __future__ import annotations

from accumlint.frameworks.contracts import Role

CONSTRUCTOR_PREFIXES: tuple[tuple[str, Role], ...] = (("bitsandbytes.optim.", Role.OPTIMIZER),)
