"""Data parallelism in one module: whether it runs several replicas (DDP/FSDP, a process
group), which loader a microbatch loop reads and whether each replica gets its own samples,
which values count GPUs, processes or tensor/pipeline shards, which counts were summed over
the replicas, and where BatchNorm layers are built.

Every framework fact comes from the rows of ``accumlint.frameworks`` (with their sources). Each
question answers "unknown" (``None`` / ``Sampling.UNKNOWN``) when the module does not show
enough, and the rules stay silent then.

The module is a little over 500 lines because it is one class: every question reads the same
replica facts of the module (its process group, samplers, wrapped models and world-size names),
computed once per file.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import conventions
from accumlint.model.callgraph import Inline
from accumlint.model.dataflow import names_feeding, reaching_assignment
from accumlint.model.kinds import Evidence, Role
from accumlint.model.names import (
    dotted,
    int_value,
    keyword,
    last_segment,
    method_name,
    names_in,
    positional,
    walk,
)
from accumlint.model.roles import RoleInfo, constructor_role
from accumlint.model.scopes import FrameKind, Scope, Site

if TYPE_CHECKING:
    from accumlint.model import FileModel
    from accumlint.model.groups import Group
    from accumlint.model.module_functions import ModuleFunctions

#: Calls that pass their first argument's items through (``enumerate(loader)``, ``tqdm(loader)``).
_PASS_THROUGH = frozenset({"enumerate", "iter", "tqdm", "islice", "cycle", "track"})
_WRAPPER_ROLES = (Role.DDP_MODEL, Role.FSDP_MODEL)


class Sampling(str, Enum):
    """What the replicas read from one loader."""

    SHARDED = "each replica reads its own samples"
    REPLICATED = "every replica reads the whole dataset"
    UNKNOWN = "undecided"


@dataclass(frozen=True)
class LoaderUse:
    """The loader a microbatch loop reads: the expression iterated (or passed to ``next``), its
    role as seen there, and the site it is read at."""

    expression: cst.BaseExpression
    info: RoleInfo
    site: Site

    @property
    def built_here(self) -> cst.Call | None:
        """The ``DataLoader(...)`` call that built the loader, when it was built in this module
        and never handed to a framework that shards it (prepared / set up / DeepSpeed's)."""
        if self.info.role is not Role.LOADER or self.info.evidence is not Evidence.CONSTRUCTOR:
            return None
        if self.info.prepared is not False or self.info.owner is not None:
            return None
        return self.info.origin


def data_parallel(model: FileModel) -> DataParallel:
    """Data-parallel facts of ``model``'s module: replicas, the loader each loop reads, GPU and world
    counts, sums over replicas, BatchNorm layers. Built once per module (:attr:`FileModel.memo`)."""
    facts = model.memo.get(_KEY)
    if facts is None:
        facts = model.memo[_KEY] = DataParallel(model)
    return facts  # type: ignore[return-value]


_KEY = "shared.data_parallel"


class DataParallel:
    """Data-parallel facts of one module (built once, lazily, by :func:`data_parallel`)."""

    def __init__(self, model: FileModel) -> None:
        # the model's parts, not the model: a reference back to it would make a cycle that
        # keeps the whole LibCST tree alive until the garbage collector's next full pass
        self._roles = model.roles
        self._imports = model.imports
        self._functions = model.functions
        self._module = model.module
        self._scopes = model.scopes
        self._sites = [site for scope in model.scopes for site in scope.sites if not site.in_helper]
        self._calls = [site for site in self._sites if site.call is not None]
        # for what the process does (wrap, start a process group): calls in helpers count too, a
        # project helper that applies fully_shard runs in this module's process
        self._run_calls = [site for scope in model.scopes for site in scope.sites if site.call is not None]

    # --- replicas ---------------------------------------------------------------------------
    @cached_property
    def wrapper_calls(self) -> list[cst.Call]:
        """Every DDP/FSDP constructor call of the module (``DistributedDataParallel(model)``,
        ``FSDP(model)``, ``fully_shard(model)``)."""
        return [site.call for site in self._run_calls if self._constructs(site.call) in _WRAPPER_ROLES]  # type: ignore[misc]

    @cached_property
    def replicated(self) -> bool:
        """Whether the module runs as several data-parallel processes: it wraps a model in
        DDP/FSDP or starts a process group (``frameworks.PROCESS_GROUP_INIT``)."""
        return bool(self.wrapper_calls) or any(
            last_segment(dotted(site.call.func)) in fw.PROCESS_GROUP_INIT for site in self._run_calls  # type: ignore[union-attr]
        )

    @cached_property
    def single_process_replicas(self) -> bool:
        """Whether the module builds ``nn.DataParallel`` (one process splitting each batch over
        the GPUs: there the GPU count is the replica count)."""
        return any(self._roles.qualify_call(site.call) in fw.pytorch.SINGLE_PROCESS_REPLICATION  # type: ignore[arg-type]
                   for site in self._calls)

    @cached_property
    def averaging_wrapper(self) -> bool:
        """Whether gradients are averaged over the replicas by a wrapper this module builds:
        DDP/FSDP constructed here (torch 2.13.0: the reducer divides by the world size; FSDP2's
        default divide factor is the world size), or a model passed to ``accelerator.prepare``
        / ``fabric.setup``; and no switch that changes the reduction (comm hook, divide factor)."""
        if any(last_segment(dotted(site.call.func)) in fw.pytorch.AVERAGING_OVERRIDES  # type: ignore[union-attr]
               or any(arg.keyword is not None and arg.keyword.value in fw.pytorch.AVERAGING_OVERRIDES
                      for arg in site.call.args)  # type: ignore[union-attr]
               for site in self._run_calls):
            return False
        if self.wrapper_calls:
            return True
        for site in self._sites:
            if site.call is not None or not site.targets or not isinstance(site.value, cst.Call):
                continue
            if method_name(site.value) in ("prepare", "prepare_model", "setup", "setup_module"):
                for name in site.targets:
                    info = self._roles.named(name, site.scope, site.order + 1)
                    if info.role is Role.MODEL and (info.prepared is True or info.owner == "fabric"):
                        return True
        return False

    def _constructs(self, call: cst.Call) -> Role | None:
        qualified = self._roles.qualify_call(call)
        return constructor_role(qualified, self._imports.qualify(dotted(call.func)) is not None)

    # --- loaders ----------------------------------------------------------------------------
    def loader_of(self, group: Group) -> LoaderUse | None:
        """The loader the microbatch loop of ``group`` reads: the iterable of that loop or of a
        loop around it in the same function (``for i, b in enumerate(loader)``), or the
        argument of a ``next(...)`` in the loop (``next(it)`` with ``it = iter(loader)``).
        ``None`` when no loader role is found (a parameter of unknown origin, a framework hook)."""
        roles = self._roles
        scope = group.scope
        if not isinstance(group.loop, (cst.For, cst.While)):
            return None  # a framework hook (Lightning training_step): the framework owns the loader
        first = scope.sites[scope.loop_spans[group.loop][0]] if scope.sites else None
        loops = [f.node for f in (first.frames if first is not None else ()) if f.kind is FrameKind.LOOP]
        for loop in reversed(loops):
            if isinstance(loop, cst.For) and loop in scope.loop_spans:
                site = scope.sites[scope.loop_spans[loop][0]]
                expression = _pass_through(loop.iter)
                info = roles.of(expression, site)
                if info.role is Role.LOADER:
                    return LoaderUse(expression, info, site)
        for site in group.loop_sites:
            call = site.call
            if site.in_helper or call is None or dotted(call.func) != "next":
                continue
            argument = positional(call, 0)
            if argument is None:
                continue
            expression = argument
            definition = reaching_assignment(scope, dotted(argument) or "", site.order) if dotted(argument) else None
            if definition is not None and isinstance(definition.value, cst.Call) and len(definition.targets) == 1:
                expression = _pass_through(definition.value)
                site = definition
            info = roles.of(expression, site)
            if info.role is Role.LOADER:
                return LoaderUse(expression, info, site)
        return None

    def sampling(self, use: LoaderUse) -> Sampling:
        found = self._sampling(use)
        return Sampling.SHARDED if found is Sampling.REPLICATED and self._datasets_per_rank else found

    def _sampling(self, use: LoaderUse) -> Sampling:
        """What the replicas read from a loader built here with torch's ``DataLoader``:
        REPLICATED when it has no distributed sampler (none given, or one provably local:
        ``RandomSampler`` …) *and* its dataset is provably map-style (``shuffle=True``, a local
        sampler, a known map-style dataset) *and* nothing in the module shards data by rank;
        SHARDED when the module hands the loader to a framework that shards it or slices data
        by rank; UNKNOWN otherwise (a sampler in a variable, ``**kwargs``, an unknown dataset)."""
        call = use.built_here
        if call is None or self._roles.qualify_call(call) not in fw.pytorch.TORCH_DATALOADERS:
            return Sampling.UNKNOWN
        if self.handed_to_framework(use) or self.rank_sharded:
            return Sampling.SHARDED
        if any(arg.star for arg in call.args):
            return Sampling.UNKNOWN
        site = self._site_of(call)
        if site is None:
            return Sampling.UNKNOWN
        given = [self._argument(call, name) for name in ("sampler", "batch_sampler")]
        given = [value for value in given if value is not None and not _is_none(value)]
        if given:
            return Sampling.REPLICATED if all(self._local_sampler(v, site) for v in given) else Sampling.UNKNOWN
        shuffle = self._argument(call, "shuffle")
        if isinstance(shuffle, cst.Name) and shuffle.value == "True":
            return Sampling.REPLICATED
        dataset = self._argument(call, "dataset")
        return Sampling.REPLICATED if dataset is not None and self._map_style(dataset, site) else Sampling.UNKNOWN

    def handed_to_framework(self, use: LoaderUse) -> bool:
        """Whether the loader's name is passed to a call that shards loaders
        (``frameworks.LOADER_SHARDING``) anywhere in the module."""
        name = dotted(use.expression)
        if name is None:
            return False
        for site in self._calls:
            call = site.call
            for rule in fw.LOADER_SHARDING:
                if rule.keyword is None and method_name(call) == rule.call:  # type: ignore[arg-type]
                    if any(dotted(arg.value) == name for arg in call.args):  # type: ignore[union-attr]
                        return True
                elif rule.keyword is not None and self._roles.qualify_call(call).endswith(rule.call):  # type: ignore[arg-type]
                    value = keyword(call, rule.keyword)  # type: ignore[arg-type]
                    if value is not None and dotted(value) == name:
                        return True
        return False

    @cached_property
    def rank_sharded(self) -> bool:
        """Whether anything in the module splits data by rank: a subscript or slice indexed by a
        rank (``files[rank::world_size]``), a sharding call (``ds.shard(...)``,
        ``split_dataset_by_node``), or a call outside this module that takes a rank (a dataset
        or sampler built per rank; calls that only place a process or tensor do not count)."""
        local_functions = set(self._functions.functions)
        # another project module's function the walk followed is read in its body, like this module's
        foreign = [site for site in self._run_calls if site.inline is not None and site.inline.foreign is not None]
        for site in self._calls + foreign:
            call = site.call
            name = last_segment(dotted(call.func)) or method_name(call) or ""  # type: ignore[union-attr,arg-type]
            if conventions.SHARDING_CALL.search(name):
                return True
            if (name in conventions.RANK_PLACEMENT_CALLS or conventions.SAMPLER_NAME.search(name)
                    or name in local_functions or _trains(site, self._functions)
                    or (isinstance(call.func, cst.Attribute) and dotted(call.func.value) == "self")):  # type: ignore[union-attr]
                continue
            for arg in call.args:  # type: ignore[union-attr]
                if arg.keyword is not None and conventions.RANK_NAME.match(arg.keyword.value):
                    return True
                if any(self.is_rank(n) or _holds_rank(n, site) for n in names_feeding(arg.value)):
                    return True
        for node in walk(self._module):
            if isinstance(node, cst.Subscript) and any(
                self.is_rank(n) for element in node.slice for n in names_in(element.slice)
            ):
                return True
        return False

    @cached_property
    def _datasets_per_rank(self) -> bool:
        """Whether the module builds an instance of a project class whose ``__init__`` reads a rank
        (asked only of a loader that would otherwise read the same samples on every replica)."""
        functions = self._functions
        bodies = (*(f.body for f in functions.functions.values()), *(f.body for f in functions.methods.values()))
        return any(isinstance(node, cst.Call) and self._built_per_rank(node)
                   for body in (self._module, *bodies) for node in walk(body))

    def _built_per_rank(self, call: cst.Call) -> bool:
        """Whether ``call`` builds a project class whose ``__init__`` selects items by a rank (a
        dataset that keeps its replica's rows: ``... if k % world == rank``, ``rows[rank::world]``),
        in this module or one it imports: what it holds differs per replica, whatever the call's
        arguments are (a rank it only stores, for ``.cuda(rank)``, shards nothing)."""
        located = self._functions.class_named(dotted(call.func), any_module=True)
        init = located[0].method(located[1], "__init__") if located is not None else None
        if init is None:
            return False
        for node in walk(init[0].body):  # a rank that selects items, not one stored for `.cuda(rank)`
            if isinstance(node, cst.Subscript):
                read = [n for element in node.slice for n in names_in(element.slice)]
            elif isinstance(node, cst.Comparison):
                read = [n for part in (node.left, *(c.comparator for c in node.comparisons)) for n in names_in(part)]
            else:
                continue
            if any(self.is_rank(name) for name in read):
                return True
        return False

    @staticmethod
    def is_rank(name: str) -> bool:
        """Whether a dotted name reads a replica's rank (``rank``, ``args.local_rank``, ``dist.get_rank()``)."""
        tail = last_segment(name)
        return bool(conventions.RANK_NAME.match(tail)) or (name.endswith("()") and tail in conventions.RANK_CALLS)

    def _argument(self, call: cst.Call, name: str) -> cst.BaseExpression | None:
        value = keyword(call, name)
        if value is None and name in fw.pytorch.DATALOADER_PARAMETERS:
            value = positional(call, fw.pytorch.DATALOADER_PARAMETERS.index(name))
        return value

    def _local_sampler(self, value: cst.BaseExpression, site: Site, depth: int = 0) -> bool:
        """Whether a sampler expression is provably a sampler that ignores ranks."""
        value = self._definition(value, site) if not isinstance(value, cst.Call) else value
        if not isinstance(value, cst.Call) or depth > 3:
            return False
        callee = last_segment(dotted(value.func))
        qualified = self._roles.qualify_call(value)
        if not qualified.startswith("torch.utils.data"):
            return False
        if callee in fw.pytorch.BATCH_SAMPLER_WRAPPERS:
            inner = self._argument_named(value, "sampler", 0)
            return inner is not None and self._local_sampler(inner, site, depth + 1)
        return callee in fw.pytorch.LOCAL_SAMPLERS

    def _map_style(self, dataset: cst.BaseExpression, site: Site) -> bool:
        """Whether a dataset expression is provably map-style (a list, a known map-style class,
        a class of this module deriving from ``Dataset``)."""
        value = self._definition(dataset, site) if not isinstance(dataset, cst.Call) else dataset
        if isinstance(value, (cst.List, cst.ListComp)):
            return True
        if not isinstance(value, cst.Call):
            return False
        qualified = self._roles.qualify_call(value)
        if qualified in fw.pytorch.MAP_STYLE_DATASETS or qualified.startswith(fw.pytorch.MAP_STYLE_PREFIXES):
            return True
        local = self._roles.classes.get(dotted(value.func) or "")
        return local is not None and any(last_segment(dotted(base.value)) in fw.pytorch.MAP_STYLE_BASES
                                         for base in local.bases)

    def _definition(self, expression: cst.BaseExpression, site: Site) -> cst.BaseExpression | None:
        """The value a plain name held at ``site`` (its reaching assignment in the scope, else
        the module's single top-level assignment)."""
        name = dotted(expression)
        if name is None:
            return None
        definition = reaching_assignment(site.scope, name, site.order)
        if definition is None and site.scope is not self._scopes[0]:
            top = [s for s in self._scopes[0].sites if name in s.targets and not s.in_helper]
            definition = top[0] if len(top) == 1 else None
        if definition is None or definition.augmented is not None or len(definition.targets) != 1:
            return None
        return definition.value

    @staticmethod
    def _argument_named(call: cst.Call, name: str, position: int) -> cst.BaseExpression | None:
        return keyword(call, name) or positional(call, position)

    def _site_of(self, call: cst.Call) -> Site | None:
        return next((site for site in self._calls if site.call is call), None)

    # --- counts -----------------------------------------------------------------------------
    @cached_property
    def device_count_names(self) -> frozenset[str]:
        """Names bound only to a count of this node's GPUs or processes (``torch.cuda.device_count()``,
        ``LOCAL_WORLD_SIZE``, ``nproc_per_node`` …; not multiplied by a node count)."""
        return self._bound_names(lambda v: self._counts_devices_directly(_unwrap_conversion(v), whole=True))

    @cached_property
    def whole_world_names(self) -> frozenset[str]:
        """Names bound only to the size of the whole world (``dist.get_world_size()`` with no
        group, ``WORLD_SIZE``): every process, data-parallel or not."""
        return self._bound_names(lambda v: self._whole_world_directly(_unwrap_conversion(v), whole=True))

    def counts_devices(self, expression: cst.BaseExpression) -> bool:
        """Whether an expression reads the GPU (or per-node process) count."""
        return self._counts_devices_directly(expression) or any(
            n in self.device_count_names for n in names_in(expression))

    def counts_whole_world(self, expression: cst.BaseExpression) -> bool:
        """Whether an expression reads the whole world size."""
        return self._whole_world_directly(expression) or any(n in self.whole_world_names for n in names_in(expression))

    def counts_nodes(self, expression: cst.BaseExpression) -> bool:
        """Whether an expression reads a node count (GPUs per node × nodes is the world size)."""
        return any(conventions.NODE_COUNT_NAME.match(last_segment(n)) for n in names_in(expression))

    def mentions_model_parallel(self, expression: cst.BaseExpression) -> bool:
        """Whether an expression reads a tensor- or pipeline-parallel size."""
        return any(conventions.MODEL_PARALLEL_NAME.match(last_segment(n)) for n in names_in(expression))

    def counts_replicas(self, expression: cst.BaseExpression) -> bool:
        """Whether an expression reads a replica (or process) count: ``world_size``,
        ``accelerator.num_processes``, ``dist.get_world_size()`` or a name bound to one."""
        return any(self.is_replica_count(n) for n in names_in(expression)) or self._whole_world_directly(expression)

    def is_replica_count(self, name: str) -> bool:
        """Whether a dotted name holds a replica (or process) count (see :meth:`counts_replicas`)."""
        tail = last_segment(name)
        if conventions.DEVICE_COUNT_NAME.match(tail) or name in self.device_count_names:
            return False  # local_world_size: the processes of one node
        return bool(conventions.REPLICA_COUNT_NAME.match(tail)) or name in self.whole_world_names

    @cached_property
    def device_count_defines_world(self) -> bool:
        """Whether the module builds its world from the GPU count: processes spawned one per GPU
        (``mp.spawn(..., nprocs=ngpus)``) or a world size computed from it; then the GPU count
        is the per-node replica count by construction."""
        for site in self._sites:
            if site.call is not None:
                nprocs = keyword(site.call, "nprocs")
                if nprocs is not None and self.counts_devices(nprocs):
                    return True
            elif site.value is not None and any(conventions.REPLICA_COUNT_NAME.match(last_segment(t))
                                                and not conventions.DEVICE_COUNT_NAME.match(last_segment(t))
                                                for t in site.targets if t):
                if self.counts_devices(site.value):
                    return True
        return False

    @cached_property
    def model_parallel_configured(self) -> bool:
        """Whether a tensor- or pipeline-parallel size is set to a literal greater than 1 in
        this module (an assignment, a keyword argument, a parameter's default or an entry of a
        config dict), or the module divides the world size by one (``dp = world // (tp * pp)``:
        the code itself expects replicas to span several GPUs)."""
        for scope in self._scopes:
            if isinstance(scope.node, cst.FunctionDef):
                params = scope.node.params
                for param in (*params.posonly_params, *params.params, *params.kwonly_params):
                    literal = int_value(param.default) if param.default is not None else None
                    if literal is not None and literal > 1 and conventions.MODEL_PARALLEL_NAME.match(param.name.value):
                        return True
        for site in self._sites:
            value = site.value
            if (value is not None and isinstance(value, cst.BinaryOperation)
                    and isinstance(value.operator, (cst.FloorDivide, cst.Divide))
                    and self.counts_whole_world(value.left) and self.mentions_model_parallel(value.right)):
                return True
        for site in self._sites:
            pairs: list[tuple[str | None, cst.BaseExpression]] = []
            if site.call is not None:
                pairs.extend((arg.keyword.value, arg.value) for arg in site.call.args if arg.keyword is not None)
            elif site.value is not None and len(site.targets) == 1 and site.augmented is None:
                pairs.append((last_segment(site.targets[0]), site.value))
            if isinstance(site.value, cst.Dict):
                pairs.extend((str(e.key.evaluated_value), e.value) for e in site.value.elements
                             if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString))
            for key, value in pairs:
                literal = int_value(value)
                if key and literal is not None and literal > 1 and conventions.MODEL_PARALLEL_NAME.match(key):
                    return True
        return False

    def _bound_names(self, direct) -> frozenset[str]:
        """Dotted names whose every assignment in the module has a value that ``direct`` accepts
        or that copies a name already found (``n = ngpus``, ``n = int(ngpus)``; a fixed point)."""
        assignments: dict[str, list[cst.BaseExpression | None]] = {}
        for site in self._sites:
            if site.call is None and site.targets and not isinstance(site.node, (cst.For, cst.With)):
                for name in site.targets:
                    if name:
                        value = site.value if len(site.targets) == 1 and site.augmented is None else None
                        assignments.setdefault(name, []).append(value)
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, values in assignments.items():
                if name in found:
                    continue
                if all(v is not None and (direct(v) or dotted(_unwrap_conversion(v)) in found) for v in values):
                    found.add(name)
                    changed = True
        return frozenset(found)

    def _counts_devices_directly(self, expression: cst.BaseExpression, whole: bool = False) -> bool:
        """Whether the expression reads a device count (``whole``: is one, nothing more)."""
        for node in (expression,) if whole else walk(expression):
            if isinstance(node, cst.Call) and method_name(node) in fw.pytorch.DEVICE_COUNT_CALLS:
                return True
            if (isinstance(node, (cst.Name, cst.Attribute))
                    and conventions.DEVICE_COUNT_NAME.match(last_segment(dotted(node)))):
                return True
            if _environment_key(node) in conventions.DEVICE_COUNT_ENV:
                return True
        return False

    def _whole_world_directly(self, expression: cst.BaseExpression, whole: bool = False) -> bool:
        """Whether the expression reads the whole world size (``whole``: is it, nothing more)."""
        for node in (expression,) if whole else walk(expression):
            if (isinstance(node, cst.Call) and last_segment(dotted(node.func)) in fw.pytorch.WORLD_SIZE_CALLS
                    and not node.args):
                return True
            if _environment_key(node) in fw.pytorch.WORLD_SIZE_ENV:
                return True
        return False

    # --- global counts ----------------------------------------------------------------------
    def summed_over_replicas(self, name: str, scope: Scope, before: int, inline: Inline | None = None) -> bool:
        """Whether ``name`` holds a sum over the replicas at position ``before`` of ``scope``:
        its last write there is an in-place SUM all-reduce (``dist.all_reduce(n)``), or an
        assignment from a reduction that sums (``accelerator.reduce(n)``,
        ``accelerator.gather(n).sum()``, ``fabric.all_reduce(n, reduce_op="sum")``). ``inline``: the
        name is read in that inlined helper's code (written there, or a parameter: its argument
        in the caller's code)."""
        last: Site | None = None
        for site in scope.sites:
            if site.order >= before:
                break
            if site.inline is not inline:
                continue
            if name in site.targets or (site.call is not None and self._in_place_sum(site.call) == name):
                last = site
        if last is None:
            if inline is None or "." in name:
                return False
            value, where = inline.resolve(cst.Name(name))
            outer = dotted(value)
            return outer is not None and where is not inline and self.summed_over_replicas(outer, scope, before, where)
        if last.call is not None:
            return True
        return last.value is not None and last.augmented is None and self._sums(last.value, last)

    def _in_place_sum(self, call: cst.Call) -> str | None:
        """The name an in-place SUM all-reduce of torch.distributed writes, else None."""
        in_place = fw.pytorch.IN_PLACE_SUM
        if method_name(call) not in in_place and last_segment(dotted(call.func)) not in in_place:
            return None
        if not self._roles.qualify_call(call).startswith("torch.distributed"):
            return None
        op = keyword(call, "op") or positional(call, 1)
        if op is not None and last_segment(dotted(op)).upper() != "SUM":
            return None
        return dotted(positional(call, 0))

    def _sums(self, value: cst.BaseExpression, site: Site) -> bool:
        for node in walk(value):
            if not isinstance(node, cst.Call):
                continue
            method = method_name(node) or last_segment(dotted(node.func))
            if method == "sum" and isinstance(node.func, cst.Attribute) and isinstance(node.func.value, cst.Call):
                inner = node.func.value
                if (method_name(inner) or last_segment(dotted(inner.func))) in fw.GATHERS:
                    return True
            if method in fw.RETURNED_REDUCTIONS:
                op = (keyword(node, "reduction") or keyword(node, "reduce_op") or keyword(node, "op")
                      or positional(node, 1))
                if op is None:
                    receiver = node.func.value if isinstance(node.func, cst.Attribute) else None
                    owner = self._roles.of(receiver, site)
                    if method in fw.accelerate.SUM_DEFAULT_REDUCTIONS and owner.role is Role.ACCELERATOR:
                        return True
                    continue
                text = op.evaluated_value if isinstance(op, cst.SimpleString) else last_segment(dotted(op))
                if str(text).lower() == "sum":
                    return True
        return False

    # --- BatchNorm --------------------------------------------------------------------------
    @cached_property
    def batchnorm_calls(self) -> list[cst.Call]:
        """Every construction of a torch BatchNorm layer in the module (``nn.BatchNorm2d(64)``,
        ``nn.SyncBatchNorm(...)``), in source order."""
        found: list[cst.Call] = []
        seen: set[int] = set()
        for site in self._calls:
            call = site.call
            qualified = self._roles.qualify_call(call)  # type: ignore[arg-type]
            if (last_segment(qualified) in fw.pytorch.BATCHNORM_CLASSES and qualified.startswith("torch.")
                    and id(call) not in seen):
                seen.add(id(call))
                found.append(call)  # type: ignore[arg-type]
        return found


