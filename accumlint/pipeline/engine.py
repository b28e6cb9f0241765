"""One file through the pipeline: bytes → text → LibCST tree → group model → rules → findings.

Most files of a large repository hold no training loop, so two cheap stages come first:

1. :func:`may_fire` reads the undecoded bytes: unless one of the selected rules' markers
   (:class:`~accumlint.checks.gate.RuleGate`) is called or defined in the code there (strings
   and comments excluded), the file is done, neither decoded nor parsed (it gets no
   ``ACC000`` either: no rule needed to read it).
2. The interpreter's own parser (``ast``, an order of magnitude faster than LibCST's)
   reports a file that does not parse, and each selected rule's gate decides from the names
   of its code (:mod:`accumlint.source.source_facts`) whether it can fire there — unless the file
   may run events through another module's code (a project helper, a summarized library
   function), which the file's own names cannot judge.

Only then does LibCST parse the file for the model and the rules. Everything that can go
wrong with one file (undecodable bytes, a syntax error, a rule that crashes) is reported
for that file and never stops the run.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import gc
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.checks import ALL_RULES
from accumlint.checks.base import Hit, Rule
from accumlint.files.reading import MAX_SOURCE_BYTES, decode_source
from accumlint.heap import MEMORY_LIMIT
from accumlint.model import FileModel, LoopStyle, build_model, summaries
from accumlint.model.events import BACKWARD_CALLS, CLIP_CALLS
from accumlint.model.names import forget_walks
from accumlint.noqa.suppression import apply_noqa, apply_noqa_where_it_happens
from accumlint.pipeline import byte_stage
from accumlint.pipeline.byte_stage import Vocabulary, later_stage
from accumlint.pipeline.kept_blocks import KEPT_BLOCKS_FROM_BYTES, blank_rows, kept_text
from accumlint.pipeline.placement import place
from accumlint.pipeline.run_context import ALONE, RunContext
from accumlint.source.parsing import (
    INTERPRETER_FIRST_ABOVE,
    MAX_CHAIN,
    TOO_DEEP,
    parse_module,
)
from accumlint.source.parsing import interpreter_parse as _interpreter_parse
from accumlint.source.parsing import longest_chain as _longest_chain
from accumlint.source.parsing import may_chain as _may_chain
from accumlint.source.parsing import nests_deep as _nests_deep
from accumlint.source.parsing import syntax_error_position as _syntax_error_position
from accumlint.source.prefilter import marker_search
from accumlint.source.source_facts import source_facts
from accumlint.spec.findings import Finding, LoopVerdict, Severity
from accumlint.spec.registry import PARSE_ERROR_CODE, PARSE_ERROR_NAME, PARSE_ERROR_URL

if TYPE_CHECKING:
    from accumlint.files.text_edits import SuggestedFix
    from accumlint.project import ProjectIndex


@dataclass
class FileResult:
    """What checking one file produced: findings (noqa applied), the findings that ``# noqa``
    suppressed, internal errors (rule crashes) and whether the file was fully checked."""

    path: str
    findings: list[Finding] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    #: why the file was not fully checked beyond its internal errors: each a stage after the rules
    #: that failed (its findings are kept, only that stage's part is missing: a fix, a ``noqa``)
    incomplete: list[str] = field(default_factory=list)
    suppressed: list[Finding] = field(default_factory=list)  # removed by noqa directives
    #: project files the model followed calls into: path → SHA-256 of the bytes it read
    dependencies: dict[str, str] = field(default_factory=dict)
    #: each finding's own fix, where the check was asked for them (None: it was not)
    fixes: dict[Finding, SuggestedFix] | None = None
    #: each accumulation loop the simulator found in the file, with its undecided reasons (empty:
    #: decided): :func:`accumlint.model.simulation.loop_verdicts`, for ``--statistics``
    loops: list[LoopVerdict] = field(default_factory=list)

    @property
    def fully_checked(self) -> bool:
        """Whether every stage of the file's check ran to its end (no internal error, nothing incomplete)."""
        return not self.internal_errors and not self.incomplete


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


