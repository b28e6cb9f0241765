"""Extract refactorings keep the verdict: a microbatch body moved into a helper function, a
helper of another module, a method of a step object or a trainer class (built on the loop's
objects) is judged as the loop written inline. Reduced programs of each family fixed: the
accumulate() context, the sync switches, the data-parallel facts, the schedule facts and the
grad leak read in the loop's names through a helper's parameters or a trainer's constructor."""

from __future__ import annotations

from pathlib import Path

from tests.support import findings

DDP_HEADER = """\
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
"""


def codes(tmp_path: Path, files: dict[str, str]) -> list[tuple[str, str, int]]:
    return findings(tmp_path, files)


def test_an_accumulate_factory_passed_to_a_step_helper_is_entered_there(tmp_path: Path) -> None:
    source = """\
    import contextlib
    from accelerate import Accelerator


    def step(enter, net, batch, acc, opt):
        with enter(net):
            acc.backward(net(batch).loss)
            opt.step()
            opt.zero_grad()


    def run(net, opt, data, a, on=True):
        acc = Accelerator(gradient_accumulation_steps=a)
        net, opt, data = acc.prepare(net, opt, data)
        enter = acc.accumulate if on else contextlib.nullcontext
        for batch in data:
            step(enter, net, batch, acc, opt)
    """
    assert codes(tmp_path, {"train.py": source}) == []


def test_two_accumulate_entries_in_another_modules_helper_are_reported_at_the_call(tmp_path: Path) -> None:
    files = {
        "steps.py": """\
        def step(acc, enc, dec, batch, opt):
            with acc.accumulate(enc), acc.accumulate(dec):
                acc.backward(dec(enc(batch)).sum())
                opt.step()
                opt.zero_grad()
        """,
        "train.py": """\
        import torch
        from accelerate import Accelerator
        from steps import step


        def run(enc, dec, data, a):
            acc = Accelerator(gradient_accumulation_steps=a)
            opt = torch.optim.SGD(list(enc.parameters()) + list(dec.parameters()), lr=0.1)
            enc, dec, opt, data = acc.prepare(enc, dec, opt, data)
            for batch in data:
                step(acc, enc, dec, batch, opt)
        """,
    }
    assert codes(tmp_path, files) == [("train.py", "ACC501", 11)]


def test_a_step_counter_handed_to_a_helper_that_steps_the_scheduler_is_no_scheduler_argument(
        tmp_path: Path) -> None:
    files = {
        "steps.py": """\
        def step(net, batch, step, opt, sched, accum):
            (net(batch) / accum).backward()
            if (step + 1) % accum == 0:
                opt.step()
                sched.step()
                opt.zero_grad()
        """,
        "train.py": """\
        from steps import step


        def run(net, data, opt, sched, accum):
            assert len(data) % accum == 0
            for epoch in range(3):
                for step_index, batch in enumerate(data):
                    step(net, batch, step_index, opt, sched, accum)
        """,
    }
    assert [c for c in codes(tmp_path, files) if c[1] == "ACC902"] == []


def test_a_length_assert_of_the_script_that_runs_an_imported_trainer_holds_for_its_loop(tmp_path: Path) -> None:
    trainer = """\
    import deepspeed


    class Runner:
        def __init__(self, loader, engine, accumulation_steps, epochs):
            self.loader = loader
            self.engine = engine
            self.accumulation_steps = accumulation_steps
            self.epochs = epochs

        def fit(self):
            for epoch in range(self.epochs):
                for i, batch in enumerate(self.loader):
                    self.engine.backward(self.engine(batch).sum())
                    if (i + 1) % self.accumulation_steps == 0:
                        self.engine.step()
    """
    script = """\
    import deepspeed
    from trainer import Runner

    ACCUMULATION_STEPS = 4


    def run(net, dataset):
        config = {"gradient_accumulation_steps": ACCUMULATION_STEPS}
        engine, _, loader, _ = deepspeed.initialize(model=net, training_data=dataset, config=config)
        {check}
        Runner(loader, engine, ACCUMULATION_STEPS, 2).fit()
    """
    asserted = script.replace("{check}", "assert len(loader) % ACCUMULATION_STEPS == 0")
    # the gated engine step is reported either way; the script's assert leaves no partial group
    assert codes(tmp_path / "a", {"trainer.py": trainer, "train.py": asserted}) == [("trainer.py", "ACC502", 16)]
    unchecked = script.replace("{check}", "pass")
    assert codes(tmp_path / "b", {"trainer.py": trainer, "train.py": unchecked}) == [
        ("trainer.py", "ACC005", 15), ("trainer.py", "ACC502", 16)]


