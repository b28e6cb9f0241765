"""Summaries of functions the project does not define, as data: what a library function
or method does to the accumulation group, in the model's terms, one table row each.

A :class:`Summary` says which parameters the function takes, which training events it
performs on which of them (a backward of a parameter, a scaler's unscale, a clip, an
optimizer update, a reset, a scheduler step), under which of its own parameters as a gate
(``update_grad``), and whether it divides the loss it backpropagates. The walker inlines a
summary like a project function (:func:`function` is the body it stands for), so
argument binding, gates, report positions and the rules need nothing of their own.

Rows (:class:`accumlint.frameworks.contracts.Summary`) live with their framework, in
:mod:`accumlint.frameworks` (timm's ``NativeScaler``); :data:`LIBRARY_SUMMARIES` maps a
qualified name to its row. A row that names an unknown event kind or parameter raises
``ValueError`` when it is built.
"""

from __future__ import annotations

import functools

import libcst as cst

from accumlint import frameworks as fw
from accumlint.frameworks.contracts import Summary
from accumlint.source.prefilter import names_search


def function(summary: Summary) -> cst.FunctionDef:
    """The body a summary stands for, parsed once."""
    return _parsed(summary.source())


@functools.lru_cache(maxsize=256)
def _parsed(source: str) -> cst.FunctionDef:
    module = cst.parse_module(source)
    return module.body[0]  # type: ignore[return-value]


@functools.lru_cache(maxsize=256)
def owner_of(summary: Summary) -> object:
    """The functions table of the one-function module a summary's body forms (the walker's
    ``owner`` while it walks the body: a library's code, reported at the caller's call)."""
    from accumlint.model.module_functions import ModuleFunctions

    return ModuleFunctions(cst.Module(body=[function(summary)]))


def mentioned(data: bytes) -> bool:
    """Whether ``data`` names a summarized function or class (its last names, as whole words):
    a file that calls one may run a backward through it (the prefilter lets it through)."""
    search = names_search(tuple(LIBRARY_SUMMARIES))
    return search is not None and search.search(data)


def lookup(qualified: str | None) -> Summary | None:
    """The row for a qualified callee name, if one is registered."""
    return LIBRARY_SUMMARIES.get(qualified) if qualified else None


#: qualified name → summary; the rows come with their framework
LIBRARY_SUMMARIES: dict[str, Summary] = {row.name: row for row in fw.SUMMARIES}
