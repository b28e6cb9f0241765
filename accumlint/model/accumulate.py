"""Accelerate's ``accumulate()`` entered more than once per microbatch (ACC501).

Each entry of ``accelerator.accumulate(...)`` calls ``Accelerator._do_sync`` (accelerate 1.15.0
``accelerator.py``), which advances ``accelerator.step`` and sets ``sync_gradients`` to
``step % A == 0``: two entries per microbatch advance the counter twice, so with an even A the
sync (and the prepared optimizer's update) comes every A/2 microbatches.
"""

from __future__ import annotations

import libcst as cst

from accumlint.model.groups import Group, is_accumulate_call
from accumlint.model.names import dotted
from accumlint.model.sites import FrameKind


def _receivers(with_node: cst.With) -> list[str | None]:
    """The accelerators whose ``accumulate()`` a ``with`` statement enters, one per entry."""
    return [dotted(item.item.func.value) for item in with_node.items  # type: ignore[attr-defined]
            if is_accumulate_call(item.item)]


def double_entries(group: Group) -> list[cst.With]:
    """The ``with`` statements of ``group``'s loop that enter ``accumulate()`` of an accelerator
    already entered on the same pass: a second item of one ``with`` (``with acc.accumulate(a),
    acc.accumulate(b):``) or a nested ``with`` inside another one's block. Entries on different
    accelerators, or whose accelerator has no name, are not counted."""
    found: list[cst.With] = []
    for with_node in group.accumulate_contexts:
        names = [n for n in _receivers(with_node) if n is not None]
        if len(names) != len(set(names)) and with_node not in found:
            found.append(with_node)
    for site in group.loop_sites:
        entered: list[str] = []
        for frame in site.frames_inside(group.loop):
            if frame.kind is FrameKind.HELPER:
                break
            if frame.kind is not FrameKind.WITH or not isinstance(frame.node, cst.With):
                continue
            names = [n for n in _receivers(frame.node) if n is not None]
            if any(n in entered for n in names) and frame.node not in found:
                found.append(frame.node)
            entered.extend(names)
    return found
