"""The one safe writer (issue 28 items 2-4, 13): every file accumlint rewrites (``--fix``,
``--add-noqa``, the guard's report) goes through :mod:`accumlint.files.writing`.

Where: a symlink out of the paths the user named is never written through, by ``--add-noqa`` as
by ``--fix``, whatever the project root or the current directory. What: only a regular file is
replaced (checked with ``lstat`` just before the rename), never a read-only or hard-linked one.
Identity: owner, group, mode and extended attributes are kept. Leftovers: a killed run's
temporary files are removed by the next run. And a refused fix is not counted as fixable; a
CR-only file keeps its last line end.
"""

from __future__ import annotations

import os
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accumlint.files import writing
from accumlint.files.reading import read_signed
from tests.cli_helpers import ACC001_LOOP, cli
from tests.shared_data import REPO

BUGGY = ACC001_LOOP
FIXED_LINE3 = b"    loss.backward()"  # the reset moved under the update gate
needs_symlinks = pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
needs_root = pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root (chown)")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no global git excludes of the machine
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "home" / ".config"))
    return tmp_path


def _errors(result) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(line for line in result.stderr.splitlines() if line.startswith("error:"))


# --- item 2: --add-noqa keeps to the named trees, as --fix does --------------------------


@needs_symlinks
def test_add_noqa_does_not_write_through_a_symlink_out_of_the_tree(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: `cd tree; accumlint check -n --add-noqa .` added the directive to
    ../outside/victim.py through tree/link.py (--fix refused the same file)."""
    (home / "outside").mkdir()
    (home / "outside" / "victim.py").write_bytes(BUGGY)
    tree = home / "tree"
    (tree / ".git" / "info").mkdir(parents=True)  # a git work tree, as `git init` leaves it
    (tree / "link.py").symlink_to("../outside/victim.py")
    (tree / "own.py").write_bytes(BUGGY)
    monkeypatch.chdir(tree)
    result = cli("check", "-n", "--add-noqa", ".")
    assert (home / "outside" / "victim.py").read_bytes() == BUGGY
    assert _errors(result) == [
        f"error: link.py: noqa not added: a symlink to {home / 'outside' / 'victim.py'}, outside the checked trees"
    ]
    assert "Added 1 noqa directive." in result.stderr  # own.py
    assert b"optimizer.zero_grad()  # noqa: ACC001" in (tree / "own.py").read_bytes()
    assert result.exit_code == 1


# --- item 3: the boundary is the paths named, not the project root or the cwd ---------------


@needs_symlinks
def test_fix_does_not_write_through_a_link_out_of_the_named_folder_into_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reproduction: from a folder holding important/train.py and
    clones/untrusted/helper.py -> ../../important/train.py, `check -n --fix clones/untrusted`
    rewrote important/train.py (the project root fell back to the cwd, which held both)."""
    (tmp_path / "important").mkdir()
    (tmp_path / "important" / "train.py").write_bytes(BUGGY)
    (tmp_path / "clones" / "untrusted").mkdir(parents=True)
    (tmp_path / "clones" / "untrusted" / "helper.py").symlink_to("../../important/train.py")
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "important" / "train.py"
    for named in ("clones/untrusted", "clones/untrusted/helper.py", "clones"):
        result = cli("check", "-n", "--fix", "--output-format", "concise", named)
        assert victim.read_bytes() == BUGGY, named
        assert _errors(result) == [
            f"error: clones/untrusted/helper.py: not fixed: a symlink to {victim}, outside the checked trees"
        ], named
        assert "clones/untrusted/helper.py:3:5: ACC001 " in result.stdout  # reported, without [*]
        assert result.exit_code == 1
    # the link's target named too: the user asked for both
    cli("check", "-n", "--fix", "clones/untrusted/helper.py", "important/train.py")
    assert victim.read_bytes().splitlines()[2] == FIXED_LINE3


@needs_symlinks
def test_links_within_a_named_tree_and_a_named_linked_folder_are_still_fixed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = tmp_path / "data" / "project"
    (real / "pkg").mkdir(parents=True)
    (real / "pkg" / "train.py").write_bytes(BUGGY)
    (real / "alias.py").symlink_to("pkg/train.py")
    (tmp_path / "work").symlink_to(real)  # a checkout reached through a link
    monkeypatch.chdir(tmp_path)
    result = cli("check", "-n", "--fix", "work")
    assert _errors(result) == []
    assert (real / "pkg" / "train.py").read_bytes().splitlines()[2] == FIXED_LINE3
    assert (real / "alias.py").is_symlink()


def test_boundary_of_named_paths(tmp_path: Path) -> None:
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "other.py").write_bytes(b"")
    (tmp_path / "tree" / "sub" / "own.py").write_bytes(b"")
    if hasattr(os, "symlink"):
        (tmp_path / "tree" / "in.py").symlink_to("sub/own.py")
        (tmp_path / "tree" / "out.py").symlink_to("../other.py")
    boundary = writing.Boundary([tmp_path / "tree"])
    assert boundary.outside(tmp_path / "other.py") is None  # no symlink: always within
    if hasattr(os, "symlink"):
        assert boundary.outside(tmp_path / "tree" / "in.py") is None
        assert boundary.outside(tmp_path / "tree" / "out.py") == str(tmp_path / "other.py")
        # a named file bounds itself, not where it leads
        assert writing.Boundary([tmp_path / "tree" / "out.py"]).outside(tmp_path / "tree" / "out.py") is not None
        assert writing.Boundary(()).outside(tmp_path / "tree" / "in.py") is not None  # none named: no link


