"""The values the simulator (:mod:`accumlint.model.interpreter`) computes with.

Concrete Python values (``int``, ``float``, ``bool``, ``str``, ``None``, tuples, lists, dicts)
stand for themselves. What the configuration does not decide is an :class:`Unknown` that
remembers where it came from; an object with identity (an optimizer, a loader, an instance of a
project class) is an :class:`Obj`; a project function is a :class:`Function`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from accumlint.model.kinds import Role

if TYPE_CHECKING:
    import libcst as cst

    from accumlint.model.module_functions import ModuleFunctions


#: the forwards a value was computed from: the (epoch, 0-based microbatch index) of each forward's
#: event, the index None for a forward before the epoch's first draw (:attr:`Unknown.feeds`)
Feeds = frozenset[tuple[int, "int | None"]]


class _Unset(Enum):
    UNSET = "unset"


UNSET = _Unset.UNSET


class Origin(str, Enum):
    """Why a value is unknown, which decides how a condition on it is judged
    (``shared/docs/semantic-core.md`` section 5)."""

    RUN = "run-level"  # fixed for the run: a config field, a parameter of the entry, an import
    DATA = "per-microbatch data"  # a batch, a loss, a model output: changes every microbatch
    CALLER = "computed by an unseen caller"  # a parameter of an implicit microbatch body


class Unknown:
    """A value the simulation does not know: ``label`` is its source in the code's own words
    (``args.grad_accum``, ``cfg.accum``, ``batch``), ``origin`` how it varies. ``sources``: the
    named run-level values it is computed from (the ones a configuration can bind); ``gate``:
    those of them it sets against a counter (``(step + 1) % args.accum == 0`` has the gate
    ``{"args.accum"}``), which makes it change from microbatch to microbatch.

    ``factor``, for per-microbatch data (a loss): the product of the numbers the code multiplied
    it by since a library computed it (``loss / A`` with A = 4: 0.25; ``0.5 * loss``: 0.5), 1.0
    for a value as computed, None where something the run does not know scaled it
    (``loss * cfg.weight``). Only scaling counts: a sum of terms, a product of two data values
    or a library function of them is a newly computed value (1.0).

    ``restored``: computed from what a checkpoint load returned (``torch.load(path)["epoch"] + 1``):
    a value a resumed run reads where a fresh one starts (a start epoch, a counter's first value),
    open in that run only (``shared/docs/semantic-core.md`` section 2, "a resume offset").

    ``feeds``, for per-microbatch data: the forwards it was computed from, as the (epoch, 0-based
    microbatch index) of each forward's event (``F.mse_loss(model(x), y)`` drawn at microbatch 3 of
    epoch 0: ``{(0, 3)}``; a data item as drawn: none); None where something the run did not follow
    may have run one (data made out of sight, an object out of sight that was handed a forward's
    output). Unless told, data's are unknown and a run-level value's are none. A loss's provenance
    (issue 31): which microbatches a backward learns from.

    ``computed``: the result of arithmetic or a comparison (a number or a bool, never ``None``:
    ``total is not None`` of ``total = len(data) // batch`` holds in every run)."""

    __slots__ = ("computed", "factor", "feeds", "gate", "label", "modulo", "origin", "restored", "sources")

    def __init__(self, label: str | None, origin: Origin = Origin.RUN, sources: frozenset[str] = frozenset(),
                 gate: frozenset[str] | None = None, modulo: bool = False, factor: float | None = 1.0,
                 restored: bool = False, feeds: Feeds | None | _Unset = UNSET) -> None:
        self.label = label
        self.origin = origin
        self.sources = sources
        self.gate = gate
        self.modulo = modulo  # the gate went through a modulo (a cadence, not a one-off threshold)
        self.factor = factor
        self.restored = restored
        self.computed = False
        # (unless told: data may come from a forward the run did not follow, a run-level value from none)
        self.feeds: Feeds | None = (None if origin is Origin.DATA else frozenset()) if feeds is UNSET \
            else feeds  # type: ignore[assignment]

    @property
    def varies(self) -> bool:
        """Whether it was computed from a counter (it is not fixed for the run)."""
        return self.gate is not None

    def __repr__(self) -> str:
        return f"<unknown {self.label or '?'} ({self.origin.value})>"


class Multiple(Unknown):
    """A whole number of copies of one run-level unknown: a counter advanced by an amount the run
    does not know (``self.seen += self.batch_size`` from 0 is ``count`` copies of ``unit``). Read
    as any unknown, except that dividing it by its unit gives back ``count`` (``self.seen //
    self.batch_size``: the calls so far), which a gate can then count on."""

    __slots__ = ("count", "unit")

    def __init__(self, base: Unknown, count: int, unit: Unknown) -> None:
        super().__init__(base.label, base.origin, base.sources, base.gate, base.modulo, base.factor,
                         base.restored, base.feeds)
        self.count = count
        self.unit = unit
        self.computed = True

    def same_unit(self, value: object) -> bool:
        """Whether ``value`` is this multiple's unit: the same unknown, or one read by the same name."""
        return isinstance(value, Unknown) and not isinstance(value, Multiple) and (
            value is self.unit or value.label is not None and value.label == self.unit.label)


class Literal(int):
    """An integer written in the code (``0``, ``1``): unlike a counter's value, it never varies."""


class LiteralFloat(float):
    """A floating-point number written in the code (``0.``, ``1e-4``): like :class:`Literal`, it
    never varies (``weight > 0.`` is a run-level test, not a counter's)."""


class Derived(int):
    """An integer computed from named constants and literals only (``global_batch // micro_batch``):
    fixed for the run as its parts are, unlike a counter's value. A name it is assigned to becomes
    a named constant of its own (:class:`LabeledInt`), the symbol a configuration binds to A."""


class LabeledInt(int):
    """An integer read from a named constant or a default (``ACCUM = 4``): the label lets the
    configuration rebind it to A. Arithmetic on it gives plain integers."""

    label: str
    bound: bool  # the configuration set it to A

    def __new__(cls, value: int, label: str, bound: bool = False) -> LabeledInt:
        member = super().__new__(cls, value)
        member.label = label
        member.bound = bound
        return member


_ids = itertools.count(1)


@dataclass(eq=False)
class Obj:
    """An object with identity: ``role`` and its ``evidence`` (construction, a name, a use),
    ``label`` the code that built or named it, ``class_def``/``owner`` for an instance of a
    project class, ``attrs`` what the simulation assigned on it, ``over`` for an optimizer the
    value whose parameters it was built over (``model`` of ``SGD(model.parameters())``), ``built``
    the library call that built it with its arguments (a wrapper's settings, read by the rules)."""

    role: Role
    evidence: str
    label: str
    class_def: cst.ClassDef | None = None
    owner: ModuleFunctions | None = None
    attrs: dict[str, object] = field(default_factory=dict)
    number: int = field(default_factory=lambda: next(_ids))
    over: object = None
    #: the library call that built it (None: a project class's instance, or made otherwise)
    built: Construction | None = None

    def __repr__(self) -> str:
        return f"<{self.role.value} {self.label}>"


@dataclass(frozen=True, eq=False)
class Construction:
    """The library call that built an :class:`Obj`: ``callee``, its qualified name (as the
    module's imports give it); ``args`` and ``kwargs``, its arguments' values in the run;
    ``starred``: a ``*``/``**`` spread passed arguments the run cannot name, so an argument
    absent here may still have been given."""

    callee: str
    args: tuple[object, ...]
    kwargs: dict[str, object]
    starred: bool = False

    def argument(self, keyword: str, parameters: tuple[str, ...]) -> tuple[bool | None, object]:
        """``(given, value)`` of the parameter ``keyword``, passed by keyword or by its position
        in ``parameters`` (the callee's parameter names in order); ``given`` is None where a
        spread may have passed it."""
        if keyword in self.kwargs:
            return True, self.kwargs[keyword]
        position = parameters.index(keyword) if keyword in parameters else len(self.args)
        if position < len(self.args):
            return True, self.args[position]
        return (None if self.starred else False), None


@dataclass(frozen=True, eq=False)
class Function:
    """A project function or method: ``definition`` in ``owner`` (its module), bound to
    ``self_value`` when taken from an object, with the enclosing frame's names (``closure``)
    for a nested def or a lambda."""

    definition: cst.FunctionDef | cst.Lambda
    owner: ModuleFunctions
    class_def: cst.ClassDef | None = None
    self_value: object = None
    closure: dict[str, object] | None = None
    partial_args: tuple[object, ...] = ()
    partial_kwargs: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True, eq=False)
