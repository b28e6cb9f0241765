"""``accumlint explain FILE[:LINE]``: what the simulator makes of a file's training loops.

Per entry point (a loop that reaches a backward, or an implicit microbatch body), per
configuration: the timeline of the simulated run the way the runtime guard prints groups, the
roles with their evidence, where A comes from, the run-level choices taken, and every reason
that leaves the entry undecided (``shared/docs/semantic-core.md`` section 6). It is the window
on "why is it silent here?".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from accumlint.files.reading import NotARegularFile, decode_source, read_source, source_limit
from accumlint.model.interpreter import is_budget
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.positions import node_positions
from accumlint.model.simulation import Simulation, entry_points, simulate
from accumlint.project.index import find_root
from accumlint.run import runner
from accumlint.source.parsing import parse_module
from accumlint.spec.vocabulary import EventKind


class ExplainError(Exception):
    """The file cannot be explained: it cannot be read or parsed (the message says why)."""


@dataclass(frozen=True)
class Target:
    """``FILE[:LINE]`` as given: ``line`` None means every entry point of the file."""

    path: str
    line: int | None

    @classmethod
    def parse(cls, text: str) -> Target:
        """``train.py`` or ``train.py:42`` (a path that exists as given wins over the split)."""
        head, sep, tail = text.rpartition(":")
        if sep and tail.isdigit() and not os.path.exists(text):
            return cls(head, int(tail))
        return cls(text, None)


def explain(target: Target) -> list[Simulation]:
    """The simulations of ``target``'s file (following the project modules it imports): every
    entry point, or only those whose loop holds ``target.line`` (else the nearest one).

    Raises :class:`ExplainError` when the file cannot be read or parsed."""
    path = os.path.abspath(target.path)
    try:
        data, _ = read_source(path, source_limit(path))
    except (OSError, NotARegularFile) as exc:
        raise ExplainError(f"{target.path}: cannot read it ({exc})") from None
    return explain_source(target.path, data, target.line, find_root(path, os.getcwd()))


def explain_source(path: str, data: bytes, line: int | None, project_root: str | None,
                   exact: bool = False) -> list[Simulation]:
    """:func:`explain` on ``data`` as the file ``path`` (an editor's unsaved text); the project
    modules it imports are read from ``project_root``'s tree (None: the file alone). ``exact``:
    only an entry point whose loop starts on ``line`` (an editor's hover), else nothing.

    Raises :class:`ExplainError` when ``data`` cannot be parsed."""
    try:
        module = parse_module(decode_source(data))
    except Exception as exc:  # noqa: BLE001 — LibCST's ParserSyntaxError and decoding errors
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ExplainError(f"{path}: cannot parse it ({first})") from None
    absolute = os.path.abspath(path)
    view = runner.file_index(absolute, data, project_root).view(absolute) if project_root is not None else None
    functions = ModuleFunctions(module, view)
    entries = entry_points(functions)
    if line is not None and entries:
        spans = node_positions(module, [e.node for e in entries])
        if exact:
            return simulate(functions, path, [e for e in entries if e.node in spans
                                              and spans[e.node].start.line == line][:1]) \
                if any(e.node in spans and spans[e.node].start.line == line for e in entries) else []
        holding = [e for e in entries if e.node in spans and spans[e.node].start.line <= line <= spans[e.node].end.line]
        if holding:
            entries = [min(holding, key=lambda e: spans[e.node].end.line - spans[e.node].start.line)]
        else:
            entries = [min(entries, key=lambda e: abs(spans[e.node].start.line - line) if e.node in spans else 1 << 30)]
    results = simulate(functions, path, entries)
    note_check_budget(results, simulate(ModuleFunctions(module, view), path, judged_only=True))
    return results


def note_check_budget(explained: list[Simulation], checked: list[Simulation]) -> None:
    """Say on each of ``explained`` (``explain``'s simulations, 150,000 statements per entry point)
    that a budget leaves undecided in ``checked`` (``check``'s of the same file, 5,000 per entry and
    12,000 per file) but not in its own runs: ``check`` is silent on it for want of statements, not
    for what the code leaves open."""
    budgets = {id(result.entry.node): [m for m in map(_CHECK_BUDGET.search, result.reasons()) if m]
               for result in checked if result.caller is None and not result.importer}
    for result in explained:
        cut = budgets.get(id(result.entry.node))
        if cut and not any(is_budget(r) for r in result.reasons()):
            result.notes.append(f"check leaves this loop to its statement budget ({cut[0]['limit']} statements "
                                f"per {cut[0]['unit'] or cut[0]['file']}; explain ran {result.statements})")


#: the statement budgets that ``check``'s simulations end in (:mod:`accumlint.model.simulation`)
_CHECK_BUDGET = re.compile(r"(?:the statement budget of an? (?P<unit>entry point|run)|the (?P<file>file)'s "
                           r"simulation budget for check) \((?P<limit>\d+)")


def render_text(path: str, results: list[Simulation]) -> str:
    """The human report: one block per entry point."""
    if not results:
        return f"{path}: no training loop reaches a backward (nothing to simulate)\n"
    out: list[str] = []
    for result in results:
        entry = result.entry
        status = "decided" if result.decided else "undecided"
        out.append(f"{path}:{result.line}: {entry.description} — {status}")
        out.append(f"  A: {_accumulation(result)}")
        for fact in result.roles:
            out.append(f"  role: `{fact.label}` is {_article(fact.role.value)} ({fact.evidence})")
        for trace in result.traces:
            choices = _choices(trace.choices)
            out.append(f"  {trace.configuration.describe()}" + (f"   [{choices}]" if choices else ""))
            out.append(f"    {_shortened(trace.timeline()) or '(no event)'}")
            updates = ", ".join(f"e{e}:m{m}" for e, m in trace.updates_at())
            out.append(f"    updates after microbatch: {updates or 'none'}")
            factors = trace.loss_factors()
            if factors:
                out.append(f"    factor on the loss at each backward: {', '.join(factors)}")
                out.append(f"    forwards each backward's loss comes from: {', '.join(trace.loss_sources())}")
        notes = list(dict.fromkeys([*result.notes, *(n for t in result.traces for n in t.notes)]))
        for note in notes:
            out.append(f"  note: {note}")
        for reason in result.reasons():
            out.append(f"  undecided: {reason}")
        out.append("")
    return "\n".join(out)


def to_json(path: str, results: list[Simulation]) -> list[dict]:
    """The report as JSON-ready data: one object per entry point."""
    return [{
        "path": path,
        "line": r.line,
        "entry": {"kind": r.entry.kind, "name": r.entry.name},
        "decided": r.decided,
        "accumulation": {"symbols": list(r.symbols), "literal": r.literal, "epoch_lengths": list(r.lengths)},
        "roles": [{"name": f.label, "role": f.role.value, "evidence": f.evidence} for f in r.roles],
        "runs": [{
            "configuration": {"accumulation": t.configuration.accumulation,
                              "microbatches": t.configuration.microbatches,
                              "epochs": t.configuration.epochs, "replicas": t.configuration.replicas},
            "choices": [{"condition": k, "value": v} for k, v in t.choices],
            "timeline": t.timeline(),
            "events": [{"kind": e.kind.name.lower(), "epoch": e.epoch, "microbatch": e.microbatch,
                        "target": e.target, "line": e.site[1], "file": e.site[0],
                        "chain": [{"file": f, "line": n} for f, n in e.chain],
                        **({"loss_factor": e.factor,
                            "loss_forwards": None if e.feeds is None else [[f, m] for f, m in sorted(
                                e.feeds, key=lambda k: (k[0], -1 if k[1] is None else k[1]))]}
                           if e.kind is EventKind.BACKWARD else {})} for e in t.events],
            "loss_factors": t.loss_factors(),
            "loss_sources": t.loss_sources(),
            "notes": t.notes,
            "undecided": t.undecided,
        } for t in r.traces],
        "notes": r.notes,
        "undecided": r.reasons(),
    } for r in results]


def render_markdown(result: Simulation) -> str:
    """One entry point for an editor's hover: A's source, the roles, and the runs with A = 2."""
    lines = [f"**accumlint** simulated this loop: {'decided' if result.decided else 'undecided'}", "",
             f"A: {_accumulation(result)}"]
    lines += [f"- `{f.label}`: {f.role.value} ({f.evidence})" for f in result.roles]
    shown = [t for t in result.traces if t.configuration.accumulation == 2 and t.configuration.replicas == 1]
    for trace in shown or result.traces[:2]:
        choices = _choices(trace.choices)
        lines += ["", f"{trace.configuration.describe()}" + (f" [{choices}]" if choices else ""), "",
                  f"    {_shortened(trace.timeline()) or '(no event)'}"]
        factors = trace.loss_factors()
        if factors:
            lines += ["", f"factor on the loss at each backward: {', '.join(factors)}",
                      "", f"forwards each backward's loss comes from: {', '.join(trace.loss_sources())}"]
    lines += [f"\nnote: {note}" for note in result.notes]
    lines += [f"\nundecided: {reason}" for reason in result.reasons()]
    return "\n".join(lines)


def _accumulation(result: Simulation) -> str:
    lengths = "".join(f"; `{s}` is the epoch's length N (the update's condition sets the microbatch index equal "
                      "to it)" for s in result.lengths)
    if result.symbols:
        names = ", ".join(f"`{s}`" for s in result.symbols)
        return f"{names}, bound to 1, 2 and 4 in turn (it decides when the optimizer updates){lengths}"
    if result.literal is not None:
        return f"the literal {result.literal} that sets the update's cadence"
    return "no value in the code decides when the optimizer updates"


#: groups of a timeline the text report prints (the JSON report has them all)
SHOWN_GROUPS = 12


def _shortened(timeline: str) -> str:
    groups = timeline.split(" ; ")
    if len(groups) <= SHOWN_GROUPS:
        return timeline
    return " ; ".join(groups[:SHOWN_GROUPS]) + f" ; … ({len(groups) - SHOWN_GROUPS} more groups)"


def _article(word: str) -> str:
    return f"an {word}" if word[:1].lower() in "aeiou" else f"a {word}"


def _choices(choices: tuple[tuple[str, bool], ...]) -> str:
    """The conditions a run took as true, then how many it took as false (most are flags off)."""
    true = [key for key, value in choices if value]
    false = len(choices) - len(true)
    shown = [f"{key} = True" for key in true]
    if false and true:
        shown.append(f"{false} other{'s' if false > 1 else ''} False")
    elif false:
        shown.append(", ".join(f"{key} = False" for key, _ in choices) if false <= 2 else f"{false} conditions False")
    return ", ".join(shown)
