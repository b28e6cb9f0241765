"""Property tests (issue 7 item 2): generated programs (hypothesmith) and mutated real files never
make :func:`check_source` raise or report an internal error, and findings are deterministic.
Hostile inputs (issue 19): spliced source fragments (deep nesting, long chains, null bytes,
odd encodings), damaged notebooks, cache files and ``pyproject.toml`` files end as ``ACC000``,
an ignored entry or a one-line :class:`ConfigError`, never an exception. Every check also computes
its fixes (``suggest=True``), and (issue 28) deep valid expressions and broken lines with ``noqa``
directives after a real ``ACC001`` loop never raise, never lose that finding, and a stage that
fails leaves the file not fully checked: never a clean verdict.

``ACCUMLINT_FUZZ=long`` runs the long profile (5,000 examples a test), ``ACCUMLINT_FUZZ=N`` N examples;
the default is a fast one (100, derandomized).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
hypothesmith = pytest.importorskip("hypothesmith")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from accumlint.pipeline.engine import check_source  # noqa: E402
from tests.shared_data import REPO  # noqa: E402

FUZZ = os.environ.get("ACCUMLINT_FUZZ", "")  # "long" (5,000 examples a test) or a count
LONG = bool(FUZZ)
EXAMPLES = 5000 if FUZZ == "long" else int(FUZZ) if FUZZ.isdigit() else 100
PROFILE = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=not LONG, suppress_health_check=list(HealthCheck)
)
#: the hostile-input tests below: fewer examples in the default profile (each one parses more)
HOSTILE = settings(
    max_examples=EXAMPLES if LONG else 25, deadline=None, derandomize=not LONG, suppress_health_check=list(HealthCheck)
)
#: deep expressions (LibCST parses each twice, ~0.5 s): fewer still in the default profile
DEEP_PROFILE = settings(HOSTILE, max_examples=EXAMPLES if LONG else 12)
CORPUS = Path.home() / ".cache" / "accumlint-corpus"
SOURCES = sorted(REPO.glob("rules/*/*.py")) + (sorted(CORPUS.rglob("*.py"))[:2000] if CORPUS.is_dir() else [])
#: prepended so that the generated program reaches LibCST and the rules
PRELUDE = "for batch in loader:\n    loss = model(batch)\n    loss.backward()\n    opt.step()\n"


def _stable(path: str, data: bytes) -> list[tuple[object, ...]]:
    """The findings of ``data``, the same with and without its fixes computed (a failing fix stage
    hides none of them); no internal error."""
    result = check_source(path, data, suggest=True)
    assert result.internal_errors == [], result.internal_errors
    if any(f.code == "ACC000" and "syntax error" in f.message for f in result.findings):
        # the interpreter's verdict, not LibCST's (issue 28: tab-then-spaces indentation was called one)
        with pytest.raises((SyntaxError, ValueError)):
            compile(data, path, "exec", dont_inherit=True)
    first = [(f.line, f.column, f.code, f.message) for f in result.findings]
    again = check_source(path, data)
    assert [(f.line, f.column, f.code, f.message) for f in again.findings] == first
    return first


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@PROFILE
@given(hypothesmith.from_grammar())
def test_generated_programs(source: str) -> None:
    _stable("gen.py", (PRELUDE + source).encode("utf-8", "surrogatepass"))


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@PROFILE
@given(st.sampled_from(SOURCES), st.lists(st.tuples(st.sampled_from("dus"), st.integers(0, 10**6)), max_size=6))
def test_mutated_real_files(path: Path, edits: list[tuple[str, int]]) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    for op, at in edits:
        if not lines:
            break
        i = at % len(lines)
        if op == "d":
            del lines[i]
        elif op == "u":
            lines.insert(i, lines[i])
        else:
            j = (at // len(lines)) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
    _stable(path.name, b"".join(lines))


# --- hostile inputs (issue 19): per-file failures are ACC000 or ignored, never an exception ----

_FRAGMENTS = [
    b"(" * 300, b")" * 300, b"[" * 250 + b"]" * 250, b"-" * 400 + b"1", b"not " * 300, b"lambda: " * 250,
    b" if b else a" * 300, b" ** a" * 400, b" and a" * 800, b"\x00", b"\xef\xbb\xbf", b"\xff\xfe",
    b"# -*- coding: utf-16 -*-\n", b"# coding: nope\n", b"\r", b"\r\n", b"\x0c", b"\t", b"\\\n",
    b'"""', b"'", b'f"{', b"}", b"\xed\xa0\x80", b"9" * 5000, b"loss.backward()\n", b"optimizer.step()\n",
    b"# noqa: ACC001, ACC999\n", b"async def f():\n    await x\n", b"match x:\n    case 1:\n        pass\n",
]