class ProjectClass:
    """A class the project defines: calling it builds an :class:`Obj` and runs ``__init__``."""

    class_def: cst.ClassDef
    owner: ModuleFunctions


@dataclass(frozen=True, eq=False)
class BoundMethod:
    """``receiver.name`` taken as a value: calling it is a method call on ``receiver``."""

    receiver: object
    name: str
    label: str


def varies(value: object) -> bool:
    """Whether a value changes during the run: a counter's number (a plain integer the run
    computed, not a literal or a named constant) or an unknown computed from one."""
    if isinstance(value, Unknown):
        return value.varies
    return isinstance(value, (int, float)) and not isinstance(value, (bool, Literal, LiteralFloat, LabeledInt, Derived))


def combined(values: list[object], label: str, modulo: bool = False) -> Unknown:
    """The unknown that an operation on ``values`` (one of them unknown at least, or a named
    constant the configuration has not bound) makes: data if any is data, its sources the
    union, and a gate when a counter meets a run-level unknown (``modulo``: by a modulo)."""
    values = [Unknown(v.label, Origin.RUN, frozenset({v.label})) if isinstance(v, LabeledInt) and not v.bound else v
              for v in values]
    unknowns = [v for v in values if isinstance(v, Unknown)]
    origins = {v.origin for v in unknowns}
    origin = Origin.DATA if Origin.DATA in origins else Origin.CALLER if Origin.CALLER in origins else Origin.RUN
    sources = frozenset().union(*(v.sources for v in unknowns))
    gates = [v.gate for v in unknowns if v.gate is not None]
    gate: frozenset[str] | None = frozenset().union(*gates) if gates else None
    # a counter, or an unknown computed from one, meeting a run-level unknown sets that against it too
    counted = gate is not None or any(varies(v) for v in values if not isinstance(v, Unknown))
    if counted:
        gate = (gate or frozenset()) | sources
    return Unknown(label, origin, sources, gate, any(v.modulo for v in unknowns) or (modulo and gate is not None),
                   restored=any(v.restored for v in unknowns), feeds=fed_by(values))


