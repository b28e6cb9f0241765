"""What several CLI tests share: the command run in-process, and a small real ACC001 loop."""

from __future__ import annotations

from click.testing import CliRunner, Result

from accumlint.cli import main

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
