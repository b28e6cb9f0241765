"""The accumulation group across functions, methods, classes and modules: variants of the
families of ../shared/patterns written for these tests (other names, nesting, layouts), the
silent twins, the cases the model must leave unknown, the cache across files, and bad input
(import cycles, missing modules, class cycles, many modules)."""

# The tests kept here need more than one snippet's findings: project trees (several files,
# imports, the cache), framework rows in the config, assertions on some codes only, twins made
# from templates. A plain "this one-file snippet reports exactly these (code, line) findings" test
# belongs in the rule's rules/<CODE>-<name>/cases.toml (tests/catalogue/test_rule_folders.py runs them all).

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import libcst
import pytest

from accumlint.files import reading
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.simulation import Simulation, simulate
from accumlint.pipeline import engine
from accumlint.project import index as project_index
from accumlint.project.index import ProjectIndex
from accumlint.run import runner
from accumlint.run.cache import ResultCache
from accumlint.settings.config import Settings
from tests.support import EVERY_CODE, findings, one, tree

SECRET = b"s" * 32  # the per-user key that signs cache entries (tests/runs/test_cache.py covers it)


# --- across functions -----------------------------------------------------------------------


def test_every_candidate_of_a_dispatch_is_a_path(tmp_path: Path) -> None:
    source = """
    def gated(n, loss, optimizer, every):
        loss.backward()
        if (n + 1) % every == 0:
            optimizer.step()
            optimizer.zero_grad()

    def eager(n, loss, optimizer, every):
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    def fit(net, optimizer, loader, every, accumulate):
        if accumulate:
            handler = gated
        else:
            handler = eager
        for n, batch in enumerate(loader):
            handler(n, net(batch) / every, optimizer, every)
    """
    # two definitions in an if/else: the last one reaching the loop is taken (no path through the
    # other); the IfExp form is the one whose both arms are followed (tests/project/test_patterns.py)
    found = one(tmp_path, source)
    assert all(code == "ACC004" for code, _ in found)


# --- callables stored as attributes, instances, several optimizers -----------------------------


def test_a_discriminator_with_an_undivided_loss_stays_silent(tmp_path: Path) -> None:
    source = """
    import torch

    def fit(gen, disc, loader, accum):
        g_opt = torch.optim.Adam(gen.parameters())
        d_opt = torch.optim.Adam(disc.parameters())
        for i, batch in enumerate(loader):
            disc(batch).mean().backward()
            d_opt.step()
            d_opt.zero_grad()
            (gen(batch).mean() / accum).backward()
            if (i + 1) % accum == 0:
                g_opt.step()
                g_opt.zero_grad()
    """
    assert [c for c, _ in one(tmp_path, source) if c == "ACC004"] == []


# --- across modules -----------------------------------------------------------------------------
SRC_LAYOUT = {
    "pyproject.toml": "[project]\nname = 'pkg'\n",
    "src/pkg/__init__.py": "",
    "src/pkg/engine/__init__.py": "",
    "src/pkg/engine/steps.py": """
        def backward_and_maybe_step(loss, optimizer, should_step):
            loss.backward()
            if should_step:
                optimizer.step()
    """,
    "src/pkg/train.py": """
        from .engine.steps import backward_and_maybe_step

        def run(model, optimizer, loader, accum_steps):
            for i, batch in enumerate(loader):
                optimizer.zero_grad()
                loss = model(batch) / accum_steps
                backward_and_maybe_step(loss, optimizer, (i + 1) % accum_steps == 0)
    """,
}


def test_a_relative_import_in_a_src_layout_reaches_the_backward(tmp_path: Path) -> None:
    # train.py calls no backward itself: the prefilter must still let it through
    assert findings(tmp_path, SRC_LAYOUT) == [("src/pkg/train.py", "ACC001", 6)]


def test_an_import_that_names_the_checkout_as_its_package_reaches_the_backward(tmp_path: Path) -> None:
    # `from vidmae.engine.steps import ...` in the checkout `vidmae/` itself (run with its parent on the
    # path, or installed by its folder's name): the checkout is the package
    files = {name.removeprefix("src/pkg/"): text.replace("from .engine", "from vidmae.engine")
             for name, text in SRC_LAYOUT.items() if name.startswith("src/pkg/")}
    assert findings(tmp_path / "vidmae", files) == [("train.py", "ACC001", 6)]


