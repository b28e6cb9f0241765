"""Prepare a release: bump the version, date the changelog, pin the docs to the release's tag.

Usage: ``python scripts/release.py VERSION [--dry-run] [--date YYYY-MM-DD] [--root DIR]``

- ``__version__`` in ``accumlint/__init__.py`` and ``runtime_guard/__init__.py`` becomes
  VERSION (``pyproject.toml`` reads it from the first: hatch's dynamic version);
- ``CHANGELOG.md``: the ``## Unreleased`` heading becomes ``## VERSION — DATE`` (what was listed
  under it stays under it) and a new, empty ``## Unreleased`` goes above it;
- ``README.md``, ``CONTRIBUTING.md`` and ``docs/**/*.md``: every pre-commit ``rev:`` of the
  accumlint repository and every ``git+https://github.com/accumlint/accumlint@REF`` install line
  pin ``vVERSION``, and each ``*(after CURRENT)*`` mark (a feature that came after the current
  release) becomes ``*(since VERSION)*``.

VERSION must be greater than the current version (else exit 2, nothing written). Every change is
worked out before the first file is written, and each rewrite is idempotent (applied to its own
output it changes nothing). ``--dry-run`` prints the
changes as a unified diff and writes nothing. No git tag is made: the script prints the commands.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

from accumlint.files import writing  # noqa: E402

#: the files that hold ``__version__``; the first is the one read as the current version
VERSION_FILES = ("accumlint/__init__.py", "runtime_guard/__init__.py")
CHANGELOG = "CHANGELOG.md"
#: the repository's address as the docs spell it (pre-commit ``repo:`` and pip's git URLs)
REPOSITORY = "https://github.com/accumlint/accumlint"
UNRELEASED = "## Unreleased"
EXIT_OK, EXIT_ERROR = 0, 2

_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")
_VERSION_LINE = re.compile(r'^__version__ = "([^"\n]*)"$', re.MULTILINE)
_UNRELEASED_LINE = re.compile(rf"^{UNRELEASED}[ \t]*$", re.MULTILINE)
_REPO_LINE = re.compile(r"^\s*(?:-\s+)?repo:\s*['\"]?([^\s'\"#]+)")
_REV_LINE = re.compile(r"^(?P<head>\s*(?:-\s+)?rev:\s*)(?P<quote>['\"]?)(?P<ref>[^\s'\"#]*)(?P=quote)")
# `accumlint @ git+https://github.com/accumlint/accumlint@REF`: REF ends at a space, a quote, a
# backtick or `#egg=`; a URL without `@REF` is an unpinned install (ref ""). The look-ahead keeps
# `accumlint-foo` and `accumlint/sub` out.
_GIT_URL = re.compile(
    rf"(?P<url>git\+{re.escape(REPOSITORY)}(?:\.git)?)(?:@(?P<ref>[^\s'\"`#)\]]+))?(?![\w./-])"
)

# `*(after 0.2.0)*`: the README's mark of a feature that came after that release (main only)
_AFTER_MARK = re.compile(r"\*\(after (?P<version>\d+\.\d+\.\d+)\)\*")


class ReleaseError(Exception):
    """A release that cannot be made as asked (the message says why); the script exits 2."""


@dataclass(frozen=True)
class Pin:
    """One place a doc pins accumlint: ``line`` (1-based), ``kind`` (``rev`` or ``git``) and the
    ``ref`` it names (``""``: a git URL with no ``@REF``)."""

    line: int
    kind: str
    ref: str


def parse_version(text: str) -> tuple[int, int, int]:
    """``MAJOR.MINOR.PATCH`` (a leading ``v`` allowed) as three ints; raises :class:`ReleaseError`."""
    match = _VERSION.fullmatch(text.strip())
    if match is None:
        raise ReleaseError(f"not a version: {text!r} (expected MAJOR.MINOR.PATCH, e.g. 0.3.0)")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def current_version(text: str, name: str) -> str:
    """The ``__version__`` that ``text`` (the file ``name``) assigns; raises :class:`ReleaseError`."""
    match = _VERSION_LINE.search(text)
    if match is None:
        raise ReleaseError(f'{name}: no line `__version__ = "..."`')
    return match.group(1)


def set_version(text: str, version: str, name: str) -> str:
    """``text`` with its ``__version__`` line assigning ``version``; raises :class:`ReleaseError`."""
    current_version(text, name)
    return _VERSION_LINE.sub(f'__version__ = "{version}"', text, count=1)


def date_changelog(text: str, version: str, date: str) -> str:
    """``text`` (a changelog) with its ``## Unreleased`` heading turned into ``## VERSION — DATE``
    under a new, empty ``## Unreleased``. A changelog that already has a ``## VERSION`` heading is
    returned unchanged. Raises :class:`ReleaseError` when there is no ``## Unreleased`` heading."""
    if re.search(rf"^## v?{re.escape(version)}(?:[ \t]|$)", text, re.MULTILINE):
        return text
    if _UNRELEASED_LINE.search(text) is None:
        raise ReleaseError(f"{CHANGELOG}: no `{UNRELEASED}` heading to turn into `## {version} — {date}`")
    return _UNRELEASED_LINE.sub(f"{UNRELEASED}\n\n## {version} — {date}", text, count=1)