def test_a_trainer_built_on_a_deepspeed_engine_and_its_scheduler_steps_it_twice(tmp_path: Path) -> None:
    source = """\
    import deepspeed


    class Stepper:
        def __init__(self, eng, sched):
            self.eng = eng
            self.sched = sched

        def run(self, x):
            self.eng.backward(self.eng(x).sum())
            self.eng.step()
            if self.eng.is_gradient_accumulation_boundary():
                self.sched.step()


    def run(net, opt, sched, data, cfg):
        eng, opt, _, sched = deepspeed.initialize(model=net, optimizer=opt, lr_scheduler=sched, config=cfg)
        stepper = Stepper(eng, sched)
        for x in data:
            stepper.run(x)
    """
    assert codes(tmp_path, {"train.py": source}) == [("train.py", "ACC306", 13)]


def test_a_generator_loss_through_the_discriminator_in_a_step_helper_leaks(tmp_path: Path) -> None:
    source = """\
    import torch


    def step(gen, disc, i, opt_d, opt_g, a):
        fake = gen(torch.randn(4, 2))
        (disc(fake.detach()).mean() / a).backward()
        (-disc(fake).mean() / a).backward()
        if (i + 1) % a == 0:
            opt_d.step()
            opt_g.step()
            opt_d.zero_grad()
            opt_g.zero_grad()


    def run(gen, disc, n, a):
        opt_g = torch.optim.Adam(gen.parameters())
        opt_d = torch.optim.Adam(disc.parameters())
        for i in range(n):
            step(gen, disc, i, opt_d, opt_g, a)
    """
    assert codes(tmp_path, {"train.py": source}) == [("train.py", "ACC008", 7)]


def test_a_sync_flag_set_after_the_forward_in_a_helper_is_late(tmp_path: Path) -> None:
    source = DDP_HEADER + """\


    def step(net, x, i, opt, a):
        out = net(x).sum() / a
        net.require_backward_grad_sync = (i + 1) % a == 0
        out.backward()
        if (i + 1) % a == 0:
            opt.step()
            opt.zero_grad()


    def run(net, data, a):
        net = DDP(net)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for i, x in enumerate(data):
            step(net, x, i, opt, a)
    """
    assert ("train.py", "ACC401", 9) in codes(tmp_path, {"train.py": source})


def test_no_sync_of_an_fsdp2_module_held_by_a_trainer_is_a_noop(tmp_path: Path) -> None:
    source = """\
    import contextlib
    import torch
    from torch.distributed.fsdp import fully_shard


    class Trainer:
        def __init__(self, net, opt, a):
            self.net, self.opt, self.a = net, opt, a

        def fit(self, data):
            for i, x in enumerate(data):
                last = (i + 1) % self.a == 0
                with contextlib.nullcontext() if last else self.net.no_sync():
                    (self.net(x).sum() / self.a).backward()
                if last:
                    self.opt.step()
                    self.opt.zero_grad()


    def run(net, data, a):
        fully_shard(net)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        Trainer(net, opt, a).fit(data)
    """
    assert [c for c in codes(tmp_path, {"train.py": source}) if c[1] == "ACC406"] == [("train.py", "ACC406", 13)]


def test_a_learning_rate_written_from_the_microbatch_index_in_a_helper(tmp_path: Path) -> None:
    source = """\
    def lr_at(t, total_updates):
        return 1e-3 * max(0.0, 1 - t / total_updates)


    def step(t, total_updates, opt, net, x, a):
        rate = lr_at(t, total_updates)
        for g in opt.param_groups:
            g["lr"] = rate
        (net(x) / a).backward()
        if (t + 1) % a == 0:
            opt.step()
            opt.zero_grad()


    def run(net, opt, data, a, total_updates):
        for t, x in enumerate(data):
            step(t, total_updates, opt, net, x, a)
    """
    assert ("train.py", "ACC304", 6) in codes(tmp_path, {"train.py": source})