def test_an_absolute_import_of_a_clip_helper_reports_the_call_with_its_helper_line(tmp_path: Path) -> None:
    files = {
        "setup.cfg": "[metadata]\nname = pkg\n",
        "src/pkg/__init__.py": "",
        "src/pkg/grads.py": """
            import torch

            def clip_all(model, limit=1.0):
                torch.nn.utils.clip_grad_norm_(model.parameters(), limit)
        """,
        "scripts/train.py": """
            from pkg.grads import clip_all

            def run(model, optimizer, loader, gradient_accumulation_steps):
                for i, batch in enumerate(loader):
                    (model(batch) / gradient_accumulation_steps).backward()
                    clip_all(model)
                    if (i + 1) % gradient_accumulation_steps == 0:
                        optimizer.step()
                        optimizer.zero_grad()
        """,
    }
    paths = tree(tmp_path, files)
    run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1)
    [finding] = run.findings
    assert (os.path.relpath(finding.path, tmp_path), finding.code, finding.line) == ("scripts/train.py", "ACC301", 7)
    assert [(Path(p).name, line) for p, line, _ in finding.related] == [("grads.py", 5)]
    assert finding.via == f"via {os.path.join('..', 'src', 'pkg', 'grads.py')}:5"
    assert finding.to_json()["related"][0]["location"]["row"] == 5


def test_a_weight_ema_in_another_modules_method_points_at_the_ema_not_the_update(tmp_path: Path) -> None:
    """Checked with its caller, the method's own file reports the EMA at its line, and the caller's
    file at the call, by design (each file reports what runs from its own code); the caller's related
    location is the EMA the finding is about, not the optimizer update of the same method."""
    files = {
        "trainer.py": """
            class Trainer:
                def __init__(self, net, opt, ema, data, accum):
                    self.net, self.opt, self.ema, self.data, self.accum = net, opt, ema, data, accum

                def one_update(self):
                    self.opt.zero_grad()
                    for _ in range(self.accum):
                        (self.net(self.data.sample()).mean() / self.accum).backward()
                        self.ema.update(self.net)
                    self.opt.step()
        """,
        "main.py": """
            from trainer import Trainer

            def run(net, opt, ema, data, accum, total):
                t = Trainer(net, opt, ema, data, accum)
                for _ in range(total):
                    t.one_update()
        """,
    }
    paths = tree(tmp_path, files)
    run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1)
    found = sorted((Path(f.path).name, f.code, f.line, [(Path(p).name, line) for p, line, _ in f.related])
                   for f in run.findings)
    assert found == [("main.py", "ACC007", 7, [("trainer.py", 10)]), ("trainer.py", "ACC007", 10, [])]


WRAPPER_OPTIMIZER = {
    "opt/__init__.py": "",
    "opt/wrapping.py": """
        import torch

        class PairOptimizer:
            def __init__(self, first, second, grad_accum, per_epoch):
                self.inner = [torch.optim.SGD(first, lr=0.1), torch.optim.SGD(second, lr=0.01)]
                self.grad_accum, self.per_epoch = grad_accum, per_epoch

            def step(self, loss, i, seen):
                loss.backward()
                if {test}:
                    for opt in self.inner:
                        opt.step()
                        opt.zero_grad()
    """,
    "train.py": """
        from opt.wrapping import PairOptimizer

        def fit(net, head, loader, grad_accum, epochs):
            pair_opt = PairOptimizer(net.parameters(), head.parameters(), grad_accum, len(loader))
            seen = 0
            for _ in range(epochs):
                for i, x in enumerate(loader):
                    pair_opt.step(head(net(x)).mean() / grad_accum, i, seen)
                    seen += 1
    """,
}


