"""Framework facts as rows (issue 15): A hidden in ``Accelerator(**options)`` or a
``GradientAccumulationPlugin``, and the ``cfg_accelerator_`` samples of ../shared/patterns
(skipped where the shared samples are absent)."""

from __future__ import annotations

import csv
import re
import textwrap

import pytest

from accumlint.checks import ALL_RULES
from accumlint.pipeline.engine import check_source, rules_for
from tests.shared_data import REPO, SHARED, needs_shared, require_shared, shared_params

EVERY_RULE = rules_for(rule.code for rule in ALL_RULES)


def found(source: str) -> list[tuple[str, int]]:
    """(code, line) of every finding in ``source`` (dedented), every rule selected."""
    data = textwrap.dedent(source).lstrip("\n").encode()
    return [(f.code, f.line) for f in check_source("train.py", data, EVERY_RULE).findings]


def _rows() -> list[dict[str, str]]:
    table = SHARED / "patterns" / "expected.tsv"
    if not table.exists():
        return []
    with table.open(newline="") as handle:
        return [row for row in csv.DictReader(handle, delimiter="\t") if row["file"].startswith("cfg_accelerator_")]


@needs_shared
@pytest.mark.parametrize("row", shared_params(_rows(), "patterns", "expected.tsv"), ids=lambda row: row["file"])
def test_shared_accelerator_kwargs_samples(row: dict[str, str]) -> None:
    path = require_shared("patterns", row["file"])
    codes = set(row["required"].split("|"))
    lines = {int(line) for line in row["lines"].split(",")}
    hits = [(f.code, f.line) for f in check_source(str(path), path.read_bytes(), EVERY_RULE).findings]
    assert any(code in codes and line in lines for code, line in hits), hits


@needs_shared
def test_the_shared_table_has_the_accelerator_kwargs_rows() -> None:
    require_shared("patterns", "expected.tsv")
    assert {row["file"] for row in _rows()} >= {"cfg_accelerator_kwargs_double_div.py",
                                                 "cfg_accelerator_kwargs_zero_grad.py"}


LOOP = """
    for batch in loader:
        with accelerator.accumulate(model):
            loss = model(batch).loss{division}
            accelerator.backward(loss)
            optimizer.step()
            {reset}.zero_grad()
"""


def _script(config: str, division: str = "", reset: str = "optimizer") -> str:
    body = textwrap.indent(textwrap.dedent(LOOP).format(division=division, reset=reset), "    ")
    return ("from accelerate import Accelerator, GradientAccumulationPlugin\n\n\n"
            "def fit(hp, model, optimizer, loader):\n" + textwrap.indent(textwrap.dedent(config).strip(), "    ")
            + "\n    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" + body)


CONFIGS = {
    "dict display": """
        settings = {"mixed_precision": "fp16", "gradient_accumulation_steps": hp.micro}
        accelerator = Accelerator(**settings)
    """,
    "dict call": """
        options = dict(log_with="wandb", gradient_accumulation_steps=hp.micro)
        accelerator = Accelerator(**options)
    """,
    "inline dict": """
        accelerator = Accelerator(**{"gradient_accumulation_steps": hp.micro})
    """,
    "plugin object": """
        plugin = GradientAccumulationPlugin(num_steps=hp.micro, sync_with_dataloader=False)
        accelerator = Accelerator(gradient_accumulation_plugin=plugin)
    """,
    "plugin positional": """
        accelerator = Accelerator(gradient_accumulation_plugin=GradientAccumulationPlugin(hp.micro))
    """,
}


@pytest.mark.parametrize("name", CONFIGS)
def test_a_hidden_a_is_read_and_a_manual_division_reported(name: str) -> None:
    source = _script(CONFIGS[name], " / hp.micro")
    line = source.splitlines().index("            loss = model(batch).loss / hp.micro") + 1
    assert found(source) == [("ACC101", line)]


@pytest.mark.parametrize("name", CONFIGS)
def test_a_hidden_a_without_a_manual_division_is_silent(name: str) -> None:
    assert found(_script(CONFIGS[name])) == []


