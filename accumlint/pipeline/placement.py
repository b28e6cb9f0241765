"""Where a rule's hit is reported: a node's position in the checked file, or the call standing for it.

The call of this module that stands for another module's code is the place of a hit there (the
helper's statement becomes a related location)."""

from __future__ import annotations

import functools
import os
from dataclasses import replace

import libcst as cst

from accumlint.checks.base import Hit, Rule
from accumlint.checks.group_traces import AT_THE_GATE, verdicts
from accumlint.model.kinds import EventKind
from accumlint.model.names import walk
from accumlint.model.positions import node_positions
from accumlint.model.scopes import FrameKind
from accumlint.model.simulation import simulate
from accumlint.spec import help_text
from accumlint.spec.findings import Finding

#: the event a rule's finding is about, by the rule's code prefix: a finding at the call of a
#: helper that performs several events points into the helper at the one it is about
_SUBJECT = {"ACC00": (EventKind.UPDATE,), "ACC001": (EventKind.RESET,), "ACC003": (EventKind.RESET,),
            "ACC007": (EventKind.UPDATE_HOOK,),
            "ACC30": (EventKind.CLIP, EventKind.UNSCALE), "ACC303": (EventKind.UNSCALE, EventKind.SCALER_UPDATE),
            "ACC304": (EventKind.SCHEDULER_STEP,), "ACC306": (EventKind.SCHEDULER_STEP,),
            "ACC305": (EventKind.SCHEDULER_STEP,), "ACC1": (EventKind.BACKWARD,), "ACC2": (EventKind.BACKWARD,),
            "ACC4": (EventKind.BACKWARD,), "ACC5": (EventKind.BACKWARD, EventKind.UPDATE)}


def _related_nodes(model, hits: list[tuple[Rule, Hit]]) -> dict[int, list[tuple[object | None, cst.CSTNode]]]:
    """For each hit at a call that stands for a helper's events, the helper statement of the
    event the rule is about: (its module, None for this one; its node)."""
    found: dict[int, list[tuple[object | None, cst.CSTNode]]] = {}
    for rule, hit in hits:
        events = model.via.get(id(hit.node))
        if not events:
            continue
        prefix = max((p for p in _SUBJECT if rule.code.startswith(p)), key=len, default=None)
        kinds = _SUBJECT.get(prefix, ()) if prefix is not None else ()
        chosen = next((e for kind in kinds for e in events if e.kind is kind), events[0])
        node = chosen.site.node
        if rule.code in AT_THE_GATE:  # the helper's finding is on the update's test: point there too
            node = next((f.node for f in reversed(chosen.site.frames) if f.kind is FrameKind.IF), node)
        found[id(hit.node)] = [(chosen.site.inline.foreign, node)]
    return found


def _in_this_module(model, module: cst.Module, rule: Rule, hit: Hit, related: dict) -> tuple[Rule, Hit] | None:
    """``hit``, moved to the call of this module when it points into another module's code
    (the helper's node becomes its related location); None for a simulated run's verdict that the
    other module's own check, in the same run, finds where the code to change is
    (:func:`_reported_where_it_loops`): the calls that reach it do not repeat it."""
    if hit.flow and hit.flow[-1][0] is not None and _reported_where_it_loops(model, rule.code, *hit.flow[-1][:2]):
        return None  # a simulated run's verdict on a loop of the module this one calls into
    if id(hit.node) in related or model.via.get(id(hit.node)) or _is_local(model, hit.node):
        return rule, hit
    found = model.report_for(hit.node)
    if found is None:
        return rule, hit  # left for the position lookup to drop
    call, site = found
    related[id(call)] = [(_owner_of(site, hit.node), hit.node)]
    return rule, replace(hit, node=call)


def _reported_where_it_loops(model, code: str, owner, node: cst.CSTNode) -> bool:
    """Whether the trace verdict ``code`` at ``node``, code of the project module ``owner`` (the last
    step of a simulated run's flow, in a loop that trains there), is one that ``owner``'s own check
    finds too, ``owner`` being among the files of this run: its own simulations (which run its
    loops with what their callers in the run pass) hold the same verdict at the same node."""
    path = getattr(getattr(owner, "project", None), "path", None)
    files = getattr(getattr(getattr(model.functions, "project", None), "index", None), "files", ())
    # (a loop that reaches its backward only through an instance its callers hand it is one too)
    if path is None or os.path.abspath(path) not in files or not any(
            type(loop) in (cst.For, cst.While) and any(n is node for n in walk(loop.body))
            for function in owner.class_of for loop in walk(function.body)):
        return False
    return any(verdict.code == code and verdict.node is node
               for simulation in _own_simulations(owner, path) for verdict in verdicts(simulation))


