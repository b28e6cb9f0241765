"""How few files the byte prefilter passes on a large project, without dropping one a rule
fires on: the backward a common-named rule needs besides its own markers, the project names a
file can import, and a class that only defines the event methods its callers name.

Counted through ``RunResult.parsed`` (files that passed the bytes) and the index's names,
never timed.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from accumlint.pipeline import engine
from accumlint.project.index import FOLLOW_ONLY, ProjectIndex
from accumlint.run import runner
from accumlint.settings.config import Settings

EVERY_CODE = frozenset(rule.code for rule in engine.ALL_RULES_INSTANCES)


def write(root: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return sorted(str(root / name) for name in files)


def indexed(paths: list[str], root: Path) -> ProjectIndex:
    index = ProjectIndex.for_files(paths, str(root))
    index.set_names({path: index.names_of(Path(path).read_bytes()) for path in paths})
    return index


# --- a rule whose markers are common names needs a backward as well -----------------------

def test_a_dict_update_and_a_step_without_a_backward_do_not_pass_for_acc007() -> None:
    rules = engine.rules_for({"ACC007"})
    plain = b"def f(d, sched, x):\n    d.update(x)\n    sched.step()\n"
    assert not engine.may_fire(plain, rules)
    assert engine.may_fire(plain + b"\ndef g(loss):\n    loss.backward()\n", rules)


def test_a_lightning_module_passes_for_acc007_without_a_backward_of_its_own() -> None:
    # Lightning backpropagates what `training_step` returns: its per-batch hooks run in a group
    rules = engine.rules_for({"ACC007"})
    hooks = (b"    def training_step(self, batch, i):\n        return self.net(batch).mean()\n"
             b"    def on_train_batch_end(self, out, batch, i):\n        self.avg.update_parameters(self.net)\n")
    assert engine.may_fire(b"class M(pl.LightningModule):\n" + hooks, rules)
    assert not engine.may_fire(b"class M(Base):\n" + hooks, rules)
    assert not engine.may_fire(b"class M(pl.LightningModule):\n" + hooks.replace(b"def training_step", b"def step"),
                               rules)


def test_acc007_still_passes_a_file_whose_backward_is_in_a_project_helper(tmp_path: Path) -> None:
    paths = write(tmp_path, {
        "utils.py": """
            def backprop_scaled(loss, scaler):
                scaler.scale(loss).backward()
        """,
        "train.py": """
            from utils import backprop_scaled

            def run(model, ema, loader, scaler, accum):
                for x in loader:
                    backprop_scaled(model(x) / accum, scaler)
                    ema.update(model)
        """,
    })
    train = paths[0]
    data = Path(train).read_bytes()
    rules = engine.rules_for({"ACC007"})
    assert engine.may_fire(data, rules, path=train, project=indexed(paths, tmp_path))


# --- only the names a file can import ---------------------------------------------------------

HELPER = """
    def run_microbatch(model, x, accum):
        (model(x) / accum).backward()
"""
CALLER = """
    from helpers import run_microbatch

    def fit(model, loader, accum):
        for x in loader:
            run_microbatch(model, x, accum)
