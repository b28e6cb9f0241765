"""Control flow inside the microbatch loop (issue 14, family 4): ``continue`` / ``break`` /
``return``, ``try``, contexts held in variables, values with several reaching definitions.

Each statement kind has a faulty shape that must still be reported and a correct or
undecidable one that must stay silent. The snippets were written for these tests."""

from __future__ import annotations

from tests.test_model import cadences, lint

# --- continue -------------------------------------------------------------------------------


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


# --- contexts held in variables -------------------------------------------------------------------


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
