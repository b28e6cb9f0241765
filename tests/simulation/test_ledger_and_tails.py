"""Issue 16: the normalization ledger (ACC101, ACC102, ACC307, ACC405 read the same
denominators), tail model v2 (ACC005 without length arithmetic, counter gates, aliases of the
loader, ``range`` + ``next``) and ACC006's plain-loop update counter. Each reported shape has
a silent twin that differs by the one fact that makes it correct; the shared norm_/tail_
patterns are checked against their expected.tsv rows."""

# The tests kept here need more than one snippet's findings: message text, the model's ledger
# entries, the shared norm_/tail_ pattern rows. A plain "this one-file snippet reports exactly
# these (code, line) findings" test belongs in the rule's rules/<CODE>-<name>/cases.toml
# (tests/catalogue/test_rule_folders.py runs them all).

from __future__ import annotations

import csv
import textwrap

import libcst as cst
import pytest

from accumlint.checks import ALL_RULES
from accumlint.checks.shared.ledger import Factor, ledger
from accumlint.model import EventKind, build_model
from accumlint.pipeline.engine import check_source, rules_for
from tests.catalogue.test_rule_folders import case_code
from tests.shared_data import SHARED, needs_shared, require_shared, shared_params
from tests.support import only_message

EVERY_RULE = rules_for(rule.code for rule in ALL_RULES)


def test_messages_say_the_resulting_scale_and_what_happens_to_the_tail() -> None:
    assert "1/(tokens per microbatch)" in only_message(
        case_code("ACC101 token mean then grads divided by the group's mask count (div_)"), "ACC101")
    assert "D times too small" in only_message(
        case_code("ACC405 grads divided in place by an all-reduced count under DDP"), "ACC405")
    shifted = only_message(case_code("ACC005 counter survives the epoch, grads wiped at epoch start"), "ACC005")
    assert "A - r microbatches" in shifted and "dropped" in shifted
    leak = only_message(case_code("ACC005 leak with no length arithmetic, tuple target, other names"), "ACC005")
    assert "join the next epoch's first update" in leak
    flushed = case_code("ACC005 flush after the loop, each tail microbatch divided by A")
    assert "weighs r/A" in only_message(flushed, "ACC005")
    assert "`n_upd` counts optimizer updates" in only_message(
        case_code("ACC006 scheduler gated on the update counter, nested in another if"), "ACC006")


def test_ledger_entries_per_kind() -> None:
    """One backward's ledger lists the token mean, the division by A, a product and a
    gradient-side rescale with its divisor and cadence."""
    source = textwrap.dedent("""
    import torch.nn.functional as F

    def run(net, opt, dl, accum, w):
        seen = 0
        for j, (ids, tgt) in enumerate(dl):
            seen += tgt.ne(-100).sum()
            out = net(ids)
            loss = F.cross_entropy(out.view(-1, out.size(-1)), tgt.view(-1), ignore_index=-100)
            (loss * w / accum).backward()
            if (j + 1) % accum == 0:
                for p in net.parameters():
                    p.grad.div_(seen)
                opt.step()
                opt.zero_grad()
    """)
    model = build_model(cst.parse_module(source))
    (group,) = [g for g in model.loops if g.accumulates]
    (backward,) = group.of_kind(EventKind.BACKWARD)
    book = ledger(model, group, backward)
    kinds = [entry.factor for entry in book.entries]
    assert kinds == [Factor.TOKEN_MEAN, Factor.DIVIDE_A, Factor.MULTIPLY, Factor.GRAD_RESCALE]
    (rescale,) = book.of(Factor.GRAD_RESCALE)
    assert rescale.divisor is not None and rescale.divisor.value == "seen"  # type: ignore[attr-defined]
    assert rescale.cadence.name == "UPDATE"
    assert "ignore_index" in book.of(Factor.TOKEN_MEAN)[0].evidence


def _shared_rows(prefixes: tuple[str, ...]) -> list[dict[str, str]]:
    table = SHARED / "patterns" / "expected.tsv"
    if not table.exists():
        return []
    with table.open(newline="") as handle:
        return [row for row in csv.DictReader(handle, delimiter="\t") if row["file"].startswith(prefixes)]


@needs_shared
@pytest.mark.parametrize("row", shared_params(_shared_rows(("norm_", "tail_")), "patterns", "expected.tsv"),
                         ids=lambda row: row["file"])
def test_shared_norm_and_tail_patterns(row: dict[str, str]) -> None:
    """Each faulty norm_/tail_ pattern reports its code on one of its lines (every rule
    selected; other true findings its header names may come too); each silent twin reports nothing."""
    path = require_shared("patterns", row["file"])
    found = [(f.code, f.line) for f in check_source(str(path), path.read_bytes(), EVERY_RULE).findings]
    if row["required"] == "-":
        assert found == []
        return
    lines = {int(line) for line in row["lines"].split(",")}
    assert any(code == row["required"] and line in lines for code, line in found), found


LEDGER_KINDS = {
    Factor.FRAMEWORK_A: ("""
    from accelerate import Accelerator

    accelerator = Accelerator(gradient_accumulation_steps=accum)
    for i, b in enumerate(loader):
        with accelerator.accumulate(model):
            accelerator.backward(model(b) / accum)
            optimizer.step()
            optimizer.zero_grad()
    """, "Accelerate"),
    Factor.DIVIDE_GLOBAL_COUNT: ("""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)
    for i, b in enumerate(loader):
        n = b["mask"].sum()
        dist.all_reduce(n)
        ((model(b["x"]) * b["mask"]).sum() / n).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, ""),
    Factor.DIVIDE_WORLD: ("""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    model = DDP(model)
    world_size = dist.get_world_size()
    for i, b in enumerate(loader):
        (model(b) / accum / world_size).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, ""),
    Factor.TOKEN_MEAN: ("""
    for i, b in enumerate(loader):
        keep = b["mask"]
        loss = (model(b["x"]) * keep).sum() / keep.sum()
        (loss / accum).backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    """, "keep.sum()"),
}


@pytest.mark.parametrize("factor", list(LEDGER_KINDS), ids=lambda f: f.name)
def test_each_ledger_entry_kind(factor: Factor) -> None:
    source, evidence = LEDGER_KINDS[factor]
    model = build_model(cst.parse_module(textwrap.dedent(source)))
    backwards = [e for e in model.all_events() if e.kind is EventKind.BACKWARD]
    assert len(backwards) == 1
    (group,) = [g for g in model.loops if g.accumulates]
    entries = ledger(model, group, backwards[0]).of(factor)
    assert len(entries) == 1, ledger(model, group, backwards[0]).entries
    assert evidence in entries[0].evidence
    if factor is Factor.FRAMEWORK_A:
        assert len(entries[0].repeats) == 1  # the manual `/ accum` Accelerate repeats
