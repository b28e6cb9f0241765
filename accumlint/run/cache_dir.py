"""The cache directory is accumlint's own: what it may write there, and what ``accumlint clean`` removes.

A configured location (``--cache-dir``, ``$ACCUMLINT_CACHE_DIR``, ``cache-dir``, or the default
``.accumlint_cache`` in the project root) is used as follows:

* It must not contain the project root, the home directory or the current directory, and
  must not hold a ``.git``: :class:`CacheDirError` (``--cache-dir .`` must never turn the
  project into a cache).
* If it does not exist, accumlint creates it, with a ``CACHEDIR.TAG`` and a ``.gitignore`` of
  ``*`` (built in a temporary sibling and renamed into place, so a concurrent run sees no
  half-made directory; the sibling is removed on every failure, and one a killed run left
  behind is removed by the next run and by ``clean``).
* If it exists and holds only what accumlint writes (:func:`foreign_entries`), it is used.
* If it exists and was not made by accumlint (no tag of ours), a subdirectory
  ``.accumlint_cache`` inside it is used by the same rules: the tag and the ignore file are
  never written into a directory accumlint did not create.
* A directory with accumlint's tag that holds anything else is refused (someone's files, or
  a folder an older accumlint tagged).

What accumlint wrote is recognised by its contents, never by its name alone: the tag and the
ignore file by their exact bytes (regular files, not links), a cache file by its signature
(:func:`accumlint.run.cache.proves_written`: an HMAC under this user's key, so a user's
``2024/5d41402abc4b2a76b9719d911017c592.json`` is never taken for one). :func:`clean` removes
only those files, a version folder only once it held nothing else, and the directory only if
it held nothing else either.

Everything is created private to the user whatever the umask: folders 0700, files 0600.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
import time
from collections.abc import Iterable
from pathlib import Path

from accumlint.files.reading import NotARegularFile, read_signed

CACHE_DIR_NAME = ".accumlint_cache"
TAG_NAME = "CACHEDIR.TAG"
IGNORE_NAME = ".gitignore"
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by accumlint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)
GITIGNORE = "# Automatically created by accumlint.\n*\n"
_OWN_FILES = {TAG_NAME: CACHEDIR_TAG.encode(), IGNORE_NAME: GITIGNORE.encode()}
#: the modes of what accumlint creates, whatever the umask (``umask 000`` must not make the
#: cache writable by others: they could replace its files)
DIR_MODE = 0o700
FILE_MODE = 0o600
#: what accumlint writes at the top of its directory besides the tag and the ignore file
_VERSION_DIR = re.compile(r"[0-9][0-9A-Za-z.+-]*")
#: a cache file ``<fingerprint>.json``, and ``.<fingerprint>.json.<pid>.<hex>.tmp`` that
#: replaces it atomically (:func:`temporary_name`; left behind by a kill)
_CACHE_FILE = re.compile(r"([0-9a-f]{32})\.json")
_CACHE_TEMPORARY = re.compile(r"\.([0-9a-f]{32})\.json\.[0-9]+\.[0-9a-f]{8}\.tmp")
#: the bytes of a cache file read to recognise it (its signed header, or an older format's first entry)
_PROOF_BYTES = 256 * 1024
#: the most entries looked at when deciding whether a directory is accumlint's
_MAX_SCAN = 10_000
#: a temporary sibling (:func:`create`) older than this is stale even if its process id is in use again
STALE_SECONDS = 60


class CacheDirError(Exception):
    """The cache location cannot be used as accumlint's directory; the message is one line."""


def temporary_name(name: str) -> str:
    """The name of the temporary file that replaces ``name`` atomically (recognised by :func:`clean`)."""
    return f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _sibling_pattern(name: str) -> re.Pattern[str]:
    """``.<name>.<pid>.<hex>.tmp``: the folder :func:`create` builds ``name`` in (group 1: the pid)."""
    return re.compile(rf"\.{re.escape(name)}\.([0-9]{{1,10}})\.[0-9a-f]{{8}}\.tmp")


