"""``# noqa`` handling."""

from __future__ import annotations

import pytest

from accumlint.noqa.suppression import apply_noqa, parse_noqa
from accumlint.spec.findings import Finding, Severity


def finding(line: int, code: str = "ACC001", end_line: int = 0) -> Finding:
    return Finding("f.py", line, 1, code, "name", Severity.ERROR, "msg", end_line=end_line)


def kept(text: str, *findings: Finding) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in apply_noqa(list(findings), text)]


@pytest.mark.parametrize(
    "comment",
    [
        "# noqa",
        "# NOQA",
        "#noqa",
        "# noqa: ACC001",
        "# noqa:ACC001",
        "# noqa: acc001",
        "# noqa: ACC301, ACC001",
        "# noqa: ACC301 ACC001",
        "# noqa:ACC301,ACC001",
        "# noqa: ACC0",
        "# noqa: ACC001 because the reset is deliberate",
        "# type: ignore  # noqa: ACC001",
        # accumlint's own line directive, which ruff never reads
        "# accumlint: noqa: ACC001",
        "# accumlint:noqa:ACC001",
        "# ACCUMLINT: NOQA: acc0",
        "# accumlint: noqa",
        "# accumlint: noqa: ACC001 because the reset is deliberate",
        "# noqa: E501  # accumlint: noqa: ACC001",
        "# accumlint: noqa: ACC001  # noqa: E501",
        "# noqa: E501 # accumlint: noqa",
        "# type: ignore  # accumlint: noqa: ACC001",
    ],
)
def test_directive_suppresses_acc001(comment: str) -> None:
    text = f"opt.zero_grad()  {comment}\nopt.zero_grad()\n"
    assert kept(text, finding(1), finding(2)) == [(2, "ACC001")]


@pytest.mark.parametrize(
    "comment",
    [
        "# noqa: ACC301",
        "# noqa: ACC1",
        "# noqa:",
        "# noqa: please",
        "# noqafoo",
        "# accumlint: noqa: ACC301",
        "# accumlint: noqa:",
        "# accumlint: noqafoo",
        "# noqa: E501  # accumlint: noqa: ACC3",
        "# accumlint noqa: ACC001",
    ],
)
def test_directive_that_does_not_name_the_code_keeps_it(comment: str) -> None:
    text = f"opt.zero_grad()  {comment}\n"
    assert kept(text, finding(1)) == [(1, "ACC001")]


def test_named_codes_only_suppress_those_codes() -> None:
    text = "x = f()  # noqa: ACC001\n"
    assert kept(text, finding(1, "ACC001"), finding(1, "ACC301")) == [(1, "ACC301")]


def test_noqa_inside_a_string_does_not_count() -> None:
    text = 'msg = "# noqa"; opt.zero_grad()\ns = """\n# noqa\n"""\n'
    assert kept(text, finding(1), finding(3)) == [(1, "ACC001"), (3, "ACC001")]


def test_multi_line_finding_is_suppressed_on_its_first_line_only() -> None:
    first = "opt.zero_grad(  # noqa: ACC001\n    set_to_none=True,\n)\n"
    last = "opt.zero_grad(\n    set_to_none=True,\n)  # noqa: ACC001\n"
    assert kept(first, finding(1, end_line=3)) == []
    assert kept(last, finding(1, end_line=3)) == [(1, "ACC001")]


def test_file_level_directive_suppresses_the_whole_file() -> None:
    text = "import torch\n# accumlint: noqa\nopt.zero_grad()\n"
    assert kept(text, finding(1), finding(3, "ACC301")) == []


def test_file_level_directive_with_codes() -> None:
    text = "# accumlint: noqa: ACC3\nopt.zero_grad()\nclip()\n"
    assert kept(text, finding(2, "ACC001"), finding(3, "ACC301")) == [(2, "ACC001")]


def test_file_level_directive_must_be_on_its_own_line() -> None:
    """After code, ``# accumlint: noqa`` is a line directive (the ``# noqa`` ruff never reads)."""
    text = "opt.zero_grad()  # accumlint: noqa\nopt.zero_grad()\nclip()  # accumlint: noqa: ACC001\n"
    assert kept(text, finding(1), finding(2), finding(3), finding(3, "ACC301")) == [(2, "ACC001"), (3, "ACC301")]


def test_file_level_directive_takes_no_reason_and_is_no_line_directive() -> None:
    text = "# accumlint: noqa: ACC001 deliberate\nopt.zero_grad()\n"
    assert kept(text, finding(1), finding(2)) == [(1, "ACC001"), (2, "ACC001")]


def test_both_forms_on_one_line_add_up() -> None:
    text = "opt.zero_grad()  # noqa: ACC301  # accumlint: noqa: ACC001\n"
    assert kept(text, finding(1), finding(1, "ACC301"), finding(1, "ACC101")) == [(1, "ACC101")]


def test_acc000_is_never_suppressed() -> None:
    text = "# accumlint: noqa\nx = (  # noqa\n"
    assert kept(text, finding(2, "ACC000")) == [(2, "ACC000")]


def test_regex_fallback_when_tokenize_fails() -> None:
    text = 'opt.zero_grad()  # noqa: ACC001\nclip()  # accumlint: noqa: ACC301\nx = """never closed\n'
    noqa = parse_noqa(text)
    assert set(noqa.lines) == {1, 2}
    assert kept(text, finding(1), finding(2, "ACC301")) == []


def test_order_is_kept_and_unrelated_lines_untouched() -> None:
    text = "a()\nb()  # noqa\nc()\n"
    assert kept(text, finding(3), finding(1), finding(2)) == [(3, "ACC001"), (1, "ACC001")]


def test_comments_are_tokenized_only_where_a_directive_could_matter(monkeypatch) -> None:
    """Python 3.11's tokenizer is pure Python (it took ~5 % of a run over the corpus loop files): a file
    whose directives name other tools' codes, or whose findings sit on lines without one, is
    answered without it."""
    from accumlint.noqa import noqa_report, suppression
    from accumlint.spec.findings import Finding, Severity

    def no_tokenizer(text: str) -> list[tuple[int, str, bool]]:
        raise AssertionError("tokenized")

    monkeypatch.setattr(suppression, "_comments_by_tokenize", no_tokenizer)
    monkeypatch.setattr(noqa_report, "_comments_by_tokenize", no_tokenizer, raising=False)
    text = "import os  # noqa: F401\nloss.backward()\noptimizer.zero_grad()\n"
    assert noqa_report.unknown_codes(text, ["ACC001"]) == []
    finding = Finding(path="t.py", line=3, column=1, code="ACC001", name="n", severity=Severity.ERROR, message="m")
    assert suppression.apply_noqa([finding], text) == [finding]
    with pytest.raises(AssertionError, match="tokenized"):  # a directive on the finding's line: read exactly
        suppression.apply_noqa([finding], text.replace("zero_grad()", "zero_grad()  # noqa: ACC001"))
