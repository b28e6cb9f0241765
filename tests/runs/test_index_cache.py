"""The project index kept between runs (:mod:`accumlint.run.index_cache`): reused, invalidated by an
edit to a module the checked file imports, ignored when corrupt or forged, and never a change
of findings (the catalogue's examples with a cold and a warm index)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from accumlint.cli.app import main
from accumlint.run import cache, runner
from accumlint.run.index_cache import Facts
from tests.cli_helpers import spy_reads
from tests.shared_data import REPO
from tests.support import cache_file, later

RULES_DIR = REPO / "rules"

TRAIN = (
    "from helpers import step\n\n\n"
    "def run(model, optimizer, loader, accum):\n"
    "    for i, batch in enumerate(loader):\n"
    "        step(model(batch) / accum, optimizer, (i + 1) % accum == 0)\n"
)
#: the helper the loop calls: without events (the loop is cleared by the byte stage), or
#: resetting on every call (ACC001 in the loop, through the helper)
QUIET = "from utils import scale\n\n\ndef step(loss, optimizer, should_step):\n    return scale(loss)\n"
RESETS = (
    "from utils import scale\n\n\ndef step(loss, optimizer, should_step):\n    optimizer.zero_grad()\n"
    "    scale(loss).backward()\n    if should_step:\n        optimizer.step()\n"
)
UTILS = "def scale(loss):\n    return loss\n"
ACC001 = "train.py:6:9: ACC001"


def concise(*args: str) -> list[str]:
    result = CliRunner().invoke(main, ["check", "--output-format", "concise", "--quiet", "--exit-zero", "--jobs", "1",
                                       *args])
    assert result.exit_code == 0, result.output
    return [line[:len(ACC001)] if line.startswith("train.py") else line for line in result.output.splitlines()]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cache.CACHE_DIR_ENV, raising=False)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    (tmp_path / "train.py").write_text(TRAIN, encoding="utf-8")
    (tmp_path / "helpers.py").write_text(QUIET, encoding="utf-8")
    (tmp_path / "utils.py").write_text(UTILS, encoding="utf-8")
    return tmp_path


def spy_builds(monkeypatch: pytest.MonkeyPatch, project: Path) -> list[str]:
    """The files whose index facts the runs compute (their names, in order): the hook is the
    function the project pass calls where the stored index does not answer."""
    built: list[str] = []
    real = runner._compute_facts

    def spy(data: bytes, vocabulary: object) -> Facts:
        by_bytes = {path.read_bytes(): path.name for path in project.glob("*.py")}  # as they are now
        built.append(by_bytes.get(data, "?"))
        return real(data, vocabulary)

    monkeypatch.setattr(runner, "_compute_facts", spy)
    return built


def edit(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


def test_a_changed_file_reads_only_itself_with_a_warm_index(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    later(monkeypatch)
    built = spy_builds(monkeypatch, project)
    assert concise("train.py") == []
    assert sorted(built) == ["helpers.py", "train.py", "utils.py"]  # the imports, two deep
    index = json.loads(cache_file(project).read_text(encoding="utf-8"))["index"]
    assert sorted(os.path.basename(path) for path in index) == ["helpers.py", "train.py", "utils.py"]
    assert index[str(project / "helpers.py")]["imports"] == ["utils.scale", "utils"]
    built.clear()
    read = spy_reads(monkeypatch)
    edit(project / "train.py", TRAIN + "# edited\n")  # what a pre-commit hook checks
    assert concise("train.py") == []
    assert built == ["train.py"]
    assert read == ["train.py", "train.py"]  # the project pass and the check; its imports: a stat each


def test_an_edit_to_an_imported_module_is_seen(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    later(monkeypatch)
    built = spy_builds(monkeypatch, project)
    assert concise("train.py") == []
    built.clear()
    edit(project / "helpers.py", RESETS)  # now the loop resets through the helper
    edit(project / "train.py", TRAIN + "# edited\n")
    assert concise("train.py") == [ACC001]
    assert sorted(built) == ["helpers.py", "train.py"]
    built.clear()
    edit(project / "helpers.py", QUIET)  # and back, read by its digest (no signature kept: just written)
    monkeypatch.setattr(cache, "_now_ns", lambda: 0)
    edit(project / "train.py", TRAIN + "# again\n")
    assert concise("train.py") == []
    assert sorted(built) == ["helpers.py", "train.py"]


def test_an_edit_that_keeps_the_size_is_seen_through_the_signature(project: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    later(monkeypatch)
    edit(project / "helpers.py", RESETS.replace("zero_grad", "zero_grbd").replace("backward", "bbckward"))
    assert concise("train.py") == []  # no event in the helper: the loop is cleared
    edit(project / "helpers.py", RESETS)  # same size, new times: read again
    edit(project / "train.py", TRAIN + "# edited\n")
    assert concise("train.py") == [ACC001]


def forge(project: Path, change: object) -> None:
    """Apply ``change`` to the stored index (a function of the section, or its new value)."""
    file = cache_file(project)
    data = json.loads(file.read_text(encoding="utf-8"))
    data["index"] = change(data["index"]) if callable(change) else change
    file.write_text(json.dumps(data), encoding="utf-8")


def _stale_names(index: dict) -> dict:
    """The helper's entry says it defines no event name (as the quiet helper did), signed or not."""
    entry = index[os.path.abspath("helpers.py")]
    entry["names"] = []
    return index