def make_private_dir(path: str | os.PathLike[str]) -> None:
    """Create the folder ``path`` with mode :data:`DIR_MODE` whatever the umask. Raises
    ``FileExistsError`` if something is there, ``OSError`` if it cannot be made."""
    os.mkdir(path, DIR_MODE)
    try:
        os.chmod(path, DIR_MODE)  # the umask may have taken the owner's bits away
    except BaseException:
        with contextlib.suppress(OSError):
            os.rmdir(path)
        raise


def make_private_dirs(path: str | os.PathLike[str]) -> None:
    """Create the folder ``path`` and those of its parents that are missing, each with
    :data:`DIR_MODE` (as XDG asks of a user's cache folders); what exists is left as it is.
    Raises ``OSError`` if one cannot be made."""
    missing = []
    folder = Path(path)
    while not os.path.lexists(folder) and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by a concurrent run
            make_private_dir(folder)


def write_new(path: str | os.PathLike[str], data: bytes) -> None:
    """Create the file ``path`` (never an existing one, never through a link) with mode
    :data:`FILE_MODE` whatever the umask, holding ``data``, flushed to the disk (a crash
    leaves no empty cache file that would then be nobody's). Raises ``OSError``; the file
    is removed again if the write fails."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, FILE_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            if hasattr(os, "fchmod"):
                os.fchmod(handle.fileno(), FILE_MODE)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise


def _is_regular(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _read_regular(path: str, limit: int) -> bytes | None:
    """At most ``limit`` + 1 bytes of ``path`` if it is a regular file and not a link (None
    otherwise): the bounded, non-blocking reader, and the file it opened must be the one
    ``lstat`` saw (a FIFO, a device or a link swapped in between is never read)."""
    try:
        seen = os.lstat(path)
        if not stat.S_ISREG(seen.st_mode):
            return None
        data, _, (_, _, _, inode, device) = read_signed(path, limit)
    except (OSError, NotARegularFile):
        return None
    return data if (inode, device) == (seen.st_ino, seen.st_dev) else None


def _own_file(path: str, name: str, *, partial: bool = False) -> bool:
    """Whether ``path`` is a regular file (not a link) holding exactly the bytes accumlint
    writes as ``name``; ``partial``: or the start of them (a write cut short by a kill)."""
    expected = _OWN_FILES[name]
    data = _read_regular(path, len(expected))
    if data is None:
        return False
    return expected.startswith(data) if partial else data == expected


def _cache_file(entry: os.DirEntry[str], secret: bytes | None) -> bool:
    """Whether ``entry`` of a version folder is a cache file accumlint wrote (its contents
    signed with ``secret``: :func:`accumlint.run.cache.proves_written`), or the temporary that
    was replacing one (an empty one too: a kill between its creation and the write)."""
    from accumlint.run.cache import proves_written  # here: accumlint.run.cache imports this module

    match = _CACHE_FILE.fullmatch(entry.name)
    temporary = match is None
    if temporary:
        match = _CACHE_TEMPORARY.fullmatch(entry.name)
    if match is None or not _is_regular(entry):
        return False
    data = _read_regular(entry.path, _PROOF_BYTES)
    if data is None:
        return False
    return (temporary and data == b"") or proves_written(data, match.group(1), secret)


def _entries(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as scan:
        return [entry for _, entry in zip(range(_MAX_SCAN + 1), scan, strict=False)]


def _is_version_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return _VERSION_DIR.fullmatch(entry.name) is not None and entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def foreign_entries(directory: str | os.PathLike[str], secret: bytes | None) -> list[str]:
    """The entries of ``directory`` (relative paths) that accumlint did not write; [] if it holds
    only accumlint's files. ``secret``: this user's cache key (:func:`accumlint.run.cache.user_key`;
    None: no cache file can be proven). A symlink is always foreign, and so is a cache file
    that does not prove it was written by accumlint under ``secret`` (another user's, a
    look-alike). Raises ``OSError`` if it cannot be listed."""
    top = os.fspath(directory)
    foreign: list[str] = []
    entries = _entries(top)
    if len(entries) > _MAX_SCAN:
        return ["(more entries than a cache holds)"]
    for entry in entries:
        name = entry.name
        if name in _OWN_FILES:
            if not _own_file(entry.path, name):
                foreign.append(name)
        elif _is_version_dir(entry):
            foreign.extend(f"{name}/{inner.name}" for inner in _entries(entry.path) if not _cache_file(inner, secret))
        else:
            foreign.append(name)
    return foreign


def _is_ours(directory: Path) -> bool:
    """Whether ``directory`` carries accumlint's tag (its bytes exactly, a regular file, not a link)."""
    return _own_file(os.fspath(directory / TAG_NAME), TAG_NAME)


