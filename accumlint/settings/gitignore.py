"""What git ignores, so that directory walks skip it (``respect-gitignore``, on by default, as in ruff).

Inside a git work tree (a folder holding ``.git``), a path is ignored when the last pattern
that matches it, in git's order of precedence, is not a negation: the global excludes file
(``core.excludesFile``, else ``$XDG_CONFIG_HOME/git/ignore`` or ``~/.config/git/ignore``), then
``.git/info/exclude``, then the ``.gitignore`` of each folder from the work tree's root down
to the path's own. A path below an ignored folder is ignored. Outside a work tree nothing is.
Patterns are matched with ``pathspec``'s ``GitIgnoreSpec`` (git's wildmatch rules).
An ignore file is a clone's content: one that is not a regular file (a FIFO, a link to
``/dev/zero``), larger than :data:`~accumlint.files.reading.MAX_CONFIG_BYTES` or unreadable is not
used, with a warning, rather than read without end.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from accumlint.files.reading import FileTooLarge, NotARegularFile, read_bounded_text, why_unread
from accumlint.settings.discovery import warn_on_stderr

if TYPE_CHECKING:
    from pathspec import GitIgnoreSpec


def _read_lines(path: Path, warn: Callable[[str], None]) -> list[str] | None:
    """The lines of an ignore file; None where there is none, or (with a warning) where it cannot be used."""
    try:
        return read_bounded_text(path, errors="surrogateescape").splitlines()
    except (FileNotFoundError, NotADirectoryError):  # no such file: the usual case
        return None
    except (OSError, NotARegularFile, FileTooLarge) as exc:
        shown = os.path.relpath(path)
        warn(f"{path if shown.startswith('..') else shown}: ignore file not used: {why_unread(exc)}")
        return None


@functools.cache
def _global_excludes_file() -> Path | None:
    """git's global excludes file (``git config core.excludesFile``, else the XDG default)."""
    try:
        configured = subprocess.run(
            ["git", "config", "--global", "--get", "core.excludesFile"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        configured = ""
    if configured:
        return Path(os.path.expanduser(configured))
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "git" / "ignore"


class _Source:
    """One ignore file's patterns and the folder they are relative to; ``any_match`` tests all
    patterns in one regular expression first (most paths match none of them)."""

    def __init__(self, spec: GitIgnoreSpec, base: str) -> None:
        self.spec = spec
        self.prefix = base.rstrip(os.sep) + os.sep
        parts = [p.regex.pattern.replace("(?P<ps_d>", "(?:") for p in spec.patterns if p.regex is not None]
        try:
            self.any_match = re.compile("|".join(f"(?:{part})" for part in parts)) if parts else None
        except re.error:  # patterns that do not combine: every path goes to pathspec itself
            self.any_match = re.compile("")

    def verdict(self, path: str, is_dir: bool) -> bool | None:
        """True: ignored, False: re-included (``!pattern``), None: no pattern matches."""
        if self.any_match is None or not path.startswith(self.prefix):
            return None
        name = path[len(self.prefix) :].replace(os.sep, "/") + ("/" if is_dir else "")
        if self.any_match.match(name) is None:
            return None
        return self.spec.check_file(name).include


class GitIgnore:
    """Answers "does git ignore this path?" for the paths of a walk (files read once, cached).

    ``warn(message)`` is told of each ignore file that cannot be used (default: a ``warning:``
    line on stderr)."""

    def __init__(self, warn: Callable[[str], None] = warn_on_stderr) -> None:
        self._warn = warn
        self._roots: dict[str, str | None] = {}
        self._files: dict[str, _Source | None] = {}
        self._chains: dict[str, tuple[_Source, ...]] = {}

    def _work_tree(self, folder: str) -> str | None:
        if folder not in self._roots:
            if os.path.exists(os.path.join(folder, ".git")):
                self._roots[folder] = folder
            else:
                parent = os.path.dirname(folder)
                self._roots[folder] = None if parent == folder else self._work_tree(parent)
        return self._roots[folder]

    def _source(self, file: str | os.PathLike[str], base: str) -> _Source | None:
        key = os.fspath(file)
        if key not in self._files:
            lines = _read_lines(Path(key), self._warn)
            self._files[key] = None
            if lines:
                from pathspec import GitIgnoreSpec  # loaded only where an ignore file has patterns

                self._files[key] = _Source(GitIgnoreSpec.from_lines(lines), base)
        return self._files[key]

    def _chain(self, folder: str, root: str) -> tuple[_Source, ...]:
        """The ignore files that apply to the entries of ``folder``, in git's order of precedence."""
        if folder not in self._chains:
            if folder == root:
                excludes = _global_excludes_file()
                sources = [
                    self._source(excludes, root) if excludes is not None else None,
                    self._source(os.path.join(root, ".git", "info", "exclude"), root),
                ]
                chain = tuple(s for s in sources if s is not None)
            else:
                chain = self._chain(os.path.dirname(folder), root)
            own = self._source(os.path.join(folder, ".gitignore"), folder)
            self._chains[folder] = (*chain, own) if own is not None else chain
        return self._chains[folder]

    def _verdict(self, path: str, root: str, is_dir: bool) -> bool:
        """Whether the patterns that apply to ``path`` itself (not its folders) ignore it."""
        ignored = False
        for source in self._chain(os.path.dirname(path), root):
            verdict = source.verdict(path, is_dir)
            if verdict is not None:
                ignored = verdict
        return ignored

    def ignored(self, path: str | os.PathLike[str], is_dir: bool | None = None) -> bool:
        """Whether git ignores ``path`` or a folder above it inside its work tree."""
        absolute = os.path.abspath(path)
        root = self._work_tree(os.path.dirname(absolute))
        if root is None or absolute == root or ".git" in Path(os.path.relpath(absolute, root)).parts:
            return False
        if is_dir is None:
            is_dir = os.path.isdir(absolute)
        current, current_is_dir = absolute, is_dir
        while current != root:
            if self._verdict(current, root, current_is_dir):
                return True
            current, current_is_dir = os.path.dirname(current), True
        return False

    def ignored_in_walk(self, path: str | os.PathLike[str], is_dir: bool) -> bool:
        """Like :meth:`ignored` for a walk that already skipped the ignored folders above ``path``."""
        absolute = os.path.abspath(path)
        root = self._work_tree(os.path.dirname(absolute))
        if root is None or absolute == root:
            return False
        return self._verdict(absolute, root, is_dir)
