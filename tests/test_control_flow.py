"""Control flow inside the microbatch loop (issue 14, family 4): ``continue`` / ``break`` /
``return``, ``try``, contexts held in variables, values with several reaching definitions.

Each statement kind has a faulty shape that must still be reported and a correct or
undecidable one that must stay silent. The snippets were written for these tests."""

from __future__ import annotations

import pytest

from tests.test_model import cadences, lint

# --- continue -------------------------------------------------------------------------------

CONTINUE_BAD = {
    "resume skip nested under a resume flag (HF no_trainer style)": ("""
    for epoch in range(epochs):
        for step, batch in enumerate(loader):
            if resume and epoch == first_epoch:
                if step < resume_step:
                    if step % accumulation_steps == 0:
                        progress.update(1)
                    continue
            optimizer.zero_grad()
            loss = model(**batch).loss / accumulation_steps
            loss.backward()
            if (step + 1) % accumulation_steps == 0:
                optimizer.step()
    """, [("ACC001", 9)]),
    "dropped batch, clip on every microbatch": ("""
    import torch
    for it, sample in enumerate(stream):
        if sample is None or not sample["ok"]:
            log.warning("skipping a corrupt sample")
            continue
        (crit(net(sample["x"]), sample["y"]) / grad_accum).backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        if (it + 1) % grad_accum == 0:
            opt.step()
            opt.zero_grad()
    """, [("ACC301", 8)]),
    "continue on a one-line if, scheduler after the backward": ("""
    import torch
    opt = torch.optim.SGD(params, lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 30)
    for i, b in enumerate(loader):
        if b is None: continue
        (model(b) / A).backward()
        sched.step()
        if (i + 1) % A == 0:
            opt.step()
            opt.zero_grad()
    """, [("ACC304", 8)]),
    "two skip guards, off-by-one gate": ("""
    for i, b in enumerate(loader):
        if i < start:
            continue
        if b["input_ids"].numel() == 0:
            continue
        (model(b) / A).backward()
        if i % A == 0:
            opt.step()
            opt.zero_grad()
    """, [("ACC006", 8)]),
    "skip guard around an inner micro-loop (nanoGPT style with resume)": ("""
    for it in range(max_iters):
        if it < resume_iter:
            continue
        for micro in range(accum_steps):
            opt.zero_grad(set_to_none=True)
            (model(*get_batch()) / accum_steps).backward()
        opt.step()
    """, [("ACC001", 6)]),
}


@pytest.mark.parametrize("name", list(CONTINUE_BAD))
def test_a_skip_guard_does_not_hide_the_loop(name: str) -> None:
    source, expected = CONTINUE_BAD[name]
    assert lint(source) == expected


def test_events_behind_a_skip_guard_run_every_microbatch() -> None:
    src = """
    for i, b in enumerate(loader):
        if i < skip:
            continue
        optimizer.zero_grad()
        (model(b) / A).backward()
        if (i + 1) % A == 0:
            optimizer.step()
    """
    assert cadences(src) == [("RESET", "zero_grad", "MICROBATCH"), ("BACKWARD", "backward", "MICROBATCH"),
                             ("UPDATE", "step", "UPDATE")]


CONTINUE_SILENT = {
    "correct loop behind a skip guard": """
    for i, b in enumerate(loader):
        if b is None:
            continue
        (model(b) / A).backward()
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """,
    # the guard runs after the backward: the reset behind it runs on the microbatches the
    # condition lets through, which the model cannot count
    "unknown guard between the backward and the reset": """
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        if not is_finite(b):
            continue
        optimizer.zero_grad()
        if (i + 1) % A == 0:
            optimizer.step()
    """,
    # two backwards, only one behind the guard: the guard chooses events, not microbatches
    "guard between two backwards": """
    for i, b in enumerate(loader):
        (aux(b) / A).backward()
        if b is None:
            continue
        optimizer.zero_grad()
        (model(b) / A).backward()
        if (i + 1) % A == 0:
            optimizer.step()
    """,
    "boundary continue gates the update": """
    for i, b in enumerate(loader):
        if b is None:
            continue
        (model(b) / A).backward()
        if (i + 1) % A != 0:
            continue
        optimizer.step()
        optimizer.zero_grad()
    """,
}


