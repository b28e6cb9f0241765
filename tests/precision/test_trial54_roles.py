"""Reduced shapes from field trial 54 (diffusion fine-tuning, LLM pre-training with an RL
generation test, speech, video-kernel tests), rewritten as small synthetic snippets (no fetched
code): roles that a name suggests and the use or the construction contradicts, and loops counted
as accumulation loops that are none.

- a diffusion noise scheduler (``noise_scheduler``, ``self.sd.noise_scheduler``) stepped on every
  microbatch with the model's output is no LR scheduler: its ``step(model_output, timestep,
  sample)`` returns the previous sample (ACC304 was a false alarm);
- a generation engine (``self.engine = LLM(...)``, or one whose ``step()`` result the code reads)
  is no DeepSpeed engine, whatever it is named;
- a profiler's ``step()`` is no optimizer update, and a plain loop whose only odd call it is is no
  accumulation loop (it was counted, undecided by the budget); fastprogress's ``master_bar`` passes
  over what it wraps;
- a gradient test with no optimizer update anywhere, and a loop that updates once per pass, are no
  accumulation loops, however else their runs end.

Each good shape has a twin where a real LR scheduler or optimizer is misused: the finding stays.
"""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import NO_UPDATE, Simulation, accumulation_loops, simulate
from tests.support import lint


def checked(source: str) -> list[Simulation]:
    """The entries of ``source`` as ``check`` simulates them (its budget, its configurations)."""
    return simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(source))), "train.py", judged_only=True)


def line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(textwrap.dedent(source).splitlines(), 1) if text in line)


# --- a diffusion noise scheduler is no LR scheduler ---------------------------------------------

DENOISING = """
import torch
from diffusers import DDPMScheduler, FlowMatchEulerDiscreteScheduler

ACCUM = 4
net = torch.nn.Linear(8, 8)
opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
lr_sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
BUILD
loader = torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=4)

for i, clean in enumerate(loader):
    noise = torch.randn_like(clean)
    t = torch.randint(0, 1000, (clean.shape[0],))
    pred = net(clean + noise)
    STEP
    loss = (prev - clean).pow(2).mean() / ACCUM
    loss.backward()
    if (i + 1) % ACCUM == 0:
        opt.step()
        lr_sched.step()  # the LR schedule
        opt.zero_grad()
"""

BUILT = 'noise_scheduler = DDPMScheduler.from_pretrained("base", subfolder="scheduler")'
STEPPED = "prev = noise_scheduler.step(pred, t, clean).prev_sample"


@pytest.mark.parametrize(("build", "step"), [
    (BUILT, STEPPED),
    ("noise_scheduler = FlowMatchEulerDiscreteScheduler(shift=3.0)", "prev = noise_scheduler.step(pred, t, clean)[0]"),
    # no construction in view: the shape of the call alone
    ("noise_scheduler = make_noise()", STEPPED),
    ("noise_scheduler = make_noise()", "prev = noise_scheduler.step(pred, t, clean, return_dict=False)[0]"),
    ("noise_scheduler = make_noise()", "prev = noise_scheduler.step(model_output=pred, timestep=t, sample=clean)"),
    ("noise_scheduler = make_noise()", "prev = noise_scheduler.step(pred, t).prev_sample"),
])
def test_a_noise_scheduler_stepped_every_microbatch_is_no_lr_schedule(build: str, step: str) -> None:
    source = DENOISING.replace("BUILD", build).replace("STEP", step)
    assert lint(source, "ALL") == []
    (result,) = checked(source)
    assert result.decided, result.reasons()
    assert "noise_scheduler" not in [fact.label for fact in result.roles]


def test_the_lr_scheduler_beside_a_noise_scheduler_stepped_every_microbatch_is_still_found() -> None:
    source = DENOISING.replace("BUILD", BUILT).replace("STEP", STEPPED + "\n    lr_sched.step()  # every microbatch")
    source = source.replace("        lr_sched.step()  # the LR schedule\n", "")
    assert lint(source) == [("ACC304", line_of(source, "# every microbatch"))]


def test_an_lr_scheduler_named_like_a_noise_scheduler_still_steps_the_schedule() -> None:
    """The name does not clear a real LR scheduler: ``noise_scheduler.step()`` with no argument,
    built by torch, stepped on every microbatch."""
    source = DENOISING.replace("BUILD", "noise_scheduler = torch.optim.lr_scheduler.StepLR(opt, 10)").replace(
        "STEP", "prev = pred\n    noise_scheduler.step()  # every microbatch")
    assert lint(source) == [("ACC304", line_of(source, "# every microbatch"))]


