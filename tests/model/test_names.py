"""Names (issue 14, family 5): A is whatever the code uses as A, not only what is named like
it. Written for these tests."""

# The tests kept here need more than one snippet's findings: the model's aliases of A. A plain
# "this one-file snippet reports exactly these (code, line) findings" test belongs in the rule's
# rules/<CODE>-<name>/cases.toml (tests/catalogue/test_rule_folders.py runs them all).

from __future__ import annotations

from tests.support import model_of


def test_aliases_come_from_the_gate_and_the_configuring_keywords() -> None:
    model = model_of("""
    from accelerate import Accelerator
    acc = Accelerator(gradient_accumulation_steps=cfg.k)
    for i, b in enumerate(loader):
        (model(b) / M).backward()
        if (i + 1) % M == 0:
            opt.step()
            opt.zero_grad()
    """)
    assert model.accumulation_aliases == {"M", "cfg.k"}
