"""The result cache: what invalidates it, what it tolerates, where it lives, ``accumlint clean``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from accumlint import cache, engine
from accumlint.cache import CACHEDIR_TAG, GITIGNORE, ResultCache, fingerprint
from accumlint.cli import main

BUGGY = "for i, batch in enumerate(loader):\n    loss.backward()\n    opt.zero_grad()\n"
PLAIN = "x = 1\n"


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def concise(*args: str) -> list[str]:
    result = run("check", "--output-format", "concise", "--quiet", "--exit-zero", *args)
    assert result.exit_code == 0, result.output
    return result.output.splitlines()


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_rules: object) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cache.CACHE_DIR_ENV, raising=False)
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    (tmp_path / "plain.py").write_text(PLAIN, encoding="utf-8")
    return tmp_path


def cache_files(project: Path) -> list[Path]:
    return sorted((project / cache.CACHE_DIR_NAME).glob("*/*.json"))


def entries(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))["files"]


def spy_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the files the engine checks (forked workers would hide the calls: use --jobs 1)."""
    checked: list[str] = []
    real = engine.check_source

    def spy(path: str, data: bytes, rules: object = None) -> engine.FileResult:
        checked.append(os.path.basename(path))
        return real(path, data, rules)  # type: ignore[arg-type]

    monkeypatch.setattr(engine, "check_source", spy)
    return checked


def test_cache_directory_is_tagged_ignored_and_holds_every_file(project: Path) -> None:
    assert concise() == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    directory = project / cache.CACHE_DIR_NAME
    assert (directory / "CACHEDIR.TAG").read_text(encoding="utf-8") == CACHEDIR_TAG
    assert (directory / ".gitignore").read_text(encoding="utf-8") == GITIGNORE
    (file,) = cache_files(project)
    assert file.parent.name == cache.__version__
    stored = entries(file)
    assert sorted(os.path.basename(p) for p in stored) == ["plain.py", "train.py"]
    train = stored[str(project / "train.py")]
    assert train["digest"] == cache.content_digest(BUGGY.encode())
    assert [row[:3] for row in train["findings"]] == [[3, 5, "ACC001"]]
    assert not [p for p in directory.rglob("*") if p.name.endswith(".tmp")]