@pytest.mark.parametrize(("test", "expected"), [
    # the wrapper (another module, an optimizer by its class name) gates its own updates and
    # flushes at the epoch's end: its `step()` is no update per microbatch
    ("(seen + 1) % self.grad_accum == 0 or i == self.per_epoch - 1", []),
    ("(seen + 1) % self.grad_accum == 0", []),
    # it updates on every call while the loss is divided by A: the update runs every microbatch
    ("True", [("train.py", "ACC004", 9)]),
])
def test_a_wrapper_optimizer_that_gates_its_own_step(tmp_path: Path, test: str, expected: list) -> None:
    files = {name: text.replace("{test}", test) for name, text in WRAPPER_OPTIMIZER.items()}
    assert [(Path(path).name, code, line) for path, code, line in findings(tmp_path, files)] == expected


def test_a_finding_at_a_helpers_call_offers_no_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the reset is in the helper with the forward and backward: moving the call under the gate
    # would train on one microbatch of A, so neither the machine formats nor --fix offer an edit
    import json

    from click.testing import CliRunner

    from accumlint.cli.app import main

    files = {
        "pyproject.toml": "[project]\nname = 'p'\n",
        "utils.py": """
            def micro_step(model, batch, optimizer, accum):
                optimizer.zero_grad()
                loss = model(batch) / accum
                loss.backward()
                return loss.detach()
        """,
        "train.py": """
            from utils import micro_step

            def run(model, optimizer, loader, accum):
                for i, batch in enumerate(loader):
                    micro_step(model, batch, optimizer, accum)
                    if (i + 1) % accum == 0:
                        optimizer.step()
        """,
    }
    tree(tmp_path, files)
    before = {name: (tmp_path / name).read_bytes() for name in files}
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "json", "."]).output
    [finding] = json.loads(out)
    assert (finding["code"], finding["filename"].endswith("train.py")) == ("ACC001", True)
    assert (finding["fix"]["applicability"], finding["fix"]["edits"]) == ("display-only", [])
    result = CliRunner().invoke(main, ["check", "--no-cache", "--fix", "."])
    assert "fixable" not in result.output and result.exit_code == 1
    assert {name: (tmp_path / name).read_bytes() for name in files} == before


HELPER_PROJECT = {
    "pyproject.toml": "[project]\nname = 'p'\n",
    "utils.py": """
        def micro_step(model, batch, optimizer, accum):
            optimizer.zero_grad()
            (model(batch) / accum).backward()
    """,
    "train.py": """
        from utils import micro_step

        def run(model, optimizer, loader, accum):
            for i, batch in enumerate(loader):
                micro_step(model, batch, optimizer, accum)
                if (i + 1) % accum == 0:
                    optimizer.step()
    """,
}


def test_stdin_and_the_editor_follow_the_helpers_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `check - --stdin-filename train.py` and the language server check one buffer: the model
    # still follows the modules it imports, as `check train.py` does
    from click.testing import CliRunner

    from accumlint.cli.app import main
    from accumlint.lsp.server import AccumlintServer

    tree(tmp_path, HELPER_PROJECT)
    monkeypatch.chdir(tmp_path)
    source = (tmp_path / "train.py").read_text()
    out = CliRunner().invoke(main, ["check", "--no-cache", "--output-format", "concise", "-",
                                    "--stdin-filename", "train.py"], input=source).output
    assert out.splitlines()[0].startswith("train.py:6:9: ACC001") and "(via utils.py:3)" in out
    [diagnostic], _ = AccumlintServer().check_document((tmp_path / "train.py").as_uri(), 1, source, source.encode())
    assert (diagnostic.code, diagnostic.range.start.line) == ("ACC001", 5)


def test_a_base_class_from_another_module(tmp_path: Path) -> None:
    files = {
        "base.py": """
            class BaseTrainer:
                def step_batch(self, batch):
                    self.optimizer.zero_grad()
                    (self.model(batch) / self.accum_steps).backward()
        """,
        "trainer.py": """
            from base import BaseTrainer

            class MyTrainer(BaseTrainer):
                def fit(self, loader):
                    for i, batch in enumerate(loader):
                        self.step_batch(batch)
                        if (i + 1) % self.accum_steps == 0:
                            self.optimizer.step()
        """,
    }
    assert findings(tmp_path, files) == [("trainer.py", "ACC001", 7)]


