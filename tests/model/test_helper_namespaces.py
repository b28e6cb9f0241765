"""A name read in an inlined helper, mapped to the caller's name it stands for
(:func:`accumlint.model.dataflow.home`): the pattern rules read a loop's helpers through it."""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model import build_model
from accumlint.model.dataflow import home

SOURCE = """
def microstep(net, xb, history, weight, scale):
    scale = scale * 2
    out = net(xb)
    history.append(out)

def train(net, loader):
    kept = []
    for xb in loader:
        microstep(net, xb, kept, *extra)
"""


def _append_site():
    """The model (its scopes hold the sites) and the helper's ``history.append(out)`` inlined in ``train``."""
    model = build_model(cst.parse_module(textwrap.dedent(SOURCE)))
    scope = next(s for s in model.scopes if s.name == "train")
    return model, next(s for s in scope.sites if s.call is not None and s.inline is not None
                       and cst.Module([]).code_for_node(s.call).startswith("history.append"))


def test_a_parameter_is_the_callers_argument() -> None:
    _model, site = _append_site()
    assert home(site.scope, "history", site.order, site.inline) == ("kept", None)
    assert home(site.scope, "history.items", site.order, site.inline) == ("kept.items", None)


def test_a_local_or_a_rebound_parameter_stays_the_helpers() -> None:
    _model, site = _append_site()
    assert home(site.scope, "out", site.order, site.inline) == ("out", site.inline)
    assert home(site.scope, "scale", site.order, site.inline) == ("scale", site.inline)


def test_a_parameter_of_unknown_value_stays_the_helpers() -> None:
    _model, site = _append_site()
    assert home(site.scope, "weight", site.order, site.inline) == ("weight", site.inline)  # given by `*extra`
