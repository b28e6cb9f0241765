"""torchtune (read in main @bd2a0fc, 0.7.0, ``torchtune/training/``): recipes sum token losses
over the group and scale the gradients by 1/tokens at the boundary; ``shard_model`` wraps with
FSDP2's ``fully_shard``.
"""

from __future__ import annotations

from accumlint.frameworks.contracts import GroupContract, Owner, Source

VERSION = "0.7.0"

CONTRACT = GroupContract(
    "torchtune", "a recipe's train loop (full_finetune_distributed.py)",
    divides=Owner.USER, divisor="the group's token count, by scale_grads at the boundary", resets=Owner.USER,
    gates_update=Owner.USER, steps_scheduler=Owner.USER, clips=Owner.USER,
    sync="none (FSDP reduces every backward)", tail=None, a_from="the recipe's gradient_accumulation_steps",
    packages=("torchtune",),
    source=Source("torchtune", VERSION, "recipes/full_finetune_distributed.py; training/_grad_scaler.py"),
)

#: ``training.scale_grads(model, scaler)`` (``training/_grad_scaler.py``): multiplies every
#: ``.grad`` of ``model`` in place by ``scaler``; a replica count among its arguments undoes
#: (or changes) the wrapper's average.
GRAD_RESCALE_CALLS = frozenset({"scale_grads"})  # torchtune 0.6.1 and 0.7.0 alike
