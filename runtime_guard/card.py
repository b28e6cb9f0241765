"""The card: the record of a probed run, as a JSON-ready dict.

As the accumulation guide's "The record of a run" lists it: m, A, D, effective batch, supervised
tokens, precision, normalization, last-group treatment, attempted vs applied updates, scheduler
steps per update, all-reduce rounds, memory peaks per device per group, BatchNorm modules
(ACC901) and the separate counts of microbatches, updates, examples and tokens (ACC902)."""

from __future__ import annotations

import sys
from typing import Any

import torch

from runtime_guard.checks import (
    RUNTIME_CHECKS,
    STATIC_ONLY,
    LastGroup,
    Normalization,
    graph_findings,
    infer_normalization,
    kept_graph_unobservable,
    last_group,
    microbatch_size,
    rate_status,
    rates,
    resume,
    scheduler_owners,
)
from runtime_guard.events import SCHEDULER_STEP
from runtime_guard.record import RunRecord

SCHEMA = "runtime_guard.card/1"


#: ACC102's status when the normalization rests on the factors of mean-reduced losses (no token counts).
NO_TOKEN_WEIGHTS = ("not observable: normalization inferred from the factors on mean-reduced losses, without "
                    "per-token weights")


def _checks_status(rec: RunRecord, normalization: Normalization, last: LastGroup) -> dict[str, str]:
    normalization_inferred = normalization.inferred
    observed_any = any(g.microbatches for g in rec.groups)
    d = rec.data_parallel.size if rec.data_parallel else None
    status = {}
    for code, check in RUNTIME_CHECKS.items():
        if not observed_any:
            status[code] = "not observed: no grad-enabled forward of the probed model"
        elif check.needs == "events":
            status[code] = "checked"
        elif check.needs == "ddp":
            status[code] = "checked" if rec.ddp else "not observable: the model is not a DDP wrapper"
        elif check.needs == "data-parallel":
            status[code] = "checked" if (d or 1) > 1 else "not observable: D = 1"
        elif check.needs == "ce-loss":
            status[code] = ("not observable: normalization not inferred" if not normalization_inferred else
                            NO_TOKEN_WEIGHTS if code == "ACC102" and normalization.source == "mean-loss" else
                            "checked")
        elif check.needs == "epoch-end":
            status[code] = "checked" if last.treatment != "not observed" else f"not observed: {last.detail}"
        elif check.needs == "loss-contract":
            status[code] = ("checked" if rec.user_normalizes and normalization_inferred else
                            "not observable: normalization not inferred" if rec.user_normalizes else
                            "not observable: no framework contract leaving the normalization to the loss is known")
        elif check.needs == "scheduler":
            status[code] = _scheduler_status(rec)
        elif check.needs == "scheduler-owner":
            status[code] = ("checked" if scheduler_owners(rec) or rec.scheduler_owner else
                            "not observable: no framework (Lightning, DeepSpeed, the HF Trainer) was seen stepping the "
                            "scheduler")
        elif check.needs == "weight-copy":
            status[code] = ("checked" if rec.shadow_copies and rec.shadows_apart else
                            f"not observable: the weight copies ({', '.join(rec.shadow_copies)}) never differed from "
                            "the parameters by more than 1e-4 of their values in the probed groups (no update moved "
                            "the weights enough yet: a learning-rate warmup from 0 or a tiny rate); probe more groups"
                            if rec.shadow_copies else f"not observed: {rec.shadow_search}"
                            if rec.shadow_search else "not observed: the probe ended before the first forward after "
                            "the first update, where it searches for weight copies" if rec.shadow_copies is None
                            else "not observable: no copy of the model's parameters (a weight EMA, an averaged "
                            "model) was alive at the first forward after the first update")
        elif check.needs == "logged-rate":
            status[code] = rate_status(rates(rec), rec.loggers)
        elif check.needs == "resume":
            status[code] = resume(rec).status
        elif check.needs == "effective-batch":
            status[code] = ("checked" if rec.expected_effective_batch is not None
                            else "card fact: pass effective_batch= to compare")
        else:
            status[code] = "card fact"
    several = rec.several_models()
    if observed_any and several:
        status["ACC006"] = "not observable: " + several
    if observed_any and rec.ddp and d == 1:
        status["ACC401"] = "not observable: D = 1 (one replica: an all-reduce over one process moves nothing)"
        status["ACC402"] = "not observable: D = 1 (one replica: nothing to all-reduce, no_sync changes no update)"
    kept = kept_graph_unobservable(rec)
    if observed_any and kept is not None and not any(f.code == "ACC201" for f in graph_findings(rec)):
        status["ACC201"] = kept
    if rec.unobservable:
        for code in ("ACC001", "ACC002", "ACC003", "ACC004", "ACC006", "ACC101", "ACC102", "ACC103"):
            status[code] = "not observable: " + rec.unobservable[0].split(":")[0] + " owns the update"
    for code in STATIC_ONLY:  # (the rule's page, `accumlint rule CODE`, says why)
        status[code] = "not observable: a static rule, read from the code only"
    if rec.guard_failures:
        status = dict.fromkeys(status, "not observed: " + rec.guard_failures[0])
    return status


