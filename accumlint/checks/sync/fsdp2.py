"""FSDP2 models and the DDP-only sync switches used on them (ACC406).

``fully_shard(module)`` (torch 2.13.0 ``distributed/fsdp/_fully_shard/_fully_shard.py``) shards
the module in place; the sharded module reduce-scatters in its post-backward hook unless
``set_requires_gradient_sync(False)`` was called. DDP's ``no_sync()`` does not exist on it, and
DDP's flag ``require_backward_grad_sync`` is an attribute nothing reads: a loop that sets it, or
that enters ``getattr(model, "no_sync", nullcontext)()``, still communicates every microbatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model.names import dotted, keyword, method_name, positional, receiver
from accumlint.model.sync import scope_name

if TYPE_CHECKING:
    from accumlint.model import FileModel, Scope, Site


@dataclass(frozen=True)
class DdpSwitchOnFsdp2:
    """A DDP-only sync switch applied to an FSDP2-sharded module.

    ``node``: the switch (the ``no_sync`` call, the flag assignment, the ``getattr``);
    ``model``: the dotted name of the sharded module; ``how``: ``"no_sync"``, ``"flag"`` or
    ``"getattr"``.
    """

    node: cst.CSTNode
    model: str
    how: str


def _sharded_names(model: FileModel, scope: Scope) -> set[str]:
    """Dotted names sharded by FSDP2 in ``scope``: the argument of ``fully_shard(m)`` (or of
    another call of ``frameworks.FSDP2_SHARDS``) and the name ``fully_shard``'s result is assigned to."""
    names: set[str] = set()
    for site in scope.sites:
        if site.in_helper:
            continue
        parameter = fw.FSDP2_SHARDS.get(model.roles.qualify_call(site.call)) if site.call is not None else None
        if parameter is not None:
            argument = dotted(positional(site.call, 0) or keyword(site.call, parameter))  # type: ignore[arg-type]
            if argument:
                names.add(argument)
        value = site.value
        if (site.targets and isinstance(value, cst.Call)
                and model.roles.qualify_call(value) in fw.pytorch.FSDP2_SHARD_CALLS):
            names.update(t for t in site.targets if t)
    return names


def ddp_switches_on_fsdp2(model: FileModel) -> list[DdpSwitchOnFsdp2]:
    """Every DDP-only sync switch on a module the same function (or, for ``self.`` attributes,
    the same class) shards with FSDP2, read in the scope's own names where the switch sits in a
    helper, or held by a trainer the scope that shards it builds. A name sharded in another function
    is not followed otherwise: the two may not be the same object."""
    sharded: dict[Scope, set[str]] = {scope: _sharded_names(model, scope) for scope in model.scopes}
    by_class: dict[cst.ClassDef, set[str]] = {}
    for scope, names in sharded.items():
        if scope.class_def is not None:
            by_class.setdefault(scope.class_def, set()).update(n for n in names if n.startswith("self."))
    found: list[DdpSwitchOnFsdp2] = []

    def sharded_at(name: str | None, site: Site) -> str | None:
        """``name`` (read at ``site``, maybe in a helper) when the scope (or its class) shards it,
        or a trainer holds what the scope that built it shards; else None."""
        own = scope_name(name, site)
        if own is None:
            return None
        names = sharded[site.scope] | by_class.get(site.scope.class_def, set()) if site.scope.class_def is not None \
            else sharded[site.scope]
        if own in names:
            return own
        stored = model.roles.stored(own, site.scope, site.order)
        return own if stored is not None and stored[0] in sharded.get(stored[1], ()) else None

    for scope in model.scopes:
        for site in scope.sites:
            call = site.call
            if call is not None and method_name(call) == fw.pytorch.DDP_NO_SYNC_METHOD:
                owner = sharded_at(dotted(receiver(call)), site)
                if owner is not None:
                    found.append(DdpSwitchOnFsdp2(call, owner, "no_sync"))
            elif (call is not None and dotted(call.func) == "getattr"
                  and isinstance(positional(call, 1), cst.SimpleString)
                  and positional(call, 1).evaluated_value == fw.pytorch.DDP_NO_SYNC_METHOD):  # type: ignore[union-attr]
                owner = sharded_at(dotted(positional(call, 0)), site)
                if owner is not None:
                    found.append(DdpSwitchOnFsdp2(call, owner, "getattr"))
            elif call is None:
                for target in site.targets:
                    owner, _, attr = (target or "").rpartition(".")
                    owner = sharded_at(owner, site) if attr == fw.pytorch.DDP_SYNC_FLAG else None  # type: ignore[assignment]
                    if owner is not None:
                        found.append(DdpSwitchOnFsdp2(site.node, owner, "flag"))
    return found