def test_gradients_divided_by_an_all_reduced_count_in_a_helper(tmp_path: Path) -> None:
    source = """\
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP


    def step(x, y, count, net, i, accum, opt):
        count += (y != -100).sum()
        F.cross_entropy(net(x), y, ignore_index=-100, reduction="sum").backward()
        if (i + 1) % accum == 0:
            dist.all_reduce(count)
            grads = [p.grad for p in net.parameters() if p.grad is not None]
            torch._foreach_div_(grads, count)
            opt.step()
            opt.zero_grad()
            count.zero_()
        return count


    def run(net, opt, data, accum, rank):
        net = DDP(net, device_ids=[rank])
        count = torch.zeros(())
        for i, (x, y) in enumerate(data):
            count = step(x, y, count, net, i, accum, opt)
    """
    assert [c for c in codes(tmp_path, {"train.py": source}) if c[1] == "ACC405"] == [("train.py", "ACC405", 24)]


def test_a_rank_handed_to_a_trainer_does_not_shard_the_loader(tmp_path: Path) -> None:
    source = DDP_HEADER + """\


    class Step:
        def __init__(self, net, rank, opt, a):
            self.net, self.rank, self.opt, self.a = net, rank, opt, a

        def run(self, x, i):
            (self.net(x.cuda(self.rank)).sum() / self.a).backward()
            if (i + 1) % self.a == 0:
                self.opt.step()
                self.opt.zero_grad()


    def run(net, dataset, a):
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        net = DDP(net.cuda(rank), device_ids=[rank])
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        data = DataLoader(dataset, batch_size=8, shuffle=True)
        step = Step(net, rank, opt, a)
        for i, x in enumerate(data):
            step.run(x, i)
    """
    assert [c for c in codes(tmp_path, {"train.py": source}) if c[1] == "ACC403"] == [("train.py", "ACC403", 23)]


def test_a_trainers_loader_is_the_one_the_schedule_counts_in_microbatches(tmp_path: Path) -> None:
    source = """\
    import torch

    A = 4


    class Trainer:
        def __init__(self, data, net, opt, sched):
            self.data, self.net, self.opt, self.sched = data, net, opt, sched

        def fit(self, epochs):
            for epoch in range(epochs):
                for i, x in enumerate(self.data):
                    (self.net(x) / A).backward()
                    if (i + 1) % A == 0:
                        self.opt.step()
                        self.sched.step()
                        self.opt.zero_grad()


    def run(net, data, epochs):
        assert len(data) % A == 0
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=epochs * len(data))
        Trainer(data, net, opt, sched).fit(epochs)
    """
    assert [c for c in codes(tmp_path, {"train.py": source}) if c[1] == "ACC305"] == [("train.py", "ACC305", 23)]


def test_a_gan_trainer_of_its_own_module_takes_its_optimizers_from_the_script_that_builds_it(
        tmp_path: Path) -> None:
    files = {
        "gan.py": """\
        import torch


        class Gan:
            def __init__(self, gen, disc, opt_g, opt_d, a):
                self.gen = gen
                self.disc = disc
                self.opt_g = opt_g
                self.opt_d = opt_d
                self.a = a

            def fit(self, n):
                for i in range(n):
                    fake = self.gen(torch.randn(4, 2))
                    (self.disc(fake.detach()).mean() / self.a).backward()
                    (-self.disc(fake).mean() / self.a).backward()
                    if (i + 1) % self.a == 0:
                        self.opt_d.step()
                        self.opt_g.step()
                        self.opt_d.zero_grad()
                        self.opt_g.zero_grad()
        """,
        "train.py": """\
        import torch
        from gan import Gan


        def run(gen, disc, n, a):
            opt_g = torch.optim.Adam(gen.parameters())
            opt_d = torch.optim.Adam(disc.parameters())
            Gan(gen, disc, opt_g, opt_d, a).fit(n)
        """,
    }
    assert codes(tmp_path, files) == [("gan.py", "ACC008", 16)]


def test_an_accumulate_factory_kept_by_a_step_object_is_entered_in_its_method(tmp_path: Path) -> None:
    source = """\
    import contextlib
    from accelerate import Accelerator


    class Step:
        def __init__(self, enter, net, acc, opt):
            self.enter = enter
            self.net = net
            self.acc = acc
            self.opt = opt

        def run(self, batch):
            with self.enter(self.net):
                self.acc.backward(self.net(batch).loss)
                self.opt.step()
                self.opt.zero_grad()


    def run(net, opt, data, a, off=False):
        acc = Accelerator(gradient_accumulation_steps=a)
        net, opt, data = acc.prepare(net, opt, data)
        enter = contextlib.nullcontext if off else acc.accumulate
        step = Step(enter, net, acc, opt)
        for batch in data:
            step.run(batch)
    """
    assert codes(tmp_path, {"train.py": source}) == []