def test_a_helper_module_that_is_correct_stays_silent(tmp_path: Path) -> None:
    files = dict(SRC_LAYOUT)
    files["src/pkg/train.py"] = """
        from .engine.steps import backward_and_maybe_step

        def run(model, optimizer, loader, accum_steps):
            for i, batch in enumerate(loader):
                loss = model(batch) / accum_steps
                backward_and_maybe_step(loss, optimizer, (i + 1) % accum_steps == 0)
                if (i + 1) % accum_steps == 0:
                    optimizer.zero_grad()
    """
    assert findings(tmp_path, files) == []


def test_editing_the_helper_module_rechecks_its_caller(tmp_path: Path) -> None:
    files = dict(SRC_LAYOUT)
    files["src/pkg/train.py"] = """
        from .engine.steps import backward_and_maybe_step

        def run(model, optimizer, loader, accum_steps):
            for i, batch in enumerate(loader):
                loss = model(batch) / accum_steps
                backward_and_maybe_step(loss, optimizer, (i + 1) % accum_steps == 0)
                if (i + 1) % accum_steps == 0:
                    optimizer.zero_grad()
    """
    cache_dir = tmp_path / ".cache"
    assert findings(tmp_path, files, ResultCache.load(cache_dir, "key", SECRET)) == []
    assert findings(tmp_path, files, ResultCache.load(cache_dir, "key", SECRET)) == []  # warm, still silent
    files["src/pkg/engine/steps.py"] = """
        def backward_and_maybe_step(loss, optimizer, should_step):
            optimizer.zero_grad()
            loss.backward()
            if should_step:
                optimizer.step()
    """
    time.sleep(0.01)
    found = findings(tmp_path, files, ResultCache.load(cache_dir, "key", SECRET))
    assert ("src/pkg/train.py", "ACC001", 7) in found  # the call: the reset is in the helper


def test_the_names_that_reach_a_backward_change_the_prefilters_cached_verdict(tmp_path: Path) -> None:
    files = {
        "helpers.py": """
            def finish(loss, opt):
                opt.step()
        """,
        "train.py": """
            from helpers import finish

            def run(model, opt, loader, accum_steps):
                for batch in loader:
                    opt.zero_grad()
                    finish(model(batch) / accum_steps, opt)
        """,
    }
    cache_dir = tmp_path / ".cache"
    assert findings(tmp_path, files, ResultCache.load(cache_dir, "key", SECRET)) == []  # no backward anywhere
    files["helpers.py"] = """
        def finish(loss, opt):
            loss.backward()
            opt.step()
    """
    found = findings(tmp_path, files, ResultCache.load(cache_dir, "key", SECRET))
    assert ("train.py", "ACC004", 7) in found


def test_an_import_cycle_and_a_missing_module_are_not_fatal(tmp_path: Path) -> None:
    files = {
        "a.py": """
            from b import g
            from nowhere import h

            def f(model, opt, loader, accum):
                for batch in loader:
                    g(model, opt, batch, accum)
                    h(batch)
        """,
        "b.py": """
            from a import f

            def g(model, opt, batch, accum):
                (model(batch) / accum).backward()
                opt.step()
                f(model, opt, [batch], accum)
        """,
    }
    assert findings(tmp_path, files) == [("a.py", "ACC004", 7)]


def test_ten_thousand_modules_in_a_chain_are_followed_within_the_limits(tmp_path: Path) -> None:
    count = 10_000
    for number in range(count):
        following = f"from m{number + 1} import f{number + 1}\n" if number + 1 < count else ""
        call = f"    f{number + 1}(x)\n" if number + 1 < count else "    x.backward()\n"
        (tmp_path / f"m{number}.py").write_text(f"{following}\ndef f{number}(x):\n{call}")
    (tmp_path / "train.py").write_text(
        "from m0 import f0\n\ndef run(loader, opt):\n    for x in loader:\n        f0(x)\n        opt.step()\n")
    paths = sorted(str(p) for p in tmp_path.glob("*.py"))
    started = time.monotonic()
    run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1)
    assert run.errors == []
    assert time.monotonic() - started < 120  # a bound against a hang, not a speed target
    assert not [f for f in run.findings if f.code != "ACC002"]


