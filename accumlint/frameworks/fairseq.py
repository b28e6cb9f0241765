"""fairseq (0.12 ``optim/fairseq_optimizer.py``): ``optimizer.multiply_grads(c)`` rescales every
``.grad`` of the optimizer's parameters in place."""

from __future__ import annotations

GRAD_RESCALE_CALLS = frozenset({"multiply_grads"})
