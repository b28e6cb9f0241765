"""``[tool.accumlint]`` discovery, validation, rule selection and per-file-ignores."""

from __future__ import annotations

from pathlib import Path

import pytest

from accumlint.settings import config
from accumlint.settings.config import ConfigError, SelectionLayer, Settings
from tests.support import write

# --- discovery of the config file ---------------------------------------------------


def test_walks_up_to_the_first_pyproject_with_a_tool_accumlint_table(tmp_path: Path) -> None:
    outer = write(tmp_path / "a" / "pyproject.toml", '[tool.accumlint]\nignore = ["ACC000"]\n')
    write(tmp_path / "a" / "b" / "pyproject.toml", '[project]\nname = "inner"\n')  # no table: skipped
    start = tmp_path / "a" / "b" / "c" / "train.py"
    write(start, "x = 1\n")
    assert config.find_config(start) == outer
    settings = config.discover_settings([start])
    assert settings.config_path == outer
    assert settings.project_root == outer.parent
    assert settings.ignore == ["ACC000"]


def test_nearest_table_wins(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.accumlint]\nselect = ["ALL"]\n')
    inner = write(tmp_path / "pkg" / "pyproject.toml", "[tool.accumlint]\n")
    assert config.find_config(tmp_path / "pkg") == inner


def test_no_config_means_defaults_rooted_at_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n')
    settings = config.discover_settings(["."])
    assert settings.config_path is None
    assert settings.project_root == Path.cwd()
    assert settings.select is None and settings.ignore == [] and settings.per_file_ignores == {}


def test_explicit_config_file(tmp_path: Path) -> None:
    path = write(tmp_path / "cfg" / "pyproject.toml", '[tool.accumlint]\nexclude = ["gen"]\n')
    settings = config.discover_settings([tmp_path], path)
    assert settings.exclude == ["gen"]
    assert settings.project_root == path.parent


def test_all_keys_are_read(tmp_path: Path) -> None:
    path = write(
        tmp_path / "pyproject.toml",
        """
[tool.accumlint]
select = ["ACC0"]
ignore = ["ACC000"]
extend-select = ["acc000"]
exclude = ["legacy"]
extend-exclude = ["*_gen.py"]
noqa-style = "accumlint"

[tool.accumlint.per-file-ignores]
"tests/*" = ["ACC000"]
""",
    )
    settings = config.load_settings(path)
    assert settings.noqa_style == "accumlint"
    assert config.load_settings(write(tmp_path / "d" / "pyproject.toml", "[tool.accumlint]\n")).noqa_style == "noqa"
    assert settings.select == ["ACC0"]
    assert settings.ignore == ["ACC000"]
    assert settings.extend_select == ["ACC000"]  # normalized to upper case
    assert settings.exclude == ["legacy"]
    assert settings.extend_exclude == ["*_gen.py"]
    assert settings.per_file_ignores == {"tests/*": ["ACC000"]}


# --- error messages ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('selct = ["ALL"]', ["unknown key 'selct'", "allowed keys: select, ignore, extend-select"]),
        ('ignore = ["ACC999"]', ["[tool.accumlint] ignore", "'ACC999'", "allowed: ALL"]),
        ('select = "ALL"', ["[tool.accumlint] select", "expected a list of strings"]),
        ('per-file-ignores = ["x"]', ["per-file-ignores", "expected a table"]),
        ('[tool.accumlint.per-file-ignores]\n"t/*" = ["NOPE1"]', ["per-file-ignores 't/*'", "'NOPE1'"]),
        (
            '[tool.accumlint.per-file-ignores]\n"t/*" = "ACC000"',
            ["per-file-ignores 't/*'", "expected a list"],
        ),
        ("select = [", ["invalid TOML"]),
        ('noqa-style = "ruff"', ["[tool.accumlint] noqa-style", 'expected "noqa" or "accumlint"', "'ruff'"]),
        ("noqa-style = true", ["[tool.accumlint] noqa-style", "got True"]),
    ],
)
def test_errors_name_the_key_and_value(tmp_path: Path, toml: str, expected: list[str]) -> None:
    text = toml if toml.startswith("[tool") else f"[tool.accumlint]\n{toml}\n"
    path = write(tmp_path / "pyproject.toml", text)
    with pytest.raises(ConfigError) as info:
        config.load_settings(path)
    message = str(info.value)
    assert "\n" not in message
    for part in expected:
        assert part in message


