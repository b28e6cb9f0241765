"""Zero-code mode: run an unchanged script and probe the loop it runs.

A global forward pre-hook (``torch.nn.modules.module.register_module_forward_pre_hook``)
waits for the first grad-enabled forward of a module with trainable parameters: that
module is the model (DDP wrapper included, the outermost module is called first). Its
optimizer, LR scheduler, GradScaler and Accelerator are then found once among the live
objects (one pass over the collector's list by exact type, :mod:`runtime_guard.heap`), the
probe attaches, and the global hook is removed. A module that no optimizer trains (a reference
or teacher model forwarded with grad) is skipped, with its submodules, and the hook waits for the
next one; an HF ``Trainer`` training the model tells
whether the loss must be normalized over the group by the user (ACC105). Everything is
removed when the script ends, also when it raises.

Discovery runs inside the script's first forward, so it imports nothing (framework classes are
read from modules already in ``sys.modules``) and a failure of it never reaches the script: the
global hook is removed and ``reason`` says what failed. The probe's first-call costs (its torch
operators and hook kinds) are paid before the script starts (:mod:`runtime_guard.warm`).

With ``at="epoch_end"`` and no ``loader`` option, the training loader is the ``DataLoader``
whose iterator is running at that first forward (found in the same walk); that iterator
(epoch 0, already started) is watched in place as well. Where the loop iterates a prepared loader that
reads that DataLoader one batch ahead (Accelerate's ``DataLoaderShard``), that loader is the one watched,
its running epoch counted a batch behind the iterator (``LoaderWatch.adopt_read_ahead``).

With ``submodule="net"`` (``run --submodule net``) the probe watches that submodule of the model
found (a dotted path, as ``nn.Module.get_submodule`` takes it; under a DDP wrapper also relative
to ``.module``) instead of the model: a model whose forward returns its own loss hides the
logits, and with them the per-token loss weights (ACC101-ACC103), that the inner network's
output shows. The optimizer, scheduler and scaler are still the ones training the model.
"""

from __future__ import annotations

import os
import runpy
import sys
import weakref
from pathlib import Path
from typing import Any

import torch

from accumlint import frameworks as fw
from runtime_guard import frameworks, heap, warm
from runtime_guard.contain import describe
from runtime_guard.probe import Probe, main_script
from runtime_guard.report import Report


def _find_objects(model: torch.nn.Module, loaders: bool = False) -> dict[str, Any]:
    """The live optimizers holding ``model``'s parameters, and the schedulers, scalers, Accelerators, HF
    Trainers, DataLoaders and their running iterators, by kind (:mod:`runtime_guard.heap`). First among the
    objects the stack reaches (no collection needed: they are alive); when that finds no optimizer of the
    model, ran over its bound, or the running loader is wanted (``loaders``: its iterator is held only by
    the ``for`` that runs it), among every object the collector tracks. There, unreachable objects of an
    earlier run (a finished script's GradScaler) are not candidates: when a kind that decides the probe
    has more than one object, a full collection runs and the pass is made again."""
    params = {id(p) for p in model.parameters()}
    classes = {"optimizers": [torch.optim.Optimizer], "schedulers": [torch.optim.lr_scheduler.LRScheduler],
               "scalers": [torch.amp.GradScaler],
               "accelerators": [class_of("accelerate.accelerator", "Accelerator")],
               "trainers": [class_of("transformers.trainer", "Trainer")],
               # by type: a wrapper whose __class__ answers the DataLoader's is matched by its own class
               "loaders": [torch.utils.data.DataLoader, *(class_of(module, name)
                                                          for module, name in fw.accelerate.LOADER_ADAPTERS)],
               "loader_iterators": [torch.utils.data.dataloader._BaseDataLoaderIter]}
    kinds = [(kind, heap.TypeSet(c for c in kind_classes if c is not None)) for kind, kind_classes in classes.items()]
    wanted = [c for kind_classes in classes.values() for c in kind_classes if c is not None]

    def sort(objects: list[Any]) -> dict[str, list[Any]]:
        found: dict[str, list[Any]] = {kind: [] for kind in classes}
        for obj in objects:
            kind = next(kind for kind, types in kinds if type(obj) in types)  # the first kind wins for a class of two
            if kind != "optimizers" or any(id(p) in params for g in obj.param_groups for p in g["params"]):
                found[kind].append(obj)
        return found

    near = None if loaders else heap.near_the_loop(wanted)
    if near is not None and (found := sort(near))["optimizers"]:
        return found
    deciding = ["optimizers", "schedulers", "scalers", "accelerators", "trainers"]
    deciding += ["loaders", "loader_iterators"] if loaders else []
    for collect in (False, True):
        found = sort(heap.live_instances(wanted, collect=collect))
        if all(len(found[kind]) <= 1 for kind in deciding):
            break
    return found


