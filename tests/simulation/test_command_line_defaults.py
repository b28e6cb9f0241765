"""Settings a training script reads from its command line: ``parser.add_argument("--restore-step",
type=int, default=0)`` then ``args = parser.parse_args()``. A run given no value for an option
reads its default (argparse, CPython 3.11), so ``args.restore_step`` is the named constant 0, as a
whole-number parameter default is, which the configurations may rebind to A; the counter started
at ``args.restore_step + 1`` is a count from a start the code fixes, not one left open. The
namespace keeps its defaults through ``return parser.parse_args()`` and ``main(args)``, and an
option's attribute is its ``dest=`` or its long flag with ``-`` as ``_``.

Also here: a tuple of run-level settings unpacked (``(data_cfg, train_cfg) = configs``) gives
named settings, so ``train_cfg["optim"]["accum"]`` is a symbol the configurations bind; and a
settings check that raises (``if args.fp16 and not cuda: raise ...``) refuses a configuration,
so it is no run-level choice to spend runs on."""

from __future__ import annotations

import pytest

from tests.simulation.test_simulation import only, run, simulated, updates
from tests.support import lint

#: `{options}`: how the command line is parsed; `{accum}` the group size the gate reads
_SCRIPT = """
import argparse

import torch


def train(args, train_cfg):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(list(range(10)), batch_size=2)
    step = args.restore_step + 1
    accum = {accum}
    for epoch in range(2):
        for batch in loader:
            loss = model(batch).mean() / accum
            loss.backward()
            if step % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
            step += 1
{options}
"""

_PARSED_HERE = """
if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--restore-step", type=int, default=0)
    parser.add_argument("--accum", type=int, default=4)
    args = parser.parse_args()
    train(args, {"optim": {"accum": 8}})
"""

_PARSED_IN_HELPER = """
def options():
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", dest="restore_step", type=int, default=0)
    parser.add_argument("--accum", type=int, default=4)
    return parser.parse_args()


if __name__ == "__main__":
    train(options(), {"optim": {"accum": 8}})
"""

_UNPACKED = """
if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--restore-step", type=int, default=0)
    args = parser.parse_args()
    configs = load_configs(args)
    (data_cfg, train_cfg) = configs
    train(args, train_cfg)
"""


def _source(options: str, accum: str = "args.accum") -> str:
    return _SCRIPT.replace("{options}", options).replace("{accum}", accum)


@pytest.mark.parametrize("options", [_PARSED_HERE, _PARSED_IN_HELPER], ids=["parsed-here", "parsed-in-a-helper"])
def test_a_counter_started_from_an_option_default_counts_from_that_start(options: str) -> None:
    result = only(_source(options))
    assert result.decided, result.reasons()
    (symbol,) = result.symbols
    assert symbol.endswith(".accum")  # (`parser.parse_args(...).accum` where no name holds the namespace)
    # step starts at 1: the update after each A-th microbatch, counted across the epochs
    assert updates(run(result, 2, 4)) == [(0, 1), (0, 3), (1, 1), (1, 3)]
    assert lint(_source(options), "ALL") == []


def test_an_unpacked_settings_tuple_names_the_symbol_the_configurations_bind() -> None:
    source = _source(_UNPACKED, accum='train_cfg["optim"]["accum"]')
    result = only(source)
    assert result.decided, result.reasons()
    assert result.symbols == ("train_cfg['optim']['accum']",)
    assert updates(run(result, 4, 8)) == [(0, 3), (0, 7), (1, 3), (1, 7)]


def test_without_a_default_the_start_stays_open() -> None:
    source = _source(_PARSED_HERE.replace('"--restore-step", type=int, default=0', '"--restore-step", type=int'))
    (result,) = simulated(source)
    assert not result.decided
    assert any("counts from a start the code does not fix" in reason for reason in result.reasons())


def test_a_counting_option_is_not_read_as_its_default() -> None:
    source = _source(_PARSED_HERE.replace('"--restore-step", type=int, default=0',
                                          '"--restore-step", action="count", default=0'))
    (result,) = simulated(source)
    assert not result.decided


def test_a_settings_check_that_raises_is_no_run_level_choice() -> None:
    # `if ... : raise` (or its `elif`) refuses a configuration: the run that raises trains nothing, so
    # the runs go on past it, as past a failed assert, and spend no attempt on the refused side
    source = """
import argparse

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--accum", type=int, default=4)
    args = parser.parse_args()
    if args.fp16 and not torch.cuda.is_available():
        raise ValueError("fp16 needs a GPU")
    if args.max_steps > 0:
        horizon = args.max_steps
    elif args.streaming:
        raise ValueError("a streamed dataset needs max_steps")
    else:
        horizon = None
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(list(range(10)), batch_size=2)
    for epoch in range(2):
        for i, batch in enumerate(loader):
            (model(batch).mean() / args.accum).backward()
            if (i + 1) % args.accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        print(horizon)


if __name__ == "__main__":
    main()
"""
    result = only(source)
    assert result.decided, result.reasons()
    keys = {key for trace in result.traces for key, _ in trace.choices}
    assert not any("fp16" in key or "streaming" in key for key in keys), keys
