"""The group model on small snippets: loop shapes, roles, cadences — and the cases where it
cannot decide and every rule must stay silent (precision over recall)."""

# The tests kept here need more than one snippet's findings: the model itself (groups, cadences,
# roles, reference cycles), a project tree. A plain "this one-file snippet reports exactly these
# (code, line) findings" test belongs in the rule's rules/<CODE>-<name>/cases.toml
# (tests/catalogue/test_rule_folders.py runs them all).

from __future__ import annotations

import libcst as cst

from accumlint.checks import ALL_RULES
from accumlint.model import EventKind, LoopStyle, Role, build_model
from tests.shared_data import REPO
from tests.support import cadences, lint, model_of

# --- shapes --------------------------------------------------------------------------------

def test_gated_loop_splits_microbatch_and_update_paths() -> None:
    src = """
    import torch
    opt = torch.optim.SGD([], lr=0.1)
    for i, b in enumerate(loader):
        loss = model(b) / A
        loss.backward()
        if (i + 1) % A == 0:
            opt.step()
            opt.zero_grad()
    """
    (group,) = model_of(src).loops
    assert group.style is LoopStyle.GATED and group.accumulates is True
    assert cadences(src) == [("BACKWARD", "backward", "MICROBATCH"), ("UPDATE", "step", "UPDATE"),
                             ("RESET", "zero_grad", "UPDATE")]


def test_continue_guard_gates_the_rest_of_the_body() -> None:
    src = """
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        if (i + 1) % A != 0:
            continue
        optimizer.step()
        optimizer.zero_grad()
    """
    assert cadences(src)[1:] == [("UPDATE", "step", "UPDATE"), ("RESET", "zero_grad", "UPDATE")]
    assert lint(src) == []


def test_inner_micro_loop_then_update() -> None:
    src = """
    def train_step(model, optimizer, microbatches):
        optimizer.zero_grad()
        for mb in microbatches:
            (model(mb) / len(microbatches)).backward()
        optimizer.step()
    """
    (group,) = model_of(src).loops
    assert group.style is LoopStyle.MICRO_LOOP
    assert cadences(src) == [("RESET", "zero_grad", "GROUP_START"), ("BACKWARD", "backward", "MICROBATCH"),
                             ("UPDATE", "step", "UPDATE")]


def test_accelerate_prepared_objects_are_gated_inside_accumulate() -> None:
    src = """
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, sched = accelerator.prepare(model, optimizer, sched)
    raw_sched = get_scheduler("linear", optimizer)
    for b in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(b))
            optimizer.step()
            sched.step()
            raw_sched.step()
            optimizer.zero_grad()
    """
    (group,) = model_of(src).loops
    assert group.style is LoopStyle.ACCELERATE and group.accumulates is True
    assert [c for *_, c in cadences(src)] == ["MICROBATCH", "FRAMEWORK_GATED", "FRAMEWORK_GATED", "MICROBATCH",
                                            "FRAMEWORK_GATED"]
    assert lint(src) == [("ACC304", 11)]


def test_roles_from_imports_prepare_and_deepspeed() -> None:
    model = model_of("""
    import deepspeed
    from torch.optim import AdamW as W
    from torch.nn.parallel import DistributedDataParallel as DDP
    o = W(params)
    net = DDP(m)
    engine, ds_opt, _, ds_sched = deepspeed.initialize(model=m, config=cfg)
    thing = make()
    """)
    scope = model.scopes[0]
    end = len(scope.sites)
    role = {name: model.roles.named(name, scope, end) for name in ("o", "net", "engine", "ds_opt", "ds_sched", "thing")}
    assert role["o"].role is Role.OPTIMIZER and role["o"].prepared is False
    assert role["net"].role is Role.DDP_MODEL
    assert role["engine"].role is Role.ENGINE and role["ds_sched"].owner == "deepspeed"
    assert role["ds_opt"].role is Role.OPTIMIZER and role["ds_opt"].owner == "deepspeed"
    assert role["thing"].role is Role.UNKNOWN


def test_step_on_an_object_of_unknown_role_is_no_event() -> None:
    model = model_of("""
    for b in loader:
        loss.backward()
        thing.step()
    """)
    kinds = [e.kind for e in model.all_events()]
    assert kinds == [EventKind.BACKWARD]


# --- precision: undecidable → silent -------------------------------------------------------


