"""The fixers' rewrite visits only what is above the changed nodes, and changes the same text."""

from __future__ import annotations

import libcst as cst

from accumlint.fixes.base import parent_map, rewrite

SOURCE = """\
import torch


def untouched(model):
    # a comment that stays
    return model(torch.zeros(2))


def train(model, opt, loader, steps):
    for i, batch in enumerate(loader):
        loss = model(batch) / steps
        loss.backward()
        opt.zero_grad()
        if (i + 1) % steps == 0:
            opt.step()
"""


def _nodes() -> tuple[cst.Module, cst.FunctionDef, cst.For]:
    module = cst.parse_module(SOURCE)
    train = module.body[2]
    assert isinstance(train, cst.FunctionDef)
    loop = train.body.body[0]
    assert isinstance(loop, cst.For)
    return module, train, loop


def test_a_pruned_rewrite_writes_what_a_full_one_writes() -> None:
    module, _, loop = _nodes()
    body = loop.body.body
    reset, gate = body[2], body[3]
    division = body[0].body[0].value  # type: ignore[attr-defined]
    changes = [
        {"remove": [reset], "insert_after": {gate.body.body[0]: [reset]}},  # type: ignore[attr-defined]
        {"replace": {division: division.left}},
        {"remove": [reset]},
    ]
    parents = parent_map(module)
    for change in changes:
        full = rewrite(module, **change)  # type: ignore[arg-type]
        pruned = rewrite(module, parents=parents, **change)  # type: ignore[arg-type]
        assert pruned.code == full.code
        assert pruned.code != SOURCE
        assert pruned.body[1] is module.body[1]  # `untouched` was not visited, let alone rebuilt
        assert pruned.body[0] is module.body[0]


def test_a_change_the_parents_do_not_know_visits_every_node() -> None:
    module, _, _ = _nodes()
    untouched = module.body[1]
    comment = untouched.body.body[0].leading_lines[0]  # type: ignore[attr-defined]
    replaced = comment.with_changes(comment=cst.Comment("# another comment"))
    full = rewrite(module, replace={comment: replaced})
    pruned = rewrite(module, replace={comment: replaced}, parents=parent_map(module))
    assert "# another comment" in pruned.code
    assert pruned.code == full.code
