"""The cache directory is accumlint's own: what it may write there, and what ``accumlint clean`` removes.

A configured location (``--cache-dir``, ``$ACCUMLINT_CACHE_DIR``, ``cache-dir``, or the default
``.accumlint_cache`` in the project root) is used as follows:

* It must not contain the project root, the home directory or the current directory, and
  must not hold a ``.git``: :class:`CacheDirError` (``--cache-dir .`` must never turn the
  project into a cache).
* If it does not exist, accumlint creates it, with a ``CACHEDIR.TAG`` and a ``.gitignore`` of
  ``*`` (built in a temporary sibling and renamed into place, so a concurrent run sees no
  half-made directory).
* If it exists and holds only what accumlint writes (:func:`foreign_entries`), it is used.
* If it exists and was not made by accumlint (no tag of ours), a subdirectory
  ``.accumlint_cache`` inside it is used by the same rules: the tag and the ignore file are
  never written into a directory accumlint did not create.
* A directory with accumlint's tag that holds anything else is refused (someone's files, or
  a folder an older accumlint tagged).

:func:`clean` removes only the files accumlint writes (version folders, their cache files and
temporary files, the tag and the ignore file, each recognised by its name and, for the tag and
the ignore file, its bytes), then the directory if that left it empty.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Iterable
from pathlib import Path

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
#: what accumlint writes at the top of its directory besides the tag and the ignore file
_VERSION_DIR = re.compile(r"[0-9][0-9A-Za-z.+-]*")
#: ``.<name>.<pid>.<hex>.tmp``: a file being replaced atomically (left behind by a kill)
_TEMPORARY = r"\.{name}\.[0-9]+\.[0-9a-f]{{8}}\.tmp"
_TOP_TEMPORARY = re.compile(_TEMPORARY.format(name=r"(?:CACHEDIR\.TAG|\.gitignore)"))
_CACHE_FILE = re.compile(r"[0-9a-f]{32}\.json")
_CACHE_TEMPORARY = re.compile(_TEMPORARY.format(name=r"[0-9a-f]{32}\.json"))
#: the most entries looked at when deciding whether a directory is accumlint's
_MAX_SCAN = 10_000


class CacheDirError(Exception):
    """The cache location cannot be used as accumlint's directory; the message is one line."""


def temporary_name(name: str) -> str:
    """The name of the temporary file that replaces ``name`` atomically (recognised by :func:`clean`)."""
    return f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"