@functools.lru_cache(maxsize=16)
def _own_simulations(owner, path: str) -> tuple:
    """The simulations ``owner``'s own check makes (its entries, and the runs of the checked modules
    that import it), once per process for each module asked about."""
    return tuple(simulate(owner, path, judged_only=True))


def _is_local(model, node: cst.CSTNode) -> bool:
    """Whether ``node`` is a node of this module's own code (an own site's node or inside one)."""
    return id(node) in model.local_nodes


def _owner_of(site, node: cst.CSTNode):
    return site.inline.foreign


def _places(path: str, related, positions) -> tuple[tuple[str, int, int], ...]:
    """(path, line, column) of related statements: this module's from ``positions``, another
    project module's from its own tree (its file as the project index found it)."""
    return tuple(where for owner, node in related if (where := _place_of(path, owner, node, positions)) is not None)


def _flow(path: str, flow, positions) -> tuple[tuple[str, int, int, str], ...]:
    """A hit's flow (:attr:`Hit.flow`) as (path, line, column, text) steps, those without a place left out."""
    return tuple((*where, text) for owner, node, text in flow
                 if (where := _place_of(path, owner, node, positions)) is not None)


def _place_of(path: str, owner, node, positions) -> tuple[str, int, int] | None:
    """(path, line, column) of ``node``: of this module (``owner`` None) from ``positions``, of
    another project module from its own tree; None where it has no file or no position."""
    if owner is None:
        where = positions.get(node)
        return None if where is None else (path, where.start.line, where.start.column + 1)
    if getattr(owner, "project", None) is None:
        return None  # a library summary: no file to point at
    try:
        where = node_positions(owner._module, [node])[node]  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - a position we cannot compute is left out
        return None
    other = owner.project.path  # type: ignore[attr-defined]
    relative = os.path.relpath(other)
    return other if relative.startswith("..") else relative, where.start.line, where.start.column + 1


def place(path: str, text: str, module: cst.Module, model,
          hits: list[tuple[Rule, Hit]]) -> list[tuple[Finding, cst.CSTNode]]:
    """The findings of ``hits`` in the file at ``path`` (its ``text`` and LibCST ``module``),
    each with the node of ``module`` it is reported at: its node's position, a hit in another
    module's code moved to the call of this one, with the helper statements it is about as
    related locations. Positions cost a code generation: only files with hits pay for it."""
    related = _related_nodes(model, hits)
    hits = [moved for rule, hit in hits if (moved := _in_this_module(model, module, rule, hit, related)) is not None]
    local = [node for nodes in related.values() for owner, node in nodes if owner is None]
    local += [node for _, hit in hits for owner, node, _ in hit.flow if owner is None]
    positions = node_positions(module, [hit.node for _, hit in hits] + local, text)
    findings: list[tuple[Finding, cst.CSTNode]] = []
    for rule, hit in hits:
        where = positions.get(hit.node)
        if where is None:
            continue  # a node of another module the rule pointed at: no place in this file to report it
        places = _places(path, related.get(id(hit.node), ()), positions)
        findings.append((
            Finding(
                path=path,
                line=where.start.line,
                column=where.start.column + 1,
                code=rule.code,
                name=rule.name,
                severity=rule.severity,
                message=hit.message,
                fix=help_text(rule.spec, hit.site_fix),
                end_line=where.end.line,
                end_column=where.end.column + 1,
                url=rule.url(),
                related=places,
                flow=_flow(path, hit.flow, positions),
            ),
            hit.node,
        ))
    return _one_per_place(findings)


def _one_per_place(findings: list[tuple[Finding, cst.CSTNode]]) -> list[tuple[Finding, cst.CSTNode]]:
    """One finding per code, span and related locations. A loop is analysed in its own function
    and again in each caller of this module that inlines that function; a bug in it is then
    reported from both scopes, its target spelled as each scope sees it (``trainer.optimizer``
    in the loop's function, ``self.optimizer`` from a caller, where the trainer is a local of the
    inlined call). Identical findings are merged later anyway; these differ only in wording,
    and the first, in the order of the model's scopes, is kept."""
    seen: set[tuple[object, ...]] = set()
    kept: list[tuple[Finding, cst.CSTNode]] = []
    for finding, node in findings:
        key = (finding.code, finding.line, finding.column, finding.end_line, finding.end_column, finding.related)
        if key not in seen:
            seen.add(key)
            kept.append((finding, node))
    return kept
