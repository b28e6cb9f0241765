"""The runtime guard on scripts shaped like public training scripts (issue 17): Accelerate-prepared
objects in loops that accumulate by hand, schedulers found in ``run`` mode, and the command line."""

from __future__ import annotations

import contextlib
import io
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from runtime_guard.discover import run_script  # noqa: E402
from tests.shared_data import REPO  # noqa: E402

A = 4


# A tiny token classifier trained with cross entropy (so the normalization is inferred), the
# Accelerator left at its default A = 1 and the accumulation written by hand, as nanoGPT-style and
# older `*_no_trainer` scripts do; {reset}, {gate} and {sched} are the lines a bug changes.
PREPARED_BY_HAND = """
import torch
from accelerate import Accelerator
torch.manual_seed(0)
accelerator = Accelerator(cpu=True)
model = torch.nn.Sequential(torch.nn.Embedding(7, 8), torch.nn.Linear(8, 7))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1 / (1 + k))  # on the prepared optimizer
A = {a}
for i in range(4 * A):
    ids = torch.randint(0, 7, (2, 5))
    {reset}
    loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten()) / A
    accelerator.backward(loss)
    {sched}
    if {gate}:
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
"""


def _run_by_hand(tmp_path: Path, reset: str = "pass", gate: str = "(i + 1) % A == 0", sched: str = "pass",
                 **options):
    script = tmp_path / "train.py"
    script.write_text(PREPARED_BY_HAND.format(a=A, reset=reset, gate=gate, sched=sched))
    with contextlib.redirect_stdout(io.StringIO()):
        probe = run_script(script, accumulation_steps=A, **options)
    report = probe.report()
    assert report is not None, probe.reason
    return report


def test_prepared_optimizer_without_accumulate_clean(tmp_path: Path, fresh_accelerate) -> None:
    report = _run_by_hand(tmp_path)
    assert report.codes == set(), [f.one_line() for f in report.findings]
    assert report.card["group_sizes"] == [A, A]


def test_prepared_optimizer_without_accumulate_keeps_plain_codes(tmp_path: Path, fresh_accelerate) -> None:
    """Issue 17 item 1: no accumulate() and Accelerate's A = 1, so the prepared optimizer steps and
    resets for real every call: a reset every microbatch is ACC001 and an irregular gate ACC006,
    with their own fix texts, not ACC501's."""
    zero = _run_by_hand(tmp_path, reset="optimizer.zero_grad()")
    assert zero.codes == {"ACC001"}, [f.one_line() for f in zero.findings]
    assert "accumulate" not in zero.findings[0].fix
    irregular = _run_by_hand(tmp_path, gate="i % A == 0")
    assert irregular.codes == {"ACC006"}, [f.one_line() for f in irregular.findings]


def test_missing_accumulate_with_accelerate_a_is_still_acc501(tmp_path: Path, fresh_accelerate) -> None:
    """Accelerate configured with A = 4 and no accumulate(): Accelerate's accumulation was meant and is
    missing (ACC501's "missing" case): every call of the prepared optimizer updates."""
    script = tmp_path / "train.py"
    script.write_text(PREPARED_BY_HAND.format(a=A, reset="pass", gate="True", sched="pass").replace(
        "Accelerator(cpu=True)", f"Accelerator(cpu=True, gradient_accumulation_steps={A})"))
    with contextlib.redirect_stdout(io.StringIO()):
        report = run_script(script).report()
    assert report.codes == {"ACC501"}, [f.one_line() for f in report.findings]


def test_run_mode_finds_a_scheduler_built_on_the_prepared_optimizer(tmp_path: Path, fresh_accelerate) -> None:
    """Issue 17 item 2: the scheduler wraps the AcceleratedOptimizer and is not prepared itself."""
    report = _run_by_hand(tmp_path, sched="scheduler.step()")
    assert report.card["scheduler_steps_per_update"] is not None
    assert report.codes == {"ACC304"}, [f.one_line() for f in report.findings]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _weighted_loop(factor: float, shift_twice: bool = False, **options) -> object:
    """A correct token-mean loop over A microbatches, its loss multiplied by ``factor``; with
    ``shift_twice`` the loss predicts labels shifted once more than the count of supervised tokens
    assumes (T = 6: 5 of 6 tokens reach the loss, the denominator counts 6)."""
    import runtime_guard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(7, 8), torch.nn.Linear(8, 7))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [torch.randint(0, 7, (2, 6)) for _ in range(3 * A)]
    with runtime_guard.probe(model, optimizer, accumulation_steps=A, **options) as p:
        for k in range(0, len(data), A):
            group = data[k:k + A]
            tokens = sum(ids.numel() for ids in group)
            for ids in group:
                logits = model(ids)
                if shift_twice:
                    logits, ids = logits[:, :-1], ids[:, 1:]
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten(), reduction="sum")
                (loss / tokens * factor).backward()
            optimizer.step()
            optimizer.zero_grad()
    return p.report()


