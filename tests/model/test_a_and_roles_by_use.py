"""A and the roles bound by their use, whatever the code calls them (the metamorphic renaming and
config-inlining pairs): reduced cases in our own words."""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.checks import ALL_RULES
from accumlint.checks.shared.parallel import data_parallel
from accumlint.model import Cadence, Role
from accumlint.model.scopes import Site
from accumlint.pipeline.engine import check_source, rules_for
from tests.support import model_of


def codes(source: str, every: bool = False) -> list[str]:
    """The codes one snippet reports (default rules, or every rule)."""
    rules = rules_for(rule.code for rule in ALL_RULES) if every else None
    return sorted(f.code for f in check_source("snippet.py", textwrap.dedent(source).encode(), rules).findings)


def role_at_last_site(model, name: str) -> Role:  # type: ignore[no-untyped-def]
    """The role of ``name`` as seen at the last site of the function ``train``."""
    scope = next(s for s in model.scopes if isinstance(s.node, cst.FunctionDef) and s.node.name.value == "train")
    site: Site = scope.sites[-1]
    return model.roles.of(cst.parse_expression(name), site).role


# --- A by its use ---------------------------------------------------------------------------


def test_the_gate_modulus_written_as_a_literal_is_a() -> None:
    model = model_of("""
    for i, b in enumerate(loader):
        (model(b) / 4).backward()
        if (i + 1) % 4 == 0:
            opt.step()
            opt.zero_grad()
    """)
    assert model.accumulation_aliases == {"4"}
    assert model.is_accumulation_name(cst.Integer("4"))
    assert not model.is_accumulation_name(cst.Integer("2"))


def test_a_literal_divisor_without_a_group_of_that_size_is_no_a() -> None:
    model = model_of("""
    for i, b in enumerate(loader):
        (model(b) / 4).backward()
        opt.step()
        opt.zero_grad()
    """)
    assert model.accumulation_aliases == set()


def test_the_bound_of_a_microbatch_loop_before_the_update_is_a() -> None:
    model = model_of("""
    def train(net, opt, stream, k):
        for _ in range(k):
            (net(next(stream)) / k).backward()
        opt.step()
        opt.zero_grad()
    """)
    assert "k" in model.accumulation_aliases


UNGATED = """
import torch
def train(net, loader, k):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    {assertion}
    for x, y in loader:
        loss = (net(x) - y).pow(2).mean() / k
        loss.backward()
        opt.step()
        opt.zero_grad()
"""


def test_a_loss_divisor_the_loaders_length_is_a_multiple_of_is_a() -> None:
    # the length asserted to be whole groups of k, the loss divided by k: written for
    # accumulation, yet the update runs on every microbatch
    assert codes(UNGATED.format(assertion="assert len(loader) % k == 0")) == ["ACC004"]


def test_a_loss_divided_by_a_value_alone_is_no_accumulation() -> None:
    assert codes(UNGATED.format(assertion="pass")) == []


def test_a_modulo_around_a_clip_with_the_update_outside_is_a_group_size() -> None:
    assert codes("""
    import torch
    def train(net, loader, k):
        opt = torch.optim.AdamW(net.parameters(), lr=3e-5)
        n = 0
        for x in loader:
            net(x).sum().backward()
            n += 1
            if n % k == 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            opt.zero_grad()
    """) == ["ACC004"]


def test_a_modulo_around_a_print_only_binds_nothing() -> None:
    model = model_of("""
    import torch
    def train(net, loader, k):
        opt = torch.optim.AdamW(net.parameters(), lr=3e-5)
        for i, x in enumerate(loader):
            (net(x).sum() / k).backward()
            if i % k == 0:
                print(i)
            opt.step()
            opt.zero_grad()
    """)
    assert model.accumulation_aliases == set()


def test_a_gpu_count_in_a_plainly_named_gate_divisor_is_acc404() -> None:
    found = codes("""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    def main(loader, net, target, m):
        dist.init_process_group("nccl")
        g = target // (m * torch.cuda.device_count())
        ddp = DistributedDataParallel(net)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for i, (x, y) in enumerate(loader):
            (ddp(x) - y).pow(2).mean().div(g).backward()
            if (i + 1) % g == 0:
                opt.step()
                opt.zero_grad()
    """)
    assert "ACC404" in found


