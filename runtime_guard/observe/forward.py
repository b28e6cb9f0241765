"""Forward hooks: a grad-enabled forward of the probed model opens a microbatch (and a group after an update
attempt), records its fingerprints, and hooks the output and the logits for the backward. A forward with every
probed parameter frozen is no microbatch; a later pass on the batch a DataLoader yielded for the current
microbatch joins it (``ForwardObserver``, its ``_another_pass``)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from runtime_guard import frameworks
from runtime_guard.ce_weights import infer_weights, logits_of
from runtime_guard.events import FORWARD
from runtime_guard.graphs import tensors_in
from runtime_guard.observe import Observer
from runtime_guard.observe.backward import BackwardObserver
from runtime_guard.observe.copies import WeightCopies
from runtime_guard.observe.replicas import ReplicaObserver
from runtime_guard.observe.services import ProbeServices
from runtime_guard.observe.state import ProbeState
from runtime_guard.replay import capture
from runtime_guard.trace import Microbatch, ObservedGroup

#: Without a known A, a group that has not ended after this many microbatches ends the probe.
MAX_MICROBATCHES_WITHOUT_A = 256


#: Without a known A and with an update every microbatch, the probe follows up to this many groups
#: to see two gradient resets (their period is the A the loop meant: ``RunRecord.reset_period``).
MAX_GROUPS_FOR_RESETS = 32


def _first_tensor(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    """The forward's batch tensor ``[m, ...]``: the first argument that is one, else the first inside a
    tuple, list or mapping argument (a loaded batch passed whole, as Lightning's ``training_step(batch)``
    redirected through a wrapper's forward); ``None`` when there is none."""
    values = (*args, *kwargs.values())
    for value in values:
        if isinstance(value, torch.Tensor) and value.dim() >= 1:
            return value
    return next((t for value in values for t in tensors_in(value) if t.dim() >= 1), None)


def _autocast_state() -> str | None:
    """``"device:dtype"`` of the autocast region active now (CUDA first), or ``None``."""
    for device in ("cuda", "cpu"):
        try:
            if torch.is_autocast_enabled(device):
                return f"{device}:{str(torch.get_autocast_dtype(device)).removeprefix('torch.')}"
        except RuntimeError:  # device type not built into this torch
            continue
    return None



class ForwardObserver(Observer):
    """Forward hooks: a grad-enabled forward of the probed model opens a microbatch (and a group after an
    update attempt); the backward reaching its output goes to ``backward``."""

    def __init__(self, state: ProbeState, services: ProbeServices, backward: BackwardObserver,
                 replicas: ReplicaObserver, copies: WeightCopies) -> None:
        super().__init__(state, services)
        self.backward = backward
        self.replicas = replicas
        self.copies = copies

    def on_forward_pre(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """The probed model's forward pre-hook: opens a microbatch (and a group after an update attempt) and
        records its fingerprints, or joins another pass on the same loaded batch."""
        s = self.state
        if s.nested_forwards:  # a compiled wrapper and its model: the outer forward is the microbatch
            if s.active_forward is not None:
                return
            s.active_forward = module
        if s.replaying or not self.services.entry():
            return
        if not torch.is_grad_enabled():
            s.loaded = None  # an evaluation or generation forward took the batch last loaded
            return
        if s.params and not any(p.requires_grad for p in s.params):
            # every probed parameter frozen (a GAN generator's pass through its discriminator): its backward
            # accumulates nothing into them, so it is no microbatch and its loss carries none of their weight
            s.frozen_forward = True
            s.record.frozen_forwards += 1
            return
        s.in_backward = False
        s.snapshot_pending = None  # the last backward was not the group's last
        batch = _first_tensor(args, kwargs)
        if self._another_pass(batch):
            s.mb.passes += 1
            return
        group = s.group
        if group is not None and not group.closed and self._past_epoch_end(group):
            group.boundary_seq = s.record.epoch_end_seq  # the epoch end closes it: no update attempt
        if group is None or group.closed:
            index = 0 if group is None else group.index + 1
            if index == 0:
                self.services.device_peaks(reset=True)
            group = ObservedGroup(index=index, tail=self._next_is_tail(index))
            if s.record.epoch_end_seq is not None and not group.tail:
                group.role = "next"
            s.record.groups.append(group)
            s.group = group
        elif group.tail or self._too_long(group):
            self._finish_now()
            return
        if self._in_partial_group():
            group.role = "partial"
        self.copies.check_shadows(inside=bool(group.microbatches))
        shape = tuple(batch.shape) if batch is not None else None
        params_at_forward, param_bits = self.services.param_checksums()
        mb = Microbatch(
            group=group.index,
            index=len(group.microbatches),
            serial=s.serial,
            examples=int(batch.shape[0]) if batch is not None else None,
            tokens=batch.numel() if batch is not None and not batch.dtype.is_floating_point
            and not batch.dtype.is_complex and batch.dtype != torch.bool else None,
            grads_at_forward=self.services.grads(measure=not group.microbatches),  # a group's first: exact
            params_at_forward=params_at_forward,
            param_bits=param_bits,
            graphs_alive=sorted(s.tracker.graphs_alive),
            saved_bytes_at_forward=s.tracker.live_bytes,
            kept_output_bytes=s.tracker.kept_output_bytes(s.serial),
            device_bytes=self.services.device_memory(),
            autocast=_autocast_state(),  # the loop's own autocast; a framework's is read inside the forward
            lrs=tuple(self.services.lrs()),
            epoch=s.position[0] if s.position else None,
            batch=s.position[1] if s.position else None,
            # one batch yielded since the previous microbatch: not several fetched ahead for the group's forwards
            fresh_batch=(s.yields - s.yields_at_mb == 1 and s.yield_shapes.get(shape) == 1)
            if s.yields else None,
        )
        s.yields_at_mb, s.mb_input = s.yields, shape
        if params_at_forward is None:
            s.params_unsummed = mb
        if s.record.ddp:
            mb.sync_at_forward = frameworks.ddp_syncs(s.model)
        if s.gradient_state is not None and frameworks.accelerate_off_boundary(s.gradient_state):
            s.record.accumulate_seen = True
        if batch is not None and self.replicas.hashes_rows():
            self.replicas.record_rows(mb, batch)
        previous = s.mb
        if previous is not None:
            previous.saved_alive_at_next_forward = (
                s.tracker.alive_unpacked_by(previous.last_backward_serial)
                if previous.last_backward_serial is not None else 0)
        if s.comm is not None:
            s.comm_start = s.comm.buckets
        s.serial += 1
        s.tracker.current = mb.serial
        s.tracker.peak_bytes = s.tracker.live_bytes
        group.microbatches.append(mb)
        s.mb = mb
        s.autocast_pending = mb if mb.autocast is None else None
        if s.normalization == "replay":
            s.captured[mb.serial] = capture(args, kwargs)
        self.services.event(FORWARD)

    def _another_pass(self, batch: torch.Tensor | None) -> bool:
        """This forward is another pass on the batch the current microbatch's forward took: that forward was
        the first after a DataLoader yielded one batch (not the group's batches fetched ahead) with exactly one
        tensor of its input's shape (not a slice of it, nor one of several microbatches it holds), no batch was
        yielded since, no update attempt closed its group, and this input has the same shape (a GAN
        discriminator's fake batch after the real one, a second view). The passes then accumulate one
        microbatch's gradients, as the loop counts them."""
        s = self.state
        mb, group = s.mb, s.group
        return (mb is not None and mb.fresh_batch is True and group is not None and not group.closed
                and mb.group == group.index and s.yields == s.yields_at_mb
                and batch is not None and tuple(batch.shape) == s.mb_input)

    def note_passes(self) -> None:
        """At detach: the card's notes on forwards that were not microbatches of their own, and the groups whose
        microbatches cannot be counted in loaded batches (``role = "unaligned"``, not judged)."""
        rec = self.state.record
        if rec.frozen_forwards:
            rec.notes.append(f"{rec.frozen_forwards} grad-enabled forward(s) of {rec.model_class} ran with every "
                             "parameter frozen (requires_grad False, e.g. a GAN generator's pass through it): not "
                             "counted as microbatches")
        passes = sorted({mb.passes for g in rec.groups if not g.tail for mb in g.microbatches})
        if passes[-1:] in ([], [1]):
            return
        rec.notes.append(f"a microbatch is the work on one batch a DataLoader yielded: {'/'.join(map(str, passes))} "
                         "forward/backward passes of the model each")
        for g in rec.groups:
            if not g.role and not g.tail and any(mb.fresh_batch is not True for mb in g.microbatches):
                g.role = "unaligned"
                rec.notes.append(f"group {g.index}: not judged: some of its forwards did not follow a DataLoader "
                                 "yield the probe saw, so its microbatches cannot be counted in loaded batches")

    def _next_is_tail(self, index: int) -> bool:
        """The group about to start is the watched F/B after the probed groups: after group
        ``groups - 1`` from the start, after the next epoch's first group at an epoch end."""
        s = self.state
        if s.record.at_epoch_end and s.watch is not None:
            return any(g.role == "next" for g in s.record.groups)
        return index >= s.n_groups and not self._waiting_for_resets(index)

    def _waiting_for_resets(self, index: int) -> bool:
        """A unknown, every group so far one microbatch, and fewer than two resets, none after the
        first update: probe on, the reset cadence may say what A the loop meant."""
        rec = self.state.record
        if rec.accumulation_steps is not None or index >= MAX_GROUPS_FOR_RESETS:
            return False
        if any(len(g.microbatches) != 1 for g in rec.groups):
            return False
        resets = rec.resets_after()
        return not resets or (resets[0] != 0 and len(resets) < 2)

    def _past_epoch_end(self, group: ObservedGroup) -> bool:
        """The open ``group`` began before the watched epoch's end and this forward is after it."""
        s = self.state
        rec = s.record
        return (rec.epoch_end_seq is not None and bool(group.microbatches) and s.position is not None
                and group.microbatches[-1].epoch == rec.watched_epoch and s.position[0] != rec.watched_epoch)

    def _in_partial_group(self) -> bool:
        """This forward is one of the watched epoch's last ``len(loader) % A`` microbatches."""
        s = self.state
        rec, pos = s.record, s.position
        if s.watch is None or pos is None or rec.loader_length is None or pos[0] != rec.watched_epoch:
            return False
        r = rec.loader_length % (rec.accumulation_steps or 1)
        return r > 0 and pos[1] >= rec.loader_length - r

    def _too_long(self, group: ObservedGroup) -> bool:
        s = self.state
        a = s.record.accumulation_steps
        limit = 4 * a * s.n_groups if a else MAX_MICROBATCHES_WITHOUT_A
        if len(group.microbatches) >= limit:
            s.record.notes.append(
                f"group {group.index} reached {len(group.microbatches)} microbatches without an optimizer "
                "update attempt; the probe stopped watching"
            )
            return True
        return False

    def _finish_now(self) -> None:
        self.state.done = True
        self.services.detach(True)

    def on_child_forward_pre(self, module: Any, args: Any) -> None:
        """A direct child of the probed model starts its forward: the first one inside a microbatch's
        forward reads the autocast state there. Accelerate (``mixed_precision=``, accelerate 1.15.0
        ``Accelerator.prepare_model`` wraps ``model.forward``) and Fabric (``_FabricModule.forward``
        enters ``precision.forward_context()``) enter autocast inside the forward, after its pre-hook."""
        mb, self.state.autocast_pending = self.state.autocast_pending, None
        if mb is not None:
            mb.autocast = _autocast_state()

    def on_forward(self, module: Any, args: Any, kwargs: Any, output: Any) -> None:
        """The probed model's forward hook: hooks the output and the logits of the microbatch for its backward."""
        s = self.state
        if s.nested_forwards:
            if module is not s.active_forward:
                return
            s.active_forward = None
        s.autocast_pending = None  # a forward that called no child: its pre-hook reading stays
        if s.frozen_forward:  # no microbatch: nothing of its backward is the current one's
            s.frozen_forward = False
            return
        mb = s.mb
        if s.replaying or not s.attached or s.done or mb is None or not torch.is_grad_enabled():
            return
        s.tracker.watch_output(mb.serial, output)
        # the backward reaching this output starts a backward: FSDP2 with sync off (and engines that
        # keep grads elsewhere) never run the parameters' post-accumulate hooks for it
        start = next((t for t in tensors_in(output) if t.grad_fn is not None), None)
        if start is not None:
            hook = self.services.hook("output gradient hook", functools.partial(self.backward.on_output_grad, mb))
            s.logit_handles.append(start.register_hook(hook))
        if s.normalization is not None and s.record.ce_possible:
            logits = logits_of(output)
            if logits is None:
                s.record.ce_possible = False
                s.record.ce_reason = "the model output has no logits tensor ([..., V] with V >= 2)"
                return
            values = logits.detach()
            hook = self.services.hook("logits gradient hook", functools.partial(self._on_logits_grad, mb, values))
            s.logit_handles.append(logits.register_hook(hook))

    def _on_logits_grad(self, mb: Microbatch, values: torch.Tensor, grad: torch.Tensor) -> None:
        s = self.state
        if not s.attached or s.done or not s.record.ce_possible:
            return
        if grad is None:  # the loss was computed inside a compiled region: its gradient never passes the logits
            s.record.ce_possible = False
            s.record.ce_reason = "the logits output received no gradient (the loss was computed from them inside " \
                                    "a torch.compile'd region)"
            return
        weights = infer_weights(values, grad, mb.scale or 1.0)
        if mb.ce is None:
            mb.ce = weights
        else:  # a second backward through the same microbatch (rare): add up
            mb.ce.weight_sum += weights.weight_sum
            mb.ce.residual = max(mb.ce.residual, weights.residual)
