"""The per-file result cache under ``.accumlint_cache/`` (``--no-cache``, ``accumlint clean``).

One JSON file per project and fingerprint, ``<cache dir>/<version>/<fingerprint>.json``,
maps each checked file (absolute path) to the SHA-256 of its bytes, its findings and the
unknown ``ACC`` codes of its ``noqa`` directives (warnings, not findings).
The fingerprint covers everything else a file's findings depend on: the accumlint
version and a hash of its own source files (so an edit to an editable install
invalidates the cache), the Python and LibCST versions (the parsers), the rule
registry, the enabled codes, ``per-file-ignores`` and the project root. A warm run over
an unchanged tree therefore only reads and hashes the files.

The cache is the one thing the linter writes unasked, as ruff does: the directory holds
a ``CACHEDIR.TAG`` and a ``.gitignore`` of ``*``; the file is replaced atomically; a
corrupt, unreadable or unwritable cache is ignored (the run checks the files anew).
Entries not seen for :data:`MAX_UNSEEN_DAYS` days are dropped when the file is written.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import secrets
import shutil
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accumlint import __version__
from accumlint.findings import Finding, Severity

CACHE_DIR_NAME = ".accumlint_cache"
CACHE_DIR_ENV = "ACCUMLINT_CACHE_DIR"
#: The layout of a cache file; bump it when the entry format changes.
FORMAT = 3
MAX_UNSEEN_DAYS = 30
CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by accumlint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)
GITIGNORE = "# Automatically created by accumlint.\n*\n"
PACKAGE_DIR = Path(__file__).resolve().parent


def resolve_cache_dir(option: str | os.PathLike[str] | None, configured: Path | None, project_root: Path) -> Path:
    """Where the cache lives: ``--cache-dir`` / ``$ACCUMLINT_CACHE_DIR`` (relative to the current
    directory), else the config's ``cache-dir``, else ``.accumlint_cache`` in the project root."""
    if option is not None and os.fspath(option) != "":
        return Path(os.path.abspath(option))
    if configured is not None:
        return configured
    return project_root / CACHE_DIR_NAME


@functools.cache
def source_hash() -> str:
    """SHA-256 over the accumlint package's own ``.py`` files (paths and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        digest.update(path.relative_to(PACKAGE_DIR).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def _libcst_version() -> str:
    """The installed LibCST's version file, hashed: read, not imported (importing LibCST costs
    a quarter of a second, ``importlib.metadata`` 40 ms: both more than a warm run's hashing)."""
    spec = importlib.util.find_spec("libcst")
    if spec is not None and spec.origin is not None:
        with contextlib.suppress(OSError):
            return hashlib.sha256((Path(spec.origin).parent / "_version.py").read_bytes()).hexdigest()
    from importlib import metadata  # pragma: no cover - another build of libcst

    return metadata.version("libcst")