def _bad_types(index: dict) -> dict:
    return {path: {**entry, "names": "step", "imports": [1], "stat": "1,2,3,4,5"} for path, entry in index.items()}


@pytest.mark.parametrize(("change", "rebuilt"), [
    (_stale_names, ["helpers.py", "train.py"]),
    (_bad_types, ["helpers.py", "train.py", "utils.py"]),
    ("garbage", ["helpers.py", "train.py", "utils.py"]),
    ([1, 2], ["helpers.py", "train.py", "utils.py"]),
    ({"x": 1}, ["helpers.py", "train.py", "utils.py"]),
    (None, ["helpers.py", "train.py", "utils.py"]),
], ids=["forged-entry", "bad-types", "string", "list", "junk-entry", "null"])
def test_a_corrupt_or_forged_index_is_ignored(project: Path, monkeypatch: pytest.MonkeyPatch, change: object,
                                             rebuilt: list[str]) -> None:
    later(monkeypatch)
    edit(project / "helpers.py", RESETS)
    assert concise("train.py") == [ACC001]
    forge(project, change)
    built = spy_builds(monkeypatch, project)
    edit(project / "train.py", TRAIN + "# edited\n")
    assert concise("train.py") == [ACC001]  # a stale entry would clear the loop: no finding
    assert sorted(built) == rebuilt
    built.clear()  # and the next run has a sound index again
    edit(project / "train.py", TRAIN + "# again\n")
    assert concise("train.py") == [ACC001]
    assert built == ["train.py"]


def test_no_cache_keeps_no_index(project: Path) -> None:
    assert concise("--no-cache", "train.py") == []
    assert not (project / cache.CACHE_DIR_NAME).exists()


@pytest.mark.slow
def test_the_catalogue_examples_have_the_same_findings_with_a_cold_and_a_warm_index(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every example of the catalogue in one project: checked without a cache, with a cold one,
    and with a warm index but no stored results (each file checked again, the index not built)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cache.CACHE_DIR_ENV, raising=False)
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'catalogue'\n", encoding="utf-8")
    for example in sorted(RULES_DIR.glob("ACC*/*.py")):
        (tmp_path / example.parent.name).mkdir(exist_ok=True)
        shutil.copy(example, tmp_path / example.parent.name / example.name)
    later(monkeypatch)
    alone = concise("--no-cache", ".")
    assert len([line for line in alone if ": ACC" in line]) > 50  # (69 when written)
    assert concise(".") == alone  # cold: the index is built
    file = cache_file(tmp_path)
    data = json.loads(file.read_text(encoding="utf-8"))
    assert len(data["index"]) == len(list(tmp_path.glob("ACC*/*.py")))
    data["files"] = {}  # no stored result: every file is checked again, in the warm index
    file.write_text(json.dumps(data), encoding="utf-8")
    built = spy_builds(monkeypatch, tmp_path)
    assert concise(".") == alone
    assert built == []


# --- the indexes a language server keeps between its checks (runner.FileIndexes) ----------------


def test_a_file_index_is_kept_until_what_it_was_built_from_changes(project: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    built = spy_builds(monkeypatch, project)
    indexes = runner.FileIndexes()
    train, root = str(project / "train.py"), str(project)
    first = indexes.index(train, TRAIN.encode(), root)
    assert sorted(built) == ["helpers.py", "train.py", "utils.py"]
    assert first.names_for(str(project / "helpers.py")) == ()  # the quiet helper performs no backward
    built.clear()
    assert indexes.index(train, (TRAIN + "# edited\n").encode(), root) is first  # an edit of no import
    assert built == ["?"]  # only the edited text's own facts: its imports are known by their bytes
    built.clear()
    edit(project / "helpers.py", RESETS)  # saved: the helper now performs a backward
    second = indexes.index(train, TRAIN.encode(), root)
    assert second is not first
    assert second.names_for(str(project / "helpers.py")) == ("step",)
    assert sorted(built) == ["helpers.py", "train.py"]  # utils.py: unchanged, not computed again
    assert indexes.built == 2

    edit(project / "extra.py", "def more(loss):\n    loss.backward()\n")
    importing = indexes.index(train, ("import extra\n" + TRAIN).encode(), root)  # an edit adds an import
    assert importing is not second and importing.names_for(str(project / "extra.py")) == ("more",)
    indexes.saved(str(project / "helpers.py"))  # a module it read: its bytes decide, nothing dropped
    assert indexes.index(train, ("import extra\n" + TRAIN).encode(), root) is importing
    indexes.forget(train)
    assert indexes.index(train, ("import extra\n" + TRAIN).encode(), root) is not importing


def test_a_saved_new_module_is_resolved_by_the_kept_indexes(project: Path) -> None:
    indexes = runner.FileIndexes()
    train, root = str(project / "train.py"), str(project)
    text = ("from fresh import more\n" + TRAIN).encode()
    before = indexes.index(train, text, root)
    assert before.names_for(str(project / "fresh.py")) == ()  # no such module yet
    edit(project / "fresh.py", "def more(loss):\n    loss.backward()\n")
    indexes.saved(str(project / "fresh.py"))  # the editor saved a file no kept index knows
    after = indexes.index(train, text, root)
    assert after is not before and after.names_for(str(project / "fresh.py")) == ("more",)
