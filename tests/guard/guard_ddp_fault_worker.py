"""One rank of the 2-process gloo checks of the runtime guard under faults and for bitwise safety.

Usage: RANK=r RUNTIME_GUARD_COLLECTIVE_TIMEOUT=s python guard_ddp_fault_worker.py OUT_PREFIX

Writes OUT_PREFIX.<rank>.json with one entry per scenario, each run in a fresh default process
group on its own file store (OUT_PREFIX.<scenario>.store), in this order (the last one ends rank 0's
process mid-group):

* ``bitwise``: weights, momentum buffers and RNG state with and without the probe (plus a control),
  two probes one after the other (the second reuses the guard's group);
* ``disagree``: rank 0 runs A=2, rank 1 A=4 (DDP all-reduces every microbatch, so the program
  itself stays in step); the probe must notice at attach and never wait in a gather;
* ``raise_before_step``: rank 0 raises after the group's last backward, before its update; rank 1's
  update gather must give up after the timeout;
* ``skip_update``: rank 0 leaves out group 0's update (its program caught its own error): the
  gathers at the updates no longer line up, each rank gives up after the timeout;
* ``crash_mid_group``: rank 0's process exits after the first microbatch; rank 1's next backward
  fails in DDP's own all-reduce, and the probe leaves on that exception without a collective.

Each scenario records the seconds it took, the probe's notes and whether every hook, wrapper and
comm hook of the DDP wrapper, its module, the optimizer and the globals is gone afterwards.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import runtime_guard

M = 4


def traces(ddp: DistributedDataParallel, opt: torch.optim.Optimizer) -> dict[str, object]:
    """What the probe may install on a DDP run, as comparable values."""
    module = torch.nn.modules.module
    hooks = {}
    for name, mod in [("ddp", ddp), *ddp.module.named_modules()]:
        for attr, value in vars(mod).items():
            if "hook" in attr and isinstance(value, dict):
                hooks[f"{name}.{attr}"] = [(k, id(v)) for k, v in value.items()]
    return {
        "module hooks": hooks,
        "instance attributes": {f"{type(o).__name__}": sorted(k for k, v in vars(o).items() if callable(v))
                                for o in (ddp, ddp.module, opt)},
        "comm hooks": len(getattr(ddp, "_comm_hooks", [])),
        "parameter hooks": [len(p._post_accumulate_grad_hooks or {}) + len(p._backward_hooks or {})
                            for p in ddp.parameters()],
        "optimizer hooks": [len(opt._optimizer_step_pre_hooks), len(opt._optimizer_step_post_hooks)],
        "global hooks": [len(v) for k, v in sorted(vars(module).items()) if k.startswith("_global_")
                         and isinstance(v, dict)],
        "clip": id(torch.nn.utils.clip_grad_norm_),
        "saved-tensor hooks": torch._C._autograd._top_saved_tensors_default_hooks(False) is not None,
    }


def setup(lr: float = 0.1) -> tuple[DistributedDataParallel, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    ddp = DistributedDataParallel(nn.Sequential(nn.Linear(6, 8), nn.Dropout(0.2), nn.Linear(8, 1)))
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=0.9)
    g = torch.Generator().manual_seed(dist.get_rank())
    return ddp, opt, torch.randn(64, 6, generator=g), torch.randn(64, 1, generator=g)


def loop(ddp, opt, x, y, a: int, microbatches: int, fail=None, skip=None) -> None:  # type: ignore[no-untyped-def]
    """The program's own loop: one all-reduce per backward; ``fail(i)`` runs after each backward;
    the update after microbatch ``i`` is left out when ``skip(i)``."""
    for i in range(microbatches):
        (nn.functional.mse_loss(ddp(x[i * M:(i + 1) * M]), y[i * M:(i + 1) * M]) / a).backward()
        if fail is not None:
            fail(i)
        if (i + 1) % a == 0 and not (skip is not None and skip(i)):
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
            opt.step()
            opt.zero_grad()


def state(ddp, opt) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {
        "weights": [t.view(torch.int32).tolist() for t in ddp.module.state_dict().values()],
        "momentum": [opt.state[p]["momentum_buffer"].view(torch.int32).tolist() for p in ddp.parameters()],
        "rng": torch.get_rng_state().tolist(),
    }


def bitwise() -> dict[str, object]:
    out = {}
    for name, guard, lr in [("plain", False, 0.1), ("plain_again", False, 0.1), ("guarded", True, 0.1),
                            ("guarded_again", True, 0.1), ("other_lr", False, 0.05)]:
        ddp, opt, x, y = setup(lr)
        before = traces(ddp, opt)
        if guard:
            with runtime_guard.probe(ddp, opt, accumulation_steps=4, groups=2) as p:
                loop(ddp, opt, x, y, 4, 12)
            out[f"{name}_compared"] = [g.replicas_equal for g in p.record.groups]
            out[f"{name}_notes"] = p.report().card["notes"]
        else:
            loop(ddp, opt, x, y, 4, 12)
        out[name] = state(ddp, opt)
        out[f"{name}_no_trace"] = traces(ddp, opt) == before
    return out


def probed(a: int, microbatches: int, fail=None, skip=None) -> dict[str, object]:  # type: ignore[no-untyped-def]
    ddp, opt, x, y = setup()
    before = traces(ddp, opt)
    start = time.monotonic()
    p = runtime_guard.probe(ddp, opt, accumulation_steps=a, groups=2)
    error = None
    try:
        with p:
            loop(ddp, opt, x, y, a, microbatches, fail, skip)
    except Exception as exc:  # noqa: BLE001 - the program's error, recorded
        error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    seconds = time.monotonic() - start
    card = p.report().card
    return {
        "seconds": seconds, "error": error, "notes": card["notes"], "no_trace": traces(ddp, opt) == before,
        "replicas_equal": [g.replicas_equal for g in p.record.groups],
        "codes": sorted(p.report().codes),
    }


SCENARIOS = ("bitwise", "disagree", "raise_before_step", "skip_update", "crash_mid_group")


def run(scenario: str, rank: int) -> dict[str, object]:
    def raise_before_step(i: int) -> None:
        if rank == 0 and i == 3:
            raise KeyError("rank 0 fails after the group's last backward")

    def crash(i: int) -> None:
        if rank == 0 and i == 1:
            os._exit(0)  # a crashed rank: its sockets close, nothing is cleaned up

    if scenario == "bitwise":
        return bitwise()
    if scenario == "disagree":
        return probed(2 if rank == 0 else 4, 8)
    if scenario == "raise_before_step":
        return probed(4, 4, raise_before_step)
    if scenario == "skip_update":
        # rank 0 catches its own error and leaves out group 0's update: rank 1 waits in the gather at
        # its update and gives up after the timeout; rank 0 then waits at group 1's update and gives up
        return probed(4, 8, skip=lambda i: rank == 0 and i == 3)
    assert scenario == "crash_mid_group"
    return probed(4, 8, crash)


def main(prefix: str) -> None:
    """Each scenario in a fresh default process group (the guard retires its group of a process
    group after a failed gather, so scenarios would otherwise see each other)."""
    torch.set_num_threads(1)
    rank, out = int(os.environ["RANK"]), {}
    for scenario in SCENARIOS:
        # a file store per scenario, no TCP port: a port drawn free in advance can be taken (by an earlier
        # scenario's gloo connections) before its scenario starts
        dist.init_process_group("gloo", init_method=f"file://{prefix}.{scenario}.store", rank=rank, world_size=2,
                                timeout=timedelta(seconds=20))
        if scenario == "crash_mid_group" and rank == 0:  # written before this process ends mid-group
            out[scenario] = {"exited": True}
            Path(f"{prefix}.{rank}.json").write_text(json.dumps(out))
        out[scenario] = run(scenario, rank)
        if scenario == "crash_mid_group":
            break  # rank 0 is gone: no barrier, no destroy_process_group
        dist.barrier()
        dist.destroy_process_group()
    Path(f"{prefix}.{rank}.json").write_text(json.dumps(out))
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