def _not_parsed(path: str, line: int, column: int, reason: str) -> Finding:
    """The ``ACC000`` of a valid file that the checks could not read (not a syntax error: nothing
    for the user to make valid)."""
    return dataclasses.replace(_parse_error(path, line, column, reason),
                               fix="check the file with another tool, or exclude it; please report it")


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "no reason given"


#: The markers of the calls that make a backward event: where one is used in the code the
#: file goes straight to LibCST (it most likely holds a loop every loop rule reads).
_BACKWARD_MARKERS = tuple(sorted(name.encode() for name in BACKWARD_CALLS))


#: the calls that make a module's functions worth following from another module: a backward,
#: a gradient reset or a clip (a helper that performs one of them)
_HELPER_MARKERS = tuple(sorted({*_BACKWARD_MARKERS, b"zero_grad", *(name.encode() for name in CLIP_CALLS),
                                 *(name.encode() for name in fw.pytorch.WRAPPER_CONSTRUCTOR_NAMES),
                                 *(name.encode() for name in fw.pytorch.TOKEN_LOSS_CALLS)}))


#: what a helper must call for a file calling it to pass the prefilter: a backward, reset or
#: clip (a token loss or a data-parallel wrapper matters only to a file with a backward of its own)
EVENT_MARKERS = tuple(sorted(set(_HELPER_MARKERS) - {name.encode() for name in fw.pytorch.TOKEN_LOSS_CALLS}
                              - {name.encode() for name in fw.pytorch.WRAPPER_CONSTRUCTOR_NAMES}))


def vocabulary() -> Vocabulary:
    """What the byte stage reads of the registered rules and of the model's call tables
    (:mod:`accumlint.pipeline.byte_stage`; rebuilt where a test swaps the registry or the summaries)."""
    return _vocabulary(ALL_RULES_INSTANCES, tuple(summaries.LIBRARY_SUMMARIES))


@functools.lru_cache(maxsize=8)
def _vocabulary(rules: tuple[Rule, ...], summarized: tuple[str, ...]) -> Vocabulary:
    return Vocabulary(rules, _BACKWARD_MARKERS, _HELPER_MARKERS, EVENT_MARKERS, summarized)


def performs_events(data: bytes) -> bool:
    """Whether ``data`` calls a backward, reset or clip (:data:`EVENT_MARKERS`)."""
    return byte_stage.performs_events(data, vocabulary())


def backward_used(data: bytes) -> bool:
    """Whether the code of ``data`` calls a backward, a gradient reset or a clip
    (:data:`_HELPER_MARKERS`): its functions may perform them for a caller in another module."""
    return byte_stage.backward_used(data, vocabulary())


def _calls_out(path: str | None, data: bytes, project: ProjectIndex | None) -> bool:
    """:func:`accumlint.pipeline.byte_stage.calls_out` with the registered rules."""
    return byte_stage.calls_out(path, data, vocabulary(), project)


def _calls_backward(used: set[bytes]) -> bool:
    """Whether the markers a file's code uses include one of :data:`_BACKWARD_MARKERS`."""
    return not used.isdisjoint(_BACKWARD_MARKERS)


def may_fire(data: bytes, rules: Sequence[Rule], *, in_strings: bool = False, path: str | None = None,
             project: ProjectIndex | None = None) -> bool:
    """The byte-level prefilter: whether any of ``rules`` can fire on a file with these bytes.

    True when a rule has no markers; otherwise when, for one of the rules, one of its markers
    is called or defined somewhere in the code (:mod:`accumlint.source.prefilter`: strings and
    comments excluded) and the bytes match its :attr:`~accumlint.checks.base.Rule.requires`
    pattern, if any. Works on the undecoded bytes:
    Python source encodings are ASCII-compatible and markers are ASCII names, so a file is
    never dropped for its encoding (a multibyte encoding can only add false matches).
    ``in_strings``: uses in strings and comments count too (a notebook's JSON). ``path``: the
    file's path; in ``project`` (:mod:`accumlint.project`) a file that names a project
    function or class whose module calls a backward counts as calling one.
    (:func:`accumlint.pipeline.byte_stage.may_fire` with the registered rules' :func:`vocabulary`.)
    """
    return byte_stage.may_fire(data, rules, vocabulary(), in_strings=in_strings, path=path, project=project)


