"""Where a rule can fire: one declaration per rule class, read by every stage before LibCST.

A rule's :class:`RuleGate` says, as cheaply as the stage can tell, which files the rule cannot
fire on:

1. the **byte prefilter** (:func:`accumlint.pipeline.engine.may_fire`) reads ``markers``, ``requires``
   and ``backward`` on the undecoded bytes (strings and comments excluded);
2. the **ast stage** calls ``facts`` on the :class:`~accumlint.source.source_facts.SourceFacts` of the
   interpreter's tree;
3. the **engine** gives LibCST only the files where some selected rule's gate admits them,
   and runs only those rules.

Each test may only exclude a file whose model cannot yield the rule's hit: the gate is a
necessary condition, never a heuristic. ``tests/catalogue/test_applicability.py`` runs every rule
ungated on every file with findings we have and fails where a gate drops one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from accumlint import frameworks as fw
from accumlint.model.events import BACKWARD_CALLS
from accumlint.model.owned_loops import MARKERS as OWNED_MARKERS
from accumlint.source.prefilter import NeedlePattern
from accumlint.source.source_facts import SourceFacts

#: the bytes of a loop rule: a call that makes a backward event, or a framework hook that owns a loop
LOOP_MARKERS: tuple[bytes, ...] = tuple(sorted(name.encode() for name in BACKWARD_CALLS | OWNED_MARKERS))

#: What a file's bytes hold wherever it names A or a global batch (the model's
#: ``conventions.ACCUMULATION_NAME`` and ``GLOBAL_BATCH_NAME``): the two patterns with their anchors
#: loosened, so a match of either in a name spelled in ASCII implies a match here. Strings and
#: comments match too: the ``ast`` stage decides those. (Byte patterns live with the gates, never in the model.)
_NAME_END = rb"(?![a-z0-9_\x80-\xff])"
_A_OR_GLOBAL_BATCH_NEEDLES: dict[bytes, bytes] = {
    b"accum": b"accum",  # also accumulat, iters_to_accumulate, accumulative_counts
    b"grad": rb"grad(ient)?_?acc",
    b"ga": rb"ga(s|_steps)?" + _NAME_END,
    b"update_freq": b"update_freq",
    b"micro": rb"micro_?(steps|batches)",  # also num_micro_batches, n_micro_batches
    b"global_": rb"global_[a-z0-9_\x80-\xff]*batch",
    b"total_": rb"total_[a-z0-9_\x80-\xff]*batch",
    b"eff": rb"eff(ective)?_[a-z0-9_\x80-\xff]*batch",
    b"tokens_per_": rb"tokens_per_(iter|step|update)",
}
A_OR_GLOBAL_BATCH_BYTES = NeedlePattern(_A_OR_GLOBAL_BATCH_NEEDLES)
#: What a file's bytes hold wherever a name is A by its use alone (``FileModel.accumulation_aliases``):
#: a modulo by a name (a gate's divisor, ``len(loader) % A``) or the ``range`` of a name (a
#: microbatch loop's bound); the keywords that configure A all hold ``accum``.
A_NAMED_OR_BOUND_BYTES = NeedlePattern({
    **_A_OR_GLOBAL_BATCH_NEEDLES,
    b"%": rb"%\s*[a-z_\x80-\xff(]",
    b"range": rb"range\(\s*[a-z_\x80-\xff]",
})


@dataclass(frozen=True)
class RuleGate:
    """The files a rule can fire on.

    ``markers``: identifiers (bytes) one of which the code must call or define (empty: every
    file, and the other fields are not read); ``requires``: a pattern the bytes must match as
    well (for a rule whose markers are common names); ``backward``: a backward marker must be
    used as well (or a project helper may run one); ``facts``: the test on the names of the
    interpreter's tree (None: the byte tests decide).
    """

    markers: tuple[bytes, ...] = LOOP_MARKERS
    requires: NeedlePattern | None = None
    backward: bool = False
    facts: Callable[[SourceFacts], bool] | None = None

    @property
    def everywhere(self) -> bool:
        """Whether the rule may fire on any file (no markers)."""
        return not self.markers

    def admits(self, facts: SourceFacts) -> bool:
        """The ast stage: whether the rule may fire on a module with these facts."""
        return self.everywhere or self.facts is None or self.facts(facts)


def runs_loop(facts: SourceFacts) -> bool:
    """Whether the module may hold a microbatch loop the model builds: a function (or the top
    level) that holds a loop and may run a backward (itself, or through a function, class or
    name of the module it reaches: :attr:`SourceFacts.loop_reach`), or a loop a framework
    owns (:func:`owns_loop`), or a Lightning microbatch hook (:func:`defines_lightning_hook`)
    that calls a backward."""
    if owns_loop(facts) or (defines_lightning_hook(facts) and facts.calls(BACKWARD_CALLS)):
        return True
    # the walk only where a backward is named at all (what a loop reaches is named in the module)
    return facts.mentions(BACKWARD_CALLS) and not facts.loop_reach.isdisjoint(BACKWARD_CALLS)


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


#: the gate of a rule that reads the model's microbatch loops (the default)
LOOP = RuleGate(facts=runs_loop)
#: the gate of a rule that reads every backward event, in a loop or not
BACKWARD = RuleGate(facts=lambda facts: facts.calls(BACKWARD_CALLS) or owns_loop(facts))
#: the gate of a rule that may fire on any file
EVERYWHERE = RuleGate(markers=())