def unreleased_is_empty(text: str) -> bool:
    """Whether the ``## Unreleased`` section of a changelog lists nothing (only blank lines)."""
    match = _UNRELEASED_LINE.search(text)
    if match is None:
        return True
    section = text[match.end() :].split("\n## ", 1)[0]
    return not section.strip()


def _is_repository(url: str) -> bool:
    return url.rstrip("/").removesuffix(".git") == REPOSITORY


def _rev_lines(lines: list[str]) -> Iterator[tuple[int, re.Match[str]]]:
    """(index, match) of each ``rev:`` line that follows a ``repo:`` of this repository, in one
    YAML block (a code fence ends the block)."""
    repo = ""
    for index, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            repo = ""
        elif found := _REPO_LINE.match(line):
            repo = found.group(1)
        elif (rev := _REV_LINE.match(line)) and _is_repository(repo):
            yield index, rev


def find_pins(text: str) -> list[Pin]:
    """Every place ``text`` pins accumlint: pre-commit ``rev:`` lines and git install URLs."""
    lines = text.split("\n")
    pins = [Pin(index + 1, "rev", rev.group("ref")) for index, rev in _rev_lines(lines)]
    for index, line in enumerate(lines):
        pins += [Pin(index + 1, "git", url.group("ref") or "") for url in _GIT_URL.finditer(line)]
    return sorted(pins, key=lambda pin: (pin.line, pin.kind))


def pin_docs(text: str, tag: str) -> str:
    """``text`` with every pin :func:`find_pins` sees naming ``tag`` (the rest of each line kept)."""
    lines = text.split("\n")
    for index, rev in list(_rev_lines(lines)):
        line = lines[index]
        lines[index] = f"{rev.group('head')}{rev.group('quote')}{tag}{rev.group('quote')}{line[rev.end():]}"
    return "\n".join(_GIT_URL.sub(lambda url: f"{url.group('url')}@{tag}", line) for line in lines)


def after_marks(text: str) -> list[str]:
    """The versions that ``text``'s ``*(after VERSION)*`` marks name, in order."""
    return [mark.group("version") for mark in _AFTER_MARK.finditer(text)]


def mark_docs(text: str, current: str, version: str) -> str:
    """``text`` with each ``*(after CURRENT)*`` mark as ``*(since VERSION)*`` (the release that
    brings the feature); a mark naming another version is left as it is."""
    return _AFTER_MARK.sub(
        lambda mark: f"*(since {version})*" if mark.group("version") == current else mark.group(0), text
    )


def doc_files(root: Path) -> list[Path]:
    """The docs whose pins a release rewrites: README.md, CONTRIBUTING.md, docs/**/*.md (those present)."""
    named = [root / "README.md", root / "CONTRIBUTING.md"]
    return [path for path in named if path.is_file()] + sorted((root / "docs").rglob("*.md"))