@pytest.mark.parametrize("name", list(CONTINUE_SILENT))
def test_continue_shapes_that_stay_silent(name: str) -> None:
    assert lint(CONTINUE_SILENT[name]) == []


# --- break / return ---------------------------------------------------------------------------

def test_a_budget_return_does_not_hide_the_reset() -> None:
    """`if ...: return` ends the loop like `break`: what comes before it runs every microbatch."""
    assert lint("""
    def run(model, opt, stream, A, budget):
        for i, (x, y) in enumerate(stream):
            (model(x, y) / A).backward()
            opt.zero_grad()
            if (i + 1) % A == 0:
                opt.step()
            if i >= budget:
                return i
    """) == [("ACC001", 5)]


def test_break_before_the_gated_update_is_silent() -> None:
    assert lint("""
    for i, b in enumerate(loader):
        (model(b) / A).backward()
        if i + 1 >= limit:
            break
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """) == []


# --- several reaching definitions ---------------------------------------------------------------

TWO_DEFS_BAD = {
    "epochs overridden by a smoke flag (both plain counts)": ("""
    import torch
    from transformers import get_linear_schedule_with_warmup
    def main(model, loader, cfg):
        epochs = cfg.epochs
        if cfg.debug:
            epochs = 2
        optimizer = torch.optim.AdamW(model.parameters())
        sched = get_linear_schedule_with_warmup(optimizer, 0, len(loader) * epochs)
        for epoch in range(epochs):
            for i, b in enumerate(loader):
                (model(b) / cfg.grad_accum).backward()
                if (i + 1) % cfg.grad_accum == 0:
                    optimizer.step()
                    sched.step()
                    optimizer.zero_grad()
    """, [("ACC305", 9), ("ACC005", 13)]),  # the epoch's tail leaks into the next epoch's first group
    "horizon chosen in if/elif/else, every arm in microbatches": ("""
    import torch
    from transformers import get_cosine_schedule_with_warmup
    def main(model, loader, cfg, accum):
        if cfg.mode == "short":
            total = len(loader)
        elif cfg.mode == "long":
            total = len(loader) * 10
        else:
            total = len(loader) * cfg.epochs
        optimizer = torch.optim.AdamW(model.parameters())
        sched = get_cosine_schedule_with_warmup(optimizer, 100, total)
        for i, b in enumerate(loader):
            (model(b) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                sched.step()
                optimizer.zero_grad()
    """, [("ACC305", 12)]),
    "Accelerate prepare in both arms, horizon times A": ("""
    import torch
    from accelerate import Accelerator
    from transformers import get_scheduler
    def main(args, model, ema, loader):
        accelerator = Accelerator(gradient_accumulation_steps=args.accum_steps)
        optimizer = torch.optim.AdamW(model.parameters())
        sched = get_scheduler("cosine", optimizer=optimizer,
                              num_training_steps=args.max_train_steps * args.accum_steps)
        if args.use_ema:
            model, ema, optimizer, loader, sched = accelerator.prepare(model, ema, optimizer, loader, sched)
        else:
            model, optimizer, loader, sched = accelerator.prepare(model, optimizer, loader, sched)
        for b in loader:
            with accelerator.accumulate(model):
                accelerator.backward(model(b).loss)
                optimizer.step()
                sched.step()
                optimizer.zero_grad()
    """, [("ACC305", 9)]),
}


@pytest.mark.parametrize("name", list(TWO_DEFS_BAD))
def test_definitions_that_agree_decide(name: str) -> None:
    source, expected = TWO_DEFS_BAD[name]
    assert lint(source) == expected