def _rules_in_bytes(data: bytes, rules: Sequence[Rule], used: set[bytes]) -> list[Rule]:
    """The rules of ``rules`` that may fire on ``data``, whose code uses the markers ``used``."""
    return byte_stage.rules_in_bytes(data, rules, used, vocabulary())


def _marker_bytes(rules: tuple[Rule, ...]) -> tuple[bytes, ...]:
    """:func:`accumlint.pipeline.byte_stage.marker_bytes` with the registered rules' vocabulary."""
    return byte_stage.marker_bytes(rules, vocabulary())


def _screen_markers(rules: tuple[Rule, ...]) -> tuple[bytes, ...]:
    """:func:`accumlint.pipeline.byte_stage.screen_markers` with the registered rules' vocabulary."""
    return byte_stage.screen_markers(rules, vocabulary())


#: The peak memory of checking a file, per byte of source: LibCST's tree plus the model
#: (measured on torch 2.13.0's distributed_test.py, 462 KB: 187 MB on top of the process).
PARSE_MEMORY_PER_BYTE = 400
#: The same per node of the interpreter's tree, where the cheap stages built one: closer than
#: per byte, which varies with the share of comments and docstrings (measured on transformers
#: 5.23.0's trainer.py, training_args.py, modeling_reformer.py, trainer_pt_utils.py and
#: testing_utils.py and on torch 2.13.0's distributed_test.py and _tensor.py: 2,040 to 2,500
#: bytes per node, 115 to 315 per source byte).
PARSE_MEMORY_PER_NODE = 2600
#: The peak memory of the stages before LibCST, per byte of source: the text and the ``ast``
#: tree (measured on transformers 5.23.0's trainer.py and testing_utils.py: 57 and 64).
SCREEN_MEMORY_PER_BYTE = 80
def check_source(path: str, data: bytes, rules: Sequence[Rule] | None = None, context: RunContext = ALONE, *,
                 suggest: bool = False, blank: Sequence[tuple[int, int]] = ()) -> FileResult:
    """Check one file's bytes with ``rules`` (default: every rule) and return its findings.

    A file that cannot be decoded or parsed yields one ``ACC000`` finding with the position
    of the problem, unless the prefilter shows that no rule of ``rules`` can fire on it
    (then it is not decoded or parsed at all); a file over :data:`MAX_SOURCE_BYTES` gets an
    ``ACC000`` that says so instead of being parsed. A file that parses, but where none of
    ``rules`` admits (:meth:`RuleGate.admits` on its :mod:`~accumlint.source.source_facts`), is not
    given to LibCST. With no rules (only ``ACC000`` selected) every file is decoded and
    parsed by the running interpreter's parser: a syntax check. A rule that raises is recorded
    in ``internal_errors`` and the other rules still run. ``context``: the run's project
    (whose modules the model follows) and switches. ``suggest`` (or the context's): the
    result's :attr:`~FileResult.fixes` are computed (:func:`accumlint.fixes.propose.suggest_in_check`).
    ``blank``: rows (1-based, inclusive) that LibCST does not read, blanked once the gates have
    judged the whole file (a fix's re-check of what its edit can affect: :mod:`accumlint.run.fix_scope`).
    """
    with _collector_paused():
        verdict = _screen(path, data, rules, context.project, blank)
        if isinstance(verdict, FileResult):
            return verdict
        return _check_text(path, verdict, context, data if suggest or context.suggest else None)


