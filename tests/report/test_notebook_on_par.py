"""Notebooks on par with ``.py`` files (issue 34): the CI formats point at the ``.ipynb`` file's own
line and column (GitHub annotates the file as it is), SARIF names the cell, and ``--fix`` and
``--add-noqa`` edit the cell's source, leaving outputs, metadata, magics and the JSON's layout alone."""

from __future__ import annotations

import json
import os
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from click.testing import CliRunner

from accumlint.cli.app import main
from accumlint.pipeline.notebook import RawPlaces, check_notebook, notebook_source, rebuild
from tests.report.test_output_formats import _sarif_validator

SETUP = "import torch\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nassert len(loader) % 4 == 0"
#: the flagged line holds a tab, quotes, a non-ASCII letter and an emoji before the call: each is
#: written differently in the JSON, so the file's column is not the cell's
LOOP = (
    "%%time\n"
    "for i, (x, y) in enumerate(loader):\n"
    '    print("naïve\\t\\"q\\" 🙂", i); optimizer.zero_grad()\n'
    "    (model(x).mean() / 4).backward()\n"
    "    if (i + 1) % 4 == 0:\n"
    "        optimizer.step()"
)
PLAIN_LOOP = LOOP.replace('print("naïve\\t\\"q\\" 🙂", i); ', "")
CALL = "optimizer.zero_grad()"
STREAM = {"name": "stdout", "output_type": "stream", "text": ["CPU times: user 1.2 s\n", "Wall time: 1.3 s\n"]}
PLOT = {"data": {"image/png": "iVBORw0KGgoAAAANSUhEUg==", "text/plain": ["<Figure size 640x480 with 1 Axes>"]},
        "metadata": {"needs_background": "light"}, "output_type": "display_data"}


def jupyter(*cells: tuple[str, str, list], ensure_ascii: bool = False, listed: bool = True) -> bytes:
    """A notebook as Jupyter saves it: one-space indent, sorted keys, a final newline, ``source``
    as a list of lines (``listed``; else one string); each cell ``(kind, source, outputs)``."""
    built = []
    for number, (kind, source, outputs) in enumerate(cells, start=1):
        cell: dict = {"cell_type": kind, "id": f"cell-{number}", "metadata": {"tags": ["demo"]},
                      "source": source.splitlines(keepends=True) if listed else source}
        if kind == "code":
            cell |= {"execution_count": number, "outputs": outputs}
        built.append(cell)
    document = {"cells": built, "metadata": {"kernelspec": {"display_name": "Python 3", "name": "python3"},
                                             "language_info": {"name": "python"}},
                "nbformat": 4, "nbformat_minor": 5}
    return (json.dumps(document, indent=1, sort_keys=True, ensure_ascii=ensure_ascii) + "\n").encode()


def training(loop: str = LOOP, **options: bool) -> bytes:
    """Markdown, an install cell of magics, the setup, a markdown heading, the loop (``%%time``,
    with its outputs) and a last cell: the finding is on line 3 of cell 5."""
    return jupyter(
        ("markdown", "# Accumulation\n\nFour microbatches per update.", []),
        ("code", "!pip install -q torch\n%matplotlib inline\nimport torch", [STREAM]),
        ("code", SETUP, []),
        ("markdown", "## Training", []),
        ("code", loop, [STREAM, PLOT]),
        ("code", "files = !ls\nprint(files)", []),
        **options,
    )


def written_at(data: bytes, needle: str) -> tuple[int, int]:
    """Where ``needle`` is written in the file: its 1-based line and column (code points)."""
    for row, line in enumerate(data.decode("utf-8-sig").split("\n"), start=1):
        if needle in line:
            return row, line.index(needle) + 1
    raise AssertionError(f"{needle!r} is not in the file")


def check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["check", "--no-cache", *args])
    return result.exit_code, result.output


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.ipynb").write_bytes(training())
    return tmp_path


# --- positions ----------------------------------------------------------------------------