TRAINER = """
import torch


class Trainer:
    def __init__(self, sd, net, opt, sched, accum):
        self.sd, self.net, self.optimizer, self.lr_scheduler, self.accum = sd, net, opt, sched, accum

    def denoise(self, pred, t, noisy):
        return self.sd.noise_scheduler.step(pred, t, noisy, return_dict=False)[0]

    def train(self, loader):
        for i, (clean, t) in enumerate(loader):
            noisy = clean + torch.randn_like(clean)
            out = self.denoise(self.net(noisy), t, noisy)
            loss = (out - clean).pow(2).mean() / self.accum
            loss.backward()
            if (i + 1) % self.accum == 0:
                self.optimizer.step()
                SCHEDULE
                self.optimizer.zero_grad()
"""


def test_a_noise_scheduler_stepped_in_a_helper_method_is_no_lr_schedule() -> None:
    assert lint(TRAINER.replace("SCHEDULE", "self.lr_scheduler.step()"), "ALL") == []


def test_the_trainers_lr_scheduler_stepped_every_microbatch_is_still_found() -> None:
    source = TRAINER.replace("SCHEDULE", "pass").replace(
        "            loss.backward()\n", "            loss.backward()\n            self.lr_scheduler.step()  # here\n")
    assert lint(source) == [("ACC304", line_of(source, "# here"))]


# --- a generation engine is no DeepSpeed engine -------------------------------------------------

PARITY = """
import deepspeed
import torch
from vllm import LLM


class Parity:
    def setup(self, net, accum):
        BUILD
        self.net = net
        self.accum = accum
        self.opt = torch.optim.SGD(net.parameters(), lr=0.1)

    def run(self, batches):
        self.setup(torch.nn.Linear(4, 4), 4)
        for i, b in enumerate(batches):
            loss = self.net(b).sum() / self.accum
            loss.backward()
            GENERATE
            if (i + 1) % self.accum == 0:
                self.opt.step()
                self.opt.zero_grad()
"""


@pytest.mark.parametrize(("build", "generate"), [
    ('self.engine = LLM(model="m")', "self.engine.step()"),
    # built where the run does not look: the result of its step is read
    ("pass", "outputs = list(self.engine.step())"),
    ("pass", "for out in self.engine.step():\n                print(out)"),
])
def test_a_generation_engine_stepped_every_microbatch_is_no_deepspeed_engine(build: str, generate: str) -> None:
    source = PARITY.replace("BUILD", build).replace("GENERATE", generate)
    (result,) = checked(source)
    assert result.decided, result.reasons()
    assert lint(source, "ALL") == []


def test_an_engine_known_by_its_name_in_a_deepspeed_module_still_decides_its_cadence() -> None:
    """The twin: nothing built it in view and its step's result is not read: a DeepSpeed engine by
    its name, whose cadence the run leaves open."""
    (result,) = checked(PARITY.replace("BUILD", "pass").replace("GENERATE", "self.engine.step()"))
    assert not result.decided
    assert any("DeepSpeed engine" in reason for reason in result.reasons())


def test_a_reset_every_microbatch_beside_a_generation_engine_is_still_found() -> None:
    source = PARITY.replace("BUILD", 'self.engine = LLM(model="m")').replace("GENERATE", "self.engine.step()")
    source = source.replace("            if (i + 1) % self.accum == 0:\n                self.opt.step()\n"
                            "                self.opt.zero_grad()\n",
                            "            self.opt.zero_grad()  # every microbatch\n"
                            "            if (i + 1) % self.accum == 0:\n                self.opt.step()\n")
    assert lint(source) == [("ACC001", line_of(source, "# every microbatch"))]


# --- a profiler's step, fastprogress's bars -----------------------------------------------------

PROFILED = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from fastprogress import master_bar


def train(model, ds, epochs=3, total=100, profiler=None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-4, total_steps=total)
    scaler = torch.cuda.amp.GradScaler()
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    bar = master_bar(range(epochs))
    for epoch in bar:
        for x, y in loader:
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            sched.step()
            if profiler is not None:
                profiler.step()


train(torch.nn.Linear(8, 1), TensorDataset(torch.randn(64, 8), torch.randn(64, 1)))
"""


def test_a_plain_loop_that_steps_a_profiler_is_no_accumulation_loop() -> None:
    assert accumulation_loops(checked(PROFILED)) == []
    assert lint(PROFILED, "ALL") == []


ACCUMULATING_PROFILED = """
import torch
from fastprogress import master_bar, progress_bar

ACCUM = 4
net = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, 10)
loader = torch.utils.data.DataLoader(torch.randn(64, 8), batch_size=4)
prof = torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=2))

