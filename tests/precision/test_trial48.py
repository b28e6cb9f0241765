"""Reduced shapes from field trial 48: an LLM pre-training loop with a second-order optimizer, a
GAN trainer built by closure factories, a vision fine-tuning engine with a DeepSpeed path, a
speech toolkit's trainer class with recipe overrides, and a video tokenizer's GAN trainer,
rewritten as small synthetic snippets (no fetched code).

- a Hessian refresh after the update (``probe.backward(); opt.update_hessian(); opt.zero_grad()``)
  in the loop around an inner micro-loop: the probe's backward made the outer loop look like a
  loop of microbatches, so ACC004 (and with the refresh on every update, ACC006 and ACC001) spoke
  of a loop that updates once per group (fixed: a backward after the update of a group run by an
  inner loop makes no loop of microbatches, and a pass after its microbatch's update whose
  gradients are reset before the next backward belongs to no group);
- two factories that both return a nested ``train``: the first one hid the second, whose
  accumulation loop was neither simulated nor counted (fixed: every nested def is an entry);
- ``deepspeed.initialize`` carried as a value (``ds_init``) from the argument parser to ``main``:
  the engine it returns was not known as one at the call, so the loss divided by A before the
  engine's own division (ACC101) was missed (fixed: what receives ``.backward(loss)`` and
  ``.step()`` in a module that imports DeepSpeed is an engine by use);
- a trainer base class whose per-microbatch hook a subclass overrides: the base class's loop
  ran its own hook, and the override was simulated alone with the base's microbatch counter
  frozen, so a second optimizer's reset on every microbatch (ACC001) was missed (fixed: the base's
  loop is also run with ``self`` an instance of each subclass that overrides a method it calls);
- a stub written ``raise NotImplementedError`` then ``return``: was not taken for a stub, so the
  run ended in the raise and the base class's loop stayed undecided for want of a backward (fixed:
  what follows the raise is dead);
- one optimizer stepped twice on one group's gradients (the second call meant for its
  scheduler): no rule of the catalogue speaks of it (xfail, for the lead to decide its scope);
- a DeepSpeed engine's loop: undecided, the engine's boundary having no reference driver in the
  simulator (fixed: DeepSpeed's engine is a reference driver of ``accumlint.model.counting``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accumlint.run import runner
from accumlint.settings.config import Settings
from tests.support import EVERY_CODE, loop_reasons, one, tree


def _loop_reasons(root: Path, files: dict[str, str]) -> list[tuple[str, ...]]:
    """Per accumulation loop of the project tree ``files``, its undecided reasons (empty: decided)."""
    paths = tree(root, files)
    run = runner.check_files(paths, Settings(project_root=root), EVERY_CODE, jobs=1, cache=None)
    assert run.errors == []
    return loop_reasons(run.loops)


# --- a Hessian refresh after the update, around an inner micro-loop -----------------------------

#: an inner micro-loop of A backwards, one update, then (under {refresh}) a probe backward whose
#: gradients feed the optimizer's curvature estimate and are reset before the next group
CURVATURE = """
import torch

from nets import Net, batches

A = 4
net = Net()
opt = torch.optim.AdamW(net.parameters())
every = int(input())
data = batches()

it = 0
while it < 1000:
    for _ in range(A):
        x, y = next(data)
        loss = net(x, y) / A
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if {refresh}:
        probe = net(x, y) / A
        probe.backward()
        opt.update_hessian()
        opt.zero_grad(set_to_none=True)
    it += 1
"""


def test_the_micro_loop_without_a_curvature_probe_is_silent(tmp_path: Path) -> None:
    # the control: the same loop without the probe's branch
    source = CURVATURE.format(refresh="True").replace(
        "    if True:\n        probe = net(x, y) / A\n        probe.backward()\n        opt.update_hessian()\n"
        "        opt.zero_grad(set_to_none=True)\n", "")
    assert "probe" not in source
    assert one(tmp_path, source) == []


def test_a_curvature_probe_every_few_updates_is_no_update_per_microbatch(tmp_path: Path) -> None:
    assert one(tmp_path, CURVATURE.format(refresh="it % every == every - 1")) == []


def test_a_curvature_probe_after_every_update_is_no_group_member(tmp_path: Path) -> None:
    assert one(tmp_path, CURVATURE.format(refresh="True")) == []


def test_a_curvature_probe_never_reset_leaks_into_the_next_group(tmp_path: Path) -> None:
    # without the probe's own reset its gradients join the next group's: the next update applies A + 1
    source = CURVATURE.format(refresh="True").replace(
        "        opt.update_hessian()\n        opt.zero_grad(set_to_none=True)\n", "        opt.update_hessian()\n")
    assert source.count("zero_grad") == 1
    assert one(tmp_path, source) == [("ACC006", 18)]


def test_an_update_before_its_microbatchs_backward_is_still_found(tmp_path: Path) -> None:
    # the update runs before the backward of the group's last microbatch, whose gradients the reset
    # after it discards: no probe (the microbatch had no backward before the update)
    source = """
    import torch

    from nets import Net, make_loader

    A = 4
    net = Net()
    opt = torch.optim.AdamW(net.parameters())
    for epoch in range(3):
        for i, (x, y) in enumerate(make_loader()):
            loss = net(x, y) / A
            if (i + 1) % A == 0:
                opt.step()
            loss.backward()
            if (i + 1) % A == 0:
                opt.zero_grad()
    """
    assert ("ACC001", 16) in one(tmp_path, source)


# --- two closure factories with a nested function of the same name --------------------------------

#: {first} and {second}: the two factories, in file order
FACTORIES = """
{first}


