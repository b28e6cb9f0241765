"""The two cheap stages before LibCST: the byte prefilter and the ``ast`` stage (each rule's
:meth:`~accumlint.checks.base.Rule.applies` on the names of the code).

No finding may be lost to them: every example of the rule catalogue (read from disk, so
new rules and examples are covered as they are added) is kept for the codes it expects.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import libcst as cst
import pytest

from accumlint import engine
from accumlint.checks import ALL_RULES
from accumlint.engine import check_source, may_fire, rules_for
from accumlint.source_facts import source_facts

REPO = Path(__file__).resolve().parents[1]
EXPECT = re.compile(r"#\s*expect:\s*(ACC\d{3}(?:\s*,\s*ACC\d{3})*)")


def expected_codes(path: Path) -> set[str]:
    """The codes an example's ``# expect: CODE[, CODE]`` comments name."""
    return {code.strip() for group in EXPECT.findall(path.read_text(encoding="utf-8")) for code in group.split(",")}


def example_files() -> list[Path]:
    return sorted([*REPO.glob("rules/ACC*/*.py"), *REPO.glob("examples/*.py")])


def kept(data: bytes, codes: set[str]) -> bool:
    """Whether both stages keep a file for the rules of ``codes``."""
    rules = rules_for(codes)
    facts = source_facts(ast.parse(data))
    return may_fire(data, rules) and any(rule.applies(facts) for rule in rules)