@pytest.mark.parametrize(("factor", "shift", "code", "measured"), [
    (1.0, True, "ACC101", 5 / 6),  # labels shifted twice: 0.833
    (1 / (A * 1.2), False, "ACC101", 1 / (A * 1.2)),  # divided by A and again by 1.2: 0.208
    (1.5, False, "ACC103", 1.5),
])
def test_weights_summing_to_neither_1_1_over_a_nor_a(factor: float, shift: bool, code: str, measured: float) -> None:
    """Issue 17 item 4 (issue 16 item 4): the measured sum and the factor it implies are reported."""
    report = _weighted_loop(factor, shift)
    assert report.codes == {code}, [f.one_line() for f in report.findings]
    assert report.card["normalization_weight_sums"] == pytest.approx([measured] * 2, rel=1e-5)
    assert f"sum to {measured:.4g}" in report.findings[0].observed
    assert f"{measured:.4g}x the token mean" in report.findings[0].observed


def test_declared_loss_scale_is_the_convention() -> None:
    assert _weighted_loop(0.5).codes == {"ACC101"}
    declared = _weighted_loop(0.5, loss_scale=0.5)
    assert declared.codes == set() and declared.card["normalization"] == "token-weighted mean over the group"
    # the declared factor divided by A again is still ACC101 = 1/A
    assert _weighted_loop(0.5 / A, loss_scale=0.5).findings[0].observed.endswith(
        "the loss was divided by A once too often")
    with pytest.raises(ValueError, match="loss_scale"):
        _weighted_loop(1.0, loss_scale=0)


# An HF Trainer subclass whose compute_loss returns the microbatch's token mean and ignores
# num_items_in_batch; {kwargs} decides whether the model's forward takes loss kwargs.
HF_COMPUTE_LOSS = """
import os, tempfile
os.environ["HF_HUB_OFFLINE"] = "1"
import torch
import torch.nn.functional as F
from transformers import Trainer, TrainingArguments

V, T = 11, 8


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(V, 8)
        self.head = torch.nn.Linear(8, V)

    def forward(self, input_ids, labels=None{kwargs}):
        return {{"logits": self.head(self.embed(input_ids))}}


class MeanLossTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.pop("{key}")
        logits = model(**inputs)["logits"]
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100)


def make_data(n):
    g = torch.Generator().manual_seed(0)
    rows = []
    for k in range(n):
        ids = torch.randint(0, V, (T,), generator=g)
        labels = ids.clone()
        labels[: 1 + k % 5] = -100  # token counts differ between microbatches
        rows.append({{"input_ids": ids, "{key}": labels}})
    return rows


torch.manual_seed(0)
model = TinyLM()
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=2, gradient_accumulation_steps=4,
                             max_steps=3, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                             logging_strategy="no", seed=0, remove_unused_columns=False)
    MeanLossTrainer(model=model, args=args, train_dataset=make_data(24)).train()
"""


