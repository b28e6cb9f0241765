"""The rule catalogue as the CLI sees it: rule metadata from the registry and rule pages.

A rule's page is ``README.md`` in the folder ``<CODE>-<name>/`` of the catalogue: the
installed wheel carries the repository's ``rules/`` as ``accumlint/_catalogue/``; in a
source checkout the ``rules/`` folder beside the package is used.
"""

from __future__ import annotations

from pathlib import Path

import accumlint
from accumlint import spec
from accumlint.noqa.noqa_report import UNUSED_NOQA_PAGE
from accumlint.spec import PARSE_ERROR_CODE, UNUSED_NOQA_CODE, RuleSpec

PARSE_ERROR_PAGE = """\
# ACC000 parse-error

**What it reports.** A file that accumlint could not check: it could not be read (the
reason from the operating system is in the message), its bytes could not be decoded
(PEP 263 coding line, UTF-8 BOM, default UTF-8), or it is not valid Python.

**Why it matters.** Nothing in that file was checked. The finding carries the position
of the problem; every other file of the run is still checked, and the exit status is 1.

**Fix.** Make the file valid Python as the interpreter that runs it would parse it, or
exclude it (`exclude` in `[tool.accumlint]`). Line `# noqa` comments do not suppress it;
`ignore = ["ACC000"]` does.
"""


RuleInfo = RuleSpec
"""What the CLI and the README table show about one code: its spec (``accumlint/spec/__init__.py``)."""


def rule_infos() -> list[RuleSpec]:
    """``ACC000``, ``ACC990`` and every registered rule, in code order."""
    return sorted((*spec.ENGINE_CODES, *spec.RULES), key=lambda info: info.code)


def rule_info(code: str) -> RuleInfo | None:
    """The info for ``code`` (case-insensitive), or ``None`` if no such rule exists."""
    wanted = code.strip().upper()
    return next((info for info in rule_infos() if info.code == wanted), None)


def catalogue_dirs() -> list[Path]:
    """Where rule folders are looked up: the wheel's ``_catalogue``, then the checkout's ``rules/``."""
    package = Path(accumlint.__file__).resolve().parent
    return [package / "_catalogue", package.parent / "rules"]


def rule_page(info: RuleInfo) -> str | None:
    """The text of the rule's ``README.md`` page, or ``None`` if no catalogue holds it."""
    for directory in catalogue_dirs():
        if not directory.is_dir():
            continue
        exact = directory / f"{info.code}-{info.name}" / "README.md"
        candidates = [exact, *sorted(directory.glob(f"{info.code}-*/README.md"))]
        for page in candidates:
            if page.is_file():
                return page.read_text(encoding="utf-8")
    if info.code == PARSE_ERROR_CODE:
        return PARSE_ERROR_PAGE
    if info.code == UNUSED_NOQA_CODE:
        return UNUSED_NOQA_PAGE
    return None


NOQA_HINT = """\
## Suppressing it

Where the code is meant to be this way: `# noqa: {code}` on the finding's first line, or
`# accumlint: noqa: {code}`, a directive that only accumlint reads. Beside ruff, `ruff check
--fix` with `RUF100` and `RUF102` deletes from a `# noqa` the `ACC` codes it does not know (the
whole comment when none is left): add `external = ["ACC"]` under `[tool.ruff.lint]` in ruff's configuration, or
use the `# accumlint: noqa` form (`noqa-style = "accumlint"` in `[tool.accumlint]` makes
`--add-noqa` write it). See "Running beside ruff" in the README.
"""


def noqa_hint(info: RuleInfo) -> str | None:
    """The section ``accumlint rule`` prints after a rule's page: how to suppress its findings
    without ruff's ``RUF100`` fix deleting the directive; ``None`` for ``ACC000`` (never
    suppressed) and ``ACC990`` (a report on the directives themselves)."""
    if any(info.code == engine.code for engine in spec.ENGINE_CODES):
        return None
    return NOQA_HINT.format(code=info.code)


def fix_applicability(code: str) -> str | None:
    """:func:`accumlint.fixes.fix_applicability`, imported at the first call (the codemods
    import LibCST, which a rule's page does not need)."""
    from accumlint import fixes

    return fixes.fix_applicability(code)


def rule_json(info: RuleInfo) -> dict:
    """``accumlint rule --output-format json``: the rule's metadata and its page (``explanation``).

    ``fix`` is ``"safe"``, ``"unsafe"`` or ``None`` (no automatic fix, see ``--fix``).
    """
    return {
        "code": info.code,
        "name": info.name,
        "severity": info.severity.value,
        "default_enabled": info.default_enabled,
        "summary": info.summary,
        "url": info.url,
        "fix": fix_applicability(info.code),
        "explanation": rule_page(info),
    }