def test_counter_incremented_before_the_test_is_aligned() -> None:
    src = """
    step = 0
    for b in loader:
        step += 1
        (model(b) / A).backward()
        if step % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    assert lint(src) == []
    assert lint(src.replace("        step += 1\n", "").replace("optimizer.zero_grad()", "optimizer.zero_grad()\n"
                                                              "        step += 1")) == [("ACC006", 5)]


def test_unpacking_a_pair_does_not_spread_its_name_role() -> None:
    """Regression (transformers Trainer): `self.optimizer, self.lr_scheduler = optimizers`
    once made the scheduler an optimizer, and its step() an update (ACC003 false positive)."""
    src = """
    class T:
        def __init__(self, optimizers):
            self.optimizer, self.lr_scheduler = optimizers

        def loop(self, model, loader, A):
            for i, b in enumerate(loader):
                model(b).backward()
                if (i + 1) % A == 0:
                    self.optimizer.step()
                    self.lr_scheduler.step()
                    model.zero_grad()
    """
    model = model_of(src)
    (group,) = model.loops
    assert [e.kind for e in group.events] == [EventKind.BACKWARD, EventKind.UPDATE, EventKind.SCHEDULER_STEP,
                                              EventKind.RESET]
    assert lint(src) == []


# --- regressions from real code (reduced snippets, written for these tests) -----------------


def test_private_attribute_names_carry_their_role() -> None:
    """torchtune shape: `self._optimizer` built by a method of the recipe is still an optimizer."""
    src = """
    class Recipe:
        def setup(self):
            self._optimizer = self._setup_optimizer()

        def train(self, loader):
            for idx, batch in enumerate(loader):
                loss = self._loss_step(batch)
                loss.backward()
                if (idx + 1) % self._gradient_accumulation_steps == 0:
                    self._optimizer.step()
                    self._optimizer.zero_grad(set_to_none=True)
    """
    (group,) = model_of(src).loops
    assert group.style is LoopStyle.GATED
    assert [e.role.role for e in group.events if e.kind is EventKind.UPDATE] == [Role.OPTIMIZER]


def test_a_checked_file_leaves_no_reference_cycle_holding_its_tree() -> None:
    """Once a file is checked, reference counting alone frees its LibCST tree: a cycle between
    model objects would keep the whole tree (≈400 bytes per source byte) alive until the
    collector's next full pass, while the next file is being parsed."""
    import gc

    source = (REPO / "examples" / "train_buggy.py").read_bytes()
    gc.collect()
    module = cst.parse_module(source)
    model = build_model(module)
    findings = [hit for rule in ALL_RULES for hit in rule().check(model)]
    assert findings  # the example is buggy: every part of the model was used
    del module, model, findings
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable stays in gc.garbage
    try:
        gc.collect()
        held = [obj for obj in gc.garbage if isinstance(obj, cst.CSTNode)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert held == [], f"{len(held)} LibCST nodes were kept alive by a reference cycle"


def test_a_getter_of_the_optimizer_returns_its_role() -> None:
    """`get_opt().step()`: the role is that of what every `return` of the project helper gives."""
    src = """
    import torch

    def train(net, loader, accum):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)

        def get_opt():
            return opt

        for i, (x, y) in enumerate(loader):
            (net(x) / accum).backward()
            get_opt().step()
            get_opt().zero_grad()
    """
    (group,) = model_of(src).loops
    assert [(e.kind, e.role.role) for e in group.events if e.kind is not EventKind.BACKWARD] == [
        (EventKind.UPDATE, Role.OPTIMIZER), (EventKind.RESET, Role.OPTIMIZER)]
    assert lint(src) == [("ACC004", 12)]


def test_a_getter_whose_returns_differ_in_role_gives_none() -> None:
    src = """
    import torch

    def train(net, loader, flag):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, 10)

        def pick():
            if flag:
                return opt
            return sched

        for i, (x, y) in enumerate(loader):
            net(x).backward()
            pick().step()
    """
    (group,) = model_of(src).loops
    assert [e.kind for e in group.events] == [EventKind.BACKWARD]


def test_a_module_whose_parameters_build_an_optimizer_is_a_model_whatever_its_name() -> None:
    """`v4 = nn.Linear(...)`; `SGD(v4.parameters())`: v4 is a model from its use, so its output
    kept in a list across microbatches holds the graph (ACC201); a loss module is not one."""
    src = """
    import torch
    from torch import nn

    def main(v3, accum):
        v4 = nn.Linear(16, 1)
        v5 = torch.optim.SGD([{"params": v4.parameters()}], lr=0.05)
        v6 = nn.MSELoss()
        v8 = []
        for v10, (v11, v12) in enumerate(v3):
            v13 = v4(v11)
            v14 = v6(v13, v12) / accum
            v14.backward()
            v8.append(v13)
            if (v10 + 1) % accum == 0:
                v5.step()
                v5.zero_grad()
    """
    model = model_of(src)
    scope = next(s for s in model.scopes if getattr(s.node, "name", None) and s.node.name.value == "main")
    end = max(site.order for site in scope.sites)
    assert model.roles.named("v4", scope, end).role is Role.MODEL
    assert model.roles.named("v4", scope, end).evidence.name == "USE"
    assert model.roles.named("v6", scope, end).role is Role.UNKNOWN
    assert lint(src) == [("ACC201", 14)]