def _pass_through(expression: cst.BaseExpression) -> cst.BaseExpression:
    """``enumerate(loader)``, ``tqdm(iter(loader))`` → ``loader``."""
    while (isinstance(expression, cst.Call) and last_segment(dotted(expression.func)) in _PASS_THROUGH
           and positional(expression, 0) is not None):
        expression = positional(expression, 0)  # type: ignore[assignment]
    return expression


def _unwrap_conversion(expression: cst.BaseExpression) -> cst.BaseExpression:
    """``int(x)``, ``max(1, x)`` → ``x`` (conversions and a floor of 1 keep a count's meaning)."""
    while isinstance(expression, cst.Call):
        callee = dotted(expression.func)
        values = [arg.value for arg in expression.args]
        if callee in ("int", "float") and len(values) == 1:
            expression = values[0]
        elif callee == "max" and len(values) == 2 and int_value(values[0]) == 1:
            expression = values[1]
        elif callee == "max" and len(values) == 2 and int_value(values[1]) == 1:
            expression = values[0]
        else:
            break
    return expression


def _is_none(expression: cst.BaseExpression) -> bool:
    return isinstance(expression, cst.Name) and expression.value == "None"


def _environment_key(node: cst.CSTNode) -> str | None:
    """The variable an environment read names: ``os.environ["K"]``, ``os.environ.get("K")``,
    ``os.getenv("K")``."""
    key: cst.BaseExpression | None = None
    if isinstance(node, cst.Subscript) and (dotted(node.value) or "").endswith("environ") and len(node.slice) == 1:
        index = node.slice[0].slice
        key = index.value if isinstance(index, cst.Index) else None
    elif isinstance(node, cst.Call):
        callee = dotted(node.func) or ""
        if callee.endswith(("environ.get", "getenv")):
            key = positional(node, 0)
    return str(key.evaluated_value) if isinstance(key, cst.SimpleString) else None


def _trains(site: Site, functions: ModuleFunctions) -> bool:
    """Whether a call runs project code that performs the backward itself: the microbatch step
    it was followed into, or the trainer whose class it builds (one of its methods, or a base's,
    backpropagates), whose rank argument places tensors, not data."""
    for inline in site.scope.inlined.get(id(site.call), ()) if site.followed else ():
        if inline.performs_backward:
            return True
    located = functions.class_named(dotted(site.call.func))  # type: ignore[union-attr]
    if located is None:
        return False
    owner, class_def = located
    classes = [(owner, class_def), *owner.bases(class_def)]
    return any(module.performs_backward(f) for module, cls in classes
               for (c, _), f in module.methods.items() if c is cls)


def _holds_rank(name: str, site: Site) -> bool:
    """Whether ``name`` was last assigned a rank call before ``site`` (``r = dist.get_rank()``,
    ``r, w = dist.get_rank(), dist.get_world_size()``): a rank by its value, whatever its name."""
    definition = reaching_assignment(site.scope, name, site.order)
    if definition is None or definition.value is None or definition.in_helper:
        return False
    value = definition.value_of(name)
    return isinstance(value, cst.Call) and last_segment(dotted(value.func)) in conventions.RANK_CALLS
