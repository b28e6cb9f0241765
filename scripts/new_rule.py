"""Scaffold a new rule: its spec entry, its check, its catalogue folder and (optionally) its runtime check.

    python scripts/new_rule.py ACC307 grad-rescale-inside-group --principle P6 --severity error \
        --summary "gradients rescaled every microbatch" --module gradient_ops [--runtime events]

Writes, and touches nothing else:
- the rule's entry in ``accumlint/spec/__init__.py`` (in code order; meaning and fix to be worded);
- a class in ``accumlint/checks/<module>.py`` (created if new; ``checks/<module>/__init__.py`` for a
  family that is a package) whose ``check`` yields nothing yet;
- ``rules/<CODE>-<name>/`` with a page skeleton, a bad/good pair of runnable scripts that
  mark the expected finding (``# expect: CODE``) and declare A (``ACCUMULATION_STEPS``), and
  ``cases.toml`` with one invalid and one valid snippet to start from;
- with ``--runtime NEEDS``: the spec's runtime entry and a check function in
  ``runtime_guard/checks/<module>.py`` (created if new), called from ``evaluate``;
then regenerates the README's rule table. Until the check is written, the catalogue test fails
on the bad script: that is the rule's first test. CONTRIBUTING.md explains each step.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = re.compile(r"^ACC\d{3}$")
NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")
SEVERITIES = ("error", "warning", "info")


def class_name(name: str) -> str:
    """``grad-rescale-inside-group`` -> ``GradRescaleInsideGroup``."""
    return "".join(part.capitalize() for part in name.split("-"))


#: ruff's line length for the project (pyproject.toml, [tool.ruff] line-length)
LINE = 120


def docstring(text: str, indent: str) -> str:
    """``text`` as a one-line docstring at ``indent``, wrapped onto more lines where it would pass
    :data:`LINE` (a long ``--summary`` must not leave an E501 for the contributor to mend)."""
    one = f'{indent}"""{text}"""'
    if len(one) <= LINE:
        return one
    lines = textwrap.wrap(text, LINE - len(indent) - 6)  # room for the quotes at both ends of one line
    return f'{indent}"""' + f"\n{indent}".join(lines) + '"""'


def string_argument(name: str, text: str, indent: str) -> str:
    """``name="text",`` at ``indent``, split into adjacent literals in parentheses past :data:`LINE`."""
    one = f'{indent}{name}="{text}",'
    if len(one) <= LINE:
        return one
    inner = indent + " " * (len(name) + 2)  # under the first literal, after `name=(`
    parts = textwrap.wrap(text, LINE - len(inner) - 4, drop_whitespace=False)  # 2 quotes and `),`
    return f"{indent}{name}=(" + f"\n{inner}".join(f'"{part}"' for part in parts) + "),"


def sentence(summary: str) -> str:
    """``summary`` opening a sentence: capitalised unless its first word is code
    (``optimizer.step() twice ...`` stays as written)."""
    first = summary.split(" ", 1)[0]
    return summary if any(c in first for c in "._()`[") else summary[:1].upper() + summary[1:]


def spec_entry(args: argparse.Namespace) -> str:
    runtime = ""
    if args.runtime:
        runtime = (f'        runtime=Runtime(needs="{args.runtime}", evidence="TODO: what in the event trace shows '
                   'it"),\n')
    default = "" if args.default_enabled else "        default_enabled=False,\n"
    return (
        "    RuleSpec(\n"
        f'        "{args.code}",\n        "{args.name}",\n        Severity.{args.severity.upper()},\n'
        f'        "{args.principle}",\n'
        f'        implemented_by=("{args.module}", "{class_name(args.name)}"),\n'
        f'{string_argument("summary", args.summary, " " * 8)}\n'
        '        meaning="TODO: what a finding does to training",\n'
        '        fix="TODO: the general repair, in the words both engines print",\n'
        f"{default}{runtime}"
        "    ),\n"
    )


def insert_spec(text: str, code: str, entry: str) -> str:
    """``spec.py``'s text with ``entry`` inserted into ``RULES`` before the first higher code."""
    start = text.index("RULES: tuple[RuleSpec, ...] = (\n") + len("RULES: tuple[RuleSpec, ...] = (\n")
    end = text.index("\n)\n", start) + 1
    if f'"{code}",' in text[start:end]:
        raise SystemExit(f"{code} is already in accumlint/spec/__init__.py")
    for match in re.finditer(r'^    RuleSpec\(\n        "(ACC\d{3})",', text[start:end], re.M):
        if match.group(1) > code:
            at = start + match.start()
            return text[:at] + entry + text[at:]
    return text[:end] + entry + text[end:]


CHECK = '''

class {cls}(Rule):
{doc}

    code = "{code}"
    # gate: where the rule can fire. The default (accumlint.checks.gate.LOOP) fits a rule that
    # reads microbatch loops; declare `gate = RuleGate(markers=..., facts=...)` otherwise (CONTRIBUTING.md).

    def check(self, model: FileModel) -> Iterator[Hit]:
        # Read the group model only (model.loops, group.cadence(event), ...): see CONTRIBUTING.md.
        return iter(())
'''

