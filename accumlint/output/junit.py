"""JUnit XML (``--output-format junit``) for CI systems that show test reports.

One ``<testsuite>`` per file with findings, one failing ``<testcase>`` per finding
(``name`` is ``CODE rule-name``, ``classname`` the path, ``file``/``line`` the place).
Without findings the report holds a single passing test case, as ruff's does.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence

from accumlint.findings import Finding
from accumlint.output.text import sort_findings


def _testcase(suite: ET.Element, finding: Finding) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        name=f"{finding.code} {finding.name}",
        classname=finding.path,
        file=finding.path,
        line=str(finding.line),
    )
    failure = ET.SubElement(case, "failure", message=finding.message, type=finding.code)
    lines = [f"{finding.where}: {finding.code} {finding.message}"]
    if finding.fix:
        lines.append(f"help: {finding.fix}")
    if finding.url:
        lines.append(f"see: {finding.url}")
    failure.text = "\n".join(lines)


def format_junit(findings: Iterable[Finding], incomplete: Mapping[str, Sequence[str]] | None = None) -> str:
    """The findings as a JUnit XML document (UTF-8, with an XML declaration); each file that was
    not fully checked (``incomplete``: path -> reasons) is an erroring test case."""
    findings = sort_findings(findings)
    incomplete = incomplete or {}
    root = ET.Element("testsuites", name="accumlint", tests=str(max(len(findings) + len(incomplete), 1)))
    root.set("failures", str(len(findings)))
    root.set("errors", str(len(incomplete)))
    if incomplete:
        suite = ET.SubElement(root, "testsuite", name="not fully checked", tests=str(len(incomplete)), failures="0",
                              errors=str(len(incomplete)))
        for path, reasons in incomplete.items():
            case = ET.SubElement(suite, "testcase", name="fully checked", classname=path, file=path)
            text = "; ".join(reasons) or "an internal error"
            ET.SubElement(case, "error", message=text, type="not-fully-checked").text = text
    if not findings and not incomplete:
        suite = ET.SubElement(root, "testsuite", name="accumlint", tests="1", failures="0", errors="0")
        ET.SubElement(suite, "testcase", name="No findings", classname="accumlint")
    for path, group in itertools.groupby(findings, key=lambda f: f.path):
        group = list(group)
        suite = ET.SubElement(
            root, "testsuite", name=path, tests=str(len(group)), failures=str(len(group)), errors="0"
        )
        for finding in group:
            _testcase(suite, finding)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)