def test_the_raw_place_is_where_the_line_is_written() -> None:
    data = training()
    row, column = written_at(data, CALL)
    raw_line = data.decode().split("\n")[row - 1]
    # the JSON line is the source line, escaped: what GitHub shows at that line
    assert raw_line == '    "    print(\\"naïve\\\\t\\\\\\"q\\\\\\" 🙂\\", i); optimizer.zero_grad()\\n",'
    [finding] = check_notebook("train.ipynb", data).findings
    assert (finding.cell, finding.line, finding.column) == (5, 3, 33)
    assert finding.raw == (row, column, row, column + len(CALL))
    # 12 more than in the cell: the JSON's indent and quote (5), and the escapes of the two quotes,
    # the two backslashed quotes and the backslash of \t (7)
    assert column == 33 + 12 == 45


@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_ascii_escaped_notebooks_count_an_escape_as_one_character(ensure_ascii: bool) -> None:
    data = training(ensure_ascii=ensure_ascii)
    [finding] = check_notebook("train.ipynb", data).findings
    assert finding.raw[:2] == written_at(data, CALL)
    if ensure_ascii:  # "ï" is \u00ef (6 characters), the emoji a surrogate pair \ud83d\ude42 (12)
        assert finding.raw[1] == 45 + 5 + 11


def test_a_source_written_as_one_string_is_placed_on_its_line() -> None:
    data = training(listed=False)
    [finding] = check_notebook("train.ipynb", data).findings
    row, column = written_at(data, CALL)
    assert (finding.cell, finding.line) == (5, 3)
    assert finding.raw == (row, column, row, column + len(CALL))
    assert data.decode().split("\n")[row - 1].lstrip().startswith('"source": "%%time\\nfor i')


def test_lines_spread_over_strings_and_crlf_line_ends() -> None:
    """A writer that is not Jupyter: two lines in one string, a line cut over two, CRLF ends."""
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
            "source": ["x = 1\r\ny", " = 2\r\n", "z = 3"]}
    data = json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=2).encode()
    places = RawPlaces(data)
    lines = data.decode().split("\n")
    row = next(i for i, line in enumerate(lines, start=1) if "x = 1" in line)
    assert places.place(1, 1, 1) == (row, lines[row - 1].index("x = 1") + 1)
    assert places.place(1, 2, 1) == (row, lines[row - 1].index("y") + 1)
    assert places.place(1, 2, 2) == (row + 1, lines[row].index(" = 2") + 1)  # the second string
    assert places.place(1, 3, 1) == (row + 2, lines[row + 1].index("z = 3") + 1)
    assert places.place(1, 1, 6) == (row, lines[row - 1].index("\\r\\n") + 1)  # the line's end: its newline


def _odd_notebook(rng: random.Random) -> bytes:
    """A notebook of random text as other writers save it: sources as lines, chunks or one string,
    escapes of every kind, any indentation, ASCII-escaped or not."""
    alphabet = ["a", "b", " ", '"', "\\", "\t", "é", "🙂", "\x01", "/", "\r", "\n", "\r\n", "\u2028", "%", "!"]
    cells = []
    for _ in range(rng.randint(1, 4)):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        source = rng.choice([text, text.splitlines(keepends=True), [text[i:i + 3] for i in range(0, len(text), 3)]])
        cells.append({"cell_type": rng.choice(["code", "code", "markdown"]), "metadata": {}, "source": source})
    document = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(document, indent=rng.choice([None, 1, 2]), ensure_ascii=rng.random() < 0.5).encode()


def test_every_character_is_placed_where_it_is_written_and_edits_stay_in_their_cell() -> None:
    from accumlint.pipeline.notebook import _characters, read_cells

    rng = random.Random(34)
    for _ in range(200):
        data = _odd_notebook(rng)
        places, source = RawPlaces(data), notebook_source(data)
        starts = [0, *(m.end() for m in re.finditer("\n", places.text))]
        written = [line for cell in source.cells for line in cell.lines]
        for cell in source.cells:
            for number, line in enumerate(cell.lines, start=1):
                for column, char in enumerate(line, start=1):
                    row, at = places.place(cell.number, number, column)
                    offset = starts[row - 1] + at - 1  # the JSON text there decodes to the character
                    assert next(_characters(places.text, offset - 1, len(places.text)))[0] == char
        assert rebuild(data, source, source.text) == data
        for index, line in enumerate(source.checked_lines()):
            if line != written[index]:
                continue  # a neutralized line: not edited
            edited = [*source.checked_lines()[:index], line + "  # e", *source.checked_lines()[index + 1:]]
            new = rebuild(data, source, "\n".join(edited) + "\n")
            assert new is not None
            cells = read_cells(new)
            assert [len(c.lines) for c in cells] == [len(c.lines) for c in source.cells]
            assert [x for c in cells for x in c.lines] == [*written[:index], written[index] + "  # e",
                                                           *written[index + 1:]]


