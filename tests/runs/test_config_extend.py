"""``extend = "..."`` in ``[tool.accumlint]``: a sub-project inherits a base configuration (ruff's ``extend``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from accumlint.settings import config
from accumlint.settings.config import ConfigError
from accumlint.settings.hierarchy import Resolver
from tests.cli_helpers import ACC001_LOOP, cli
from tests.support import write

BASE = """\
[tool.accumlint]
select = ["ACC0", "ACC3"]
ignore = ["ACC002"]
extend-exclude = ["gen/*.py"]
per-file-ignores = {"tests/*" = ["ACC001"]}
parse-timeout = 3
cache-dir = ".base-cache"
"""


def test_the_keys_a_sub_project_does_not_set_are_the_bases(tmp_path: Path) -> None:
    base = write(tmp_path / "pyproject.toml", BASE)
    sub = write(tmp_path / "sub" / "pyproject.toml",
                '[tool.accumlint]\nextend = "../pyproject.toml"\nparse-timeout = 7\nextend-exclude = ["vendored"]\n')
    settings = config.load_settings(sub)
    assert settings.project_root == sub.parent and settings.config_path == sub
    assert settings.extends == (base,)
    assert settings.parse_timeout == 7.0  # its own key replaces the base's
    assert settings.cache_dir == tmp_path / ".base-cache"  # relative to the base's folder
    # the base's globs stay anchored at the base's folder; a bare name matches anywhere
    assert settings.extend_exclude == [(tmp_path / "gen/*.py").as_posix(), "vendored"]
    assert settings.per_file_ignores == {(tmp_path / "tests/*").as_posix(): ["ACC001"]}
    assert config.per_file_ignored(tmp_path / "tests" / "t.py", settings) == ["ACC001"]
    assert config.per_file_ignored(sub.parent / "tests" / "t.py", settings) == []
    assert settings.sources["parse-timeout"] == (sub,)
    assert settings.sources["select"] == (base,)
    assert settings.sources["extend-exclude"] == (base, sub)


def test_the_sub_projects_selection_applies_after_the_bases(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", BASE)
    sub = write(tmp_path / "sub" / "pyproject.toml",
                '[tool.accumlint]\nextend = "../pyproject.toml"\nignore = ["ACC001"]\n')
    enabled = Resolver().enabled(config.load_settings(sub))
    assert "ACC001" not in enabled and "ACC002" not in enabled  # both files' ignores hold
    assert "ACC003" in enabled and "ACC301" in enabled  # the base's select carries over
    assert not any(code.startswith(("ACC1", "ACC2")) for code in enabled)
    own_select = write(tmp_path / "own" / "pyproject.toml",
                       '[tool.accumlint]\nextend = "../pyproject.toml"\nselect = ["ACC002"]\n')
    settings = config.load_settings(own_select)
    assert Resolver().enabled(settings) == {"ACC000", "ACC002"}  # its own select starts afresh
    assert "ignore" not in settings.sources


def test_an_extended_accumlint_toml_gives_its_top_level_keys_and_chains(tmp_path: Path) -> None:
    shared = write(tmp_path / "conf" / ".accumlint.toml", 'noqa-style = "accumlint"\nextend = "../pyproject.toml"\n')
    base = write(tmp_path / "pyproject.toml", BASE)
    sub = write(tmp_path / "a" / "b" / "pyproject.toml", '[tool.accumlint]\nextend = "../../conf/.accumlint.toml"\n')
    settings = config.load_settings(sub)
    assert settings.extends == (shared, base)
    assert settings.noqa_style == "accumlint" and settings.parse_timeout == 3.0
    assert settings.sources["noqa-style"] == (shared,) and settings.sources["parse-timeout"] == (base,)


def test_extend_expands_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    write(tmp_path / "home" / "lint" / "pyproject.toml", '[tool.accumlint]\nparse-timeout = 5\n')
    sub = write(tmp_path / "p" / "pyproject.toml", '[tool.accumlint]\nextend = "~/lint/pyproject.toml"\n')
    assert config.load_settings(sub).parse_timeout == 5.0


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"pyproject.toml": 'extend = "pyproject.toml"'}, "extend each other in a cycle: {0}/pyproject.toml -> "
                                                           "{0}/pyproject.toml"),
        ({"pyproject.toml": 'extend = "b/pyproject.toml"', "b/pyproject.toml": 'extend = "../pyproject.toml"'},
         "cycle: {0}/pyproject.toml -> {0}/b/pyproject.toml -> {0}/pyproject.toml"),
        ({"pyproject.toml": 'extend = "missing.toml"'}, "{0}/pyproject.toml: [tool.accumlint] extend: "
                                                        "{0}/missing.toml does not exist"),
        ({"pyproject.toml": 'extend = "b/pyproject.toml"', "b/pyproject.toml": None},
         "{0}/b/pyproject.toml: no [tool.accumlint] table to extend"),
        ({"pyproject.toml": "extend = 3"}, "extend: expected the path of a configuration file, got 3"),
        ({"pyproject.toml": 'extend = "b/pyproject.toml"', "b/pyproject.toml": 'select = ["NOPE"]'},
         "{0}/b/pyproject.toml: [tool.accumlint] select: unknown rule selector 'NOPE'"),
    ],
    ids=["itself", "two-files", "missing", "no-table", "not-a-path", "bad-base"],
)
def test_a_broken_extend_is_a_one_line_error(tmp_path: Path, files: dict[str, str | None], expected: str) -> None:
    for name, body in files.items():
        write(tmp_path / name, '[project]\nname = "x"\n' if body is None else f"[tool.accumlint]\n{body}\n")
    with pytest.raises(ConfigError) as info:
        config.load_settings(tmp_path / "pyproject.toml")
    assert "\n" not in str(info.value)
    assert expected.format(tmp_path) in str(info.value)


def test_a_cycle_through_a_link_is_found(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.accumlint]\nextend = "link.toml"\n')
    os.symlink(tmp_path / "pyproject.toml", tmp_path / "link.toml")
    with pytest.raises(ConfigError, match="cycle"):
        config.load_settings(tmp_path / "pyproject.toml")


def test_check_on_a_sub_project_uses_the_inherited_selection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pyproject.toml", '[tool.accumlint]\nignore = ["ACC001"]\n')
    write(tmp_path / "sub" / "pyproject.toml", '[tool.accumlint]\nextend = "../pyproject.toml"\nparse-timeout = 0\n')
    (tmp_path / "sub" / "train.py").write_bytes(ACC001_LOOP)
    monkeypatch.chdir(tmp_path)
    result = cli("check", "--no-cache", "sub/train.py")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    assert "ACC001" not in result.stdout
    write(tmp_path / "sub" / "pyproject.toml", "[tool.accumlint]\nparse-timeout = 0\n")  # no extend: ACC001 again
    assert "ACC001" in cli("check", "--no-cache", "sub/train.py").stdout


def test_a_cycle_stops_the_run_with_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pyproject.toml", '[tool.accumlint]\nextend = "sub/pyproject.toml"\n')
    write(tmp_path / "sub" / "pyproject.toml", '[tool.accumlint]\nextend = "../pyproject.toml"\n')
    (tmp_path / "train.py").write_bytes(ACC001_LOOP)
    monkeypatch.chdir(tmp_path)
    result = cli("check", "--no-cache", "train.py")
    assert result.exit_code == 2
    assert "extend each other in a cycle" in result.stderr and result.stdout == ""


def test_show_settings_names_the_extended_files_and_what_each_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = write(tmp_path / "pyproject.toml", BASE)
    write(tmp_path / "sub" / "pyproject.toml", '[tool.accumlint]\nextend = "../pyproject.toml"\nignore = ["ACC001"]\n')
    monkeypatch.chdir(tmp_path / "sub")
    result = cli("check", "--show-settings", ".")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == f"# extends: {base}"
    assert lines[2] == f"# from {base}: cache-dir, extend-exclude, ignore, parse-timeout, per-file-ignores, select"
    assert "parse-timeout = 3" in lines


def test_a_bases_folder_glob_excludes_below_the_sub_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sub/generated`` in the base names a folder of the sub-project: the walk skips it, and so
    does ``--force-exclude`` for a file named in it (the glob matches the file's absolute folders)."""
    write(tmp_path / "pyproject.toml",
          '[tool.accumlint]\nextend-exclude = ["sub/generated"]\nper-file-ignores = {"sub/legacy" = ["ACC001"]}\n')
    write(tmp_path / "sub" / "pyproject.toml", '[tool.accumlint]\nextend = "../pyproject.toml"\n')
    for name in ("generated/a.py", "legacy/b.py", "c.py"):
        (tmp_path / "sub" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "sub" / name).write_bytes(ACC001_LOOP)
    monkeypatch.chdir(tmp_path / "sub")
    walked = cli("check", "--no-cache", "--output-format", "concise", ".")
    assert [line.split(":")[0] for line in walked.stdout.splitlines() if "ACC001" in line] == ["c.py"]
    named = cli("check", "--no-cache", "--output-format", "concise", "--force-exclude", "generated/a.py", "c.py")
    assert [line.split(":")[0] for line in named.stdout.splitlines() if "ACC001" in line] == ["c.py"]
    settings = config.load_settings(tmp_path / "sub" / "pyproject.toml")
    assert config.glob_matches(tmp_path / "sub" / "generated" / "deep" / "x.py", settings.extend_exclude[0],
                               settings.project_root)
    assert not config.glob_matches(tmp_path / "sub" / "generatedx.py", settings.extend_exclude[0],
                                   settings.project_root)
