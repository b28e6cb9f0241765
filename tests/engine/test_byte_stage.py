"""The byte stage on a stored vocabulary (:mod:`accumlint.pipeline.byte_stage`): it decides as the engine's,
a run whose files it clears never imports LibCST, and a forged or corrupt one is not used."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from accumlint.cli.app import main
from accumlint.pipeline import byte_stage, engine
from accumlint.run import cache
from accumlint.settings.config import known_codes
from tests.shared_data import REPO
from tests.support import cache_file

EXAMPLES = sorted((REPO / "rules").glob("ACC*/*.py"))
BUGGY = (REPO / "rules" / "ACC001-zero-grad-inside-group" / "bad_zero_grad_top_of_loop.py").read_text(encoding="utf-8")
PLAIN = "import os\n\n\ndef main():\n    return os.getcwd()\n"


def stored() -> byte_stage.Vocabulary:
    """The engine's vocabulary as a run reads it back from the cache."""
    return byte_stage.Vocabulary.from_json(json.loads(json.dumps(engine.vocabulary().to_json())))


def test_the_stored_vocabulary_decides_as_the_engine_on_every_example() -> None:
    vocabulary = stored()
    assert [rule.code for rule in vocabulary.rules] == [rule.code for rule in engine.ALL_RULES_INSTANCES]
    every = frozenset(known_codes())
    selections = [every, *(frozenset({code}) for code in sorted(every))]
    passed = 0
    for example in EXAMPLES:
        data = example.read_bytes()
        for codes in selections:
            expected = engine.may_fire(data, engine.rules_for(codes), path=str(example))
            assert byte_stage.may_fire(data, vocabulary.rules_for(codes), vocabulary, path=str(example)) == expected, \
                (example.name, sorted(codes))
            passed += expected
        assert byte_stage.backward_used(data, vocabulary) == engine.backward_used(data)
        assert byte_stage.performs_events(data, vocabulary) == engine.performs_events(data)
    assert passed > len(EXAMPLES)  # the selections are not all cleared (the comparison means something)


def test_a_gate_with_a_required_pattern_survives_the_round_trip() -> None:
    required = [rule for rule in stored().rules if rule.gate.requires is not None]
    assert required  # ACC405's batch-size pattern, at least
    live = {rule.code: rule.gate.requires for rule in engine.ALL_RULES_INSTANCES}
    for rule in required:
        original = live[rule.code]
        assert original is not None
        assert rule.gate.requires.needles == original.needles
        assert [p.pattern for p in rule.gate.requires.patterns] == [p.pattern for p in original.patterns]


def _loads(project: Path, *modules: str) -> str:
    """Run ``accumlint check --quiet --force-exclude plain.py`` (as pre-commit does) in a fresh
    process in ``project``: its exit status, then which of ``modules`` it loaded (a module
    :func:`accumlint.lazy.lazy_module` registered but nothing used is not loaded)."""
    probe = ("import sys\nfrom accumlint.cli.app import main\n"
             "try:\n    main(['check', '--quiet', '--force-exclude', 'plain.py'])\n"
             "except SystemExit as exit:\n    status = exit.code\n"
             "loaded = [type(sys.modules[name]).__name__ != '_LazyModule' if name in sys.modules else False\n"
             f"          for name in {modules!r}]\n"
             "print(status, *loaded)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(cache.CACHE_DIR_ENV, None)
    done = subprocess.run([sys.executable, "-c", probe], cwd=project, env=env, capture_output=True, text=True,
                          check=True)
    return done.stdout.strip().splitlines()[-1]


def test_a_run_the_byte_stage_clears_never_imports_libcst(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    (tmp_path / "plain.py").write_text(PLAIN, encoding="utf-8")
    assert _loads(tmp_path, "libcst") == "0 True"  # the first run builds the vocabulary (the rules: LibCST)
    (tmp_path / "plain.py").write_text(PLAIN + "# changed\n", encoding="utf-8")
    assert _loads(tmp_path, "libcst") == "0 False"  # the next one reads it back
    (tmp_path / "plain.py").write_text(BUGGY, encoding="utf-8")
    assert _loads(tmp_path, "libcst") == "1 True"  # a file the stage passes is checked, with LibCST


#: what a run whose cache keeps the vocabulary does not load for a file the byte stage clears
#: (issue 33, start-up): the notebook reader, the machine output formats, and pathspec where no
#: ignore file applies
NOT_AT_START_UP = ("accumlint.pipeline.notebook", "accumlint.report.output.sarif", "accumlint.report.output.junit",
                   "pathspec")


def test_a_cleared_file_loads_only_what_its_check_needs(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'p'\n", encoding="utf-8")
    (tmp_path / "plain.py").write_text(PLAIN, encoding="utf-8")
    _loads(tmp_path)  # the vocabulary kept
    (tmp_path / "plain.py").write_text(PLAIN + "# changed\n", encoding="utf-8")
    assert _loads(tmp_path, *NOT_AT_START_UP) == "0" + " False" * len(NOT_AT_START_UP)
    # answered from the cache: not even the frameworks' conventions (the byte stage's timm gate)
    assert _loads(tmp_path, "accumlint.frameworks") == "0 False"
    (tmp_path / ".git").mkdir()  # a work tree with an ignore file: pathspec reads it
    (tmp_path / ".gitignore").write_text("build/\n", encoding="utf-8")
    (tmp_path / "plain.py").write_text(PLAIN + "# again\n", encoding="utf-8")
    assert _loads(tmp_path, "pathspec") == "0 True"


@pytest.mark.parametrize("forge", ["markers", "mac", "junk", "null"])
def test_a_forged_or_corrupt_vocabulary_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    forge: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cache.CACHE_DIR_ENV, raising=False)
    (tmp_path / "train.py").write_text(BUGGY, encoding="utf-8")

    def concise() -> list[str]:
        result = CliRunner().invoke(main, ["check", "--output-format", "concise", "--quiet", "--exit-zero",
                                           "--jobs", "1", "train.py"])
        assert result.exit_code == 0, result.output
        return [line.split(" ", 2)[0] + " " + line.split(" ", 2)[1] for line in result.output.splitlines()]

    assert concise() == ["train.py:33:13: ACC001"]
    file = cache_file(tmp_path)
    data = json.loads(file.read_text(encoding="utf-8"))
    stage = data["stage"]
    if forge == "markers":  # no rule has markers any more: every file would be cleared
        for rule in stage["vocabulary"]["rules"]:
            rule[1] = ["no_such_marker"]
    elif forge == "mac":
        stage["mac"] = "0" * 32
    elif forge == "junk":
        stage["vocabulary"] = {"rules": 1}
    else:
        data["stage"] = None
    data["files"] = {}  # checked again
    file.write_text(json.dumps(data), encoding="utf-8")
    assert concise() == ["train.py:33:13: ACC001"]
    assert json.loads(file.read_text(encoding="utf-8"))["stage"]["vocabulary"] == engine.vocabulary().to_json()
