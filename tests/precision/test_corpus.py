"""The real-code corpus (../shared/corpus): labelled training loops from published packages.

Zero findings inside the loop lines of every ``correct`` row; the expected code on every
``bug`` row whose kind the implemented rules cover, except the misses listed below with
their reason. The download is cached (``$ACCUMLINT_CORPUS_DIR`` or ~/.cache/accumlint-corpus).
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from accumlint.checks import ALL_RULES
from accumlint.pipeline.engine import check_source, rules_for
from tests.shared_data import SHARED, needs_shared, require_shared, shared_params

pytestmark = needs_shared  # every test reads ../shared/corpus

#: verdict → accepted codes (the scoring table of shared/corpus/README.md)
SCORING = {
    "bug:partial-group-carryover": {"ACC005"},
    "bug:partial-group-dropped": {"ACC005"},
    "bug:partial-group-scale": {"ACC005"},
    "bug:group-size-denominator": {"ACC005"},
    "bug:mean-of-means": {"ACC102"},
    "bug:double-normalization": {"ACC101"},
    "bug:clip-inside-accumulation": {"ACC301"},
    "bug:missing-dp-rescale": {"ACC405"},
    "bug:step-inside-accumulation": {"ACC004"},
    "bug:accumulation-ignored-in-branch": {"ACC004"},
    "bug:zero-grad-inside-group": {"ACC001", "ACC501"},
    "bug:no-sync-misses-forward": {"ACC401"},
}

#: Covered bug rows the linter does not find yet, with the reason (documented misses, not FPs).
KNOWN_MISSES: dict[str, str] = {
    "recipes/dev/lora_finetune_distributed_multi_dataset.py": (
        "the epoch length comes from config (max_steps_per_epoch) and the file never relates the loader's "
        "length to A, so ACC005 cannot tell that a tail exists (silent by design)"),
    "accelerate/accelerator.py": "framework internals: the tail treatment is Accelerate's contract (optional)",
    "lightning/pytorch/loops/optimization/automatic.py": "framework internals: Lightning's own loop (optional)",
    "fastai/callback/training.py": "framework internals: fastai's callback (optional)",
    "trl/experimental/async_distillation/async_distillation_trainer.py": (
        "the per-microbatch token count comes from a collator in another part of the file "
        "(global_n_tokens per micro-batch); the compute_loss override shows only `sum / count / A`"),
}

IMPLEMENTED = {rule.code for rule in ALL_RULES}
#: what a user gets by default (off-by-default facts such as ACC901 are true on correct loops too)
SELECTED = rules_for(rule.code for rule in ALL_RULES if rule.default_enabled)


def _rows() -> list[dict[str, str]]:
    manifest = SHARED / "corpus" / "manifest.tsv"
    if not manifest.exists():
        return []
    with manifest.open(newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


@cache
def corpus_root() -> Path | None:
    """Fetch (once, cached on disk) and return the unpacked corpus, or None if it cannot be had."""
    fetch = SHARED / "corpus" / "fetch.py"
    if not fetch.exists():
        return None
    dest = Path(os.environ.get("ACCUMLINT_CORPUS_DIR", Path.home() / ".cache" / "accumlint-corpus"))
    try:
        subprocess.run([sys.executable, str(fetch), "--dest", str(dest)], check=True, timeout=900,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except (subprocess.SubprocessError, OSError):
        return None
    return dest


def _loop_ranges(text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"(\d+)-(\d+)", text)]


def _row_id(row: dict[str, str]) -> str:
    return f"{row['package']}:{row['path']}:{row['loop_lines'].split(' ')[0]}"


@pytest.mark.parametrize("row", shared_params(_rows(), "corpus", "manifest.tsv"), ids=_row_id)
def test_corpus_row(row: dict[str, str]) -> None:
    require_shared("corpus", "manifest.tsv")
    root = corpus_root()
    if root is None:
        pytest.skip("the corpus could not be downloaded (no package index reachable)")
    path = root / f"{row['package']}-{row['version']}-{row['archive_kind']}" / row["path"]
    assert path.exists(), path
    result = check_source(str(path), path.read_bytes(), SELECTED)
    assert not result.internal_errors, result.internal_errors
    ranges = _loop_ranges(row["loop_lines"])
    inside = [(f.code, f.line) for f in result.findings if any(a <= f.line <= b for a, b in ranges)]
    verdict = row["verdict"]
    if verdict == "correct":
        assert inside == [], f"false positive on a correct loop: {inside}"
    expected = SCORING.get(verdict, set()) & IMPLEMENTED
    if expected and row["path"] not in KNOWN_MISSES:
        assert any(code in expected for code, _ in inside), f"{verdict}: expected {expected}, found {inside}"