@pytest.mark.parametrize("bad", ["def broken(:\n", b"\xff\xfe not utf-8 \x00"])
def test_a_helper_module_that_does_not_parse_leaves_the_call_unknown(tmp_path: Path, bad: str | bytes) -> None:
    (tmp_path / "utils.py").write_bytes(bad if isinstance(bad, bytes) else bad.encode())
    (tmp_path / "train.py").write_text(
        "from utils import step_all\n\ndef run(model, opt, loader, accum):\n    for x in loader:\n"
        "        (model(x) / accum).backward()\n        step_all(opt)\n")
    paths = sorted(str(p) for p in tmp_path.glob("*.py"))
    run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1)
    # the broken module is not followed (and, calling no rule's marker, not reported either)
    assert {(Path(f.path).name, f.code) for f in run.findings} <= {("utils.py", "ACC000"), ("train.py", "ACC002")}
    assert run.errors == []


def test_the_prefilter_passes_a_file_whose_only_backward_is_in_a_project_helper(tmp_path: Path) -> None:
    from accumlint import project
    from accumlint.pipeline import engine
    from accumlint.pipeline.run_context import RunContext

    paths = tree(tmp_path, SRC_LAYOUT)
    train = next(p for p in paths if p.endswith("train.py"))
    data = Path(train).read_bytes()
    rules = engine.rules_for(EVERY_CODE)
    assert not engine.may_fire(data, rules, path=train)  # alone, nothing in it can fire
    index = project.ProjectIndex.for_files(paths, str(tmp_path))
    assert engine.may_fire(data, rules, path=train, project=index)
    assert not isinstance(engine.screen(train, data, rules, RunContext(index)), engine.FileResult)
    assert isinstance(engine.screen(train, data, rules), engine.FileResult)  # alone: decided by its bytes


def test_a_division_in_another_modules_return_is_reported_at_the_call(tmp_path: Path) -> None:
    files = {
        "losses.py": """
            import torch.nn.functional as F

            def token_loss(model, batch, grad_accum_steps):
                logits = model(batch["input_ids"])
                loss = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
                return loss / grad_accum_steps
        """,
        "train.py": """
            from losses import token_loss

            def run(model, optimizer, loader, grad_accum_steps):
                for i, batch in enumerate(loader):
                    token_loss(model, batch, grad_accum_steps).backward()
                    if (i + 1) % grad_accum_steps == 0:
                        optimizer.step()
                        optimizer.zero_grad()
        """,
    }
    paths = tree(tmp_path, files)
    run = runner.check_files(paths, Settings(project_root=tmp_path), EVERY_CODE, jobs=1)
    assert [(Path(f.path).name, f.code, f.line, f.via) for f in run.findings] == [
        ("train.py", "ACC102", 6, "via losses.py:7")]


def test_a_library_function_described_by_a_row_is_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from accumlint.frameworks.contracts import Summary, SummaryEvent
    from accumlint.model import summaries

    row = Summary("fancylib.AmpScaler.__call__",
                  ("self", "loss", "optimizer", "clip_grad=None", "parameters=None", "update_grad=True"),
                  (SummaryEvent("scaled_backward", "loss"),
                   SummaryEvent("unscale", "optimizer", "update_grad"),
                   SummaryEvent("clip", "parameters", "update_grad"),
                   SummaryEvent("scaler_update", "optimizer", "update_grad")), method=True)
    source = """
    from fancylib import AmpScaler

    def epoch(model, loader, optimizer, accum_iter):
        scaler = AmpScaler()
        for it, batch in enumerate(loader):
            optimizer.zero_grad()
            scaler(model(batch) / accum_iter, optimizer, parameters=model.parameters(),
                   update_grad=(it + 1) % accum_iter == 0)
    """
    assert one(tmp_path, source) == []  # without the row the call is unknown
    monkeypatch.setitem(summaries.LIBRARY_SUMMARIES, row.name, row)
    assert one(tmp_path, source) == [("ACC001", 7)]


def test_a_row_naming_no_parameter_is_refused() -> None:
    from accumlint.frameworks.contracts import Summary, SummaryEvent

    with pytest.raises(ValueError, match="not a parameter"):
        Summary("lib.f", ("loss",), (SummaryEvent("update", "optimizer"),))
    with pytest.raises(ValueError, match="unknown event kind"):
        Summary("lib.f", ("loss",), (SummaryEvent("explode", "loss"),))


