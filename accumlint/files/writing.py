"""Writing a file accumlint rewrites (``--fix``, ``--add-noqa``, the guard's report): the one safe writer.

A rewrite changes the file's bytes and nothing else, and only where the user asked:

* **Where.** A path that a symlink (the file, or a folder above it) leads out of every tree the
  user named is never written (:class:`Boundary`): not the project root, not the current
  directory, only the named paths bound it.
* **What.** Only a regular file is replaced, and the name is checked with ``lstat`` immediately
  before the rename: a device node, a FIFO or a socket is never replaced by a regular file. A
  read-only file (no write bit for its owner) and a hard-linked one (a rename would leave the
  other names with the old bytes) are refused.
* **Identity.** The new bytes go to a temporary file beside the target, which gets the target's
  owner, group, mode and extended attributes (ACLs, SELinux labels) before the rename; what
  cannot be kept refuses the write rather than change it.
* **Changed meanwhile.** With ``expect`` (the file as it was read), the file's ``stat``
  signature and the hash of its bytes are compared once the new bytes are on disk, immediately
  before the rename; any difference leaves the file as it is.
* **Kill.** A kill between the temporary file's creation and the rename leaves the old bytes
  and the temporary file ``.<name>.<pid>.<8 hex>.accumlint-tmp`` (not a ``.py`` name: never
  checked); the next rewriting run removes it (:func:`remove_stale_temporaries`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterable

from accumlint.files.reading import NotARegularFile, Signature, read_source, signature_of, source_limit

TEMP_SUFFIX = ".accumlint-tmp"
#: a temporary file older than this (seconds) is stale even if a process with its pid runs (a reused pid)
STALE_AFTER_S = 300
_NAME_MAX = 255  # bytes in one path component (Linux, macOS)
_TEMPORARY = re.compile(r"\..+\.(?P<pid>[0-9]{1,10})\.[0-9a-f]{8}" + re.escape(TEMP_SUFFIX), re.DOTALL)
#: what earlier versions left (``tempfile.mkstemp``: no pid), removed only once stale
_OLD_TEMPORARY = re.compile(r"\..+\.[a-z0-9_]{8}" + re.escape(TEMP_SUFFIX), re.DOTALL)
_NO_XATTRS = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class WriteRefused(OSError):
    """The file was not written; ``reason`` says why (a symlink out of the named trees, not a
    regular file, read-only, hard-linked, an owner or attribute that cannot be kept)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.reason


class FileChangedError(WriteRefused):
    """The file is no longer the one that was read (its bytes or its ``stat`` signature)."""

    def __init__(self) -> None:
        super().__init__("the file changed since it was read")


class Boundary:
    """The trees a rewrite may reach through a symlink: the paths the user named.

    A named directory bounds everything under its real location (a checkout reached through a
    link is fixed); a named file bounds only itself as named, not where a link on its path leads
    (``check --fix link.py``, as pre-commit names files, never writes through the link out of
    the named trees). A path with no symlink on it is always within.
    """

    def __init__(self, named: Iterable[str | os.PathLike[str]]) -> None:
        self.roots = tuple(_bound(os.fspath(path)) for path in named)

    def outside(self, path: str | os.PathLike[str]) -> str | None:
        """Where ``path`` really leads if a symlink on it leads out of every named tree; None if not."""
        real = os.path.realpath(path)
        if real == os.path.normpath(os.path.abspath(path)):
            return None
        for root in self.roots:
            if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
                return None
        return real


def _bound(path: str) -> str:
    # a named folder is the tree at its real location; a named file is only the path as named
    # (no link on it resolved: a link in it, or a linked folder above it, may lead anywhere)
    return os.path.realpath(path) if os.path.isdir(path) else os.path.normpath(os.path.abspath(path))


def digest(data: bytes) -> bytes:
    """The SHA-256 of ``data`` (what :func:`replace_file` compares the file's bytes by)."""
    return hashlib.sha256(data).digest()


