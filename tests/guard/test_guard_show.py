"""Reading a saved card (``python -m runtime_guard show``, ``--html``), the sparkline, the demo
(the README's first command), and the linter staying free of torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

pytest.importorskip("torch")

from runtime_guard.__main__ import main  # noqa: E402
from runtime_guard.render import sparkline  # noqa: E402
from tests.guard.guard_loops import train  # noqa: E402
from tests.shared_data import REPO

EXAMPLES = REPO / "examples"


def test_sparkline_scales_to_the_maximum() -> None:
    assert sparkline([0, 5, 10]) == "▁▅█"
    assert sparkline([3, 3]) == "██"
    assert sparkline([]) == ""


def test_show_prints_card_and_writes_html(tmp_path, capsys) -> None:
    report = train("losses_list").report
    path = tmp_path / "card.json"
    report.to_json(path)
    saved = json.loads(path.read_text())
    assert saved["card"]["A"] == 4 and [f["code"] for f in saved["findings"]] == ["ACC201"]
    page = tmp_path / "card.html"
    assert main(["show", str(path), "--html", str(page)]) == 0
    out = capsys.readouterr().out
    values = [row["saved_activation_peak_bytes"] for row in saved["card"]["memory"]["per_microbatch"]]
    assert "ACC201 [error] loss-kept-with-graph" in out
    assert sparkline(values) in out
    assert "group 0: F B | F B | F B | F B ‖ clip step sched zero" in out
    html = page.read_text()
    assert "<svg" in html and "<polyline" in html and "ACC201" in html
    # self-contained: no external asset (stylesheet, script, image); links to the rules' pages only
    import re

    assert not re.search(r"""(src|href)=["'](?!https://github.com/accumlint/accumlint/blob/main/rules/)""", html)
    assert not re.search(r"<(link|script|img)\b", html)


def test_run_writes_the_report_then_show_reads_it(tmp_path, capsys) -> None:
    out = tmp_path / "report.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status = main(["run", "-A", "4", "--json", str(out), str(EXAMPLES / "train_buggy.py")])
    assert status == 1
    saved = json.loads(out.read_text())
    assert sorted(f["code"] for f in saved["findings"]) == ["ACC001", "ACC201", "ACC304"]
    assert saved["card"]["A_source"] == "given to the probe"
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    assert "ACC304 [error] scheduler-per-microbatch" in capsys.readouterr().out


def test_show_accepts_a_bare_card(tmp_path, capsys) -> None:
    path = tmp_path / "card.json"
    path.write_text(json.dumps(train("correct").report.card))
    assert main(["show", str(path)]) == 0
    assert "no findings" in capsys.readouterr().out


def test_demo_both_engines_agree_on_the_bundled_example(capsys) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        status = main(["demo", str(EXAMPLES)])
    out = capsys.readouterr().out
    table = out.split("both engines:")[1].splitlines()
    buggy = next(line for line in table if "train_buggy.py" in line).split()
    fixed = next(line for line in table if "train_fixed.py" in line).split()
    assert status == 1
    assert buggy[1:] == ["ACC001,", "ACC201,", "ACC304", "ACC001,", "ACC201,", "ACC304"]
    assert fixed[1:] == ["none", "none"]


def test_linter_never_imports_torch_or_the_guard() -> None:
    code = (
        "import sys, accumlint.cli.app, accumlint.checks, accumlint.pipeline.engine, accumlint.report.catalogue\n"
        "from click.testing import CliRunner\n"
        f"CliRunner().invoke(accumlint.cli.app.main, ['check', {str(EXAMPLES)!r}, '--exit-zero'])\n"
        "assert 'torch' not in sys.modules and 'runtime_guard' not in sys.modules, 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_show_into_a_reader_that_stops_reading_ends_quietly(tmp_path) -> None:
    """Reproduction: ``python -m runtime_guard show CARD | head -c 10`` ended in a BrokenPipeError
    traceback."""
    path = tmp_path / "card.json"
    path.write_text(json.dumps(train("correct").report.card))
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "runtime_guard", "show", str(path)], stdout=write,
                          stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    os.close(write)
    assert done.returncode == 1
    assert done.stderr == ""


def test_the_card_names_the_script_without_the_users_folders(tmp_path, monkeypatch, capsys) -> None:
    """Reproduction: the card (and its HTML page, which users share) carried the script's absolute
    path. Below the current directory it is relative; elsewhere only the file name."""
    for cwd, expected in ((EXAMPLES.parent, "examples/train_buggy.py"), (tmp_path, "train_buggy.py")):
        monkeypatch.chdir(cwd)
        out = tmp_path / "report.json"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            main(["run", "-A", "4", "--json", str(out), str(EXAMPLES / "train_buggy.py")])
        capsys.readouterr()
        assert json.loads(out.read_text())["card"]["script"] == expected
