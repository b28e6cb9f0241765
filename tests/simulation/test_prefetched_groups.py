"""A group whose microbatches are all drawn first and trained on after (``for _ in range(A):
held.append(next(it))`` then ``for x, y in held: ... backward()``; the count of tokens of the
whole group taken between the two loops), and a microbatch body the loop reaches through an
attribute bound to a method (``self.fwd_bwd = self._fwd_bwd`` in the constructor, as a trainer
that may wrap it in a CUDA graph does). The draw loop names A; each backward of the second loop
is the microbatch its item was drawn as. Field trial 54 (an LLM pre-training trainer): the loop
was undecided, "no run reached a backward"."""

from __future__ import annotations

import libcst as cst
import pytest

from accumlint.model.kinds import EventKind
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import simulate
from tests.support import lint

#: a trainer class: ``{call}`` how the update calls its microbatch body, ``{body}`` what the body
#: does after its backward, ``{replay}`` how the second loop goes over what the first drew
_TRAINER = """
import torch
import torch.nn.functional as F


class Trainer:
    def __init__(self, cfg, net, loader):
        self.cfg, self.net, self.loader = cfg, net, loader
        self.opt = torch.optim.AdamW(net.parameters(), lr=3e-4)
        self.accum = cfg.tokens_per_update // cfg.tokens_per_micro
        self.updates = 0
        self.fwd_bwd = self._fwd_bwd
        if cfg.compile:
            self.fwd_bwd = torch.compile(self.fwd_bwd)

    def batches(self, loader):
        while True:
            for batch in loader:
                yield batch["ids"], batch["labels"]

    def _fwd_bwd(self, ids, labels, tokens):
        logits = self.net(ids)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum") / tokens
        loss.backward(){body}
        return loss.detach()

    def update(self, stream):
        self.opt.zero_grad()
        held = []
        tokens = 0
        for _ in range(self.accum):
            ids, labels = next(stream)
            tokens += (labels != -100).sum()
            held.append((ids, labels))
{replay}
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)
        self.opt.step()

    def fit(self):
        stream = self.batches(self.loader)
        while self.updates < self.cfg.max_updates:
            self.updates += 1
            self.update(stream)
"""

_REPLAY = """        for ids, labels in held:
            self.{call}(ids, labels, tokens)"""

def _trainer(call: str = "fwd_bwd", body: str = "") -> str:
    return _TRAINER.replace("{replay}", _REPLAY.replace("{call}", call)).replace("{body}", body)


#: the draw and replay loops of :data:`_TRAINER`'s update (what :func:`_with_update_body` replaces)
_DRAW_AND_REPLAY = """            ids, labels = next(stream)
            tokens += (labels != -100).sum()
            held.append((ids, labels))
        for ids, labels in held:
            self.fwd_bwd(ids, labels, tokens)"""


def _with_update_body(body: str) -> str:
    """:data:`_TRAINER` with ``body`` for its draw and replay loops, ``self.pieces`` (one chunk per
    microbatch, as without pipelining) set by the constructor."""
    source = _trainer().replace(_DRAW_AND_REPLAY, body)
    assert body in source
    return source.replace("        self.updates = 0\n", "        self.updates = 0\n        self.pieces = 1\n")


def _fit(source: str):
    (result,) = [r for r in simulate(ModuleFunctions(cst.parse_module(source)), "trainer.py")
                 if r.entry.name == "Trainer.fit"]
    return result


@pytest.mark.parametrize("call", ["fwd_bwd", "_fwd_bwd"])
def test_the_draw_loop_names_a_and_each_backward_is_its_own_microbatch(call: str) -> None:
    result = _fit(_trainer(call))
    assert result.decided, result.reasons()
    assert result.symbols == ("self.accum",)
    whole = [t for t in result.traces if t.configuration.accumulation == 4 and t.configuration.microbatches == 8
             and t.configuration.replicas == 1]
    assert whole
    for trace in whole:
        backwards = [(e.epoch, e.microbatch) for e in trace.events if e.kind is EventKind.BACKWARD]
        updates = [(e.epoch, e.microbatch) for e in trace.events if e.kind is EventKind.UPDATE]
        assert backwards == [(0, m) for m in range(8)]
        assert updates == [(0, 3), (0, 7)]
    assert lint(_trainer(call)) == []


