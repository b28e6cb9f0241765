"""An attribute whose setter stores a parameter annotated with a project class holds an instance of
that class (field trial 64: a PPO learner's ``self.strategy``).

A loop method run alone (its class's ``setup`` unseen) calls ``self.strategy.backward(loss,
self.engine)`` and ``self.strategy.optimizer_step(self.engine)``. The only write of
``self.strategy`` in the class stores ``strategy: EngineStrategy``: the run follows the methods
of that class, so the engine's backward and step are events of the loop, and the engine is known
by its use.
"""

from __future__ import annotations

import textwrap

import libcst as cst

from accumlint.model.kinds import Role
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from accumlint.model.trace import Configuration
from accumlint.spec.vocabulary import EventKind

LEARNER = """
class EngineStrategy:
    def backward(self, loss, model):
        model.backward(loss)

    def optimizer_step(self, model):
        model.step()


class Learner:
    def setup(self, strategy: {annotation}, engine):
        self.strategy = strategy
        self.engine = engine

    def learn(self, loader):
        for idx, batch in enumerate(loader):
            loss = self.engine(batch).mean()
            self.strategy.backward(loss, self.engine)
            self.strategy.optimizer_step(self.engine)
"""


def _learn(annotation: str):
    results = simulate(ModuleFunctions(cst.parse_module(textwrap.dedent(LEARNER.format(annotation=annotation)))),
                       "train.py")
    (learn,) = [r for r in results if r.entry.name == "Learner.learn"]
    return learn


def test_the_annotated_class_of_a_stored_parameter_is_followed() -> None:
    learn = _learn("EngineStrategy")
    assert {(f.label, f.role) for f in learn.roles} >= {("self.engine", Role.ENGINE)}
    trace = next(t for t in learn.traces if t.configuration == Configuration(1, 2))
    kinds = [e.kind for e in trace.events if e.kind in (EventKind.BACKWARD, EventKind.UPDATE)]
    assert kinds.count(EventKind.BACKWARD) == 4 and kinds.count(EventKind.UPDATE) == 4


def test_a_library_annotation_leaves_the_attribute_unknown() -> None:
    learn = _learn("object")
    assert ("self.engine", Role.ENGINE) not in {(f.label, f.role) for f in learn.roles}