# --- roles by their use ---------------------------------------------------------------------


def test_a_parameter_stepped_and_reset_is_an_optimizer() -> None:
    model = model_of("""
    def train(a, b, loader):
        for x in loader:
            a(x).sum().backward()
            b.step()
            b.zero_grad()
    """)
    assert role_at_last_site(model, "b") is Role.OPTIMIZER
    assert role_at_last_site(model, "a") is Role.UNKNOWN  # called: a forward, no optimizer


def test_a_model_that_resets_and_a_scheduler_that_steps_are_no_optimizers() -> None:
    model = model_of("""
    def train(a, s, o, loader):
        for x in loader:
            a(x).sum().backward()
            o.step()
            s.step()
            a.zero_grad()
    """)
    assert {role_at_last_site(model, name) for name in ("a", "s", "o")} == {Role.UNKNOWN}


def test_param_groups_make_an_optimizer_and_unscale_a_scaler() -> None:
    model = model_of("""
    def train(o, c, net, loader, lr):
        for x in loader:
            for g in o.param_groups:
                g["lr"] = lr
            c.scale(net(x).sum()).backward()
            c.unscale_(o)
            c.step(o)
            c.update()
    """)
    assert role_at_last_site(model, "o") is Role.OPTIMIZER
    assert role_at_last_site(model, "c") is Role.SCALER


def test_what_a_helper_returns_gives_its_result_a_role() -> None:
    model = model_of("""
    from torch.utils.data import DataLoader
    def make(ds):
        return DataLoader(ds, batch_size=8)
    def train(ds, net, opt):
        d = make(ds)
        for x in d:
            net(x).sum().backward()
            opt.step()
    """)
    assert role_at_last_site(model, "d") is Role.LOADER


def test_a_model_called_plainly_runs_forwards_in_the_simulation() -> None:
    model = model_of("""
    import torch
    from torch import nn
    def main(loader):
        v = nn.Linear(4, 1)
        o = torch.optim.SGD(v.parameters(), lr=0.1)
        for i, (x, y) in enumerate(loader):
            ((v(x) - y).pow(2).mean() / 2).backward()
            if (i + 1) % 2 == 0:
                o.step()
                o.zero_grad()
    main(None)
    """)
    letters = {"".join(e.kind.letter or "" for e in t.events) for s in model.simulations for t in s.traces}
    assert letters and all(trace.startswith("FBFBSZ") for trace in letters)


def test_a_rate_is_known_by_its_shape_not_its_name() -> None:
    assert codes("""
    import time
    import torch
    def train(net, loader, k):
        o = torch.optim.SGD(net.parameters(), lr=0.1)
        t = time.perf_counter()
        for i, x in enumerate(loader):
            c = x.shape[0]
            (net(x).sum() / k).backward()
            if (i + 1) % k == 0:
                o.step()
                o.zero_grad()
                r = c / (time.perf_counter() - t)
                print(r)
                t = time.perf_counter()
    """) == ["ACC903"]


def test_a_parameter_the_loop_draws_from_has_a_tail_that_the_flush_weighs() -> None:
    assert "ACC005" in codes("""
    import torch
    def train(net, batches, o, k):
        for i, x in enumerate(batches):
            (net(x).sum() / k).backward()
            if (i + 1) % k == 0:
                o.step()
                o.zero_grad()
        if (i + 1) % k != 0:
            o.step()
            o.zero_grad()
    """)


def test_the_count_of_what_a_microbatch_loop_iterates_is_a() -> None:
    model = model_of("""
    def train(net, opt, batch, size):
        parts = batch.split(size)
        k = len(parts)
        for part in parts:
            (net(part).sum() / k).backward()
        opt.step()
        opt.zero_grad()
    """)
    assert "k" in model.accumulation_aliases