TWO_DEFS_SILENT = {
    # `max_steps` is a plain count on one path and updates on the other: undecided
    "max_steps given or derived": """
    import torch
    from transformers import get_linear_schedule_with_warmup
    def main(model, loader, accum, max_steps=None):
        assert len(loader) % accum == 0
        if max_steps is None:
            max_steps = len(loader) // accum
        optimizer = torch.optim.AdamW(model.parameters())
        sched = get_linear_schedule_with_warmup(optimizer, 0, max_steps)
        for i, b in enumerate(loader):
            (model(b) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                sched.step()
                optimizer.zero_grad()
    """,
    "horizon in microbatches on one arm only": """
    import torch
    from transformers import get_linear_schedule_with_warmup
    def main(model, loader, accum, cfg):
        total = cfg.total_updates
        if cfg.from_loader:
            total = len(loader) * cfg.epochs
        optimizer = torch.optim.AdamW(model.parameters())
        sched = get_linear_schedule_with_warmup(optimizer, 0, total)
        for i, b in enumerate(loader):
            (model(b) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                sched.step()
                optimizer.zero_grad()
    """,
    # prepared in one arm only: the scheduler of the other arm is stepped every microbatch
    "prepare in one arm only": """
    import torch
    from accelerate import Accelerator
    from transformers import get_scheduler
    def main(args, model, loader):
        accelerator = Accelerator(gradient_accumulation_steps=args.accum_steps)
        optimizer = torch.optim.AdamW(model.parameters())
        sched = get_scheduler("cosine", optimizer=optimizer,
                              num_training_steps=args.max_train_steps * args.accum_steps)
        if args.distributed:
            model, optimizer, loader, sched = accelerator.prepare(model, optimizer, loader, sched)
        for b in loader:
            with accelerator.accumulate(model):
                accelerator.backward(model(b).loss)
                optimizer.step()
                sched.step()
                optimizer.zero_grad()
    """,
}


@pytest.mark.parametrize("name", list(TWO_DEFS_SILENT))
def test_definitions_that_disagree_stay_silent(name: str) -> None:
    assert lint(TWO_DEFS_SILENT[name]) == []


# --- contexts held in variables -------------------------------------------------------------------

CTX_BAD = {
    "factory chosen by a flag, model reset inside": ("""
    from contextlib import nullcontext
    from accelerate import Accelerator
    def train(model, optimizer, loader, cfg):
        accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        enter = accelerator.accumulate if cfg.accumulate else nullcontext
        for batch in loader:
            with enter(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                model.zero_grad()
    """, [("ACC001", 12)]),
    "context chosen per run, entered as a value": ("""
    import contextlib
    from accelerate import Accelerator
    def train(model, optimizer, loader, cfg):
        accelerator = Accelerator(gradient_accumulation_steps=cfg.accum)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            ctx = accelerator.accumulate(model) if cfg.accumulate else contextlib.nullcontext()
            with ctx:
                optimizer.zero_grad()
                accelerator.backward(model(**batch).loss)
                optimizer.step()
    """, [("ACC501", 10)]),
}


@pytest.mark.parametrize("name", list(CTX_BAD))
def test_accumulate_through_a_variable_is_read_as_accumulate(name: str) -> None:
    source, expected = CTX_BAD[name]
    assert lint(source) == expected


CTX_SILENT = {
    "factory chosen by a flag, correct body": """
    from contextlib import nullcontext
    from accelerate import Accelerator
    def train(model, optimizer, loader, engine_accumulates):
        accelerator = Accelerator(gradient_accumulation_steps=4)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        enter = nullcontext if engine_accumulates else accelerator.accumulate
        for batch in loader:
            with enter(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()
    """,
    # the other arm is a context of unknown effect: not read as accumulate(), not as missing
    "factory with an unknown other arm": """
    from accelerate import Accelerator
    def train(model, optimizer, loader, cfg, profile):
        accelerator = Accelerator(gradient_accumulation_steps=4)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        enter = accelerator.accumulate if cfg.accumulate else profile.region
        for batch in loader:
            with enter(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()
    """,
}


@pytest.mark.parametrize("name", list(CTX_SILENT))
def test_contexts_in_variables_that_stay_silent(name: str) -> None:
    assert lint(CTX_SILENT[name]) == []


