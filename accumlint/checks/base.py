"""What a rule is: a small class that reads the file's group model and yields hits."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from accumlint import frameworks as fw
from accumlint.findings import Severity
from accumlint.model.events import BACKWARD_CALLS
from accumlint.model.owned_loops import MARKERS as OWNED_MARKERS
from accumlint.prefilter import NeedlePattern
from accumlint.source_facts import SourceFacts
from accumlint.spec import BY_CODE, DOCS_URL, RuleSpec

if TYPE_CHECKING:
    from accumlint.model import FileModel


@dataclass(frozen=True)
class Hit:
    """A rule's verdict on one node: ``message`` says what happens at run time, ``fix`` what to do."""

    node: cst.CSTNode
    message: str
    fix: str

_FROM_SPEC = frozenset({"name", "severity", "principle", "summary", "default_enabled"})


class Rule:
    """Base class of every rule.

    Subclasses set ``code`` and implement :meth:`check`, which must only read the
    :class:`~accumlint.model.FileModel` (never re-derive loop structure) and must stay silent
    where the model answers "unknown". Name, severity, principle, summary and default come from
    the rule's entry in ``accumlint/spec.py`` (``spec``); a class whose code has no entry (a
    test's stand-in rule) declares them itself.
    """

    code: ClassVar[str]
    spec: ClassVar[RuleSpec | None] = None
    name: ClassVar[str]
    severity: ClassVar[Severity]
    principle: ClassVar[str]  # the property of the accumulation guide it protects, e.g. "P2"
    summary: ClassVar[str]  # one line, for the rule table
    default_enabled: ClassVar[bool] = True
    #: Source substrings without which the rule cannot fire (the engine skips the model when a
    #: file holds none of the selected rules' markers; empty: always run). Every loop rule needs a backward.
    markers: ClassVar[tuple[bytes, ...]] = tuple(sorted(name.encode() for name in BACKWARD_CALLS | OWNED_MARKERS))
    #: For a rule whose markers are common names (ACC404: ``device_count``): a pattern the bytes
    #: must match as well, searched for only in a file where one of the markers is used. None:
    #: the markers decide alone.
    requires: ClassVar[NeedlePattern | None] = None
    #: For a rule whose markers are common names (ACC007: ``update``, ``step``) and whose
    #: :meth:`applies` needs a backward call too: the byte prefilter passes a file only where a
    #: backward marker is used as well (or a project helper may run one; see ``engine.may_fire``).
    backward_required: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        spec = BY_CODE.get(cls.__dict__.get("code", ""))
        if spec is None or spec.implemented_by != (cls.__module__.rsplit(".", 1)[-1], cls.__name__):
            return
        declared = sorted(_FROM_SPEC & set(cls.__dict__))
        if declared:
            raise TypeError(f"{cls.__name__} declares {', '.join(declared)}: the spec of {spec.code} says it")
        cls.spec = spec
        cls.name, cls.severity, cls.principle = spec.name, spec.severity, spec.principle
        cls.summary, cls.default_enabled = spec.summary, spec.default_enabled

    def applies(self, facts: SourceFacts) -> bool:
        """Whether the rule may fire on a module with these facts: False only where its check
        cannot yield a hit, whatever the rest of the file (the engine then skips the LibCST
        parse unless another selected rule applies; tests/test_applicability.py checks every
        rule on every example with findings).

        The default fits a rule that reads the model's microbatch loops or backward events:
        both need a call that makes a backward event (``model/events.py``). A rule without
        markers applies everywhere.
        """
        return not self.markers or facts.calls(BACKWARD_CALLS) or owns_loop(facts)

    @classmethod
    def url(cls) -> str:
        """The rule's catalogue page."""
        return DOCS_URL.format(code=cls.code, name=cls.name)

    def check(self, model: FileModel) -> Iterator[Hit]:
        raise NotImplementedError


def owns_loop(facts: SourceFacts) -> bool:
    """Whether the module may hand a framework a loop body (``Engine(process_fn)``, a callback's
    ``on_batch_end``, a ``train_step`` override): the model rebuilds that framework's loop
    (``model/owned_loops.py``) even when the module calls no backward itself."""
    return facts.calls(OWNED_MARKERS) or facts.defines(OWNED_MARKERS)


def defines_lightning_hook(facts: SourceFacts) -> bool:
    """Whether the module may define a LightningModule's microbatch hook (``training_step`` in
    a class with a base named ``LightningModule``, lightning 2.6.6): the model walks such a
    hook as a microbatch loop even when the module calls no backward."""
    return facts.defines(fw.lightning.MICROBATCH_HOOKS) and facts.mentions(fw.lightning.MODULE_BASES)
