"""Issue 32: the model facts ACC107 and ACC503 read. A backward's loss split into summands
with the divisors on the way to backward (:mod:`accumlint.checks.normalization.loss_terms`), and the
prepared models an ``accumulate()`` block trains without naming them
(:func:`accumlint.checks.framework_usage.accumulate.omitted_trained_models`, :meth:`Roles.prepared_from`)."""

# One-file "these (code, line) findings" tests live in the rules' cases.toml; these assert the
# model's answers themselves.

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.checks.framework_usage.accumulate import omitted_trained_models
from accumlint.checks.normalization.loss_terms import carries_gradient, loss_terms
from accumlint.model import EventKind, build_model

_CODE = cst.Module([]).code_for_node


def _only_backward(source: str):
    model = build_model(cst.parse_module(textwrap.dedent(source)))
    backwards = [(group, event) for group in model.loops for event in group.of_kind(EventKind.BACKWARD)]
    assert len(backwards) == 1, backwards
    return model, *backwards[0]


def _terms(source: str) -> list[tuple[str, list[str]]] | None:
    model, _, event = _only_backward(source)
    terms = loss_terms(model, event)
    return None if terms is None else [(_CODE(t.node), [_CODE(d) for d in t.divisors]) for t in terms]


def test_summands_follow_augmented_assignments_and_sum_divisions() -> None:
    assert _terms("""
    for x, y in loader:
        loss = ce(model(x), y)
        loss /= A
        loss += w * aux(x)
        loss.backward()
    """) == [("ce(model(x), y)", ["A"]), ("w * aux(x)", [])]
    assert _terms("""
    for x, y in loader:
        total = ce(model(x), y) + w * aux(x)
        (total * (1 / A)).backward()
    """) == [("ce(model(x), y)", ["A"]), ("w * aux(x)", ["A"])]


def test_summands_unknown_when_the_loss_is_bound_two_ways() -> None:
    assert _terms("""
    for x, y in loader:
        if flag:
            loss = ce(model(x), y) / A + aux(x)
        else:
            loss = ce(model(x), y) / A
        loss.backward()
    """) is None


def test_a_parameter_or_a_zero_weighted_summand_carries_no_known_gradient() -> None:
    model, _, event = _only_backward("""
    def train(model, loader, penalty):
        for x, y in loader:
            loss = ce(model(x), y) / A + penalty + 0.0 * sum(p.sum() for p in model.parameters())
            loss.backward()
    """)
    terms = loss_terms(model, event)
    assert terms is not None
    assert [carries_gradient(t) for t in terms] == [True, False, False]


def test_omitted_model_is_matched_to_its_optimizer_through_prepare() -> None:
    model = build_model(cst.parse_module(textwrap.dedent("""
    from accelerate import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=4)
    opt_a = torch.optim.Adam(raw_a.parameters())
    opt_b = torch.optim.Adam(raw_b.parameters())
    a, b, opt_a, opt_b = accelerator.prepare(raw_a, raw_b, opt_a, opt_b)
    for x in loader:
        with accelerator.accumulate(a):
            accelerator.backward(b(a(x)).mean())
            opt_a.step()
            opt_b.step()
            opt_a.zero_grad()
            opt_b.zero_grad()
    """)))
    (group,) = model.loops
    found = omitted_trained_models(model, group)
    assert [(o.name, o.passed, o.optimizer) for o in found] == [("b", ("a",), "opt_b")]
    site = group.loop_sites[0]
    assert model.roles.prepared_from("b", site.scope, site.order) == "raw_b"
    assert model.roles.prepared_from("x", site.scope, site.order) is None