@pytest.mark.parametrize("name", CONFIGS)
def test_a_model_reset_under_a_hidden_a_is_reported(name: str) -> None:
    source = _script(CONFIGS[name], reset="model")
    line = source.splitlines().index("            model.zero_grad()") + 1
    assert ("ACC001", line) in found(source)


UNDECIDED = {
    "dict built by a helper": """
        accelerator = Accelerator(**make_options(hp))
    """,
    "dict passed in": """
        accelerator = Accelerator(**hp.accelerator_options)
    """,
    "dict filled in later": """
        settings = {"mixed_precision": "fp16"}
        settings["gradient_accumulation_steps"] = hp.micro
        accelerator = Accelerator(**settings)
    """,
    "plugin built elsewhere": """
        accelerator = Accelerator(gradient_accumulation_plugin=hp.plugin)
    """,
}


@pytest.mark.parametrize("name", UNDECIDED)
def test_an_a_the_code_does_not_show_stays_undecided(name: str) -> None:
    """Precision first: when the ``**`` mapping or the plugin is not visible, whether
    Accelerate divides is unknown, so neither the division nor the reset is reported."""
    assert found(_script(UNDECIDED[name], " / hp.micro")) == []
    if name != "dict filled in later":
        assert found(_script(UNDECIDED[name], reset="model")) == []


def test_a_dict_filled_in_later_is_followed_by_the_simulated_run() -> None:
    # the simulator executes the item assignment: A is `hp.micro`, and the model's own reset inside
    # accumulate() wipes each group (accelerate 1.15.0: only a prepared optimizer's zero_grad is gated);
    # the division by A stays a pattern question the dict hides
    source = _script(UNDECIDED["dict filled in later"], reset="model")
    line = source.splitlines().index("            model.zero_grad()") + 1
    assert found(source) == [("ACC001", line)]


# --- library helpers as summaries ---------------------------------------------------------------

TIMM = """
    from timm.utils import NativeScaler


    def train_one_epoch(model, loader, optimizer, criterion, accum_iter, max_norm):
        loss_scaler = NativeScaler()
        for it, (images, targets) in enumerate(loader):
    {body}
"""


def _timm(body: str) -> str:
    return textwrap.dedent(TIMM).format(body=textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8))


def test_timm_native_scaler_updates_only_when_asked() -> None:
    """``need_update`` gates the scaler's step: a reset before every call wipes the group."""
    source = _timm("""
        optimizer.zero_grad()
        loss = criterion(model(images), targets) / accum_iter
        loss_scaler(loss, optimizer, clip_grad=max_norm, parameters=model.parameters(),
                    need_update=(it + 1) % accum_iter == 0)
    """)
    assert found(source) == [("ACC001", 7)]


def test_timm_native_scaler_gated_with_its_reset_is_silent() -> None:
    source = _timm("""
        loss = criterion(model(images), targets) / accum_iter
        boundary = (it + 1) % accum_iter == 0
        loss_scaler(loss, optimizer, clip_grad=max_norm, parameters=model.parameters(), need_update=boundary)
        if boundary:
            optimizer.zero_grad()
    """)
    assert found(source) == []


def test_timm_native_scaler_without_need_update_updates_every_microbatch() -> None:
    source = _timm("""
        loss = criterion(model(images), targets) / accum_iter
        loss_scaler(loss, optimizer, parameters=model.parameters())
        if (it + 1) % accum_iter == 0:
            optimizer.zero_grad()
    """)
    assert found(source) == [("ACC004", 8)]


def test_a_project_class_named_like_the_helper_is_read_from_its_code() -> None:
    """The row is timm's: a project's own ``NativeScaler`` (here: one that never updates) is
    analysed from its code, so the per-call reset is no ACC001 against an update it lacks."""
    source = """
        class NativeScaler:
            def __call__(self, loss, optimizer, need_update=True):
                loss.backward()


        def train(model, loader, optimizer, accum_iter):
            loss_scaler = NativeScaler()
            for it, batch in enumerate(loader):
                optimizer.zero_grad()
                loss_scaler(model(batch) / accum_iter, optimizer, need_update=(it + 1) % accum_iter == 0)
    """
    assert ("ACC001", 9) not in found(source)
    assert found(_timm("""
        optimizer.zero_grad()
        loss_scaler(criterion(model(images), targets) / accum_iter, optimizer,
                    need_update=(it + 1) % accum_iter == 0)
    """)) == [("ACC001", 7)]


