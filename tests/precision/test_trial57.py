"""Shapes from the 57th field trial, reduced and written anew (no fetched code).

False positives, now silent, each with a twin that keeps its finding:

- a GAN whose generator updates on every n-th critic step (``k % n == 0``) with its own reset and
  backward under the same test: a training ratio, not an accumulation boundary (ACC006); where the
  critic's loss also reaches the generator and the generator's grads are reset every iteration to
  discard them, ACC001 as well; where the generator's branch also plots a validation sample
  (``next(iter(val_loader))``), the branch was taken for a training phase of its own and the
  loop's form spoke for it;
- an outer loop of updates with an inner ``range(A)`` of microbatches and a held-out forward under
  ``torch.no_grad()`` every few updates: that forward was counted as a microbatch, so groups of
  A + 1 were reported (ACC006);
- a ``LambdaLR`` stepped every microbatch whose warmup is a fraction of the loop's own count of
  microbatches: the schedule matches the run, as the spec's exemption for a horizon counted in
  microbatches says (ACC304).

- ``accumulate()`` entered twice per microbatch in two blocks one after the other (ACC501, found
  from the runs since trial 69).

Misses, as strict xfails: a checkpoint tested on an update counter after the ``accumulate()`` block,
outside ``sync_gradients`` (ACC010); a BatchNorm in a model class imported from another module
(ACC901); a scheduler horizon summed over a list of loaders (ACC305).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support import findings, lint

# --- a critic/generator training ratio is no accumulation -----------------------------------------

#: the generator steps on every n-th batch; its reset, backward and step all sit under that test
_CRITIC_RATIO = """
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--critic_updates", type=int, default=5)
cfg = parser.parse_args()

gen = torch.nn.Linear(8, 16)
critic = torch.nn.Linear(16, 1)
gen_opt = torch.optim.RMSprop(gen.parameters())
critic_opt = torch.optim.RMSprop(critic.parameters())
loader = torch.utils.data.DataLoader(range(100), batch_size=4)

for epoch in range(10):
    for k, real in enumerate(loader):
        critic_opt.zero_grad()
        noise = torch.randn(4, 8)
        fake = gen(noise).detach()
        critic_loss = critic(fake).mean() - critic(real).mean()
        critic_loss.backward()
        critic_opt.step()

        if k % cfg.critic_updates == 0:
            gen_opt.zero_grad()
            gen_loss = -critic(gen(noise)).mean()
            gen_loss.backward()
            gen_opt.step()
"""


def test_a_generator_stepped_every_nth_critic_step_is_silent() -> None:
    assert lint(textwrap.dedent(_CRITIC_RATIO), "ALL") == []


def test_a_generator_reset_that_discards_the_critics_stray_gradient_is_silent() -> None:
    source = """
    import argparse
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--critic_updates", type=int, default=5)
    cfg = parser.parse_args()

    gen = torch.nn.Linear(8, 16)
    critic = torch.nn.Linear(16, 1)
    gen_opt = torch.optim.Adam(gen.parameters())
    critic_opt = torch.optim.Adam(critic.parameters())
    loader = torch.utils.data.DataLoader(range(100), batch_size=4)

    for epoch in range(10):
        for k, real in enumerate(loader):
            critic_opt.zero_grad()
            fake = gen(torch.randn(4, 8))
            critic_loss = critic(fake).mean() - critic(real).mean()
            critic_loss.backward()
            critic_opt.step()

            gen_opt.zero_grad()

            if k % cfg.critic_updates == 0:
                gen_loss = -critic(gen(torch.randn(4, 8))).mean()
                gen_loss.backward()
                gen_opt.step()
    """
    assert lint(textwrap.dedent(source), "ALL") == []


def test_a_generator_that_does_accumulate_over_the_critic_ratio_is_still_found() -> None:
    # the twin: the generator's backward runs on every batch and its reset too, the update every n-th
    source = _CRITIC_RATIO.replace(
        "        if k % cfg.critic_updates == 0:\n"
        "            gen_opt.zero_grad()\n"
        "            gen_loss = -critic(gen(noise)).mean()\n"
        "            gen_loss.backward()\n"
        "            gen_opt.step()\n",
        "        gen_opt.zero_grad()\n"
        "        gen_loss = -critic(gen(noise)).mean() / cfg.critic_updates\n"
        "        gen_loss.backward()\n"
        "        if (k + 1) % cfg.critic_updates == 0:\n"
        "            gen_opt.step()\n",
    )
    assert ("ACC001", 24) in lint(textwrap.dedent(source))


def test_a_generator_branch_that_also_plots_a_validation_sample_is_silent() -> None:
    # the plot helper takes `next(iter(val_loader))`, a look at the data: the branch is the generator's
    # step, not a training phase with data of its own
    source = """
    import torch

    N_CRITIC = 5
    gen = torch.nn.Linear(8, 16)
    critic = torch.nn.Linear(16, 1)
    gen_opt = torch.optim.Adam(gen.parameters())
    critic_opt = torch.optim.Adam(critic.parameters())
    loader = torch.utils.data.DataLoader(range(100), batch_size=4)
    val_loader = torch.utils.data.DataLoader(range(20), batch_size=4)


    def plot_samples(tag):
        sample = next(iter(val_loader))
        print(tag, gen(sample).shape)


    for epoch in range(10):
        for k, real in enumerate(loader):
            fake = gen(torch.randn(4, 8))
            critic_opt.zero_grad()
            critic_loss = critic(fake.detach()).mean() - critic(real).mean()
            critic_loss.backward()
            critic_opt.step()

            gen_opt.zero_grad()
            if k % N_CRITIC == 0:
                gen_loss = -critic(gen(torch.randn(4, 8))).mean()
                gen_loss.backward()
                gen_opt.step()
                if k % 100 == 0:
                    plot_samples(k)
    """
    assert lint(textwrap.dedent(source), "ALL") == []


# --- a held-out forward under no_grad is no microbatch --------------------------------------------

_UPDATE_LOOP = """
import torch

