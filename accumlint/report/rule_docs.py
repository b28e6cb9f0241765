"""Rule metadata for machine-readable formats: descriptions and help text from the rule pages.

A rule page (``rules/<CODE>-<name>/README.md``) is Markdown with the sections of
:data:`PAGE_SECTIONS`, in that order; the SARIF ``fullDescription`` is the first section's
text, the ``help`` the whole page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from accumlint.report.catalogue import RuleInfo, rule_infos, rule_page

#: The ``##`` sections of every rule page, in order (``scripts/new_rule.py`` writes them; a test
#: holds every page to them).
PAGE_SECTIONS = ("What it does", "Why is this bad", "Example", "Use instead", "Framework notes and exemptions",
                 "Runtime counterpart")

_HEADING = re.compile(r"^#{2,6}\s+(.*?)\s*$", re.MULTILINE)
#: A page's summary line, before its first section: the spec's ``summary`` as a quote
#: (``scripts/new_rule.py`` writes it; a test holds every page's to its spec's).
_SUMMARY = re.compile(r"^> (.+?)\s*$", re.MULTILINE)


def summary_line(summary: str) -> str:
    """The summary line a rule page carries under its title and severity: ``> <spec summary>``."""
    return f"> {summary}"


def page_summary(page: str) -> str | None:
    """The summary a rule page states before its first section (:func:`summary_line`), or ``None``."""
    first = _HEADING.search(page)
    match = _SUMMARY.search(page, 0, first.start() if first else len(page))
    return match.group(1) if match else None


@dataclass(frozen=True)
class RuleDoc:
    """A rule with everything a report format may show: metadata, description and page."""

    info: RuleInfo
    full_description: str
    page: str

    @property
    def url(self) -> str:
        """The rule's page (for ``ACC000`` and ``ACC990``, a section of the README)."""
        return self.info.url


def _unwrap(text: str) -> str:
    """Markdown paragraphs as plain text: hard-wrapped lines joined, paragraphs kept apart."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip())]
    return "\n\n".join(p for p in paragraphs if p)


def first_section(page: str) -> str:
    """The text of the page's first ``##`` section (or of its first bold-led paragraph)."""
    headings = list(_HEADING.finditer(page))
    if headings:
        start = headings[0].end()
        end = headings[1].start() if len(headings) > 1 else len(page)
        return _unwrap(page[start:end])
    body = page.split("\n", 1)[1] if "\n" in page else page
    first = re.split(r"\n\s*\n", body.strip(), maxsplit=1)[0]
    return _unwrap(re.sub(r"\*\*[^*]+\*\*\s*", "", first))


def rule_docs() -> tuple[RuleDoc, ...]:
    """Every code's :class:`RuleDoc`, in code order (the summary stands in for a missing page)."""
    docs = []
    for info in rule_infos():
        page = rule_page(info) or f"# {info.code} {info.name}\n\n{info.summary}\n"
        docs.append(RuleDoc(info, first_section(page) or info.summary, page))
    return tuple(docs)


def rule_doc(code: str) -> RuleDoc | None:
    """The :class:`RuleDoc` of ``code``, or ``None`` for an unknown code."""
    return next((doc for doc in rule_docs() if doc.info.code == code.upper()), None)