def test_a_summary_event_with_a_given_parameter_runs_only_when_it_is_passed() -> None:
    from accumlint.frameworks import timm

    body = timm.SUMMARIES[0].source()
    assert "    if need_update:\n        if clip_grad is not None:\n            torch.nn.utils.clip_grad_norm_(" in body
    assert "    if need_update:\n        grad_scaler.step(optimizer)" in body


TORCHTUNE = """
    from torchtune import training


    def setup_and_train(model, loader, optimizer, loss_fn, accum):
        {shard}
        for idx, batch in enumerate(loader):
            if (idx + 1) % accum != 0:
                {skip}
                    loss_fn(model(batch["tokens"]), batch["labels"]).backward()
            else:
                loss_fn(model(batch["tokens"]), batch["labels"]).backward()
                optimizer.step()
                optimizer.zero_grad()
"""
SHARD = 'training.shard_model(model=model, shard_conditions=[lambda name, module: False], cpu_offload=False)'


def test_a_module_sharded_by_torchtune_has_no_ddp_switch() -> None:
    source = TORCHTUNE.format(shard=SHARD, skip="with model.no_sync():")
    assert found(source) == [("ACC406", 8)]
    positional = TORCHTUNE.format(shard=SHARD.replace("model=model", "model"), skip="with model.no_sync():")
    assert found(positional) == [("ACC406", 8)]


def test_a_torchtune_module_with_fsdp2_s_own_switch_is_silent() -> None:
    source = f"""
        from torchtune import training


        def setup_and_train(model, loader, optimizer, loss_fn, accum):
            {SHARD}
            for idx, batch in enumerate(loader):
                boundary = (idx + 1) % accum == 0
                model.set_requires_gradient_sync(boundary)
                (loss_fn(model(batch["tokens"]), batch["labels"]) / accum).backward()
                if boundary:
                    optimizer.step()
                    optimizer.zero_grad()
    """
    assert found(source) == []


def test_a_project_function_named_shard_model_is_not_torchtune_s() -> None:
    source = TORCHTUNE.format(shard=SHARD, skip="with model.no_sync():").replace(
        "from torchtune import training", "import helpers as training")
    assert found(source) == []


# --- one statement of each contract ---------------------------------------------------------------

def _modules():
    import types

    from accumlint import frameworks as fw

    return {name: module for name, module in vars(fw).items()
            if isinstance(module, types.ModuleType) and hasattr(module, "VERSION")}


def test_the_rows_import_neither_libcst_nor_torch() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import sys, accumlint.frameworks; "
                           "print(sorted({m.split('.')[0] for m in sys.modules} & {'libcst', 'torch'}))"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_every_row_source_names_a_version_its_module_declares() -> None:
    """A version bump edits the module's ``VERSION`` (and its rows, which read it)."""
    from accumlint.frameworks.contracts import Source

    for name, module in _modules().items():
        assert module.READ_VERSIONS[0] == module.VERSION
        for value in vars(module).values():
            rows = value if isinstance(value, tuple) else (value,)
            for row in rows:
                source = getattr(row, "source", None) or getattr(row, "read_from", None)
                if isinstance(source, Source):
                    assert source.version in module.READ_VERSIONS, (name, row)
        contract = getattr(module, "CONTRACT", None)
        if contract is not None:
            assert contract.source.version == module.VERSION, name


#: a cited version: "accelerate 1.15.0 accelerator.py", "torch 2.13.0 ``nn/parallel/distributed.py``"
CITATION = re.compile(r"\b(torch|accelerate|lightning|transformers|deepspeed|mmengine|torchtune|timm|diffusers) "
                      r"(\d+\.\d+\.\d+[\w.]*),? (?:``)?[\w/]+\.py\b")
PACKAGE_MODULE = {"torch": "pytorch"}