@pytest.mark.parametrize("example", example_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_is_kept_for_the_codes_it_expects(example: Path) -> None:
    expected = expected_codes(example) & {rule.code for rule in ALL_RULES}
    data = example.read_bytes()
    for code in sorted(expected):
        assert kept(data, {code}), f"{example}: the prefilter drops it for {code}"
    if expected:
        assert kept(data, {rule.code for rule in ALL_RULES})


def test_the_examples_are_found() -> None:
    examples = [p for p in example_files() if expected_codes(p)]
    assert len(examples) >= 30
    assert {code for p in examples for code in expected_codes(p)} >= {"ACC001", "ACC201", "ACC304", "ACC501"}


def catalogue_examples() -> list[Path]:
    """Every bad_*.py and good_*.py example of the rule catalogue."""
    return sorted([*REPO.glob("rules/ACC*/bad_*.py"), *REPO.glob("rules/ACC*/good_*.py")])


@pytest.mark.parametrize("example", catalogue_examples(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_catalogue_example_is_kept_for_its_rule(example: Path) -> None:
    """A bad example is kept for its rule; a good one at least for the whole rule set (a good twin
    may hold none of its rule's markers: ACC301's Lightning twin clips through the Trainer)."""
    code = example.parent.name.split("-")[0]
    data = example.read_bytes()
    if example.name.startswith("bad_"):
        assert kept(data, {code}), f"{example}: the prefilter drops it for {code}"
    assert kept(data, {rule.code for rule in ALL_RULES})


def test_the_prefilter_loses_no_finding_on_the_catalogue(monkeypatch: pytest.MonkeyPatch) -> None:
    """The findings of every example, all rules, with both cheap stages and with neither."""
    examples = [*catalogue_examples(), *REPO.glob("examples/*.py")]
    assert len(examples) >= 60
    filtered = {path: check_source(str(path), path.read_bytes()).findings for path in examples}
    monkeypatch.setattr(engine, "may_fire", lambda data, rules: True)
    monkeypatch.setattr(engine, "_code_use_likely", lambda data, rules: True)  # straight to LibCST
    unfiltered = {path: check_source(str(path), path.read_bytes()).findings for path in examples}
    assert filtered == unfiltered
    assert sum(len(findings) for findings in filtered.values()) >= 30


MARKERS = frozenset({"backward", "training_step"})


@pytest.mark.parametrize(
    ("source", "used"),
    [
        (b"loss.backward()\n", True),
        (b"loss . backward (\n  )\n", True),
        (b"backward(loss)\n", True),
        (b"class M:\n    def training_step(self, batch):\n        pass\n", True),
        (b"class F:\n    @staticmethod\n    def backward(ctx, grad):\n        return grad\n", False),
        (b"def backward(ctx, grad, /):\n    pass\n", False),
        (b"model.register_backward_hook(hook)\n", False),
        (b"my_backward(loss)\n", False),
        (b"x = loss.backward\n", False),
        (b"# then backward\nstep = 'backward'\n", False),
    ],
)
def test_markers_are_names_called_or_defined(source: bytes, used: bool) -> None:
    assert any(next(engine._marker_uses(source, m.encode()), None) is not None for m in MARKERS) is used
    facts = source_facts(ast.parse(source))
    assert (facts.calls(MARKERS) or facts.defines(MARKERS)) is used  # the ast counterpart


@pytest.mark.parametrize(
    "source",
    [
        b'"""Example:\n    >>> loss.backward()\n"""\nx = 1\n',
        b"# loss.backward()\nx = 1\n",
        b"s = 'call loss.backward() per microbatch'\n",
    ],
)
def test_markers_only_in_strings_and_comments_pass_the_bytes_but_not_the_ast_stage(source: bytes) -> None:
    assert any(next(engine._marker_uses(source, m.encode()), None) is not None for m in MARKERS)
    facts = source_facts(ast.parse(source))
    assert not (facts.calls(MARKERS) or facts.defines(MARKERS))


def test_a_docstring_only_file_is_never_given_to_libcst(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str) -> cst.Module:
        raise AssertionError("LibCST parsed a file without a marker in its code")

    monkeypatch.setattr(engine.cst, "parse_module", refuse)
    source = b'def f():\n    """Then call loss.backward() per microbatch."""\n'
    assert check_source("doc.py", source).findings == []
    assert check_source("plain.py", b"import os\n").findings == []


def test_undecodable_bytes_in_a_file_no_rule_can_fire_on_are_not_read() -> None:
    assert check_source("bin.py", b"x = '\xff'\n").findings == []
    assert [f.code for f in check_source("bin.py", b"loss.backward()\nx = '\xff'\n").findings] == ["ACC000"]


def test_a_rule_without_markers_sees_every_file() -> None:
    class Everywhere(engine.Rule):
        code = "ACC999"
        markers = ()

    assert engine._marker_bytes((Everywhere(),)) is None
    assert may_fire(b"x = 1\n", [Everywhere()])
    assert Everywhere().applies(source_facts(ast.parse("x = 1\n")))


@pytest.mark.parametrize(
    ("source", "code"),
    [
        (b"for batch in loader:\n    loss.backward()\n", True),
        (b'"""Docs."""\nloss.backward()\n', True),
        (b'"""\n    >>> loss.backward()\n"""\n', False),
        (b"def f():\n    '''\n    loss.backward()\n    '''\n", False),
        (b"x = 1  # then loss.backward()\n", False),
        (b"    ... loss.backward()\n", False),
    ],
)
def test_the_guess_that_a_marker_is_code(source: bytes, code: bool) -> None:
    start = next(engine._marker_uses(source, b"backward"))
    assert engine._looks_like_code(source, start) is code


def test_the_ast_stage_runs_unless_a_backward_call_looks_like_code(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = engine._interpreter_parse

    def spy(text: str) -> object:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(engine, "_interpreter_parse", spy)
    check_source("train.py", b"for batch in loader:\n    loss.backward()\n")
    assert seen == []
    check_source("doc.py", b'"""Call loss.backward()."""\n')
    assert seen == ['"""Call loss.backward()."""\n']
    seen.clear()
    check_source("gpus.py", b"n = torch.cuda.device_count()\n")  # a marker, but no backward: the rules decide
    assert seen == ["n = torch.cuda.device_count()\n"]
    # without the ast stage a syntax error still gets ACC000, at the interpreter's position
    broken = check_source("broken.py", b"loss.backward()\ndef f(:\n")
    assert [(f.code, f.line, f.column) for f in broken.findings] == [("ACC000", 2, 7)]


def test_markers_that_share_a_long_substring_are_searched_for_by_it() -> None:
    markers = [b"backward", b"manual_backward", b"clip_grad_norm_", b"clip_gradients", b"DDP", b"FSDP"]
    anchors = {anchor.text: sorted(m for m, _ in anchor.members) for anchor in engine._anchors(markers)}
    assert anchors == {
        b"backward": [b"backward", b"manual_backward"],
        b"clip_grad": [b"clip_grad_norm_", b"clip_gradients"],
        b"DDP": [b"DDP"],
        b"FSDP": [b"FSDP"],
    }


@pytest.mark.parametrize(
    "source",
    [
        b"self.manual_backward(loss)\n",
        b"torch.nn.utils.clip_grad_value_(params, 1.0)\n",
        b"fabric.clip_gradients(model, opt)\n",
        b"model = FullyShardedDataParallel(model)\n",
        b"dist.init_distributed(backend)\n",
        b"x = my_clip_grad_norm_(p)\nregister_backward_hook(h)\n",
        b"clip_grad_norm_ = 1\nmanual_backward = None\n",
    ],
)
def test_the_grouped_search_finds_what_one_search_per_marker_finds(source: bytes) -> None:
    rules = list(engine.ALL_RULES_INSTANCES)
    markers = engine._marker_bytes(tuple(rules))
    assert markers is not None
    per_marker = any(next(engine._marker_uses(source, m), None) is not None for m in markers)
    assert may_fire(source, rules) is per_marker
    assert sum(len(anchor.members) for anchor in engine._rule_anchors(tuple(rules))) == len(markers)


def test_the_grouped_search_agrees_on_the_catalogue() -> None:
    rules = list(engine.ALL_RULES_INSTANCES)
    markers = engine._marker_bytes(tuple(rules))
    assert markers is not None
    for path in [*catalogue_examples(), *REPO.glob("examples/*.py"), *REPO.glob("accumlint/**/*.py")]:
        data = path.read_bytes()
        for rule in rules:
            own = engine._marker_bytes((rule,)) or ()
            expected = any(next(engine._marker_uses(data, m), None) is not None for m in own)
            assert may_fire(data, [rule]) is expected, (path, rule.code)
