"""Tiny CPU training loops for the runtime-guard tests: one correct loop and its faulty variants
(the rows of the trace table in runtime-guard-design.md §1), on a token classifier trained
with cross entropy so that the loss normalization can be inferred."""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import runtime_guard

VOCAB = 7
A = 4
torch.set_num_threads(1)  # tiny tensors: thread hand-offs cost more than the math on a shared machine


class TinyLM(nn.Module):
    """Embedding -> dropout -> linear head over ``VOCAB`` classes; input ``[m, T]`` ids, output ``[m, T, V]``."""

    def __init__(self, dropout: float = 0.1, batchnorm: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 16)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.BatchNorm1d(16) if batchnorm else None
        self.head = nn.Linear(16, VOCAB)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor | None = None) -> torch.Tensor:
        """``labels`` is accepted and ignored (HF style), so that the replay can find them."""
        h = self.drop(self.embed(ids))
        if self.norm is not None:
            h = self.norm(h.transpose(1, 2)).transpose(1, 2)
        return self.head(torch.tanh(h))


def make_data(groups: int, lengths: list[int] | None = None, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``groups * A`` microbatches of ids ``[4, 12]`` and labels with ``-100`` after each
    microbatch's length (``lengths`` cycles over the microbatches of a group; default: full)."""
    g = torch.Generator().manual_seed(seed)
    data = []
    for i in range(groups * A):
        ids = torch.randint(0, VOCAB, (4, 12), generator=g)
        labels = torch.randint(0, VOCAB, (4, 12), generator=g)
        if lengths is not None:
            labels[:, lengths[i % len(lengths)]:] = -100
        data.append((ids, labels))
    return data


@dataclass
class Result:
    report: runtime_guard.Report | None
    params: list[torch.Tensor]
    optimizer_state: dict[str, Any]
    rng: torch.Tensor


def train(
    variant: str = "correct",
    *,
    guard: bool = True,
    groups: int = 4,
    probe_groups: int = 2,
    lengths: list[int] | None = None,
    scaler: bool = False,
    accumulation_steps: int | None = A,
    probe_options: dict[str, Any] | None = None,
    dropout: float = 0.1,
    batchnorm: bool = False,
) -> Result:
    """Run ``groups`` accumulation groups of the loop ``variant`` and return the report and final state.

    Variants: correct, zero_each, grad_none_each, no_zero, sched_each, step_each, clip_each,
    clip_with_norm_each, clip_each_prebound, second_optimizer, losses_list, running_total, outputs_list,
    sum_then_backward,
    retain_graph, zero_before_step, zero_at_group_start, zero_between_forward_and_backward,
    eval_forward, mean_of_means, divided_twice, not_divided, label_smoothing, unscale_update_each,
    clip_before_unscale, inject_inf; writes through ``.data`` (no version-counter bump):
    data_zero_each, data_scale_each, data_update_each.
    """
    torch.manual_seed(0)
    model = TinyLM(dropout, batchnorm)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    other = torch.optim.SGD(model.head.parameters(), lr=1e-3) if variant == "second_optimizer" else None
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
    grad_scaler = torch.amp.GradScaler("cpu", init_scale=256.0) if scaler else None
    data = make_data(groups, lengths)
    group_tokens = [
        sum(int((data[g * A + k][1] != -100).sum()) for k in range(A)) for g in range(groups)
    ]
    prebound_clip = torch.nn.utils.clip_grad_norm_  # bound before the probe attaches
    kept: list[Any] = []
    total: Any = 0.0
    options = dict(accumulation_steps=accumulation_steps, scheduler=sched, scaler=grad_scaler, groups=probe_groups)
    options.update(probe_options or {})
    ctx = runtime_guard.probe(model, opt, **options) if guard else contextlib.nullcontext()
    with ctx as p:
        pending: list[torch.Tensor] = []
        for i, (ids, labels) in enumerate(data):
            k = i % A
            last = k == A - 1
            if variant == "zero_each":
                opt.zero_grad()
            if variant == "data_zero_each":  # the legacy reset, invisible to version counters
                for param in model.parameters():
                    if param.grad is not None:
                        param.grad.data.zero_()
            if variant == "zero_at_group_start" and k == 0:
                opt.zero_grad()
            if variant == "eval_forward":
                model.eval()
                with torch.no_grad():
                    model(ids)
                model.train()
            logits = model(ids, labels=labels) if options.get("normalization") == "replay" else model(ids)
            if variant == "zero_between_forward_and_backward" and k == 0:
                opt.zero_grad()
            if variant == "grad_none_each":
                for param in model.parameters():
                    param.grad = None
            flat_logits, flat_labels = logits.reshape(-1, VOCAB), labels.reshape(-1)
            if variant in ("mean_of_means", "not_divided", "step_each"):
                loss = nn.functional.cross_entropy(flat_logits, flat_labels)
                loss = loss if variant == "not_divided" else loss / A
            else:
                smoothing = 0.1 if variant == "label_smoothing" else 0.0
                loss = nn.functional.cross_entropy(flat_logits, flat_labels, reduction="sum",
                                                   label_smoothing=smoothing) / group_tokens[i // A]
                if variant == "divided_twice":
                    loss = loss / A
            if variant == "sum_then_backward":
                pending.append(loss)
                if last:
                    torch.stack(pending).sum().backward()
                    pending = []
            elif grad_scaler is not None:
                grad_scaler.scale(loss).backward()
            else:
                loss.backward(retain_graph=variant == "retain_graph")
            if variant == "losses_list":
                kept.append(loss)
            elif variant == "running_total":
                total = total + loss
            elif variant == "outputs_list":
                kept.append(logits)
            if variant == "clip_each":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1e-3)
            if variant == "clip_with_norm_each":  # the norm computed apart, then the clip (torch >= 2.6)
                params = list(model.parameters())
                norm = torch.nn.utils.get_total_norm([p.grad for p in params])
                torch.nn.utils.clip_grads_with_norm_(params, 1e-3, norm)
            if variant == "clip_each_prebound":
                prebound_clip(model.parameters(), 1e-3)
            if variant == "sched_each":
                sched.step()
            if variant == "second_optimizer":
                other.step()
            if variant == "data_scale_each":  # a hand-made clip through .data
                for param in model.parameters():
                    param.grad.data.mul_(0.5)
            if variant == "data_update_each":  # a hand-made SGD step through .data, not the probed optimizer
                for param in model.head.parameters():
                    param.data.add_(param.grad.data, alpha=-1e-3)
            if variant == "unscale_update_each" and not last:
                grad_scaler.unscale_(opt)
                grad_scaler.update()
            if variant == "step_each":
                opt.step()
                if last:
                    opt.zero_grad()
                continue
            if not last:
                continue
            if variant == "zero_before_step":
                opt.zero_grad()
            if grad_scaler is not None:
                if variant == "inject_inf" and i // A == 0:
                    next(model.parameters()).grad[0, 0] = float("inf")
                if variant == "clip_before_unscale":
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                else:
                    grad_scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                grad_scaler.step(opt)
                grad_scaler.update()
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            if variant != "sched_each":
                sched.step()
            if variant not in ("no_zero", "zero_at_group_start", "zero_between_forward_and_backward"):
                opt.zero_grad()
    report = p.report() if guard else None
    return Result(report, [t.detach().clone() for t in model.state_dict().values()], opt.state_dict(),
                  torch.get_rng_state())


def bitwise_equal(a: Result, b: Result) -> bool:
    """Same parameters, buffers, optimizer state and RNG state, bit for bit."""
    def same(x: Any, y: Any) -> bool:
        if isinstance(x, torch.Tensor):
            return isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape and bool(
                torch.equal(x.view(torch.uint8) if x.dim() else x, y.view(torch.uint8) if y.dim() else y))
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return len(x) == len(y) and all(same(u, v) for u, v in zip(x, y, strict=True))
        return x == y

    return same(a.params, b.params) and same(a.optimizer_state, b.optimizer_state) and same(a.rng, b.rng)


#: Loops over a shuffled DataLoader for the probe at an epoch end (ACC005): what each does with
#: the epoch's last ``len(loader) % A`` microbatches.
EPOCH_VARIANTS = {
    "true_denominator": "updated after the loader's last batch, each tail loss divided by the tail's size r",
    "weighted_r_over_a": "updated after the loader's last batch, each tail loss still divided by A",
    "dropped": "no update after the tail; optimizer.zero_grad() at the start of every epoch",
    "leaks": "no update after the tail and no reset: the tail joins the next epoch's first group",
}


class Unsized:
    """An iterable over a loader's batches that has no ``len()``."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Any:
        return iter(self.loader)


def epoch_loader(batches: int, sized: bool = True) -> Any:
    """A shuffled ``DataLoader`` of ``batches`` microbatches (ids and labels ``[4, 12]``, every token
    supervised) per epoch; wrapped in :class:`Unsized` when ``sized`` is False."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (batches * 4, 12), generator=g)
    labels = torch.randint(0, VOCAB, (batches * 4, 12), generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(ids, labels), batch_size=4, shuffle=True)
    return loader if sized else Unsized(loader)


def train_epochs(
    variant: str,
    *,
    guard: bool = True,
    batches: int = 14,
    epochs: int = 2,
    sized: bool = True,
    probe_options: dict[str, Any] | None = None,
    fail_at: tuple[int, int] | None = None,
    evaluations: int = 0,
) -> Result:
    """``epochs`` epochs of the loop ``variant`` (:data:`EPOCH_VARIANTS`) over :func:`epoch_loader`,
    probed at the first epoch's end (``at="epoch_end"``, ``loader=``) unless ``probe_options`` says
    otherwise. ``fail_at=(epoch, batch)`` raises ``KeyError`` after that microbatch's backward.
    The loop uses ``len(loader)`` only when ``sized``; else the known ``batches``. ``evaluations``:
    forwards in eval mode after each epoch, with autograd left on (no ``torch.no_grad()``) and no backward."""
    torch.manual_seed(0)
    model = TinyLM()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loader = epoch_loader(batches, sized)
    evaluation = epoch_loader(batches, sized)  # another loader: the watched epoch's position stays where it ended
    n = len(loader) if sized else batches
    flush = variant in ("true_denominator", "weighted_r_over_a")
    options: dict[str, Any] = dict(accumulation_steps=A, loader=loader, at="epoch_end")
    options.update(probe_options or {})
    ctx = runtime_guard.probe(model, opt, **options) if guard else contextlib.nullcontext()
    with ctx as p:
        for epoch in range(epochs):
            if variant == "dropped":
                opt.zero_grad()
            for i, (ids, labels) in enumerate(loader):
                size = min(A, n - (i - i % A)) if variant == "true_denominator" else A
                loss = nn.functional.cross_entropy(model(ids).reshape(-1, VOCAB), labels.reshape(-1)) / size
                loss.backward()
                if fail_at == (epoch, i):
                    raise KeyError(f"user error at epoch {epoch}, microbatch {i}")
                if (i + 1) % A == 0 or (flush and i + 1 == n):
                    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                    opt.step()
                    opt.zero_grad()
            if evaluations:
                model.eval()
                for ids, _ in itertools.islice(evaluation, evaluations):
                    model(ids)
                model.train()
    report = p.report() if guard else None
    return Result(report, [t.detach().clone() for t in model.state_dict().values()], opt.state_dict(),
                  torch.get_rng_state())
