"""Entries whose simulated runs never reached the backward the code reaches, or drew no microbatch
(field trials 54 and 55: "no run reached a backward", "no run drew a microbatch"). Each shape below,
reduced from real trainers in our own words, was undecided with those reasons; each is now decided,
or is no accumulation loop at all:

- a Trainer subclass of Hugging Face's that runs a loop of its own and calls the ``training_step`` it
  inherits: the run follows the Trainer's method (``transformers.INHERITED_METHODS``);
- a run-level flag tested first where no branch trains (``if self.is_training: log(...)``) and again
  where one does: check's few runs spent themselves on later flags with the flag false;
- a set-up method that calls ``self.denoiser.train()`` on a model a helper of the project hands back (or a
  wrapper handed the model itself): it reached the class's own ``train`` loop by name only, so it
  was a driver whose runs drew nothing, and the tests around it counted as events;
- a helper that steps the optimizer and its LR scheduler after backwards made elsewhere: it draws no
  microbatch and runs no forward, so it is no accumulation loop (the scheduler's step is no update)."""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import NO_TRAINING, Simulation, accumulation_loops, entry_points, simulate
from tests.support import lint

NO_REACH = "no run reached a backward"


def checked(code: str) -> list[Simulation]:
    """The entries of ``code`` as ``check`` simulates them (its runs and budgets)."""
    return simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(code))), "train.py", judged_only=True)


def bug_line(code: str) -> int:
    """The line of ``code`` (dedented) that the comment ``the bug`` marks."""
    return next(i for i, text in enumerate(textwrap.dedent(code).splitlines(), 1) if "the bug" in text)


# --- a Trainer subclass's own loop calls the inherited training_step ---------------------------

#: ``{early}`` goes between the group's last backward and its update (a reset there: ACC003),
#: ``{late}`` after the update
OWN_LOOP = """
    from transformers import Trainer


    class ProbeTrainer(Trainer):
        def _inner_training_loop(self, batch_size=None, args=None):
            loader = self.get_train_dataloader()
            model = self.model
            for epoch in range(int(args.num_train_epochs)):
                for step, inputs in enumerate(loader):
                    if args.zeroth_order:
                        self.estimate(model, inputs)
                    else:
                        self.training_step(model, inputs)
                    if (step + 1) % args.gradient_accumulation_steps == 0 or step + 1 == len(loader):
                        {early}
                        self.optimizer.step()
                        self.lr_scheduler.step()
                        {late}

        def estimate(self, model, inputs):
            return model(**inputs)
"""
GOOD_OWN_LOOP = OWN_LOOP.format(early="pass", late="model.zero_grad()")
BAD_OWN_LOOP = OWN_LOOP.format(early="model.zero_grad()  # the bug: the update applies nothing", late="pass")


def test_an_inherited_training_step_runs_the_trainers_backward():
    (result,) = checked(GOOD_OWN_LOOP)
    assert result.decided, result.reasons()
    assert result.symbols == ("args.gradient_accumulation_steps",)
    trace = next(t for t in result.traces if t.configuration.microbatches == 2 * t.configuration.accumulation)
    kinds = [e.kind.name for e in trace.events if e.epoch == 0]
    assert kinds.count("BACKWARD") == trace.configuration.microbatches and kinds.count("UPDATE") == 2
    assert accumulation_loops([result]) == [()]


def test_the_inherited_training_step_finds_the_reset_before_the_update():
    assert lint(GOOD_OWN_LOOP, "ALL") == []
    assert lint(BAD_OWN_LOOP, "ALL") == [("ACC003", bug_line(BAD_OWN_LOOP))]


def test_an_override_of_compute_loss_is_what_the_inherited_training_step_calls():
    overridden = GOOD_OWN_LOOP + """
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            return model(inputs["x"]).sum()
    """
    (result,) = checked(overridden)
    assert result.decided, result.reasons()
    assert any(e.kind.name == "BACKWARD" for t in result.traces for e in t.events)


def test_a_class_that_is_no_trainer_subclass_inherits_no_training_step():
    # the same loop on a class of the project's own: `self.training_step` is nothing the run can follow
    plain = GOOD_OWN_LOOP.replace("from transformers import Trainer", "from mylib import Trainer")
    (result,) = checked(plain)
    assert any(NO_REACH in reason for reason in result.reasons())


# --- a flag tested first where no branch trains --------------------------------------------------

#: the flag ``self.is_training`` is first tested around logging, then around the backward; four flags
#: tested between them take check's three runs unless the flag takes its training side first
FLAG_FIRST = """
    import torch


    class Solver:
        def run_epoch(self, loader, metrics):
            for idx, batch in enumerate(loader):
                y = self.model(batch)
                if self.is_training:
                    metrics["lr"] = self.lr
                if self.cfg.log_norms:
                    metrics["norm"] = y.norm()
                if self.cfg.log_mean:
                    metrics["mean"] = y.mean()
                if self.cfg.log_max:
                    metrics["max"] = y.max()
                if self.cfg.log_min:
                    metrics["min"] = y.min()
                loss = y.pow(2).mean() / self.accum
                if self.is_training:
                    loss.backward()
                    if (idx + 1) % self.accum == 0:
                        {early}
                        self.optimizer.step()
                        {late}
            return metrics
"""
GOOD_FLAG_FIRST = FLAG_FIRST.format(early="pass", late="self.optimizer.zero_grad()")
BAD_FLAG_FIRST = FLAG_FIRST.format(early="self.optimizer.zero_grad()  # the bug: the update applies nothing",
                                   late="pass")


