"""A fix's re-check reads only the definitions its edit can affect.

Verifying a fix (:func:`accumlint.run.apply_fixes.judge`) needs the findings of the fixed file. A
fix edits one definition; the findings it can change are those of the definitions whose model
includes the edited one: the edited definitions and, up to a fixed point, every definition that
names what one of them defines (a function, a class, a method, an attribute it assigns, or a name
bound to one of those: the model may inline the call or read the role). The others keep the
findings they had before, moved by whole rows.

The unit is a definition at the top level (a class with its methods: a framework calls its
hooks by their names, an instance calls its ``forward``), read as :mod:`accumlint.pipeline.kept_blocks`
reads one. The re-check (:meth:`Baseline.findings`) keeps the region (those definitions and
every statement of the module's own), what the region names (its callees, transitively: the
model of the region is the model of the whole file, as in :mod:`accumlint.pipeline.kept_blocks`), and
blanks the rest, line for line. A definition the region calls that held a finding before joins
the region, with its own callers: a finding placed there may be the region's. The whole file is
checked again instead where the restriction cannot be shown equal:

- the edit reaches the module's own statements, or adds, removes or renames a definition;
- the region is every definition (nothing to blank);
- the re-check reports a finding (or ``ACC000``) outside the region, or a finding kept from
  before has a related location that cannot be moved.

``tests/report/test_fix_scope.py`` holds the restricted verdicts equal to the whole file's on every
catalogue example and on the metamorphic matrix.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accumlint.files.text_edits import split_lines
from accumlint.pipeline.kept_blocks import Block, definition_rows, read_block, top_blocks
from accumlint.pipeline.run_context import ALONE, RunContext
from accumlint.spec import PARSE_ERROR_CODE
from accumlint.spec.findings import Finding

if TYPE_CHECKING:
    from accumlint.checks.base import Rule


class Baseline:
    """A checked text and its findings, against which fixed versions of it are re-checked.

    ``text``: the text that was checked (decoded); ``findings``: its findings (every code the
    re-check's rules report); ``context``: the run's it was checked in, the re-checks' too.
    Reads ``text``'s definitions once, lazily."""

    def __init__(self, text: str, findings: Sequence[Finding], context: RunContext = ALONE) -> None:
        self.text = text
        self.findings = list(findings)
        self.context = context
        self._read: _Read | None | bool = False
        #: how the last :meth:`check` went: "restricted", or why the whole file was checked
        self.last = ""

    def _before(self) -> _Read | None:
        if self._read is False:
            self._read = _read(self.text)
        return self._read  # type: ignore[return-value]

    def check(self, path: str, fixed: str, encoding: str, rules: Sequence[Rule]) -> list[Finding]:
        """The findings of ``fixed`` (a fixed version of :attr:`text`, written back in
        ``encoding``) with ``rules``: the region's from a re-check of the definitions the edit can
        affect, the rest's from :attr:`findings`; the whole file's check where that cannot be
        shown equal (:attr:`last` says why). Equal to ``engine.check_source(...).findings``."""
        from accumlint.pipeline import engine

        data = fixed.encode(encoding)
        scope = self._scope(fixed)
        if isinstance(scope, str):
            self.last = scope
            return engine.check_source(path, data, rules, self.context).findings
        blanked, region, carried = scope
        found = engine.check_source(path, data, rules, self.context, blank=blanked).findings
        outside = [f for f in found if f.code == PARSE_ERROR_CODE or not _inside(f.line, region)]
        if outside:
            self.last = f"the re-check reported {outside[0].code} outside the definitions it re-read"
            return engine.check_source(path, data, rules, self.context).findings
        self.last = "restricted"
        return sorted(set(found) | set(carried))

    def _scope(self, fixed: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[Finding]] | str:
        """``(rows to blank, rows of the region, the findings kept from before, moved)`` of the
        fixed text, or why the whole file is checked instead."""
        before = self._before()
        after = _read(fixed, before)
        if before is None or after is None:
            return "a text does not parse"
        if before.own != after.own:
            return "the edit reaches the module's own statements"
        if [_signature(b) for b in before.blocks] != [_signature(b) for b in after.blocks]:
            return "the edit adds, removes or renames a definition"
        old, new = before.blocks, after.blocks
        edited = {i for i in range(len(new)) if before.rows(old[i]) != after.rows(new[i])}
        if not edited:
            return "the edit changes no definition"
        region = _up(new, edited, before.binds)
        while True:  # a callee that held a finding joins the region, with its callers
            kept = _down(new, region, before.names)
            holders = {i for i in kept - region if any(_inside(f.line, [_rows(old[i])]) for f in self.findings)}
            if not holders:
                break
            region = _up(new, region | holders, before.binds)
        if len(region) == len(new):
            return "the edit can affect every definition"
        shift = {i: new[i].first - old[i].first for i in range(len(new)) if i not in region}
        carried = []
        for finding in self.findings:
            block = _block_at(old, finding.line)
            if block is None or block in region:
                continue  # the region's and the module's own statements' come from the re-check
            moved = _moved(finding, old, shift)
            if moved is None:
                return "a finding kept from before has a related location that cannot be moved"
            carried.append(moved)
        blanked = [_rows(new[i]) for i in range(len(new)) if i not in kept]
        return blanked, [_rows(new[i]) for i in region] + _top_rows(new, fixed), carried


@dataclass
class _Read:
    """What a re-check needs of a text: its top-level blocks (:class:`Block`), the text outside them
    (the module's own statements and comments), what those statements name and bind."""

    lines: list[str]
    blocks: list[Block]
    own: str
    names: set[str]
    binds: dict[str, set[str]]

    def rows(self, block: Block) -> str:
        """The text of ``block``'s rows."""
        return "".join(self.lines[block.first - 1:block.last])


def _read(text: str, like: _Read | None = None) -> _Read | None:
    """:class:`_Read` of ``text`` (None: it does not parse). ``like``: a read of a text this one
    is a fixed version of: a definition whose rows are the same text is not scanned again, and
    the module's own names are not read (they are ``like``'s where :attr:`_Read.own` is equal)."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = split_lines(text)
    if like is None:
        blocks, names, binds = top_blocks(tree)
        return _Read(lines, blocks, _own(lines, blocks), names, binds)
    known = {(_signature(b), like.rows(b)): b for b in like.blocks}
    blocks = []
    for statement in tree.body:
        rows = definition_rows(statement)
        if rows is None:
            continue
        source = "".join(lines[rows[0] - 1:rows[1]])
        same = known.get((_signature_of(statement), source))
        found = read_block(statement) if same is None else dataclasses.replace(
            same, node=statement, first=rows[0], last=rows[1])
        blocks.append(found)  # type: ignore[arg-type]
    return _Read(lines, blocks, _own(lines, blocks), set(), {})


def _own(lines: list[str], blocks: list[Block]) -> str:
    """The rows outside ``blocks``."""
    inside = {row for b in blocks for row in range(b.first - 1, b.last)}
    return "".join(line for row, line in enumerate(lines) if row not in inside)


def _signature(block: Block) -> tuple[str, str]:
    return _signature_of(block.node)


def _signature_of(node: ast.stmt) -> tuple[str, str]:
    return type(node).__name__, getattr(node, "name", "")


def _rows(block: Block) -> tuple[int, int]:
    return block.first, block.last


def _inside(line: int, spans: Iterable[tuple[int, int]]) -> bool:
    return any(first <= line <= last for first, last in spans)


def _top_rows(blocks: list[Block], text: str) -> list[tuple[int, int]]:
    """The rows of ``text`` outside every block: the module's own statements (and blank lines)."""
    rows, start = [], 1
    for block in blocks:
        if block.first > start:
            rows.append((start, block.first - 1))
        start = block.last + 1
    rows.append((start, max(start, text.count("\n") + 1)))
    return rows


def _block_at(blocks: list[Block], line: int) -> int | None:
    return next((i for i, block in enumerate(blocks) if block.first <= line <= block.last), None)


def _moved(finding: Finding, old: list[Block], shift: dict[int, int]) -> Finding | None:
    """``finding`` (of a block outside the region) moved by its block's shift, its related
    locations in this file by theirs; None where one lies outside those blocks."""
    block = _block_at(old, finding.line)
    delta = shift[block]  # type: ignore[index]
    related = []
    for where, line, column in finding.related:
        if where == finding.path:
            other = _block_at(old, line)
            if other is None or other not in shift:
                return None
            line += shift[other]
        related.append((where, line, column))
    end_line = finding.end_line + delta if finding.end_line else 0
    return dataclasses.replace(finding, line=finding.line + delta, end_line=end_line, related=tuple(related))


def _up(blocks: list[Block], seeds: set[int], top_binds: dict[str, set[str]]) -> set[int]:
    """``seeds`` and every block that names what one of them defines, to a fixed point (a name
    bound to a defined one counts as defined: ``step = gated``, ``self.fn = helper``)."""
    users: dict[str, list[int]] = {}
    for i, block in enumerate(blocks):
        for name in block.names:
            users.setdefault(name, []).append(i)
    carried: dict[str, set[str]] = {}
    for binds in [top_binds, *(block.binds for block in blocks)]:
        for bound, value in binds.items():
            for name in value:
                carried.setdefault(name, set()).add(bound)
    return _closure(seeds, [name for i in seeds for name in blocks[i].defines], users,
                    lambda i: blocks[i].defines, carried)


def _down(blocks: list[Block], region: set[int], top_names: set[str]) -> set[int]:
    """``region`` and every block that defines a name that a kept block or the module's own
    statements name, to a fixed point: what the model of the region can read."""
    definers: dict[str, list[int]] = {}
    for i, block in enumerate(blocks):
        for name in block.defines:
            definers.setdefault(name, []).append(i)
    return _closure(region, [*top_names, *(name for i in region for name in blocks[i].names)], definers,
                    lambda i: blocks[i].names, {})


def _closure(start: set[int], names: list[str], blocks_of: dict[str, list[int]],
             names_of: Callable[[int], Iterable[str]], carried: dict[str, set[str]]) -> set[int]:
    """``start`` and the blocks that ``names`` reach through ``blocks_of`` (name → blocks), each
    block added bringing its ``names_of`` and each name the ones ``carried`` with it, to a
    fixed point."""
    region = set(start)
    pending = list(names)
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        pending.extend(carried.get(name, ()))
        for i in blocks_of.get(name, ()):
            if i not in region:
                region.add(i)
                pending.extend(names_of(i))
    return region
