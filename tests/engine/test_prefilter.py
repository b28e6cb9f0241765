"""The two cheap stages before LibCST: the byte prefilter and the ``ast`` stage (each rule's
:meth:`~accumlint.checks.gate.RuleGate.admits` on the names of the code).

No finding may be lost to them: every example of the rule catalogue (read from disk, so
new rules and examples are covered as they are added) is kept for the codes it expects.
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Iterable
from pathlib import Path

import libcst as cst
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accumlint.checks import ALL_RULES
from accumlint.checks.gate import A_OR_GLOBAL_BATCH_BYTES, EVERYWHERE
from accumlint.model import conventions
from accumlint.pipeline import engine
from accumlint.pipeline.engine import check_source, may_fire, rules_for
from accumlint.source.prefilter import LedPattern, MarkerSearch, NeedlePattern, is_use
from accumlint.source.source_facts import source_facts
from tests.catalogue.test_applicability import corpus_loop_files
from tests.shared_data import REPO, needs_shared

EXPECT = re.compile(r"#\s*expect:\s*(ACC\d{3}(?:\s*,\s*ACC\d{3})*)")


def expected_codes(path: Path) -> set[str]:
    """The codes an example's ``# expect: CODE[, CODE]`` comments name."""
    return {code.strip() for group in EXPECT.findall(path.read_text(encoding="utf-8")) for code in group.split(",")}


def example_files() -> list[Path]:
    return sorted([*REPO.glob("rules/ACC*/*.py"), *REPO.glob("examples/*.py")])


def kept(data: bytes, codes: set[str]) -> bool:
    """Whether both stages keep a file for the rules of ``codes``."""
    rules = rules_for(codes)
    facts = source_facts(ast.parse(data), data)
    return may_fire(data, rules) and any(rule.gate.admits(facts) for rule in rules)


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
    monkeypatch.setattr(engine, "_calls_backward", lambda used: True)  # straight to LibCST
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
    assert any(MarkerSearch([m.encode()]).uses(source) for m in MARKERS) is used
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
def test_markers_only_in_strings_and_comments_are_no_use(source: bytes) -> None:
    assert not any(MarkerSearch([m.encode()]).uses(source) for m in MARKERS)
    facts = source_facts(ast.parse(source))
    assert not (facts.calls(MARKERS) or facts.defines(MARKERS))  # the ast stage agrees


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
        gate = EVERYWHERE

    everywhere = Everywhere()
    assert engine._marker_bytes((everywhere,)) == ()
    assert engine._rules_in_bytes(b"x = 1\n", [everywhere, *rules_for(["ACC001"])], set()) == [everywhere]
    assert may_fire(b"x = 1\n", [everywhere])
    assert Everywhere().gate.admits(source_facts(ast.parse("x = 1\n")))


