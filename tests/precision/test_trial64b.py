"""Shapes from the 64th field trial (second half), reduced and written anew (no fetched code).

The trial's ten repositories drew no finding at all; the shapes below come from reading the one
accumulating reinforcement-learning trainer among them (a PPO learner on a DeepSpeed engine whose
group size is ``max(1, len(loader) // updates)``) and from probing reductions of it.

False positives, each asserting silence, with a twin the tool gets right (both silent now: the runs
solve the divisor A is derived with, and the config's subscript write is read):

- a PPO phase that derives A from the loader's length and the number of updates it wants
  (``accum = max(1, len(loader) // cfg.updates)``) and leaves the epoch with ``break`` once
  ``(idx + 1) // accum == cfg.updates``: the break always lands on a group's last microbatch
  (``updates * accum <= len(loader)``, or ``accum == 1``), so no tail is ever left in ``.grad``,
  yet ACC005 reports one (twin: the same phase without the ``break``: a real ACC005);
- a DeepSpeed engine whose config builder writes ``cfg["gradient_accumulation_steps"] = 1`` and a
  learner that divides its loss by its own A before ``engine.backward``: the engine divides by
  the configured 1, so the manual division is the only one, yet ACC101 says DeepSpeed divides
  again (twin: the same loop with the config's accumulation steps left to the caller: ACC101
  holds). The gated ``engine.step()`` of that loop is still reported (ACC502, kept as a passing
  test): with a configured 1 every backward is an engine boundary, and ZeRO-2 keeps only the
  last microbatch's gradient of a hand-made group.

Misses, each asserting the finding (found now), with a twin that was found already:

- the learner reaches the engine only through a strategy object stored on ``self`` (its class
  named by the annotation of the parameter it came from), whose ``backward(loss, model)`` and
  ``optimizer_step(model)`` call ``model.backward`` and ``model.step()``; the second runs under
  the learner's own ``(idx + 1) % accum == 0`` gate (ACC502 at the gated call, found by the
  runs' trace check; the same two wrappers as module functions: found by the reading too);
- a policy loss averaged over the action tokens by hand, ``(x * exp.action_mask).sum() /
  exp.action_mask.sum()``, with the mask read straight off the loop's experience object, then
  divided by A (ACC102, found now that a field of the loop's target is data; the mask first bound to
  a name, ``mask = exp.action_mask``: found before).
"""

from __future__ import annotations

import pytest

from tests.support import line_of, lint, lint_codes

# --- ACC005: a group size taken from the loader, the epoch left on a group's last microbatch -----

_PPO_PHASE = """
from torch.utils.data import DataLoader


def surrogate(scores, exp):
    return -(scores * exp.adv).mean()


def ppo_phase(policy, opt, rollouts, cfg):
    loader = DataLoader(rollouts, batch_size=cfg.mb, drop_last=False)
    accum = max(1, len(loader) // cfg.updates)
    for sweep in range(cfg.sweeps):
        for idx, exp in enumerate(loader):
            loss = surrogate(policy(exp.obs), exp) / accum
            loss.backward()
            if (idx + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
{leave}
"""

_LEAVE_ON_LAST_UPDATE = """\
            if (idx + 1) // accum == cfg.updates:
                break"""


def test_a_break_after_the_wanted_number_of_updates_leaves_no_tail() -> None:
    """The runs bind ``cfg.updates`` so that ``len(loader) // cfg.updates`` is the configuration's A
    (N // A): the break then ends each sweep on a group's last microbatch."""
    assert "ACC005" not in lint_codes(_PPO_PHASE.format(leave=_LEAVE_ON_LAST_UPDATE))


@pytest.mark.parametrize(("derivation", "wanted"), [
    ("max(1, len(loader) // updates)", "updates"),
    ("int(len(loader) / cfg.updates)", "cfg.updates"),
])
def test_the_divisor_spelled_otherwise_leaves_no_tail_either(derivation: str, wanted: str) -> None:
    source = _PPO_PHASE.format(leave=_LEAVE_ON_LAST_UPDATE.replace("cfg.updates", wanted)).replace(
        "max(1, len(loader) // cfg.updates)", derivation).replace("def ppo_phase(policy, opt, rollouts, cfg)",
                                                                   "def ppo_phase(policy, opt, rollouts, cfg, updates)")
    assert derivation in source and f"== {wanted}:" in source
    assert "ACC005" not in lint_codes(source)


def test_the_same_phase_without_the_break_is_acc005() -> None:
    """The twin: 9 microbatches with A = 4 leave one in ``.grad`` for the next sweep."""
    source = _PPO_PHASE.format(leave="")
    assert ("ACC005", line_of(source, "if (idx + 1) % accum == 0:")) in lint(source)


# --- ACC101: a DeepSpeed engine configured with one accumulation step ----------------------------

_ONE_STEP_ENGINE = """
import deepspeed


def engine_config(cfg):
    conf = {{"train_micro_batch_size_per_gpu": cfg.mb, "zero_optimization": {{"stage": 2}}}}
    conf["gradient_accumulation_steps"] = {engine_steps}
    return conf


def learn(net, opt, loader, cfg):
    engine, opt, _, _ = deepspeed.initialize(model=net, optimizer=opt, config=engine_config(cfg))
    for idx, exp in enumerate(loader):
        loss = engine(exp.obs).mean() / cfg.accum
        engine.backward(loss)
        if (idx + 1) % cfg.accum == 0:
            engine.step()
"""


def test_a_manual_division_over_an_engine_configured_with_one_step_is_not_acc101() -> None:
    """The config's ``gradient_accumulation_steps`` is written 1: the engine divides by 1."""
    assert "ACC101" not in lint_codes(_ONE_STEP_ENGINE.format(engine_steps=1))