def test_a_helper_in_an_earlier_cell_is_related_at_its_raw_place() -> None:
    helper = "def reset(opt):\n    opt.zero_grad()"
    loop = PLAIN_LOOP.replace("optimizer.zero_grad()", "reset(optimizer)")
    data = jupyter(("code", SETUP, []), ("markdown", "A helper.", []), ("code", helper, []), ("code", loop, []))
    [finding] = check_notebook("train.ipynb", data).findings
    assert (finding.cell, finding.line, finding.raw[:2]) == (4, 3, written_at(data, "reset(optimizer)"))
    # not the line of the cells' joined text (5): the .ipynb's own, as a related .py file's would be
    assert finding.related == (("train.ipynb", *written_at(data, "opt.zero_grad()")),)


def test_every_ci_format_points_at_the_raw_line(project: Path) -> None:
    data = (project / "train.ipynb").read_bytes()
    row, column = written_at(data, CALL)
    end = column + len(CALL)

    status, out = check("--output-format", "github", "train.ipynb")
    assert status == 1
    assert out.startswith(f"::error file=train.ipynb,line={row},col={column},endLine={row},endColumn={end},"
                          "title=ACC001 zero-grad-inside-group (cell 5%2C line 3)::")

    [issue] = json.loads(check("--output-format", "gitlab", "train.ipynb")[1])
    assert issue["location"] == {"path": "train.ipynb", "lines": {"begin": row, "end": row}}

    [diagnostic] = json.loads(check("--output-format", "rdjson", "train.ipynb")[1])["diagnostics"]
    raw_line = data.decode().split("\n")[row - 1]
    byte_column = len(raw_line[:column - 1].encode()) + 1  # reviewdog counts bytes: ï and the emoji are 2 and 4
    assert byte_column == column + 1 + 3
    assert diagnostic["location"]["range"] == {"start": {"line": row, "column": byte_column},
                                               "end": {"line": row, "column": byte_column + len(CALL)}}

    case = ET.fromstring(check("--output-format", "junit", "train.ipynb")[1]).find("testsuite/testcase")
    assert case is not None and (case.get("file"), case.get("line")) == ("train.ipynb", str(row))
    assert case.findtext("failure", "").startswith("train.ipynb:cell 5:3:33: ACC001")

    # the formats for people, and ruff's JSON, keep the cell and the line in it
    assert check("--output-format", "concise", "train.ipynb")[1].startswith("train.ipynb:cell 5:3:33: ACC001")
    [item] = json.loads(check("--output-format", "json", "train.ipynb")[1])
    assert (item["cell"], item["location"]) == (5, {"row": 3, "column": 33})


def test_sarif_names_the_cell_and_still_validates(project: Path) -> None:
    data = (project / "train.ipynb").read_bytes()
    row, column = written_at(data, CALL)
    log = json.loads(check("--output-format", "sarif", "train.ipynb")[1])
    assert [f"{list(e.absolute_path)}: {e.message}" for e in _sarif_validator().iter_errors(log)] == []
    [result] = log["runs"][0]["results"]
    [location] = result["locations"]
    assert location["physicalLocation"]["region"] == {
        "startLine": row, "startColumn": column, "endLine": row, "endColumn": column + len(CALL)}
    assert location["logicalLocations"] == [
        {"name": "cell 5", "fullyQualifiedName": "train.ipynb:cell 5", "kind": "cell"}]
    assert result["properties"] == {"cell": 5, "cellLine": 3, "cellColumn": 33}


def test_the_cache_keeps_the_raw_place() -> None:
    from accumlint.run.cache import _decode, _encode

    [finding] = check_notebook("train.ipynb", training()).findings
    line, column = written_at(training(), CALL)
    row = json.loads(json.dumps(_encode(finding)))
    assert _decode("train.ipynb", row, 10**6).raw == finding.raw == (line, column, line, column + len(CALL))
    assert _decode("train.ipynb", row[:12], 10**6).raw == ()  # a row written before it was kept
    with pytest.raises(ValueError):
        _decode("train.ipynb", [*row[:12], [1, 2]], 10**6)


