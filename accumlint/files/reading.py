"""Reading committed or user content: regular files only, and never more than a size limit plus one byte.

A FIFO named ``train.py`` would block a plain ``open`` forever, and a symlink to ``/dev/zero``
would fill the memory before a size check after the read: the file is opened without
blocking, its type taken from the open descriptor (no race with a rename in between), and at
most the limit + 1 bytes are read. Every read of a file the user or a clone controls goes
through here: sources (:func:`read_source`, :func:`read_signed`), notebooks (a larger bound:
:func:`source_limit`), ignore and configuration files (:func:`read_bounded_text`), and stdin
(:func:`read_stream`, which has no type to check, only the bound).
"""

from __future__ import annotations

import codecs
import errno
import io
import os
import stat
import tokenize
from collections.abc import Callable
from typing import BinaryIO

#: the suffix of a Jupyter notebook's file
NOTEBOOK_SUFFIX = ".ipynb"


def is_notebook(path: str) -> bool:
    """Whether ``path`` names a Jupyter notebook (here, not in :mod:`accumlint.pipeline.notebook`: every
    run asks it of each file, and the notebook reader need not load for that)."""
    return path.lower().endswith(NOTEBOOK_SUFFIX)


#: A file larger than this is not checked: LibCST's tree would take ~1.6 GB
#: (:data:`accumlint.pipeline.engine.PARSE_MEMORY_PER_BYTE`).
MAX_SOURCE_BYTES = 4 * 1024 * 1024
#: A notebook's JSON may be this large: its outputs (plots, tables) are most of it and are not
#: checked; the limit on what is parsed, :data:`MAX_SOURCE_BYTES`, applies to its joined code cells.
#: Reading the JSON takes about four times its size (bytes, text, objects, the copy sent to a
#: worker: a 120 MiB notebook peaked at 540 MB, a 240 MiB one at 1 GB); GitHub refuses files over 100 MiB.
MAX_NOTEBOOK_BYTES = 128 * 1024 * 1024
#: An ignore file (``.gitignore``, ``.git/info/exclude``) or a ``pyproject.toml`` larger than this
#: is not used: far more than any written by hand, and read whole (pathspec, tomllib) at each run.
MAX_CONFIG_BYTES = 1024 * 1024
_CHUNK = 1 << 20
_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class NotARegularFile(Exception):
    """The path names a FIFO, a device or a socket: it is skipped, not read."""

    def __init__(self, path: str, kind: str) -> None:
        super().__init__(f"{path}: skipped: {kind}, not a regular file")
        self.kind = kind


class FileTooLarge(Exception):
    """The file holds more than the limit its reader allows: it is not used."""

    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(f"{path}: {too_large_reason(size, limit)}")
        self.size = size
        self.limit = limit


def too_large_reason(size: int | None, limit: int) -> str:
    """``larger than 1 MiB (6.0 MiB)``: the reason a file of ``size`` bytes (None: unknown, a
    stream) is refused under ``limit`` bytes, in MiB."""
    measured = f" ({size / 2**20:.1f} MiB)" if size is not None else ""
    return f"larger than {limit / 2**20:g} MiB{measured}"


def why_unread(exc: OSError | NotARegularFile | FileTooLarge) -> str:
    """What a reader's exception says about the file, without its path: ``a FIFO, not a regular
    file``, ``larger than 1 MiB (6.0 MiB)``, ``Permission denied``."""
    if isinstance(exc, NotARegularFile):
        return f"{exc.kind}, not a regular file"
    if isinstance(exc, FileTooLarge):
        return too_large_reason(exc.size, exc.limit)
    return exc.strerror or str(exc) or type(exc).__name__


def source_limit(path: str | os.PathLike[str]) -> int:
    """The bytes a run reads of the file at ``path`` at most: :data:`MAX_NOTEBOOK_BYTES` for a
    notebook, else :data:`MAX_SOURCE_BYTES`."""
    return MAX_NOTEBOOK_BYTES if is_notebook(os.fspath(path)) else MAX_SOURCE_BYTES