@pytest.mark.parametrize(("kwargs", "key", "code"), [
    ("", "labels", "ACC102"), (", **kwargs", "labels", "ACC105"),
    (", **kwargs", "targets", "ACC102"),  # no "labels" in the batch: nothing counted, the Trainer divides by A
])
def test_hf_compute_loss_engines_agree(tmp_path: Path, fresh_accelerate, kwargs: str, key: str, code: str) -> None:
    """Issue 17 item 9. transformers 5.24.0 ``training_step`` divides the loss by A unless it counts as
    scaled (``model_accepts_loss_kwargs and num_items_in_batch is not None``); ``model_accepts_loss_kwargs``
    comes from ``**kwargs`` in the model's forward. A forward without them: the Trainer divides each
    microbatch's token mean by A (weights sum to 1, a mean of means: ACC102, a warning the linter
    leaves to a visible loop) and ACC105 is wrong; with them it does not divide (weights sum to A):
    ACC105 from both engines."""
    pytest.importorskip("transformers")
    from accumlint.checks import ALL_RULES
    from accumlint.pipeline.engine import check_source, rules_for

    script = tmp_path / "train_hf.py"
    script.write_text(HF_COMPUTE_LOSS.format(kwargs=kwargs, key=key))
    rules = rules_for(r.code for r in ALL_RULES)
    linted = {f.code for f in check_source(str(script), script.read_bytes(), rules).findings}
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        report = run_script(script, groups=2).report()
    assert report is not None
    assert code in report.codes and ({"ACC102", "ACC105"} - {code}).isdisjoint(report.codes), \
        [f.one_line() for f in report.findings]
    if code == "ACC105":
        assert linted & {"ACC102", "ACC105"} == {"ACC105"}
        assert report.card["normalization_weight_sums"] == pytest.approx([4.0, 4.0], rel=0.2)
    else:
        assert "ACC105" not in linted
        assert report.card["normalization_weight_sums"] == pytest.approx([1.0, 1.0], rel=1e-4)


def test_acc201_not_observable_on_too_few_microbatches() -> None:
    """Issue 17 item 5: without a group of 3 or more microbatches (whose last forward shows the
    group's kept graphs) a kept graph needs A + 3 forwards; one probed group of A = 4 decides."""
    from tests.guard.guard_loops import train

    short = train("losses_list", probe_groups=1).report
    assert "ACC201" in short.codes and short.card["checks"]["ACC201"] == "checked"
    every = train("step_each", probe_groups=2, accumulation_steps=A).report  # groups of 1: 3 microbatches
    assert every.card["checks"]["ACC201"].startswith("not observable: 3 microbatches, needs A + 3 = 7")
    full = train("losses_list", probe_groups=2).report
    assert "ACC201" in full.codes and full.card["checks"]["ACC201"] == "checked"


def test_losses_list_within_one_group_is_acc201() -> None:
    """Losses kept in a list that is cleared at each update still keep every microbatch's graph until
    the group ends: ACC201 as the linter says (rules-spec ACC201, "stored across microbatches"; shared
    case 024 is such a per-group running sum), seen at the group's last forward."""
    import runtime_guard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(7, 8), torch.nn.Linear(8, 7))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A, groups=2) as p:
        kept = []
        for i in range(4 * A):
            ids = torch.randint(0, 7, (2, 5))
            loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten()) / A
            loss.backward()
            kept.append(loss)
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
                kept = []
    report = p.report()
    assert report.codes == {"ACC201"}, [f.one_line() for f in report.findings]
    finding = report.findings[0]
    assert (finding.group, finding.microbatch) == (0, 3)
    assert finding.observed.startswith("at the forward of microbatch 3 of group 0 the graphs of its microbatches 0-1 "
                                       "were still alive")
    assert report.card["checks"]["ACC201"] == "checked"


def _compiled_loop(guard: bool, probe_inner: bool, sched_each: bool = False, compile_step: bool = False):
    import runtime_guard

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(7, 8), torch.nn.Linear(8, 7))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1 / (1 + k))
    compiled = torch.compile(model, backend="eager")  # no C++ compiler needed
    step = torch.compile(optimizer.step, backend="eager") if compile_step else optimizer.step
    probe = runtime_guard.probe(model if probe_inner else compiled, optimizer, accumulation_steps=A,
                                scheduler=scheduler)
    with probe if guard else contextlib.nullcontext():
        for i in range(4 * A):
            ids = torch.randint(0, 7, (2, 5))
            loss = torch.nn.functional.cross_entropy(compiled(ids).flatten(0, 1), ids.flatten()) / A
            loss.backward()
            if sched_each:
                scheduler.step()
            if (i + 1) % A == 0:
                step()
                if not sched_each:
                    scheduler.step()
                optimizer.zero_grad()
    return probe.report() if guard else [p.detach().clone() for p in model.parameters()]


