"""The project a checked file belongs to: its other modules, found by import name.

A call of an imported project function, or a method of an imported project class, is so
followed like a call of the file's own helpers.

- :func:`find_root`: the folder of the nearest ``pyproject.toml`` / ``setup.py`` /
  ``setup.cfg`` above a file, else the folder the run was started on.
- :class:`ProjectIndex`: module name ↔ path for the roots (``src/`` layouts, packages,
  namespace packages, a script's own folder as ``sys.path[0]``, relative imports), the
  modules' LibCST trees loaded on demand (at most 32 trees and 256 KiB of
  sources per process; modules over 128 KiB are not followed), the names a module defines whose code
  performs a backward (for the prefilter), and the files each result depends on (for the
  cache: editing ``utils.py`` re-checks ``train.py``).

Bad input stays bad input: a module that cannot be read or parsed is not found (the call
stays unresolved: unknown, never wrong); an import cycle or a class hierarchy with a cycle
is cut by the walker's recursion and depth limits; the number of loaded trees is bounded.
"""

from __future__ import annotations

from accumlint.project.index import (
    MAX_LOADED,
    ProjectIndex,
    ProjectView,
    find_root,
)

__all__ = ["MAX_LOADED", "ProjectIndex", "ProjectView", "find_root"]