@HOSTILE
@given(st.lists(st.sampled_from(_FRAGMENTS) | st.binary(max_size=40), max_size=12))
def test_hostile_source_bytes(parts: list[bytes]) -> None:
    data = PRELUDE.encode() + b"".join(parts)
    result = check_source("hostile.py", data, suggest=True)
    assert result.internal_errors == [], result.internal_errors


# --- deep valid code and broken lines with noqa (issue 28): the stages after the rules ----------

#: a deep but valid expression of ``depth`` levels, by kind
_DEEP = {
    "attribute": lambda depth: "a" + ".b" * depth,
    "unary": lambda depth: "-" * depth + "1",
    "not": lambda depth: "not " * depth + "a",
    "power": lambda depth: "2**" * depth + "2",
    "and": lambda depth: " and ".join(["a"] * depth),
    "or": lambda depth: " or ".join(["a"] * depth),
    "sum": lambda depth: " + ".join(["a"] * depth),
    "call": lambda depth: "f(" * depth + ")" * depth,
    "subscript": lambda depth: "a" + "[0]" * depth,
    "ternary": lambda depth: "a if b else " * depth + "c",
}
#: lines that do not parse, each with a directive naming ACC codes (the directive reader must cope)
_BROKEN_NOQA = [
    "x = foo(  # noqa: ACC001", "y = [1,  # noqa: ACC3", 'z = """  # noqa: ACC001', "  w = 1  # noqa: ACC000",
    "def f(:  # noqa: ACC001, ACC777", "v = {  # noqa", "u = f'{  # noqa: ACC990", "t = 1 +  # noqa: ACC0",
]
#: depths past Python's recursion limit (1,000 frames) for the stages after the rules (the fixes fail
#: from ~500); the long profile goes to 4,000 (a chain of 4,000 subscripts takes LibCST and the model ~30 s)
_DEPTH = st.integers(min_value=100, max_value=4000) if LONG else st.sampled_from((500, 1000))
_DEEP_LINE = st.tuples(st.sampled_from(sorted(_DEEP)), _DEPTH).map(lambda pair: "x = " + _DEEP[pair[0]](pair[1]))


def _never_clean(tail: list[str]) -> None:
    """After a real ACC001 loop, ``tail``: the check (fixes, noqa, ACC990 and the unknown-code
    scan included) raises nothing, keeps the ACC001 or reports ACC000, and a file whose later
    stage failed is not fully checked, with a reason: the verdict is never clean."""
    from accumlint.report.output import summary_line
    from accumlint.run import runner
    from accumlint.settings import config
    from tests.cli_helpers import ACC001_LOOP

    data = ACC001_LOOP + "\n".join(tail).encode() + b"\n"
    codes = frozenset(config.known_codes())  # ACC990 too: its stage runs
    result = runner.check_one("deep.py", data, codes, suggest=True)
    assert result.internal_errors == [], result.internal_errors
    found = {f.code for f in result.findings}
    assert "ACC001" in found or "ACC000" in found, result.findings
    assert all(reason for reason in result.incomplete)
    assert summary_line(len(result.findings), incomplete=int(not result.fully_checked)) != "All checks passed!"
    unfixed = runner.check_one("deep.py", data, codes)
    assert unfixed.findings == result.findings  # the fix stage hides nothing
    runner._unknown_noqa_codes("deep.py", data)  # the warnings' scan of the directives raises nothing


