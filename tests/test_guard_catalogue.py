"""Same examples, both engines: every runnable ``rules/*/bad_*.py`` is run under the runtime
guard and must produce each expected code the guard can observe in that run (and nothing that
is not marked); every ``good_*.py`` must produce none.

Examples are discovered from the folder, so rule folders added later are picked up. Which
marked codes a run must reproduce comes from the guard itself: ``RUNTIME_CHECKS`` for codes
observable in any loop, and the card's per-code status (e.g. ACC101 only when the
normalization was inferred, ACC401 only with a DDP wrapper) for the conditional ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from test_catalogue import EXAMPLES, _id, _marks, _runnable  # noqa: E402

from runtime_guard.checks import RUNTIME_CHECKS  # noqa: E402

RUNNER = Path(__file__).with_name("guard_catalogue_runner.py")

#: Codes whose runtime evidence is the same as another marked code's (rules-spec "runtime counterpart"):
#: a loss divided only after its backward (ACC104) or left undivided where a framework expects the user
#: to divide (ACC105) gives gradients A times the group mean, which the guard reports as ACC103 where no
#: framework contract it knows says otherwise.
SAME_EVIDENCE = {"ACC104": {"ACC103"}, "ACC105": {"ACC103"}}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, dict]:
    runnable = [str(p) for p in EXAMPLES if _runnable(p) is None]
    folder = tmp_path_factory.mktemp("guard")
    # two processes (one torch import each) instead of one per example
    shards = [runnable[i::2] for i in range(2)]
    procs = [
        (subprocess.Popen([sys.executable, str(RUNNER), str(folder / f"{i}.json"), *shard],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True), folder / f"{i}.json")
        for i, shard in enumerate(shards) if shard
    ]
    merged: dict[str, dict] = {}
    for proc, out in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        merged.update(json.loads(out.read_text()))
    return merged


@pytest.mark.parametrize("path", EXAMPLES, ids=_id)
def test_example_under_guard(path: Path, results: dict[str, dict]) -> None:
    reason = _runnable(path)
    if reason:
        pytest.skip(reason)
    result = results[str(path)]
    assert "error" not in result, result.get("error")
    assert result["leftover_hooks"] == 0
    found = set(result["codes"])
    expected = {code for code, _ in _marks(path)}
    if path.name.startswith("good_"):
        assert found == set()
        return
    for code, check in RUNTIME_CHECKS.items():
        if check.needs == "events":  # observable in any loop: the card must say so
            status = result["checks"][code]
            if code == "ACC201" and "needs A + 3" in status:  # too few microbatches probed (an update every one)
                assert status.startswith("not observable: "), status
                continue
            assert status == "checked", code
    observable = {code for code in expected if result["checks"].get(code) == "checked"}
    assert observable <= found, f"expected {sorted(observable)} (of marks {sorted(expected)}), got {sorted(found)}"
    admitted = expected.union(*(SAME_EVIDENCE.get(code, set()) for code in expected))
    assert found <= admitted, f"unmarked findings {sorted(found - admitted)}"


def test_every_event_code_with_a_folder_is_exercised() -> None:
    """Each code the guard sees in any loop is reproduced by at least one runnable bad example."""
    folders = {p.parent.name.split("-")[0] for p in EXAMPLES}
    marked = {code for p in EXAMPLES if p.name.startswith("bad_") and _runnable(p) is None for code, _ in _marks(p)}
    for code, check in RUNTIME_CHECKS.items():
        if check.needs == "events" and code in folders:
            assert code in marked, code