def rewrite(
    path: str,
    data: bytes,
    *,
    expect: tuple[Signature, bytes],
    boundary: Boundary,
    changed: str = "the file changed since it was read",
) -> str:
    """:func:`replace_file` for a file accumlint read (``expect``: its signature and bytes, as
    :func:`accumlint.files.reading.read_signed` gave them); returns why it was not written, or ""
    (``changed``: the words for a file that changed meanwhile)."""
    try:
        replace_file(path, data, expect=(expect[0], digest(expect[1])), boundary=boundary)
    except FileChangedError:
        return changed
    except OSError as exc:
        return exc.strerror or str(exc)  # a WriteRefused has no strerror: its reason
    return ""


def write_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write a file accumlint makes (a report): a new file gets the umask's mode, an existing one
    is replaced as :func:`replace_file` does; the stale temporary files beside it are removed.
    Raises :class:`WriteRefused` or ``OSError``."""
    remove_stale_temporaries([os.fspath(path)])
    replace_file(path, data)


def replace_file(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    expect: tuple[Signature, bytes] | None = None,
    boundary: Boundary | None = None,
) -> None:
    """Replace the bytes of the file at ``path`` (a symlink is followed) atomically, keeping its
    identity (see the module docstring); a missing file is created.

    ``expect``: the file's :data:`~accumlint.files.reading.Signature` and the SHA-256 of its bytes as
    they were read (:func:`digest`). ``boundary``: the trees a symlink may lead into (None: any).
    Raises :class:`FileChangedError` when the file is not the one read (or not the one found at
    the start), :class:`WriteRefused` when it may not be written, ``OSError`` when writing fails;
    in every case the file is left as it was and the temporary file removed.
    """
    if boundary is not None:
        outside = boundary.outside(path)
        if outside is not None:
            raise WriteRefused(f"a symlink to {outside}, outside the checked trees")
    folder_path, name = os.path.split(os.path.realpath(path))
    # every step below names the file relative to this descriptor: a folder on the way swapped
    # for a symlink meanwhile cannot redirect the write
    folder = os.open(folder_path, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
    try:
        _replace_in(folder, os.path.join(folder_path, name), name, data, expect, source_limit(path))
    finally:
        os.close(folder)


def _replace_in(folder: int, real: str, name: str, data: bytes, expect: tuple[Signature, bytes] | None,
                limit: int) -> None:
    before = _lstat(name, folder)
    if before is not None:
        _check_replaceable(before)
    reference = None if before is None else signature_of(before)  # what the last look must find again
    if expect is not None and reference != expect[0]:
        raise FileChangedError
    temporary = _temporary_name(name)
    # a new file gets the umask's mode; a replaced one gets its own (_keep_identity), not readable before
    fd = os.open(
        temporary,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC,
        0o600 if before is not None else 0o666,
        dir_fd=folder,
    )
    try:
        try:
            _write_all(fd, data)
            if before is not None:
                _keep_identity(fd, before, real)
            os.fsync(fd)
        finally:
            os.close(fd)
        if expect is not None:
            try:
                now, size = read_source(real, limit)  # (a notebook's JSON: the larger bound it was read with)
            except NotARegularFile:
                raise WriteRefused("not a regular file") from None
            if size > limit or digest(now) != expect[1]:
                raise FileChangedError
        # the last look, immediately before the rename: the same regular file, or still no file
        after = _lstat(name, folder)
        if (after is None) != (before is None):
            raise FileChangedError
        if after is not None:
            _check_replaceable(after)
            if signature_of(after) != reference:
                raise FileChangedError
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise
    with contextlib.suppress(OSError):
        os.fsync(folder)  # the rename itself survives a power cut


def rename_over_regular(temporary: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """``os.replace(temporary, target)`` for a file only accumlint writes (the cache's files and
    key): refused with :class:`WriteRefused` where ``target`` exists and is not a regular file
    (``lstat``: a symlink, a device or a FIFO at that name is never replaced). Raises ``OSError``."""
    try:
        info: os.stat_result | None = os.lstat(target)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise WriteRefused(f"{os.fspath(target)}: not replaced: not a regular file")
    os.replace(temporary, target)


def _lstat(name: str, folder: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _check_replaceable(info: os.stat_result) -> None:
    """Refuse what a rename must not replace: anything but a regular file, a read-only file, a hard-linked one."""
    if not stat.S_ISREG(info.st_mode):
        raise WriteRefused("not a regular file")
    if not info.st_mode & stat.S_IWUSR:
        raise WriteRefused("read-only")
    if info.st_nlink > 1:
        raise WriteRefused(f"hard-linked ({info.st_nlink} names; a rewrite would split them)")


def _temporary_name(name: str) -> str:
    tail = f".{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}"
    stem = os.fsencode(name)[: _NAME_MAX - 1 - len(tail)]  # a long name still leaves room for the tail
    return "." + os.fsdecode(stem) + tail


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _keep_identity(fd: int, before: os.stat_result, real: str) -> None:
    """Give the temporary file ``fd`` the owner, group, mode and extended attributes of the
    file it replaces; :class:`WriteRefused` if one of them cannot be kept."""
    owner = (before.st_uid, before.st_gid)
    made = os.fstat(fd)
    if (made.st_uid, made.st_gid) != owner:
        try:
            os.fchown(fd, *owner)
        except OSError as exc:
            raise WriteRefused(f"cannot keep its owner {owner[0]}:{owner[1]} ({exc.strerror})") from None
    os.fchmod(fd, stat.S_IMODE(before.st_mode))  # after the chown, which clears the set-id bits
    _copy_xattrs(real, fd)
    made = os.fstat(fd)
    if (made.st_uid, made.st_gid, stat.S_IMODE(made.st_mode)) != (*owner, stat.S_IMODE(before.st_mode)):
        raise WriteRefused(f"cannot keep its owner and mode {owner[0]}:{owner[1]} {stat.S_IMODE(before.st_mode):o}")


def _copy_xattrs(real: str, fd: int) -> None:
    """The extended attributes of ``real`` onto ``fd``, and none it lacks (a folder's default ACL)."""
    if not hasattr(os, "listxattr"):  # macOS, Windows: Python has no call for them
        return
    try:
        wanted = {
            key: os.getxattr(real, key, follow_symlinks=False) for key in os.listxattr(real, follow_symlinks=False)
        }
        present = os.listxattr(fd)
    except OSError as exc:
        if exc.errno in _NO_XATTRS:
            return
        raise WriteRefused(f"cannot read its extended attributes ({exc.strerror})") from None
    for key in present:
        if key not in wanted:
            _xattr_step(os.removexattr, fd, key)
    for key, value in wanted.items():
        _xattr_step(os.setxattr, fd, key, value)


def _xattr_step(step: Callable[..., None], fd: int, key: str, *value: bytes) -> None:
    try:
        step(fd, key, *value)
    except OSError as exc:
        raise WriteRefused(f"cannot keep its extended attribute {key} ({exc.strerror})") from None


def remove_stale_temporaries(paths: Iterable[str], boundary: Boundary | None = None) -> int:
    """Remove the temporary files a killed rewrite left in the folders of ``paths`` (their real
    folders, within ``boundary`` when given); the number removed.

    Only regular files with exactly accumlint's temporary name, whose process is gone or that
    are older than :data:`STALE_AFTER_S` seconds; a folder that cannot be read is passed over.
    """
    folders = {
        os.path.dirname(os.path.realpath(path)) for path in paths if boundary is None or boundary.outside(path) is None
    }
    removed = 0
    now = time.time()
    for folder in sorted(folders):
        try:
            with os.scandir(folder) as entries:
                stale = [entry.path for entry in entries if entry.name.endswith(TEMP_SUFFIX) and _stale(entry, now)]
        except OSError:
            continue
        for path in stale:
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
    return removed


def _stale(entry: os.DirEntry[str], now: float) -> bool:
    match = _TEMPORARY.fullmatch(entry.name)
    if match is None and _OLD_TEMPORARY.fullmatch(entry.name) is None:
        return False
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISREG(info.st_mode):
        return False
    if now - info.st_mtime > STALE_AFTER_S:
        return True
    return match is not None and not _running(int(match.group("pid")))


def _running(pid: int) -> bool:
    """Whether a process ``pid`` may still be writing its temporary file (this one is: a thread may)."""
    if pid == os.getpid() or pid <= 0 or os.name != "posix":  # Windows: signal 0 would end the process
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # gone, or a number no pid can be
        return False
    except OSError:  # EPERM: another user's live process
        return True
    return True