@pytest.mark.parametrize(
    ("source", "code"),
    [
        (b"for batch in loader:\n    loss.backward()\n", True),
        (b'"""Docs."""\nloss.backward()\n', True),
        (b'"""\n    >>> loss.backward()\n"""\n', False),
        (b"def f():\n    '''\n    loss.backward()\n    '''\n", False),
        (b"x = 1  # then loss.backward()\n", False),
        (b"s = 'it\\'s loss.backward()'\n", False),  # an escaped quote does not end the string
        (b's = "a\\\\"; loss.backward()\n', True),  # an escaped backslash does not escape the quote
        (b"s = '''a''' ; loss.backward()  # c\n", True),
        (b"s = 'unterminated\nloss.backward()\n", True),  # a single-quoted string ends with its line
        (b'print(f"{loss.backward()}")\n', True),  # an f-string's replacement fields are code
        (b'x = rf"""{loss.backward()}"""\n', True),
        (b'raise ValueError(f"backward() with {n} inputs")\n', False),  # its literal text is prose
        (b'msg = f"{n} calls to backward({k})"\n', False),
        (b'msg = f"{{backward()}} {x}"\n', False),  # doubled braces are literal braces
        (b'msg = f"{x:{width}} backward()"\n', False),  # a nested format spec closes with its field
        (b'msg = f"{d[\'}\']} {loss.backward()}"\n', True),  # a brace in a field\'s string ends nothing
        (b'msg = f"{loss.backward() if x else 0:>{w}}"\n', True),
        (b'msg = Rf\'\'\'\n{a}\nbackward() {b}\n\'\'\'\n', False),
        (b'if"x":loss.backward()\n', True),  # the f of `if` is no prefix
        (b'x = f  # c\ny = "loss.backward()"\n', False),
        (b"# -*- coding: latin-1 -*-\n'loss.backward()'\n", False),
        (b"# -*- coding: shift_jis -*-\n'loss.backward()'\n", True),  # its bytes are not scanned
        # a file that does not decode is not scanned either (where a rule reads it: ACC000)
        (b"x = '\xff'\n'loss.backward()'\n", True),
        (b"# coding: ascii\nx = '\xc3\xa9'\n'loss.backward()'\n", True),
    ],
)
def test_uses_in_strings_and_comments_are_dropped(source: bytes, code: bool) -> None:
    assert bool(MarkerSearch([b"backward"]).uses(source)) is code
    assert MarkerSearch([b"backward"]).uses(source, in_strings=True)  # a notebook's JSON: all count
    if not any(unscanned in source for unscanned in (b"shift_jis", b"unterminated", b"\xff", b"ascii")):
        assert bool(one_search_per_marker(source, [b"backward"])) is code  # the tokenizer agrees


def test_a_notebooks_json_counts_the_uses_in_its_strings() -> None:
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "source": "for b in loader:\n    loss.backward()\n"}
    data = json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()
    rules = rules_for(["ACC001"])
    assert not may_fire(data, rules)  # as Python source the whole notebook is one big string
    assert may_fire(data, rules, in_strings=True)


