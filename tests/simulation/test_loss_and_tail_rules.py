"""ACC005 (partial final group), ACC102–ACC105 (normalization) and ACC202 (retain_graph):
the shapes each must report, and the neighbouring shapes it must leave alone — including
the ones the model cannot decide (silence documented, not a verdict)."""

# The tests kept here need more than one snippet's findings: message text. A plain "this one-file
# snippet reports exactly these (code, line) findings" test belongs in the rule's
# rules/<CODE>-<name>/cases.toml (tests/catalogue/test_rule_folders.py runs them all).

from __future__ import annotations

import textwrap

from accumlint.pipeline.engine import check_source, rules_for
from tests.catalogue.test_rule_folders import case_code


def test_partial_group_message_says_what_happens_to_the_tail() -> None:
    leak = case_code("ACC005 tail leaks into the next epoch (updates per epoch counted with //)")
    weighted = case_code("ACC005 flushed tail still divided by A (weighted r/A)")
    messages = [
        check_source("s.py", textwrap.dedent(src).encode(), rules_for(["ACC005"])).findings[0].message
        for src in (leak, weighted)
    ]
    # the leak is read off the simulated runs: the message names the run and the merged group
    assert "join the next epoch's first update" in messages[0]
    assert "simulated with A=4 N=9" in messages[0] and "a group of 5 microbatches from two epochs" in messages[0]
    assert "weighs r/A" in messages[1]
