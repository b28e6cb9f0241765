"""ACC103 and a token sum returned by the model's own ``forward`` (field trial, modded-nanogpt
style): the sum convention is no missing division, and a forward that returns a mean (or a
model of another class) still is one. Written for these tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from accumlint.checks.shared.ledger import Factor, ledger
from accumlint.model import EventKind
from accumlint.settings import config
from tests.project.test_patterns import check
from tests.support import lint, model_of

_LOOP = """
def train(model, loader, opt, micro_bs, num_updates):
    for update in range(num_updates):
        tokens, targets = next(loader)
        for i in range(len(tokens) // micro_bs):
            sl = slice(i * micro_bs, (i + 1) * micro_bs)
            {body}
        opt.step()
        model.zero_grad(set_to_none=True)
"""

#: every rule, off-by-default ones too
EVERY = ",".join(sorted(config.known_codes()))


def _snippet(forward: str, body: str = "model(tokens[sl], targets[sl]).backward()", extra: str = "") -> str:
    head = textwrap.dedent("""
    import torch
    import torch.nn.functional as F
    from torch import nn

    class LM(nn.Module):
        def __init__(self, vocab, dim):
            super().__init__()
            self.head = nn.Linear(dim, vocab)
    """)
    return head + textwrap.indent(textwrap.dedent(forward), "    ") + textwrap.dedent(extra) + _LOOP.format(body=body)


SILENT = {
    "cross_entropy reduction='sum' returned directly": """
        def forward(self, x, y):
            return F.cross_entropy(self.head(x).flatten(0, 1), y.flatten(), reduction="sum")
    """,
    "the loss bound to a name first": """
        def forward(self, x, y):
            logits = self.head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1), reduction="sum")
            return loss
    """,
    "per-token losses (reduction='none') summed": """
        def forward(self, x, y):
            per_token = F.cross_entropy(self.head(x).flatten(0, 1), y.flatten(), reduction="none")
            return per_token.sum()
    """,
    "the loss computed in a helper method": """
        def forward(self, x, y):
            return self.token_loss(self.head(x), y)

        def token_loss(self, logits, y):
            return F.nll_loss(logits.log_softmax(-1).flatten(0, 1), y.flatten(), reduction="sum")
    """,
    "sum while training, mean in evaluation": """
        def forward(self, x, y):
            logits = self.head(x)
            if y is None:
                return logits
            return F.cross_entropy(logits.flatten(0, 1), y.flatten(),
                                   reduction="sum" if self.training else "mean")
    """,
}

REPORTED = {
    "the default (mean) reduction": """
        def forward(self, x, y):
            return F.cross_entropy(self.head(x).flatten(0, 1), y.flatten())
    """,
    "reduction='mean' in a helper method": """
        def forward(self, x, y):
            return self.token_loss(self.head(x), y)

        def token_loss(self, logits, y):
            return F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="mean")
    """,
    "`.sum()` of a loss already reduced to its mean": """
        def forward(self, x, y):
            return F.cross_entropy(self.head(x).flatten(0, 1), y.flatten()).sum()
    """,
    "a sum divided inside forward (a mean by hand)": """
        def forward(self, x, y):
            loss = F.cross_entropy(self.head(x).flatten(0, 1), y.flatten(), reduction="sum")
            return loss / y.numel()
    """,
}


@pytest.mark.parametrize("forward", SILENT.values(), ids=SILENT.keys())
def test_a_token_sum_from_the_models_forward_is_the_sum_convention(forward: str) -> None:
    assert lint(_snippet(forward), EVERY) == []


@pytest.mark.parametrize("forward", REPORTED.values(), ids=REPORTED.keys())
def test_a_mean_from_the_models_forward_left_undivided_is_still_acc103(forward: str) -> None:
    found = lint(_snippet(forward), "ACC103")
    assert [code for code, _ in found] == ["ACC103"], found


def test_the_ledger_names_the_forward_sum() -> None:
    model = model_of(_snippet(SILENT["the loss bound to a name first"],
                              body="loss = model(tokens[sl], targets[sl])\n            loss.backward()"))
    (group,) = [g for g in model.loops if g.accumulates]
    (event,) = group.of_kind(EventKind.BACKWARD)
    book = ledger(model, group, event)
    assert [e.factor for e in book.entries] == [Factor.TOKEN_SUM]
    assert "forward" in book.entries[0].evidence


_SUM = SILENT["cross_entropy reduction='sum' returned directly"]
_MEAN = REPORTED["the default (mean) reduction"]


def test_the_model_built_from_a_class_is_read_not_any_class_of_the_module() -> None:
    other = """
