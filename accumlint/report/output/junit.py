"""JUnit XML (``--output-format junit``) for CI systems that show test reports.

One ``<testsuite>`` per file with findings, one failing ``<testcase>`` per finding
(``name`` is ``CODE rule-name``, ``classname`` the path, ``file``/``line`` the place: for a
notebook, the line of the ``.ipynb`` file; the failure's text names the cell and its line).
Without findings the report holds a single passing test case, as ruff's does.
"""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from collections.abc import Iterable

from accumlint.report.output.text import Incomplete, incomplete_reasons, sort_findings
from accumlint.spec.findings import Finding


def _testcase(suite: ET.Element, finding: Finding) -> None:
    case = ET.SubElement(
        suite,
        "testcase",
        name=f"{finding.code} {finding.name}",
        classname=finding.path,
        file=finding.path,
        line=str(finding.in_file[0]),
    )
    failure = ET.SubElement(case, "failure", message=finding.message, type=finding.code)
    lines = [f"{finding.where}: {finding.code} {finding.message}"]
    if finding.fix:
        lines.append(f"help: {finding.fix}")
    if finding.url:
        lines.append(f"see: {finding.url}")
    failure.text = "\n".join(lines)


def format_junit(findings: Iterable[Finding], incomplete: Incomplete | None = None) -> str:
    """The findings as a JUnit XML document (UTF-8, with an XML declaration); each reason a file
    was not fully checked (``incomplete``: path -> reasons) is an erroring test case."""
    findings = sort_findings(findings)
    reasons = incomplete_reasons(incomplete)
    root = ET.Element("testsuites", name="accumlint", tests=str(max(len(findings) + len(reasons), 1)))
    root.set("failures", str(len(findings)))
    root.set("errors", str(len(reasons)))
    if reasons:
        suite = ET.SubElement(root, "testsuite", name="not fully checked", tests=str(len(reasons)), failures="0",
                              errors=str(len(reasons)))
        for path, reason in reasons:
            case = ET.SubElement(suite, "testcase", name="fully checked", classname=path, file=path)
            ET.SubElement(case, "error", message=reason, type="not-fully-checked").text = reason
    if not findings and not reasons:
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