def class_of(module: str, name: str) -> Any:
    """The class ``name`` of the module that defines it (``transformers.trainer``, not ``transformers``),
    when the script already imported that module, else ``None``: read from the module's ``__dict__``
    found in ``sys.modules``, so that nothing is imported, not even by a lazy package's ``__getattr__``
    (transformers' ``_LazyModule`` imports its whole trainer, 600+ modules, for ``transformers.Trainer``).
    No object of a class whose module is not loaded can exist."""
    loaded = sys.modules.get(module)
    found = vars(loaded).get(name) if loaded is not None else None
    return found if isinstance(found, type) else None


def _running_loader(found: dict[str, Any]) -> tuple[Any, Any]:
    """The DataLoader whose iterator is running (same dataset and sampler) and that iterator,
    or ``(None, None)``."""
    for it in found["loader_iterators"]:
        for loader in found["loaders"]:
            if it._dataset is loader.dataset and it._index_sampler is loader._index_sampler:
                return loader, it
    return None, None


def _submodule(model: torch.nn.Module, path: str) -> torch.nn.Module | None:
    """``model``'s submodule at the dotted ``path``, also under a wrapper's ``.module`` (DDP), or ``None``."""
    for root in (model, getattr(model, "module", None)):
        if isinstance(root, torch.nn.Module):
            try:
                return root.get_submodule(path)
            except AttributeError:
                continue
    return None


def _trains(trainer: Any, module: torch.nn.Module) -> bool:
    """The HF ``trainer`` trains ``module`` (itself or wrapped)."""
    model = getattr(trainer, "model", None)
    return model is module or getattr(model, "module", None) is module


