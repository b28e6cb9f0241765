"""The scaffold's text helpers (``scripts/new_rule.py``), without running it: what it writes is
ruff-clean at any summary length, and a summary that opens with code stays as written."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.shared_data import REPO

_SPEC = importlib.util.spec_from_file_location("new_rule", REPO / "scripts" / "new_rule.py")
assert _SPEC is not None and _SPEC.loader is not None
new_rule = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(new_rule)


@pytest.mark.parametrize("indent", ["", "    "])
def test_a_docstring_of_any_length_fits_the_line(indent: str) -> None:
    # (a summary whose docstring was 1-3 characters past the line once wrapped onto one line of 122)
    for length in range(90, 260):
        text = ("word " * length)[:length].strip() + "."
        lines = new_rule.docstring(text, indent).split("\n")
        assert max(map(len, lines)) <= new_rule.LINE, (length, lines)
        assert " ".join(line.strip().strip('"') for line in lines) == text


def test_a_summary_opening_with_code_is_not_capitalised() -> None:
    assert new_rule.sentence("optimizer.step() twice at one boundary") == "optimizer.step() twice at one boundary"
    assert new_rule.sentence("`zero_grad` before backward") == "`zero_grad` before backward"
    assert new_rule.sentence("gradients reset every microbatch") == "Gradients reset every microbatch"


def test_a_family_package_gets_the_class_in_its_init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A family whose analyses live beside its rules is a package: the class joins its ``__init__.py``
    (the module the spec's ``implemented_by`` names), not a new ``<module>.py`` beside the package."""
    family = tmp_path / "accumlint" / "checks" / "sync"
    family.mkdir(parents=True)
    (family / "__init__.py").write_text(new_rule.MODULE_HEAD.format(doc='"""Sync."""'), encoding="utf-8")
    monkeypatch.setattr(new_rule, "ROOT", tmp_path)
    args = new_rule.argparse.Namespace(module="sync", name="no-sync-fiddle", code="ACC499", summary="a fiddle")
    assert new_rule.write_check(args) == family / "__init__.py"
    assert "class NoSyncFiddle(Rule):" in (family / "__init__.py").read_text(encoding="utf-8")
    assert not (tmp_path / "accumlint" / "checks" / "sync.py").exists()