def test_torch_compile_after_an_earlier_compile() -> None:
    """Issue 17 item 7: dynamo does not guard on module hooks (torch 2.13 ``skip_nnmodule_hook_guards``),
    so hooks added to a model after an earlier compile in the process are never called through the
    compiled wrapper; the probe hooks the wrapper too, and its hooks run eagerly (a graph break) where
    they would be traced (a compiled optimizer step)."""
    plain = _compiled_loop(guard=False, probe_inner=True)  # the earlier compile
    for inner in (True, False):
        report = _compiled_loop(guard=True, probe_inner=inner)
        assert report.codes == set(), [f.one_line() for f in report.findings]
        assert report.card["group_sizes"] == [A, A]
    assert _compiled_loop(guard=True, probe_inner=True, sched_each=True).codes == {"ACC304"}
    stepped = _compiled_loop(guard=True, probe_inner=True, compile_step=True)
    assert stepped.codes == set() and stepped.card["updates"]["attempted"] == 2
    assert all(torch.equal(a, b) for a, b in zip(plain, _compiled_loop(guard=False, probe_inner=True), strict=True))


def test_warnings_point_at_the_users_line() -> None:
    """Issue 17 item 10: torch's warning from a wrapped ``scheduler.step()`` and the guard's own
    GuardWarning are attributed to the loop's lines, not to runtime_guard."""
    import warnings

    import runtime_guard

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with runtime_guard.probe(model, optimizer, accumulation_steps=2, scheduler=scheduler, on_finding="warn"):
            for i in range(6):
                model(torch.randn(2, 3)).sum().backward()
                scheduler.step()  # every microbatch, before the first optimizer.step(): torch warns
                if i % 2 == 1:
                    optimizer.step()
                    optimizer.zero_grad()
    ordering = [w for w in caught if "lr_scheduler.step()" in str(w.message)]
    guard = [w for w in caught if isinstance(w.message, runtime_guard.GuardWarning)]
    assert ordering and guard and "ACC304" in str(guard[0].message)
    assert {Path(w.filename).name for w in ordering + guard} == {Path(__file__).name}