def test_warm_run_checks_nothing_and_a_changed_file_is_checked_again(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked = spy_checks(monkeypatch)
    assert concise("--jobs", "1") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert sorted(checked) == ["plain.py", "train.py"]
    checked.clear()
    assert concise("--jobs", "1") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert checked == []
    (project / "train.py").write_text("opt.zero_grad()\n" + BUGGY, encoding="utf-8")
    assert concise("--jobs", "1") == [
        "train.py:1:1: ACC001 `zero_grad` is called here",
        "train.py:4:5: ACC001 `zero_grad` is called here",
    ]
    assert checked == ["train.py"]


@pytest.mark.parametrize(
    "change",
    [
        {"enabled": ["ACC000"]},
        {"per_file_ignores": {"tests/*": ["ACC001"]}},
        {"project_root": Path("/elsewhere")},
        {"registry": ["accumlint.checks.resets.ZeroGradInsideGroup"]},
    ],
    ids=["selection", "per-file-ignores", "root", "registry"],
)
def test_every_setting_that_changes_findings_changes_the_key(change: dict) -> None:
    base = {"enabled": ["ACC000", "ACC001"], "per_file_ignores": {}, "project_root": Path("/p"), "registry": []}
    assert fingerprint(**base) == fingerprint(**base)
    assert fingerprint(**base) != fingerprint(**{**base, **change})


def test_version_and_source_changes_invalidate(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checked = spy_checks(monkeypatch)
    concise("--jobs", "1")
    checked.clear()
    monkeypatch.setattr(cache, "__version__", "9.9.9")
    concise("--jobs", "1")
    assert sorted(checked) == ["plain.py", "train.py"]
    checked.clear()
    monkeypatch.setattr(cache, "source_hash", lambda: "edited")  # an edit to an editable install
    concise("--jobs", "1")
    assert sorted(checked) == ["plain.py", "train.py"]
    assert len(cache_files(project)) == 3  # 0.1.0/<key>, 9.9.9/<key>, 9.9.9/<edited key>


def test_source_hash_follows_the_package_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "rule.py").write_text("A = 1\n", encoding="utf-8")
    monkeypatch.setattr(cache, "PACKAGE_DIR", tmp_path)
    cache.source_hash.cache_clear()
    try:
        before = cache.source_hash()
        (tmp_path / "checks" / "rule.py").write_text("A = 2\n", encoding="utf-8")
        cache.source_hash.cache_clear()
        assert cache.source_hash() != before
    finally:
        cache.source_hash.cache_clear()


def test_selection_change_is_not_served_stale_findings(project: Path) -> None:
    assert concise("--select", "ACC000") == []
    assert concise() == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert concise("--select", "ACC000") == []


@pytest.mark.parametrize("garbage", [b"", b"{not json", b"[1, 2]", b'{"format": 1, "files": []}', b"\xff\xfe"])
def test_a_corrupt_cache_file_is_ignored_and_replaced(project: Path, garbage: bytes) -> None:
    concise()
    (file,) = cache_files(project)
    file.write_bytes(garbage)
    assert concise() == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert sorted(os.path.basename(p) for p in entries(file)) == ["plain.py", "train.py"]


def test_a_corrupt_entry_is_ignored(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    concise()
    (file,) = cache_files(project)
    data = json.loads(file.read_text(encoding="utf-8"))
    train = data["files"][str(project / "train.py")]
    train["findings"] = [[3, "five", "ACC001"]]
    file.write_text(json.dumps(data), encoding="utf-8")
    checked = spy_checks(monkeypatch)
    assert concise("--jobs", "1") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert checked == ["train.py"]


def test_an_unwritable_cache_is_ignored(project: Path) -> None:
    blocker = project / "blocker"
    blocker.write_text("a file where the cache directory should be\n", encoding="utf-8")
    assert concise("--cache-dir", str(blocker / "cache")) == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert blocker.read_text(encoding="utf-8").startswith("a file")


def test_no_cache_neither_writes_nor_reads(project: Path) -> None:
    assert concise("--no-cache") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert not (project / cache.CACHE_DIR_NAME).exists()
    concise()
    (file,) = cache_files(project)
    stored = json.loads(file.read_text(encoding="utf-8"))
    for entry in stored["files"].values():
        entry["findings"] = []  # a cache that claims there is nothing to report
    file.write_text(json.dumps(stored), encoding="utf-8")
    assert concise() == []
    assert concise("--no-cache") == ["train.py:3:5: ACC001 `zero_grad` is called here"]


def test_cache_dir_from_option_environment_and_config(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (project / "pyproject.toml").write_text('[tool.accumlint]\ncache-dir = "build/lint-cache"\n', encoding="utf-8")
    concise()
    assert (project / "build" / "lint-cache" / "CACHEDIR.TAG").is_file()
    monkeypatch.setenv(cache.CACHE_DIR_ENV, "env-cache")
    concise()
    assert (project / "env-cache" / "CACHEDIR.TAG").is_file()
    concise("--cache-dir", "option-cache")
    assert (project / "option-cache" / "CACHEDIR.TAG").is_file()
    assert not (project / cache.CACHE_DIR_NAME).exists()


def test_bad_cache_dir_setting_is_a_config_error(project: Path) -> None:
    (project / "pyproject.toml").write_text("[tool.accumlint]\ncache-dir = 3\n", encoding="utf-8")
    result = run("check")
    assert result.exit_code == 2
    assert "[tool.accumlint] cache-dir: expected a directory path, got 3" in result.output


def test_clean_removes_the_cache(project: Path) -> None:
    concise()
    result = run("clean")
    assert (result.exit_code, result.output) == (0, f"Removed {project / cache.CACHE_DIR_NAME}\n")
    assert not (project / cache.CACHE_DIR_NAME).exists()
    assert run("clean").output == f"No cache at {project / cache.CACHE_DIR_NAME}\n"


def test_clean_refuses_a_directory_accumlint_did_not_create(project: Path) -> None:
    precious = project / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me\n", encoding="utf-8")
    result = run("clean", "--cache-dir", str(precious))
    assert result.exit_code == 2
    assert "not an accumlint cache" in result.output
    assert (precious / "notes.txt").is_file()


def test_old_entries_are_dropped_when_the_file_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResultCache(tmp_path, "key")
    store.put("old.py", "d1", [])
    store.save()
    monkeypatch.setattr(cache, "_today", lambda: store._today + cache.MAX_UNSEEN_DAYS + 1)
    later = ResultCache.load(tmp_path, "key")
    later.put("new.py", "d2", [])
    later.save()
    assert [os.path.basename(p) for p in entries(later.file)] == ["new.py"]
