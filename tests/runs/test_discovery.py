"""Which files a run checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accumlint.settings.discovery import DiscoveryError, discover


def touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n", encoding="utf-8")


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    touch(
        tmp_path,
        "train.py",
        "notes.txt",
        "stub.pyi",
        "pkg/__init__.py",
        "pkg/model.py",
        "pkg/sub/deep.py",
        ".git/hooks/x.py",
        ".venv/lib/x.py",
        "venv/x.py",
        "myenv/lib/x.py",
        "myenv/pyvenv.cfg",
        "build/lib/x.py",
        "dist/x.py",
        "pkg/__pycache__/x.py",
        "node_modules/x.py",
        ".tox/x.py",
        ".nox/x.py",
        ".eggs/x.py",
        "accumlint.egg-info/x.py",
        ".mypy_cache/x.py",
        ".ruff_cache/x.py",
        ".pytest_cache/x.py",
        ".accumlint_cache/x.py",
        "lib/site-packages/x.py",
        ".hg/x.py",
        ".svn/x.py",
    )
    return tmp_path


def test_walks_for_py_files_and_skips_builtin_dirs(tree: Path) -> None:
    assert discover(["."]) == ["pkg/__init__.py", "pkg/model.py", "pkg/sub/deep.py", "train.py"]


def test_explicit_file_in_a_skipped_dir_is_checked(tree: Path) -> None:
    assert discover([".venv/lib/x.py", "notes.txt"]) == [".venv/lib/x.py", "notes.txt"]


def test_explicit_dir_is_walked(tree: Path) -> None:
    assert discover(["build"]) == ["build/lib/x.py"]


def test_exclude_globs(tree: Path) -> None:
    assert discover(["."], exclude=["sub"]) == ["pkg/__init__.py", "pkg/model.py", "train.py"]
    assert discover(["."], exclude=["pkg/*.py"]) == ["train.py"]
    assert discover(["."], exclude=["model.py", "./train.py"]) == ["pkg/__init__.py", "pkg/sub/deep.py"]
    assert discover(["."], exclude=["pkg/"]) == ["train.py"]


def test_exclude_is_relative_to_the_project_root(tree: Path) -> None:
    assert discover(["pkg"], exclude=["pkg/sub"], root=tree) == ["pkg/__init__.py", "pkg/model.py"]
    # the same relative pattern does not match when the root is elsewhere
    assert discover(["pkg"], exclude=["pkg/sub"], root=tree / "pkg") == [
        "pkg/__init__.py",
        "pkg/model.py",
        "pkg/sub/deep.py",
    ]


def test_explicitly_named_excluded_paths_are_still_checked(tree: Path) -> None:
    assert discover(["pkg/sub", "train.py"], exclude=["sub", "train.py"]) == ["pkg/sub/deep.py", "train.py"]


def test_absolute_paths_stay_absolute(tree: Path) -> None:
    assert discover([tree / "pkg" / "sub"]) == [str(tree / "pkg" / "sub" / "deep.py")]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlink_loop_terminates_and_lists_each_file_once(tree: Path) -> None:
    os.symlink("..", tree / "pkg" / "sub" / "up")  # pkg/sub/up -> pkg
    os.symlink(tree / "pkg", tree / "alias")  # a second route to pkg
    assert discover(["."]) == ["pkg/__init__.py", "pkg/model.py", "pkg/sub/deep.py", "train.py"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_dir_outside_the_tree_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    touch(tmp_path, "elsewhere/lib.py", "proj/main.py")
    os.symlink(tmp_path / "elsewhere", tmp_path / "proj" / "linked")
    monkeypatch.chdir(tmp_path / "proj")
    assert discover(["."]) == ["linked/lib.py", "main.py"]


def test_overlapping_paths_are_listed_once(tree: Path) -> None:
    assert discover(["pkg", ".", "pkg/model.py"]) == [
        "pkg/__init__.py",
        "pkg/model.py",
        "pkg/sub/deep.py",
        "train.py",
    ]


def test_nonexistent_path(tree: Path) -> None:
    with pytest.raises(DiscoveryError, match=r"^missing\.py: path does not exist$"):
        discover(["train.py", "missing.py"])


def test_a_directory_that_cannot_be_listed_is_named(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Skipped without a word before (issue 28): the walk says which folder it could not list, and why."""
    real_scandir = os.scandir

    def guarded(path: str) -> object:
        if path.endswith("sub"):
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", guarded)
    warnings: list[str] = []
    assert "pkg/sub/deep.py" not in discover(["."], warn=warnings.append)
    assert warnings == ["pkg/sub: directory not checked: Permission denied"]
