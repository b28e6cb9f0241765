"""The pre-commit hook (``.pre-commit-hooks.yaml``) run by the real ``pre-commit`` tool.

A temporary git repository uses a snapshot of this checkout as its hook source, the way a
user's ``.pre-commit-config.yaml`` points at the accumlint repository: ``pre-commit
install``, then ``git commit`` of a buggy training script is blocked and a correct one
goes through. The hook environment is installed from the package index; when that is not
possible (offline), the test is skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.shared_data import REPO

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


def _readme_hook_lines() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("### pre-commit", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    lines = block.splitlines(keepends=True)
    assert lines[1].strip() == "- repo: https://github.com/accumlint/accumlint"
    assert lines[2].strip().startswith("rev: ")
    return lines


def readme_pinned_rev() -> str:
    """The release tag the README's pre-commit ``rev:`` pins (``v<__version__>``, test_release)."""
    return _readme_hook_lines()[2].split("rev:", 1)[1].strip()


def readme_hook_config(repo: Path, rev: str | None = None) -> str:
    """The README's ``.pre-commit-config.yaml`` as written, pointed at ``repo`` (a snapshot of this
    checkout) instead of the public repository, and at ``rev`` instead of its tag where given."""
    lines = _readme_hook_lines()
    lines[1] = f"  - repo: {repo}\n"
    if rev is not None:
        lines[2] = f"    rev: {rev}\n"
    return "".join(lines)


