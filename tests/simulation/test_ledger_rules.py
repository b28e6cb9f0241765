"""Issue 16, the rules that read the ledger: ACC101 for A applied twice without a framework
(two divisions in series, or a division and a gradient-side rescale by A), ACC103, ACC104 and
ACC105 silent where the ledger shows a denominator, their messages naming a token mean where
the ledger knows one, and the acceptance case of two legitimate denominators. Each reported
shape has a silent twin that differs by the one fact that makes it correct."""

# The tests kept here need more than one snippet's findings: message text, the model's ledger
# (divisions in series), a twin made by str.replace. A plain "this one-file snippet reports
# exactly these (code, line) findings" test belongs in the rule's rules/<CODE>-<name>/cases.toml
# (tests/catalogue/test_rule_folders.py runs them all).

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.checks.shared.ledger import divisions_in_series
from accumlint.model import EventKind, build_model
from tests.catalogue.test_rule_folders import case_code
from tests.support import lint, only_message


def test_messages_say_the_resulting_scale() -> None:
    assert "1/A of the group's mean gradient" in only_message(
        case_code("ACC101 A twice in series: reassigned, then divided again at the backward"), "ACC101")
    assert "after the loss's division already divided" in only_message(
        case_code("ACC101 loss divided by A, then the group's gradients divided by A again"), "ACC101")
    assert "(a mean over its microbatch's tokens: `ignore_index`" in only_message(
        case_code("ACC103 token mean undivided: the message names the mean"), "ACC103")


def test_series_follows_the_chain_not_the_terms() -> None:
    """Two divisions on the loss's chain are in series; two terms of a sum are not."""
    def series(source: str) -> int:
        model = build_model(cst.parse_module(textwrap.dedent(source)))
        (event,) = [e for e in model.all_events() if e.kind is EventKind.BACKWARD]
        return len(divisions_in_series(model, event, model.is_accumulation_name))

    assert series(case_code("ACC101 A twice in series: reassigned, then divided again at the backward")) == 2
    assert series(case_code("ACC101 A twice: a helper returns loss / A and the loop divides with /=")) == 2
    assert series(case_code("ACC101 silent: two terms each divided by A are one division of the total")) == 0


def test_one_division_on_either_arm_is_no_series() -> None:
    """Field trial (an image-classification engine): ``loss /= A`` in both arms of an AMP
    switch, one backward per arm: one division on every path."""
    source = """
    def fit(net, opt, loader, update_freq, use_amp, scaler):
        for i, b in enumerate(loader):
            if use_amp:
                loss = net(b).mean()
            else:
                loss = net(b).mean()
            if use_amp:
                loss /= update_freq
                scaler(loss, opt, update_grad=(i + 1) % update_freq == 0)
            else:
                loss /= update_freq
                loss.backward()
                if (i + 1) % update_freq == 0:
                    opt.step()
                    opt.zero_grad()
    """
    assert lint(source, select="ACC101") == []
    assert lint(source.replace("                loss /= update_freq\n                loss.backward()",
                               "                loss /= update_freq\n                loss /= update_freq\n"
                               "                loss.backward()"), select="ACC101") == [("ACC101", 13)]
