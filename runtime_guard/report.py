"""Findings and the report: the same rule codes, names and pages as the linter.

Rule names, severities and page URLs come from the rule spec (``accumlint/spec/__init__.py``, free of
torch and LibCST), so both engines share one vocabulary.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from accumlint.files.writing import write_file
from accumlint.spec import spec_of


def rule_name(code: str) -> str:
    """The kebab-case name of ``code`` (``"ACC001"`` -> ``"zero-grad-inside-group"``)."""
    return spec_of(code).name


@dataclass
class RuntimeFinding:
    """One violation seen at run time (the linter's is :class:`accumlint.spec.findings.Finding`, a place
    in a file; this one is a place in the observed run).

    ``group`` and ``microbatch`` locate it (0-based; ``None`` when it concerns the whole run);
    ``observed`` is what happened, ``evidence`` the trace that shows it (e.g.
    ``"Z F B Z F B …"``), ``meaning`` what it does to training, ``fix`` what to change.
    """

    code: str
    group: int | None
    microbatch: int | None
    observed: str
    meaning: str
    fix: str
    evidence: str = ""
    name: str = field(init=False)
    severity: str = field(init=False)
    url: str = field(init=False)

    def __post_init__(self) -> None:
        rule = spec_of(self.code)
        self.name = rule.name
        self.severity = rule.severity.value
        self.url = rule.url

    def where(self) -> str:
        """``group 1, microbatch 2`` / ``group 1`` / ``run``."""
        if self.group is None:
            return "run"
        return f"group {self.group}" + (f", microbatch {self.microbatch}" if self.microbatch is not None else "")

    def one_line(self) -> str:
        """``ACC001 zero-grad-inside-group (group 0, microbatch 1): …``."""
        return f"{self.code} {self.name} ({self.where()}): {self.observed}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


#: the name this class had before the engines shared one vocabulary (``runtime_guard.Finding``):
#: kept for code that imports it
Finding = RuntimeFinding


class GuardWarning(UserWarning):
    """Emitted per finding with ``on_finding="warn"``."""


class GuardSetupWarning(UserWarning):
    """The guard was given objects the training loop does not use: it observed nothing to judge
    (every check "not observed"); emitted whatever ``on_finding`` says."""


@dataclass
class Report:
    """What a probe returns: the findings and the card (a JSON-ready dict)."""

    findings: list[RuntimeFinding]
    card: dict[str, Any]

    @property
    def codes(self) -> set[str]:
        """The distinct rule codes found."""
        return {f.code for f in self.findings}

    def to_dict(self) -> dict[str, Any]:
        """``{"findings": [...], "card": {...}}``."""
        return {"findings": [f.to_dict() for f in self.findings], "card": self.card}

    def to_json(self, path: str | Path | None = None) -> str:
        """The report as JSON text; also written to ``path`` when given, by accumlint's safe writer
        (atomic; never over a device, a FIFO, a read-only or a hard-linked file: ``OSError``)."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False)
        if path is not None:
            write_file(path, (text + "\n").encode("utf-8"))
        return text

    def __str__(self) -> str:
        from runtime_guard.render import render_report

        return render_report(self.to_dict())


class GuardFindingError(RuntimeError):
    """Raised at detach with ``on_finding="raise"`` when the probe found violations.

    ``report`` holds the findings and the card; hooks are already removed when it is raised.
    """

    def __init__(self, report: Report) -> None:
        super().__init__("; ".join(f.one_line() for f in report.findings))
        self.report = report
