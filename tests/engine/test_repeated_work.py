"""Work a check no longer repeats (issue 33, latency): whole-module walks kept for one file's
check, a scope's assignments indexed by name, worker calls on a deep frame stack. Each must
answer exactly what the plain computation answers. Written for these tests."""

from __future__ import annotations

import libcst as cst

from accumlint.model import names
from accumlint.model.dataflow import reaching_assignment
from accumlint.pipeline import engine
from accumlint.run import pool
from tests.support import model_of

SNIPPET = """
import torch
total = 0
for i, batch in enumerate(loader):
    loss = model(batch)
    loss = loss / 4
    total += loss.item()
    loss.backward()
    if (i + 1) % 4 == 0:
        opt.step()
        opt.zero_grad()
"""


def _plain_walk(module: cst.Module) -> list[cst.CSTNode]:
    stack: list[cst.CSTNode] = [module]
    found = []
    while stack:
        node = stack.pop()
        found.append(node)
        stack.extend(names.children(node))
    return found


def test_a_kept_module_walk_is_the_walk_and_goes_with_the_check() -> None:
    module = cst.parse_module(SNIPPET)
    plain = _plain_walk(module)
    for _ in range(2):  # listed, then read from the list
        walked = list(names.walk(module))
        assert len(walked) == len(plain) > 40
        assert all(a is b for a, b in zip(walked, plain, strict=True))
    names.forget_walks()
    engine.check_source("t.py", SNIPPET.encode())
    assert names._MODULE_NODES == {}  # the check dropped its modules' lists


def test_the_assignment_index_answers_as_a_scan_of_the_sites() -> None:
    model = model_of(SNIPPET)
    (scope,) = [scope for scope in model.scopes if scope.sites]
    bound = {target for site in scope.sites for target in site.targets if target is not None}
    assert {"total", "loss", "i", "batch"} <= bound
    for name in bound:
        assert scope.assignments_to(name) == [site for site in scope.sites if name in site.targets]
        for before in range(len(scope.sites) + 1):
            scanned = [s for s in scope.sites[:before] if name in s.targets and s.inline is None]
            assert reaching_assignment(scope, name, before) is (scanned[-1] if scanned else None)


def test_a_call_on_the_deep_stack_is_the_call() -> None:
    def joined(*parts: str, sep: str = "") -> str:
        return sep.join(parts)

    assert pool._on_deep_stack(joined, ("a", "b"), {"sep": "-"}) == "a-b"
    assert pool._on_deep_stack.__code__.co_stacksize >= pool.DEEP_STACK_SLOTS
    assert pool.run_alone(divmod, 17, 5) == (3, 2)  # sent to a worker by its name