ACCUM = 4
VAL_EVERY = 50

net = torch.nn.Linear(8, 8)
opt = torch.optim.Adam(net.parameters())


def forever(loader):
    while True:
        for item in loader:
            yield item


train_stream = forever(torch.utils.data.DataLoader(range(1000), batch_size=2))
val_stream = forever(torch.utils.data.DataLoader(range(100), batch_size=2))

for update in range(10000):
    net.train()
    for _ in range(ACCUM):
        loss = net(next(train_stream)).mean() / ACCUM
        loss.backward()
    opt.step()
    opt.zero_grad()
{held_out}"""

_HELD_OUT = """
    if update % VAL_EVERY == 0:
        net.eval()
        with torch.no_grad():
            held_out = net(next(val_stream)).mean()
        print(held_out.item())
"""


def test_a_held_out_forward_between_groups_is_silent() -> None:
    assert lint(textwrap.dedent(_UPDATE_LOOP.format(held_out=_HELD_OUT))) == []


def test_the_update_loop_without_the_held_out_forward_is_silent() -> None:
    assert lint(textwrap.dedent(_UPDATE_LOOP.format(held_out=""))) == []


# --- a per-microbatch scheduler whose warmup is counted in microbatches ---------------------------

_ROUNDS = """
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=1000)
parser.add_argument("--accum", type=int, default=4)
parser.add_argument("--warmup_frac", type=float, default=0.1)
cfg = parser.parse_args()

policy = torch.nn.Linear(8, 8)
opt = torch.optim.AdamW(policy.parameters())
ramp = {ramp}


def factor(position):
    if position < ramp:
        return position / ramp
    return 1.0


sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=factor)
opt.zero_grad()
for rnd in range(cfg.rounds):
    loss = policy(torch.randn(2, 8)).mean() / cfg.accum
    loss.backward()
    sched.step()
    if (rnd + 1) % cfg.accum == 0:
        opt.step()
        opt.zero_grad()
"""


def test_a_scheduler_stepped_per_microbatch_with_a_microbatch_warmup_is_silent() -> None:
    assert lint(textwrap.dedent(_ROUNDS.format(ramp="int(cfg.warmup_frac * cfg.rounds)"))) == []


#: the same inside a function: the warmup a local, the ramp a nested function, the loop under tqdm
_ROUNDS_IN_MAIN = """
import argparse
import torch
from tqdm import tqdm


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--accum", type=int, default=4)
    cfg = parser.parse_args()
    policy = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(policy.parameters())
    ramp = {ramp}

    def factor(position):
        return min(1.0, position / ramp)

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=factor)
    opt.zero_grad()
    for rnd in tqdm(range(cfg.rounds)):
        loss = policy(torch.randn(2, 8)).mean() / cfg.accum
        loss.backward()
        sched.step()
        if (rnd + 1) % cfg.accum == 0:
            opt.step()
            opt.zero_grad()
"""


def test_the_microbatch_warmup_of_a_nested_ramp_under_tqdm_is_silent_too() -> None:
    assert lint(textwrap.dedent(_ROUNDS_IN_MAIN.format(ramp="int(0.1 * cfg.rounds)"))) == []
    assert [code for code, _ in lint(textwrap.dedent(_ROUNDS_IN_MAIN.format(
        ramp="int(0.1 * cfg.rounds / cfg.accum)")))] == ["ACC304"]


def test_a_scheduler_stepped_per_microbatch_with_an_update_warmup_is_acc304() -> None:
    source = _ROUNDS.format(ramp="int(cfg.warmup_frac * cfg.rounds / cfg.accum)")
    assert lint(textwrap.dedent(source)) == [("ACC304", 27)]


# --- Accelerate: two accumulate() blocks per microbatch; an update-keyed save ---------------------

_PREPARED = """
import torch
from accelerate import Accelerator