# --- conditional expressions --------------------------------------------------------------------------

def test_an_arm_of_a_conditional_expression_is_a_branch() -> None:
    src = """
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(batch).loss)
            _ = accelerator.clip_grad_norm_(model.parameters(), 1.0) if accelerator.sync_gradients else None
            optimizer.step()
            optimizer.zero_grad()
    """
    assert ("CLIP", "clip_grad_norm_", "UPDATE") in cadences(src)
    assert lint(src) == []


def test_a_clip_in_the_other_arm_still_runs_every_microbatch() -> None:
    """`clip() if not sync else None`: the clip runs on the microbatches that end no group."""
    src = """
    import torch
    for i, b in enumerate(loader):
        (model(b) / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) if (i + 1) % accum else None
        if (i + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
    """
    assert ("CLIP", "clip_grad_norm_", "NON_BOUNDARY") in cadences(src)


# --- a no-sync context chosen by a condition ------------------------------------------------------

SYNC_CHOICE = {
    # (source, findings): the context is picked inline, by a flag, or as a method reference
    "inline, remainder of the zero-based index": ("""
    from contextlib import nullcontext
    for i, (x, y) in enumerate(loader):
        with (ddp.no_sync() if i % A else nullcontext()):
            (crit(ddp(x), y) / A).backward()
        if (i + 1) % A == 0:
            opt.step()
            opt.zero_grad()
    """, [("ACC402", 4)]),
    "inline, aligned with the gate": ("""
    from contextlib import nullcontext
    for i, (x, y) in enumerate(loader):
        with (ddp.no_sync() if (i + 1) % A else nullcontext()):
            (crit(ddp(x), y) / A).backward()
        if (i + 1) % A == 0:
            opt.step()
            opt.zero_grad()
    """, []),
    "factory chosen by a flag that names the group's last microbatch": ("""
    import contextlib
    for k, (x, y) in enumerate(loader):
        last = k % A == A - 1
        enter = contextlib.nullcontext if last else ddp.no_sync
        with enter():
            (crit(ddp(x), y) / A).backward()
        if (k + 1) % A == 0:
            opt.step()
            opt.zero_grad()
    """, []),
    "flag of another counter: undecidable": ("""
    from contextlib import nullcontext
    for k, (x, y) in enumerate(loader):
        ctx = nullcontext() if seen % A == 0 else ddp.no_sync()
        with ctx:
            (crit(ddp(x), y) / A).backward()
        if (k + 1) % A == 0:
            opt.step()
            opt.zero_grad()
    """, []),
}


@pytest.mark.parametrize("name", list(SYNC_CHOICE))
def test_a_no_sync_chosen_on_the_update_microbatch(name: str) -> None:
    source, expected = SYNC_CHOICE[name]
    assert lint(source) == expected


# --- accumulate() entered twice, or under an arm the model cannot decide ------------------------

def test_two_accumulate_entries_in_one_with_statement() -> None:
    assert lint("""
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=8)
    text, vision, opt, loader = accelerator.prepare(text, vision, opt, loader)
    for batch in loader:
        with accelerator.accumulate(vision), accelerator.accumulate(text):
            accelerator.backward(clip_loss(vision(batch["img"]), text(batch["ids"])))
            opt.step()
            opt.zero_grad()
    """) == [("ACC501", 6)]


def test_reset_before_backward_inside_accumulate_under_an_alternating_arm() -> None:
    """Which model trains alternates per group (undecidable for the gate), but inside each
    accumulate() the prepared optimizer's reset runs before the backward."""
    assert lint("""
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=2)
    actor, critic, a_opt, c_opt, loader = accelerator.prepare(actor, critic, a_opt, c_opt, loader)
    for i, batch in enumerate(loader):
        if (i // 2) % 2:
            with accelerator.accumulate(actor):
                a_opt.zero_grad()
                accelerator.backward(actor(batch).loss)
                a_opt.step()
        else:
            with accelerator.accumulate(critic):
                accelerator.backward(critic(batch).loss)
                c_opt.step()
                c_opt.zero_grad()
    """) == [("ACC501", 8)]