"""


def test_a_module_behind_a_folder_no_import_can_name_gives_no_names(tmp_path: Path) -> None:
    # `pkg-1.0` is no identifier: a file above it cannot import what lies below it
    paths = write(tmp_path, {"pkg-1.0/lib/helpers.py": HELPER, "pkg-1.0/lib/near.py": CALLER,
                             "elsewhere/far.py": CALLER})
    index = indexed(paths, tmp_path)
    near = str(tmp_path / "pkg-1.0/lib/near.py")
    far = str(tmp_path / "elsewhere/far.py")
    assert index.reachable_event_names(near) == {b"run_microbatch"}
    assert index.reachable_event_names(far) == frozenset()
    assert index.mentions_event_name(Path(far).read_bytes())  # the run-wide names still hold it
    assert not index.mentions_event_name(Path(far).read_bytes(), far)
    run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1)
    assert run.parsed == 2  # the helper (its own backward) and near.py; not far.py


def test_a_module_a_dotted_import_names_is_reachable_from_every_folder_above_it(tmp_path: Path) -> None:
    paths = write(tmp_path, {"proj/pkg/sub/helpers.py": HELPER, "proj/train.py": """
        from pkg.sub.helpers import run_microbatch

        def fit(model, opt, loader, accum):
            for i, x in enumerate(loader):
                run_microbatch(model, x, accum)
                opt.zero_grad()
                if (i + 1) % accum == 0:
                    opt.step()
    """})
    index = indexed(paths, tmp_path)
    assert b"run_microbatch" in index.reachable_event_names(str(tmp_path / "proj/train.py"))
    run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1)
    assert run.parsed == 2
    assert [(Path(f.path).name, f.code, f.line) for f in run.findings] == [("train.py", "ACC001", 7)]


# --- a class that only defines the event methods its callers name --------------------------

TENSOR_LIKE = '''
    import torch


    class Array:
        """
        def backward(self):
            not code: a docstring
        """

        def backward(
            self, gradient=None,
        ):
            torch.autograd.backward(self, gradient)

        def zero_grad(self):
            self.grad.zero_()

        def shape(self):
            return ()
'''


def test_a_class_whose_events_are_only_in_its_event_named_methods_is_no_event_name() -> None:
    data = textwrap.dedent(TENSOR_LIKE).encode()
    assert ProjectIndex.names_of(data) == (FOLLOW_ONLY + "Array",)  # followed by the model, no prefilter pass
    trainer = data + b"\n\nclass Trainer:\n    def fit(self, loss):\n        self.clip_now(loss)\n" \
                     b"    def clip_now(self, loss):\n        torch.nn.utils.clip_grad_norm_(loss)\n"
    assert ProjectIndex.names_of(trainer) == (FOLLOW_ONLY + "Array", "Trainer")


def test_a_function_named_like_the_event_it_performs_is_no_event_name() -> None:
    data = b"def backward(tensors):\n    run_engine(tensors)\n    tensors.backward()\n"
    assert ProjectIndex.names_of(data) == (FOLLOW_ONLY + "backward",)


def test_a_def_in_a_docstring_cuts_nothing() -> None:
    data = textwrap.dedent('''
        class Worker:
            """
            def backward(self):
            """
            def train(self, loss):
                loss.backward()
    ''').encode()
    assert ProjectIndex.names_of(data) == ("Worker",)


def test_files_that_only_annotate_with_such_a_class_are_not_parsed(tmp_path: Path) -> None:
    users = {f"use{i}.py": f"from array_lib import Array\n\ndef size{i}(a: Array) -> int:\n    return len(a.shape())\n"
             for i in range(3)}
    paths = write(tmp_path, {"array_lib.py": TENSOR_LIKE, **users})
    run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1)
    assert run.parsed == 1  # array_lib.py itself (its own backward call); none of its users
    assert run.findings == []


# --- work done once, counted through seams --------------------------------------------------

TWO_RESETS = """
    def train(model, optimizer, loader, accumulation_steps):
        for i, batch in enumerate(loader):
            loss = model(batch) / accumulation_steps
            loss.backward()
            optimizer.zero_grad()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()


    def tune(model, optimizer, loader, accumulation_steps):
        for i, batch in enumerate(loader):
            loss = model(batch) / accumulation_steps
            loss.backward()
            optimizer.zero_grad()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
