"""What git ignores, so that directory walks skip it (``respect-gitignore``, on by default, as in ruff).

Inside a git work tree (a folder holding ``.git``), a path is ignored when the last pattern
that matches it, in git's order of precedence, is not a negation: the global excludes file
(``core.excludesFile``, else ``$XDG_CONFIG_HOME/git/ignore`` or ``~/.config/git/ignore``), then
``.git/info/exclude``, then the ``.gitignore`` of each folder from the work tree's root down
to the path's own. A path below an ignored folder is ignored. Outside a work tree nothing is.
Patterns are matched with ``pathspec``'s ``GitIgnoreSpec`` (git's wildmatch rules).
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

from pathspec import GitIgnoreSpec


def _read_lines(path: Path) -> list[str] | None:
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape").splitlines()
    except OSError:
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


class GitIgnore:
    """Answers "does git ignore this path?" for the paths of a walk (files read once, cached)."""

    def __init__(self) -> None:
        self._roots: dict[Path, Path | None] = {}
        self._specs: dict[Path, GitIgnoreSpec | None] = {}

    def _work_tree(self, folder: Path) -> Path | None:
        if folder not in self._roots:
            if (folder / ".git").exists():
                self._roots[folder] = folder
            else:
                parent = folder.parent
                self._roots[folder] = None if parent == folder else self._work_tree(parent)
        return self._roots[folder]

    def _spec(self, source: Path) -> GitIgnoreSpec | None:
        if source not in self._specs:
            lines = _read_lines(source)
            self._specs[source] = GitIgnoreSpec.from_lines(lines) if lines else None
        return self._specs[source]

    def _verdict(self, path: Path, root: Path, is_dir: bool) -> bool:
        """Whether the patterns that apply to ``path`` itself (not its folders) ignore it."""
        relative = path.relative_to(root)
        sources: list[tuple[Path, Path]] = []
        excludes = _global_excludes_file()
        if excludes is not None:
            sources.append((excludes, root))
        sources.append((root / ".git" / "info" / "exclude", root))
        folder = root
        for part in relative.parts[:-1]:
            sources.append((folder / ".gitignore", folder))
            folder = folder / part
        sources.append((folder / ".gitignore", folder))
        ignored = False
        for source, base in sources:
            spec = self._spec(source)
            if spec is None:
                continue
            name = path.relative_to(base).as_posix() + ("/" if is_dir else "")
            result = spec.check_file(name)
            if result.include is not None:
                ignored = result.include
        return ignored

    def ignored(self, path: str | os.PathLike[str], is_dir: bool | None = None) -> bool:
        """Whether git ignores ``path`` or a folder above it inside its work tree."""
        absolute = Path(os.path.abspath(path))
        root = self._work_tree(absolute.parent)
        if root is None or absolute == root or ".git" in absolute.relative_to(root).parts:
            return False
        if is_dir is None:
            is_dir = absolute.is_dir()
        current, current_is_dir = absolute, is_dir
        while current != root:
            if self._verdict(current, root, current_is_dir):
                return True
            current, current_is_dir = current.parent, True
        return False

    def ignored_in_walk(self, path: str | os.PathLike[str], is_dir: bool) -> bool:
        """Like :meth:`ignored` for a walk that already skipped the ignored folders above ``path``."""
        absolute = Path(os.path.abspath(path))
        root = self._work_tree(absolute.parent)
        if root is None or absolute == root:
            return False
        return self._verdict(absolute, root, is_dir)