def fed_by(values: Iterable[object], depth: int = 2) -> Feeds | None:
    """The forwards that a value computed from ``values`` is computed from (:attr:`Unknown.feeds`):
    the union over the data among them, and over the items of the lists, tuples and dicts among
    them (``depth`` levels of nesting); None where one's are unknown, or a container is nested deeper."""
    found: set[tuple[int, int | None]] = set()
    for value in values:
        if isinstance(value, Unknown):
            if value.feeds is None:
                return None
            found |= value.feeds
        elif isinstance(value, (list, tuple, dict)):
            if depth == 0:
                return None
            inner = fed_by(value.values() if isinstance(value, dict) else value, depth - 1)
            if inner is None:
                return None
            found |= inner
    return frozenset(found)


def scaled(operator: str, left: object, right: object) -> float | None:
    """The :attr:`Unknown.factor` of ``left <operator> right`` (a LibCST operator's class name)
    where one side is data: a data value multiplied or divided by a number keeps its factor times
    (or over) that number, by a run-level unknown loses it (None); anything else computes a new
    value (1.0)."""
    data = [value for value in (left, right) if is_data(value)]
    if len(data) != 1 or operator not in ("Multiply", "Divide") or (operator == "Divide" and data[0] is right):
        return 1.0
    value, other = (left, right) if data[0] is left else (right, left)
    assert isinstance(value, Unknown)
    if value.factor is None or isinstance(other, bool):
        return None
    if not isinstance(other, (int, float)) or other == 0:
        return None
    return value.factor * other if operator == "Multiply" else value.factor / other


def is_restored(value: object) -> bool:
    """Whether ``value`` is computed from what a checkpoint load returned (:attr:`Unknown.restored`)."""
    return isinstance(value, Unknown) and value.restored


def is_data(value: object) -> bool:
    """Whether ``value`` changes with every microbatch."""
    return isinstance(value, Unknown) and value.origin is Origin.DATA