@DEEP_PROFILE
@given(st.lists(_DEEP_LINE, min_size=1, max_size=2 if LONG else 1))
def test_deep_valid_code_never_hides_a_finding(tail: list[str]) -> None:
    _never_clean(tail)


@HOSTILE
@given(st.lists(st.sampled_from(_BROKEN_NOQA) | _DEEP_LINE, min_size=1, max_size=3))
def test_broken_lines_with_noqa_never_hide_a_finding(tail: list[str]) -> None:
    _never_clean(tail)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)
_CELL_SOURCE = st.lists(
    st.sampled_from(["loss.backward()\n", "optimizer.step()\n", "%time x\n", "!ls\n", "%%bash\n", "x?\n", "\ud800",
                     "for b in loader:\n", "    loss.backward()\n", "    opt.zero_grad()\n", "def f(:\n"])
    | st.text(max_size=30),
    max_size=8,
)


@HOSTILE
@given(
    st.lists(
        st.fixed_dictionaries({"cell_type": st.sampled_from(["code", "markdown", "raw", 3]), "source": _CELL_SOURCE})
        | _JSON,
        max_size=6,
    ),
    st.sampled_from(["plain", "deep", "bigint", "truncated", "bom"]),
)
def test_hostile_notebooks(cells: list[object], damage: str) -> None:
    import json

    from accumlint.pipeline.notebook import check_notebook

    text = json.dumps({"cells": cells, "nbformat": 4})
    if damage == "deep":
        text = text[:-1] + ', "x": ' + "[" * 50_000 + "]" * 50_000 + "}"
    elif damage == "bigint":
        text = text[:-1] + ', "x": ' + "7" * 5000 + "}"
    elif damage == "truncated":
        text = text[: len(text) // 2]
    data = text.encode("utf-8", "surrogatepass")
    if damage == "bom":
        data = b"\xef\xbb\xbf" + data
    result = check_notebook("hostile.ipynb", data)
    assert result.internal_errors == [], result.internal_errors


@HOSTILE
@given(_JSON, st.sampled_from(["files", "entry", "row"]))
def test_hostile_cache_files(value: object, where: str) -> None:
    import json
    import tempfile

    from accumlint.run.cache import FORMAT, ResultCache

    with tempfile.TemporaryDirectory() as folder:
        store = ResultCache(Path(folder), "0" * 32, b"k" * 32)
        store.file.parent.mkdir(parents=True)
        path = os.path.join(folder, "x.py")
        if where == "files":
            document: object = {"format": FORMAT, "files": value}
        elif where == "entry":
            document = {"format": FORMAT, "files": {path: value}}
        else:
            document = {"format": FORMAT, "files": {path: {"digest": "d", "findings": [value], "unknown_noqa": value,
                                                            "mac": "0" * 32}}}
        store.file.write_text(json.dumps(document), encoding="utf-8")
        loaded = ResultCache.load(Path(folder), "0" * 32, b"k" * 32)
        assert loaded.get(path, "d", 10) is None  # nothing unsigned is ever served


@HOSTILE
@given(st.lists(st.sampled_from([b"[tool.accumlint]\n", b"select = [", b"]", b"{a = ", b"}", b"\xff", b"\n",
                                 b"cache-dir = ", b'"x"', b"parse-timeout = ", b"1e400", b"true", b"-1",
                                 b"[" * 2000, b"]" * 2000, b"'''", b"\x00", b"[[tool.accumlint]]\n",
                                 b"[tool]\naccumlint = ", b"5", b'"a\\u0000b"', b"9" * 5000])
                 | st.binary(max_size=20), max_size=10))
def test_hostile_pyproject(parts: list[bytes]) -> None:
    import tempfile

    from accumlint.settings.config import ConfigError, load_settings

    with tempfile.TemporaryDirectory() as folder:
        config = Path(folder) / "pyproject.toml"
        config.write_bytes(b"".join(parts))
        try:
            load_settings(config)
        except ConfigError as exc:
            assert "\n" not in str(exc).strip()