def plan(root: Path, version: str, date: str) -> dict[Path, tuple[str, str]]:
    """What the release of ``version`` changes under ``root``: path -> (old text, new text), only
    the files that change. Raises :class:`ReleaseError` (nothing is written)."""
    version_files = [root / name for name in VERSION_FILES]
    texts = {path: path.read_text(encoding="utf-8") for path in [*version_files, root / CHANGELOG]}
    current = current_version(texts[version_files[0]], VERSION_FILES[0])
    if parse_version(version) <= parse_version(current):
        equal = parse_version(version) == parse_version(current)
        why = "is already the current version" if equal else f"is not greater than the current version {current}"
        suggestion = ".".join(str(n) for n in _next_minor(parse_version(current)))
        raise ReleaseError(
            f"{version} {why} ({VERSION_FILES[0]}): nothing written; give a greater one, e.g. {suggestion}"
        )
    changes = {path: set_version(texts[path], version, path.relative_to(root).as_posix()) for path in version_files}
    changes[root / CHANGELOG] = date_changelog(texts[root / CHANGELOG], version, date)
    for path in doc_files(root):
        texts[path] = path.read_text(encoding="utf-8")
        changes[path] = mark_docs(pin_docs(texts[path], f"v{version}"), current, version)
    return {path: (texts[path], new) for path, new in changes.items() if new != texts[path]}


def _next_minor(version: tuple[int, int, int]) -> tuple[int, int, int]:
    return version[0], version[1] + 1, 0


def render_diff(root: Path, changes: dict[Path, tuple[str, str]]) -> str:
    """The changes as one unified diff (``a/PATH`` and ``b/PATH`` relative to ``root``)."""
    parts = []
    for path, (old, new) in changes.items():
        name = path.relative_to(root).as_posix()
        parts += difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{name}", f"b/{name}"
        )
    return "".join(parts)


def tag_commands(version: str) -> list[str]:
    """The commands that commit the release and make its tag (the script runs neither)."""
    return [
        f'git commit -am "Release {version}"',
        f'git tag -a v{version} -m "accumlint {version}"',
        f"git push origin HEAD v{version}",
    ]


def _date(text: str) -> str:
    try:
        return datetime.date.fromisoformat(text).isoformat()
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (expected YYYY-MM-DD)") from None


def main(argv: list[str] | None = None) -> int:
    """Run the release steps; returns the exit status (0 done, 2 refused: nothing written)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the new version, MAJOR.MINOR.PATCH (greater than the current one)")
    parser.add_argument("--dry-run", action="store_true", help="print the changes as a diff; write nothing")
    parser.add_argument(
        "--date", type=_date, default=datetime.datetime.now(datetime.timezone.utc).date().isoformat(),
        help="the release date in the changelog (default: today, UTC)",
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to edit (default: this one)")
    args = parser.parse_args(argv)
    try:
        version = "{}.{}.{}".format(*parse_version(args.version))
        changes = plan(args.root, version, args.date)
    except (ReleaseError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    changelog = changes.get(args.root / CHANGELOG)
    if changelog is not None and unreleased_is_empty(changelog[0]):
        print(f"warning: the `{UNRELEASED}` section of {CHANGELOG} lists nothing", file=sys.stderr)
    if args.dry_run:
        sys.stdout.write(render_diff(args.root, changes))
        print("dry run: nothing written; a release would then need:\n  " + "\n  ".join(tag_commands(version)),
              file=sys.stderr)
        return EXIT_OK
    for path, (_, new) in changes.items():
        writing.write_file(path, new.encode("utf-8"))
    names = ", ".join(path.relative_to(args.root).as_posix() for path in changes)
    print(f"accumlint {version}: updated {names}")
    print("review the changes (git diff), then commit and tag the release:\n  " + "\n  ".join(tag_commands(version)))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