def _scheduler_status(rec: RunRecord) -> str:
    """ACC304: scheduler steps are counted when a scheduler was given or found; the learning rate in
    ``param_groups`` is compared between the microbatches of every group of two or more."""
    if rec.scheduler_given:
        return "checked"
    if rec.lr_in_microbatches:
        return ("not observable: no LR scheduler was given to the probe or found, and lr_in_microbatches=True "
                "declares a learning rate that changes every microbatch as by design")
    if any(len(g.microbatches) >= 2 for g in rec.full_groups):
        return "checked"
    return ("not observable: no LR scheduler was given to the probe or found, and no closed group of 2 or more "
            "microbatches showed the learning rate in param_groups between microbatches")


def _allreduce(rec: RunRecord) -> dict[str, Any]:
    if not rec.ddp:
        return {"rounds_per_group": None, "how": "no DDP wrapper"}
    counted = [
        [mb.allreduce_buckets for mb in g.microbatches] for g in rec.groups
        if all(mb.allreduce_buckets is not None for mb in g.microbatches) and g.microbatches
    ]
    if counted and len(counted) == len(rec.groups):
        return {"rounds_per_group": [sum(1 for b in c if b) for c in counted],
                "buckets_per_microbatch": counted, "how": "counted by the comm hook (count_comm=True)"}
    return {
        "rounds_per_group": [sum(1 for mb in g.microbatches if mb.sync_at_forward) for g in rec.groups],
        "how": "microbatches whose forward ran with require_backward_grad_sync on (DDP arms its all-reduce there)",
    }


#: Frameworks whose version the card names when the program imported them (never imported here).
FRAMEWORK_PACKAGES = ("accelerate", "transformers", "lightning", "pytorch_lightning", "deepspeed")


def _versions() -> dict[str, str]:
    """torch's version and those of the frameworks the program imported."""
    versions = {"torch": torch.__version__}
    for name in FRAMEWORK_PACKAGES:
        module = sys.modules.get(name)
        if module is not None:
            # from the module's dict: a lazy package's __getattr__ would import (transformers' _LazyModule)
            versions[name] = str(vars(module).get("__version__", "unknown"))
    return versions


