"""accumlint's ``noqa`` directives under the real ``ruff check --fix`` with ``RUF100``/``RUF102``
(issue 34): ruff deletes the ``ACC`` codes it does not know from a ``# noqa`` unless its
configuration says ``external = ["ACC"]``, and never touches ``# accumlint: noqa: ACC001``,
the form ``noqa-style = "accumlint"`` makes ``--add-noqa`` write."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import ACC001_LOOP, cli

pytestmark = pytest.mark.slow  # runs ruff in a subprocess


def _ruff() -> str | None:
    beside = Path(sys.executable).parent / "ruff"
    return str(beside) if beside.is_file() else shutil.which("ruff")


RUFF = _ruff()
requires_ruff = pytest.mark.skipif(RUFF is None, reason="ruff is not installed (pip install -e '.[dev]')")
#: the reset line of ACC001_LOOP (line 3)
RESET = b"    optimizer.zero_grad()"


def ruff_fix(root: Path, *config: str) -> None:
    """``ruff check --fix`` with the unused and invalid ``noqa`` rules, as a project running both would."""
    assert RUFF is not None
    subprocess.run(
        [RUFF, "check", "--no-cache", "--fix", "--select", "RUF100", "--extend-select", "RUF", *config, "."],
        cwd=root, capture_output=True, timeout=120, check=False,
    )


def reset_line(path: Path) -> str:
    return path.read_text(encoding="utf-8").splitlines()[2]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@requires_ruff
def test_ruff_deletes_a_noqa_of_acc_codes_it_does_not_know(project: Path) -> None:
    """The problem: the whole comment goes, and the finding is back."""
    (project / "train.py").write_bytes(ACC001_LOOP.replace(RESET, RESET + b"  # noqa: ACC001, E501"))
    assert cli("check", "--no-cache", "train.py").exit_code == 0
    ruff_fix(project, "--isolated")
    assert reset_line(project / "train.py") == RESET.decode()
    assert cli("check", "--no-cache", "train.py").exit_code == 1


@requires_ruff
def test_external_acc_keeps_the_shared_noqa(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.ruff.lint]\nexternal = ["ACC"]\n', encoding="utf-8")
    line = RESET + b"  # noqa: ACC001, F821"  # F821 is used: `optimizer` is not defined in this snippet
    (project / "train.py").write_bytes(ACC001_LOOP.replace(RESET, line))
    ruff_fix(project, "--config", "pyproject.toml", "--extend-select", "F821")
    assert reset_line(project / "train.py") == line.decode()
    assert cli("check", "--no-cache", "train.py").exit_code == 0


@requires_ruff
def test_ruff_leaves_the_accumlint_form_that_add_noqa_writes(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.accumlint]\nnoqa-style = "accumlint"\n', encoding="utf-8")
    (project / "train.py").write_bytes(ACC001_LOOP.replace(RESET, RESET + b"  # noqa: E501"))
    (project / "other.py").write_bytes(b"# accumlint: noqa: ACC3\nx = 1  # accumlint: noqa\n" + ACC001_LOOP)
    assert "Added 2 noqa directives." in cli("check", "--no-cache", "--add-noqa", ".").stderr
    assert reset_line(project / "train.py") == f"{RESET.decode()}  # noqa: E501  # accumlint: noqa: ACC001"
    before = (project / "other.py").read_bytes()
    ruff_fix(project, "--isolated")  # E501 is not enabled: ruff removes its now unused noqa, and only it
    assert reset_line(project / "train.py") == f"{RESET.decode()}  # accumlint: noqa: ACC001"
    assert (project / "other.py").read_bytes() == before
    assert cli("check", "--no-cache", ".").exit_code == 0
