"""scripts/release.py on a copy of the files it edits: the version, the changelog, the pinned tags."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import runtime_guard
from accumlint import __version__
from tests.docs.test_readme import load_script
from tests.shared_data import REPO

release = load_script("release")

CHANGELOG = """\
# Changelog

## Unreleased

- ACC999: a new rule.

## 0.2.0 — 2026-12-03

- the last release.
"""

#: a doc with every form of pin, and look-alikes that are not accumlint's
GUIDE = """\
```yaml
repos:
  - repo: https://github.com/astral-sh/ruff-pre-commit
    rev: v0.6.9
    hooks:
      - id: ruff
  - repo: https://github.com/accumlint/accumlint.git
    rev: "0123abc"  # pinned
    hooks:
      - id: accumlint
```

- uses: actions/checkout@v4
pip install git+https://github.com/accumlint/accumlint.git@main#egg=accumlint
pip install "accumlint[lsp] @ git+https://github.com/accumlint/accumlint"
git+https://github.com/accumlint/accumlint-extras@v1
"""

GUIDE_RELEASED = GUIDE.replace('rev: "0123abc"', 'rev: "v0.3.0"').replace(
    "accumlint.git@main#", "accumlint.git@v0.3.0#"
).replace('accumlint/accumlint"', 'accumlint/accumlint@v0.3.0"')


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """The files a release edits, copied from this checkout (the changelog and a doc made up)."""
    for name in (*release.VERSION_FILES, "README.md", "CONTRIBUTING.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)
    for name in release.VERSION_FILES:  # whatever this checkout's version, the copy is at 0.2.0
        path = tmp_path / name
        path.write_text(re.sub(r'__version__ = "[^"]*"', '__version__ = "0.2.0"', path.read_text("utf-8")), "utf-8")
    (tmp_path / "CHANGELOG.md").write_text(CHANGELOG, encoding="utf-8")
    (tmp_path / "docs" / "ci").mkdir(parents=True)
    (tmp_path / "docs" / "ci" / "guide.md").write_text(GUIDE, encoding="utf-8")
    return tmp_path


def snapshot(root: Path) -> dict[str, str]:
    return {path.relative_to(root).as_posix(): path.read_text("utf-8") for path in root.rglob("*") if path.is_file()}


def test_a_release_bumps_the_version_dates_the_changelog_and_pins_the_tag(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = (tree / "README.md").read_text("utf-8")
    assert release.main(["0.3.0", "--date", "2027-01-15", "--root", str(tree)]) == 0
    for name in release.VERSION_FILES:
        assert release.current_version((tree / name).read_text("utf-8"), name) == "0.3.0"
    assert (tree / "CHANGELOG.md").read_text("utf-8") == CHANGELOG.replace(
        "## Unreleased\n", "## Unreleased\n\n## 0.3.0 — 2027-01-15\n"
    )
    assert (tree / "docs" / "ci" / "guide.md").read_text("utf-8") == GUIDE_RELEASED
    pinned = (tree / "README.md").read_text("utf-8")
    assert {pin.ref for pin in release.find_pins(pinned)} == {"v0.3.0"}
    # only the pins and the marks of what came after the last release changed
    assert release.after_marks(pinned) == []
    blank = f"v{__version__}"
    mark = f"*(after {__version__})*"
    since = "*(since 0.3.0)*"  # a README released at 0.3.0 already holds these marks
    assert pinned.replace("v0.3.0", "TAG").replace(since, "MARK") == readme.replace(
        blank, "TAG"
    ).replace(mark, "MARK").replace(since, "MARK")
    assert pinned.count(since) == readme.count(mark) + readme.count(since)
    out = capsys.readouterr().out
    assert "updated accumlint/__init__.py, runtime_guard/__init__.py, CHANGELOG.md, " in out
    assert 'git tag -a v0.3.0 -m "accumlint 0.3.0"' in out


def test_a_second_run_changes_nothing_and_each_rewrite_is_idempotent(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert release.main(["v0.3.0", "--date", "2027-01-15", "--root", str(tree)]) == 0
    after = snapshot(tree)
    assert release.main(["0.3.0", "--date", "2027-02-01", "--root", str(tree)]) == 2
    assert "0.3.0 is already the current version (accumlint/__init__.py): nothing written" in capsys.readouterr().err
    assert snapshot(tree) == after
    once = release.date_changelog(CHANGELOG, "0.3.0", "2027-01-15")
    assert release.date_changelog(once, "0.3.0", "2027-01-15") == once
    assert release.pin_docs(release.pin_docs(GUIDE, "v0.3.0"), "v0.3.0") == GUIDE_RELEASED
    source = '"""x"""\n\n__version__ = "0.2.0"\n'
    assert release.set_version(release.set_version(source, "0.3.0", "x"), "0.3.0", "x") == source.replace(
        "0.2.0", "0.3.0"
    )


def test_a_release_turns_the_marks_after_the_current_version_into_since() -> None:
    text = "*(after 0.2.0)* extend; *(after 0.1.0)* old; (after 0.2.0) plain; *(after 0.2.0)* watch"
    assert release.after_marks(text) == ["0.2.0", "0.1.0", "0.2.0"]
    marked = release.mark_docs(text, "0.2.0", "0.3.0")
    assert marked == "*(since 0.3.0)* extend; *(after 0.1.0)* old; (after 0.2.0) plain; *(since 0.3.0)* watch"
    assert release.mark_docs(marked, "0.2.0", "0.3.0") == marked


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("0.2.0", "0.2.0 is already the current version (accumlint/__init__.py)"),
        ("0.1.9", "0.1.9 is not greater than the current version 0.2.0 (accumlint/__init__.py)"),
        ("0.10", "not a version: '0.10' (expected MAJOR.MINOR.PATCH, e.g. 0.3.0)"),
        ("1.0.0rc1", "not a version: '1.0.0rc1'"),
    ],
)
def test_a_version_not_greater_than_the_current_one_is_refused(
    tree: Path, capsys: pytest.CaptureFixture[str], version: str, message: str
) -> None:
    before = snapshot(tree)
    assert release.main([version, "--root", str(tree)]) == 2
    assert message in capsys.readouterr().err
    assert snapshot(tree) == before


def test_versions_compare_as_numbers(tree: Path) -> None:
    """0.10.0 follows 0.9.0 (not as strings)."""
    for name in release.VERSION_FILES:
        path = tree / name
        path.write_text(path.read_text("utf-8").replace('"0.2.0"', '"0.9.0"'), "utf-8")
    assert release.main(["0.10.0", "--date", "2027-01-15", "--root", str(tree)]) == 0
    assert "## 0.10.0 — 2027-01-15" in (tree / "CHANGELOG.md").read_text("utf-8")


def test_the_refusal_is_exit_status_2_from_the_command_line(tree: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "release.py"), "0.1.0", "--root", str(tree)],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("error: 0.1.0 is not greater than the current version 0.2.0")


def test_dry_run_prints_the_diff_and_writes_nothing(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = snapshot(tree)
    assert release.main(["0.3.0", "--dry-run", "--date", "2027-01-15", "--root", str(tree)]) == 0
    assert snapshot(tree) == before
    captured = capsys.readouterr()
    diff = captured.out
    assert diff.startswith('--- a/accumlint/__init__.py\n+++ b/accumlint/__init__.py\n')
    assert '-__version__ = "0.2.0"\n+__version__ = "0.3.0"\n' in diff
    assert "--- a/CHANGELOG.md\n+++ b/CHANGELOG.md\n" in diff and "+## 0.3.0 — 2027-01-15\n" in diff
    assert '-    rev: "0123abc"  # pinned\n+    rev: "v0.3.0"  # pinned\n' in diff
    assert "+++ b/docs/ci/guide.md\n" in diff and "ruff-pre-commit" not in diff.split("+++ b/docs/ci/guide.md")[1]
    assert 'git tag -a v0.3.0 -m "accumlint 0.3.0"' in captured.err
    # the diff is the release: applied with patch, it gives what a real run writes
    if shutil.which("patch") is None:
        return
    subprocess.run(["patch", "-p1", "-s"], input=diff, text=True, cwd=tree, check=True)
    patched = snapshot(tree)
    for name, text in before.items():
        (tree / name).write_text(text, "utf-8")
    assert release.main(["0.3.0", "--date", "2027-01-15", "--root", str(tree)]) == 0
    assert snapshot(tree) == patched


def test_a_changelog_without_an_unreleased_heading_is_refused(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree / "CHANGELOG.md").write_text(CHANGELOG.replace("## Unreleased", "## Next"), "utf-8")
    before = snapshot(tree)
    assert release.main(["0.3.0", "--root", str(tree)]) == 2
    assert "CHANGELOG.md: no `## Unreleased` heading" in capsys.readouterr().err
    assert snapshot(tree) == before


def test_an_empty_unreleased_section_is_released_with_a_warning(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tree / "CHANGELOG.md").write_text(CHANGELOG.replace("- ACC999: a new rule.\n\n", ""), "utf-8")
    assert release.main(["0.3.0", "--date", "2027-01-15", "--root", str(tree)]) == 0
    assert "warning: the `## Unreleased` section of CHANGELOG.md lists nothing" in capsys.readouterr().err
    assert "## Unreleased\n\n## 0.3.0 — 2027-01-15\n\n## 0.2.0 — 2026-12-03\n" in (tree / "CHANGELOG.md").read_text(
        "utf-8"
    )


def test_this_checkout_is_released_as_its_version() -> None:
    """Both packages carry one version, and it is the changelog's latest release, under Unreleased."""
    assert runtime_guard.__version__ == __version__
    headings = re.findall(r"^## (.+)$", (REPO / "CHANGELOG.md").read_text("utf-8"), flags=re.MULTILINE)
    assert headings[0] == "Unreleased"
    assert re.fullmatch(rf"{re.escape(__version__)} — \d{{4}}-\d{{2}}-\d{{2}}", headings[1]), headings[1]
