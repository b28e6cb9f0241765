"""Control flow inside the microbatch loop (issue 14, family 4): ``continue`` / ``break`` /
``return``, ``try``, contexts held in variables, values with several reaching definitions.

Each statement kind has a faulty shape that must still be reported and a correct or
undecidable one that must stay silent. The snippets were written for these tests."""

# The tests kept here need more than one snippet's findings: the model's cadences (which events
# run every microbatch). A plain "this one-file snippet reports exactly these (code, line)
# findings" test belongs in the rule's rules/<CODE>-<name>/cases.toml (tests/catalogue/test_rule_folders.py
# runs them all).

from __future__ import annotations

from tests.support import cadences, lint

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


def test_a_long_elif_chain_of_definitions_is_read_once_per_branch(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # (trial 51: an optimizer chosen by name over a dozen `elif` arms made the reaching-definitions
    # walk revisit each inner `if` once per definition below it: factorial time, a timeout)
    from accumlint.model import Role, dataflow
    from tests.support import model_of

    calls = 0
    covers = dataflow._covers

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal calls
        calls += 1
        assert calls < 5_000, "the walk revisits the chain"
        return covers(*args, **kwargs)

    monkeypatch.setattr(dataflow, "_covers", counted)
    arms = "".join(f"    elif name == 'opt{k}':\n        optimizer = torch.optim.SGD(params, lr={k})\n"
                   for k in range(1, 30))
    source = ("import torch\n\ndef train(model, params, loader, name, A):\n"
              "    if name == 'opt0':\n        optimizer = torch.optim.SGD(params, lr=0)\n" + arms +
              "    else:\n        raise ValueError(name)\n"
              "    for i, x in enumerate(loader):\n        (model(x) / A).backward()\n"
              "        if (i + 1) % A == 0:\n            optimizer.step()\n            optimizer.zero_grad()\n")
    model = model_of(source)
    (group,) = model.loops
    assert {event.role.role for event in group.events if event.method == "step"} == {Role.OPTIMIZER}
    assert 0 < calls < 5_000
