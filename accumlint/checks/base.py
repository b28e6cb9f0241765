"""What a rule is: a small class that reads the file's group model and yields hits."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from accumlint.checks.gate import LOOP, RuleGate
from accumlint.spec import BY_CODE, DOCS_URL, RuleSpec
from accumlint.spec.findings import Severity

if TYPE_CHECKING:
    from accumlint.model import FileModel


#: one step of a simulated run that leads to a hit: (its module, None for the checked one; the
#: node; what happens there)
FlowStep = tuple[object | None, cst.CSTNode, str]


@dataclass(frozen=True)
class Hit:
    """A rule's verdict on one node: ``message`` says what happens at run time; ``site_fix`` only
    what the repair needs *at this site* (the variable, the call, which of the spec's alternatives
    applies), empty where the spec's ``fix`` says it all: the finding's help is the spec's fix
    followed by it (:func:`accumlint.spec.help_text`); ``flow``: the steps of a simulated run that
    lead to it (:data:`FlowStep`), as :attr:`accumlint.spec.findings.Finding.flow` reports them."""

    node: cst.CSTNode
    message: str
    site_fix: str = ""
    flow: tuple[FlowStep, ...] = ()

_FROM_SPEC = frozenset({"name", "severity", "principle", "summary", "default_enabled"})
#: what a rule declared before its gate was one declaration
_LEGACY_GATE = frozenset({"markers", "requires", "backward_required", "applies"})


class Rule:
    """Base class of every rule.

    Subclasses set ``code`` and implement :meth:`check`, which must only read the
    :class:`~accumlint.model.FileModel` (never re-derive loop structure) and must stay silent
    where the model answers "unknown". Name, severity, principle, summary and default come from
    the rule's entry in ``accumlint/spec/__init__.py`` (``spec``); a class whose code has no entry (a
    test's stand-in rule) declares them itself.
    """

    code: ClassVar[str]
    spec: ClassVar[RuleSpec | None] = None
    name: ClassVar[str]
    severity: ClassVar[Severity]
    principle: ClassVar[str]  # the property of the accumulation guide it protects, e.g. "P2"
    summary: ClassVar[str]  # one line, for the rule table
    default_enabled: ClassVar[bool] = True
    #: Where the rule can fire (:mod:`accumlint.checks.gate`): its one declaration for the byte
    #: prefilter, the ast stage and the engine. Default: the rule reads microbatch loops.
    gate: ClassVar[RuleGate] = LOOP

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        legacy = sorted(_LEGACY_GATE & set(cls.__dict__))
        if legacy:
            raise TypeError(f"{cls.__name__} declares {', '.join(legacy)}: declare `gate = RuleGate(...)` "
                            "(accumlint/checks/gate.py) instead")
        spec = BY_CODE.get(cls.__dict__.get("code", ""))
        if spec is None or spec.implemented_by != (cls.__module__.rsplit(".", 1)[-1], cls.__name__):
            return
        declared = sorted(_FROM_SPEC & set(cls.__dict__))
        if declared:
            raise TypeError(f"{cls.__name__} declares {', '.join(declared)}: the spec of {spec.code} says it")
        cls.spec = spec
        cls.name, cls.severity, cls.principle = spec.name, spec.severity, spec.principle
        cls.summary, cls.default_enabled = spec.summary, spec.default_enabled

    @classmethod
    def url(cls) -> str:
        """The rule's catalogue page."""
        return DOCS_URL.format(code=cls.code, name=cls.name)

    def check(self, model: FileModel) -> Iterator[Hit]:
        raise NotImplementedError

