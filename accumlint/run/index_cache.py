"""The project index kept between runs, in the result cache's file (``--no-cache``: neither).

What the project pass learns of a file from its bytes alone is kept per file (absolute path):
the names it defines whose code performs a backward
(:meth:`~accumlint.project.ProjectIndex.names_of`, which needs the rules' markers, and so the
engine, to compute) and the dotted names its import statements bind
(:meth:`~accumlint.project.ProjectIndex.import_names`). A run that checks one changed file of a
large project (a pre-commit hook, an editor) then reads neither the modules it imports nor the
ones they import: their entries answer, from a ``stat`` each. Imports are resolved to files
anew at every run (a module added since counts), so no entry depends on the layout of the
file system.

The entries are the ``"index"`` section of the cache file (:mod:`accumlint.run.cache`), so they are
keyed like the results (the tool's version and own source, the Python version, the settings),
written with them (atomically, in the cache directory only) and removed with them by
``accumlint clean``. Each is signed with an HMAC under a key derived from the user's key and
the file's fingerprint (a forged or copied entry does not verify: its file is read and its
facts computed anew). An entry is trusted without a read only where the file's ``stat`` gives
the signature stored with it (size, times, inode, device), kept only from a read at least
:data:`~accumlint.run.cache.RACY_SECONDS` after the file's last change; else the file is read and
the SHA-256 of its bytes decides. A corrupt entry or section is ignored, never an error.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Callable
from typing import Any

from accumlint.files.reading import Signature, signature_of
from accumlint.run.cache import _kept_signature, _stored_signature

#: (the names a file defines that perform a backward, the dotted names its imports bind)
Facts = tuple[tuple[str, ...], tuple[str, ...]]


def _mac(key: bytes, path: str, digest: str, facts: Facts, signature: list[int] | None) -> str:
    names, imports = facts
    message = json.dumps([path, digest, list(names), list(imports), signature], separators=(",", ":")).encode()
    return hmac.digest(key, message, "sha256").hex()[:32]


def _strings(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    return None


class IndexCache:
    """The stored project index of one cache file: ``entries`` (path → entry, the file's
    ``"index"`` section, shared with :class:`~accumlint.run.cache.ResultCache`, which writes it),
    signed with ``secret``; ``today``: the day number entries are marked seen with.

    ``computed`` counts the files whose facts this run computed rather than found (a hook on
    how much of the index a run built); ``dirty``: whether an entry changed."""

    def __init__(self, entries: dict[str, Any], secret: bytes, today: int) -> None:
        self._entries = entries
        self._secret = secret
        self._today = today
        self.dirty = False
        self.computed = 0

    @classmethod
    def in_memory(cls) -> IndexCache:
        """An index kept in this process only (a language server's, between its checks): no
        cache file, a random key."""
        return cls({}, os.urandom(32), 0)

    def _verified(self, path: str, digest: str | None) -> tuple[dict[str, Any], Facts] | None:
        """The entry of ``path`` and its facts where it verifies (and is of ``digest``, if given)."""
        entry = self._entries.get(path)
        if not isinstance(entry, dict) or not isinstance(entry.get("digest"), str):
            return None
        if digest is not None and entry["digest"] != digest:
            return None
        names, imports = _strings(entry.get("names")), _strings(entry.get("imports"))
        signature = _stored_signature(entry)
        if names is None or imports is None or ("stat" in entry and signature is None):
            return None
        mac = entry.get("mac")
        if not isinstance(mac, str) or not hmac.compare_digest(
                mac, _mac(self._secret, path, entry["digest"], (names, imports), signature)):
            return None
        if entry.get("seen") != self._today:
            entry["seen"] = self._today
            self.dirty = True
        return entry, (names, imports)

    def unchanged(self, path: str) -> Facts | None:
        """The facts of the file at ``path`` (absolute) when its ``stat`` gives the signature
        stored with them (it need not be read), else None."""
        found = self._verified(path, None)
        if found is None or "stat" not in found[0]:
            return None
        try:
            now = os.stat(path)
        except OSError:
            return None
        return found[1] if list(signature_of(now)) == found[0]["stat"] else None

    def facts(self, path: str, data: bytes, digest: str, signature: Signature | None,
              compute: Callable[[bytes], Facts]) -> Facts:
        """The facts of the file at ``path`` (absolute) whose bytes ``data`` have the SHA-256
        ``digest`` (read with ``signature``, if known): the stored ones where they are of those
        bytes, else ``compute(data)``, stored."""
        found = self._verified(path, digest)
        kept = _kept_signature(signature)
        if found is not None:
            entry, facts = found
            if kept is not None and entry.get("stat") != kept:  # the next run need not read it
                self._put(path, digest, facts, kept)
            return facts
        self.computed += 1
        facts = compute(data)
        self._put(path, digest, facts, kept)
        return facts

    def _put(self, path: str, digest: str, facts: Facts, kept: list[int] | None) -> None:
        names, imports = facts
        entry: dict[str, Any] = {"digest": digest, "seen": self._today, "names": list(names),
                                 "imports": list(imports), "mac": _mac(self._secret, path, digest, facts, kept)}
        if kept is not None:
            entry["stat"] = kept
        self._entries[path] = entry
        self.dirty = True
