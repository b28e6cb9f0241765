"""Metamorphic tests of the linter (issue 29): a semantics-preserving refactoring of a training
program must not change the set of codes accumlint reports on it.

:mod:`tests.metamorphic.base` holds the program and registry types; one module per family of
refactorings registers its transformations (rename, gate, wrap, loop, extract, config,
roles; :mod:`tests.metamorphic.trainer` adds extract's trainer-class refactorings);
:mod:`tests.metamorphic.matrix` checks the inputs (the catalogue, ``../shared/cases`` and
``../shared/patterns``) under every transformation; ``python -m tests.metamorphic report``
prints the invariance rates. Importing this package registers every transformation."""

from tests.metamorphic import (  # noqa: F401 - registers them
    config,
    extract,
    gate,
    loop,
    rename,
    roles,
    trainer,
    values,
    wrap,
)
from tests.metamorphic.base import FAMILIES, REGISTRY, Program, Transformation

__all__ = ["FAMILIES", "REGISTRY", "Program", "Transformation"]