def test_one_step_written_as_the_config_dicts_entry_is_not_acc101_either() -> None:
    source = _ONE_STEP_ENGINE.format(engine_steps=1).replace(
        '{"stage": 2}}', '{"stage": 2}, "gradient_accumulation_steps": 1}').replace(
        '    conf["gradient_accumulation_steps"] = 1\n', "")
    assert '"gradient_accumulation_steps": 1}' in source and 'conf["' not in source
    assert "ACC101" not in lint_codes(source)


def test_a_manual_division_over_an_engine_with_the_callers_steps_is_acc101() -> None:
    """The twin: the engine's accumulation steps come from the caller, so it may divide again."""
    source = _ONE_STEP_ENGINE.format(engine_steps="cfg.accum")
    line = line_of(source, "loss = engine(exp.obs).mean() / cfg.accum")
    assert ("ACC101", line) in lint(source)


def test_a_gated_engine_step_with_one_configured_step_is_still_acc502() -> None:
    """Every backward is an engine boundary with 1 step configured: a hand-made group is unsafe."""
    source = _ONE_STEP_ENGINE.format(engine_steps=1)
    assert ("ACC502", line_of(source, "engine.step()")) in lint(source)


# --- ACC502: the engine reached through a strategy object on self --------------------------------

_THROUGH_STRATEGY = """
import deepspeed


class EngineStrategy:
    def backward(self, loss, model):
        model.backward(loss)

    def optimizer_step(self, model):
        model.step()


class PolicyLearner:
    def setup(self, strategy: EngineStrategy, net, opt, ds_config):
        self.strategy = strategy
        self.engine, self.opt, _, _ = deepspeed.initialize(model=net, optimizer=opt, config=ds_config)

    def learn(self, loader, accum):
        for idx, exp in enumerate(loader):
            loss = self.engine(exp.obs).mean()
            self.strategy.backward(loss, self.engine)
            if (idx + 1) % accum == 0:
                self.strategy.optimizer_step(self.engine)
"""

_THROUGH_FUNCTIONS = """
import deepspeed


def send_back(model, loss):
    model.backward(loss)


def apply_update(model):
    model.step()


def learn(net, opt, loader, accum, ds_config):
    engine, opt, _, _ = deepspeed.initialize(model=net, optimizer=opt, config=ds_config)
    for idx, exp in enumerate(loader):
        loss = engine(exp.obs).mean()
        send_back(engine, loss)
        if (idx + 1) % accum == 0:
            apply_update(engine)
"""


def test_a_gated_engine_step_through_a_strategy_attribute_is_acc502() -> None:
    """The runs follow ``self.strategy`` into its annotated class: the engine's counting call comes
    once per group, and ``self.engine`` is built by ``deepspeed.initialize`` in ``setup``."""
    line = line_of(_THROUGH_STRATEGY, "self.strategy.optimizer_step(self.engine)")
    assert ("ACC502", line) in lint(_THROUGH_STRATEGY)


def test_an_engine_step_through_the_strategy_after_every_microbatch_is_not_acc502() -> None:
    """The same strategy called after every microbatch: the engine counts them and decides itself."""
    gated = "            if (idx + 1) % accum == 0:\n                self.strategy.optimizer_step(self.engine)"
    source = _THROUGH_STRATEGY.replace(gated, "            self.strategy.optimizer_step(self.engine)")
    assert gated in _THROUGH_STRATEGY
    assert "ACC502" not in lint_codes(source)


def test_a_gated_step_through_the_strategy_of_an_engine_known_by_use_alone_is_not_acc502() -> None:
    """``self.engine`` handed in, never built in view: as likely an engine of GAS 1 accumulated by hand."""
    source = _THROUGH_STRATEGY.replace(
        "self.engine, self.opt, _, _ = deepspeed.initialize(model=net, optimizer=opt, config=ds_config)",
        "self.engine = net")
    assert "ACC502" not in lint_codes(source)


def test_a_gated_engine_step_through_module_functions_is_acc502() -> None:
    """The twin: the same wrappers as module functions are followed; the finding is at the call."""
    line = line_of(_THROUGH_FUNCTIONS, "apply_update(engine)")
    assert ("ACC502", line) in lint(_THROUGH_FUNCTIONS)


# --- ACC102: a token mean over a mask read straight off the experience object --------------------

_MASKED_SURROGATE = """
def ppo_phase(policy, opt, loader, accum):
    for idx, exp in enumerate(loader):
{bind}
        per_token = -(policy(exp.tokens) - exp.old_logp).exp() * exp.adv
        loss = (per_token * {mask}).sum() / {mask}.sum()
        (loss / accum).backward()
        if (idx + 1) % accum == 0:
            opt.step()
            opt.zero_grad()
"""


def test_a_token_mean_over_the_experience_mask_divided_by_a_is_acc102() -> None:
    """A field of the loop's target comes with the data, as the target does."""
    source = _MASKED_SURROGATE.format(bind="", mask="exp.action_mask")
    assert ("ACC102", line_of(source, "(loss / accum).backward()")) in lint(source)


def test_the_same_mean_over_a_mask_kept_on_the_policy_is_not_acc102() -> None:
    """A mask the policy keeps (``policy.action_mask``) is no field of the data: its count is fixed."""
    source = _MASKED_SURROGATE.format(bind="", mask="policy.action_mask")
    assert "ACC102" not in lint_codes(source)


def test_the_same_mean_over_a_mask_bound_to_a_name_is_acc102() -> None:
    """The twin: ``mask = exp.action_mask`` first, then the same mean: found."""
    source = _MASKED_SURROGATE.format(bind="        mask = exp.action_mask", mask="mask")
    assert ("ACC102", line_of(source, "(loss / accum).backward()")) in lint(source)