def test_no_module_cites_a_framework_version_its_framework_module_does_not_declare() -> None:
    """Two modules may not read one framework in different versions: a citation elsewhere in the
    linter or the guard (a docstring, a row's text) must be a version the framework's module lists."""
    modules = _modules()
    stated = []
    for root in ("accumlint", "runtime_guard"):
        for path in sorted((REPO / root).rglob("*.py")):
            for match in CITATION.finditer(path.read_text(encoding="utf-8")):
                package, version = match.groups()
                module = modules[PACKAGE_MODULE.get(package, package)]
                stated.append((path.name, package, version))
                assert version in module.READ_VERSIONS, (path, match.group(0), module.READ_VERSIONS)
    assert len(stated) > 10  # the pattern does find the citations


def test_a_backward_contract_and_its_framework_contract_agree() -> None:
    from accumlint import frameworks as fw
    from accumlint.frameworks.contracts import Normalizes, Owner

    contracts = {contract.framework: contract for contract in fw.GROUP_CONTRACTS}
    for backward in fw.BACKWARD_CONTRACTS:
        group = contracts[backward.framework]
        assert (backward.normalizes is not Normalizes.NEVER) == (group.divides is Owner.FRAMEWORK), backward


def test_a_framework_tail_and_its_framework_contract_agree() -> None:
    from accumlint import frameworks as fw

    tails = {(tail.framework, tail.treatment) for tail in fw.FRAMEWORK_TAILS.values()}
    for contract in fw.GROUP_CONTRACTS:
        if contract.tail is not None:
            assert (contract.framework, contract.tail) in tails, contract


#: names whose meaning is a framework's contract: stated as a literal only in their row
CONTRACT_NAMES = (
    "pytorch.DDP_SYNC_FLAG", "accelerate.SYNC_FLAG", "accelerate.PLUGIN_KEYWORD", "accelerate.UNSCALE_METHOD",
    "accelerate.ACCUMULATION_KEYWORD", "lightning.ACCUMULATION_KEYWORD", "mmengine.ACCUMULATION_KEYWORD",
    "deepspeed.UNMANAGED_KEY", "lightning.SCHEDULER_STEP_HOOK", "lightning.AUTOMATIC_OPTIMIZATION_ATTR",
    "lightning.MANUAL_BACKWARD", "lightning.CONFIGURE_OPTIMIZERS", "transformers.EXPLICIT_SCALED_ATTR",
    "transformers.LOSS_KWARGS_ATTR", "transformers.LOSS_FUNC_ATTR", "transformers.COUNT_PARAMETER",
    "accelerate.READ_AHEAD_LAST_FLAG", "accelerate.READ_AHEAD_SKIP",
)


def test_contract_names_are_literals_only_in_their_framework_module() -> None:
    """A module of the linter or the guard that writes ``"sync_gradients"`` itself states Accelerate's
    contract a second time; it reads ``frameworks.accelerate.SYNC_FLAG`` instead."""
    import ast

    from accumlint import frameworks as fw

    names = {}
    for dotted_name in CONTRACT_NAMES:
        module, attribute = dotted_name.split(".")
        names[getattr(getattr(fw, module), attribute)] = dotted_name
    names.update({name: "deepspeed boundary calls" for name in fw.deepspeed.BOUNDARY_CALLS
                  | fw.deepspeed.MANUAL_BOUNDARY_CALLS})
    restated = []
    for root in ("accumlint", "runtime_guard"):
        for path in sorted((REPO / root).rglob("*.py")):
            if path.parent.name == "frameworks" and path.parent.parent.name == "accumlint":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            documented = {id(node.body[0].value) for node in ast.walk(tree)
                          if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                          and node.body and isinstance(node.body[0], ast.Expr)}
            restated += [(str(path.relative_to(REPO)), node.lineno, node.value) for node in ast.walk(tree)
                         if isinstance(node, ast.Constant) and node.value in names and id(node) not in documented]
    assert restated == []


def test_the_guard_reads_the_scheduler_owners_from_the_rows() -> None:
    pytest.importorskip("torch")
    from accumlint import frameworks as fw
    from accumlint.frameworks.contracts import Owner
    from runtime_guard import frameworks as guard

    stepping = {contract.framework for contract in fw.GROUP_CONTRACTS if contract.steps_scheduler is Owner.FRAMEWORK}
    assert {"Lightning", "DeepSpeed", "HF Trainer"} <= stepping
    assert not {"Accelerate", "mmengine", "Lightning Fabric", "PyTorch"} & stepping
    assert set(guard.SCHEDULER_OWNERS) == {package for contract in fw.GROUP_CONTRACTS if contract.framework in stepping
                                           for package in contract.packages}


