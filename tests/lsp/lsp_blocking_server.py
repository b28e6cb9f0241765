"""``accumlint server`` whose analyses block where a document asks them to (tests/lsp/test_lsp.py).

    python -m tests.lsp.lsp_blocking_server SIGNALS

The server of :func:`accumlint.lsp.server.serve`, except that in the worker process a check of
a text holding ``# block-check``, or a fix verification of one holding ``# block-verify``,
first creates ``SIGNALS/check-started`` (``verify-started``), then waits until
``SIGNALS/release`` exists (two minutes at most): a slow analysis the test controls. The
worker is the real one (forked, bounded, killed when the work is cancelled).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from accumlint.lsp import server
from accumlint.pipeline.run_context import RunContext
from accumlint.run import runner, suggested_fixes

SIGNALS = Path(sys.argv[1]) if __name__ == "__main__" else Path()
_check_safely = runner._check_safely
_verify = suggested_fixes.verify


def _block(kind: str, data: bytes) -> None:
    """Wait for the release if ``data`` holds ``# block-<kind>``."""
    if f"# block-{kind}".encode() not in data:
        return
    (SIGNALS / f"{kind}-started").touch()
    deadline = time.monotonic() + 120
    while not (SIGNALS / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.01)


def _blocking_check(path: str, data: bytes, codes: frozenset[str], *, context: RunContext):  # type: ignore[no-untyped-def]
    _block("check", data)
    return _check_safely(path, data, codes, context=context)


def _blocking_verify(path: str, data: bytes, *args: object, context: RunContext):  # type: ignore[no-untyped-def]
    _block("verify", data)
    return _verify(path, data, *args, context=context)  # type: ignore[arg-type]


if __name__ == "__main__":
    runner._check_safely = _blocking_check
    suggested_fixes.verify = _blocking_verify
    server.serve()