def test_reset_under_a_condition_inside_accumulate_is_silent() -> None:
    assert lint("""
    from accelerate import Accelerator
    accelerator = Accelerator(gradient_accumulation_steps=2)
    actor, a_opt, loader = accelerator.prepare(actor, a_opt, loader)
    for i, batch in enumerate(loader):
        if (i // 2) % 2:
            with accelerator.accumulate(actor):
                if batch.fresh:
                    a_opt.zero_grad()
                accelerator.backward(actor(batch).loss)
                a_opt.step()
    """) == []


# --- loops over optimizers around the update --------------------------------------------------------

def test_an_update_loop_over_optimizers_runs_once_per_group() -> None:
    src = """
    for it in range(n_updates):
        for k in range(grad_accum):
            (net(*next(data)) / grad_accum).backward()
            net.zero_grad()
        for opt, sched in zip(optimizers, schedulers):
            opt.step()
            sched.step()
        net.zero_grad(set_to_none=True)
    """
    assert ("UPDATE", "step", "UPDATE") in cadences(src)
    assert lint(src) == [("ACC001", 5)]


def test_an_update_loop_that_also_backpropagates_stays_undecided() -> None:
    """A loop after the micro-loop that runs a backward of its own is no plain update loop."""
    src = """
    for it in range(n_updates):
        for k in range(grad_accum):
            (net(*next(data)) / grad_accum).backward()
            net.zero_grad()
        for opt in optimizers:
            (reg(net) / len(optimizers)).backward()
            opt.step()
    """
    assert lint(src) == []


# --- try / except / finally -----------------------------------------------------------------------

TRY_SHAPES = {
    # the body of `try` runs on every microbatch that does not raise: it is the microbatch's path
    "reset in the try body": ("""
    for i, b in enumerate(loader):
        try:
            optimizer.zero_grad()
            (model(b) / A).backward()
        except RuntimeError:
            log.warning("bad batch")
        if (i + 1) % A == 0:
            optimizer.step()
    """, [("ACC001", 4)]),
    # `finally` runs on every microbatch, raising or not
    "reset in finally": ("""
    for i, b in enumerate(loader):
        try:
            (model(b) / A).backward()
            if (i + 1) % A == 0:
                optimizer.step()
        finally:
            optimizer.zero_grad()
    """, [("ACC001", 8)]),
    # the OOM-skip idiom: the handler wipes the failed microbatch and moves on; when it runs is unknown
    "reset in an out-of-memory handler that continues": ("""
    import torch
    for i, b in enumerate(loader):
        try:
            (model(b) / A).backward()
        except torch.cuda.OutOfMemoryError:
            optimizer.zero_grad()
            continue
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, []),
    "update in a handler": ("""
    for i, b in enumerate(loader):
        try:
            (model(b) / A).backward()
        except StopTraining:
            optimizer.step()
            break
        if (i + 1) % A == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, []),
}


@pytest.mark.parametrize("name", list(TRY_SHAPES))
def test_try_shapes(name: str) -> None:
    source, expected = TRY_SHAPES[name]
    assert lint(source) == expected


def test_gradients_rescaled_in_place_do_not_hide_the_reset() -> None:
    """`p.grad /= A` after the micro-loop normalizes; it moves no gradient, so the reset after
    each backward is still reported (field-trial reduction)."""
    assert lint("""
    for it in range(n_updates):
        for k in range(accum):
            net(*next(data)).backward()
            opt.zero_grad()
        for p in net.parameters():
            p.grad *= 1.0 / accum
        opt.step()
        opt.zero_grad(set_to_none=True)
    """) == [("ACC001", 5)]


def test_gradients_replaced_by_hand_stay_undecided() -> None:
    assert lint("""
    for it in range(n_updates):
        for k in range(accum):
            (net(*next(data)) / accum).backward()
            opt.zero_grad()
        for p, buf in zip(net.parameters(), buffers):
            p.grad = buf
        opt.step()
    """) == []