def test_a_flag_tested_first_around_logging_takes_its_training_side_first():
    (result,) = checked(GOOD_FLAG_FIRST)
    assert result.decided, result.reasons()
    assert all(dict(t.choices)["self.is_training"] for t in result.traces)
    assert accumulation_loops([result]) == [()]


def test_the_training_side_taken_first_finds_the_reset_before_the_update():
    assert lint(GOOD_FLAG_FIRST, "ALL") == []
    assert lint(BAD_FLAG_FIRST, "ALL") == [("ACC003", bug_line(BAD_FLAG_FIRST))]


# --- a model a project helper hands back has no trainer's train() --------------------------------

HANDED_BACK = """
    import torch


    def checkpointed(module, every=1):
        if every > 1:
            module.enable_checkpointing(every)
        return module


    class Pipeline:
        def get_module(self, name):
            return self.modules[name]

        def setup(self, args):
            self.denoiser = self.get_module("denoiser")
            self.denoiser.requires_grad_(True)
            self.denoiser.train()
            if args.checkpointing:
                self.denoiser = checkpointed(self.denoiser, args.every)
            self.optimizer = torch.optim.AdamW(self.denoiser.parameters(), lr=args.lr)
            self.accum = args.accum

        def train(self, loader):
            for step, batch in enumerate(loader):
                loss = self.denoiser(batch).mean() / self.accum
                loss.backward()
                if (step + 1) % self.accum == 0:
                    {early}
                    self.optimizer.step()
                    {late}
                if step % self.save_every == 0:
                    self.denoiser.eval()
                    self.save()
                    self.denoiser.train()

        def save(self):
            torch.save(self.denoiser.state_dict(), "denoiser.pt")
"""
GOOD_HANDED_BACK = HANDED_BACK.format(early="pass", late="self.optimizer.zero_grad()")
BAD_HANDED_BACK = HANDED_BACK.format(early="self.optimizer.zero_grad()  # the bug: the update applies nothing",
                                     late="pass")


def test_a_set_up_that_trains_a_handed_back_model_is_no_driver():
    module = ModuleFunctions(cst.parse_module(textwrap.dedent(GOOD_HANDED_BACK)))
    assert [(e.kind, e.name) for e in entry_points(module)] == [("function", "Pipeline.train")]
    (result,) = checked(GOOD_HANDED_BACK)
    assert result.decided, result.reasons()
    assert accumulation_loops([result]) == [()]


def test_the_handed_back_models_loop_finds_the_reset_before_the_update():
    assert lint(GOOD_HANDED_BACK, "ALL") == []
    assert lint(BAD_HANDED_BACK, "ALL") == [("ACC003", bug_line(BAD_HANDED_BACK))]


def test_a_factory_that_builds_a_project_trainer_still_reaches_its_loop():
    # `self.trainer = self.make_trainer()` builds a class of the project: its `train()` runs the loop
    factory = """
        import torch


        class Trainer:
            def train(self, loader, optimizer, accum):
                for step, batch in enumerate(loader):
                    self.net(batch).mean().backward()
                    if (step + 1) % accum == 0:
                        optimizer.step()
                        optimizer.zero_grad()


        class App:
            def make_trainer(self):
                return Trainer()

            def run(self, loader, optimizer, accum):
                self.trainer = self.make_trainer()
                self.trainer.train(loader, optimizer, accum)
    """
    module = ModuleFunctions(cst.parse_module(textwrap.dedent(factory)))
    assert ("driver", "App.run") in [(e.kind, e.name) for e in entry_points(module)]


# --- a helper that steps the optimizer and its scheduler -----------------------------------------

STEPPER = """
    import torch


    class Wrapper(torch.nn.Module):
        def __init__(self, net, lr):
            super().__init__()
            self.net = net
            self.optimizer = torch.optim.Adam(net.parameters(), lr=lr)
            self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda n: 1.0)

        def update(self):
            if self.max_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.max_norm)
            self.optimizer.step()
            self.optimizer.zero_grad()
            if not self.skipped:
                self.scheduler.step()
            if self.use_ema:
                self.ema.update()

        def forward(self, x, chunks):
            total = 0.0
            for part in x.chunk(chunks):
                loss = self.net(part).mean() / chunks
                total += loss.item()
                if self.training:
                    loss.backward()
            return total
"""


def test_a_helper_that_steps_the_optimizer_and_its_scheduler_is_no_accumulation_loop():
    results = {r.entry.name: r for r in checked(STEPPER)}
    assert results["Wrapper.update"].undecided == [NO_TRAINING]
    assert accumulation_loops(list(results.values())) == []
    assert lint(STEPPER, "ALL") == []


def test_a_helper_whose_step_may_run_a_backward_stays_an_undecided_loop():
    # an engine's `step()` (known by its name only) may run a backward on data the code does not show
    engine = STEPPER.replace("self.optimizer.step()", "self.engine.step()")
    results = {r.entry.name: r for r in checked(engine)}
    assert any(NO_REACH in reason for reason in results["Wrapper.update"].reasons())
    assert len(accumulation_loops(list(results.values()))) == 1