MODULE_HEAD = '''{doc}

from __future__ import annotations

from collections.abc import Iterator

from accumlint.checks.base import Hit, Rule
from accumlint.model import FileModel
'''

PAGE = """# {code} {name}

{severity} · {principle}

> {line}

## What it does

{summary}.

## Why is this bad

TODO: what it does to training, with numbers from `bad_{slug}.py`.

## Example

```python
TODO: the smallest loop that shows it
```

## Use instead

```python
TODO
```

## Framework notes and exemptions

- TODO: frameworks whose contract changes the verdict (see shared/docs/framework-contracts.md).

## Runtime counterpart

{runtime}
"""

RUNTIME_PAGE = ("TODO: what the guard observes for it (`runtime_guard/checks/{module}.py`, needs: {needs}), and "
                "what the card says where it cannot observe it.")
NO_RUNTIME_PAGE = "None yet: TODO: why the guard cannot observe it at run time."

SCRIPT = '''"""{code} {kind}: TODO: one line on what this loop does{what}.

Plain PyTorch, runs on CPU.
"""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ACCUMULATION_STEPS = 4  # A: microbatches per optimizer update
MICROBATCH_SIZE = 8
GROUPS_PER_EPOCH = 3


def main():
    torch.manual_seed(0)
    inputs = torch.randn(GROUPS_PER_EPOCH * ACCUMULATION_STEPS * MICROBATCH_SIZE, 16)
    loader = DataLoader(TensorDataset(inputs, inputs.sum(dim=1, keepdim=True)), batch_size=MICROBATCH_SIZE)
    model = nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for i, (x, y) in enumerate(loader):
        loss = nn.functional.mse_loss(model(x), y) / ACCUMULATION_STEPS
        loss.backward()
        if (i + 1) % ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad(){mark}


if __name__ == "__main__":
    main()
'''

CASES = """# Snippet cases of this rule (tests/catalogue/test_rule_folders.py): invalid ones must report exactly
# their findings (code, line; line 1 is the snippet's first line), valid ones nothing, under
# the default rule set or, with select = "ACC305,ACC902" (as --select; "ALL": every rule),
# under those codes.

[[invalid]]
name = "TODO: the shape this snippet shows"
findings = [["{code}", 5]]
code = '''
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / A
    loss.backward()
    if (i + 1) % A == 0:
        TODO_the_faulty_line()
        optimizer.step()
        optimizer.zero_grad()
'''

[[valid]]
name = "TODO: the correct twin"
code = '''
for i, (x, y) in enumerate(loader):
    loss = loss_fn(model(x), y) / A
    loss.backward()
    if (i + 1) % A == 0:
        optimizer.step()
        optimizer.zero_grad()
'''
"""

RUNTIME = '''

def {slug}(rec: RunRecord) -> Iterator[RuntimeFinding]:
{doc}
    return iter(())
'''
RUNTIME_MODULE = '''{doc}

from __future__ import annotations

from collections.abc import Iterator

from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding
'''


def write_check(args: argparse.Namespace) -> Path:
    path = ROOT / "accumlint" / "checks" / f"{args.module}.py"
    if path.with_suffix("").is_dir():  # a family whose own analyses live beside its rules
        path = path.with_suffix("") / "__init__.py"
    cls = class_name(args.name)
    if path.exists():
        text = path.read_text(encoding="utf-8")
        if f"class {cls}(" in text:
            raise SystemExit(f"{path} already defines {cls}")
        for needed in ("from collections.abc import Iterator", "from accumlint.checks.base import",
                       "FileModel"):
            if needed not in text:
                raise SystemExit(f"{path} lacks `{needed}`: add the import, then run again")
    else:
        family = f"ACC{args.code[3]}xx"
        text = MODULE_HEAD.format(doc=docstring(f"{family}: {args.summary} ({args.principle}).", ""))
    check = CHECK.format(cls=cls, code=args.code, doc=docstring(f"{args.code}: {args.summary}.", " " * 4))
    path.write_text(text.rstrip("\n") + "\n" + check, encoding="utf-8")
    return path


def write_folder(args: argparse.Namespace) -> Path:
    folder = ROOT / "rules" / f"{args.code}-{args.name}"
    if folder.exists():
        raise SystemExit(f"{folder} exists")
    folder.mkdir(parents=True)
    slug = args.name.replace("-", "_")
    (folder / "README.md").write_text(
        PAGE.format(code=args.code, name=args.name, severity=args.severity, principle=args.principle,
                    line=args.summary, summary=sentence(args.summary), slug=slug,
                    runtime=RUNTIME_PAGE.format(module=args.module, needs=args.runtime) if args.runtime
                    else NO_RUNTIME_PAGE), encoding="utf-8")
    (folder / f"bad_{slug}.py").write_text(
        SCRIPT.format(code=args.code, kind="bad", what=" wrong", mark=f"  # expect: {args.code}  TODO: move to the "
                      "faulty line"), encoding="utf-8")
    (folder / "cases.toml").write_text(CASES.format(code=args.code), encoding="utf-8")
    (folder / f"good_{slug}.py").write_text(SCRIPT.format(code=args.code, kind="good", what=" right", mark=""),
                                            encoding="utf-8")
    return folder


