"""The per-file result cache under ``.accumlint_cache/`` (``--no-cache``, ``accumlint clean``).

One JSON file per project and fingerprint, ``<cache dir>/<version>/<fingerprint>.json``,
``{"format": 8, "mac": <header>, "files": {...}, "index": {...}, "stage": {...}}``, maps each
checked file (absolute path) to the SHA-256 of its bytes, its findings (with their fixes,
where the check computed them), the unknown ``ACC`` codes of its ``noqa`` directives
(warnings, not findings) and its accumulation loops' undecided reasons (``--statistics``); its
``"index"`` section keeps the project index between runs (:mod:`accumlint.run.index_cache`), its
``"stage"`` what the byte stage reads of the rules (:mod:`accumlint.pipeline.byte_stage`), both signed.
The fingerprint covers everything else a file's findings depend on: the accumlint
version and a hash of its own source files (so an edit to an editable install
invalidates the cache), the Python and LibCST versions (the parsers), the rule
registry, the enabled codes, ``per-file-ignores`` and the project root.

A warm run over an unchanged tree does not even read the files: an entry also keeps the
file's signature (size, modification and change times, inode, device; :mod:`accumlint.files.reading`)
from the read its digest came from, and a file whose ``stat`` still gives that signature is
taken to hold the same bytes, as ruff and git take it. A signature is kept only when the file
was last changed at least :data:`RACY_SECONDS` before it was read: a write within the same
tick of the file system's clock would leave the times as they were (git's "racy" entries).
Any other file is read and hashed.

Entries are bound to this user on this machine and to their fingerprint: each carries an
HMAC-SHA256 over the file's path, the hash of its bytes, its findings and its unknown codes,
under a key derived from a random per-user key kept outside any repository (``cache-key`` in
the platform's user cache directory, ``platformdirs``) and the fingerprint, so an entry of a
narrower run (``--select``) replayed into another fingerprint's file does not verify. An entry
that does not verify (blanked or forged, copied from another machine or committed to a
repository) is ignored and the file checked anew; positions are validated on read as well
(integers, not booleans, within the file). No key (a home that cannot be written): no cache.
The file's header ``mac`` (another derivation of the two) proves that accumlint wrote it
(:func:`proves_written`): ``accumlint clean`` removes nothing else.

The cache is the one thing the linter writes unasked, as ruff does, and only into a directory
of its own (:mod:`accumlint.run.cache_dir`: created with a ``CACHEDIR.TAG`` and a ``.gitignore``
of ``*``, private to the user whatever the umask); the file is replaced atomically and read
bounded (:data:`MAX_CACHE_BYTES`, regular files only); a corrupt, unreadable or unwritable
cache is ignored (the run checks the files anew).
Entries not seen for :data:`MAX_UNSEEN_DAYS` days are dropped when the file is written.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import importlib.util
import json
import os
import re
import secrets
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accumlint import __version__
from accumlint.files.reading import NotARegularFile, Signature, read_source, signature_of
from accumlint.files.writing import rename_over_regular
from accumlint.run import cache_dir
from accumlint.run.cache_dir import CACHE_DIR_NAME, CACHEDIR_TAG, GITIGNORE, CacheDirError
from accumlint.spec.findings import Finding, LoopVerdict, Severity

if TYPE_CHECKING:
    from accumlint.pipeline.byte_stage import Vocabulary
    from accumlint.run.index_cache import IndexCache
    from accumlint.run.suggested_fixes import SuggestedFix

__all__ = ["CACHE_DIR_NAME", "CACHEDIR_TAG", "GITIGNORE", "CacheDirError", "ResultCache", "fingerprint"]

CACHE_DIR_ENV = "ACCUMLINT_CACHE_DIR"
#: The layout of a cache file; bump it when the entry format changes (7: the signed header,
#: entries signed under a key of their fingerprint).
FORMAT = 8
#: a cache file larger than this is not read (the run checks the files anew and writes a new one)
MAX_CACHE_BYTES = 64 * 1024 * 1024
KEY_FILE = "cache-key"
KEY_BYTES = 32
_CODE = re.compile(r"ACC[0-9]{3}")
#: the largest position accepted from a cache entry (a file over this is never parsed)
_MAX_POSITION = 8 * 1024 * 1024
MAX_UNSEEN_DAYS = 30
#: a file changed less than this long before it was read keeps no signature (see the docstring)
RACY_SECONDS = 2
PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the whole package (this module is in run/)


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
    ignore_noqa: bool = False,
) -> str:
    """The key of the cache file: a hash of everything besides a file's bytes that its findings
    depend on (see the module docstring); ``ignore_noqa``: ``--ignore-noqa``, no directive applied."""
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
    if ignore_noqa:  # (only then: the key of every other run stays what it was)
        parts["ignore_noqa"] = True
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
        list(finding.raw),
        [list(step) for step in finding.flow],
    ]


def _position(value: object, lowest: int, highest: int) -> int:
    if type(value) is not int or not lowest <= value <= highest:  # not bool: `true` is no line
        raise ValueError(f"position {value!r} out of range")
    return value


def _decode(path: str, row: Sequence[Any], lines: int) -> Finding:
    """A finding of a cache entry, for a file of ``lines`` lines; raises ``ValueError`` or
    ``TypeError`` for anything a finding of that file cannot hold. Related locations name other
    files, whose lines are bounded only by the largest file accumlint parses."""
    # (a row of 12: written before findings carried their place in a notebook's JSON; of 13, their flow)
    line, column, code, name, severity, message, fix, end_line, end_column, url, cell, related, *rest = row
    if len(rest) > 2 or (rest and len(rest[0]) not in (0, 4)):
        raise ValueError("a finding's place in the file is four numbers")
    raw = tuple(rest[0]) if rest else ()
    flow = []
    for where, at, column_at, text in rest[1] if len(rest) > 1 else ():
        if not isinstance(where, str) or not isinstance(text, str):
            raise TypeError("a step of a flow names its file and says what happens there")
        flow.append((where, _position(at, 1, _MAX_POSITION), _position(column_at, 1, _MAX_POSITION), text))
    for value, lowest in zip(raw, (1, 1, 0, 0), strict=False):  # (its length is 0 or 4: checked above)
        _position(value, lowest, _MAX_POSITION)
    _position(line, 1, lines)
    _position(end_line, 0, lines)
    for value in (column, end_column, cell):
        _position(value, 0 if value is not column else 1, _MAX_POSITION)
    if not all(isinstance(v, str) for v in (code, name, message, fix, url)) or not _CODE.fullmatch(code):
        raise TypeError("texts must be strings, the code an ACC code")
    places = []
    for where, at, column_at in related:
        if not isinstance(where, str):
            raise TypeError("a related location names its file")
        places.append((where, _position(at, 1, _MAX_POSITION), _position(column_at, 0, _MAX_POSITION)))
    return Finding(path, line, column, code, name, Severity(severity), message, fix, end_line, end_column, url, cell,
                   tuple(places), raw, tuple(flow))  # type: ignore[arg-type]


def _encode_fixes(findings: Sequence[Finding], fixes: Mapping[Finding, SuggestedFix]) -> list[Any]:
    """Per finding (in ``findings``' order), its fix as ``[applicability, message, edits]``
    (each edit ``[row, column, end row, end column, content]``), or None."""
    rows: list[Any] = []
    for finding in findings:
        fix = fixes.get(finding)
        rows.append(None if fix is None else [fix.applicability, fix.message, [
            [*edit.location, *edit.end_location, edit.content] for edit in fix.edits]])
    return rows


def _decode_fixes(findings: Sequence[Finding], rows: Any, lines: int) -> dict[Finding, SuggestedFix]:
    """The fixes :func:`_encode_fixes` stored, for a file of ``lines`` lines; raises
    ``ValueError`` or ``TypeError`` for anything such a fix cannot hold."""
    from accumlint.files.text_edits import TextEdit
    from accumlint.run.suggested_fixes import SAFE, UNSAFE, SuggestedFix

    if not isinstance(rows, list) or len(rows) != len(findings):
        raise ValueError("one fix or null per finding")
    fixes: dict[Finding, SuggestedFix] = {}
    for finding, row in zip(findings, rows, strict=True):
        if row is None:
            continue
        applicability, message, edits = row
        if applicability not in (SAFE, UNSAFE) or not isinstance(message, str):
            raise TypeError("a fix's applicability and message")
        decoded = []
        for line, column, end_line, end_column, content in edits:
            if not isinstance(content, str):
                raise TypeError("an edit's content is text")
            decoded.append(TextEdit((_position(line, 1, lines + 1), _position(column, 1, _MAX_POSITION)),
                                    (_position(end_line, 1, lines + 1), _position(end_column, 1, _MAX_POSITION)),
                                    content))
        fixes[finding] = SuggestedFix(applicability, message, tuple(decoded))
    return fixes


def user_key(*, create: bool = True) -> bytes | None:
    """This user's cache key (created on first use, mode 0600, unless not ``create``), or None
    if it cannot be kept (or does not exist and is not to be created)."""
    import platformdirs  # here: only a run that uses the cache needs it

    folder = Path(platformdirs.user_cache_dir("accumlint", appauthor=False))
    path = folder / KEY_FILE
    key = _read_key(path)
    if key is not None or not create:
        return key
    torn = os.path.lexists(path)  # a kill while it was written, or someone else's bytes
    key = secrets.token_bytes(KEY_BYTES)
    try:
        cache_dir.make_private_dirs(folder)
        temporary = folder / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(key)
        if torn:
            try:  # the entries signed with the old key no longer verify
                rename_over_regular(temporary, path)
            except OSError:
                os.unlink(temporary)
                raise
            return key
        try:
            os.link(temporary, path)  # the first of concurrent runs to make it wins
        except FileExistsError:
            return _read_key(path)
        finally:
            os.unlink(temporary)
    except OSError:
        return None
    return key


def _depends(dependencies: Any, names: Any, state: Any) -> list[Any] | None:
    """What an entry's result depends on, as signed (None where it depends on nothing)."""
    return [dependencies, names, state] if dependencies or names or state else None


def _read_key(path: Path) -> bytes | None:
    try:
        key, _ = read_source(path, KEY_BYTES)  # bounded, regular files only
    except (OSError, NotARegularFile):
        return None
    return key if len(key) == KEY_BYTES else None


def _derive(secret: bytes, purpose: bytes, key: str) -> bytes:
    return hmac.digest(secret, b"accumlint cache " + purpose + b"\0" + key.encode(), "sha256")


def entry_secret(secret: bytes, key: str) -> bytes:
    """The key that signs the entries of the cache file of fingerprint ``key`` (from the user's
    ``secret``): an entry verifies only in the file of the fingerprint it was computed under."""
    return _derive(secret, b"entries", key)


def header_mac(secret: bytes, key: str) -> str:
    """The ``mac`` of the header of the cache file of fingerprint ``key``: proves the user's
    accumlint wrote it (another derivation than :func:`entry_secret`: it reveals nothing of that)."""
    return _derive(secret, b"file", key).hex()[:32]


#: the start of a cache file: its header (format 7 on), or an older format's up to its first entry
_HEADER = re.compile(rb'\{\s*"format"\s*:\s*([0-9]{1,6})\s*,\s*"mac"\s*:\s*"([0-9a-f]{32})"')
_OLDER = re.compile(rb'\{\s*"format"\s*:\s*([0-9]{1,6})\s*,\s*"files"\s*:\s*\{\s*')
_NO_ENTRY = re.compile(rb'\{"format":[0-9]{1,6},"files":\{\}\}')
_COLON = re.compile(r"\s*:\s*")


def proves_written(data: bytes, key: str, secret: bytes | None) -> bool:
    """Whether ``data``, the start of the file ``<key>.json`` (or of its temporary), shows that
    this user's accumlint wrote it: its header's ``mac`` is :func:`header_mac` under ``secret``;
    for the older formats without a header, its first entry verifies under ``secret`` (a
    file with no entry is exactly ``{"format":N,"files":{}}``). Anything else (a look-alike, a
    file of another user or machine, no ``secret``) proves nothing."""
    if secret is None:
        return False
    header = _HEADER.match(data)
    if header is not None:
        return int(header.group(1)) >= FORMAT and hmac.compare_digest(header.group(2).decode(), header_mac(secret, key))
    older = _OLDER.match(data)
    if older is None or int(older.group(1)) >= FORMAT:
        return False
    if data[older.end():older.end() + 1] == b"}":
        return _NO_ENTRY.fullmatch(data) is not None
    try:  # the first entry alone: the rest of the file may be past what was read
        decoder = json.JSONDecoder()
        text = data.decode("ascii")
        path, end = decoder.raw_decode(text, older.end())
        colon = _COLON.match(text, end)
        if colon is None or not isinstance(path, str):
            return False
        entry, _ = decoder.raw_decode(text, colon.end())
        return hmac.compare_digest(entry["mac"], _entry_mac(secret, path, entry["digest"], entry, entry.get("stat")))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return False


def _mac(key: bytes, path: str, digest: str, findings: list[Any], unknown: list[Any],
         depends: list[Any] | None = None, fixes: list[Any] | None = None,
         signature: list[int] | None = None, loops: list[Any] | None = None) -> str:
    """The entry's signature: HMAC-SHA256 of its path, bytes hash, findings, unknown codes,
    what its result depends on (``[dependencies, names, state]``, see :class:`CachedResult`),
    its findings' fixes, its accumulation loops and the file's
    :data:`~accumlint.files.reading.Signature`, where stored."""
    # most files have neither findings nor unknown codes nor dependencies: no JSON to build for them
    payload = [findings, unknown, depends] if depends else [findings, unknown]
    if fixes is not None:
        payload.append(fixes)
    if loops:
        payload.append({"loops": loops})
    rows = json.dumps(payload, separators=(",", ":")) if findings or unknown or depends or loops else "[[],[]]"
    stat = "" if signature is None else "\0" + ",".join(map(str, signature))
    message = f"{json.dumps(path)}\0{digest}\0{rows}{stat}".encode()
    return hmac.digest(key, message, "sha256").hex()[:32]


def _entry_mac(key: bytes, path: str, digest: str, entry: dict[str, Any], signature: list[int] | None) -> str:
    """:func:`_mac` of a stored entry's own fields, with ``signature`` as its file signature.
    Raises ``KeyError`` for an entry without findings or unknown codes."""
    depends = _depends(entry.get("dependencies", {}), entry.get("names", []), entry.get("state", ""))
    return _mac(key, path, digest, entry["findings"], entry["unknown_noqa"], depends, entry.get("fixes"), signature,
                entry.get("loops"))


def _kept_signature(signature: Signature | None) -> list[int] | None:
    """``signature`` as stored, where it may be trusted later (see :data:`RACY_SECONDS`)."""
    if signature is None:
        return None
    _, modified, changed, _, _ = signature
    return list(signature) if max(modified, changed) < _now_ns() - RACY_SECONDS * 10**9 else None


def _now_ns() -> int:
    return time.time_ns()


def _stored_signature(entry: dict[str, Any]) -> list[int] | None:
    """An entry's stored signature: five integers, or None (absent or malformed)."""
    stored = entry.get("stat")
    if (isinstance(stored, list) and len(stored) == 5
            and all(isinstance(part, int) and not isinstance(part, bool) for part in stored)):
        return stored
    return None


def _today() -> int:
    return int(time.time() // 86400)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a new private file in the same directory
    (:func:`accumlint.run.cache_dir.write_new`) and a rename, so a reader sees the old file or the
    new one, never a part. Raises ``OSError``."""
    temporary = path.with_name(cache_dir.temporary_name(path.name))
    cache_dir.write_new(temporary, data)
    try:
        rename_over_regular(temporary, path)
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
    #: each finding's fix, where the check that stored it computed them (None: it did not)
    fixes: dict[Finding, SuggestedFix] | None = None
    #: the file's accumulation loops with their undecided reasons (:attr:`accumlint.pipeline.engine.FileResult.loops`)
    loops: list[LoopVerdict] = field(default_factory=list)


def _decode_loops(rows: Any) -> list[LoopVerdict]:
    """Stored loops: ``[[[path, line], ...], [reason, ...]]`` each. Raises ``TypeError`` for any other shape."""
    if not isinstance(rows, list) or not all(
            isinstance(row, list) and len(row) == 2 and isinstance(row[0], list) and isinstance(row[1], list)
            and all(isinstance(site, list) and len(site) == 2 and isinstance(site[0], str) and isinstance(site[1], int)
                    for site in row[0]) and all(isinstance(reason, str) for reason in row[1]) for row in rows):
        raise TypeError("each accumulation loop is its sites and its undecided reasons")
    return [LoopVerdict(tuple((path, line) for path, line in sites), tuple(reasons)) for sites, reasons in rows]


def _decode_unknown(rows: Sequence[Any]) -> list[tuple[int, str]]:
    if not all(isinstance(line, int) and isinstance(code, str) for line, code in rows):
        raise TypeError("unknown noqa codes must be (line, code)")
    return [(line, code) for line, code in rows]


class ResultCache:
    """The cached findings of one project and fingerprint; see the module docstring."""

    def __init__(self, directory: Path, key: str, secret: bytes) -> None:
        self.directory = directory
        self.file = directory / __version__ / f"{key}.json"
        self._fingerprint = key
        self._user_secret = secret
        self._secret = entry_secret(secret, key)
        self._entries: dict[str, dict[str, Any]] = {}
        self._today = _today()
        self._dirty = False
        self._cwd = os.getcwd()
        self._index: IndexCache | None = None
        self._index_entries: dict[str, Any] = {}
        self._stage: Any = None  # the byte stage's vocabulary, as stored (see stored_vocabulary)

    def _key(self, path: str) -> str:
        """The absolute form of ``path`` (``os.path.abspath`` without a ``getcwd`` per file)."""
        return os.path.normpath(path if os.path.isabs(path) else os.path.join(self._cwd, path))

    @classmethod
    def load(cls, directory: Path, key: str, secret: bytes) -> ResultCache:
        """The cache file for ``key`` under ``directory``, its entries signed with ``secret``
        (:func:`user_key`); empty if it is absent, unreadable or corrupt."""
        cache = cls(directory, key, secret)
        try:
            text, size = read_source(cache.file, MAX_CACHE_BYTES)  # a FIFO or /dev/zero planted there: no hang
            if size > MAX_CACHE_BYTES:
                return cache
            data = json.loads(text)
        except (OSError, NotARegularFile, ValueError, RecursionError):
            return cache
        if isinstance(data, dict) and data.get("format") == FORMAT and isinstance(data.get("files"), dict):
            cache._entries = data["files"]
            if isinstance(data.get("index"), dict):
                cache._index_entries = data["index"]
            cache._stage = data.get("stage")
        return cache

    def unchanged(self, path: str) -> str | None:
        """The digest stored for ``path`` when the file's ``stat`` gives the signature stored with
        it (the bytes need not be read: see the module docstring), else None. The entry is not
        verified here: :meth:`get` with that digest does it."""
        entry = self._entries.get(self._key(path))
        if not isinstance(entry, dict):
            return None
        stored = _stored_signature(entry)
        digest = entry.get("digest")
        if stored is None or not isinstance(digest, str):
            return None
        try:
            now = os.stat(path)
        except OSError:
            return None
        return digest if list(signature_of(now)) == stored else None

    def keep_signature(self, path: str, digest: str, signature: Signature) -> None:
        """Store ``signature``, of the read whose bytes have ``digest``, with the entry of ``path``
        when it has none or another (the next warm run then need not read the file). Call it
        after :meth:`get` returned that entry: its fields are re-signed as they are."""
        absolute = self._key(path)
        entry = self._entries.get(absolute)
        kept = _kept_signature(signature)
        if not isinstance(entry, dict) or entry.get("digest") != digest or kept is None or entry.get("stat") == kept:
            return
        try:
            entry["mac"] = _entry_mac(self._secret, absolute, digest, entry, kept)
        except (KeyError, TypeError, ValueError):
            return
        entry["stat"] = kept
        self._dirty = True

    def get(self, path: str, digest: str, lines: int | None = None) -> CachedResult | None:
        """What is stored for ``path`` with bytes of ``digest`` (``lines`` lines long), or None
        (absent, stale, corrupt, or not signed with this user's key)."""
        absolute = self._key(path)
        entry = self._entries.get(absolute)
        if not isinstance(entry, dict) or entry.get("digest") != digest:
            return None
        try:
            rows, unknown_rows = entry["findings"], entry["unknown_noqa"]
            fix_rows = entry.get("fixes")
            if "stat" in entry and _stored_signature(entry) is None:
                return None
            mac = _entry_mac(self._secret, absolute, digest, entry, entry.get("stat"))
            if not isinstance(entry.get("mac"), str) or not hmac.compare_digest(entry["mac"], mac):
                return None
            findings = [_decode(path, row, _MAX_POSITION if lines is None else lines) for row in rows]
            fixes = None if fix_rows is None else _decode_fixes(findings, fix_rows,
                                                                 _MAX_POSITION if lines is None else lines)
            unknown = _decode_unknown(unknown_rows)
            dependencies = {str(k): str(v) for k, v in dict(entry.get("dependencies", {})).items()}
            names = tuple(str(name) for name in entry.get("names", ()))
            state = str(entry.get("state", ""))
            loops = _decode_loops(entry.get("loops", []))
        except (KeyError, TypeError, ValueError, RecursionError):
            return None
        if entry.get("seen") != self._today:
            entry["seen"] = self._today
            self._dirty = True
        return CachedResult(findings, unknown, dependencies, names, state, fixes, loops)

    def put(self, path: str, digest: str, findings: Iterable[Finding],
            unknown_noqa: Iterable[tuple[int, str]] = (), *, dependencies: Mapping[str, str] | None = None,
            names: Iterable[str] = (), state: str = "",
            fixes: Mapping[Finding, SuggestedFix] | None = None, signature: Signature | None = None,
            loops: Iterable[LoopVerdict] = ()) -> None:
        """Store the findings of ``path`` (bytes of ``digest``) and the unknown codes of its
        ``noqa`` directives as ``(line, code)``; ``dependencies``, ``names``, ``state``,
        ``fixes``, ``loops``: see :class:`CachedResult`; ``signature``: the file's, from the read
        of those bytes (:func:`accumlint.files.reading.read_signed`)."""
        absolute = self._key(path)
        findings = list(findings)
        rows = [_encode(f) for f in findings]
        fix_rows = None if fixes is None or not findings else _encode_fixes(findings, fixes)
        unknown = [list(pair) for pair in unknown_noqa]
        depended = dict(dependencies or {})
        named = sorted(names)
        kept = _kept_signature(signature)
        looped = [[[list(site) for site in loop.sites], list(loop.reasons)] for loop in loops]
        self._entries[absolute] = {
            "digest": digest,
            "seen": self._today,
            "findings": rows,
            "unknown_noqa": unknown,
            "dependencies": depended,
            "names": named,
            "state": state,
            "mac": _mac(self._secret, absolute, digest, rows, unknown, _depends(depended, named, state), fix_rows,
                        kept, looped),
        }
        if fix_rows is not None:
            self._entries[absolute]["fixes"] = fix_rows
        if looped:
            self._entries[absolute]["loops"] = looped
        if kept is not None:
            self._entries[absolute]["stat"] = kept
        self._dirty = True

    def save(self) -> None:
        """Write the cache file if anything changed; errors (read-only tree, full disk) are ignored."""
        index = self._index
        if not self._dirty and (index is None or not index.dirty):
            return
        oldest = self._today - MAX_UNSEEN_DAYS
        header = {"format": FORMAT, "mac": header_mac(self._user_secret, self._fingerprint)}
        try:
            if not cache_dir.create(self.directory, self._user_secret):
                return  # made meanwhile by someone else, and not accumlint's: leave it alone
            with contextlib.suppress(FileExistsError):
                cache_dir.make_private_dir(self.file.parent)
            data = {**header, "files": _seen_since(self._entries, oldest),
                    "index": _seen_since(self._index_entries, oldest), "stage": self._stage}
            _atomic_write(self.file, json.dumps(data, separators=(",", ":")).encode())
        except OSError:
            return
        self._dirty = False
        if index is not None:
            index.dirty = False

    def _stage_mac(self, stage: Any) -> str:
        text = json.dumps(stage, sort_keys=True, separators=(",", ":"))
        return hmac.digest(_derive(self._user_secret, b"stage", self._fingerprint), text.encode(), "sha256").hex()[:32]

    def stored_vocabulary(self) -> Vocabulary | None:
        """The byte stage's vocabulary kept in this file (:mod:`accumlint.pipeline.byte_stage`: what the
        stage reads of the rules, valid under this fingerprint, which covers the tool's own
        source), or None: none kept, or one that does not verify or does not read back."""
        from accumlint.pipeline.byte_stage import Vocabulary  # (no LibCST there)

        stage = self._stage
        if not isinstance(stage, dict) or not isinstance(stage.get("mac"), str):
            return None
        if not hmac.compare_digest(stage["mac"], self._stage_mac(stage.get("vocabulary"))):
            return None
        try:
            return Vocabulary.from_json(stage["vocabulary"])
        except (ValueError, TypeError, KeyError, re.error, RecursionError):
            return None

    def keep_vocabulary(self, vocabulary: Vocabulary) -> None:
        """Keep ``vocabulary`` (the engine's) for the next runs of this fingerprint."""
        data = vocabulary.to_json()
        self._stage = {"vocabulary": data, "mac": self._stage_mac(data)}
        self._dirty = True

    def project_index(self) -> IndexCache:
        """The project index kept in the same file (:mod:`accumlint.run.index_cache`)."""
        if self._index is None:
            from accumlint.run.index_cache import IndexCache  # it imports this module

            self._index = IndexCache(self._index_entries, _derive(self._user_secret, b"index", self._fingerprint),
                                     self._today)
        return self._index


def _seen_since(entries: Mapping[str, Any], oldest: int) -> dict[str, Any]:
    """The entries of ``entries`` seen on day ``oldest`` or later (the others are dropped)."""
    return {path: entry for path, entry in entries.items()
            if isinstance(entry, dict) and isinstance(entry.get("seen"), int) and entry["seen"] >= oldest}