def _is_regular(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_file(follow_symlinks=False)
    except OSError:
        return False


def _own_file(path: str, name: str) -> bool:
    """Whether ``path`` is a regular file holding exactly the bytes accumlint writes as ``name``."""
    expected = _OWN_FILES[name]
    try:
        with open(path, "rb") as handle:
            return handle.read(len(expected) + 1) == expected
    except OSError:
        return False


def _entries(directory: str) -> list[os.DirEntry[str]]:
    with os.scandir(directory) as scan:
        return [entry for _, entry in zip(range(_MAX_SCAN + 1), scan, strict=False)]


def foreign_entries(directory: str | os.PathLike[str]) -> list[str]:
    """The entries of ``directory`` (relative paths) that accumlint did not write; [] if it holds
    only accumlint's files. A symlink is always foreign. Raises ``OSError`` if it cannot be listed."""
    top = os.fspath(directory)
    foreign: list[str] = []
    entries = _entries(top)
    if len(entries) > _MAX_SCAN:
        return ["(more entries than a cache holds)"]
    for entry in entries:
        name = entry.name
        if name in _OWN_FILES:
            if not (_is_regular(entry) and _own_file(entry.path, name)):
                foreign.append(name)
        elif _TOP_TEMPORARY.fullmatch(name) and _is_regular(entry):
            continue
        elif _VERSION_DIR.fullmatch(name) and entry.is_dir(follow_symlinks=False):
            for inner in _entries(entry.path):
                if not (
                    (_CACHE_FILE.fullmatch(inner.name) or _CACHE_TEMPORARY.fullmatch(inner.name))
                    and _is_regular(inner)
                ):
                    foreign.append(f"{name}/{inner.name}")
        else:
            foreign.append(name)
    return foreign


def _is_ours(directory: Path) -> bool:
    """Whether ``directory`` carries accumlint's tag (its bytes exactly)."""
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


def locate(location: Path, protected: Iterable[Path], *, for_clean: bool = False) -> Path:
    """The directory the cache of the configured ``location`` lives in (see the module docstring);
    it may not exist yet. ``for_clean``: a tagged directory holding foreign files is accepted
    (:func:`clean` removes only accumlint's files from it). Raises :class:`CacheDirError`."""
    protected = list(protected)
    _check_location(location, protected)
    if not os.path.lexists(location) or _is_ours(location):
        candidate = location
    else:
        candidate = location / CACHE_DIR_NAME  # a folder accumlint did not make: its own inside it
        _check_location(candidate, protected)
        if os.path.lexists(candidate) and not _is_ours(candidate):
            raise CacheDirError(f"{candidate}: exists and was not made by accumlint; not used as the cache directory")
    if os.path.lexists(candidate) and not for_clean:
        try:
            foreign = foreign_entries(candidate)
        except OSError as exc:
            raise CacheDirError(f"{candidate}: cannot read the cache directory ({exc.strerror or exc})") from None
        if foreign:
            raise CacheDirError(
                f"{candidate}: holds files accumlint did not write ({foreign[0]}); not used as the cache directory"
            )
    return candidate


def create(directory: Path) -> bool:
    """Make ``directory`` accumlint's (tag and ignore file in a temporary sibling, renamed into
    place) unless it exists; True if it is accumlint's afterwards. Raises ``OSError``."""
    if os.path.lexists(directory):
        return _is_ours(directory) and not foreign_entries(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    temporary = directory.parent / f".{directory.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    os.mkdir(temporary)
    try:
        for name, data in _OWN_FILES.items():
            with open(temporary / name, "xb") as handle:
                handle.write(data)
        os.rename(temporary, directory)
    except OSError:
        _remove_own(temporary)  # a concurrent run made it first (or the disk is full)
        with contextlib.suppress(OSError):
            os.rmdir(temporary)
        return _is_ours(directory) and not foreign_entries(directory)
    return True


def _unlink(path: str) -> int:
    try:
        os.unlink(path)
    except FileNotFoundError:
        return 0
    return 1


def _remove_own(directory: Path) -> int:
    """Unlink the files accumlint wrote in ``directory``; the number removed."""
    removed = 0
    top = os.fspath(directory)
    for entry in _entries(top):
        name = entry.name
        if name in _OWN_FILES:
            if _is_regular(entry) and _own_file(entry.path, name):
                removed += _unlink(entry.path)
        elif _TOP_TEMPORARY.fullmatch(name) and _is_regular(entry):
            removed += _unlink(entry.path)
        elif _VERSION_DIR.fullmatch(name) and entry.is_dir(follow_symlinks=False):
            for inner in _entries(entry.path):
                if (_CACHE_FILE.fullmatch(inner.name) or _CACHE_TEMPORARY.fullmatch(inner.name)) and _is_regular(
                    inner
                ):
                    removed += _unlink(inner.path)
            with contextlib.suppress(OSError):  # not empty: it holds something accumlint did not write
                os.rmdir(entry.path)
    return removed


def clean(location: Path, protected: Iterable[Path]) -> tuple[Path, list[str]] | None:
    """Remove accumlint's files from the cache directory of ``location``, then the directory if
    it is empty. Returns the directory and what was kept (entries accumlint did not write), or
    None if there was no cache. Raises :class:`CacheDirError` for a location that is not a cache
    directory (:func:`locate`), ``OSError`` if a file cannot be removed."""
    directory = locate(location, protected, for_clean=True)
    if not os.path.lexists(directory):
        return None
    if not _is_ours(directory):
        raise CacheDirError(f"{directory}: not an accumlint cache (no CACHEDIR.TAG written by accumlint); not removed")
    _remove_own(directory)
    kept = foreign_entries(directory)
    if not kept and not os.path.islink(directory):  # a symlinked cache keeps its link (and the folder it names)
        os.rmdir(directory)
    return directory, kept
