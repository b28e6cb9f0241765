"""Data parallelism and counting (ACC403, ACC404, ACC405, ACC407) and the BatchNorm fact (ACC901):
the bug in the shapes real code takes, the correct shapes next to them, and the shapes the
model cannot decide (silence documented)."""

# The tests kept here need more than one snippet's findings: the model's loader of a loop, a
# snippet shared with twins made by str.replace. A plain "this one-file snippet reports exactly
# these (code, line) findings" test belongs in the rule's rules/<CODE>-<name>/cases.toml
# (tests/catalogue/test_rule_folders.py runs them all).

from __future__ import annotations

from pathlib import Path

from accumlint.checks.shared.parallel import data_parallel
from tests.catalogue.test_rule_folders import case_code
from tests.support import findings, lint, model_of

CODES = {"ACC403", "ACC404", "ACC405", "ACC901"}


def ours(source: str) -> list[tuple[str, int]]:
    """The findings of this file's rules alone (ACC901 is off by default: selected here)."""
    return lint(source, ",".join(sorted(CODES)))


_BATCHNORM = """
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.bn = nn.BatchNorm2d(8)
        self.head = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))

model = Net()
for i, (x, y) in enumerate(loader):
    (loss_fn(model(x), y) / A).backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


def test_batchnorm_in_an_accumulating_module_is_recorded_once_per_layer() -> None:
    assert ours(_BATCHNORM) == [("ACC901", 9), ("ACC901", 10)]


def test_batchnorm_without_accumulation_is_not_recorded() -> None:
    ungated = _BATCHNORM.replace("    if (i + 1) % A == 0:\n        optimizer.step()", "    optimizer.step()")
    ungated = ungated.replace("        optimizer.zero_grad()", "    optimizer.zero_grad()")
    assert ours(ungated) == []
    assert ours(_BATCHNORM.replace("nn.BatchNorm2d(8)", "nn.GroupNorm(2, 8)")) == [("ACC901", 10)]


def test_the_loader_a_loop_reads() -> None:
    """The model links a loop to its loader through enumerate/tqdm wrappers, enclosing loops and
    next(iter(...)); a loader received as a parameter has no constructor to read."""
    model = model_of(case_code("ACC403 micro-loop fed by next(iter(loader))"))
    (group,) = model.loops
    use = data_parallel(model).loader_of(group)
    assert use is not None and use.built_here is not None
    assert data_parallel(model).replicated and data_parallel(model).wrapper_calls
    src = """
    def train(model, loader, optimizer):
        for i, b in enumerate(loader):
            (model(b).sum() / A).backward()
            if (i + 1) % A == 0:
                optimizer.step()
    """
    model = model_of(src)
    (group,) = model.loops
    use = data_parallel(model).loader_of(group)
    assert use is not None and use.built_here is None


# --- ACC407: an FSDP1 wrapper built in another module -----------------------------------------------

_OFFLOADING_WRAPPER = {
    "setup_fsdp.py": """
        from torch.distributed.fsdp import CPUOffload, FullyShardedDataParallel

        def wrap(net, offload=True):
            return FullyShardedDataParallel(net, cpu_offload=CPUOffload(offload_params=offload))
    """,
    "train.py": """
        import torch

        from setup_fsdp import wrap

        A = 4

        def main(net, loader):
            model = wrap(net{arguments})
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for i, (x, y) in enumerate(loader):
                loss = torch.nn.functional.mse_loss(model(x), y) / A
                loss.backward()
                if (i + 1) % A == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """,
}


def _acc407(root: Path, arguments: str) -> list[tuple[str, str, int]]:
    files = {**_OFFLOADING_WRAPPER, "train.py": _OFFLOADING_WRAPPER["train.py"].replace("{arguments}", arguments)}
    return [f for f in findings(root, files) if f[1] == "ACC407"]


def test_fsdp1_offload_built_in_another_module_is_followed(tmp_path: Path) -> None:
    # the wrapper and its CPUOffload are built in the imported helper: the backward is reported
    assert _acc407(tmp_path, "") == [("train.py", "ACC407", 13)]


def test_fsdp1_offload_switched_off_by_the_caller_stays_silent(tmp_path: Path) -> None:
    # the helper's offload flag, given False here, reaches CPUOffload(offload_params=...)
    assert _acc407(tmp_path, ", offload=False") == []
