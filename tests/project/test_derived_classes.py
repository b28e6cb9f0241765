"""The project index follows a class whose base, in another module, performs training events: the
byte stage marks each class with the names of its bases (:data:`accumlint.project.index.DERIVES`)
and the run resolves the marks over the whole project."""

from __future__ import annotations

from accumlint.project.index import DERIVES, FOLLOW_ONLY, ProjectIndex, resolve_derived

_BASE = b"""
class RLTrainer:
    def step(self, batch):
        self.accelerator.backward(self.loss(batch))
        self.optimizer.step()
"""
_DERIVED = b"""
import torch
from .rl_trainer import RLTrainer


class PPOTrainer(rl_trainer.RLTrainer, Generic[T], metaclass=ABCMeta):
    def loss(self, batch):
        return batch.mean()


class Config(object):
    pass


class Plain:
    pass
"""


def test_a_module_without_events_marks_its_classes_with_their_bases() -> None:
    assert ProjectIndex.names_of(_BASE) == ("RLTrainer",)
    assert ProjectIndex.names_of(_DERIVED) == (f"{DERIVES}PPOTrainer:RLTrainer,Generic",)


def test_a_mark_resolves_where_a_base_performs_events_a_few_generations_down() -> None:
    names = {"/p/base.py": ("RLTrainer", f"{FOLLOW_ONLY}make_loss"),
             "/p/ppo.py": (f"{DERIVES}PPOTrainer:RLTrainer",),
             "/p/tuned.py": (f"{DERIVES}TunedPPO:PPOTrainer,Mixin", f"{DERIVES}Unrelated:Dataset")}
    assert resolve_derived(names) == {"/p/base.py": ("RLTrainer", f"{FOLLOW_ONLY}make_loss"),
                                      "/p/ppo.py": ("PPOTrainer",), "/p/tuned.py": ("TunedPPO",)}


def test_the_index_follows_the_subclass_by_name() -> None:
    index = ProjectIndex(("/p",))
    index.set_names({"/p/base.py": ProjectIndex.names_of(_BASE), "/p/ppo.py": ProjectIndex.names_of(_DERIVED)})
    assert {b"RLTrainer", b"PPOTrainer"} <= index.event_names()
    assert b"Config" not in index.followed_names() and b"Plain" not in index.followed_names()
    # what the cache keeps for the file is its own marks, resolved again by each run
    assert index.names_for("/p/ppo.py") == (f"{DERIVES}PPOTrainer:RLTrainer,Generic",)
