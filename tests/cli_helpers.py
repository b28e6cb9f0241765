"""What several CLI tests share: the command run in-process, a small real ACC001 loop, and a
spy on the project files a run reads."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner, Result

from accumlint.cli.app import main
from accumlint.run import runner

#: a real ACC001 bug with a safe fix: the gradients are reset every microbatch
ACC001_LOOP = b"""\
for i, batch in enumerate(loader):
    loss = model(batch).mean() / 4
    optimizer.zero_grad()
    loss.backward()
    if (i + 1) % 4 == 0:
        optimizer.step()
"""


def cli(*args: str) -> Result:
    """``accumlint ARGS`` in this process, stderr kept apart where click allows it."""
    try:
        return CliRunner(mix_stderr=False).invoke(main, list(args))  # type: ignore[call-arg]
    except TypeError:  # click 8.2+ always keeps stderr apart and has no such argument
        return CliRunner().invoke(main, list(args))


def cli_mixed(*args: str) -> Result:
    """``accumlint ARGS`` in this process with click's default runner (stderr mixed into ``output``
    where click mixes it)."""
    return CliRunner().invoke(main, list(args))


def check_command(*args: str) -> tuple[int, str, str]:
    """``accumlint check ARGS`` in this process: (exit code, stdout, stderr)."""
    result = cli("check", *args)
    return result.exit_code, result.stdout, result.stderr


def spy_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The base names of the files the runner reads from now on, in order."""
    read: list[str] = []
    real = runner.read_signed

    def spy(path: str, *args: int) -> tuple[bytes, int, tuple[int, int, int, int, int]]:
        read.append(os.path.basename(path))
        return real(path, *args)

    monkeypatch.setattr(runner, "read_signed", spy)
    return read