@dataclass(frozen=True)
class Screened:
    """A file the cheap stages pass on to LibCST: its text, the rules that apply to it and,
    where the interpreter's tree was built, the estimated peak memory (bytes) of the rest
    (:data:`PARSE_MEMORY_PER_NODE`; None: estimate from the size)."""

    text: str
    rules: tuple[Rule, ...]
    memory: int | None = None
    #: the file's whole text where :attr:`text` leaves definitions out (:mod:`accumlint.pipeline.kept_blocks`)
    original: str | None = None


def screen(path: str, data: bytes, rules: Sequence[Rule] | None = None, context: RunContext = ALONE,
           ) -> FileResult | Screened:
    """The stages of :func:`check_source` before LibCST: the file's final result when they
    decide it (no rule's gate admits it, or ``ACC000``), else what LibCST has to check. Takes about
    :data:`SCREEN_MEMORY_PER_BYTE` (the ``ast`` tree), not :data:`PARSE_MEMORY_PER_BYTE`."""
    with _collector_paused():
        return _screen(path, data, rules, context.project)


def check_screened(path: str, screened: Screened, data: bytes | None = None, context: RunContext = ALONE,
                   ) -> FileResult:
    """LibCST, the model and the rules on a file that :func:`screen` passed on (the rest of
    :func:`check_source`), in ``context``; with the file's ``data`` and the context's
    ``suggest``, its fixes too."""
    with _collector_paused():
        return _check_text(path, screened, context, data if context.suggest else None)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for one file (unless it already was).

    Neither LibCST's tree nor the model holds a reference cycle (tests/model/test_model.py), so
    reference counting frees a file's objects; while a large tree is being built the
    collector would only walk it again and again (measured: ~15 % of the parse).
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _screen(path: str, data: bytes, rules: Sequence[Rule] | None, project: ProjectIndex | None,
            blank: Sequence[tuple[int, int]] = ()) -> FileResult | Screened:
    rules = list(ALL_RULES_INSTANCES if rules is None else rules)
    result = FileResult(path)
    outside = False
    if rules:
        used = marker_search(_screen_markers(tuple(rules))).used(data)
        outside = _calls_out(path, data, project)
        if outside:
            used |= set(_screen_markers(ALL_RULES_INSTANCES))
        rules = _rules_in_bytes(data, rules, used)
        if not rules:
            return result  # no selected rule can fire here: the file is neither decoded nor parsed
    if len(data) > MAX_SOURCE_BYTES:
        size, limit = len(data) / 2**20, MAX_SOURCE_BYTES / 2**20
        result.findings.append(_parse_error(path, 1, 1, f"file too large to parse ({size:.1f} MiB > {limit:.0f} MiB)"))
        return result
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
    nul = text.find("\0")
    if nul >= 0:  # the interpreter rejects a NUL byte anywhere (LibCST accepts one in a comment)
        line, column = _line_and_column(text, nul)
        result.findings.append(_parse_error(path, line, column, f"syntax error: {NUL_BYTE}"))
        return result
    large = len(data) >= INTERPRETER_FIRST_ABOVE
    # the gates judge this file's own code: where it may run events through another module's
    # code (``outside``) every rule its bytes admit goes on to LibCST
    gated = bool(rules) and not outside
    deep = _nests_deep(data)
    # the interpreter's parser (an order of magnitude faster than LibCST's) reads every file
    # first: its verdict is the one that counts, and its nesting limits keep what it gives up
    # on (a 60 KB chain of ``2**``: LibCST would take 4 GB) away from LibCST
    tree = _interpreter_parse(text)
    if isinstance(tree, tuple):
        if rules and not (large or deep) and tree[2] != TOO_DEEP and (outside or _calls_backward(used)):
            # perhaps syntax newer than this interpreter's (PEP 695 on 3.11) in a training loop
            # or in code other modules' events run through: LibCST reads it, and reports a real
            # syntax error at the interpreter's position
            return Screened(text, tuple(rules))
        result.findings.append(_parse_error(path, *tree))
        return result
    facts = None
    if gated:
        facts = source_facts(tree, data)
        rules = [rule for rule in rules if rule.gate.admits(facts)]
        if not rules:
            return result  # no selected rule can fire on this code
    if not rules:
        return result  # a syntax check: the interpreter's parser decided
    if large and _may_chain(data) and _longest_chain(tree) > MAX_CHAIN:
        result.findings.append(_parse_error(path, 1, 1, f"an expression of more than {MAX_CHAIN} operands"))
        return result
    memory = PARSE_MEMORY_PER_NODE * (facts.nodes if facts is not None else sum(1 for _ in ast.walk(tree)))
    kept = None
    if len(data) >= KEPT_BLOCKS_FROM_BYTES and not any(rule.gate.everywhere for rule in rules) and not blank:
        kept = kept_text(tree, text, _anchors(tuple(rules), outside, project))
    if blank:
        kept = blank_rows(kept or text, blank)
    if kept is not None:  # LibCST reads the definitions a rule may need, the rest is blank
        memory = memory * _code_bytes(kept) // max(1, _code_bytes(text))
        return _within_memory(path, Screened(kept, tuple(rules), memory, original=text))
    del tree
    return _within_memory(path, Screened(text, tuple(rules), memory))