def test_a_name_holding_the_rank_shards_a_dataset_whatever_it_is_called() -> None:
    model = model_of("""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, Subset
    def main(ds, net):
        r, w = dist.get_rank(), dist.get_world_size()
        d = DataLoader(Subset(ds, range(r, len(ds), w)), batch_size=8, shuffle=True)
        m = DistributedDataParallel(net)
        return d, m
    """)
    assert data_parallel(model).rank_sharded


def test_a_group_drawn_ahead_counts_a() -> None:
    model = model_of("""
    def train(net, opt, it, k, n):
        for _ in range(n):
            drawn = [next(it) for _ in range(k)]
            for x in drawn:
                (net(x).sum() / k).backward()
            opt.step()
            opt.zero_grad()
    """)
    assert "k" in model.accumulation_aliases


def test_a_horizon_times_the_literal_a_counts_microbatches() -> None:
    assert codes("""
    import torch
    def train(net, loader):
        o = torch.optim.SGD(net.parameters(), lr=0.1)
        s = torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=10 * 4)
        for i, x in enumerate(loader):
            (net(x).sum() / 4).backward()
            if (i + 1) % 4 == 0:
                o.step()
                o.zero_grad()
                s.step()
    """) == ["ACC305"]


def test_the_optimizer_of_an_engine_whatever_it_is_called_is_stepped_around_it() -> None:
    assert "ACC502" in codes("""
    import deepspeed
    def train(net, loader, cfg):
        e, _, _, _ = deepspeed.initialize(model=net, config=cfg)
        for i, x in enumerate(loader):
            e.backward(e(x).sum())
            if (i + 1) % 4 == 0:
                e.optimizer.step()
                e.optimizer.zero_grad()
    """)


def test_the_value_of_a_config_dicts_accumulation_key_is_a() -> None:
    model = model_of("""
    k = 8
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": k}
    """)
    assert model.accumulation_aliases == {"k"}


def test_an_unknown_owner_given_the_loss_is_no_loss_itself() -> None:
    # `f` may be Fabric (given the loss) or a tensor (given its gradient): no finding reads `f` as
    # the undivided loss of an accumulation loop
    assert codes("""
    import torch.nn.functional as F
    def pretrain(f, net, opt, it, k, n):
        for i in range(n * k):
            x, y = next(it)
            f.backward(F.cross_entropy(net(x), y) / k)
            if (i + 1) % k == 0:
                opt.step()
                opt.zero_grad()
    """, every=True) == []


def test_what_runs_a_backward_and_is_stepped_is_an_engine_where_deepspeed_is_imported() -> None:
    # a parameter called `model` that takes the loss and is stepped is DeepSpeed's engine, not a
    # model; without DeepSpeed in the file the name alone decides (a model), as before
    loop = """
    def train(model, loader):
        for step, batch in enumerate(loader):
            model.backward(model(batch).loss)
            model.step()
    """
    assert role_at_last_site(model_of("import deepspeed\n" + textwrap.dedent(loop)), "model") is Role.ENGINE
    assert role_at_last_site(model_of(loop), "model") is Role.MODEL


def test_a_store_under_the_users_boundary_in_an_engine_loop_runs_once_per_group() -> None:
    model = model_of("""
    import deepspeed
    def train(engine, loader, k):
        for i, batch in enumerate(loader):
            engine.backward(engine(batch))
            engine.step()
            if (i + 1) % k == 0:
                engine.global_steps = i
            engine.last = i
    """)
    group = model.loops[0]
    stores = {site.targets[0]: group.store_cadence(site) for site in group.loop_sites
              if site.targets and site.targets[0] and "." in site.targets[0]}
    assert stores == {"engine.global_steps": Cadence.UPDATE, "engine.last": Cadence.MICROBATCH}


def test_an_engine_used_only_inside_a_helper_the_loop_calls_is_still_known_by_use() -> None:
    # the loop body moved into a helper: its `engine.backward(loss)` and `engine.step()` are uses
    # of the caller's object, so the caller's `net` is the engine as before the extraction
    assert codes("""
    import deepspeed
    def micro(net, batch):
        net.backward(net(batch).loss)
        net.step()
        net.micro_steps = 0
    def train(net, loader):
        for batch in loader:
            micro(net, batch)
    """) == ["ACC505"]