def build_card(rec: RunRecord) -> dict[str, Any]:
    """The card of ``rec`` as a dict of plain JSON types."""
    a, a_source = rec.effective_a()
    m = microbatch_size(rec)
    dp = rec.data_parallel
    d = dp.size if dp else None
    norm = infer_normalization(rec)
    last = last_group(rec)
    full = rec.full_groups
    mbs = [mb for g in rec.groups for mb in g.microbatches]
    tokens_local = [sum(n) for n in norm.tokens] if norm.inferred else None
    tokens_global = None
    if norm.inferred and rec.replica_ce:
        tokens_global = [sum(r[i][1] for r in rec.replica_ce if i < len(r)) for i in range(len(full))]
    attempted = sum(g.attempts for g in rec.groups)
    applied = sum(g.applied for g in rec.groups)
    skipped = sum(1 for g in rec.groups if g.found_inf)
    lsteps = sum(g.count(SCHEDULER_STEP) for g in rec.groups)
    memory_groups = []
    for g in rec.groups:
        memory_groups.append({
            "group": g.index,
            "tail": g.tail,
            "saved_activation_peak_bytes": g.saved_peak_bytes,
            "device_peak_bytes": g.device_peak_bytes or None,
        })
    card: dict[str, Any] = {
        "schema": SCHEMA,
        "script": rec.script or None,
        "torch": torch.__version__,
        "versions": _versions(),
        "model": rec.model_class,
        "optimizer": rec.optimizer_class,
        "optimizer_scale_invariant": bool(rec.optimizer_scale_invariant),
        "parameters": rec.parameters,
        "m": m,
        "A": a,
        "A_source": a_source,
        "D": d,
        "D_source": dp.source if dp else "unknown",
        "effective_batch": m * a * d if None not in (m, a, d) else None,
        "group_sizes": [len(g.microbatches) for g in full],
        "supervised_tokens_per_group": {"local": tokens_local, "global": tokens_global},
        "precision": {
            "param_dtypes": rec.param_dtypes,
            "autocast": sorted({mb.autocast for mb in mbs if mb.autocast}) or None,
            "scaler_scale": sorted({mb.scale for mb in mbs if mb.scale is not None}) or
            (None if rec.scaler_given else "no GradScaler given"),
        },
        "normalization": norm.verdict,
        "normalization_weight_sums": [round(s, 8) for s in norm.weight_sums] or None,
        # per closed group: the measured weight sum, the convention it is judged against and its factor
        "normalization_groups": [g.card() for g in norm.groups] or None,
        "normalization_replay": [g.replay for g in full if g.replay is not None] or None,
        "last_group": last.card,
        "updates": {
            "attempted": attempted,
            "applied": applied if not rec.unobservable else "not observed",
            "skipped_non_finite": skipped if rec.scaler_given else "not observable without the GradScaler",
        },
        "scheduler_steps_per_update": (round(lsteps / attempted, 3) if attempted and rec.scheduler_given
                                       else None),
        "all_reduce": _allreduce(rec),
        "memory": {
            "per_group": memory_groups,
            "per_microbatch": [
                {"group": mb.group, "microbatch": mb.index, "saved_activation_peak_bytes": mb.saved_peak_bytes,
                 "graphs_alive_at_forward": len(mb.graphs_alive), "kept_output_bytes": mb.kept_output_bytes,
                 "device_bytes_at_forward": mb.device_bytes or None,
                 "device_peak_bytes": mb.device_peak_bytes or None}
                for mb in mbs
            ],
            "devices": rec.param_devices,
            "note": "group 0 includes the optimizer state allocated lazily at the first update; on CPU the "
                    "figures are saved activations alive (outside checkpointed regions), CUDA counters per device "
                    "where present",
        },
        "batchnorm": {"modules": rec.batchnorm, "train_mode": rec.bn_training,
                      "examples_per_statistics": m if rec.batchnorm else None},
        # ACC903: the rates the loop logged (runtime_guard.log(), a hooked logger), each against the group's counts
        "logged_rates": [v.card() for v in rates(rec)] or None,
        # ACC904: the counters a resumed run restored, as the probe found them at attach
        "at_attach": {"optimizer_updates": rec.updates_at_attach, "scheduler_position": rec.scheduler_position},
        "counts": {
            "microbatches": len(mbs),
            "update_attempts": attempted,
            "applied_updates": applied if not rec.unobservable else "not observed",
            "examples": sum(mb.examples or 0 for mb in mbs),
            "supervised_tokens": sum(tokens_local) if tokens_local else None,
        },
        "groups": [
            {"index": g.index, "tail": g.tail, **({"role": g.role} if g.role else {}),
             "microbatches": len(g.microbatches), "timeline": g.timeline(), "trace": " ".join(e.kind for e in g.events)}
            for g in rec.groups
        ],
        "checks": _checks_status(rec, norm, last),
        "unobservable": rec.unobservable,
        "notes": rec.notes + [f"not observed: {failure}; the probe stopped observing" for failure in rec.guard_failures]
        + ([] if rec.clean_exit else ["the probe detached on an exception"]),
    }
    return card