# --- item 4: a fix keeps the file's identity, or is refused --------------------------------


def _acl(user: int) -> bytes:
    """A POSIX access ACL in the kernel's xattr form: owner rw, ``user`` rw, group r, mask rw, other r."""
    undefined = 0xFFFFFFFF
    entries = [(0x01, 6, undefined), (0x02, 6, user), (0x04, 4, undefined), (0x10, 6, undefined), (0x20, 4, undefined)]
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def _xattrs(path: Path) -> dict[str, bytes]:
    return {key: os.getxattr(path, key) for key in os.listxattr(path)}


def _set_xattrs(path: Path, wanted: dict[str, bytes]) -> dict[str, bytes]:
    """Set those of ``wanted`` the file system takes; the file's attributes then."""
    for key, value in wanted.items():
        try:
            os.setxattr(path, key, value)
        except OSError:
            pass  # tmpfs without user xattrs, no ACL support: kept only where supported
    return _xattrs(path)


@needs_root
def test_fix_keeps_owner_group_mode_and_extended_attributes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: as root, temp file + rename turned a 1000:1000 file into root:root and
    dropped its extended attributes (ACLs, SELinux labels)."""
    target = tmp_path / "train.py"
    target.write_bytes(BUGGY)
    os.chown(target, 1000, 1000)
    target.chmod(0o640)
    attributes: dict[str, bytes] = {}
    if hasattr(os, "setxattr"):
        attributes = _set_xattrs(
            target, {"user.origin": b"upstream", "trusted.label": b"x", "system.posix_acl_access": _acl(1234)}
        )
    before = target.stat()
    monkeypatch.chdir(tmp_path)
    result = cli("check", "-n", "--fix", "train.py")
    assert _errors(result) == []
    assert target.read_bytes().splitlines()[2] == FIXED_LINE3
    after = target.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (1000, 1000, stat.S_IMODE(before.st_mode))
    assert after.st_ino != before.st_ino  # replaced (atomically), yet the same file to its owner
    if hasattr(os, "listxattr"):
        assert _xattrs(target) == attributes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


@pytest.mark.skipif(not hasattr(os, "setxattr"), reason="needs extended attributes")
def test_a_folder_default_acl_is_not_added_to_the_fixed_file(tmp_path: Path) -> None:
    """The temporary file inherits the folder's default ACL: the file it replaces had none."""
    folder = tmp_path / "src"
    folder.mkdir()
    try:
        os.setxattr(folder, "system.posix_acl_default", _acl(1234))
    except OSError:
        pytest.skip("no POSIX ACLs on this file system")
    target = folder / "train.py"
    target.write_bytes(b"old\n")
    for key in os.listxattr(target):
        os.removexattr(target, key)
    target.chmod(0o644)
    data, _, signature = read_signed(target)
    writing.replace_file(target, b"new\n", expect=(signature, writing.digest(data)))
    assert target.read_bytes() == b"new\n"
    assert _xattrs(target) == {}
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.parametrize("option", ["--fix", "--add-noqa"])
def test_read_only_and_hard_linked_files_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: str
) -> None:
    """Reproduction: a fix rewrote a 0444 file (root ignores the mode) and split a hard link
    (the other name kept the old bytes). Both are refused, by --fix and --add-noqa alike."""
    (tmp_path / "locked.py").write_bytes(BUGGY)
    (tmp_path / "locked.py").chmod(0o444)
    (tmp_path / "linked.py").write_bytes(BUGGY)
    os.link(tmp_path / "linked.py", tmp_path / "other_name.py")
    monkeypatch.chdir(tmp_path)
    result = cli("check", "-n", option, ".")
    verb = "not fixed" if option == "--fix" else "noqa not added"
    assert _errors(result) == [
        f"error: linked.py: {verb}: hard-linked (2 names; a rewrite would split them)",
        f"error: locked.py: {verb}: read-only",
        f"error: other_name.py: {verb}: hard-linked (2 names; a rewrite would split them)",
    ]
    for name in ("locked.py", "linked.py", "other_name.py"):
        assert (tmp_path / name).read_bytes() == BUGGY
    assert (tmp_path / "linked.py").stat().st_nlink == 2
    assert stat.S_IMODE((tmp_path / "locked.py").stat().st_mode) == 0o444
    assert result.exit_code == 1