class ScriptProbe:
    """Probes the first training loop a script runs (see the module docstring).

    Args:
        submodule: the dotted path of the submodule to probe under the model found (see the module
            docstring); ``None``: the model itself.
        probe_options: keyword arguments of :class:`~runtime_guard.probe.Probe`
            (``accumulation_steps``, ``groups``, ...); model, optimizer, scheduler, scaler and
            accelerator are discovered.
    """

    def __init__(self, submodule: str | None = None, **probe_options: Any) -> None:
        self.submodule = submodule
        self.options = probe_options
        self.invoked_from = os.getcwd()  # `run` enters the script's folder: the card names it from here
        self.probe: Probe | None = None
        self.reason = "no grad-enabled forward of a module with trainable parameters was seen"
        self._handle: Any = None
        # modules forwarded with grad but trained by no optimizer (a reference or teacher model): skipped
        self._untrained: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()

    def _on_any_forward(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        if self.probe is not None or not torch.is_grad_enabled() or not module.training or module in self._untrained:
            return
        try:
            with heap.one_walk():  # the model's objects, its compiled wrapper and weight copies: one stack walk
                self._discover(module, args)
        except Exception as error:  # noqa: BLE001 - the guard's failure never reaches the script
            self._handle.remove()
            if self.probe is not None and self.probe.attached:
                self.probe._services.hook_failed("discovery at the first forward", error)
            else:
                self.probe = None
                self.reason = f"discovery at the first forward of {type(module).__name__} failed ({describe(error)})"

    def _discover(self, module: torch.nn.Module, args: tuple[Any, ...]) -> None:
        """Find the objects ``module``'s training uses and attach the probe (see the module docstring)."""
        if not any(p.requires_grad for p in module.parameters()):
            return
        found = _find_objects(module, loaders=self.options.get("at") == "epoch_end" and not self.options.get("loader"))
        plain = [o for o in found["optimizers"] if not frameworks.is_accelerate(o)]
        prepared = [o for o in found["optimizers"] if frameworks.is_accelerate(o)]
        if not found["optimizers"]:
            # keep waiting for the model an optimizer trains (one gc walk per skipped module)
            for sub in module.modules():  # no optimizer holds their parameters either
                self._untrained.add(sub)
            self.reason = f"no optimizer holds the parameters of {type(module).__name__} at its first forward"
            return
        self._handle.remove()
        # several candidates (e.g. a framework that built its optimizers twice): prefer one a scheduler drives
        scheduled = [o for o in plain if any(getattr(s, "optimizer", None) is o for s in found["schedulers"])]
        optimizer = prepared[0] if prepared else (scheduled or plain)[0]
        inner = frameworks.unwrap_optimizer(optimizer)
        # a scheduler built on the torch optimizer, or on the prepared one (not prepared itself)
        schedulers = [s for s in found["schedulers"] if any(getattr(s, "optimizer", None) is o
                                                            for o in (inner, optimizer))]
        wrapper = class_of("accelerate.scheduler", "AcceleratedScheduler")
        wrappers = heap.near_the_loop([wrapper]) if schedulers and wrapper is not None else []
        wrappers = heap.live_instances([wrapper]) if wrappers is None else wrappers  # the search ran over its bound
        prepared_scheds = [s for s in wrappers if getattr(s, "scheduler", None) in schedulers]
        scheduler = prepared_scheds[0] if prepared_scheds else (schedulers[0] if schedulers else None)
        # only the Accelerator that prepared this optimizer (other runs' objects may still be alive)
        accelerator = next((a for a in found["accelerators"]
                            if any(o is optimizer for o in getattr(a, "_optimizers", []))), None)
        scaler = found["scalers"][0] if found["scalers"] else getattr(accelerator, "scaler", None)
        options = dict(self.options)
        loader, iterator = None, None
        read_ahead, last = None, None
        if options.get("at") == "epoch_end" and options.get("loader") is None:
            loader, iterator = _running_loader(found)
            read_ahead = frameworks.reads_ahead_of(loader, found["loaders"]) if loader is not None else None
            if read_ahead is not None:  # the loop iterates it, a batch behind the running iterator
                last = frameworks.read_ahead_last(read_ahead)
                loader, iterator = (None, None) if last is None else (read_ahead, iterator)
            if loader is None:
                options["at"] = "start"
            options["loader"] = loader
        target = _submodule(module, self.submodule) if self.submodule else module
        if target is None:
            self.reason = (f"{type(module).__name__}, the model found at the first forward, has no submodule "
                           f"{self.submodule!r}")
            return
        self.probe = Probe(target, optimizer, scheduler=scheduler, scaler=scaler, accelerator=accelerator,
                           **options)
        if read_ahead is not None and last is None:
            self.probe.record.notes.append(
                f"at='epoch_end': the loop iterates a {type(read_ahead).__name__}, which reads its DataLoader one "
                "batch ahead, and its batches cannot be told from that DataLoader's (a resumed epoch holds its "
                "first batches back): its running epoch cannot be counted from its first forward, so the probe "
                "started there (pass its loader to runtime_guard.probe(..., at='epoch_end') to probe the epoch's "
                "end)")
        elif read_ahead is not None:
            self.probe.record.notes.append(
                f"at='epoch_end': the loop iterates a {type(read_ahead).__name__}, which reads its DataLoader one "
                "batch ahead: its running epoch is counted a batch behind that DataLoader's iterator")
        elif options.get("at") == "start" and self.options.get("at") == "epoch_end":
            self.probe.record.notes.append("at='epoch_end': no DataLoader with a running iterator was found at the "
                                           "first forward; probed from the start")
        self.probe.record.user_normalizes = next(
            (text for t in found["trainers"] if _trains(t, module) for text in [frameworks.hf_user_normalizes(t)]),
            "") or frameworks.lightning_manual_caller(module, sys._getframe())
        self.probe.attach()
        self.probe.record.script = main_script(self.invoked_from)
        if iterator is not None and last is not None:
            self.probe.adopt_read_ahead(iterator, iterator._num_yielded, last)
        elif iterator is not None:
            self.probe.adopt_iterator(iterator, iterator._num_yielded)
        if target is module:  # this forward's hooks were collected before the probe's own were registered
            self.probe._forward.on_forward_pre(module, args, {})

    def __enter__(self) -> ScriptProbe:
        warm.warm_up()  # the probe's first-call costs, off the script's first microbatch
        self._handle = torch.nn.modules.module.register_module_forward_pre_hook(self._on_any_forward)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._handle.remove()
        # sys.exit(0) at the end of a script is a clean end
        clean = exc_type is None or (exc_type is SystemExit and getattr(exc, "code", None) in (0, None))
        if self.probe is not None:
            self.probe._detach(clean=clean)

    def report(self) -> Report | None:
        """The probe's report, or ``None`` when nothing was probed (``reason`` says why)."""
        return self.probe.report() if self.probe is not None else None


def run_script(path: str | os.PathLike[str], argv: list[str] | None = None, *,
               script_probe: ScriptProbe | None = None, **probe_options: Any) -> ScriptProbe:
    """Run ``path`` as ``__main__`` under a :class:`ScriptProbe` and return it.

    The working directory, ``sys.argv``, ``sys.path[0]`` and the environment are restored
    afterwards. Exceptions of the script propagate unchanged (after everything was removed),
    except ``sys.exit(0)`` / ``sys.exit()``, a clean end. ``script_probe``: a probe made by the
    caller (``ScriptProbe(**options)``, then ``probe_options`` are not used), who holds it, and
    its report, also when the script raises.

    Raises:
        FileNotFoundError: when ``path`` is not a file.
    """
    if not Path(path).is_file():
        raise FileNotFoundError(f"no such script: {path}")
    path = Path(path).resolve()
    return _run_main(lambda: runpy.run_path(str(path), run_name="__main__"), str(path), str(path.parent),
                     path.parent, argv, script_probe or ScriptProbe(**probe_options))


def run_module(name: str, argv: list[str] | None = None, *, script_probe: ScriptProbe | None = None,
               **probe_options: Any) -> ScriptProbe:
    """Run module ``name`` as ``__main__`` under a :class:`ScriptProbe`, as ``python -m name``
    does (``sys.path[0]`` is the working directory, ``sys.argv[0]`` the module's file), and
    return it. Restores and propagates like :func:`run_script` (``script_probe`` too).

    Raises:
        ModuleNotFoundError: when ``name`` (or its package's ``__main__``) cannot be found.
    """
    origin = module_origin(name)
    if origin is None:
        raise ModuleNotFoundError(f"no module named {name!r}", name=name)
    return _run_main(lambda: runpy.run_module(name, run_name="__main__", alter_sys=True), origin,
                     os.getcwd(), None, argv, script_probe or ScriptProbe(**probe_options))


def module_origin(name: str) -> str | None:
    """The file ``python -m name`` would run from the working directory, or ``None`` when there is
    none (finding it imports the parent packages, as ``python -m`` does)."""
    import importlib.util

    sys.path.insert(0, os.getcwd())
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    finally:
        sys.path.pop(0)
    return None if spec is None else (spec.origin or name)


def _run_main(execute: Any, argv0: str, path0: str, cwd: Path | None, argv: list[str] | None,
              script_probe: ScriptProbe) -> ScriptProbe:
    saved = (os.getcwd(), list(sys.argv), list(sys.path), dict(os.environ))
    sys.argv = [argv0, *(argv or [])]
    sys.path.insert(0, path0)
    if cwd is not None:
        os.chdir(cwd)
    try:
        with script_probe as sp:
            try:
                execute()
            except SystemExit as end:
                if end.code not in (0, None):
                    raise
        return sp
    finally:
        os.chdir(saved[0])
        sys.argv, sys.path[:] = saved[1], saved[2]
        os.environ.clear()
        os.environ.update(saved[3])