{second}
"""

IDLE = '''def idle_trainer():
    def train(x, y):
        return {}
    return train'''

ACCUMULATING = '''def accumulating_trainer(net, config):
    def train(x, y):
        net.optim.zero_grad()
        for k in range(config["accums"]):
            loss = net(x[k], y[k]) / config["accums"]
            loss.backward()
        net.optim.step()
        return {"loss": loss.item()}
    return train'''


def test_a_factorys_nested_trainer_is_simulated_when_it_comes_first(tmp_path: Path) -> None:
    files = {"train_fns.py": FACTORIES.format(first=ACCUMULATING, second=IDLE)}
    assert _loop_reasons(tmp_path, files) == [()]


def test_a_factorys_nested_trainer_is_simulated_after_a_namesake(tmp_path: Path) -> None:
    files = {"train_fns.py": FACTORIES.format(first=IDLE, second=ACCUMULATING)}
    assert _loop_reasons(tmp_path, files) == [()]


# --- DeepSpeed's entry point carried as a value ---------------------------------------------------

#: a fine-tuning script whose engine comes from {init}; the engine path divides the loss by A
#: and the engine divides it again
CARRIED_INIT = """
import argparse

import deepspeed
import torch

from nets import Net, make_loader


def get_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--update_freq", type=int, default=1)
    parser.add_argument("--enable_deepspeed", action="store_true")
    known, _ = parser.parse_known_args()
    ds_init = None
    if known.enable_deepspeed:
        parser = deepspeed.add_config_arguments(parser)
        ds_init = deepspeed.initialize
    return parser.parse_args(), ds_init


def train_one_epoch(model, loader, optimizer, scaler, update_freq):
    if scaler is None:
        model.zero_grad()
    else:
        optimizer.zero_grad()
    for index, (x, y) in enumerate(loader):
        loss = model(x, y)
        loss /= update_freq
        if scaler is None:
            model.backward(loss)
            model.step()
        else:
            scaler.scale(loss).backward()
            if (index + 1) % update_freq == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()


def main(args, ds_init):
    model = Net()
    if ds_init is not None:
        model, optimizer, _, _ = {init}(args=args, model=model, model_parameters=model.parameters())
        scaler = None
    else:
        optimizer = torch.optim.AdamW(model.parameters())
        scaler = torch.cuda.amp.GradScaler()
    for _ in range(3):
        train_one_epoch(model, make_loader(), optimizer, scaler, args.update_freq)


if __name__ == "__main__":
    opts, init = get_args()
    main(opts, init)
"""

#: the line of ``loss /= update_freq`` in CARRIED_INIT
DIVISION_LINE = 29


def _double_division(tmp_path: Path, init: str) -> list[tuple[str, int]]:
    return [(code, line) for code, line in one(tmp_path, CARRIED_INIT.format(init=init)) if code == "ACC101"]


def test_the_engine_of_a_direct_initialize_divides_the_loss_again(tmp_path: Path) -> None:
    assert _double_division(tmp_path, "deepspeed.initialize") == [("ACC101", DIVISION_LINE)]


def test_the_engine_of_a_carried_initialize_divides_the_loss_again(tmp_path: Path) -> None:
    assert _double_division(tmp_path, "ds_init") == [("ACC101", DIVISION_LINE)]


@pytest.mark.parametrize("imports", ["", "import deepspeed"])
def test_a_wrapper_given_the_backward_and_stepped_by_hand_is_silent(tmp_path: Path, imports: str) -> None:
    # `.backward(loss)` and `.step()` on a wrapper the project does not show: an engine by use only
    # where the module imports DeepSpeed, and even there, stepped once per group by hand, it may be
    # one of GAS 1 that the loop accumulates for (no ACC101, no ACC502)
    source = f"""
    {imports}
    import torch

    from nets import Net, make_loader, wrap

    A = 4
    net = Net()
    model = wrap(net, torch.optim.AdamW(net.parameters()))
    for epoch in range(3):
        for i, (x, y) in enumerate(make_loader()):
            loss = model(x, y) / A
            model.backward(loss)
            if (i + 1) % A == 0:
                model.step()
    """
    assert one(tmp_path, source) == []


# --- a trainer base class and a subclass's per-microbatch hook ------------------------------------

#: the base class's loop advances `self.step` and calls the hook; the subclass trains a second
#: optimizer and resets it on every microbatch, {reset}
TEMPLATE = """
import torch