@pytest.fixture(scope="module")
def hook_source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A snapshot of this checkout as a hook repository: (its folder's parent, its HEAD)."""
    _pre_commit()
    base = tmp_path_factory.mktemp("precommit")
    head = _hook_source(base / "accumlint-src")
    # the snapshot is this checkout's release: the README's pinned tag names it, as on the public repository
    _git(base / "accumlint-src", "tag", readme_pinned_rev(), head)
    return base, head


@pytest.fixture(scope="module")
def hooked_repo(hook_source: tuple[Path, str]) -> tuple[Path, dict[str, str], list[str]]:
    """A fresh user repository with the accumlint hook installed (``pre-commit install``)."""
    pre_commit = _pre_commit()
    base, rev = hook_source
    user = base / "user"
    user.mkdir()
    env = _env(base / "home")
    _git(user, "init", "-q")
    (user / ".pre-commit-config.yaml").write_text(readme_hook_config(base / "accumlint-src", rev), encoding="utf-8")
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
    assert "train.py:33:13: ACC001 [*] [error]" in out
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


def _adoption_commands() -> list[str]:
    """The command lines of the README's "Adopting accumlint on an existing repository" section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    after = text.split("### Adopting accumlint on an existing repository\n", 1)[1]
    section = re.split(r"\n#{2,3} ", after, maxsplit=1)[0]  # to the next heading (a `# comment` in a block is none)
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_adopting_on_a_repository_with_50_findings_as_the_readme_says(
    hook_source: tuple[Path, str], hooked_repo: tuple[Path, dict[str, str], list[str]]
) -> None:
    """The README's adoption steps, as written, on a repository with 50 findings: the baseline
    commit passes the hook, the next commit that adds a bug is refused."""
    base, rev = hook_source
    _, env, _ = hooked_repo  # the hook environment is installed (PRE_COMMIT_HOME shared)
    env = {**env, "PATH": os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])}
    user = base / "adopt"
    user.mkdir()
    _git(user, "init", "-q")
    total = 0
    for number, example in enumerate(sorted(REPO.glob("rules/*/bad_*.py"))):
        listed = subprocess.run(
            [sys.executable, "-m", "accumlint", "check", "--no-cache", "--output-format", "json-lines", str(example)],
            capture_output=True,
            text=True,
            env=env,
        ).stdout
        found = len(listed.splitlines())  # one finding per line
        if found and total + found <= 50:
            shutil.copy(example, user / f"train_{number:02d}.py")
            total += found
    assert total == 50
    subprocess.run(["git", "add", "-A"], cwd=user, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "existing code"], cwd=user, env=env, check=True)
    (user / ".pre-commit-config.yaml").write_text(readme_hook_config(base / "accumlint-src", rev), encoding="utf-8")

    statuses = []
    for command in _adoption_commands():
        done = subprocess.run(["bash", "-c", command], cwd=user, env=env, capture_output=True, text=True, timeout=600)
        statuses.append((command, done.returncode, done.stdout + done.stderr))
    by_command = {command: (status, out) for command, status, out in statuses}
    assert "accumlint check --add-noqa ." in by_command
    status, out = by_command["accumlint check --add-noqa ."]
    assert status == 0 and "noqa directive" in out, out
    status, out = by_command["pre-commit run --all-files"]
    assert status == 0 and "Passed" in out, out
    committed = [c for c in by_command if c.startswith("git ") and "commit" in c]
    assert committed and by_command[committed[0]][0] == 0, by_command[committed[0]][1]
    status_after = subprocess.run(["git", "status", "--porcelain"], cwd=user, env=env, capture_output=True, text=True)
    assert status_after.stdout == ""  # everything committed, nothing edited by hand

    new_bug = _commit(user, env, "new_train.py", RULE / "bad_zero_grad_top_of_loop.py")
    assert new_bug.returncode == 1, new_bug.stdout + new_bug.stderr
    assert "new_train.py:33:13: ACC001" in new_bug.stdout + new_bug.stderr


def test_the_pinned_tag_judges_a_sub_project_by_its_own_extended_config(
    hook_source: tuple[Path, str], hooked_repo: tuple[Path, dict[str, str], list[str]]
) -> None:
    """The README's hook at its pinned tag, unchanged, in a repository whose sub-project extends
    the root's configuration and ignores ACC001 (issue 34: the old pin applied the root's
    configuration to every file the hook names): the sub-project's ACC001 passes, the same code
    at the root is refused."""
    base, _ = hook_source
    _, env, pre_commit = hooked_repo
    user = base / "subprojects"
    trainer = user / "services" / "trainer"
    trainer.mkdir(parents=True)
    _git(user, "init", "-q")
    (user / "pyproject.toml").write_text('[tool.accumlint]\nextend-select = ["ACC990"]\n', encoding="utf-8")
    (trainer / "pyproject.toml").write_text(
        '[tool.accumlint]\nextend = "../../pyproject.toml"\nignore = ["ACC001"]\n', encoding="utf-8")
    (user / ".pre-commit-config.yaml").write_text(readme_hook_config(base / "accumlint-src"), encoding="utf-8")
    assert f"rev: {readme_pinned_rev()}\n" in (user / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    subprocess.run([*pre_commit, "install"], cwd=user, env=env, capture_output=True, text=True, check=True)
    subprocess.run(["git", "add", "-A"], cwd=user, env=env, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "configs"], cwd=user, env=env, check=True, timeout=300)

    # the hook is handed both files at once: each is judged by its own nearest configuration
    shutil.copy(RULE / "bad_zero_grad_top_of_loop.py", user / "train.py")
    shutil.copy(RULE / "bad_zero_grad_top_of_loop.py", trainer / "train.py")
    subprocess.run(["git", "add", "services/trainer/train.py"], cwd=user, env=env, check=True)
    both = _commit(user, env, "train.py", RULE / "bad_zero_grad_top_of_loop.py")
    out = both.stdout + both.stderr
    assert both.returncode == 1, out
    assert "train.py:33:13: ACC001 [*] [error]" in out and "services/" not in out
    assert "Found 1 finding." in out
    subprocess.run(["git", "rm", "-q", "--cached", "train.py"], cwd=user, env=env, check=True)
    sub = _commit(user, env, "services/trainer/train.py", RULE / "bad_zero_grad_top_of_loop.py")
    assert sub.returncode == 0, sub.stdout + sub.stderr