def test_the_ast_stage_judges_every_file_the_bytes_keep(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    real = engine._interpreter_parse

    def spy(text: str) -> object:
        seen.append(text)
        return real(text)

    monkeypatch.setattr(engine, "_interpreter_parse", spy)
    check_source("doc.py", b'"""Call loss.backward()."""\n')  # no use: the bytes decide
    assert seen == []
    # a backward outside any loop: the gates see no group, LibCST never reads the file
    assert check_source("grad.py", b"def test():\n    loss.backward()\n").findings == []
    assert seen == ["def test():\n    loss.backward()\n"]
    check_source("gpus.py", b"n = torch.cuda.device_count()\naccum = 4\n")  # no backward: the rules decide
    assert seen[-1] == "n = torch.cuda.device_count()\naccum = 4\n"
    broken = check_source("broken.py", b"loss.backward()\ndef f(:\n")
    assert [(f.code, f.line, f.column) for f in broken.findings] == [("ACC000", 2, 7)]


Spans = tuple[list[tuple[int, int]], list[tuple[int, int]]]


def prose_spans(data: bytes) -> Spans:
    """The byte spans of the comments and of the strings other than f-strings, and those of the
    f-strings, by the standard tokenizer (the oracle of the byte scan)."""
    lines = data.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    encoding = tokenize.detect_encoding(io.BytesIO(data).readline)[0]
    text = [line.decode(encoding) for line in lines]

    def offset(row: int, column: int) -> int:
        return offsets[row - 1] + len(text[row - 1][:column].encode(encoding)) if row <= len(lines) else offsets[-1]

    spans, formatted = [], []
    for token in tokenize.tokenize(io.BytesIO(data).readline):
        prefix = token.string[: len(token.string) - len(token.string.lstrip("rRbBuUfF"))]
        if token.type == tokenize.COMMENT or token.type == tokenize.STRING:
            (formatted if "f" in prefix.lower() else spans).append((offset(*token.start), offset(*token.end)))
    return spans, formatted


def in_literal_text(data: bytes, span: tuple[int, int], start: int, size: int) -> bool:
    """Whether the ``size`` bytes at ``start`` in the f-string at ``span`` are its literal text:
    renamed, they show up in one of the literal's constant parts (the interpreter's parser
    decides, not a brace count)."""
    token = data[span[0]:start] + b"Q" * size + data[start + size:span[1]]
    parts = ast.walk(ast.parse(token.decode(), mode="eval"))
    return any(isinstance(part, ast.Constant) and "Q" * size in str(part.value) for part in parts)


def one_search_per_marker(data: bytes, markers: Iterable[bytes], spans: Spans | None = None) -> list[int]:
    """The oracle of the single pass: every occurrence of every marker, checked one by one,
    outside the strings and comments and the literal text of the f-strings that the standard
    tokenizer finds (``spans``, if given)."""
    starts = {(m.start(), marker) for marker in markers for m in re.finditer(re.escape(marker), data)}
    if not starts:
        return []
    prose, formatted = spans if spans is not None else prose_spans(data)

    def in_prose(start: int, marker: bytes) -> bool:
        if any(a <= start < b for a, b in prose):
            return True
        return any(a <= start < b and in_literal_text(data, (a, b), start, len(marker)) for a, b in formatted)

    return sorted({start for start, marker in starts if is_use(data, start, marker) and not in_prose(start, marker)})


ALL_MARKERS = engine._marker_bytes(tuple(engine.ALL_RULES_INSTANCES))


@pytest.mark.parametrize(
    "source",
    [
        b"self.manual_backward(loss)\n",
        b"torch.nn.utils.clip_grad_value_(params, 1.0)\n",
        b"fabric.clip_gradients(model, opt)\n",
        b"model = FullyShardedDataParallel(model)\nm = FSDP(m)\n",
        b"dist.init_distributed(backend)\n",
        b"x = my_clip_grad_norm_(p)\nregister_backward_hook(h)\n",
        b"clip_grad_norm_ = 1\nmanual_backward = None\n",
        b"clip_grad_norm(p)\nclip_grad_norm_(p)\n",  # a marker that is a prefix of another, both used
        b"backward_manual_backward(x)\nmanual_backward(x)backward(y)\n",  # overlaps, back to back
    ],
)
def test_the_single_pass_finds_what_one_search_per_marker_finds(source: bytes) -> None:
    assert len(ALL_MARKERS) >= 15
    assert list(MarkerSearch(ALL_MARKERS).uses(source)) == one_search_per_marker(source, ALL_MARKERS)
    used = {marker for marker in ALL_MARKERS if one_search_per_marker(source, [marker])}
    assert MarkerSearch(ALL_MARKERS).used(source) == used


def test_the_single_pass_agrees_on_the_catalogue() -> None:
    """Every rule's markers alone and all of them together, on every example and accumlint's own source."""
    paths = [*catalogue_examples(), *REPO.glob("examples/*.py"), *REPO.glob("accumlint/**/*.py")]
    assert _single_pass_agrees(paths) >= 100


@needs_shared
def test_the_single_pass_agrees_on_the_corpus() -> None:
    """The same on the corpus loop files (where ``../shared`` and the package index are at hand)."""
    assert _single_pass_agrees(corpus_loop_files()) >= 10


def _single_pass_agrees(paths: Iterable[Path]) -> int:
    """Check the single pass against one search per marker on ``paths``; the markers found."""
    marker_sets = [ALL_MARKERS, *(engine._marker_bytes((rule,)) for rule in engine.ALL_RULES_INSTANCES)]
    searches = [(MarkerSearch(markers), markers) for markers in marker_sets if markers]
    found = 0
    for path in paths:
        data = path.read_bytes()
        spans = prose_spans(data)
        for search, markers in searches:
            expected = one_search_per_marker(data, markers, spans)
            assert list(search.uses(data)) == expected, (path, markers)
            found += len(expected)
    return found


@pytest.mark.parametrize("markers", [[b"loss.backward"], [b"zero grad"], [b""], []])
def test_a_marker_must_be_an_identifier(markers: list[bytes]) -> None:
    with pytest.raises(ValueError, match="identifiers"):
        MarkerSearch(markers)


def test_a_rules_second_byte_test_is_read_only_with_its_markers() -> None:
    (rule,) = rules_for(["ACC404"])
    assert rule.gate.requires is not None
    assert may_fire(b"n = torch.cuda.device_count()\nga_steps = 8 // n\n", [rule])
    assert not may_fire(b"n = torch.cuda.device_count()\nbatch = 8 // n\n", [rule])  # no name of A
    assert not may_fire(b"gradient_accumulation_steps = 4\n", [rule])  # no marker
    # with another rule selected, its markers alone still keep the file
    assert may_fire(b"n = torch.cuda.device_count()\nloss.backward()\n", rules_for(["ACC404", "ACC001"]))


ASCII_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,30}", fullmatch=True)


