"""Modules loaded on first use.

LibCST and the rules cost about a quarter of a second to import, and a run answered from the
cache, or a command that checks nothing, never needs them.

The recipe of the standard library's ``importlib.util.LazyLoader`` (Python docs, "Implementing
lazy imports"): the module object exists at once, its code runs at the first attribute access.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType


def lazy_module(name: str) -> ModuleType:
    """The module ``name``, imported now if it already was, else loaded at its first attribute
    access. Raises ``ModuleNotFoundError`` at once for a module that does not exist."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module