class MeanLM(LM):
    def forward(self, x, y):
        return F.cross_entropy(self.head(x).flatten(0, 1), y.flatten())

"""
    built = _LOOP.replace("def train(model, loader,", "def train(loader,").replace(
        "    for update", "    model = MeanLM(8, 4).cuda()\n    for update", 1)
    source = _snippet(_SUM, extra=other).replace(_LOOP.format(body="model(tokens[sl], targets[sl]).backward()"), "")
    source += built.format(body="model(tokens[sl], targets[sl]).backward()")
    assert [code for code, _ in lint(source, "ACC103")] == ["ACC103"]
    assert lint(source.replace("MeanLM(8, 4)", "torch.compile(LM(8, 4))"), "ACC103") == []


def test_an_unbound_model_is_silent_only_when_every_loss_forward_of_the_module_sums() -> None:
    mixed = _snippet(_SUM, extra="""
class MeanLM(nn.Module):
    def forward(self, x, y):
        return F.cross_entropy(x.flatten(0, 1), y.flatten())

""")
    # the parameter `model` may be either class: a sum is evidence only when it is the only reading
    assert [code for code, _ in lint(mixed, "ACC103")] == ["ACC103"]


def test_an_inline_loss_call_is_not_read_as_a_forward() -> None:
    # `F.cross_entropy(...)` in the loop is the loss itself (a mean): no forward to follow
    source = _snippet(_SUM, body="F.cross_entropy(model(tokens[sl]), targets[sl]).backward()")
    assert [code for code, _ in lint(source, "ACC103")] == ["ACC103"]


def test_a_sum_reduced_in_the_loop_itself_is_unchanged() -> None:
    # no forward to follow: an inline `reduction="sum"` without a denominator keeps ACC103 (the
    # spec exempts it only with a documented denominator)
    source = _snippet(_SUM, body='F.cross_entropy(model.head(tokens[sl]).flatten(0, 1), targets[sl].flatten(), '
                                 'reduction="sum").backward()')
    assert [code for code, _ in lint(source, "ACC103")] == ["ACC103"]


def _project(tmp_path: Path, reduction: str) -> Path:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'lm'\n")
    (tmp_path / "lm").mkdir()
    (tmp_path / "lm" / "__init__.py").write_text("")
    (tmp_path / "lm" / "net.py").write_text(textwrap.dedent(f"""
    import torch.nn.functional as F
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(4, 8)

        def forward(self, x, y):
            return F.cross_entropy(self.head(x).flatten(0, 1), y.flatten(), reduction="{reduction}")
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""
    from lm.net import Net

    model = Net().cuda()
    for update in range(num_updates):
        tokens, targets = next(loader)
        for i in range(len(tokens) // mbs):
            model(tokens[i * mbs:(i + 1) * mbs], targets[i * mbs:(i + 1) * mbs]).backward()
        opt.step()
        model.zero_grad(set_to_none=True)
    """))
    return tmp_path


def test_a_model_class_of_another_project_module_is_followed(tmp_path: Path) -> None:
    assert check(_project(tmp_path, "sum")) == []


def test_a_mean_model_of_another_project_module_is_still_acc103(tmp_path: Path) -> None:
    assert check(_project(tmp_path, "mean")) == [("train.py", "ACC103", 8)]
