"""When to print colors: ``--color auto|always|never``, ``NO_COLOR`` and ``FORCE_COLOR``.

``always`` and ``never`` win. With ``auto``: a non-empty ``NO_COLOR`` turns colors off
(https://no-color.org), else a non-empty ``FORCE_COLOR`` turns them on
(https://force-color.org), else colors go to a terminal only.
"""

from __future__ import annotations

import os
import sys

MODES = ("auto", "always", "never")


def use_color(mode: str = "auto") -> bool:
    """Whether to color the output printed on stdout in ``mode``."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    return sys.stdout.isatty()