def test_the_project_scan_substrings_cover_every_helper_marker() -> None:
    from accumlint.pipeline.engine import _HELPER_MARKERS
    from accumlint.project.index import _NEEDLES

    assert all(any(needle in marker for needle in _NEEDLES) for marker in _HELPER_MARKERS)


def test_a_reset_of_a_wrapper_that_resets_its_parts_is_one_reset(tmp_path: Path) -> None:
    """Field trial (an optimizer wrapper of another module): `optimizer.zero_grad()` on a project
    class whose `zero_grad` resets its inner optimizer and accumulator is one finding at the call,
    not one more per object inside the wrapper."""
    files = {
        "pyproject.toml": "[project]\nname = 'p'\n",
        "wrap.py": """
            import torch

            class Wrapped(torch.optim.Optimizer):
                def __init__(self, optimizer, accumulator):
                    self.optimizer = optimizer
                    self.accumulator = accumulator

                def zero_grad(self):
                    self.optimizer.zero_grad()
                    self.accumulator.zero_grad()
                    super().zero_grad()
        """,
        "train.py": """
            import torch
            from wrap import Wrapped

            optimizer = Wrapped(torch.optim.SGD(model.parameters(), lr=0.1), accumulator)
            for i, batch in enumerate(loader):
                optimizer.zero_grad()
                loss = model(batch) / 4
                loss.backward()
                if (i + 1) % 4 == 0:
                    optimizer.step()
        """,
    }
    assert findings(tmp_path, files) == [("train.py", "ACC001", 7)]


# --- a training manager object steps the optimizers ---------------------------------------------
#: a class that owns several optimizers and steps and resets them in one method; the driver loop
#: accumulates A microbatches and calls the method once per group (the family of a manager object
#: built at module level, in main(), from another module, or with a conditional step)
_MANAGER = """
    import torch

    class Trainer{suffix}:
        def __init__(self, model):
            self.dense = torch.optim.AdamW(model.parameters())
            self.sparse = torch.optim.SGD(model.parameters(), lr=0.1)
            self.all = [self.dense, self.sparse]
            for opt in self.all:
                opt.hold = 0

        def due(self, opt, it):
            return opt is self.sparse or it % 2 == 1

        def update(self, it):
            for opt in self.all:
                if opt.hold > 0:
                    opt.hold -= 1
                    opt.zero_grad(set_to_none=True)
                elif self.due(opt, it):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
"""

_MICRO_LOOP = """
    for it in range(steps):
        for k in range(accum):
            out = net(next(batches)).mean()
            (out / accum).backward()
            {reset}
        {manager}.update(it)
"""


def _manager_loop(indent: str, manager: str, reset: str) -> str:
    body = textwrap.dedent(_MICRO_LOOP).format(manager=manager, reset=reset)
    return textwrap.indent(body, indent)


def _reset_line(source: str) -> int:
    """The line of the per-microbatch reset the micro-loop holds."""
    return next(n for n, text in enumerate(source.splitlines(), 1) if text.strip() == "net.zero_grad()")


@pytest.mark.parametrize("reset", ["net.zero_grad()", "pass"])
def test_manager_built_at_module_level_in_a_module_level_loop(tmp_path: Path, reset: str) -> None:
    source = textwrap.dedent(_MANAGER.format(suffix="")) + textwrap.dedent("""
        net = torch.nn.Linear(4, 1)
        runner = Trainer(net)
        steps, accum = 100, 4
    """) + _manager_loop("", "runner", reset)
    expected = [("ACC001", _reset_line(source))] if reset != "pass" else []
    assert one(tmp_path, source) == expected


@pytest.mark.parametrize("reset", ["net.zero_grad()", "pass"])
def test_manager_built_at_module_level_read_as_a_global_in_main(tmp_path: Path, reset: str) -> None:
    source = textwrap.dedent(_MANAGER.format(suffix="")) + textwrap.dedent("""
        net = torch.nn.Linear(4, 1)
        runner = Trainer(net)

        def main(batches, steps, accum):
    """) + _manager_loop("    ", "runner", reset)
    expected = [("ACC001", _reset_line(source))] if reset != "pass" else []
    assert one(tmp_path, source) == expected


