"""The result cache: what invalidates it, what it tolerates, where it lives, ``accumlint clean``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from accumlint.files.reading import signature_of
from accumlint.pipeline import engine
from accumlint.pipeline.run_context import RunContext
from accumlint.run import cache, runner
from accumlint.run.cache import CACHEDIR_TAG, GITIGNORE, ResultCache, fingerprint
from accumlint.settings.config import Settings, known_codes
from accumlint.spec.findings import LoopVerdict
from tests.cli_helpers import cli_mixed as run
from tests.cli_helpers import spy_reads
from tests.support import later

BUGGY = "for i, batch in enumerate(loader):\n    loss.backward()\n    opt.zero_grad()\n"
PLAIN = "x = 1\n"


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


#: where the workers of a spied run append the names of the files they check (see spy_checks)
_SPY_LOG: str | None = None
_REAL_CHECK_IN_WORKER = runner._check_in_worker


def _spied_check_in_worker(
    path: str, data: bytes, codes: frozenset[str], screened: engine.Screened | None, *, context: RunContext
) -> engine.FileResult | engine.Screened:
    if screened is None and _SPY_LOG is not None:  # a file's first stage: its check starts
        with open(_SPY_LOG, "a", encoding="utf-8") as log:
            log.write(os.path.basename(path) + "\n")
    return _REAL_CHECK_IN_WORKER(path, data, codes, screened, context=context)


class _Checked:
    """The names of the files checked so far, as the workers logged them (compares as a list)."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def names(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.names())

    def __eq__(self, other: object) -> bool:
        return self.names() == other

    def __repr__(self) -> str:
        return repr(self.names())

    def clear(self) -> None:
        self.log.unlink(missing_ok=True)


def spy_checks(monkeypatch: pytest.MonkeyPatch, project: Path) -> _Checked:
    """Record the files the checks start on (in the workers, which fork after this: a log file
    beside the ``project`` folder)."""
    log = project.with_name(f"{project.name}-checked.log")
    monkeypatch.setattr(f"{__name__}._SPY_LOG", str(log))
    monkeypatch.setattr(runner, "_check_in_worker", _spied_check_in_worker)
    return _Checked(log)


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
    checked = spy_checks(monkeypatch, project)
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
    checked = spy_checks(monkeypatch, project)
    concise("--jobs", "1")
    checked.clear()
    monkeypatch.setattr(cache, "__version__", "9.9.9")
    concise("--jobs", "1")
    assert sorted(checked) == ["plain.py", "train.py"]
    checked.clear()
    monkeypatch.setattr(cache, "source_hash", lambda: "edited")  # an edit to an editable install
    concise("--jobs", "1")
    assert sorted(checked) == ["plain.py", "train.py"]
    assert len(cache_files(project)) == 3  # <__version__>/<key>, 9.9.9/<key>, 9.9.9/<edited key>


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
def test_a_corrupt_cache_file_is_ignored_and_kept(project: Path, garbage: bytes) -> None:
    """Bytes that do not prove accumlint wrote them are nobody's to replace or remove: the run
    checks every file and says why the cache is not used; `clean` keeps them."""
    concise()
    (file,) = cache_files(project)
    file.write_bytes(garbage)
    result = run("check", "--output-format", "concise", "--quiet")
    assert result.exit_code == 1
    assert "train.py:3:5: ACC001 `zero_grad` is called here" in result.output
    assert f"holds files accumlint did not write ({cache.__version__}/{file.name})" in result.output
    assert file.read_bytes() == garbage
    cleaned = run("clean")
    assert cleaned.exit_code == 0 and "kept 1 it did not write" in cleaned.output
    assert file.read_bytes() == garbage


