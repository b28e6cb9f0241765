"""Jupyter notebooks: code cells checked together, findings placed by cell, magics neutralized."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from accumlint.cli.app import main
from accumlint.pipeline.notebook import check_notebook, neutralize, notebook_source
from accumlint.settings.discovery import discover
from tests.shared_data import DATA

NOTEBOOK = DATA / "train_notebook.ipynb"


def notebook(*cells: tuple[str, str]) -> bytes:
    """A minimal nbformat 4 notebook; ``source`` as a list of lines, as Jupyter saves it."""
    return json.dumps(
        {
            "cells": [
                {"cell_type": kind, "metadata": {}, "source": text.splitlines(keepends=True)}
                | ({"outputs": [], "execution_count": None} if kind == "code" else {})
                for kind, text in cells
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    ).encode()


def test_bad_cell_is_reported_with_its_cell_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(NOTEBOOK, tmp_path / "train.ipynb")
    before = (tmp_path / "train.ipynb").read_bytes()
    result = CliRunner().invoke(main, ["check", "--output-format", "concise", "."])
    assert result.exit_code == 1
    # cell 5 (counting the markdown cells) is the loop with `optimizer.zero_grad()` on its line 3;
    # the same bug in cell 6 is suppressed by a noqa comment for ACC001
    assert result.output.splitlines() == [
        "train.ipynb:cell 5:3:5: ACC001 [*] `optimizer` is reset on every microbatch while the optimizer update runs "
        "once per group, so each update sees only the last microbatch's gradient and accumulation has no effect",
        "",
        "Found 1 finding.",
        "[*] 1 fixable with `--fix`.",
    ]
    assert (tmp_path / "train.ipynb").read_bytes() == before  # never modified


def test_full_text_shows_the_cell_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(NOTEBOOK, tmp_path / "train.ipynb")
    out = CliRunner().invoke(main, ["check", "train.ipynb"]).output
    assert out.startswith("train.ipynb:cell 5:3:5: ACC001 [*] [error]")
    assert "3 |     optimizer.zero_grad()\n  |     ^^^^^^^^^^^^^^^^^^^^^ zero-grad-inside-group\n" in out


def test_json_and_sarif_carry_the_cell(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    shutil.copy(NOTEBOOK, tmp_path / "train.ipynb")
    [item] = json.loads(CliRunner().invoke(main, ["check", "--output-format", "json", "train.ipynb"]).output)
    assert (item["cell"], item["location"], item["end_location"]) == (
        5,
        {"row": 3, "column": 5},
        {"row": 3, "column": 26},
    )
    sarif = json.loads(CliRunner().invoke(main, ["check", "--output-format", "sarif", "train.ipynb"]).output)
    [res] = sarif["runs"][0]["results"]
    assert res["properties"] == {"cell": 5, "cellLine": 3, "cellColumn": 5}
    # the region is in the .ipynb's own lines: line 59 holds `"    optimizer.zero_grad()\n",`
    assert res["locations"][0]["physicalLocation"]["region"]["startLine"] == 59


def test_noqa_in_a_cell_and_file_level_noqa() -> None:
    loop = (
        "for i, (x, y) in enumerate(loader):\n"
        "    optimizer.zero_grad(){noqa}\n"
        "    (loss_fn(model(x), y) / 4).backward()\n"
        "    if (i + 1) % 4 == 0:\n"
        "        optimizer.step()\n"
    )
    setup = "import torch\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nassert len(loader) % 4 == 0\n"
    findings = check_notebook("n.ipynb", notebook(("code", setup), ("code", loop.format(noqa="")))).findings
    assert [(f.code, f.cell, f.line, f.column) for f in findings] == [("ACC001", 2, 2, 5)]
    quiet = notebook(("code", setup), ("code", loop.format(noqa="  # noqa: ACC001")))
    assert check_notebook("n.ipynb", quiet).findings == []
    whole = notebook(("code", "# accumlint: noqa\n" + setup), ("code", loop.format(noqa="")))
    assert check_notebook("n.ipynb", whole).findings == []


def test_magics_and_shell_lines_keep_line_numbers() -> None:
    assert neutralize(["%matplotlib inline", "!pip install x", "files = !ls", "model?", "x = 1"]) == [
        "pass",
        "pass",
        "pass",
        "pass",
        "x = 1",
    ]
    assert neutralize(["for a in b:", "    %time f(a)", "    !echo \\", "      more"]) == [
        "for a in b:",
        "    pass",
        "    pass",
        "",
    ]
    assert neutralize(["%%bash", "echo hi", "", "ls"]) == ["# %%bash", "# echo hi", "", "# ls"]
    assert neutralize(["%%time", "x = 1"]) == ["pass", "x = 1"]
    # a Python cell magic over shell lines (a tutorial's install cell): its body is neutralized too
    assert neutralize(["%%capture", "!pip install pytorch-ignite", "!pip install datasets"]) == [
        "pass", "pass", "pass"]
    # valid Python is left alone, even a line that looks like a magic inside a string
    assert neutralize(['s = """', "%d items", '"""']) == ['s = """', "%d items", '"""']


def test_source_maps_lines_back_to_cells() -> None:
    source = notebook_source(notebook(("markdown", "# t"), ("code", "a = 1\nb = 2"), ("code", "%time c = 3\n")))
    assert source.text == "a = 1\nb = 2\npass\n\n"
    assert [source.locate(n) for n in (1, 2, 3, 4)] == [(2, 1), (2, 2), (3, 1), (3, 2)]
    assert source.cell_lines(3) == ["%time c = 3", ""]


def test_syntax_error_and_invalid_json_are_acc000() -> None:
    # a marker (backward) makes the file worth parsing: files no rule can fire on are not parsed
    broken = check_notebook("n.ipynb", notebook(("code", "x = 1"), ("code", "loss.backward()\ny = (\n"))).findings
    assert [(f.code, f.cell, f.line) for f in broken] == [("ACC000", 2, 2)]
    [invalid] = check_notebook("n.ipynb", b"{not json").findings
    assert invalid.code == "ACC000" and invalid.message.startswith("file could not be checked: not a notebook")


def test_discovery_picks_up_notebooks_but_not_checkpoints(tmp_path: Path) -> None:
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "a.ipynb").write_bytes(notebook(("code", "x = 1")))
    (tmp_path / "nb" / ".ipynb_checkpoints").mkdir()
    (tmp_path / "nb" / ".ipynb_checkpoints" / "a-checkpoint.ipynb").write_bytes(notebook(("code", "x = 1")))
    (tmp_path / "nb" / "b.py").write_text("x = 1\n")
    assert discover([str(tmp_path / "nb")]) == [str(tmp_path / "nb" / "a.ipynb"), str(tmp_path / "nb" / "b.py")]


LOOP = (
    "for i, batch in enumerate(loader):\n    loss = model(batch).mean() / 4\n    optimizer.zero_grad()\n"
    "    loss.backward()\n    if (i + 1) % 4 == 0:\n        optimizer.step()\n"
)


def _with_output(code: str, output_bytes: int) -> bytes:
    """A notebook of one code cell whose saved output (a plot) takes ``output_bytes``."""
    cell = {
        "cell_type": "code",
        "metadata": {},
        "source": code,
        "execution_count": 1,
        "outputs": [{"output_type": "display_data", "metadata": {}, "data": {"image/png": "A" * output_bytes}}],
    }
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_notebook_over_4_mib_of_outputs_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     jobs: str) -> None:
    """Reproduction (issue 28): a notebook over 4 MiB (plots, outputs) got ACC000 "too large" and its
    code was not checked; the limit applies to its code, not to its JSON."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plots.ipynb").write_bytes(_with_output(LOOP, 12 * 2**20))
    (tmp_path / "code.ipynb").write_bytes(_with_output(LOOP + "x = 1  # padding padding\n" * 200_000, 0))
    result = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "concise", "-j", jobs, "."])
    assert result.exit_code == 1
    assert result.output.splitlines()[:2] == [
        "code.ipynb:cell 1:1:1: ACC000 file could not be checked: file too large to parse (4.8 MiB > 4 MiB)",
        "plots.ipynb:cell 1:3:5: ACC001 [*] `optimizer` is reset on every microbatch while the optimizer update runs "
        "once per group, so each update sees only the last microbatch's gradient and accumulation has no effect",
    ]