def _contains(directory: str, other: str) -> bool:
    return other == directory or other.startswith(directory.rstrip(os.sep) + os.sep)


def _check_location(location: Path, protected: Iterable[Path]) -> None:
    real = os.path.realpath(location)
    for what in protected:
        if _contains(real, os.path.realpath(what)):
            raise CacheDirError(f"{location}: not used as the cache directory: it contains {what}")
    if os.path.lexists(os.path.join(real, ".git")):
        raise CacheDirError(f"{location}: not used as the cache directory: it holds a `.git`")
    if os.path.exists(real) and not os.path.isdir(real):
        raise CacheDirError(f"{location}: not used as the cache directory: not a directory")


def protected_paths(project_root: Path) -> list[Path]:
    """The directories a cache directory must never contain: the project root, the home
    directory and the current directory."""
    paths = [project_root, Path.cwd()]
    with contextlib.suppress(RuntimeError, KeyError):  # no home directory
        paths.append(Path.home())
    return paths


def locate(location: Path, protected: Iterable[Path], secret: bytes | None, *, for_clean: bool = False) -> Path:
    """The directory the cache of the configured ``location`` lives in (see the module docstring);
    it may not exist yet. ``secret``: this user's cache key (:func:`foreign_entries`).
    ``for_clean``: a tagged directory holding foreign files is accepted (:func:`clean` removes
    only accumlint's files from it). The temporary siblings that killed runs left while they
    created the directory are removed on the way (:func:`remove_stale_siblings`), so the next
    run of ``check`` or ``clean`` leaves none. Raises :class:`CacheDirError`."""
    protected = list(protected)
    _check_location(location, protected)
    remove_stale_siblings(location)
    if not os.path.lexists(location) or _is_ours(location):
        candidate = location
    else:
        candidate = location / CACHE_DIR_NAME  # a folder accumlint did not make: its own inside it
        _check_location(candidate, protected)
        remove_stale_siblings(candidate)
        if os.path.lexists(candidate) and not _is_ours(candidate):
            raise CacheDirError(f"{candidate}: exists and was not made by accumlint; not used as the cache directory")
    if os.path.lexists(candidate) and not for_clean:
        try:
            foreign = foreign_entries(candidate, secret)
        except OSError as exc:
            raise CacheDirError(f"{candidate}: cannot read the cache directory ({exc.strerror or exc})") from None
        if foreign:
            raise CacheDirError(
                f"{candidate}: holds files accumlint did not write ({foreign[0]}); not used as the cache directory"
            )
    return candidate


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists (where that cannot be asked without harm: yes)."""
    if os.name != "posix":  # os.kill(pid, 0) would end the process on Windows
        return True
    try:
        os.kill(pid, 0)
    except PermissionError:  # another user's
        return True
    except (OSError, OverflowError):
        return False
    return True


def remove_stale_siblings(directory: Path) -> None:
    """Remove the temporary siblings a killed run left while it built ``directory``
    (:func:`create`): recognised by their exact name, a process that is gone (or an age over
    :data:`STALE_SECONDS`), and their contents: nothing but our tag and ignore file, or the
    start of them. Errors are ignored (the next run tries again)."""
    pattern = _sibling_pattern(directory.name)
    try:
        entries = _entries(os.fspath(directory.parent))
    except OSError:
        return
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            young = time.time() - entry.stat(follow_symlinks=False).st_mtime < STALE_SECONDS
            if young and _running(int(match.group(1))):
                continue  # a concurrent run building it now
            inner = _entries(entry.path)
        except OSError:
            continue
        if all(item.name in _OWN_FILES and _own_file(item.path, item.name, partial=True) for item in inner):
            for item in inner:
                _unlink(item.path)
            with contextlib.suppress(OSError):
                os.rmdir(entry.path)


def create(directory: Path, secret: bytes | None) -> bool:
    """Make ``directory`` accumlint's (tag and ignore file in a temporary sibling, renamed into
    place) unless it exists; True if it is accumlint's afterwards (``secret``: see
    :func:`foreign_entries`). The sibling never outlives the call. Raises ``OSError``."""
    if os.path.lexists(directory):
        return _is_ours(directory) and not foreign_entries(directory, secret)
    directory.parent.mkdir(parents=True, exist_ok=True)
    temporary = directory.parent / f".{directory.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    make_private_dir(temporary)
    try:
        for name, data in _OWN_FILES.items():
            write_new(temporary / name, data)
        os.rename(temporary, directory)
    except BaseException as error:
        # a concurrent run made it first, the disk is full, a signal: the sibling is ours alone
        # (made just now, private), so all of it goes, whatever its files hold
        for name in _OWN_FILES:
            with contextlib.suppress(OSError):
                os.unlink(temporary / name)
        with contextlib.suppress(OSError):
            os.rmdir(temporary)
        if not isinstance(error, OSError):
            raise
        return _is_ours(directory) and not foreign_entries(directory, secret)
    return True


def _unlink(path: str | os.PathLike[str]) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _remove_own(directory: Path, secret: bytes | None, *, whole: bool) -> None:
    """Unlink the files accumlint wrote in ``directory`` (:func:`foreign_entries`), the version
    folders that held nothing else (an empty one only when the ``whole`` directory is
    accumlint's), and the tag last: a clean cut short leaves a directory the next one finds."""
    top = os.fspath(directory)
    for entry in _entries(top):
        if not _is_version_dir(entry):
            continue
        inner = _entries(entry.path)
        own = [item for item in inner if _cache_file(item, secret)]
        for item in own:
            _unlink(item.path)
        if len(own) == len(inner) and (own or whole):
            with contextlib.suppress(OSError):  # a file added meanwhile keeps it
                os.rmdir(entry.path)
    for name in (IGNORE_NAME, TAG_NAME):
        path = os.path.join(top, name)
        if _own_file(path, name):
            _unlink(path)


def clean(location: Path, protected: Iterable[Path], secret: bytes | None) -> tuple[Path, list[str]] | None:
    """Remove accumlint's files from the cache directory of ``location`` (those their contents
    prove it wrote, ``secret``: this user's cache key), then the directory if it held nothing
    else. Returns the directory and what was kept (entries accumlint did not write, or cannot
    prove it did), or None if there was no cache. Raises :class:`CacheDirError` for a location
    that is not a cache directory (:func:`locate`), ``OSError`` if a file cannot be removed."""
    directory = locate(location, protected, secret, for_clean=True)
    if not os.path.lexists(directory):
        return None
    if not _is_ours(directory):
        raise CacheDirError(f"{directory}: not an accumlint cache (no CACHEDIR.TAG written by accumlint); not removed")
    kept = foreign_entries(directory, secret)
    _remove_own(directory, secret, whole=not kept)
    if not kept and not os.path.islink(directory):  # a symlinked cache keeps its link (and the folder it names)
        os.rmdir(directory)
    return directory, kept
