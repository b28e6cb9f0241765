"""The cache directory never costs a user's byte (issue 28): `clean` removes only what the contents
prove accumlint wrote, a tag that is a FIFO or a link hangs nothing, the cache is private whatever
the umask, and a cut-short creation leaves no temporary folder behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from accumlint.run import cache, cache_dir
from accumlint.run.cache import CACHEDIR_TAG, GITIGNORE
from tests.cli_helpers import cli_mixed as run

BUGGY = "for i, batch in enumerate(loader):\n    loss.backward()\n    opt.zero_grad()\n"
FINDING = "train.py:3:5: ACC001 `zero_grad` is called here"
#: a user's JSON file named like a cache file (``md5("hello")``), in a folder named like a version
USER_FILE = "2024/5d41402abc4b2a76b9719d911017c592.json"
USER_BYTES = b'{"id": 1, "text": "hello"}\n'


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_rules: object) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cache.CACHE_DIR_ENV, raising=False)
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")
    return tmp_path


def tagged_user_folder(project: Path) -> Path:
    """A cache made by accumlint in ``lint/`` (a tag, a signed cache file), then the user's own
    files put in it: what an older accumlint's tag on a user's ``--cache-dir`` left."""
    assert run("check", "--cache-dir", "lint", "--exit-zero").exit_code == 0
    folder = project / "lint"
    (folder / "2024").mkdir()
    (folder / USER_FILE).write_bytes(USER_BYTES)
    return folder


def user_key() -> bytes:
    key = cache.user_key()
    assert key is not None
    return key


def older_cache_file(key: bytes, path: str = "/p/train.py") -> bytes:
    """A format-6 cache file (no header; its entries signed with the user's key itself), as the
    previous version wrote it."""
    entry = {
        "digest": "d" * 64,
        "seen": 1,
        "findings": [],
        "unknown_noqa": [],
        "dependencies": {},
        "names": [],
        "state": "",
    }
    entry["mac"] = cache._entry_mac(key, path, entry["digest"], entry, None)
    return json.dumps({"format": 6, "files": {path: entry}}, separators=(",", ":")).encode()


# --- item 1: clean deletes only what accumlint provably wrote ---------------------------------


def test_clean_keeps_a_users_json_in_a_tagged_folder(project: Path) -> None:
    """Reproduction: `clean` deleted every `<digits>/<32 hex>.json` of a tagged folder, then the folder."""
    folder = tagged_user_folder(project)
    (signed,) = folder.glob(f"{cache.__version__}/*.json")
    refused = run("check", "--cache-dir", "lint", "--output-format", "concise")
    assert refused.exit_code == 1 and FINDING in refused.output
    assert f"holds files accumlint did not write ({USER_FILE})" in refused.output
    result = run("clean", "--cache-dir", "lint")
    assert (result.exit_code, result.output) == (
        0,
        f"Removed accumlint's files from {folder}; kept 1 it did not write ({USER_FILE}, ...)\n",
    )
    assert (folder / USER_FILE).read_bytes() == USER_BYTES
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == ["2024", USER_FILE]
    assert not signed.exists()


@pytest.mark.parametrize(
    "forged",
    [
        b'{"format":7,"mac":"00000000000000000000000000000000","files":{}}',  # a header, not signed
        b'{"format":6,"files":{"/p/a.py":{"digest":"' + b"d" * 64 + b'","seen":1,"findings":[],'
        b'"unknown_noqa":[],"mac":"' + b"0" * 32 + b'"}}}',  # an older file's shape, not signed
        b'{"format":6,"files":{"/p/a.py":',  # cut short before its first entry
        b"",
    ],
    ids=["unsigned-header", "unsigned-older-entry", "torn", "empty"],
)
def test_a_look_alike_cache_file_is_foreign(project: Path, forged: bytes) -> None:
    folder = tagged_user_folder(project)
    (folder / USER_FILE).unlink()
    (folder / "2024").rmdir()
    look_alike = folder / cache.__version__ / ("a" * 32 + ".json")
    look_alike.write_bytes(forged)
    assert cache_dir.foreign_entries(folder, user_key()) == [f"{cache.__version__}/{look_alike.name}"]
    assert "kept 1 it did not write" in run("clean", "--cache-dir", "lint").output
    assert look_alike.read_bytes() == forged
    assert sorted(p.name for p in folder.iterdir()) == [cache.__version__]  # the version folder held it: kept


def test_a_cache_file_of_another_key_is_not_removed(
    project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    run("check", "--cache-dir", "lint", "--exit-zero")
    (signed,) = (project / "lint").glob("*/*.json")
    before = signed.read_bytes()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("another-user")))
    run("check", "--cache-dir", "lint", "--exit-zero")  # creates that user's key
    assert "kept 1 it did not write" in run("clean", "--cache-dir", "lint").output
    assert signed.read_bytes() == before


def test_an_older_formats_signed_file_is_used_and_removed(project: Path) -> None:
    """The previous version's cache files (format 6: no header) prove themselves by their first
    entry's signature: a cache that holds them is still used, and `clean` removes them."""
    run("check", "--cache-dir", "lint", "--exit-zero")
    folder = project / "lint"
    older = folder / cache.__version__ / ("b" * 32 + ".json")
    older.write_bytes(older_cache_file(user_key()))
    empty = folder / cache.__version__ / ("c" * 32 + ".json")
    empty.write_bytes(b'{"format":5,"files":{}}')
    assert cache_dir.foreign_entries(folder, user_key()) == []
    result = run("check", "--cache-dir", "lint", "--output-format", "concise")
    assert "warning" not in result.output
    assert run("clean", "--cache-dir", "lint").output == f"Removed {folder}\n"
    assert not folder.exists()


def test_a_version_folder_with_a_foreign_file_stays_and_so_does_the_top(project: Path) -> None:
    run("check", "--cache-dir", "lint", "--exit-zero")
    folder = project / "lint"
    mine = folder / cache.__version__ / "notes.txt"
    mine.write_text("keep me\n", encoding="utf-8")
    (folder / "2025").mkdir()  # an empty folder named like a version, in a folder that is not all ours
    result = run("clean", "--cache-dir", "lint")
    assert "kept 1 it did not write" in result.output
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == sorted(
        ["2025", cache.__version__, f"{cache.__version__}/notes.txt"]
    )


def test_temporaries_of_a_killed_write_are_removed_only_when_empty_or_signed(project: Path) -> None:
    run("check", "--cache-dir", "lint", "--exit-zero")
    version = project / "lint" / cache.__version__
    (signed,) = version.glob("*.json")
    fingerprint = signed.stem
    cut = version / f".{fingerprint}.json.123.0123abcd.tmp"
    cut.write_bytes(signed.read_bytes()[:60])  # a signed header, cut short by the kill
    empty = version / f".{fingerprint}.json.124.0123abcd.tmp"
    empty.write_bytes(b"")
    other = version / f".{'e' * 32}.json.125.0123abcd.tmp"
    other.write_bytes(b"someone's bytes")
    assert cache_dir.foreign_entries(project / "lint", user_key()) == [f"{cache.__version__}/{other.name}"]
    run("clean", "--cache-dir", "lint")
    assert sorted(p.name for p in version.iterdir()) == [other.name]
    assert other.read_bytes() == b"someone's bytes"


# --- item 5 (the cache's part): a tag that is a FIFO or a link hangs nothing -------------------


def _cli(
    project: Path, *args: str, stdin: int | None = None, preexec_fn: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    """``accumlint ARGS`` in a process of its own (a hang ends in ``TimeoutExpired``)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(Path(cache.__file__).parent.parent), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "accumlint", *args],
        cwd=project,
        env=env,
        text=True,
        capture_output=True,
        timeout=60,
        stdin=stdin,
        preexec_fn=preexec_fn,
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("kind", ["fifo", "stdin-link"])
def test_a_tag_that_is_a_fifo_or_links_to_stdin_hangs_neither_check_nor_clean(project: Path, kind: str) -> None:
    """Reproduction: `.accumlint_cache/CACHEDIR.TAG -> /dev/stdin` (or a FIFO) hung both `check` and `clean`."""
    folder = project / cache.CACHE_DIR_NAME
    folder.mkdir()
    (folder / ".gitignore").write_text(GITIGNORE, encoding="utf-8")
    tag = folder / "CACHEDIR.TAG"
    if kind == "fifo":
        os.mkfifo(tag)
    else:
        os.symlink("/dev/stdin", tag)
    reader, writer = os.pipe()  # a stdin that never ends
    try:
        # not accumlint's: its cache goes inside, and `clean` removes that, never the tag
        checked = _cli(project, "check", "--output-format", "concise", "train.py", stdin=reader)
        assert (checked.returncode, checked.stdout) == (0, "All checks passed!\n"), checked.stderr
        assert (folder / cache.CACHE_DIR_NAME / "CACHEDIR.TAG").read_text(encoding="utf-8") == CACHEDIR_TAG
        cleaned = _cli(project, "clean", stdin=reader)
        assert (cleaned.returncode, cleaned.stdout) == (0, f"Removed {folder / cache.CACHE_DIR_NAME}\n"), cleaned.stderr
    finally:
        os.close(reader)
        os.close(writer)
    assert sorted(p.name for p in folder.iterdir()) == [".gitignore", "CACHEDIR.TAG"]


def test_a_symlinked_tag_is_never_ours(project: Path) -> None:
    elsewhere = project / "tag-bytes"
    elsewhere.write_text(CACHEDIR_TAG, encoding="utf-8")
    folder = project / "lint"
    folder.mkdir()
    (folder / "CACHEDIR.TAG").symlink_to(elsewhere)
    (folder / "notes.txt").write_text("keep me\n", encoding="utf-8")
    assert run("check", "--cache-dir", "lint", "--exit-zero").exit_code == 0
    assert (folder / cache.CACHE_DIR_NAME / "CACHEDIR.TAG").read_text(encoding="utf-8") == CACHEDIR_TAG  # its own
    assert run("clean", "--cache-dir", "lint").output == f"Removed {folder / cache.CACHE_DIR_NAME}\n"
    assert sorted(p.name for p in folder.iterdir()) == ["CACHEDIR.TAG", "notes.txt"]
    assert elsewhere.read_text(encoding="utf-8") == CACHEDIR_TAG


# --- item 10 (c): the cache is private whatever the umask --------------------------------------


def test_the_cache_is_private_with_umask_000(
    project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduction: with `umask 000` the cache directory and its files were world-writable."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))  # the key's folders made too
    previous = os.umask(0)
    try:
        assert run("check", "--exit-zero").exit_code == 0
        (project / "train.py").write_text(BUGGY + "opt.zero_grad()\n", encoding="utf-8")
        assert run("check", "--exit-zero").exit_code == 0  # the file replaced: still private
    finally:
        os.umask(previous)
    key_folder = home / ".cache" / "accumlint"
    assert [p.stat().st_mode & 0o777 for p in (home / ".cache", key_folder, key_folder / cache.KEY_FILE)] == [
        0o700,
        0o700,
        0o600,
    ]
    folder = project / cache.CACHE_DIR_NAME
    modes = {p.relative_to(folder).as_posix(): p.stat().st_mode & 0o777 for p in [folder, *folder.rglob("*")]}
    (signed,) = folder.glob("*/*.json")
    assert modes == {
        ".": 0o700,
        "CACHEDIR.TAG": 0o600,
        ".gitignore": 0o600,
        cache.__version__: 0o700,
        f"{cache.__version__}/{signed.name}": 0o600,
    }


# --- item 13 (the cache's part): no temporary folder lingers ------------------------------------


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="no file size limit here")
def test_a_creation_that_fails_leaves_no_temporary_folder(project: Path) -> None:
    """Reproduction: a tag write that failed on a full disk left `..accumlint_cache.<pid>.<hex>.tmp/`
    behind (here: a file size limit between the key's 32 bytes and the tag's 170)."""
    import resource

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (100, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    user_key()  # made before: the limit is for the cache
    done = _cli(project, "check", "--output-format", "concise", "train.py", preexec_fn=small_files)
    assert (done.returncode, done.stdout) == (0, "All checks passed!\n"), done.stderr
    assert sorted(p.name for p in project.iterdir()) == ["train.py"]


def test_a_creation_interrupted_leaves_no_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[str] = []
    real = cache_dir.write_new

    def interrupted(path: str, data: bytes) -> None:
        real(path, data[:10])
        written.append(os.fspath(path))
        raise KeyboardInterrupt

    monkeypatch.setattr(cache_dir, "write_new", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cache_dir.create(tmp_path / "c", None)
    assert len(written) == 1 and list(tmp_path.iterdir()) == []


def stale_sibling(parent: Path, pid: int, files: dict[str, bytes], *, age: float = 0) -> Path:
    sibling = parent / f"..accumlint_cache.{pid}.{os.urandom(4).hex()}.tmp"
    sibling.mkdir()
    for name, data in files.items():
        (sibling / name).write_bytes(data)
    if age:
        os.utime(sibling, (time.time() - age, time.time() - age))
    return sibling


def test_the_next_run_and_clean_remove_a_killed_creations_sibling(project: Path) -> None:
    tag = CACHEDIR_TAG.encode()
    killed = stale_sibling(project, 4_000_000_000, {"CACHEDIR.TAG": tag[:30]})  # no such process
    old = stale_sibling(project, os.getppid(), {"CACHEDIR.TAG": tag, ".gitignore": b""}, age=3600)
    running = stale_sibling(project, os.getppid(), {"CACHEDIR.TAG": tag})  # a concurrent run's, now
    foreign = stale_sibling(project, 4_000_000_001, {"CACHEDIR.TAG": tag, "notes.txt": b"keep me\n"})
    linked = stale_sibling(project, 4_000_000_002, {})
    (linked / "CACHEDIR.TAG").symlink_to(project / "train.py")
    assert run("check", "--exit-zero").exit_code == 0
    assert not killed.exists() and not old.exists()
    assert running.exists() and foreign.exists() and (foreign / "notes.txt").read_bytes() == b"keep me\n"
    assert linked.exists() and (project / "train.py").read_text(encoding="utf-8") == BUGGY
    again = stale_sibling(project, 4_000_000_000, {})
    assert run("clean").exit_code == 0
    assert not again.exists() and running.exists() and foreign.exists()
