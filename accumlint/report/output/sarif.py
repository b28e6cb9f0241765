"""SARIF 2.1.0 output (``--output-format sarif``) for code-scanning services.

One run whose tool driver lists every rule with its metadata (id, name, short and full
description, help text and URI, default level and whether it is on by default); each
finding is a result pointing at its rule by id and index. Paths are URIs relative to the
``%SRCROOT%`` base (the current directory). A notebook finding's region is in the ``.ipynb``
file's own lines (code scanning shows the file as it is); its cell is a logical location
(``cell N``, of kind ``cell``: SARIF lists no kind for it, and allows its own where none fits)
and, with the line and column in the cell, in the result's properties. A finding with a
mechanical fix carries it in ``fixes`` (one ``artifactChange`` of ``replacements``: the deleted
region and the inserted text; unsafe fixes say so in their description); a notebook finding's
does not (its edit is one of a cell, not of the JSON's text). A finding read off a simulated run
carries the run's way to it as a ``codeFlows`` thread flow (the entry's loop, each call that leads
on, the event: code scanning draws it); a notebook finding's does not (its steps are a cell's).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path, PurePath
from typing import TYPE_CHECKING
from urllib.parse import quote

from accumlint import __version__
from accumlint.lazy import lazy_module
from accumlint.report.output.text import Fixes, Incomplete, incomplete_reasons, sort_findings
from accumlint.spec.findings import Finding, Severity

if TYPE_CHECKING:
    from accumlint.report.rule_docs import RuleDoc
    from accumlint.run.suggested_fixes import SuggestedFix

# the rule catalogue loads the rules (and LibCST): only a SARIF log needs it
rule_docs = lazy_module("accumlint.report.rule_docs")

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
INFORMATION_URI = "https://github.com/accumlint/accumlint"
LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _rule(doc: RuleDoc) -> dict:
    info = doc.info
    rule = {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary},
        "fullDescription": {"text": doc.full_description},
        "help": {"text": doc.page, "markdown": doc.page},
        "defaultConfiguration": {"level": LEVELS[info.severity], "enabled": info.default_enabled},
        "properties": {"tags": [info.severity.value]},
    }
    if doc.url:
        rule["helpUri"] = doc.url
    return rule


def _uri(path: str) -> str:
    if os.path.isabs(path):
        return Path(path).as_uri()
    # the file system's bytes: a name that is not UTF-8 holds surrogate escapes
    return quote(os.fsencode(PurePath(os.path.normpath(path)).as_posix()))


def _fix(finding: Finding, fix: SuggestedFix) -> dict:
    replacements = []
    for edit in fix.edits:
        (row, column), (end_row, end_column) = edit.location, edit.end_location
        region = {"startLine": row, "startColumn": column, "endLine": end_row, "endColumn": end_column}
        replacements.append({"deletedRegion": region, "insertedContent": {"text": edit.content}})
    description = fix.message if fix.safe else f"{fix.message} (unsafe: --unsafe-fixes)"
    return {
        "description": {"text": description},
        "artifactChanges": [
            {
                "artifactLocation": {"uri": _uri(finding.path), "uriBaseId": "%SRCROOT%"},
                "replacements": replacements,
            }
        ],
    }


def _result(finding: Finding, index: dict[str, int], fix: SuggestedFix | None = None) -> dict:
    line, column, end_line, end_column = finding.in_file
    region = {"startLine": line, "startColumn": column}
    if end_line:
        region.update(endLine=end_line, endColumn=max(end_column, 1))
    text = finding.message
    if finding.fix:
        text += f" Fix: {finding.fix}"
    result: dict = {
        "ruleId": finding.code,
        "level": LEVELS[finding.severity],
        "message": {"text": text},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(finding.path), "uriBaseId": "%SRCROOT%"},
                    "region": region,
                }
            }
        ],
    }
    if finding.related:
        result["relatedLocations"] = [
            {
                "id": number,
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(path), "uriBaseId": "%SRCROOT%"},
                    "region": {"startLine": line, "startColumn": column},
                },
                "message": {"text": "the helper's statement reached from the reported call"},
            }
            for number, (path, line, column) in enumerate(finding.related)
        ]
    if finding.flow and not finding.cell:
        result["codeFlows"] = [{"threadFlows": [{"locations": [_step(*step) for step in finding.flow]}]}]
    if finding.code in index:
        result["ruleIndex"] = index[finding.code]
    if finding.cell:
        cell = f"cell {finding.cell}"
        result["locations"][0]["logicalLocations"] = [
            {"name": cell, "fullyQualifiedName": f"{finding.path}:{cell}", "kind": "cell"}
        ]
        result["properties"] = {"cell": finding.cell, "cellLine": finding.line, "cellColumn": finding.column}
    if fix is not None and not finding.cell:
        result["fixes"] = [_fix(finding, fix)]
    return result


def _step(path: str, line: int, column: int, text: str) -> dict:
    """One step of a finding's flow as a ``threadFlowLocation``."""
    return {"location": {
        "physicalLocation": {
            "artifactLocation": {"uri": _uri(path), "uriBaseId": "%SRCROOT%"},
            "region": {"startLine": line, "startColumn": column},
        },
        "message": {"text": text},
    }}


def _invocation(incomplete: Incomplete) -> dict:
    """The run's invocation: successful unless a file was not fully checked (each reason a notification)."""
    notifications = [
        {
            "level": "error",
            "message": {"text": f"not fully checked: {reason}"},
            "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(path), "uriBaseId": "%SRCROOT%"}}}],
        }
        for path, reason in incomplete_reasons(incomplete)
    ]
    invocation: dict = {"executionSuccessful": not incomplete}
    if notifications:
        invocation["toolExecutionNotifications"] = notifications
    return invocation


def sarif_log(findings: Iterable[Finding], fixes: Fixes | None = None,
              incomplete: Incomplete | None = None) -> dict:
    """The SARIF log object for ``findings`` (every known rule is listed in the driver);
    ``incomplete``: the files that were not fully checked, and why (path -> reasons)."""
    docs = rule_docs.rule_docs()
    index = {doc.info.code: i for i, doc in enumerate(docs)}
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "accumlint",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "informationUri": INFORMATION_URI,
                        "rules": [_rule(doc) for doc in docs],
                    }
                },
                "invocations": [_invocation(incomplete or {})],
                "originalUriBaseIds": {"%SRCROOT%": {"uri": Path.cwd().as_uri() + "/"}},
                "results": [_result(f, index, (fixes or {}).get(f)) for f in sort_findings(findings)],
                "columnKind": "unicodeCodePoints",
            }
        ],
    }


def format_sarif(findings: Iterable[Finding], fixes: Fixes | None = None,
                 incomplete: Incomplete | None = None) -> str:
    """``findings`` as a SARIF 2.1.0 JSON document (``incomplete``: see :func:`sarif_log`)."""
    return json.dumps(sarif_log(findings, fixes, incomplete), indent=2)