def test_manager_built_in_main(tmp_path: Path) -> None:
    source = textwrap.dedent(_MANAGER.format(suffix="")) + textwrap.dedent("""
        def main(net, batches, steps, accum):
            runner = Trainer(net)
    """) + _manager_loop("    ", "runner", "net.zero_grad()")
    assert one(tmp_path, source) == [("ACC001", _reset_line(source))]


def test_manager_rebound_at_module_level_is_not_guessed(tmp_path: Path) -> None:
    """Two module-level values for the name: which object `main` reads is not known, so the
    update behind the call stays unseen (silent, not wrong)."""
    source = textwrap.dedent(_MANAGER.format(suffix="")) + textwrap.dedent("""
        net = torch.nn.Linear(4, 1)
        runner = Trainer(net)
        runner = make_other(net)

        def main(batches, steps, accum):
    """) + _manager_loop("    ", "runner", "net.zero_grad()")
    assert one(tmp_path, source) == []


#: a base class that steps and resets every optimizer its subclass collects (no backward)
_STEPPING = """
            class Stepping:
                def update(self, it):
                    for opt in self.all:
                        opt.step()
                    for opt in self.all:
                        opt.zero_grad(set_to_none=True)
"""


@pytest.mark.parametrize("reset", ["net.zero_grad()", "pass"])
def test_manager_class_from_another_module_with_the_update_in_its_base(tmp_path: Path, reset: str) -> None:
    """The class the driver builds defines no event itself: its base (same module) steps and
    resets. The manager module calls no backward."""
    files = {
        "pyproject.toml": "[project]\nname = 'p'\n",
        "managers.py": """
            import torch
""" + _STEPPING + """
            class Trainer(Stepping):
                def __init__(self, model):
                    self.all = [torch.optim.AdamW(model.parameters())]
        """,
        "train.py": textwrap.dedent("""
            from managers import Trainer

            def main(net, batches, steps, accum):
                runner = Trainer(net)
        """) + _manager_loop("    ", "runner", reset),
    }
    expected = [("train.py", "ACC001", _reset_line(files["train.py"]))] if reset != "pass" else []
    assert findings(tmp_path, files) == expected


def test_manager_whose_base_with_the_update_is_in_a_third_module(tmp_path: Path) -> None:
    # the manager module performs nothing itself: the index follows `Trainer` because its base does
    files = {
        "pyproject.toml": "[project]\nname = 'p'\n",
        "stepping.py": _STEPPING,
        "managers.py": """
            import torch
            from stepping import Stepping

            class Trainer(Stepping):
                def __init__(self, model):
                    self.all = [torch.optim.AdamW(model.parameters())]
        """,
        "train.py": textwrap.dedent("""
            from managers import Trainer

            def main(net, batches, steps, accum):
                runner = Trainer(net)
        """) + _manager_loop("    ", "runner", "net.zero_grad()"),
    }
    assert findings(tmp_path, files) == [("train.py", "ACC001", _reset_line(files["train.py"]))]


# --- callers in other modules ---------------------------------------------------------------

_TRAINER = """
    class Trainer:
        def __init__(self, model, optimizer, loader, accum):
            self.model, self.optimizer, self.loader, self.accum = model, optimizer, loader, accum

        def fit(self, epochs):
            for epoch in range(epochs):
                for i, batch in enumerate(self.loader):
                    (self.model(batch) / self.accum).backward()
                    if (i + 1) % self.accum == 0:
                        self.optimizer.step()
                        self.optimizer.zero_grad()
"""

_SCRIPT = """
    from trainer import Trainer

    def main(model, optimizer, loader, accum):
        assert len(loader) % accum == 0
        Trainer(model, optimizer, loader, accum).fit(2)

    if __name__ == "__main__":
        main(*build())
"""


def test_a_method_that_another_modules_entry_runs_is_decided_by_that_caller(tmp_path: Path) -> None:
    # alone, `fit` leaks the tail of its epochs; the script that runs it rules the tail out
    assert ("trainer.py", "ACC005", 10) in findings(tmp_path / "alone", {"trainer.py": _TRAINER})
    assert findings(tmp_path / "both", {"trainer.py": _TRAINER, "train.py": _SCRIPT}) == []