#: what the interpreter says of a NUL byte in source code
NUL_BYTE = "source code string cannot contain null bytes"


def _line_and_column(text: str, offset: int) -> tuple[int, int]:
    """The 1-based line and column (code points) of ``text[offset]``."""
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _within_memory(path: str, screened: Screened) -> Screened | FileResult:
    """``screened``, or ``ACC000`` where its estimated memory is more than twice a worker's
    limit (:data:`~accumlint.heap.MEMORY_LIMIT`: it would run out, after seconds of work; near
    the limit the estimate is too rough to refuse on, and the limit decides)."""
    if screened.memory is None or screened.memory <= 2 * MEMORY_LIMIT:
        return screened
    needed, limit = screened.memory / 2**30, MEMORY_LIMIT / 2**30
    reason = f"too large to check (LibCST would need about {needed:.1f} GiB of memory, more than {limit:g} GiB)"
    return FileResult(path, findings=[_parse_error(path, 1, 1, reason)])


def _anchors(rules: tuple[Rule, ...], outside: bool, project: ProjectIndex | None) -> frozenset[str]:
    """The names whose use makes a definition one the model reads (:mod:`accumlint.pipeline.kept_blocks`):
    the rules' markers and, for a file that may run events through other code (``outside``),
    ``project``'s followed names, the library functions a table row describes and timm's
    loss-scaler gate keywords."""
    names = {marker.decode() for marker in _screen_markers(rules)}
    if outside:
        if project is not None:
            names |= {name.decode() for name in project.followed_names()}
        names |= {part for name in summaries.LIBRARY_SUMMARIES for part in name.split(".")}
        names |= set(fw.timm.LOSS_SCALER_CONVENTION)
    return frozenset(names)


def _code_bytes(text: str) -> int:
    """The characters of ``text`` that are not line ends (a blanked line has none)."""
    return len(text) - text.count("\n")


def _check_text(path: str, screened: Screened, context: RunContext, data: bytes | None = None,
                ) -> FileResult:
    """:func:`_checked_text`, and the module walks it kept dropped (its trees go with them)."""
    try:
        return _checked_text(path, screened, context, data)
    finally:
        forget_walks()


