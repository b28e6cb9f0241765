"""The definitions LibCST reads of a large file (``accumlint/pipeline/kept_blocks.py``).

Two kinds of test: what is blanked in small files written for it (each channel by which the
model can need a definition keeps it), and, on every sample we have, the same findings and
fixes whether a file is read whole or with its unneeded definitions blanked (the threshold
forced to 0, so every file that reaches LibCST is read that way).
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from accumlint.files.text_edits import split_lines
from accumlint.pipeline import engine
from accumlint.pipeline.kept_blocks import kept_text, known_names
from accumlint.run import runner
from accumlint.settings.config import Settings, resolve_selection
from tests.catalogue.test_applicability import corpus_loop_files
from tests.shared_data import REPO, require_shared

MARKERS = [marker.decode() for marker in engine._screen_markers(tuple(engine.ALL_RULES_INSTANCES))]


def kept(source: str) -> str | None:
    return kept_text(ast.parse(source), source, MARKERS)


def read_lines(source: str) -> list[int]:
    """The numbers of the non-blank lines LibCST would read."""
    text = kept(source)
    assert text is None or len(split_lines(text)) == len(split_lines(source))  # line for line
    return [number for number, line in enumerate(split_lines(text or source), 1) if line.strip()]


UNRELATED = """\
import torch


def test_shapes():
    x = torch.zeros(3)
    assert x.shape == (3,)


def train(loader, model, opt):
    for i, batch in enumerate(loader):
        model(batch).mean().backward()
        if (i + 1) % 4 == 0:
            opt.step()
            opt.zero_grad()
"""


def test_a_definition_that_touches_no_gradient_is_blanked_line_for_line() -> None:
    assert read_lines(UNRELATED) == [1, *range(9, 15)]
    blanked = kept(UNRELATED)
    assert blanked is not None and blanked.splitlines()[8:] == UNRELATED.splitlines()[8:]


@pytest.mark.parametrize(
    ("source", "read"),
    [
        # a helper the loop calls (the model inlines it), and what that helper calls
        ("def scale(loss):\n    return norm(loss) / 4\n\ndef norm(x):\n    return x\n\n"
         "def train(loader):\n    for b in loader:\n        scale(b).backward()\n", [1, 2, 4, 5, 7, 8, 9]),
        # a caller of a function that performs events may hold the loop
        ("def micro(b):\n    b.backward()\n\ndef run(loader):\n    for b in loader:\n        micro(b)\n",
         [1, 2, 4, 5, 6]),
        # a method binds a role that a read method uses (`self.opt`)
        ("class T:\n    def setup(self):\n        self.opt = make()\n\n    def render_table(self):\n        pass\n\n"
         "    def fit(self, loader):\n        for b in loader:\n            b.backward()\n"
         "            self.opt.step()\n",
         [1, 2, 3, 8, 9, 10, 11]),
        # a function-valued name at the top level picks the step function
        ("def gated(b):\n    b.backward()\n\nstep = gated if fast else gated\n\n"
         "def run(loader):\n    for b in loader:\n        step(b)\n", [1, 2, 4, 6, 7, 8]),
        # a framework hook the model reads by its name, and a dunder
        ("class M(LightningModule):\n    def configure_optimizers(self):\n        return {'interval': 'step'}\n\n"
         "    def __init__(self):\n        self.a = 1\n\n    def training_step(self, batch):\n        return batch\n",
         [1, 2, 3, 5, 6, 8, 9]),
        # a decorator defined in the module is what a read definition names
        ("def wraps(f):\n    return f\n\n@wraps\ndef train(loader):\n    for b in loader:\n        b.backward()\n",
         [1, 2, 4, 5, 6, 7]),
        # a name in a string counts too (`getattr(self, "opt")`)
        ("class T:\n    def opt(self):\n        return 1\n\n    def fit(self, loader):\n        for b in loader:\n"
         "            b.backward()\n            getattr(self, 'opt')().step()\n", [1, 2, 3, 5, 6, 7, 8]),
    ],
    ids=["helper", "caller", "role", "function-value", "hook-and-dunder", "decorator", "string"],
)
def test_what_the_model_may_need_is_read(source: str, read: list[int]) -> None:
    assert read_lines(source) == read


def test_line_ends_are_kept_and_a_form_feed_ends_no_line() -> None:
    source = UNRELATED.replace("\n", "\r\n").replace("import torch\r\n", "import torch\x0c\r\n")
    blanked = kept(source)
    assert blanked is not None
    assert blanked.count("\r\n") == source.count("\r\n") and "\x0c" in blanked
    assert [line for line in split_lines(blanked) if line.strip()] == [
        line for number, line in enumerate(split_lines(source), 1) if number == 1 or number >= 9]


def test_a_file_whose_definitions_all_matter_is_read_whole() -> None:
    assert kept("def train(loader):\n    for b in loader:\n        b.backward()\n") is None
    assert kept("x = 1\n") is None


def test_the_known_names_come_from_the_models_tables() -> None:
    names = known_names()
    assert {"configure_optimizers", "training_step", "gradient_accumulation_steps", "no_sync"} <= names
    assert "the" not in names  # prose is no name


# --- the same findings, read whole or in part ------------------------------------------------

#: definitions no rule needs, appended to every sample so that each file that reaches LibCST
#: has something to blank (the samples are small and every definition of theirs matters)
UNNEEDED = """


def _describe_shape_table(tensor_list):
    return [tuple(item.shape) for item in tensor_list]


class _MarkdownReport:
    title_text = "report"

    def render_markdown_rows(self, rows):
        return "\\n".join(str(row) for row in rows)


def _format_elapsed_seconds(seconds):
    minutes, rest = divmod(seconds, 60)
    return f"{minutes:.0f}m{rest:.0f}s"
