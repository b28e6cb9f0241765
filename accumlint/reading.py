"""Reading a file to check or fix: regular files only, and never more than the size limit plus one byte.

A FIFO named ``train.py`` would block a plain ``open`` forever, and a symlink to ``/dev/zero``
would fill the memory before a size check after the read: the file is opened without
blocking, its type taken from the open descriptor (no race with a rename in between), and at
most :data:`MAX_SOURCE_BYTES` + 1 bytes are read.
"""

from __future__ import annotations

import errno
import os
import stat

#: A file larger than this is not checked: LibCST's tree would take ~1.6 GB
#: (:data:`accumlint.engine.PARSE_MEMORY_PER_BYTE`).
MAX_SOURCE_BYTES = 4 * 1024 * 1024
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
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data, max(info.st_size, len(data)), signature_of(info)
    finally:
        os.close(fd)


def _check_kind(path: str | os.PathLike[str], mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _KINDS if test(mode)), "a special file")
        raise NotARegularFile(os.fsdecode(path), kind)
