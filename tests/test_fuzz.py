"""Property tests (issue 7 item 2): generated programs (hypothesmith) and mutated real files never
make :func:`check_source` raise or report an internal error, and findings are deterministic.

``ACCUMLINT_FUZZ=long`` runs the long profile (5,000 examples a test), ``ACCUMLINT_FUZZ=N`` N examples;
the default is a fast one (100, derandomized).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
hypothesmith = pytest.importorskip("hypothesmith")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from accumlint.engine import check_source  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FUZZ = os.environ.get("ACCUMLINT_FUZZ", "")  # "long" (5,000 examples a test) or a count
LONG = bool(FUZZ)
EXAMPLES = 5000 if FUZZ == "long" else int(FUZZ) if FUZZ.isdigit() else 100
PROFILE = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=not LONG, suppress_health_check=list(HealthCheck)
)
CORPUS = Path.home() / ".cache" / "accumlint-corpus"
SOURCES = sorted(REPO.glob("rules/*/*.py")) + (sorted(CORPUS.rglob("*.py"))[:2000] if CORPUS.is_dir() else [])
#: prepended so that the generated program reaches LibCST and the rules
PRELUDE = "for batch in loader:\n    loss = model(batch)\n    loss.backward()\n    opt.step()\n"


def _stable(path: str, data: bytes) -> list[tuple[object, ...]]:
    result = check_source(path, data)
    assert result.internal_errors == [], result.internal_errors
    first = [(f.line, f.column, f.code, f.message) for f in result.findings]
    again = check_source(path, data)
    assert [(f.line, f.column, f.code, f.message) for f in again.findings] == first
    return first


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@PROFILE
@given(hypothesmith.from_grammar())
def test_generated_programs(source: str) -> None:
    _stable("gen.py", (PRELUDE + source).encode("utf-8", "surrogatepass"))


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@PROFILE
@given(st.sampled_from(SOURCES), st.lists(st.tuples(st.sampled_from("dus"), st.integers(0, 10**6)), max_size=6))
def test_mutated_real_files(path: Path, edits: list[tuple[str, int]]) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    for op, at in edits:
        if not lines:
            break
        i = at % len(lines)
        if op == "d":
            del lines[i]
        elif op == "u":
            lines.insert(i, lines[i])
        else:
            j = (at // len(lines)) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
    _stable(path.name, b"".join(lines))