"""


def test_the_fixes_of_one_file_resolve_its_positions_once(monkeypatch) -> None:
    from accumlint.fixes import base
    from accumlint.run.suggested_fixes import suggest_source

    data = textwrap.dedent(TWO_RESETS).encode()
    findings = engine.check_source("train.py", data).findings
    assert [(f.code, f.line) for f in findings] == [("ACC001", 6), ("ACC001", 15)]
    wrapped: list[object] = []
    real = base.MetadataWrapper
    monkeypatch.setattr(base, "MetadataWrapper",
                        lambda module, **options: wrapped.append(module) or real(module, **options))
    fixes = suggest_source("train.py", data, EVERY_CODE, findings)
    assert sorted(f.line for f in fixes) == [6, 15]  # both fixed, each against the same parse
    assert len(wrapped) == 1


def test_a_closure_entered_at_each_call_collects_its_local_names_once(monkeypatch) -> None:
    import libcst as cst

    from accumlint.model import build_model, module_functions

    calls: list[str] = []
    real = module_functions.local_names
    monkeypatch.setattr(module_functions, "local_names",
                        lambda function: calls.append(function.name.value) or real(function))
    source = textwrap.dedent("""
        def fit(model, optimizer, loader, accum):
            def micro(batch):
                out = model(batch) / accum
                out.backward()

            for i, batch in enumerate(loader):
                micro(batch)
                micro(batch)
                micro(batch)
                if (i + 1) % accum == 0:
                    optimizer.step()
                    optimizer.zero_grad()
    """)
    build_model(cst.parse_module(source))
    assert calls == ["micro"]


def test_module_paths_are_found_once_per_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pkg" / "ns").mkdir(parents=True)  # a namespace package below a regular one
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "ns" / "steps.py").write_text("def step(): pass\n")
    (tmp_path / "flat.py").write_text("x = 1\n")
    index = ProjectIndex.for_files([str(tmp_path / "flat.py")], str(tmp_path))
    folder = str(tmp_path)
    assert index.module_path(folder, ["pkg", "ns", "steps"]) == str(tmp_path / "pkg" / "ns" / "steps.py")
    assert index.module_path(folder, ["pkg"]) == str(tmp_path / "pkg" / "__init__.py")
    assert index.module_path(folder, ["flat"]) == str(tmp_path / "flat.py")
    assert index.module_path(folder, ["flat", "x"]) is None  # a module is no package
    assert index.module_path(folder, ["pkg", "missing"]) is None
    looked: list[str] = []
    real = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path: looked.append(str(path)) or real(path))
    assert index.module_path(folder, ["torch", "nn", "functional"]) is None  # no `torch` here at all
    assert looked == [str(tmp_path / "torch" / "nn")]  # one folder looked at, not a stat per candidate
    assert index.module_path(folder, ["torch", "nn", "functional"]) is None
    assert index.module_path(folder, ["pkg", "ns", "steps"]) == str(tmp_path / "pkg" / "ns" / "steps.py")
    assert index.module_path(folder, ["pkg", "ns", "other"]) is None  # its folder's listing answers
    assert index.module_path(folder, ["pkg", "helpers"]) is None
    assert len(looked) == 1  # remembered


def test_a_module_that_only_builds_a_counting_object_is_followed_without_a_prefilter_pass() -> None:
    data = textwrap.dedent('''
        from accelerate import Accelerator


        def log_dir(cfg):
            return cfg.root + "/logs"


        def make_accelerator(cfg):
            return Accelerator(gradient_accumulation_steps=cfg.accum, project_dir=log_dir(cfg))


        def make_engine(cfg, model):
            engine, *_ = deepspeed.initialize(model=model, config=cfg.ds)
            return engine
    ''').encode()
    assert ProjectIndex.names_of(data) == (FOLLOW_ONLY + "make_accelerator", FOLLOW_ONLY + "make_engine")
    assert ProjectIndex.names_of(b"def log_dir(cfg):\n    return cfg.root\n") == ()


def test_bracketed_imports_over_several_lines_bind_their_names() -> None:
    data = textwrap.dedent('''
        from pkg.setup import (
            build,  # the accelerator
            helper as aid,
        )
        from .local import (one)
        import os.path, json
    ''').encode()
    assert ProjectIndex.import_names(data) == (
        "pkg.setup.build", "pkg.setup.helper", "pkg.setup", "local.one", "local", "os.path", "json")
