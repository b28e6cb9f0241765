"""Framework facts as rows (issue 15): A hidden in ``Accelerator(**options)`` or a
``GradientAccumulationPlugin``, and the ``cfg_accelerator_`` samples of ../shared/patterns
(skipped where the shared samples are absent)."""

from __future__ import annotations

import csv
import textwrap

import pytest

from accumlint.checks import ALL_RULES
from accumlint.engine import check_source, rules_for
from tests.shared_data import SHARED, require_shared

EVERY_RULE = rules_for(rule.code for rule in ALL_RULES)


def found(source: str) -> list[tuple[str, int]]:
    """(code, line) of every finding in ``source`` (dedented), every rule selected."""
    data = textwrap.dedent(source).lstrip("\n").encode()
    return [(f.code, f.line) for f in check_source("train.py", data, EVERY_RULE).findings]


def _rows() -> list[dict[str, str]]:
    table = SHARED / "patterns" / "expected.tsv"
    if not table.exists():
        return []
    with table.open(newline="") as handle:
        return [row for row in csv.DictReader(handle, delimiter="\t") if row["file"].startswith("cfg_accelerator_")]


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row["file"])
def test_shared_accelerator_kwargs_samples(row: dict[str, str]) -> None:
    path = require_shared("patterns", row["file"])
    codes = set(row["required"].split("|"))
    lines = {int(line) for line in row["lines"].split(",")}
    hits = [(f.code, f.line) for f in check_source(str(path), path.read_bytes(), EVERY_RULE).findings]
    assert any(code in codes and line in lines for code, line in hits), hits


def test_the_shared_table_has_the_accelerator_kwargs_rows() -> None:
    require_shared("patterns", "expected.tsv")
    assert {row["file"] for row in _rows()} >= {"cfg_accelerator_kwargs_double_div.py",
                                                 "cfg_accelerator_kwargs_zero_grad.py"}


LOOP = """
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(batch).loss{division}
            accelerator.backward(loss)
            optimizer.step()
            {reset}.zero_grad()
"""


def _script(config: str, division: str = "", reset: str = "optimizer") -> str:
    body = textwrap.indent(textwrap.dedent(LOOP).format(division=division, reset=reset), "    ")
    return ("from accelerate import Accelerator, GradientAccumulationPlugin\n\n\n"
            "def fit(hp, model, optimizer, loader):\n" + textwrap.indent(textwrap.dedent(config).strip(), "    ")
            + "\n    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" + body)


CONFIGS = {
    "dict display": """
        settings = {"mixed_precision": "fp16", "gradient_accumulation_steps": hp.micro}
        accelerator = Accelerator(**settings)
    """,
    "dict call": """
        options = dict(log_with="wandb", gradient_accumulation_steps=hp.micro)
        accelerator = Accelerator(**options)
    """,
    "inline dict": """
        accelerator = Accelerator(**{"gradient_accumulation_steps": hp.micro})
    """,
    "plugin object": """
        plugin = GradientAccumulationPlugin(num_steps=hp.micro, sync_with_dataloader=False)
        accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    """,
    "plugin positional": """
        accelerator = Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(hp.micro))
    """,
}


@pytest.mark.parametrize("name", CONFIGS)
def test_a_hidden_a_is_read_and_a_manual_division_reported(name: str) -> None:
    source = _script(CONFIGS[name], " / hp.micro")
    line = source.splitlines().index("            loss = model(batch).loss / hp.micro") + 1
    assert found(source) == [("ACC101", line)]


@pytest.mark.parametrize("name", CONFIGS)
def test_a_hidden_a_without_a_manual_division_is_silent(name: str) -> None:
    assert found(_script(CONFIGS[name])) == []


@pytest.mark.parametrize("name", CONFIGS)
def test_a_model_reset_under_a_hidden_a_is_reported(name: str) -> None:
    source = _script(CONFIGS[name], reset="model")
    line = source.splitlines().index("            model.zero_grad()") + 1
    assert ("ACC001", line) in found(source)


UNDECIDED = {
    "dict built by a helper": """
        accelerator = Accelerator(**make_options(hp))
    """,
    "dict passed in": """
        accelerator = Accelerator(**hp.accelerator_options)
    """,
    "dict filled in later": """
        settings = {"mixed_precision": "fp16"}
        settings["gradient_accumulation_steps"] = hp.micro
        accelerator = Accelerator(**settings)
    """,
    "plugin built elsewhere": """
        accelerator = Accelerator(gradient_accumulation_plugin=hp.plugin)
    """,
}


@pytest.mark.parametrize("name", UNDECIDED)
def test_an_a_the_code_does_not_show_stays_undecided(name: str) -> None:
    """Precision first: when the ``**`` mapping or the plugin is not visible, whether
    Accelerate divides is unknown, so neither the division nor the reset is reported."""
    assert found(_script(UNDECIDED[name], " / hp.micro")) == []
    assert found(_script(UNDECIDED[name], reset="model")) == []
