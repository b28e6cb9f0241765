"""torchtune (read in main @bd2a0fc, 0.7.0, ``torchtune/training/``): recipes sum token losses
over the group and scale the gradients by 1/tokens at the boundary; ``shard_model`` wraps with
FSDP2's ``fully_shard``.
"""

from __future__ import annotations

from accumlint.frameworks.contracts import GroupContract, Owner, Source

VERSION = "0.7.0"
#: Every version a fact of this module was read in (the installed one first).
READ_VERSIONS = (VERSION,)

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
#: Matched by name, so not its successor ``scale_grads_(parameters, scaler)`` (0.7.0, where
#: ``scale_grads`` is deprecated): projects define helpers of that name, and a project's own
#: helper is read from its code (``shared/patterns/norm_grad_rescale_every_microbatch.py``).
GRAD_RESCALE_CALLS = frozenset({"scale_grads"})

#: ``training.shard_model(model, shard_conditions, *, cpu_offload, reshard_after_forward=True,
#: dp_mesh=None)`` (``training/_distributed.py``): applies FSDP2's ``fully_shard`` to every module a
#: condition selects and then to ``model`` itself, in place (it returns None). The model is then
#: an FSDP2 module: DDP's ``no_sync()`` and ``require_backward_grad_sync`` do nothing on it.
SHARD_CALLS = frozenset({"torchtune.training.shard_model", "torchtune.training._distributed.shard_model"})
SHARD_PARAMETER = "model"
