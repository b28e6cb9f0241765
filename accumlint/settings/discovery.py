"""Which files to check: the paths given, walked for ``.py`` and ``.ipynb`` files, minus the excluded ones.

* Directories are walked for ``*.py`` files and ``*.ipynb`` notebooks. Version-control folders, virtual
  environments (also any folder holding a ``pyvenv.cfg``), build output, caches and
  ``site-packages`` are skipped (:data:`SKIP_DIRS`, :data:`SKIP_DIR_GLOBS`), as are
  directories and files matching the ``exclude`` globs (matched against the path
  relative to the project root, the absolute path and the basename, like ruff).
* A path named explicitly is never excluded (like ruff without ``--force-exclude``): an
  explicit file is checked whatever its suffix, an explicit directory is walked.
* Symlinked directories are followed when they lead out of the walked trees, once: a
  symlink into a walked tree (which the walk reaches anyway) and a directory whose real
  path was already walked are skipped, so symlink loops end. A file is listed once.
* A directory that cannot be listed (no permission, a path longer than ``PATH_MAX``) is skipped
  and ``warn(message)`` told why, naming it; the walk goes on.
* ``ignore(path, is_dir)``, when given, skips more of what a walk finds (git's ignored files:
  :mod:`accumlint.settings.gitignore`); an explicit path is never skipped by it.
* The result is sorted, so the order does not depend on the filesystem.
"""

from __future__ import annotations

import fnmatch
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from accumlint.settings.config import glob_matches

SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        ".venv",
        "venv",
        "build",
        "dist",
        "__pycache__",
        "node_modules",
        ".tox",
        ".nox",
        ".eggs",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".accumlint_cache",
        ".ipynb_checkpoints",
        "site-packages",
    }
)
SKIP_DIR_GLOBS = ("*.egg-info",)
PYTHON_SUFFIXES = (".py", ".ipynb")


class DiscoveryError(Exception):
    """A path given on the command line cannot be used (for example, it does not exist)."""


def is_skipped_dir(path: str | os.PathLike[str]) -> bool:
    """Whether a directory is one of the built-in skips (VCS, venv, build output, caches)."""
    name = os.path.basename(os.path.normpath(path))
    if name in SKIP_DIRS or any(fnmatch.fnmatchcase(name, g) for g in SKIP_DIR_GLOBS):
        return True
    return os.path.isfile(os.path.join(path, "pyvenv.cfg"))


def is_excluded(path: str | os.PathLike[str], patterns: Iterable[str], root: Path) -> bool:
    """Whether ``path`` itself matches one of the exclude globs (relative to ``root``)."""
    return any(glob_matches(path, pattern, root, ancestors=False) for pattern in patterns)


def is_force_excluded(path: str | os.PathLike[str], patterns: Iterable[str], root: Path) -> bool:
    """Whether a file named explicitly is excluded under ``--force-exclude``: the file or a
    folder above it (below ``root``) matches an exclude glob or is a built-in skip."""
    patterns = [p for p in patterns if p.strip()]
    if any(glob_matches(path, pattern, root, ancestors=True) for pattern in patterns):
        return True
    parent = Path(os.path.abspath(path)).parent
    return any(is_skipped_dir(folder) for folder in (parent, *parent.parents) if folder.is_relative_to(root))


def warn_on_stderr(message: str) -> None:
    """Print ``warning: message`` on stderr: a walk's default way to say what it skipped."""
    print(f"warning: {message}", file=sys.stderr)


def _display(path: str) -> str:
    return os.path.normpath(path)


def _inside(real: str, roots: Sequence[str]) -> bool:
    return any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _walk(
    top: str,
    real_top: str,
    patterns: Sequence[str],
    root: Path,
    roots: Sequence[str],
    seen_dirs: set[str],
    ignore: Callable[[str, bool], bool] | None = None,
    warn: Callable[[str], None] = warn_on_stderr,
) -> Iterator[tuple[str, str]]:
    """(display path, real path) of each Python file under ``top``, depth first in name order;
    ``warn`` is told of each directory that cannot be listed.

    One ``scandir`` per directory: a real path is resolved only for a symlink (elsewhere it
    is the directory's real path joined with the name), which keeps a walk over thousands of
    files from costing a path resolution each.
    """
    stack = [(top, real_top)]
    while stack:
        dirpath, real_dir = stack.pop()
        try:
            with os.scandir(dirpath) as scan:
                entries = sorted(scan, key=lambda entry: entry.name)
        except OSError as exc:  # said, as ruff does: a silently skipped folder would pass as checked
            warn(f"{_display(dirpath)}: directory not checked: {exc.strerror or exc}")
            continue
        subdirs = []
        prefix = real_dir if real_dir.endswith(os.sep) else real_dir + os.sep
        for entry in entries:
            try:
                is_dir = entry.is_dir()
                is_link = entry.is_symlink()
            except OSError:  # a symlink loop: listed if it looks like a file, so that reading it says why
                is_dir, is_link = False, True
            if is_dir:
                if is_skipped_dir(entry.path) or (patterns and is_excluded(entry.path, patterns, root)):
                    continue
                if ignore is not None and ignore(entry.path, True):
                    continue
                real = os.path.realpath(entry.path) if is_link else prefix + entry.name
                # a symlink into a tree that is walked anyway is redundant (and may be a loop);
                # any directory reached a second time is skipped
                if real in seen_dirs or (is_link and _inside(real, roots)):
                    continue
                seen_dirs.add(real)
                subdirs.append((entry.path, real))
            elif entry.name.endswith(PYTHON_SUFFIXES) and not (patterns and is_excluded(entry.path, patterns, root)):
                if ignore is not None and ignore(entry.path, False):
                    continue
                real = os.path.realpath(entry.path) if is_link else prefix + entry.name
                yield _display(entry.path), real
        stack.extend(reversed(subdirs))


def discover(
    paths: Sequence[str | os.PathLike[str]],
    *,
    exclude: Sequence[str] = (),
    root: str | os.PathLike[str] | None = None,
    ignore: Callable[[str, bool], bool] | None = None,
    warn: Callable[[str], None] = warn_on_stderr,
) -> list[str]:
    """The files to check under ``paths``, as sorted display paths.

    ``exclude`` globs are relative to ``root`` (default: the current directory); ``ignore(path,
    is_dir)`` skips more of what the walk finds (not the paths given); ``warn(message)`` is told
    of each directory that cannot be listed (default: a ``warning:`` line on stderr).
    Raises :class:`DiscoveryError` if a path does not exist.
    """
    project_root = Path(os.path.abspath(root if root is not None else os.getcwd()))
    patterns = [p for p in exclude if p.strip()]
    for path in paths:
        if not os.path.lexists(path):
            raise DiscoveryError(f"{os.fspath(path)}: path does not exist")
    found: dict[str, str] = {}  # real path -> display path (first route wins)
    seen_dirs: set[str] = set()
    roots = [os.path.realpath(p) for p in paths if os.path.isdir(p)]

    for path in paths:
        path = os.fspath(path)
        if os.path.isdir(path):
            real = os.path.realpath(path)
            if real in seen_dirs:
                continue
            seen_dirs.add(real)
            for display, real_file in _walk(path, real, patterns, project_root, roots, seen_dirs, ignore, warn):
                found.setdefault(real_file, display)
        else:  # a file (or a dangling symlink: reading it reports the reason)
            found.setdefault(os.path.realpath(path), _display(path))
    return sorted(set(found.values()))