def test_the_raw_place_survives_a_warm_run(project: Path) -> None:
    first = CliRunner().invoke(main, ["check", "--output-format", "github", "train.ipynb"]).output
    assert (project / ".accumlint_cache").is_dir()
    again = CliRunner().invoke(main, ["check", "--output-format", "github", "train.ipynb"]).output
    row, column = written_at((project / "train.ipynb").read_bytes(), CALL)
    assert again == first and f"line={row},col={column}," in again


# --- edits --------------------------------------------------------------------------------


def _without_sources(data: bytes, *numbers: int) -> dict:
    """The notebook's JSON with the ``source`` of the cells ``numbers`` (1-based) taken out."""
    document = json.loads(data)
    for number in numbers:
        del document["cells"][number - 1]["source"]
    return document


def _changed_lines(before: bytes, after: bytes) -> list[tuple[str, str]]:
    old, new = before.decode().split("\n"), after.decode().split("\n")
    assert len(old) == len(new)
    return [(a, b) for a, b in zip(old, new, strict=True) if a != b]


def test_add_noqa_writes_the_directive_into_the_cell(project: Path) -> None:
    before = (project / "train.ipynb").read_bytes()
    result = CliRunner().invoke(main, ["check", "--no-cache", "--add-noqa=adopted", "train.ipynb"])
    assert result.exit_code == 0, result.output
    assert "Added 1 noqa directive." in result.stderr
    after = (project / "train.ipynb").read_bytes()
    # one JSON line changed: the finding's, in its own layout; everything else is byte for byte
    assert _changed_lines(before, after) == [(
        '    "    print(\\"naïve\\\\t\\\\\\"q\\\\\\" 🙂\\", i); optimizer.zero_grad()\\n",',
        '    "    print(\\"naïve\\\\t\\\\\\"q\\\\\\" 🙂\\", i); optimizer.zero_grad()  # noqa: ACC001 adopted\\n",',
    )]
    assert check("train.ipynb")[0] == 0
    again = CliRunner().invoke(main, ["check", "--no-cache", "--add-noqa", "train.ipynb"])
    assert "Added 0 noqa directives." in again.stderr
    assert (project / "train.ipynb").read_bytes() == after