def test_the_guard_and_the_linter_read_one_hf_normalization_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Renaming the Trainer's attribute in the transformers module changes what the guard reads."""
    pytest.importorskip("torch")
    from types import SimpleNamespace

    from accumlint import frameworks as fw
    from runtime_guard import frameworks as guard

    hf = fw.transformers
    assert {hf.EXPLICIT_SCALED_ATTR, hf.LOSS_KWARGS_ATTR} == hf.NORMALIZATION_ATTRS
    assert guard.hf_user_normalizes(SimpleNamespace(model_accepts_loss_kwargs=True))
    monkeypatch.setattr(fw.transformers, "LOSS_KWARGS_ATTR", "takes_token_counts")
    assert guard.hf_user_normalizes(SimpleNamespace(model_accepts_loss_kwargs=True)) == ""
    assert guard.hf_user_normalizes(SimpleNamespace(takes_token_counts=True))


def test_mmengine_rows_match_the_installed_package() -> None:
    """The wrapper classes the mmengine row names exist under every path it lists, in the version
    it was read in, and ``update_params`` divides by ``accumulative_counts`` (A = 1 by default)."""
    pytest.importorskip("torch")
    mmengine = pytest.importorskip("mmengine", reason="mmengine is not installed (dev extra)")
    import importlib
    import inspect

    import torch

    from accumlint import frameworks as fw
    from accumlint.frameworks.contracts import Role

    assert mmengine.__version__ == fw.mmengine.VERSION
    for qualified, role in fw.mmengine.CONSTRUCTORS.items():
        module, name = qualified.rsplit(".", 1)
        assert role is Role.OPTIM_WRAPPER and inspect.isclass(getattr(importlib.import_module(module), name)), qualified
        assert fw.CONSTRUCTORS[qualified] is Role.OPTIM_WRAPPER
    wrapper_class = importlib.import_module("mmengine.optim").OptimWrapper
    assert fw.mmengine.ACCUMULATION_KEYWORD in inspect.signature(wrapper_class).parameters
    grads = []
    for counts in (2, 4):  # the first call of a group: backward only, no update, no reset
        weight = torch.nn.Parameter(torch.ones(()))
        wrapper = wrapper_class(torch.optim.SGD([weight], lr=0.0), **{fw.mmengine.ACCUMULATION_KEYWORD: counts})
        getattr(wrapper, fw.mmengine.BACKWARD.method)(weight * 2.0)
        grads.append(float(weight.grad))
    assert grads == [1.0, 0.5]
    default = wrapper_class(torch.optim.SGD([torch.nn.Parameter(torch.ones(()))], lr=0.0))
    assert float(default.scale_loss(torch.tensor(2.0))) == 2.0  # A = 1 unless configured: nothing divided


def test_the_read_ahead_loaders_read_ahead_in_the_installed_accelerate() -> None:
    """``accelerate.READ_AHEAD_LOADERS``: a prepared loader of each class named there has read two
    batches of its DataLoader when the loop receives the first (the guard then does not watch the
    inner iterator), and ``runtime_guard.frameworks.reads_ahead_of`` finds it from either side."""
    torch = pytest.importorskip("torch")
    data_loader = pytest.importorskip("accelerate.data_loader")
    from accumlint import frameworks as fw
    from runtime_guard.frameworks import reads_ahead_of

    fetched: list[int] = []

    class Counting(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 8

        def __getitem__(self, index: int) -> int:
            fetched.append(index)
            return index

    inner = torch.utils.data.DataLoader(Counting(), batch_size=2)
    for name in fw.accelerate.READ_AHEAD_LOADERS:
        fetched.clear()
        shard = getattr(data_loader, name)(inner.dataset, batch_size=2)
        next(iter(shard))
        assert len(fetched) == 4  # two batches of 2 for the first one the loop gets
        assert reads_ahead_of(shard, []) is shard
        assert reads_ahead_of(shard.base_dataloader, [inner, shard]) is shard
    assert reads_ahead_of(inner, [inner]) is None