"""


def _run(files: list[Path], root: Path, monkeypatch: pytest.MonkeyPatch, threshold: int) -> runner.RunResult:
    monkeypatch.setattr(engine, "KEPT_BLOCKS_FROM_BYTES", threshold)
    return runner.check_files([str(f) for f in files], Settings(project_root=root), resolve_selection([]),
                              jobs=1, suggest=True)


def _same_either_way(files: list[Path], root: Path, monkeypatch: pytest.MonkeyPatch,
                     blanked: Path) -> tuple[int, int]:
    """Check ``files`` read whole, then read in part; assert the same findings, fixes and
    errors; return (files read in part, findings). ``blanked``: a new file, the log of the files
    read in part (the checks run in forked workers)."""
    assert not blanked.exists()
    real = engine.kept_text

    def spy(tree: ast.Module, text: str, markers: list[str]) -> str | None:
        found = real(tree, text, markers)
        if found is not None:
            with open(blanked, "a", encoding="utf-8") as log:
                log.write("blanked\n")
        return found

    def count() -> int:
        return len(blanked.read_text(encoding="utf-8").splitlines()) if blanked.exists() else 0

    monkeypatch.setattr(engine, "kept_text", spy)
    whole = _run(files, root, monkeypatch, 10**12)
    assert count() == 0
    part = _run(files, root, monkeypatch, 0)
    assert part.findings == whole.findings
    assert part.fixes == whole.fixes
    assert part.errors == whole.errors == []
    return count(), len(whole.findings)


def _with_unneeded(folder: Path, tmp_path: Path) -> list[Path]:
    """A copy of the ``*.py`` files under ``folder`` (same layout), each with :data:`UNNEEDED`."""
    copies = []
    for path in sorted(folder.rglob("*.py")):
        copy = tmp_path / path.relative_to(folder)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(path.read_bytes().rstrip(b"\n") + UNNEEDED.encode())
        copies.append(copy)
    return copies


def test_the_fixable_examples_read_the_same_in_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast tier's share: the catalogue folders of the rules with a fix, fixes compared too."""
    for folder in sorted((REPO / "rules").glob("ACC*")):
        if folder.name[:6] in {"ACC001", "ACC006", "ACC101", "ACC201", "ACC304"}:
            _with_unneeded(folder, tmp_path / folder.name)
    files = sorted(tmp_path.rglob("*.py"))
    blanked, findings = _same_either_way(files, tmp_path, monkeypatch, tmp_path / "blanked.log")
    # each file read in part once (a report's fixes check no fixed file again), every fixable
    # example's finding with its fix compared
    assert blanked == len(files) and findings >= 17


@pytest.mark.slow
def test_the_catalogue_reads_the_same_in_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _with_unneeded(REPO / "rules", tmp_path)
    assert len(files) > 100
    blanked, findings = _same_either_way(files, tmp_path, monkeypatch, tmp_path / "blanked.log")
    assert blanked > 100 and findings > 60


@pytest.mark.slow
@pytest.mark.parametrize("folder", ["cases", "patterns"])
def test_the_shared_samples_read_the_same_in_part(folder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _with_unneeded(require_shared(folder), tmp_path)
    assert len(files) > 30
    blanked, findings = _same_either_way(files, tmp_path, monkeypatch, tmp_path / "blanked.log")
    assert blanked > 20 and findings > 20


@pytest.mark.slow
def test_the_corpus_loop_files_read_the_same_in_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = corpus_loop_files()
    blanked, findings = _same_either_way(files, Path(os.path.commonpath(files)), monkeypatch, tmp_path / "blanked.log")
    assert blanked >= 10 and findings >= 30


def test_a_large_file_is_screened_into_its_kept_text() -> None:
    helpers = "".join(f"\n\ndef _format_row_{n}(row):\n    return ' | '.join(map(str, row))\n" for n in range(1100))
    source = (UNRELATED + helpers).encode()
    assert len(source) >= engine.KEPT_BLOCKS_FROM_BYTES
    screened = engine.screen("big.py", source)
    assert isinstance(screened, engine.Screened)
    assert screened.original == source.decode()
    assert screened.text.splitlines()[8:14] == UNRELATED.splitlines()[8:14]
    assert "_format_row_" not in screened.text and len(split_lines(screened.text)) == len(split_lines(source.decode()))
    whole = sum(1 for _ in ast.walk(ast.parse(source))) * engine.PARSE_MEMORY_PER_NODE
    assert screened.memory is not None and screened.memory < whole / 10  # the estimate follows the kept text
    loop = b"\n\nfor i, b in enumerate(loader):\n    opt.zero_grad()\n    b.backward()\n    if (i + 1) % 4 == 0:\n" \
        b"        opt.step()\n"
    big = engine.check_source("big.py", source + loop, suggest=True)
    small = engine.check_source("small.py", UNRELATED.encode() + loop, suggest=True)
    assert sorted(f.code for f in big.findings) == sorted(f.code for f in small.findings) == ["ACC001", "ACC103"]
    (fix,) = big.fixes.values()  # ACC001's, carried over to the whole text
    (same,) = small.fixes.values()
    assert [edit.content for edit in fix.edits] == [edit.content for edit in same.edits]


def test_a_read_class_keeps_a_body() -> None:
    source = ("class Config:\n    def render_table(self):\n        pass\n\n    def render_rows(self):\n        pass\n\n"
              "def train(loader):\n    cfg = Config()\n    for b in loader:\n        b.backward()\n")
    assert read_lines(source) == [1, 2, 3, 8, 9, 10, 11]  # its first method stands in for the body
    ast.parse(kept(source))