def _special(path: Path, kind: str) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:  # a character device with /dev/null's numbers, made here: the machine's own is never at risk
        try:
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except (OSError, AttributeError):
            pytest.skip("cannot make device nodes here")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_never_renames_over_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    """Reproduction: a device node was replaced by a regular file. Named directly, or swapped in
    just before the rename (during the temporary file's fsync), it is left as it is."""
    target = tmp_path / "out.json"
    _special(target, kind)
    with pytest.raises(writing.WriteRefused, match="not a regular file"):
        writing.write_file(target, b"{}\n")
    assert not target.is_file() and target.exists()
    swapped = tmp_path / "card.json"
    swapped.write_bytes(b"old\n")
    real_fsync = os.fsync

    def swap_during_fsync(fd: int) -> None:
        real_fsync(fd)
        if swapped.is_file():
            swapped.unlink()
            _special(swapped, kind)

    os.fsync = swap_during_fsync  # type: ignore[assignment]
    try:
        with pytest.raises(writing.WriteRefused, match="not a regular file"):
            writing.write_file(swapped, b"new\n")
    finally:
        os.fsync = real_fsync
    assert not swapped.is_file() and swapped.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["card.json", "out.json"]  # no temporary file left


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_the_guard_report_goes_through_the_safe_writer(tmp_path: Path) -> None:
    from runtime_guard.__main__ import main
    from runtime_guard.report import Report

    report = Report(findings=[], card={"A": 4})
    card = tmp_path / "card.json"
    report.to_json(card)
    assert card.read_text(encoding="utf-8").startswith("{")
    os.mkfifo(tmp_path / "fifo.html")
    assert main(["show", str(card), "--html", str(tmp_path / "fifo.html")]) == 2
    assert stat.S_ISFIFO((tmp_path / "fifo.html").lstat().st_mode)
    card.chmod(0o444)
    with pytest.raises(writing.WriteRefused, match="read-only"):
        report.to_json(card)


def test_a_long_file_name_still_gets_a_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / ("x" * 250 + ".py")
    target.write_bytes(b"old\n")
    writing.write_file(target, b"new\n")
    assert target.read_bytes() == b"new\n"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


# --- item 13: leftovers, the fixable count, CR-only files ---------------------------------


def _dead_pid() -> int:
    process = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(process.stdout)