def write_runtime(args: argparse.Namespace) -> Path:
    """The check function in ``runtime_guard/checks/<module>.py`` (the linter's family name; created
    if new) and its call in ``evaluate`` (``runtime_guard/checks/__init__.py``)."""
    package = ROOT / "runtime_guard" / "checks"
    init = package / "__init__.py"
    text = init.read_text(encoding="utf-8")
    slug = args.name.replace("-", "_")
    call = "    findings += list(normalization(rec))\n"
    anchor = "from runtime_guard.inference import ("
    if call not in text or anchor not in text:
        raise SystemExit("runtime_guard/checks/__init__.py: evaluate() has changed; add the call by hand")
    text = text.replace(call, call + f"    findings += list({slug}(rec))\n")
    text = text.replace(anchor, f"from runtime_guard.checks.{args.module} import {slug}\n{anchor}")
    init.write_text(text, encoding="utf-8")
    path = package / f"{args.module}.py"
    module = args.module.replace("_", " ").capitalize()
    body = path.read_text(encoding="utf-8") if path.exists() else RUNTIME_MODULE.format(
        doc=docstring(f"{module} at run time ({args.code}: {args.summary}).", ""))
    doc = docstring(f"{args.code}: {args.summary} (the spec's runtime evidence).", " " * 4)
    path.write_text(body + RUNTIME.format(slug=slug, doc=doc), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("code", help="ACC + three digits; the hundreds digit is the family")
    parser.add_argument("name", help="kebab-case, e.g. grad-rescale-inside-group")
    parser.add_argument("--principle", required=True, help="P1-P12 of the accumulation guide, or - for a fact")
    parser.add_argument("--severity", choices=SEVERITIES, default="error")
    parser.add_argument("--summary", required=True, help="one line for the rule table")
    parser.add_argument("--module", required=True, help="the module under accumlint/checks/ (new or existing)")
    parser.add_argument("--off", dest="default_enabled", action="store_false", help="off by default")
    sys.path.insert(0, str(ROOT))
    from accumlint.spec import FAMILIES, PRINCIPLES, RULES, RUNTIME_NEEDS

    homes: dict[int, set[str]] = {}  # the modules each family's rules live in today
    for rule in RULES:
        if rule.implemented_by is not None:
            homes.setdefault(rule.family, set()).add(rule.implemented_by[0])
    parser.epilog = "where each family's rules live (--module): " + "; ".join(
        f"ACC{family}xx {', '.join(sorted(modules))}" for family, modules in sorted(homes.items()))

    parser.add_argument("--runtime", choices=tuple(RUNTIME_NEEDS), metavar="NEEDS",
                        help="the guard observes it, given what it needs: " + "; ".join(
                            f"{need}: {meaning}" for need, meaning in RUNTIME_NEEDS.items()))
    args = parser.parse_args(argv)
    if not CODE.match(args.code) or not NAME.match(args.name) or not re.match(r"^[a-z_]+$", args.module):
        parser.error("CODE is ACC + 3 digits, NAME kebab-case, --module a module name")
    if '"' in args.summary:
        parser.error("--summary may not contain a double quote")
    if int(args.code[3]) not in FAMILIES or args.principle not in PRINCIPLES:
        parser.error(f"families: {sorted(FAMILIES)}; principles: {', '.join(PRINCIPLES)}")
    spec = ROOT / "accumlint" / "spec" / "__init__.py"
    spec.write_text(insert_spec(spec.read_text(encoding="utf-8"), args.code, spec_entry(args)), encoding="utf-8")
    written = [spec, write_check(args), write_folder(args)]
    if args.runtime:
        written += [write_runtime(args), ROOT / "runtime_guard" / "checks" / "__init__.py"]  # (its call)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "rule_table.py")], check=True, cwd=ROOT)
    sort_imports([path for path in written if path.suffix == ".py"])
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    print("regenerated the rule table in README.md; next: CONTRIBUTING.md, 'Add a rule'")
    print("the fast tier's count in README.md grows with the rule's cases: pytest --collect-only -q -m 'not slow' "
          "| tail -1")
    print(f"its tests (folder, scripts under both engines, refactorings, precision sets): pytest -q --rule {args.code}")
    print(f"only under the linter: pytest -q -m 'not slow' --rule {args.code}")
    print(f"its snapshot, once the check finds the bad script: ACCUMLINT_UPDATE_SNAPSHOTS=1 pytest -q "
          f'tests/catalogue/test_rule_folders.py -k "{args.code} and snapshot"')
    return 0


def sort_imports(paths: list[Path]) -> None:
    """Sort the imports the scaffold added to ``paths`` as ``ruff check`` wants them (ruff's isort
    rules, the project's settings), so that its output commits without hand clean-up."""
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--fix", "--select", "I", "--quiet",
                           *map(str, paths)], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"could not sort the imports (ruff, a dev dependency: pip install -e '.[dev]'): run "
              f"`ruff check --fix` on {', '.join(str(p.relative_to(ROOT)) for p in paths)}\n{done.stderr.strip()}",
              file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