def test_a_corrupt_entry_is_ignored(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    concise()
    (file,) = cache_files(project)
    data = json.loads(file.read_text(encoding="utf-8"))
    train = data["files"][str(project / "train.py")]
    train["findings"] = [[3, "five", "ACC001"]]
    file.write_text(json.dumps(data), encoding="utf-8")
    checked = spy_checks(monkeypatch, project)
    assert concise("--jobs", "1") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert checked == ["train.py"]


def test_an_unwritable_cache_is_ignored(project: Path) -> None:
    blocker = project / "blocker"
    blocker.write_text("a file where the cache directory should be\n", encoding="utf-8")
    assert concise("--cache-dir", str(blocker / "cache")) == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert blocker.read_text(encoding="utf-8").startswith("a file")


def sign_again(path: Path, project: Path, change) -> None:
    """Apply ``change`` to the stored entries and sign them again with this user's key (what
    only this user, or code running as this user, can do)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    key = cache.user_key()
    assert key is not None
    for name, entry in data["files"].items():
        change(entry)
        entry["mac"] = cache._entry_mac(cache.entry_secret(key, path.stem), name, entry["digest"], entry, None)
        entry.pop("stat", None)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_no_cache_neither_writes_nor_reads(project: Path) -> None:
    assert concise("--no-cache") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert not (project / cache.CACHE_DIR_NAME).exists()
    concise()
    (file,) = cache_files(project)
    sign_again(file, project, lambda entry: entry.update(findings=[], fixes=None))  # it claims there is nothing
    assert concise() == []
    assert concise("--no-cache") == ["train.py:3:5: ACC001 `zero_grad` is called here"]


# --- entries bound to this user and machine (issue 19) ----------------------------------


def test_blanked_entries_are_ignored(project: Path) -> None:
    """Reproduction: blanking the entries turned the findings into "All checks passed!", exit 0
    (a pull request that commits a cache directory could silence CI)."""
    concise()
    (file,) = cache_files(project)
    data = json.loads(file.read_text(encoding="utf-8"))
    for entry in data["files"].values():
        entry["findings"] = []
    file.write_text(json.dumps(data), encoding="utf-8")
    result = run("check", "--output-format", "concise")
    assert result.exit_code == 1
    assert "train.py:3:5: ACC001" in result.output


def test_what_an_entry_depends_on_is_signed_too(tmp_path: Path) -> None:
    """An entry's project state, the names it defines, the files its model followed and its
    accumulation loops are signed with its findings: changing any of them makes the entry unusable."""
    store = ResultCache(tmp_path / "cache", "0" * 32, b"s" * 32)
    store.put("train.py", "d1", [], dependencies={"/p/utils.py": "d2"}, names=("loss_step",), state="s1",
              loops=[LoopVerdict((), ()), LoopVerdict((("/p/train.py", 4),), ("a reason",))])
    store.save()
    kept = ResultCache.load(tmp_path / "cache", "0" * 32, b"s" * 32).get("train.py", "d1")
    assert kept is not None and kept.loops == [LoopVerdict((), ()), LoopVerdict((("/p/train.py", 4),), ("a reason",))]
    genuine = store.file.read_text(encoding="utf-8")
    for key, forged in (("dependencies", {}), ("names", []), ("state", "s2"), ("loops", [[]])):
        data = json.loads(genuine)
        (entry,) = data["files"].values()
        entry[key] = forged
        store.file.write_text(json.dumps(data), encoding="utf-8")
        assert ResultCache.load(tmp_path / "cache", "0" * 32, b"s" * 32).get("train.py", "d1") is None, key


def test_an_entry_replayed_into_another_fingerprint_does_not_verify(project: Path) -> None:
    """Reproduction: the entry of a narrower run (`--select ACC301`) copied into the default run's
    file turned train.py's ACC001 into "All checks passed!", exit 0: the MAC did not cover the
    fingerprint (selection, per-file-ignores, version)."""
    assert concise("--select", "ACC301") == []
    assert concise() == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    train = str(project / "train.py")
    narrow, default = sorted(cache_files(project), key=lambda file: bool(entries(file)[train]["findings"]))
    data = json.loads(default.read_text(encoding="utf-8"))
    data["files"][train] = entries(narrow)[train]
    default.write_text(json.dumps(data), encoding="utf-8")
    result = run("check", "--output-format", "concise")
    assert result.exit_code == 1
    assert "train.py:3:5: ACC001" in result.output and "All checks passed!" not in result.output


def test_editing_a_module_reached_through_a_package_re_export_rechecks_its_caller(tmp_path: Path) -> None:
    """Reproduction: `from utils import step`, with `utils/__init__.py` re-exporting it from
    `.impl`, recorded only the `__init__`: editing `utils/impl.py` left a stale result, both ways."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("from .impl import step\n", encoding="utf-8")
    helper = "def step(loss, optimizer, should_step):\n{reset}    loss.backward()\n    if should_step:\n" \
             "        optimizer.step()\n"
    (tmp_path / "train.py").write_text(
        "from utils import step\n\n"
        "def run(model, optimizer, loader, accum):\n"
        "    for i, batch in enumerate(loader):\n"
        "        step(model(batch) / accum, optimizer, (i + 1) % accum == 0)\n"
        "        if (i + 1) % accum == 0:\n"
        "            optimizer.zero_grad()\n", encoding="utf-8")
    paths = [str(tmp_path / name) for name in ("train.py", "utils/__init__.py", "utils/impl.py")]

    def found(reset: str) -> list[tuple[str, str, int]]:
        (tmp_path / "utils" / "impl.py").write_text(helper.format(reset=reset), encoding="utf-8")
        store = ResultCache.load(tmp_path / "cache", "0" * 32, b"s" * 32)
        checked = runner.check_files(paths, Settings(project_root=tmp_path), frozenset(known_codes()), jobs=1,
                                     cache=store)
        return [(os.path.basename(f.path), f.code, f.line) for f in checked.findings]

    assert found("") == []
    assert found("    optimizer.zero_grad()\n") == [("train.py", "ACC001", 5)]  # the reset now in the helper
    assert found("") == []


@pytest.mark.parametrize(
    "position",
    [(True, 5), (10**30, 5), (3, 10**30), (0, 5), (99, 5), (3, 0), (3, -1), (3.0, 5), ("3", 5)],
    ids=["true", "huge-line", "huge-column", "line-0", "past-the-end", "column-0", "negative", "float", "string"],
)
def test_forged_positions_are_ignored_even_when_signed(project: Path, position: tuple[object, object]) -> None:
    concise()
    (file,) = cache_files(project)
    line, column = position

    def forge(entry: dict) -> None:
        for row in entry["findings"]:
            row[0], row[1] = line, column

    sign_again(file, project, forge)
    assert concise() == ["train.py:3:5: ACC001 `zero_grad` is called here"]


def test_an_entry_signed_for_another_path_or_another_key_is_ignored(
    project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "twin.py").write_text(BUGGY, encoding="utf-8")
    concise()
    (file,) = cache_files(project)
    data = json.loads(file.read_text(encoding="utf-8"))
    quiet = data["files"][str(project / "plain.py")]
    data["files"][str(project / "twin.py")] = {**quiet, "digest": cache.content_digest(BUGGY.encode())}
    file.write_text(json.dumps(data), encoding="utf-8")
    assert "twin.py:3:5: ACC001 `zero_grad` is called here" in concise()
    # another user or machine: another key, no entry verifies
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("other-user")))
    checked = spy_checks(monkeypatch, project)
    concise("--jobs", "1")
    assert sorted(checked) == ["plain.py", "train.py", "twin.py"]


