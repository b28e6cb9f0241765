"""The pre-commit hook (``.pre-commit-hooks.yaml``) run by the real ``pre-commit`` tool.

A temporary git repository uses a snapshot of this checkout as its hook source, the way a
user's ``.pre-commit-config.yaml`` points at the accumlint repository: ``pre-commit
install``, then ``git commit`` of a buggy training script is blocked and a correct one
goes through. The hook environment is installed from the package index; when that is not
possible (offline), the test is skipped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RULE = REPO / "rules" / "ACC001-zero-grad-inside-group"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _pre_commit() -> list[str]:
    exe = shutil.which("pre-commit", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    if exe is None:
        pytest.skip("pre-commit is not installed (pip install -e '.[dev]')")
    return [exe]


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "PRE_COMMIT"))}
    env.update(
        PRE_COMMIT_HOME=str(home),
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
        NO_COLOR="1",
    )
    env.pop("PYTHONPATH", None)  # the hook must run the accumlint installed in its own environment
    return env


def _hook_source(dest: Path) -> str:
    """A git repository holding this checkout's files (tracked and new), committed; returns its HEAD."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    dest.mkdir()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "snapshot")
    return _git(dest, "rev-parse", "HEAD").stdout.strip()


@pytest.fixture(scope="module")
def hooked_repo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], list[str]]:
    """A fresh user repository with the accumlint hook installed (``pre-commit install``)."""
    pre_commit = _pre_commit()
    base = tmp_path_factory.mktemp("precommit")
    rev = _hook_source(base / "accumlint-src")
    user = base / "user"
    user.mkdir()
    env = _env(base / "home")
    _git(user, "init", "-q")
    (user / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {base / 'accumlint-src'}\n    rev: {rev}\n    hooks:\n      - id: accumlint\n",
        encoding="utf-8",
    )
    subprocess.run([*pre_commit, "install"], cwd=user, env=env, capture_output=True, text=True, check=True)
    # install the hook environment now, so that a failure to reach the package index skips
    installed = subprocess.run(
        [*pre_commit, "install-hooks"], cwd=user, env=env, capture_output=True, text=True, timeout=600
    )
    if installed.returncode != 0:
        pytest.skip(f"pre-commit could not install the hook environment (offline?): {installed.stdout[-500:]}")
    return user, env, pre_commit


def _commit(user: Path, env: dict[str, str], name: str, source: Path) -> subprocess.CompletedProcess[str]:
    shutil.copy(source, user / name)
    subprocess.run(["git", "add", name, ".pre-commit-config.yaml"], cwd=user, env=env, check=True)
    return subprocess.run(
        ["git", "commit", "-m", f"add {name}"], cwd=user, env=env, capture_output=True, text=True, timeout=300
    )


def test_hook_blocks_a_buggy_commit_and_passes_a_correct_one(
    hooked_repo: tuple[Path, dict[str, str], list[str]],
) -> None:
    user, env, _ = hooked_repo
    bad = _commit(user, env, "train.py", RULE / "bad_zero_grad_top_of_loop.py")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 1, out
    assert "accumlint" in out and "Failed" in out
    assert "train.py:33:13: ACC001 [error]" in out
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", "HEAD"], cwd=user, env=env).returncode != 0

    subprocess.run(["git", "rm", "-q", "--cached", "train.py"], cwd=user, env=env, check=True)
    good = _commit(user, env, "train_fixed.py", RULE / "good_zero_grad_top_of_loop.py")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "accumlint" in good.stderr and "Passed" in good.stderr
    log = subprocess.run(["git", "log", "--format=%s"], cwd=user, env=env, capture_output=True, text=True)
    assert log.stdout.splitlines() == ["add train_fixed.py"]


def test_hook_environment_has_no_torch(hooked_repo: tuple[Path, dict[str, str], list[str]]) -> None:
    _, env, _ = hooked_repo
    home = Path(env["PRE_COMMIT_HOME"])
    site_packages = [p for p in home.glob("repo*/py_env-*/lib/python*/site-packages")] + [
        p for p in home.glob("repo*/py_env-*/Lib/site-packages")
    ]
    assert site_packages, "no hook environment found"
    installed = {p.name.split("-")[0].lower() for sp in site_packages for p in sp.iterdir()}
    assert "accumlint" in installed and "libcst" in installed
    assert "torch" not in installed


def test_hook_definition() -> None:
    text = (REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    assert "- id: accumlint\n" in text
    assert "entry: accumlint check --force-exclude\n" in text
    assert "types_or: [python, jupyter]\n" in text
    assert "require_serial: false\n" in text