accelerator = Accelerator(gradient_accumulation_steps=4)
net = torch.nn.Linear(8, 8)
opt = torch.optim.AdamW(net.parameters())
loader = torch.utils.data.DataLoader(range(100), batch_size=4)
net, opt, loader = accelerator.prepare(net, opt, loader)
"""


def test_a_forward_block_and_a_backward_block_each_entering_accumulate_is_acc501() -> None:
    source = _PREPARED + textwrap.dedent("""
    for epoch in range(3):
        for batch in loader:
            with accelerator.accumulate(net):
                loss = net(batch).mean()
            with accelerator.accumulate(net):
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
    """)
    assert [code for code, _ in lint(source)] == ["ACC501"]


def test_one_accumulate_block_per_microbatch_is_silent() -> None:
    source = _PREPARED + textwrap.dedent("""
    for epoch in range(3):
        for batch in loader:
            with accelerator.accumulate(net):
                loss = net(batch).mean()
                accelerator.backward(loss)
                opt.step()
                opt.zero_grad()
    """)
    assert lint(source, "ALL") == []


_KEYED_SAVE = _PREPARED + """
done = 0
for epoch in range(3):
    for batch in loader:
        with accelerator.accumulate(net):
            accelerator.backward(net(batch).mean())
            opt.step()
            opt.zero_grad()
        if accelerator.sync_gradients:
            done += 1
{save}"""


@pytest.mark.xfail(strict=True, reason="ACC010 does not yet read an update counter bumped under sync_gradients and "
                   "tested after the accumulate() block: the save runs on A microbatches per update")
def test_a_save_keyed_on_updates_outside_the_sync_test_is_acc010() -> None:
    save = """        if done % 1000 == 0 and done > 0:
            torch.save(net.state_dict(), f"ckpt-{done}.pt")
"""
    assert [code for code, _ in lint(textwrap.dedent(_KEYED_SAVE.format(save=save)))] == ["ACC010"]


def test_the_same_save_under_the_sync_test_is_silent() -> None:
    save = """            if done % 1000 == 0:
                torch.save(net.state_dict(), f"ckpt-{done}.pt")
"""
    assert lint(textwrap.dedent(_KEYED_SAVE.format(save=save)), "ALL") == []


# --- ACC901: a model class from another module ----------------------------------------------------

_NETS = """
from torch import nn


def make_norm(width):
    return nn.BatchNorm2d(width)


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.norm = make_norm(16)

    def forward(self, x):
        return self.norm(self.conv(x)).mean()
"""

_FIT = """
import argparse
import torch
{imported}
parser = argparse.ArgumentParser()
parser.add_argument("--accum", type=int, default=1)
args = parser.parse_args()
net = Stem()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(range(96), batch_size=4, drop_last=True)
for epoch in range(3):
    opt.zero_grad()
    for k, x in enumerate(loader):
        (net(x) / args.accum).backward()
        if (k + 1) % args.accum == 0:
            opt.step()
            opt.zero_grad()
"""


@pytest.mark.xfail(strict=True, reason="ACC901 reads the layers of a model class in the checked file only; a class "
                   "imported from the project's other module is not followed")
def test_a_batchnorm_in_a_model_class_from_another_module_is_acc901(tmp_path: Path) -> None:
    files = {"nets.py": _NETS, "train.py": _FIT.format(imported="from nets import Stem\n")}
    assert findings(tmp_path, files) == [("nets.py", "ACC901", 6)]


def test_a_batchnorm_in_a_model_class_of_the_same_file_is_acc901() -> None:
    source = textwrap.dedent(_NETS) + textwrap.dedent(_FIT.format(imported=""))
    assert lint(source, "ALL") == [("ACC901", 6)]


# --- ACC305: a horizon summed over a list of loaders ----------------------------------------------

_HORIZON = """
import torch
from accelerate import Accelerator
from transformers import get_linear_schedule_with_warmup

EPOCHS = 3
accelerator = Accelerator(gradient_accumulation_steps=4)
net = torch.nn.Linear(8, 8)
opt = torch.optim.AdamW(net.parameters())
{loaders}
sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=10, num_training_steps=horizon)
net, opt, sched, {prepared} = accelerator.prepare(net, opt, sched, {prepared})

for epoch in range(EPOCHS):
    for batch in {first}:
        with accelerator.accumulate(net):
            accelerator.backward(net(batch).mean())
            opt.step()
            sched.step()
            opt.zero_grad()
"""


@pytest.mark.xfail(strict=True, reason="the unit of sum(len(dl) for dl in loaders) is not carried through the "
                   "generator expression: a horizon in microbatches for a per-update scheduler goes unseen")
def test_a_horizon_summed_over_a_list_of_loaders_is_acc305() -> None:
    loaders = ("loaders = [torch.utils.data.DataLoader(range(100), batch_size=4)]\n"
               "horizon = sum(len(dl) for dl in loaders) * EPOCHS")
    source = _HORIZON.format(loaders=loaders, prepared="loaders", first="loaders[0]")
    assert [code for code, _ in lint(textwrap.dedent(source))] == ["ACC305"]


def test_a_horizon_from_one_loader_is_acc305() -> None:
    loaders = ("loader = torch.utils.data.DataLoader(range(100), batch_size=4)\n"
               "horizon = len(loader) * EPOCHS")
    source = _HORIZON.format(loaders=loaders, prepared="loader", first="loader")
    assert [code for code, _ in lint(textwrap.dedent(source))] == ["ACC305"]