def test_fix_rewrites_only_the_fixed_cell(project: Path) -> None:
    (project / "train.ipynb").write_bytes(training(PLAIN_LOOP))
    before = (project / "train.ipynb").read_bytes()
    status, out = check("--fix", "--output-format", "concise", "train.ipynb")
    assert (status, out) == (0, "Found 1 finding (1 fixed, 0 remaining).\n")
    after = (project / "train.ipynb").read_bytes()
    cells = json.loads(after)["cells"]
    assert cells[4]["source"] == [
        "%%time\n",  # the magic is written back as it was
        "for i, (x, y) in enumerate(loader):\n",
        "    (model(x).mean() / 4).backward()\n",
        "    if (i + 1) % 4 == 0:\n",
        "        optimizer.step()\n",
        "        optimizer.zero_grad()",
    ]
    # outputs, metadata, ids and every other cell (magics included) are as they were
    assert _without_sources(after, 5) == _without_sources(before, 5)
    assert [c["source"] for c in cells[:4] + cells[5:]] == [
        c["source"] for c in (json.loads(before)["cells"][:4] + json.loads(before)["cells"][5:])]
    # and so is the layout: Jupyter's indent, key order and final newline
    assert after == (json.dumps(json.loads(after), indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode()
    assert check("--fix", "train.ipynb")[0] == 0
    assert (project / "train.ipynb").read_bytes() == after  # a second run changes nothing


def test_fixes_are_offered_as_edits_of_the_cell(project: Path) -> None:
    """``[*]`` and ruff's JSON ``fix`` for a notebook: edits of the cell's text (magics included),
    which give the cell ``--fix`` writes; SARIF and rdjson offer none (an edit of a cell is not an
    edit of the JSON's lines). Also from a cache written by a run that computed no fixes."""
    from accumlint.files.text_edits import TextEdit, apply_edits

    (project / "train.ipynb").write_bytes(training(PLAIN_LOOP))
    assert CliRunner().invoke(main, ["check", "--output-format", "github", "train.ipynb"]).exit_code == 1
    out = CliRunner().invoke(main, ["check", "--output-format", "concise", "train.ipynb"]).output
    assert out.startswith("train.ipynb:cell 5:3:5: ACC001 [*] ") and "[*] 1 fixable with `--fix`." in out
    [item] = json.loads(check("--output-format", "json", "train.ipynb")[1])
    edits = [TextEdit((e["location"]["row"], e["location"]["column"]),
                      (e["end_location"]["row"], e["end_location"]["column"]), e["content"])
             for e in item["fix"]["edits"]]
    assert (item["cell"], item["fix"]["applicability"]) == (5, "safe")
    fixed = apply_edits(PLAIN_LOOP, edits)
    assert "results" in json.loads(check("--output-format", "sarif", "train.ipynb")[1])["runs"][0]
    assert '"fixes"' not in check("--output-format", "sarif", "train.ipynb")[1]
    assert "suggestions" not in check("--output-format", "rdjson", "train.ipynb")[1]
    check("--fix", "train.ipynb")
    assert "".join(json.loads((project / "train.ipynb").read_bytes())["cells"][4]["source"]) == fixed


def test_a_notebook_fix_is_proposed_by_a_report_and_verified_only_on_demand(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report offers a notebook's fixes as their rules propose them: its check checks no fixed
    cell again. ``--show-fixes`` and ``--fix`` verify them in the cells' text, and ``--fix`` says,
    at the finding's cell, why it leaves one out (issue 33: fixes on demand)."""
    from accumlint.pipeline import engine
    from accumlint.run import suggested_fixes
    from tests.report.test_fixes import UNVERIFIED_FIX

    (project / "train.ipynb").write_bytes(training(PLAIN_LOOP))
    trainer = jupyter(("markdown", "# Trainer", []), ("code", "import torch", []),
                      ("code", UNVERIFIED_FIX.decode(), []))
    (project / "trainer.ipynb").write_bytes(trainer)
    checks: list[str] = []
    check_text = engine._check_text
    monkeypatch.setattr(engine, "_check_text", lambda *args: checks.append(args[0]) or check_text(*args))
    proposed = check_notebook("trainer.ipynb", trainer, suggest=True).fixes or {}
    assert [(f.code, f.cell, f.line) for f in proposed] == [("ACC006", 3, 6)] and checks == ["trainer.ipynb"]
    verified: list[str] = []
    verify = suggested_fixes.verify
    monkeypatch.setattr(suggested_fixes, "verify",
                        lambda path, *args, **kwargs: verified.append(path) or verify(path, *args, **kwargs))
    out = check("--output-format", "concise", "train.ipynb", "trainer.ipynb")[1]
    assert "trainer.ipynb:cell 3:6:12: ACC006 [*] " in out and "[*] 2 fixable with `--fix`." in out
    [_, item] = json.loads(check("--output-format", "json", "train.ipynb", "trainer.ipynb")[1])
    assert (item["cell"], item["fix"]["applicability"]) == (3, "safe") and verified == []
    # --show-fixes: the ACC001 fix passes in its cell, the ACC006 one does not
    out = check("--show-fixes", "--output-format", "concise", "train.ipynb", "trainer.ipynb")[1]
    assert "train.ipynb:cell 5:3:5: ACC001 [*] " in out and "trainer.ipynb:cell 3:6:12: ACC006 `" in out
    assert "[*] 1 fixable with `--fix`." in out and sorted(verified) == ["train.ipynb", "trainer.ipynb"]
    result = CliRunner().invoke(main, ["check", "--no-cache", "--fix", "--output-format", "concise", "trainer.ipynb"])
    assert result.stderr == ("note: trainer.ipynb:cell 3:6:12: ACC006 fix not applied: "
                             "the fixed file would not have fewer ACC006 findings\n")
    assert (project / "trainer.ipynb").read_bytes() == trainer


def test_fix_leaves_the_directives_of_a_notebook_alone(project: Path) -> None:
    """A notebook's check reports no unused code (ACC990), so --fix takes none out of its cells."""
    loop = PLAIN_LOOP.replace("optimizer.zero_grad()", "optimizer.zero_grad()  # noqa: ACC001, ACC304")
    (project / "train.ipynb").write_bytes(training(loop))
    before = (project / "train.ipynb").read_bytes()
    assert check("--fix", "--extend-select", "ACC990", "train.ipynb")[0] == 0
    assert (project / "train.ipynb").read_bytes() == before


def test_fix_of_a_notebook_through_stdin(project: Path) -> None:
    data = training(PLAIN_LOOP)
    result = CliRunner().invoke(main, ["check", "--fix", "-", "--stdin-filename", "train.ipynb"], input=data)
    fixed = json.loads(result.stdout_bytes)
    assert fixed["cells"][4]["source"][-1] == "        optimizer.zero_grad()"
    assert _without_sources(result.stdout_bytes, 5) == _without_sources(data, 5)


def test_fix_and_add_noqa_refuse_a_read_only_notebook(project: Path) -> None:
    (project / "train.ipynb").write_bytes(training(PLAIN_LOOP))
    os.chmod(project / "train.ipynb", 0o444)
    before = (project / "train.ipynb").read_bytes()
    result = CliRunner().invoke(main, ["check", "--no-cache", "--fix", "train.ipynb"])
    assert "error: train.ipynb: not fixed: read-only" in result.stderr
    result = CliRunner().invoke(main, ["check", "--no-cache", "--add-noqa", "train.ipynb"])
    assert "error: train.ipynb: noqa not added: read-only" in result.stderr
    assert (project / "train.ipynb").read_bytes() == before


def test_rebuild_puts_edits_in_their_cells_or_refuses() -> None:
    data = jupyter(("code", "%time setup()\nfor b in data:\n    step(b)", []), ("markdown", "text", []),
                   ("code", "x = 1\ny = 2", []))
    source = notebook_source(data)
    assert source.text == "pass\nfor b in data:\n    step(b)\nx = 1\ny = 2\n"

    def cells(text: str) -> list[list[str]] | None:
        new = rebuild(data, source, text)
        return None if new is None else [c["source"] for c in json.loads(new)["cells"] if c["cell_type"] == "code"]

    assert rebuild(data, source, source.text) == data
    # an indented line after a cell's last line continues its block; a statement goes before the next cell's
    assert cells("pass\nfor b in data:\n    step(b)\n    log(b)\nx = 1\ny = 2\n") == [
        ["%time setup()\n", "for b in data:\n", "    step(b)\n", "    log(b)"], ["x = 1\n", "y = 2"]]
    assert cells("pass\nfor b in data:\n    step(b)\nw = 0\nx = 1\ny = 2\n") == [
        ["%time setup()\n", "for b in data:\n", "    step(b)"], ["w = 0\n", "x = 1\n", "y = 2"]]
    assert cells("pass\nfor b in data:\n    step(b)\n") == [
        ["%time setup()\n", "for b in data:\n", "    step(b)"], []]
    assert cells("setup()\nfor b in data:\n    step(b)\nx = 1\ny = 2\n") is None  # the magic's line
    assert cells("pass\nfor b in data:\n    step(b); x = 1\ny = 2\n") is None  # two cells' lines in one
    # a line repeated in the next cell: the edit stays in its own cell (a diff could match the other)
    twice = jupyter(("code", "model.train()", []), ("code", "model.train()", []))
    new = rebuild(twice, notebook_source(twice), "model.train()  # e\nmodel.train()\n")
    assert new is not None
    assert [c["source"] for c in json.loads(new)["cells"]] == [["model.train()  # e"], ["model.train()"]]


def test_rebuild_keeps_crlf_layout_and_bom() -> None:
    data = b"\xef\xbb\xbf" + training(PLAIN_LOOP).replace(b"\n", b"\r\n")
    source = notebook_source(data)
    new = rebuild(data, source, source.text.replace("        optimizer.step()\n", "        optimizer.step()  # s\n"))
    assert new is not None and new.startswith(b"\xef\xbb\xbf{\r\n")
    assert re.findall(rb"[^\r]\n", new) == []  # every line still ends in CRLF
    assert b'    "        optimizer.step()  # s"\r\n   ]\r\n  },' in new


def test_fix_leaves_a_notebook_whose_code_is_too_large_to_parse() -> None:
    from accumlint.pipeline import engine
    from accumlint.run.apply_fixes import fix_source

    data = training(PLAIN_LOOP + "\nx = 1  # padding padding" * 200_000)  # 5 MB of code: more than 4 MiB
    result = fix_source("big.ipynb", data, engine.rules_for(frozenset({"ACC001"})), codes={"ACC001"})
    assert (result.fixed, result.applied) == (data, {})