def test_the_key_is_kept_outside_the_project(project: Path) -> None:
    concise()
    key_file = Path(os.environ["XDG_CACHE_HOME"]) / "accumlint" / cache.KEY_FILE
    assert len(key_file.read_bytes()) == cache.KEY_BYTES
    assert key_file.stat().st_mode & 0o077 == 0
    assert not key_file.is_relative_to(project)
    secret = key_file.read_bytes()
    assert not [p for p in project.rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_a_torn_key_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    (tmp_path / "accumlint").mkdir()
    (tmp_path / "accumlint" / cache.KEY_FILE).write_bytes(b"half")
    key = cache.user_key()
    assert key is not None and len(key) == cache.KEY_BYTES
    assert cache.user_key() == key == (tmp_path / "accumlint" / cache.KEY_FILE).read_bytes()


def test_no_key_no_cache(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = project / "not-a-folder"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    assert concise() == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert not (project / cache.CACHE_DIR_NAME).exists()


def test_a_deeply_nested_cache_file_is_ignored(project: Path) -> None:
    concise()
    (file,) = cache_files(project)
    header = file.read_text(encoding="utf-8").split('"files":')[0]  # signed: accumlint's file, replaced
    file.write_text(header + '"files": ' + "[" * 100_000 + "]" * 100_000 + "}", encoding="utf-8")
    assert concise() == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert sorted(os.path.basename(p) for p in entries(file)) == ["plain.py", "train.py"]


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


# --- the cache directory is accumlint's own (issue 19): nothing else is written or removed ---


def snapshot(top: Path) -> dict[str, tuple[str, bytes | str, int]]:
    """Every entry under ``top`` (``.git`` included): kind, bytes or link target, mode."""
    found: dict[str, tuple[str, bytes | str, int]] = {}
    for path in sorted(top.rglob("*")):
        mode = path.lstat().st_mode
        if path.is_symlink():
            found[str(path.relative_to(top))] = ("link", os.readlink(path), mode)
        elif path.is_dir():
            found[str(path.relative_to(top))] = ("dir", b"", mode)
        else:
            found[str(path.relative_to(top))] = ("file", path.read_bytes(), mode)
    return found


def a_repository(top: Path) -> Path:
    """A small repository: a `.git`, a README, a package with a bug in it."""
    (top / ".git" / "objects").mkdir(parents=True)
    (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n", encoding="utf-8")
    (top / ".git" / "objects" / "ab").write_bytes(b"\x00\x01blob")
    (top / "README.md").write_text("# precious\n", encoding="utf-8")
    (top / "src").mkdir()
    (top / "src" / "train.py").write_text(BUGGY, encoding="utf-8")
    return top


def test_cache_dir_dot_neither_writes_into_nor_cleans_the_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_rules: object
) -> None:
    """Reproduction: `check --cache-dir . src; clean --cache-dir .` deleted the project."""
    monkeypatch.delenv(cache.CACHE_DIR_ENV, raising=False)
    project = a_repository(tmp_path / "project")
    monkeypatch.chdir(project)
    before = snapshot(project)
    result = run("check", "--cache-dir", ".", "src")
    assert result.exit_code == 1
    refused = f"warning: cache not used: {project}: not used as the cache directory: it contains {project}"
    assert refused in result.output
    assert snapshot(project) == before  # no CACHEDIR.TAG, no .gitignore of `*`
    cleaned = run("clean", "--cache-dir", ".")
    assert cleaned.exit_code == 2
    assert "not used as the cache directory: it contains" in cleaned.output
    assert snapshot(project) == before


def test_a_home_directory_as_cache_dir_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_rules: object
) -> None:
    """Reproduction: `ACCUMLINT_CACHE_DIR=<home>` deleted the home directory."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    (home / ".bashrc").write_text("export PATH\n", encoding="utf-8")
    (home / ".config" / "settings.ini").write_bytes(b"[a]\nb = 1\n")
    project = a_repository(home / "work")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(home))
    monkeypatch.chdir(project)
    before = snapshot(home)
    result = run("check", "src")
    assert result.exit_code == 1
    assert "warning: cache not used:" in result.output
    assert snapshot(home) == before
    assert run("clean").exit_code == 2
    assert snapshot(home) == before


def test_a_folder_accumlint_did_not_make_gets_a_cache_folder_inside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_rules: object
) -> None:
    """A home-like folder that holds no project: the cache goes to `.accumlint_cache` inside it,
    and `clean` removes that and nothing else."""
    folder = tmp_path / "folder"
    (folder / "Documents").mkdir(parents=True)
    (folder / "Documents" / "notes.txt").write_text("keep me\n", encoding="utf-8")
    (folder / ".gitignore").write_text("*.log\n", encoding="utf-8")  # someone's own ignore file
    (folder / "0.1.0").mkdir()  # named like a version folder, but not accumlint's
    (folder / "0.1.0" / "0123456789abcdef0123456789abcdef.json").write_text("{}", encoding="utf-8")
    project = a_repository(tmp_path / "project")
    monkeypatch.setenv(cache.CACHE_DIR_ENV, str(folder))
    monkeypatch.chdir(project)
    before = snapshot(folder)
    assert run("check", "src").exit_code == 1
    inner = folder / cache.CACHE_DIR_NAME
    assert (inner / "CACHEDIR.TAG").read_text(encoding="utf-8") == CACHEDIR_TAG
    assert (inner / ".gitignore").read_text(encoding="utf-8") == GITIGNORE
    assert {k: v for k, v in snapshot(folder).items() if not k.startswith(cache.CACHE_DIR_NAME)} == before
    result = run("clean")
    assert (result.exit_code, result.output) == (0, f"Removed {inner}\n")
    assert snapshot(folder) == before


def test_a_vendored_config_cannot_point_the_cache_at_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_rules: object
) -> None:
    """Reproduction: `vendor/lib/pyproject.toml` with `cache-dir = "../.."` wrote `.gitignore: *`
    into the repository root, and `clean` then deleted the repository, `.git` included."""
    monkeypatch.delenv(cache.CACHE_DIR_ENV, raising=False)
    repository = a_repository(tmp_path / "repo")
    vendored = repository / "vendor" / "lib"
    vendored.mkdir(parents=True)
    (vendored / "pyproject.toml").write_text('[tool.accumlint]\ncache-dir = "../.."\n', encoding="utf-8")
    (vendored / "train.py").write_text(BUGGY, encoding="utf-8")
    monkeypatch.chdir(vendored)
    before = snapshot(repository)
    result = run("check")
    assert result.exit_code == 1
    assert "warning: cache not used:" in result.output and "it contains" in result.output
    assert snapshot(repository) == before
    assert not (repository / ".gitignore").exists()
    assert run("clean").exit_code == 2
    assert snapshot(repository) == before


def test_a_tagged_directory_holding_other_files_is_not_used_and_clean_keeps_them(project: Path) -> None:
    concise("--cache-dir", "lint-cache")
    directory = project / "lint-cache"
    (directory / "notes.txt").write_text("keep me\n", encoding="utf-8")
    (directory / cache.__version__ / "mine.json").write_text("{}", encoding="utf-8")
    os.symlink(project / "train.py", directory / cache.__version__ / ("f" * 32 + ".json"))  # named like an entry
    kept = {k: v for k, v in snapshot(directory).items() if k in {"notes.txt", f"{cache.__version__}/mine.json"}}
    result = run("check", "--cache-dir", "lint-cache", "--exit-zero")
    assert "holds files accumlint did not write" in result.output
    result = run("clean", "--cache-dir", "lint-cache")
    assert result.exit_code == 0
    assert result.output.startswith(f"Removed accumlint's files from {directory}; kept 3 it did not write")
    assert not (directory / "CACHEDIR.TAG").exists() and not (directory / ".gitignore").exists()
    assert sorted(p.name for p in (directory / cache.__version__).iterdir()) == ["f" * 32 + ".json", "mine.json"]
    assert {k: v for k, v in snapshot(directory).items() if k in kept} == kept
    assert (project / "train.py").read_text(encoding="utf-8") == BUGGY  # the link was not followed


def test_clean_refuses_a_directory_with_a_forged_tag_only_where_protected(project: Path) -> None:
    """An accumlint tag planted in the project root does not make the project a cache."""
    (project / "CACHEDIR.TAG").write_text(CACHEDIR_TAG, encoding="utf-8")
    before = snapshot(project)
    assert run("clean", "--cache-dir", ".").exit_code == 2
    assert snapshot(project) == before


def test_clean_of_a_folder_without_a_cache(project: Path) -> None:
    precious = project / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me\n", encoding="utf-8")
    before = snapshot(precious)
    result = run("clean", "--cache-dir", str(precious))
    assert (result.exit_code, result.output) == (0, f"No cache at {precious}\n")
    assert snapshot(precious) == before


def test_a_concurrent_creation_leaves_one_directory(tmp_path: Path) -> None:
    from accumlint.run import cache_dir

    target = tmp_path / "c"
    assert cache_dir.create(target, None) and cache_dir.create(target, None)  # the second finds it made
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]  # no temporary sibling left
    assert cache_dir.foreign_entries(target, None) == []


def test_old_entries_are_dropped_when_the_file_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = ResultCache(tmp_path / "cache", "0" * 32, b"s" * 32)
    store.put("old.py", "d1", [])
    store.save()
    monkeypatch.setattr(cache, "_today", lambda: store._today + cache.MAX_UNSEEN_DAYS + 1)
    later = ResultCache.load(tmp_path / "cache", "0" * 32, b"s" * 32)
    later.put("new.py", "d2", [])
    later.save()
    assert [os.path.basename(p) for p in entries(later.file)] == ["new.py"]


# --- a warm run over a large project stats the files instead of reading them -----------------


def test_a_warm_run_of_a_large_project_reads_only_what_it_must(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "NEIGHBOUR_RUN_FILES", 0)  # a run this large is taken to be the project
    later(monkeypatch)
    read = spy_reads(monkeypatch)
    checked = spy_checks(monkeypatch, project)
    assert concise("--jobs", "1") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert sorted(read) == ["plain.py", "plain.py", "train.py", "train.py"]  # the project pass, the checks
    (file,) = cache_files(project)
    for entry in entries(file).values():
        assert len(entry["stat"]) == 5
    read.clear()
    checked.clear()
    assert concise("--jobs", "1") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert read == ["train.py"]  # only for the finding's source line; plain.py is not even opened
    assert checked == []
    # an edit that keeps the size changes the times: read, hashed and checked again
    (project / "train.py").write_text(BUGGY.replace("zero_grad", "zero_grbd"), encoding="utf-8")
    read.clear()
    assert concise("--jobs", "1") == []
    assert sorted(read) == ["train.py", "train.py"]
    assert checked == ["train.py"]


def test_a_file_changed_just_before_its_read_keeps_no_signature(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # within the file system's clock tick a second write could leave the times as they were
    monkeypatch.setattr(runner, "NEIGHBOUR_RUN_FILES", 0)
    concise("--jobs", "1")
    (file,) = cache_files(project)
    assert [entry.get("stat") for entry in entries(file).values()] == [None, None]
    read = spy_reads(monkeypatch)
    assert concise("--jobs", "1") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert sorted(read) == ["plain.py", "train.py", "train.py"]  # hashed again; the finding's line


def test_a_signature_is_signed_with_its_entry(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a forger who edits train.py and copies its new signature onto the old entry gains nothing
    monkeypatch.setattr(runner, "NEIGHBOUR_RUN_FILES", 0)
    later(monkeypatch)
    concise("--jobs", "1")
    (project / "train.py").write_text(BUGGY.replace("zero_grad", "zero_grbd"), encoding="utf-8")
    (file,) = cache_files(project)
    data = json.loads(file.read_text(encoding="utf-8"))
    data["files"][str(project / "train.py")]["stat"] = list(signature_of(os.stat(project / "train.py")))
    file.write_text(json.dumps(data), encoding="utf-8")
    assert concise("--jobs", "1") == []


@pytest.mark.parametrize("forged", [[1, 2, 3], [True, 0, 0, 0, 0], "1,2,3,4,5", None],
                         ids=["short", "boolean", "string", "null"])
def test_a_malformed_signature_makes_the_entry_unusable(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                        forged: object) -> None:
    monkeypatch.setattr(runner, "NEIGHBOUR_RUN_FILES", 0)
    later(monkeypatch)
    concise("--jobs", "1")
    (file,) = cache_files(project)
    data = json.loads(file.read_text(encoding="utf-8"))
    data["files"][str(project / "plain.py")]["stat"] = forged
    file.write_text(json.dumps(data), encoding="utf-8")
    read = spy_reads(monkeypatch)
    checked = spy_checks(monkeypatch, project)
    assert concise("--jobs", "1") == ["train.py:3:5: ACC001 `zero_grad` is called here"]
    assert sorted(read) == ["plain.py", "plain.py", "train.py"]  # hashed, found unusable, checked again
    assert checked == ["plain.py"]