def test_missing_explicit_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        config.load_settings(tmp_path / "nope.toml")


def test_bad_cli_selector_names_the_option() -> None:
    with pytest.raises(ConfigError, match=r"--select: unknown rule selector 'XYZ1'"):
        config.validate_selector("XYZ1", "--select")


# --- rule selection (ruff semantics) -----------------------------------------------


def resolve(*layers: SelectionLayer) -> list[str]:
    return sorted(config.resolve_selection(list(layers)))


def test_default_is_default_enabled_rules_plus_acc000(fake_rules: object) -> None:
    assert resolve() == ["ACC000", "ACC001", "ACC301"]


def test_explicit_selection_enables_off_by_default_rules(fake_rules: object) -> None:
    assert resolve(SelectionLayer(select=("ALL",))) == ["ACC000", "ACC001", "ACC301", "ACC901", "ACC990"]
    assert resolve(SelectionLayer(select=("ACC9",))) == ["ACC000", "ACC901"]  # ACC990 only by ALL, ACC99, ACC990
    assert resolve(SelectionLayer(select=("ACC99",))) == ["ACC000", "ACC990"]
    assert resolve(SelectionLayer(extend_select=("ACC901",))) == ["ACC000", "ACC001", "ACC301", "ACC901"]


def test_prefix_selection(fake_rules: object) -> None:
    assert resolve(SelectionLayer(select=("ACC3",))) == ["ACC000", "ACC301"]
    assert resolve(SelectionLayer(select=("ACC00",))) == ["ACC000", "ACC001"]


def test_more_specific_selector_wins_and_ignore_wins_ties(fake_rules: object) -> None:
    # a more specific select beats a broader ignore
    assert resolve(SelectionLayer(select=("ALL", "ACC001"), ignore=("ACC0",))) == [
        "ACC000",
        "ACC001",
        "ACC301",
        "ACC901",
        "ACC990",
    ]
    # a more specific ignore beats a broader select
    assert resolve(SelectionLayer(select=("ACC0",), ignore=("ACC001",))) == ["ACC000"]
    # the same specificity: ignore wins
    assert resolve(SelectionLayer(select=("ACC301",), ignore=("ACC301",))) == ["ACC000"]


def test_cli_layer_select_replaces_config_selection(fake_rules: object) -> None:
    file_layer = SelectionLayer(select=("ACC3",), ignore=("ACC001",))
    assert resolve(file_layer, SelectionLayer(select=("ACC001",))) == ["ACC000", "ACC001"]
    # without its own select the CLI layer adjusts the config's selection
    assert resolve(file_layer, SelectionLayer(ignore=("ACC301",))) == ["ACC000"]
    assert resolve(file_layer, SelectionLayer(extend_select=("ACC9",))) == ["ACC000", "ACC301", "ACC901"]


def test_acc000_stays_on_unless_ignored_by_full_code(fake_rules: object) -> None:
    assert "ACC000" in resolve(SelectionLayer(ignore=("ALL",)))
    assert "ACC000" in resolve(SelectionLayer(ignore=("ACC0",)))
    assert "ACC000" not in resolve(SelectionLayer(ignore=("ACC000",)))
    assert resolve(SelectionLayer(ignore=("ACC000",)), SelectionLayer(extend_select=("ACC000",))) == [
        "ACC000",
        "ACC001",
        "ACC301",
    ]


# --- per-file-ignores --------------------------------------------------------------


def test_per_file_ignores_globs(tmp_path: Path, fake_rules: object) -> None:
    settings = Settings(
        project_root=tmp_path,
        per_file_ignores={"tests/*": ["ACC0"], "conftest.py": ["ACC3"], "legacy": ["ALL"]},
    )
    enabled = config.resolve_selection([])
    assert config.per_file_ignored(tmp_path / "tests" / "deep" / "t.py", settings) == ["ACC0"]
    ignored = config.ignored_codes(config.per_file_ignored(tmp_path / "tests" / "t.py", settings), enabled)
    assert ignored == {"ACC001"}  # ACC000 is only ignored by its full code
    assert config.per_file_ignored(tmp_path / "pkg" / "conftest.py", settings) == ["ACC3"]
    legacy = config.per_file_ignored(tmp_path / "legacy" / "old.py", settings)
    assert config.ignored_codes(legacy, enabled) == {"ACC001", "ACC301"}
    assert config.per_file_ignored(tmp_path / "src" / "train.py", settings) == []