BUGGY = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(3, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(8):
    optimizer.zero_grad()  # every microbatch: ACC001
    (model(torch.randn(2, 3)).sum() / 2).backward()
    if i % 2 == 1:
        optimizer.step()
"""


def test_run_exit_codes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """Issue 17 items 6 and 10: 1 on findings, 0 with --exit-zero and under torchrun (unless
    --exit-code), 2 for a missing script or without torch, each with a one-line reason."""
    import runtime_guard
    from runtime_guard.__main__ import main

    script = write(tmp_path, "train.py", BUGGY)
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert main(["run", "-A", "2", str(script)]) == 1
    assert "ACC001" in capsys.readouterr().out
    assert main(["run", "-A", "2", "--exit-zero", str(script)]) == 0
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    assert main(["run", "-A", "2", "--json", str(tmp_path / "card.json"), str(script)]) == 0
    assert "exit status 0 under torchrun" in capsys.readouterr().err
    assert (tmp_path / "card.json").is_file()
    assert main(["run", "-A", "2", "--exit-code", str(script)]) == 1
    capsys.readouterr()
    assert main(["run", str(tmp_path / "missing.py")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no such script: {tmp_path / 'missing.py'}"
    monkeypatch.setattr(runtime_guard, "HAS_TORCH", False)
    assert main(["run", str(script)]) == 2
    assert f"error: {runtime_guard.INSTALL_HINT}" in capsys.readouterr().err


def test_without_torch_the_cli_says_how_to_install_it(tmp_path: Path) -> None:
    """A real interpreter where ``import torch`` fails: no traceback, the install hint, status 2."""
    import subprocess
    import sys

    blocker = tmp_path / "block" / "torch"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    script = write(tmp_path, "train.py", BUGGY)
    code = ("import importlib.util, sys; sys.path.insert(0, sys.argv[1]); "
            "importlib.util.find_spec = (lambda f: (lambda name, *a: None if name == 'torch' else f(name, *a)))"
            "(importlib.util.find_spec); import runpy; sys.argv = ['runtime_guard', 'run', sys.argv[2]]; "
            "runpy.run_module('runtime_guard', run_name='__main__')")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "block"), str(script)], capture_output=True,
                          text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "error: the runtime guard needs torch: pip install torch numpy "
        "(in a clone of accumlint: pip install '.[guard]')"
    )


DDP_BUGGY = """
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(dist.get_rank())
for i in range(8):
    optimizer.zero_grad()  # every microbatch: ACC001
    (model(torch.randn(2, 3, generator=g)).sum() / 2).backward()
    if i % 2 == 1:
        optimizer.step()
dist.destroy_process_group()
"""


def test_findings_under_torchrun_end_cleanly(tmp_path: Path) -> None:
    """Two gloo ranks under a real torchrun: the findings are printed by rank 0, every rank exits 0,
    so the elastic agent reports no ChildFailedError."""
    import subprocess
    import sys

    script = write(tmp_path, "train_ddp.py", DDP_BUGGY)
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
         "runtime_guard", "run", "-A", "2", str(script)],
        capture_output=True, text=True, timeout=240, env=env, cwd=REPO)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "ChildFailedError" not in output and "ACC001" in done.stdout
    assert "runtime guard (rank 1): 1 finding(s) ['ACC001']" in done.stdout


def test_card_text_has_no_bare_none_and_explains_its_letters(tmp_path: Path) -> None:
    """Issue 17 item 10: a plain loop without scheduler, DDP or cross entropy leaves many card values
    unknown; each says why, and the evidence letters and timeline words come with a legend."""
    script = write(tmp_path, "train.py", BUGGY)
    with contextlib.redirect_stdout(io.StringIO()):
        text = str(run_script(script, accumulation_steps=2).report())
    assert "None" not in text
    assert "scheduler steps / update    no scheduler given or found" in text
    assert "all-reduce rounds / group   no DDP wrapper" in text
    assert ("evidence letters: F = forward of the probed model (one microbatch), B = backward reaching its "
            "parameters, Z = gradient reset (zero_grad), S = optimizer update attempt") in text
    assert "legend: F = forward of the probed model (one microbatch)" in text and "zero = gradient reset" in text


def test_guard_extra_installs_numpy() -> None:
    """torch 2.13 warns "Failed to initialize NumPy" at import when numpy is absent (the README demo on
    a fresh machine): the guard extra brings it."""
    tomllib = pytest.importorskip("tomllib")

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert any(dep.startswith("numpy") for dep in pyproject["project"]["optional-dependencies"]["guard"])


def test_accelerate_a_with_a_loop_gated_by_hand_keeps_plain_codes(tmp_path: Path, fresh_accelerate) -> None:
    """Accelerate's A = 4 configured (accelerator.backward divides by it) but no accumulate(): the loop
    gates its updates by hand, as Accelerate's autoregressive example does; a reset every microbatch
    is ACC001 there, not ACC501."""
    script = tmp_path / "train.py"
    script.write_text(PREPARED_BY_HAND.format(a=A, reset="optimizer.zero_grad()", gate="(i + 1) % A == 0",
                                              sched="pass").replace(
        "Accelerator(cpu=True)", f"Accelerator(cpu=True, gradient_accumulation_steps={A})").replace(" / A\n", "\n"))
    with contextlib.redirect_stdout(io.StringIO()):
        report = run_script(script).report()
    assert report.card["A_source"] == "accelerator.gradient_state.num_steps"
    assert report.codes == {"ACC001"}, [f.one_line() for f in report.findings]


class LossInside(torch.nn.Module):
    """Returns (logits, loss) like nanoGPT's GPT: compiled, the loss's gradient never reaches ``logits``."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(7, 8), torch.nn.Linear(8, 7)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.head(self.embed(ids))
        return logits, torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.flatten())


def test_compiled_loss_inside_the_model_leaves_normalization_not_inferred() -> None:
    """AOT autograd hands the logits output no gradient (None to its hook): no crash, no guess."""
    import runtime_guard

    torch.manual_seed(0)
    model = torch.compile(LossInside(), backend="aot_eager")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with runtime_guard.probe(model, optimizer, accumulation_steps=A) as p:
        for i in range(3 * A):
            _, loss = model(torch.randint(0, 7, (2, 5)))
            (loss / A).backward()
            if (i + 1) % A == 0:
                optimizer.step()
                optimizer.zero_grad()
    report = p.report()
    assert report.codes == set() and report.card["group_sizes"] == [A, A]
    assert report.card["normalization"].startswith("not inferred: the logits output received no gradient")