class Trainer:
    def __init__(self, net, accum):
        self.net = net
        self.accum = accum
        self.step = 0
        self.opt = torch.optim.Adam(net.body.parameters())
        self.head_opt = torch.optim.Adam(net.head.parameters())

    def compute_loss(self, batch):
        raise NotImplementedError

    def fit_batch(self, batch):
        boundary = self.step % self.accum == 0
        loss = self.compute_loss(batch)
        (loss / self.accum).backward()
        if boundary:
            self.opt.step()
            self.opt.zero_grad()
        return loss.detach()

    def fit(self, loader, epochs):
        for _ in range(epochs):
            for batch in loader:
                self.step += 1
                self.fit_batch(batch)
            self.opt.zero_grad()
            self.head_opt.zero_grad()
            self.step = 0


class TwoPartTrainer(Trainer):
    def fit_batch(self, batch):
        boundary = self.step % self.accum == 0
        body_loss, head_loss = self.net(batch)
        (body_loss / self.accum).backward()
        (head_loss / self.accum).backward()
        if boundary:
            self.opt.step()
            self.opt.zero_grad()
            self.head_opt.step()
{reset}
        return body_loss.detach()
"""

#: the line of the subclass's reset in TEMPLATE
RESET_LINE = 45


def test_a_subclass_resetting_under_the_boundary_is_silent(tmp_path: Path) -> None:
    assert one(tmp_path, TEMPLATE.format(reset="            self.head_opt.zero_grad()")) == []


def test_a_subclass_resetting_its_second_optimizer_every_microbatch_is_found(tmp_path: Path) -> None:
    source = TEMPLATE.format(reset="        self.head_opt.zero_grad()")
    assert [(code, line) for code, line in one(tmp_path, source) if code == "ACC001"] == [("ACC001", RESET_LINE)]


# --- a stub with a dead statement after its raise ------------------------------------------------

STUB = '''
import torch


class Trainer:
    def __init__(self, net, accum):
        self.net = net
        self.accum = accum
        self.opt = torch.optim.Adam(net.parameters())

    def compute_loss(self, batch):
        """The loss of one microbatch: the subclass says how."""
        raise NotImplementedError
{tail}
    def fit(self, loader):
        for index, batch in enumerate(loader):
            loss = self.compute_loss(batch)
            (loss / self.accum).backward()
            if (index + 1) % self.accum == 0:
                self.opt.step()
                self.opt.zero_grad()
'''


def test_a_base_class_loop_over_a_stub_is_decided(tmp_path: Path) -> None:
    assert _loop_reasons(tmp_path, {"brain.py": STUB.format(tail="")}) == [()]


def test_a_base_class_loop_over_a_stub_with_a_dead_return_is_decided(tmp_path: Path) -> None:
    assert _loop_reasons(tmp_path, {"brain.py": STUB.format(tail="        return\n")}) == [()]


# --- one optimizer stepped twice on one group's gradients -----------------------------------------


@pytest.mark.xfail(strict=True, reason="no rule of the catalogue speaks of an optimizer stepped twice on the "
                   "same accumulated gradients (the second call was meant for its scheduler); the lead "
                   "decides whether it is in scope")
def test_a_critic_stepped_twice_per_group_is_found(tmp_path: Path) -> None:
    source = """
    import torch


    def train_step(gen, critic, gen_opt, critic_opt, batches, accum):
        gen_opt.zero_grad()
        for _ in range(accum):
            loss = gen(next(batches)) / accum
            loss.backward()
        gen_opt.step()

        critic_opt.zero_grad()
        for _ in range(accum):
            critic_loss = critic(next(batches)) / accum
            critic_loss.backward()
        critic_opt.step()
        critic_opt.step()


    def fit(gen, critic, batches, accum, steps):
        gen_opt = torch.optim.Adam(gen.parameters())
        critic_opt = torch.optim.Adam(critic.parameters())
        for _ in range(steps):
            train_step(gen, critic, gen_opt, critic_opt, batches, accum)
    """
    assert [line for _, line in one(tmp_path, source)] == [17]


# --- a DeepSpeed engine's own accumulation ---------------------------------------------------------


def test_a_deepspeed_engine_loop_is_decided(tmp_path: Path) -> None:
    source = """
    import deepspeed

    from nets import Net, make_loader

    config = {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 4,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}
    net = Net()
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    for epoch in range(3):
        for x, y in make_loader():
            engine.backward(engine(x, y))
            engine.step()
    """
    assert _loop_reasons(tmp_path, {"train.py": source}) == [()]
