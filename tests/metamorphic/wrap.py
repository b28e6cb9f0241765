"""Neutral control flow around the microbatch body: each wrap runs the same statements in the
same order on the same iterations. They apply to every loop that runs a backward directly
(:func:`~tests.metamorphic.base.backward_loops`)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from tests.metamorphic.base import (
    FreshNames,
    backward_loops,
    enumerate_loops,
    imports_module,
    insert_import,
    module_binds,
    parse,
    per_file,
    replace_nodes,
    stmt,
    transformation,
)


def _wrap_bodies(
    text: str,
    wrap: Callable[[cst.IndentedBlock], cst.BaseStatement],
    loops: Callable[[cst.Module], list[cst.CSTNode]] = backward_loops,
) -> tuple[cst.Module, str] | None:
    module = parse(text)
    if module is None:
        return None
    replacements = {}
    for loop in loops(module):
        if isinstance(loop.body, cst.IndentedBlock):
            replacements[id(loop)] = lambda updated: updated.with_changes(
                body=updated.body.with_changes(body=[wrap(updated.body)])
            )
    new = replace_nodes(module, replacements)
    return (module, new) if new is not None else None


def _indented(source_head: str, body: cst.IndentedBlock, tail: str = "") -> cst.BaseStatement:
    """``source_head`` (a compound statement's first line, ending in ``:``) over ``body``,
    followed by the clause ``tail`` (e.g. ``finally:\\n    pass``)."""
    template = stmt(f"{source_head}\n    pass\n{tail}")
    return template.with_changes(body=body.with_changes(header=cst.TrailingWhitespace(), indent=None))


@transformation("if_true", "wrap")
@per_file
def if_true(text: str) -> str | None:
    """Loop body → ``if True: BODY``. Applies to every loop that runs a backward directly."""
    done = _wrap_bodies(text, lambda body: _indented("if True:", body))
    return done[1] if done else None


@transformation("try_finally", "wrap")
@per_file
def try_finally(text: str) -> str | None:
    """Loop body → ``try: BODY finally: pass`` (a ``continue``/``break`` in BODY still leaves
    the iteration, an exception still propagates). Applies to every loop that runs a backward
    directly."""
    done = _wrap_bodies(text, lambda body: _indented("try:", body, "finally:\n    pass\n"))
    return done[1] if done else None


@transformation("nullcontext", "wrap")
@per_file
def nullcontext(text: str) -> str | None:
    """Loop body → ``with nullcontext(): BODY`` (``from contextlib import nullcontext`` added):
    a context manager that does nothing. Applies to every loop that runs a backward directly,
    in a file where the name ``nullcontext`` is free."""
    module = parse(text)
    if module is None or module_binds(module, "nullcontext"):
        return None
    done = _wrap_bodies(text, lambda body: _indented("with nullcontext():", body))
    return insert_import(cst.parse_module(done[1]), "from contextlib import nullcontext\n").code if done else None


@transformation("autocast_off", "wrap")
@per_file
def autocast_off(text: str) -> str | None:
    """Loop body → ``with torch.autocast("cpu", enabled=False): BODY``: an autocast region
    that is off (and on CPU only) casts nothing. Applies to every loop that runs a backward
    directly, in a file that runs ``import torch`` and never mentions autocast (a disabled
    region inside an enabled one would switch it off)."""
    module = parse(text)
    if module is None or "autocast" in text or not imports_module(module, "torch"):
        return None
    done = _wrap_bodies(text, lambda body: _indented('with torch.autocast("cpu", enabled=False):', body))
    return done[1] if done else None


@transformation("resume_skip", "wrap")
@per_file
def resume_skip(text: str) -> str | None:
    """``for I, T in enumerate(X): BODY`` → ``start_step = 0`` before the loop, then
    ``if I < start_step: continue`` at the top of BODY: a resume offset of zero skips nothing.
    Applies to every ``enumerate`` loop (no ``start``) that runs a backward directly."""
    module = parse(text)
    if module is None:
        return None
    fresh = FreshNames(text)
    replacements = {}
    for loop, index, _, _ in enumerate_loops(module):
        if not isinstance(loop.body, cst.IndentedBlock):
            continue
        start = fresh("start_step_")
        guard = stmt(f"if {index} < {start}:\n    continue\n")
        replacements[id(loop)] = lambda updated, g=guard, s=start: cst.FlattenSentinel(
            [stmt(f"{s} = 0\n"), updated.with_changes(body=updated.body.with_changes(body=[g, *updated.body.body]))]
        )
    return replace_nodes(module, replacements)


@transformation("context_variable", "wrap")
@per_file
def context_variable(text: str) -> str | None:
    """Loop body → ``ctx = nullcontext()`` then ``with ctx: BODY`` (``from contextlib import
    nullcontext`` added): a do-nothing context manager held in a variable. Applies to every
    loop that runs a backward directly, in a file where the name ``nullcontext`` is free."""
    module = parse(text)
    if module is None or module_binds(module, "nullcontext"):
        return None
    fresh = FreshNames(text)
    replacements = {}
    for loop in backward_loops(module):
        if isinstance(loop.body, cst.IndentedBlock):
            name = fresh("ctx_")
            replacements[id(loop)] = lambda updated, n=name: updated.with_changes(
                body=updated.body.with_changes(
                    body=[stmt(f"{n} = nullcontext()\n"), _indented(f"with {n}:", updated.body)]
                )
            )
    new = replace_nodes(module, replacements)
    return insert_import(cst.parse_module(new), "from contextlib import nullcontext\n").code if new else None
