"""GitHub Actions workflow commands (``--output-format github``): one annotation per finding.

``::error file=train.py,line=6,col=5,endLine=6,endColumn=20,title=ACC001 zero-grad-inside-group::message``
(``warning`` and ``notice`` for the other severities). Values are escaped as the Actions
runner expects: ``%``, ``\\r`` and ``\\n`` everywhere, and also ``:`` and ``,`` in the
properties. The message carries the fix and the rule page on lines of their own. A notebook
finding points at the line of the ``.ipynb`` file that holds its source line (GitHub shows the
file's own lines), and its title names the cell and the line in it.
"""

from __future__ import annotations

from collections.abc import Iterable

from accumlint.report.output.text import Incomplete, incomplete_reasons, sort_findings
from accumlint.spec.findings import Finding, Severity

COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(value: str) -> str:
    """Escape a workflow command's message (the part after ``::``)."""
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(value: str) -> str:
    """Escape a workflow command's property value (``file=…``, ``title=…``)."""
    return escape_data(value).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding) -> str:
    """The workflow command for one finding."""
    line, column, end_line, end_column = finding.in_file
    properties = [("file", finding.path), ("line", str(line)), ("col", str(column))]
    if end_line:
        properties += [("endLine", str(end_line)), ("endColumn", str(end_column))]
    title = f"{finding.code} {finding.name}"
    if finding.cell:
        title += f" (cell {finding.cell}, line {finding.line})"
    properties.append(("title", title))
    message = finding.message
    if finding.related:  # the helper's line, as the text format gives it
        message += f" ({finding.via})"
    if finding.fix:
        message += f"\nhelp: {finding.fix}"
    if finding.url:
        message += f"\nsee: {finding.url}"
    props = ",".join(f"{key}={escape_property(value)}" for key, value in properties)
    return f"::{COMMANDS[finding.severity]} {props}::{escape_data(message)}"


def format_github(findings: Iterable[Finding], incomplete: Incomplete | None = None) -> str:
    """One annotation line per finding, in report order, then a warning per reason a file was not
    fully checked (``incomplete``: path -> reasons)."""
    lines = [annotation(f) for f in sort_findings(findings)]
    title = escape_property("not fully checked")
    for path, reason in incomplete_reasons(incomplete):
        lines.append(f"::warning file={escape_property(path)},title={title}::{escape_data(reason)}")
    return "\n".join(lines)
