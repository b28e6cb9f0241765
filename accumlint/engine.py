"""One file through the pipeline: bytes → text → LibCST tree → group model → rules → findings.

Everything that can go wrong with one file (undecodable bytes, a syntax error, a rule
that crashes) is reported for that file and never stops the run.
"""

from __future__ import annotations

import ast
import codecs
import functools
import io
import re
import tokenize
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from accumlint.checks import ALL_RULES
from accumlint.checks.base import Hit, Rule
from accumlint.findings import Finding, Severity
from accumlint.model import build_model
from accumlint.suppression import apply_noqa

PARSE_ERROR_CODE = "ACC000"
PARSE_ERROR_NAME = "parse-error"
PARSE_ERROR_URL = "https://github.com/accumlint/accumlint/blob/main/README.md#exit-codes"


@dataclass
class FileResult:
    """What checking one file produced: findings (noqa applied), the findings that ``# noqa``
    suppressed, and internal errors (rule crashes)."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    suppressed: list[Finding] = field(default_factory=list)  # removed by noqa directives


def decode_source(data: bytes) -> str:
    """Decode a Python file as the interpreter does (PEP 263 coding line, UTF-8 BOM, default UTF-8).

    Raises ``SyntaxError`` for an unknown coding declaration and ``UnicodeDecodeError`` for
    bytes that the declared encoding cannot decode.
    """
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if "invalid or missing encoding declaration" not in str(exc):
            raise
        # the first lines are not UTF-8 and declare nothing: decode as UTF-8 so that the
        # UnicodeDecodeError says where the bad byte is
        encoding = "utf-8-sig" if data.startswith(codecs.BOM_UTF8) else "utf-8"
    return data.decode(encoding)


def _parse_error(path: str, line: int, column: int, reason: str) -> Finding:
    return Finding(
        path=path,
        line=max(line, 1),
        column=max(column, 1),
        code=PARSE_ERROR_CODE,
        name=PARSE_ERROR_NAME,
        severity=Severity.ERROR,
        message=f"file could not be checked: {reason}",
        fix="make the file valid Python (as the interpreter that runs it would parse it)",
        url=PARSE_ERROR_URL,
    )


def _syntax_error_position(text: str, exc: cst.ParserSyntaxError) -> tuple[int, int, str]:
    """Where the interpreter puts a syntax error (LibCST's own position is often a token late).

    Falls back to LibCST's position and message when ``ast`` accepts the text.
    """
    try:
        ast.parse(text)
    except SyntaxError as err:
        return err.lineno or 1, err.offset or 1, err.msg
    except (RecursionError, MemoryError, ValueError):
        pass
    return exc.raw_line, exc.raw_column + 1, exc.message


@functools.cache
def _marker_pattern(markers: frozenset[bytes]) -> re.Pattern[bytes]:
    """Markers used as code: a call (``loss.backward(``, ``backward(``) or a definition
    (``def training_step``), not a word in prose. Comments and strings can still match: the
    pattern only decides whether the file is worth the full parse."""
    names = b"|".join(re.escape(m) for m in sorted(markers))
    return re.compile(rb"(?:\.\s*|(?<![\w.]))(?:" + names + rb")\s*\(|\bdef\s+(?:" + names + rb")\b")


def _relevant(data: bytes, rules: Sequence[Rule]) -> bool:
    """Whether any selected rule can fire on this file (a rule without markers always can)."""
    if any(not rule.markers for rule in rules):
        return True
    markers = frozenset(m for rule in rules for m in rule.markers)
    return _marker_pattern(markers).search(data) is not None


def _interpreter_syntax_error(text: str) -> tuple[int, int, str] | None:
    """(line, column, reason) of the first syntax error ``ast.parse`` finds, or None."""
    try:
        ast.parse(text)
    except SyntaxError as err:
        return err.lineno or 1, err.offset or 1, f"syntax error: {err.msg}"
    except (RecursionError, MemoryError):
        return 1, 1, "nesting too deep for the parser"
    except ValueError as err:  # null bytes
        return 1, 1, f"syntax error: {err}"
    return None


def check_source(path: str, data: bytes, rules: Sequence[Rule] | None = None) -> FileResult:
    """Check one file's bytes with ``rules`` (default: every rule) and return its findings.

    A file that cannot be decoded or parsed yields one ``ACC000`` finding with the position
    of the problem. A rule that raises is recorded in ``internal_errors`` and the other
    rules still run.
    """
    rules = list(ALL_RULES_INSTANCES if rules is None else rules)
    result = FileResult(path)
    try:
        text = decode_source(data)
    except SyntaxError as exc:  # unknown encoding in the coding line
        result.findings.append(_parse_error(path, exc.lineno or 1, 1, str(exc.msg if exc.msg else exc)))
        return result
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        result.findings.append(_parse_error(path, line, column, f"undecodable bytes ({exc.reason})"))
        return result
    if not rules or not _relevant(data, rules):
        # no selected rule can fire on this file: the interpreter's own parser (an order of
        # magnitude faster than LibCST's) is enough to report a file that does not parse
        error = _interpreter_syntax_error(text)
        if error is not None:
            result.findings.append(_parse_error(path, *error))
        return result
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        line, column, reason = _syntax_error_position(text, exc)
        result.findings.append(_parse_error(path, line, column, f"syntax error: {reason}"))
        return result
    except RecursionError:
        result.findings.append(_parse_error(path, 1, 1, "nesting too deep for the parser"))
        return result
    try:
        model = build_model(module)
    except RecursionError:
        result.findings.append(_parse_error(path, 1, 1, "nesting too deep to analyse"))
        return result
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
        result.internal_errors.append(f"{path}: internal error while modelling the file: {exc!r}")
        return result
    hits: list[tuple[Rule, Hit]] = []
    for rule in rules:
        try:
            hits.extend((rule, hit) for hit in rule.check(model))
        except Exception as exc:  # noqa: BLE001
            result.internal_errors.append(
                f"{path}: internal error in {rule.code} ({exc!r}); please report it with this file"
            )
    if not hits:
        return result
    # positions cost a full code generation: only files with findings pay for them
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    findings: list[Finding] = []
    for rule, hit in hits:
        where = positions[hit.node]
        findings.append(
            Finding(
                path=path,
                line=where.start.line,
                column=where.start.column + 1,
                code=rule.code,
                name=rule.name,
                severity=rule.severity,
                message=hit.message,
                fix=hit.fix,
                end_line=where.end.line,
                end_column=where.end.column + 1,
                url=rule.url(),
            )
        )
    result.findings = sorted(set(apply_noqa(findings, text)))
    kept = set(result.findings)
    result.suppressed = [f for f in findings if f not in kept]
    return result


ALL_RULES_INSTANCES: tuple[Rule, ...] = tuple(rule_cls() for rule_cls in ALL_RULES)


def rules_for(codes: Iterable[str]) -> list[Rule]:
    """The rule instances for a set of selected codes (unknown codes are ignored here)."""
    wanted = set(codes)
    return [rule for rule in ALL_RULES_INSTANCES if rule.code in wanted]