#: what a file's metadata says of its bytes: (size, mtime, ctime in ns, inode, device); a
#: write changes the ctime, which no tool sets back
Signature = tuple[int, int, int, int, int]


def signature_of(info: os.stat_result) -> Signature:
    """The :data:`Signature` of a ``stat`` result."""
    return (info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev)


def read_source(path: str | os.PathLike[str], limit: int = MAX_SOURCE_BYTES) -> tuple[bytes, int]:
    """The bytes of the regular file at ``path`` (following symlinks), at most ``limit`` + 1 of
    them, and the file's size in bytes (``len(data) > limit``: too large, and ``data`` is a prefix).

    Raises :class:`NotARegularFile` for a FIFO, device or socket, ``IsADirectoryError`` for a
    directory and ``OSError`` for a file that cannot be opened or read.
    """
    data, size, _ = read_signed(path, limit)
    return data, size


def read_signed(path: str | os.PathLike[str], limit: int = MAX_SOURCE_BYTES) -> tuple[bytes, int, Signature]:
    """:func:`read_source`, and the file's :data:`Signature` as it was before the read (a write
    during the read leaves a signature that no longer matches, never one that matches new bytes)."""
    _check_kind(path, os.stat(path).st_mode)  # a socket cannot even be opened
    fd = os.open(path, _FLAGS)
    try:
        info = os.fstat(fd)
        _check_kind(path, info.st_mode)  # replaced since the stat
        data = _read_upto(lambda size: os.read(fd, size), limit)
        return data, max(info.st_size, len(data)), signature_of(info)
    finally:
        os.close(fd)


def read_bounded_text(path: str | os.PathLike[str], limit: int = MAX_CONFIG_BYTES, errors: str = "strict") -> str:
    """The text (UTF-8, decoded with ``errors``) of the regular file at ``path``, a small file
    such as a ``.gitignore`` or a ``pyproject.toml`` that is used whole or not at all.

    Raises :class:`FileTooLarge` past ``limit`` bytes (having read ``limit`` + 1 of them),
    :class:`NotARegularFile`, ``IsADirectoryError``, ``OSError`` as :func:`read_source` does,
    and ``UnicodeDecodeError`` where ``errors`` is ``"strict"`` and the bytes are not UTF-8.
    """
    data, size = read_source(path, limit)
    if len(data) > limit:
        raise FileTooLarge(os.fsdecode(path), size, limit)
    return data.decode("utf-8", errors)


def read_stream(stream: BinaryIO, limit: int = MAX_SOURCE_BYTES) -> bytes:
    """At most ``limit`` + 1 bytes of ``stream`` (stdin): more than ``limit`` means too large, and
    the rest is not read (``check - < /dev/zero`` must not read forever)."""
    return _read_upto(stream.read, limit)


def _read_upto(read: Callable[[int], bytes], limit: int) -> bytes:
    """``read(size)`` called in chunks until it returns nothing or ``limit`` + 1 bytes are in."""
    chunks = []
    left = limit + 1
    while left > 0:
        chunk = read(min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _check_kind(path: str | os.PathLike[str], mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a special file")
        raise NotARegularFile(os.fsdecode(path), kind)


def decode_source(data: bytes) -> str:
    """Decode a Python file as the interpreter does (PEP 263 coding line, UTF-8 BOM, default UTF-8).

    Raises ``SyntaxError`` for an unknown coding declaration and ``UnicodeDecodeError`` for
    bytes that the declared encoding cannot decode.
    """
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        if "invalid or missing encoding declaration" not in str(exc):
            raise
        # the first lines are not UTF-8 and declare nothing: decode as UTF-8 so that the
        # UnicodeDecodeError says where the bad byte is
        encoding = "utf-8-sig" if data.startswith(codecs.BOM_UTF8) else "utf-8"
    return data.decode(encoding)