def test_editing_the_caller_rechecks_the_method_it_runs(tmp_path: Path) -> None:
    cache_dir = tmp_path / ".cache"
    files = {"trainer.py": _TRAINER, "train.py": _SCRIPT}
    assert findings(tmp_path, files, ResultCache.load(cache_dir, "key", SECRET)) == []
    files["train.py"] = _SCRIPT.replace("        assert len(loader) % accum == 0\n", "")
    time.sleep(0.01)
    found = findings(tmp_path, files, ResultCache.load(cache_dir, "key", SECRET))
    # the method's file is checked again (its cached silence depended on the caller) and reports the
    # tail at its gate; the caller's call does not repeat what the method's own check finds
    assert found == [("trainer.py", "ACC005", 10)]


def _shared_caller(root: Path, count: int) -> tuple[list[str], str]:
    """``count`` trainer modules (``Trainer0`` ... in ``trainer0.py`` ...) and one script that
    runs them all; the trainers' paths and the script's."""
    files = {f"trainer{k}.py": _TRAINER.replace("class Trainer:", f"class Trainer{k}:") for k in range(count)}
    imports = "".join(f"    from trainer{k} import Trainer{k}\n" for k in range(count))
    runs = "".join(f"        Trainer{k}(model, optimizer, loader, accum).fit(2)\n" for k in range(count))
    files["train.py"] = _SCRIPT.replace("    from trainer import Trainer\n", imports).replace(
        "        Trainer(model, optimizer, loader, accum).fit(2)\n", runs)
    paths = tree(root, files)
    return [p for p in paths if not p.endswith("train.py")], str(root / "train.py")


def _simulate_checked(index: ProjectIndex, path: str) -> tuple[ModuleFunctions, list[Simulation]]:
    """The checked file at ``path`` simulated as ``check`` does, in this process."""
    functions = ModuleFunctions(libcst.parse_module(Path(path).read_text()), index.view(path))
    return functions, simulate(functions, path, judged_only=True)


def test_a_caller_shared_by_the_checked_modules_is_read_and_parsed_once(tmp_path: Path, monkeypatch) -> None:
    trainers, script = _shared_caller(tmp_path, 2)
    index = ProjectIndex.for_files([*trainers, script], str(tmp_path))
    index.set_names({path: index.names_of(Path(path).read_bytes()) for path in [*trainers, script]})
    parsed, read = [], []
    parse, read_signed = engine.parse_module, reading.read_signed
    monkeypatch.setattr(engine, "parse_module", lambda text: parsed.append(text) or parse(text))
    monkeypatch.setattr(project_index, "read_signed", lambda path, *a: read.append(path) or read_signed(path, *a))
    for path in trainers:
        functions, results = _simulate_checked(index, path)
        fit = functions.methods[(functions.classes[f"Trainer{trainers.index(path)}"], "fit")]
        own = next(r for r in results if r.entry.function is fit)
        assert own.undecided == ["its caller, the entry 'the script' of train.py, runs it with what it knows"]
        # the caller's run joins this file's results and ran this file's own tree (it stood in)
        assert any(r.entry.name == "the script" and fit in r.reached for r in results)
    script_text = Path(script).read_text()
    assert sum(text == script_text for text in parsed) == 1  # (was one parse per checked trainer)
    assert read.count(script) == 1


def test_an_edit_of_the_shared_caller_is_seen(tmp_path: Path) -> None:
    trainers, script = _shared_caller(tmp_path, 2)
    index = ProjectIndex.for_files([*trainers, script], str(tmp_path))

    def fits_run() -> int:  # in the first trainer's check, by the script's run (it joins the check's results)
        _, results = _simulate_checked(index, trainers[0])
        return sum(f.name.value == "fit" for r in results if r.entry.name == "the script" for f in r.reached)

    assert (fits_run(), index.importers(trainers[1], ["Trainer1"])) == (2, [script])
    text = Path(script).read_text()
    edited = text.replace("from trainer1 import Trainer1\n", "").replace(
        "    Trainer1(model, optimizer, loader, accum).fit(2)\n", "")
    assert edited != text
    Path(script).write_text(edited)
    # new bytes (a new size and ctime): read and parsed again, not served from the first reading
    assert (fits_run(), index.importers(trainers[1], ["Trainer1"])) == (1, [])