def test_stale_temporaries_are_removed_and_nothing_else(tmp_path: Path) -> None:
    old = time.time() - writing.STALE_AFTER_S - 10
    dead, alive = _dead_pid(), os.getppid()
    names = {
        f".train.py.{dead}.0123abcd.accumlint-tmp": True,  # its process is gone
        f".train.py.{alive}.0123abcd.accumlint-tmp": False,  # still running: may be writing it
        f".old.py.{alive}.89abcdef.accumlint-tmp": True,  # older than STALE_AFTER_S: a reused pid
        ".train.py.k2j_x9qa.accumlint-tmp": False,  # an earlier version's, fresh
        ".aged.py.k2j_x9qa.accumlint-tmp": True,  # an earlier version's, stale
        f"train.py.{dead}.0123abcd.accumlint-tmp": False,  # not accumlint's pattern (no leading dot)
        f".train.py.{dead}.0123ABCD.accumlint-tmp": False,
        f".train.py.{dead}.0123abcd.accumlint-tmp.bak": False,
    }
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    for name in (f".old.py.{alive}.89abcdef.accumlint-tmp", ".aged.py.k2j_x9qa.accumlint-tmp"):
        os.utime(tmp_path / name, (old, old))
    (tmp_path / f".dir.py.{dead}.0123abcd.accumlint-tmp").mkdir()  # not a regular file
    if hasattr(os, "symlink"):
        (tmp_path / "victim").write_bytes(b"keep")
        (tmp_path / f".link.py.{dead}.0123abcd.accumlint-tmp").symlink_to("victim")
    (tmp_path / "train.py").write_bytes(b"")
    assert writing.remove_stale_temporaries([str(tmp_path / "train.py")]) == sum(names.values())
    left = {p.name for p in tmp_path.iterdir()}
    assert {name for name, stale in names.items() if stale} & left == set()
    assert {name for name, stale in names.items() if not stale} <= left
    assert f".dir.py.{dead}.0123abcd.accumlint-tmp" in left
    if hasattr(os, "symlink"):
        assert (tmp_path / "victim").read_bytes() == b"keep"


def test_a_refused_fix_is_not_counted_as_fixable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: after "not fixed", the summary still said "[*] 1 fixable with `--fix`"."""
    (tmp_path / "train.py").write_bytes(BUGGY)
    (tmp_path / "train.py").chmod(0o444)
    monkeypatch.chdir(tmp_path)
    result = cli("check", "-n", "--fix", "--output-format", "concise", ".")
    assert _errors(result) == ["error: train.py: not fixed: read-only"]
    assert result.stdout.splitlines()[0].startswith("train.py:3:5: ACC001 `optimizer`")  # no [*]
    assert result.stdout.rstrip().splitlines()[-1] == "Found 1 finding."
    plain = cli("check", "-n", "--output-format", "concise", ".")  # without --fix it is fixable
    assert "[*] 1 fixable with `--fix`." in plain.stdout


def test_a_cr_only_file_keeps_its_last_line_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reproduction: a fix of a file with CR-only line ends dropped its final ``\\r``."""
    target = tmp_path / "train.py"
    target.write_bytes(BUGGY.replace(b"\n", b"\r"))
    monkeypatch.chdir(tmp_path)
    cli("check", "-n", "--fix", "train.py")
    fixed = target.read_bytes()
    assert b"\n" not in fixed
    assert fixed.endswith(b"optimizer.zero_grad()\r")
    assert fixed.split(b"\r")[2] == FIXED_LINE3


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["fix", "noqa"])
def test_kills_during_a_rewrite_tear_nothing_and_leave_nothing(mode: str) -> None:
    """kill -9 at random moments of `--fix` / `--add-noqa` (20 times each here; 100 by hand with
    scripts/fix_kills.py): every file holds its old or its new bytes, and the next run leaves no
    temporary file."""
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "fix_kills.py"), "--runs", "20", "--files", "20", "--mode", mode],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=900,
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 0, result.stdout + result.stderr
    assert summary.startswith("20 kills:") and "; 0 torn files, " in summary, summary
    assert summary.endswith(", 0 after the next run"), summary


def test_the_cache_never_renames_over_what_is_not_a_regular_file(tmp_path: Path) -> None:
    """Issue 28 item 4: the cache's own rename (an entry file, a torn key) refuses a FIFO or a link at the name."""
    from accumlint.files.writing import WriteRefused, rename_over_regular

    fifo, link, plain = tmp_path / "fifo.json", tmp_path / "link.json", tmp_path / "plain.json"
    os.mkfifo(fifo)
    link.symlink_to(tmp_path / "elsewhere")
    plain.write_bytes(b"old")
    for target in (fifo, link):
        temporary = tmp_path / "new.tmp"
        temporary.write_bytes(b"new")
        with pytest.raises(WriteRefused, match="not a regular file"):
            rename_over_regular(temporary, target)
        assert temporary.exists()  # the caller removes its own temporary file
        temporary.unlink()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()
    temporary = tmp_path / "new.tmp"
    temporary.write_bytes(b"new")
    rename_over_regular(temporary, plain)
    assert plain.read_bytes() == b"new" and not temporary.exists()
