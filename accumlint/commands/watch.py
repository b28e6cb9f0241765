"""``accumlint check --watch``: check, then check again whenever a watched file changes (ruff's ``--watch``).

The loop (:func:`watch`) takes the run and the stream of changes as arguments, so that a test
drives it with a list of changes; :func:`file_changes` is the real stream, from the
`watchfiles <https://watchfiles.helpmanual.io/>`_ package (the ``watch`` extra), which waits on
the operating system's file events instead of polling.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

#: the files whose change re-runs the check: sources, notebooks and the configuration
WATCHED_SUFFIXES = (".py", ".pyi", ".ipynb", ".toml")
#: how the missing extra is named in the error (the package is installed from a clone or a git URL)
INSTALL_HINT = "pip install watchfiles (or the `watch` extra: pip install -e '.[watch]' in a clone)"


class WatchUnavailable(Exception):
    """``--watch`` cannot run here: the ``watchfiles`` package is not installed."""


def watched(paths: Iterable[str]) -> list[str]:
    """The paths among ``paths`` whose change re-runs the check (:data:`WATCHED_SUFFIXES`), in order."""
    return [path for path in paths if path.endswith(WATCHED_SUFFIXES)]


def file_changes(targets: Sequence[str]) -> Iterator[list[str]]:
    """Each batch of changed paths (absolute) under ``targets`` (files or folders, watched
    recursively) that :func:`watched` keeps, as the file system reports them; never ends.
    Raises :class:`WatchUnavailable` when ``watchfiles`` is not installed."""
    try:
        import watchfiles
    except ImportError:  # raised here, before the first run, not at the first change
        raise WatchUnavailable(f"--watch needs the watchfiles package: {INSTALL_HINT}") from None

    def keep(_change: object, path: str) -> bool:
        return bool(watched([path]))

    def batches() -> Iterator[list[str]]:
        for batch in watchfiles.watch(*(os.path.abspath(t) for t in targets), watch_filter=keep):
            yield sorted({path for _change, path in batch})

    return batches()


def _stamp(message: str) -> str:
    return f"[{time.strftime('%H:%M:%S')}] {message}"


def rerun_on(batch: Iterable[str], run: Callable[[], int], echo: Callable[[str], None],
             clear: Callable[[], None]) -> bool:
    """One step of the loop: where ``batch`` (changed paths) holds a watched file, clear the
    screen, say so and run the check again. Returns whether it ran."""
    if not watched(batch):
        return False
    clear()
    echo(_stamp("File change detected..."))
    run()
    echo(_stamp("Watching for file changes."))
    return True


def watch(run: Callable[[], int], changes: Iterable[Iterable[str]], echo: Callable[[str], None],
          clear: Callable[[], None]) -> int:
    """Run the check (``run``: one whole ``check``, returning its exit status), then again after
    each batch of ``changes`` that holds a watched file, until ``changes`` ends or the user
    presses Ctrl-C. Returns 0: a watch that is stopped has not failed (ruff's exit status)."""
    try:
        clear()
        echo(_stamp("Starting linter in watch mode..."))
        run()
        echo(_stamp("Watching for file changes."))
        for batch in changes:
            rerun_on(batch, run, echo, clear)
    except KeyboardInterrupt:
        pass
    return 0