def _checked_text(path: str, screened: Screened, context: RunContext, data: bytes | None = None,
                  ) -> FileResult:
    """The LibCST stages on what :func:`_screen` passed on, the model following the modules of
    the ``context``'s project, its ``noqa`` directives applied unless the context ignores them;
    with the file's ``data``, the fixes
    its findings' rules propose as well (not verified: :func:`accumlint.run.suggested_fixes.verify`)."""
    text, rules = screened.text, screened.rules
    result = FileResult(path)
    try:
        module = parse_module(text)
    except cst.ParserSyntaxError as exc:
        position = _syntax_error_position(text, exc)
        if position is None:  # the interpreter compiles it: not a syntax error, a limit of LibCST's
            reason = f"LibCST cannot parse this file, which Python compiles ({_first_line(exc.message)})"
            result.findings.append(_not_parsed(path, exc.raw_line, exc.raw_column + 1, reason))
        else:
            result.findings.append(_parse_error(path, position[0], position[1], f"syntax error: {position[2]}"))
        return result
    except RecursionError:
        result.findings.append(_parse_error(path, 1, 1, "nesting too deep for the parser"))
        return result
    project = context.project
    view = project.view(path) if project is not None else None
    try:
        model = build_model(module, view)
    except RecursionError:
        result.findings.append(_parse_error(path, 1, 1, "nesting too deep to analyse"))
        return result
    except Exception as exc:  # noqa: BLE001 - one bad file must not stop the run
        result.internal_errors.append(f"{path}: internal error while modelling the file: {exc!r}")
        return result
    if any(group.style is LoopStyle.GATED for group in model.loops):
        later_stage(result.incomplete, "the simulated groups", model.settle_groups, None)
    hits: list[tuple[Rule, Hit]] = []
    for rule in rules:
        try:
            hits.extend((rule, hit) for hit in rule.check(model))
        except Exception as exc:  # noqa: BLE001
            result.internal_errors.append(
                f"{path}: internal error in {rule.code} ({exc!r}); please report it with this file"
            )
    result.loops = later_stage(result.incomplete, "the count of accumulation loops", lambda: _loops(model), [])
    if view is not None:
        result.dependencies = dict(view.used)  # the model read these project files
    if not hits:
        return result
    try:
        placed = place(path, text, module, model, hits)
    except RecursionError:  # the findings have no position to be reported at
        result.findings.append(_parse_error(path, 1, 1, "nesting too deep to place the findings"))
        return result
    findings = [finding for finding, _ in placed]
    # a directive that cannot be read suppresses nothing: every finding stays
    unsuppressed = later_stage(result.incomplete, "the `noqa` directives",
                               lambda: apply_noqa_where_it_happens(
                                   apply_noqa(findings, screened.original or text, ignore=context.ignore_noqa),
                                   _text_of, ignore=context.ignore_noqa), findings)
    result.findings = sorted(set(unsuppressed))
    kept = set(result.findings)
    result.suppressed = [f for f in findings if f not in kept]
    if data is not None:
        from accumlint.fixes.propose import suggest_in_check

        result.fixes = later_stage(result.incomplete, "the fixes", lambda: suggest_in_check(
            text, module, dict(placed), result.findings, screened.original), {})
    return result


def _loops(model: FileModel) -> list[LoopVerdict]:
    # the simulations the trace rules ran (computed here where no rule needed them)
    from accumlint.model.simulation import loop_verdicts

    return loop_verdicts(model.simulations)


ALL_RULES_INSTANCES: tuple[Rule, ...] = tuple(rule_cls() for rule_cls in ALL_RULES)


def rules_for(codes: Iterable[str]) -> list[Rule]:
    """The rule instances for a set of selected codes (unknown codes are ignored here)."""
    wanted = set(codes)
    return [rule for rule in ALL_RULES_INSTANCES if rule.code in wanted]


def _text_of(path: str) -> str | None:
    """Another project file's text, for the directives at a finding's related location."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SOURCE_BYTES + 1)
        return decode_source(data) if len(data) <= MAX_SOURCE_BYTES else None
    except (OSError, ValueError, SyntaxError):
        return None