@given(
    name=st.one_of(
        ASCII_NAME,
        st.from_regex(conventions.ACCUMULATION_NAME.pattern.encode(), fullmatch=False)
        .filter(bytes.isascii).map(bytes.decode),
        st.from_regex(conventions.GLOBAL_BATCH_NAME.pattern.encode(), fullmatch=False)
        .filter(bytes.isascii).map(bytes.decode),
    ),
    before=st.sampled_from(["", "self.", "cfg.args."]),
)
def test_the_byte_pattern_of_a_names_holds_wherever_the_names_match(name: str, before: str) -> None:
    """``A_OR_GLOBAL_BATCH_BYTES`` is a superset of ACC404's own name test on ASCII names."""
    if conventions.ACCUMULATION_NAME.search(name) or conventions.GLOBAL_BATCH_NAME.match(name):
        source = f"{before}{name} = world * 8\n".encode()
        assert A_OR_GLOBAL_BATCH_BYTES.search(source), name


def test_a_needle_pattern_tries_its_pattern_where_each_needle_starts() -> None:
    pattern = NeedlePattern({b"ga": rb"ga(s)?(?![a-z_])", b"gas_": rb"gas_steps"})
    assert pattern.search(b"self.GAS = 4\n")  # any case
    assert pattern.search(b"x = ga\n")
    assert not pattern.search(b"omega_gamma = 1\nlegacy = 2\n")  # needles found, patterns not
    assert pattern.search(b"n = gas_steps\n")  # two needles at one offset: both tried
    assert not pattern.search(b"")
    with pytest.raises(ValueError, match="lowercase"):
        NeedlePattern({b"GA": b"ga"})


_GATE = re.compile(rb"(?<![A-Za-z0-9_])(?:need_update|update_grad)\s*=(?!=)")


@pytest.mark.parametrize(
    "data",
    [b"", b"scaler(loss, opt, update_grad=(i + 1) % A == 0)\n", b"x.need_update = 1",
     b"aneed_update=1\nupdate_grad == 2\n", b"aneed_update=1\nupdate_grad = 2\n",
     b"need_update_grad=1", b"need_update", b"# update_grad = it is in a comment\n"],
)
def test_a_led_pattern_matches_where_its_pattern_does(data: bytes) -> None:
    """Tried only where a needle starts, with the lookbehind still reading the byte before it:
    the first occurrence may fail and a later one match; one needle may overlap another."""
    led = LedPattern(_GATE, [b"need_update", b"update_grad"])
    assert led.search(data) == (_GATE.search(data) is not None)


def test_a_led_pattern_agrees_on_the_edge_cases_and_needs_needles() -> None:
    led = LedPattern(_GATE, [b"need_update", b"update_grad"])
    assert led.search(b"aneed_update=1\nupdate_grad = 2\n")  # the second needle's occurrence matches
    assert not led.search(b"aneed_update=1\nupdate_grad == 2\n")
    assert led.search(b"need_update_grad=1") is False  # `update_grad` is inside a longer name
    with pytest.raises(ValueError, match="non-empty"):
        LedPattern(_GATE, [])