for epoch in master_bar(range(3)):
    for i, x in enumerate(progress_bar(loader)):
        (net(x).pow(2).mean() / ACCUM).backward()
        prof.step()
        SCHEDULE_EVERY_MICROBATCH
        if (i + 1) % ACCUM == 0:
            opt.step()
            SCHEDULE_EVERY_UPDATE
            opt.zero_grad()
"""


def test_a_profiler_stepped_every_microbatch_of_an_accumulating_loop_is_no_update() -> None:
    source = ACCUMULATING_PROFILED.replace("SCHEDULE_EVERY_MICROBATCH", "pass").replace(
        "SCHEDULE_EVERY_UPDATE", "sched.step()")
    (result,) = checked(source)
    assert result.decided, result.reasons()
    assert accumulation_loops([result]) == [()]
    # (its epoch tail, divided by A, is ACC005's; no schedule rule fires)
    assert lint(source, "ALL") == [("ACC005", line_of(source, "% ACCUM == 0"))]


def test_the_lr_scheduler_beside_a_profiler_stepped_every_microbatch_is_still_found() -> None:
    source = ACCUMULATING_PROFILED.replace("SCHEDULE_EVERY_MICROBATCH", "sched.step()  # here").replace(
        "SCHEDULE_EVERY_UPDATE", "pass")
    assert ("ACC304", line_of(source, "# here")) in lint(source)


# --- no optimizer update, or one per pass: no accumulation loop ---------------------------------

KERNEL_TEST = """
import torch


def similarity(a, b):
    fa, fb = a.flatten(), b.flatten()
    na, nb = torch.norm(fa), torch.norm(fb)
    if na == 0 or nb == 0:
        return 0.0
    return (torch.dot(fa, fb) / (na * nb)).item()


def test_backward():
    q = torch.randn(2, 4, 64, 16, requires_grad=True)
    ref = q.clone().detach().requires_grad_(True)
    out, out_ref = kernel(q), ref.softmax(-1)
    dout = torch.randn_like(out)
    out.backward(dout)
    out_ref.backward(dout)
    print(similarity(q.grad, ref.grad))


def test_shapes_backward():
    for z, h, n in [(1, 2, 64), (2, 4, 128)]:
        q = torch.randn(z, h, n, 16, requires_grad=True)
        ref = q.clone().detach().requires_grad_(True)
        out, out_ref = kernel(q), ref.softmax(-1)
        dout = torch.randn_like(out)
        out.backward(dout)
        out_ref.backward(dout)
        UPDATE
        print(similarity(q.grad, ref.grad))


if __name__ == "__main__":
    test_backward()
    test_shapes_backward()
"""


def test_a_gradient_test_with_no_update_anywhere_is_no_accumulation_loop() -> None:
    """The runs stop at a condition on the gradients (``norm == 0``), so they leave the loop
    undecided; with no ``step()`` anywhere the code reaches, it still forms no group."""
    results = checked(KERNEL_TEST.replace("UPDATE", "pass"))
    assert [NO_UPDATE] in [r.undecided for r in results]
    assert accumulation_loops(results) == []


def test_a_gradient_test_that_does_update_under_a_condition_is_still_counted() -> None:
    results = checked(KERNEL_TEST.replace("UPDATE", "if z > 1:\n            optimizer.step()"))
    assert [NO_UPDATE] not in [r.undecided for r in results]
    assert accumulation_loops(results)


STEPS = """
import torch

NUM_STEPS = 5


class Trainer:
    def forward_backward_step(self, inputs, labels):
        if self.pipelined:
            losses = []
            self.schedule.step(inputs, target=labels, losses=losses)
            return torch.stack(losses).sum()
        loss = self.model(inputs).sum()
        loss.backward()
        return loss


class Harness:
    def run_steps(self, model):
        trainer = build_trainer(model)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        for _ in range(NUM_STEPS):
            optimizer.zero_grad()
            BACKWARD
            optimizer.step()
        return loss
"""


def test_a_range_loop_that_updates_once_per_pass_is_no_accumulation_loop() -> None:
    """A test's loop whose backward the runs do not reach (the trainer is built out of view): one
    update per pass, and a pipeline schedule's ``step(x, target=, losses=)`` is no update either."""
    source = STEPS.replace("BACKWARD", "loss = trainer.forward_backward_step(self.inputs, self.labels)")
    assert accumulation_loops(checked(source)) == []


def test_a_range_loop_of_micro_steps_before_its_update_is_still_counted() -> None:
    micro = "for _ in range(4):\n                loss = trainer.forward_backward_step(self.inputs, self.labels)"
    assert len(accumulation_loops(checked(STEPS.replace("BACKWARD", micro)))) == 1