def fingerprint(
    *,
    enabled: Iterable[str],
    per_file_ignores: Mapping[str, Sequence[str]],
    project_root: Path,
    registry: Iterable[str],
) -> str:
    """The key of the cache file: a hash of everything besides a file's bytes that its findings
    depend on (see the module docstring)."""
    parts = {
        "format": FORMAT,
        "version": __version__,
        "source": source_hash(),
        "python": [sys.implementation.name, *sys.version_info[:2]],
        "libcst": _libcst_version(),
        "registry": list(registry),  # the rule classes' qualified names
        "enabled": sorted(enabled),
        "per_file_ignores": sorted((glob, sorted(codes)) for glob, codes in per_file_ignores.items()),
        "root": os.fspath(project_root),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def content_digest(data: bytes) -> str:
    """The key of one file's bytes."""
    return hashlib.sha256(data).hexdigest()


def _encode(finding: Finding) -> list[Any]:
    return [
        finding.line,
        finding.column,
        finding.code,
        finding.name,
        finding.severity.value,
        finding.message,
        finding.fix,
        finding.end_line,
        finding.end_column,
        finding.url,
        finding.cell,
        [list(location) for location in finding.related],
    ]


def _decode(path: str, row: Sequence[Any]) -> Finding:
    line, column, code, name, severity, message, fix, end_line, end_column, url, cell, related = row
    places = tuple((str(where), int(at), int(column_at)) for where, at, column_at in related)
    finding = Finding(path, line, column, code, name, Severity(severity), message, fix, end_line, end_column, url, cell,
                      places)
    if not all(isinstance(v, int) for v in (line, column, end_line, end_column, cell)):
        raise TypeError("positions must be integers")
    if not all(isinstance(v, str) for v in (code, name, message, fix, url)):
        raise TypeError("texts must be strings")
    return finding


def _today() -> int:
    return int(time.time() // 86400)


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a new file in the same directory and a rename, so a
    reader sees the old file or the new one, never a part (the umask sets the mode)."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


@dataclass(frozen=True)
class CachedResult:
    """What the cache holds for one file: its findings, and ``(line, code)`` for each ``ACC``
    code of a ``noqa`` directive that names no rule."""

    findings: list[Finding]
    unknown_noqa: list[tuple[int, str]]
    #: project files the result depends on (path → SHA-256), the names this file defines that
    #: perform a backward (the prefilter's project names), and the digest of the project's
    #: names when the result was computed (:mod:`accumlint.project`)
    dependencies: dict[str, str] = field(default_factory=dict)
    names: tuple[str, ...] = ()
    state: str = ""


def _decode_unknown(rows: Sequence[Any]) -> list[tuple[int, str]]:
    if not all(isinstance(line, int) and isinstance(code, str) for line, code in rows):
        raise TypeError("unknown noqa codes must be (line, code)")
    return [(line, code) for line, code in rows]


class ResultCache:
    """The cached findings of one project and fingerprint; see the module docstring."""

    def __init__(self, directory: Path, key: str) -> None:
        self.directory = directory
        self.file = directory / __version__ / f"{key}.json"
        self._entries: dict[str, dict[str, Any]] = {}
        self._today = _today()
        self._dirty = False
        self._cwd = os.getcwd()

    def _key(self, path: str) -> str:
        """The absolute form of ``path`` (``os.path.abspath`` without a ``getcwd`` per file)."""
        return os.path.normpath(path if os.path.isabs(path) else os.path.join(self._cwd, path))

    @classmethod
    def load(cls, directory: Path, key: str) -> ResultCache:
        """The cache file for ``key`` under ``directory``; empty if it is absent, unreadable or corrupt."""
        cache = cls(directory, key)
        try:
            data = json.loads(cache.file.read_bytes())
        except (OSError, ValueError):
            return cache
        if isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("files"), dict):
            cache._entries = data["files"]
        return cache

    def get(self, path: str, digest: str) -> CachedResult | None:
        """What is stored for ``path`` with bytes of ``digest``, or None (absent, stale or corrupt)."""
        entry = self._entries.get(self._key(path))
        if not isinstance(entry, dict) or entry.get("digest") != digest:
            return None
        try:
            findings = [_decode(path, row) for row in entry["findings"]]
            unknown = _decode_unknown(entry["unknown_noqa"])
            dependencies = {str(k): str(v) for k, v in dict(entry.get("dependencies", {})).items()}
            names = tuple(str(name) for name in entry.get("names", ()))
            state = str(entry.get("state", ""))
        except (KeyError, TypeError, ValueError):
            return None
        if entry.get("seen") != self._today:
            entry["seen"] = self._today
            self._dirty = True
        return CachedResult(findings, unknown, dependencies, names, state)

    def put(self, path: str, digest: str, findings: Iterable[Finding],
            unknown_noqa: Iterable[tuple[int, str]] = (), *, dependencies: Mapping[str, str] | None = None,
            names: Iterable[str] = (), state: str = "") -> None:
        """Store the findings of ``path`` (bytes of ``digest``) and the unknown codes of its
        ``noqa`` directives as ``(line, code)``; ``dependencies``, ``names``, ``state``: see
        :class:`CachedResult`."""
        self._entries[self._key(path)] = {
            "digest": digest,
            "seen": self._today,
            "findings": [_encode(f) for f in findings],
            "unknown_noqa": [list(pair) for pair in unknown_noqa],
            "dependencies": dict(dependencies or {}),
            "names": sorted(names),
            "state": state,
        }
        self._dirty = True

    def save(self) -> None:
        """Write the cache file if anything changed; errors (read-only tree, full disk) are ignored."""
        if not self._dirty:
            return
        oldest = self._today - MAX_UNSEEN_DAYS
        files = {
            path: entry
            for path, entry in self._entries.items()
            if isinstance(entry, dict) and isinstance(entry.get("seen"), int) and entry["seen"] >= oldest
        }
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            for name, text in (("CACHEDIR.TAG", CACHEDIR_TAG), (".gitignore", GITIGNORE)):
                if not (self.directory / name).exists():
                    _atomic_write(self.directory / name, text)
            _atomic_write(self.file, json.dumps({"format": FORMAT, "files": files}, separators=(",", ":")))
        except OSError:
            return
        self._dirty = False


class NotACacheError(Exception):
    """``accumlint clean`` was pointed at a directory that accumlint did not create."""


def clean(directory: Path) -> bool:
    """Remove the cache directory; False if there was none.

    Raises :class:`NotACacheError` for a directory without accumlint's ``CACHEDIR.TAG``
    (a mistyped ``--cache-dir`` must not delete someone's files).
    """
    if not directory.exists():
        return False
    tag = directory / "CACHEDIR.TAG"
    try:
        ours = tag.read_text(encoding="utf-8") == CACHEDIR_TAG
    except (OSError, UnicodeDecodeError):
        ours = False
    if not ours:
        raise NotACacheError(f"{directory}: not an accumlint cache (no CACHEDIR.TAG written by accumlint); not removed")
    shutil.rmtree(directory)
    return True
