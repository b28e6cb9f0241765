"""The byte stage and the project pass's names: what they read of the rules, without LibCST.

The byte stage is :func:`may_fire`; the project pass's names are :func:`backward_used` and
:func:`performs_events`; both read a :class:`Vocabulary`.

The engine builds the vocabulary from the rule classes and the model's call tables
(:func:`accumlint.pipeline.engine.vocabulary`: importing them imports LibCST, about a quarter of a
second); the result cache keeps it (:meth:`accumlint.run.cache.ResultCache.stored_vocabulary`,
under the fingerprint that covers the tool's own source), so a run whose files the byte stage
clears (a pre-commit hook on a file with no training loop) never loads LibCST. Both go through
the same functions here: the stored vocabulary decides exactly as the engine's.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from accumlint.lazy import lazy_module
from accumlint.source.prefilter import LedPattern, NeedlePattern, marker_search, names_search

if TYPE_CHECKING:
    from accumlint.project import ProjectIndex

# the frameworks' conventions build the vocabulary: a run whose cache keeps one need not load them
fw = lazy_module("accumlint.frameworks")


class StageGate(Protocol):
    """What the byte stage reads of a :class:`~accumlint.checks.gate.RuleGate`."""

    markers: tuple[bytes, ...]
    requires: NeedlePattern | None
    backward: bool

    @property
    def everywhere(self) -> bool: ...


class GatedRule(Protocol):
    """A rule as the byte stage sees it: its code and gate (a :class:`~accumlint.checks.base.Rule`)."""

    @property
    def code(self) -> str: ...

    @property
    def gate(self) -> StageGate: ...


@dataclass(frozen=True)
class StoredGate:
    """A gate read back from the cache (``requires``: needle → pattern, as its
    :class:`~accumlint.source.prefilter.NeedlePattern` was built)."""

    markers: tuple[bytes, ...]
    requires: NeedlePattern | None
    backward: bool

    @property
    def everywhere(self) -> bool:
        return not self.markers


@dataclass(frozen=True)
class StoredRule:
    code: str
    gate: StoredGate


@dataclass(frozen=True, eq=False)
class Vocabulary:
    """What the byte stage reads of the rules: ``rules`` (every rule, in code order), the markers
    of a backward event (``backward``), of the calls that make a module's functions worth
    following (``helper``: a backward, reset or clip, a wrapper, a token loss) and of those that
    make a helper run events for its caller (``events``), and the qualified names of the
    summarized library functions (``summaries``). Compared by identity (the caches below key on it)."""

    rules: tuple[GatedRule, ...]
    backward: tuple[bytes, ...]
    helper: tuple[bytes, ...]
    events: tuple[bytes, ...]
    summaries: tuple[str, ...]

    def rules_for(self, codes: frozenset[str]) -> list[GatedRule]:
        """The rules of ``codes``, in code order."""
        return [rule for rule in self.rules if rule.code in codes]

    def to_json(self) -> dict[str, Any]:
        """The vocabulary as JSON data (bytes as Latin-1 text); :meth:`from_json` reads it back."""
        def text(items: Sequence[bytes]) -> list[str]:
            return [item.decode("latin-1") for item in items]

        def needles(requires: NeedlePattern | None) -> dict[str, str] | None:
            if requires is None:
                return None
            return {needle.decode("latin-1"): pattern.pattern.decode("latin-1")
                    for needle, pattern in zip(requires.needles, requires.patterns, strict=True)}

        return {"rules": [[rule.code, text(rule.gate.markers), needles(rule.gate.requires), rule.gate.backward]
                          for rule in self.rules],
                "backward": text(self.backward), "helper": text(self.helper), "events": text(self.events),
                "summaries": list(self.summaries)}

    @classmethod
    def from_json(cls, data: Any) -> Vocabulary:
        """Read :meth:`to_json`'s data back. Raises ``ValueError``, ``TypeError``, ``KeyError``
        or ``re.error`` where it is not such data."""
        def raw(items: Any) -> tuple[bytes, ...]:
            if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
                raise TypeError("not a list of strings")
            return tuple(item.encode("latin-1") for item in items)

        def needles(value: Any) -> NeedlePattern | None:
            if value is None:
                return None
            if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
                raise TypeError("not a table of patterns")
            return NeedlePattern({needle.encode("latin-1"): pattern.encode("latin-1")
                                  for needle, pattern in value.items()})

        rules = []
        for code, markers, requires, backward in data["rules"]:
            if not isinstance(code, str) or not isinstance(backward, bool):
                raise TypeError("not a rule")
            rules.append(StoredRule(code, StoredGate(raw(markers), needles(requires), backward)))
        summaries = raw(data["summaries"])
        return cls(tuple(rules), raw(data["backward"]), raw(data["helper"]), raw(data["events"]),
                   tuple(name.decode("latin-1") for name in summaries))


# --- the stage --------------------------------------------------------------------------------
def performs_events(data: bytes, vocabulary: Vocabulary) -> bool:
    """Whether ``data`` calls a backward, reset or clip (``vocabulary.events``)."""
    return bool(marker_search(vocabulary.events).used(data))


def backward_used(data: bytes, vocabulary: Vocabulary) -> bool:
    """Whether the code of ``data`` calls a backward, a gradient reset or a clip
    (``vocabulary.helper``): its functions may perform them for a caller in another module."""
    return bool(marker_search(vocabulary.helper).used(data))


def project_backward(path: str | None, data: bytes, used: set[bytes], vocabulary: Vocabulary,
                     project: ProjectIndex | None) -> set[bytes]:
    """``used``, plus every rule's markers when the file names a function or class of its
    ``project`` whose module calls a backward, reset or clip (the model may follow the call there)."""
    return used | set(screen_markers(vocabulary.rules, vocabulary)) if calls_out(path, data, vocabulary, project) \
        else used


def calls_out(path: str | None, data: bytes, vocabulary: Vocabulary, project: ProjectIndex | None) -> bool:
    """Whether the file may run a backward, reset or clip through code outside it: it names a
    library function a table row says performs events, a timm-style loss scaler, or a
    function or class of its ``project`` whose module performs them (the model may follow the
    call there; the ast stage, which sees only this file, then cannot judge it)."""
    search = names_search(vocabulary.summaries)
    if search is not None and search.search(data):
        return True
    if loss_scaler_gate().search(data):
        return True  # its backward is behind the call
    if inherited_backward().search(data):
        return True  # a library base class's method runs it (an HF Trainer subclass's own loop)
    if lightning_module().search(data) and any(base.encode() in data for base in fw.lightning.MODULE_BASES):
        return True  # Lightning's loop runs the backward of a LightningModule's `training_step`
    if path is None:
        return False
    return project is not None and project.root_of(path) is not None and project.mentions_event_name(data, path)


@functools.cache
def inherited_backward() -> LedPattern:
    """A call on ``self`` of a method that a library base class's row runs a backward in
    (:data:`accumlint.frameworks.INHERITED_BACKWARDS`: ``self.training_step(`` in the own loop of an
    HF Trainer subclass), searched from the method's name."""
    names = sorted(name.encode() for name in fw.INHERITED_BACKWARDS)
    return LedPattern(re.compile(rb"(?<=self\.)(?:" + b"|".join(map(re.escape, names)) + rb")\s*\("), names)


@functools.cache
def lightning_module() -> LedPattern:
    """The definition of a LightningModule's microbatch hook (``def training_step(``: Lightning
    backpropagates what it returns), searched from the hook's name."""
    names = sorted(name.encode() for name in fw.lightning.MICROBATCH_HOOKS)
    return LedPattern(re.compile(rb"(?<=def )(?:" + b"|".join(map(re.escape, names)) + rb")\s*\("), names)


@functools.cache
def loss_scaler_gate() -> LedPattern:
    """timm's loss-scaler gate keyword in the bytes (``update_grad=``), searched from its names."""
    return LedPattern(fw.timm.LOSS_SCALER_GATE_BYTES, (gate.encode() for gate in fw.timm.LOSS_SCALER_CONVENTION))


def may_fire(data: bytes, rules: Sequence[GatedRule], vocabulary: Vocabulary, *, in_strings: bool = False,
             path: str | None = None, project: ProjectIndex | None = None) -> bool:
    """The byte-level prefilter: whether any of ``rules`` can fire on a file with these bytes
    (see :func:`accumlint.pipeline.engine.may_fire`)."""
    markers = marker_bytes(tuple(rules), vocabulary)
    used = marker_search(markers).used(data, in_strings) if markers else set()
    if markers:
        used = project_backward(path, data, used, vocabulary, project)
    return bool(rules_in_bytes(data, rules, used, vocabulary))


_Rule = TypeVar("_Rule", bound=GatedRule)


def rules_in_bytes(data: bytes, rules: Sequence[_Rule], used: set[bytes], vocabulary: Vocabulary) -> list[_Rule]:
    """The rules of ``rules`` that may fire on ``data``, whose code uses the markers ``used``
    (see :func:`may_fire`)."""
    backward = not used.isdisjoint(vocabulary.backward)
    return [
        rule
        for rule in rules
        if (gate := rule.gate).everywhere
        or (not used.isdisjoint(gate.markers) and (backward or not gate.backward)
            and (gate.requires is None or gate.requires.search(data)))
    ]


@functools.lru_cache(maxsize=64)
def marker_bytes(rules: tuple[GatedRule, ...], vocabulary: Vocabulary) -> tuple[bytes, ...]:
    """The union of the markers of ``rules`` (a rule without markers adds none: it may fire
    anywhere), and the backward markers where a rule needs one besides its own."""
    backward = vocabulary.backward if any(rule.gate.backward for rule in rules) else ()
    return tuple(sorted({*backward, *(marker for rule in rules for marker in rule.gate.markers)}))


@functools.lru_cache(maxsize=64)
def screen_markers(rules: tuple[GatedRule, ...], vocabulary: Vocabulary) -> tuple[bytes, ...]:
    """The markers of ``rules`` and the backward markers: the cheap stages search for both in one pass."""
    return tuple(sorted({*marker_bytes(rules, vocabulary), *vocabulary.backward}))


_Value = TypeVar("_Value")


def later_stage(incomplete: list[str], stage: str, run: Callable[[], _Value], fallback: _Value) -> _Value:
    """``run()``, a stage after a file's rules (``stage`` names what it adds, e.g. "the fixes");
    where it raises, ``fallback``, and the reason is appended to ``incomplete`` (a
    :attr:`~accumlint.pipeline.engine.FileResult.incomplete`): the findings already made are kept and
    the file is reported as not fully checked, never as clean."""
    try:
        return run()
    except Exception as exc:  # noqa: BLE001 - RecursionError on deep valid code, a tokenizer's error
        detail = " ".join(str(exc).split())[:200]
        incomplete.append(f"{stage} could not be computed ({type(exc).__name__}{': ' if detail else ''}{detail})")
        return fallback