def test_a_nested_replay_of_the_drawn_microbatches_is_followed_too() -> None:
    """Each microbatch drawn as a list of pieces (a pipeline's chunks: one without pipelining), the
    list of lists replayed."""
    source = _with_update_body("""            pieces = []
            for _ in range(self.pieces):
                ids, labels = next(stream)
                pieces.append((ids, labels))
            held.append(pieces)
        for pieces in held:
            moved = []
            for ids, labels in pieces:
                moved.append((ids.cuda(), labels.cuda()))
            self.fwd_bwd(moved[0][0], moved[0][1], tokens)""")
    result = _fit(source)
    assert result.decided, result.reasons()
    trace = next(t for t in result.traces if t.configuration.accumulation == 2 and t.configuration.replicas == 1)
    assert [e.microbatch for e in trace.events if e.kind is EventKind.BACKWARD][:2] == [0, 1]


def test_a_reset_in_the_body_the_attribute_runs_is_found() -> None:
    source = _trainer(body="\n        self.opt.zero_grad()")
    assert lint(source) == [("ACC001", 25)]


def test_a_clip_in_the_body_the_attribute_runs_is_found() -> None:
    source = _trainer(body="\n        torch.nn.utils.clip_grad_norm_(self.net.parameters(), 1.0)")
    assert lint(source) == [("ACC301", 25)]


#: a script with the same two loops: no class, the draws from `iter(loader)`
_SCRIPT = """
import torch


def train(cfg, net, loader):
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    it = iter(loader)
    for update in range(cfg.updates):
        opt.zero_grad()
        held = []
        for _ in range(cfg.accum):
            held.append(next(it))
        for x, y in held:{reset}
            loss = torch.nn.functional.mse_loss(net(x), y) / cfg.accum
            loss.backward()
        opt.step()
"""


def test_a_script_that_draws_its_group_first_is_decided_and_silent() -> None:
    source = _SCRIPT.replace("{reset}", "")
    (result,) = simulate(ModuleFunctions(cst.parse_module(source)), "train.py")
    assert result.decided, result.reasons()
    assert result.symbols == ("cfg.accum",)
    assert lint(source) == []


def test_a_reset_in_the_second_loop_is_found() -> None:
    assert lint(_SCRIPT.replace("{reset}", "\n            opt.zero_grad()")) == [("ACC001", 14)]


def test_a_loop_that_draws_without_a_later_training_loop_names_no_a() -> None:
    """Batches drawn into a list that only an evaluation reads (no backward after): no group."""
    source = """
import torch


def probe(cfg, net, loader):
    it = iter(loader)
    seen = []
    for _ in range(cfg.accum):
        seen.append(next(it))
    for x, y in seen:
        print(net(x).mean())
"""
    assert all(not r.symbols for r in simulate(ModuleFunctions(cst.parse_module(source)), "probe.py"))


def test_a_list_of_drawn_chunks_trained_chunk_by_chunk_is_no_list_of_loaders() -> None:
    """``for chunk in held: for ids, labels in chunk: ...backward()``: the inner loop iterates what
    the group drew, not one loader after another."""
    source = _with_update_body("""            chunk = []
            for _ in range(self.pieces):
                chunk.append(next(stream))
            held.append(chunk)
        for chunk in held:
            for ids, labels in chunk:
                self.fwd_bwd(ids, labels, tokens)""")
    result = _fit(source)
    assert result.decided, result.reasons()
    trace = next(t for t in result.traces if t.configuration.accumulation == 4 and t.configuration.microbatches == 8
                 and t.configuration.replicas == 1)
    assert [e.microbatch for e in trace.events if e.kind is EventKind.BACKWARD] == list(range(8))
    assert lint(source) == []
