"""The byte prefilter: where in a file's undecoded bytes a rule's markers are called or defined.

A marker is a name (``backward``, ``device_count``, ``training_step``) without which a rule
cannot fire. All the markers of the selected rules are searched for in one pass over the
bytes (an Aho-Corasick automaton, ``ahocorasick_rs``), not one pass per marker: on the
transformers tree (53 MB, 24 markers) one pass takes about a tenth of the time of the
per-marker scans.

The pass reports leftmost-longest matches that do not overlap. Because every marker is a
whole identifier, the uses it finds are exactly those a search for each marker alone would
find: a marker that starts inside a longer match is preceded by an identifier byte, and one
that is a prefix of it is followed by one, so neither is a use (:func:`is_use`).

A use inside a string or a comment (``>>> loss.backward()`` in a docstring) is no use: where
a file has uses, its strings and comments are found by a scan of its bytes (:data:`_PROSE`,
the tokenizer's rules for them; ~100 MB/s), so such a file is neither decoded nor parsed.
In an f-string only the replacement fields are code (``f"{loss.backward()}"``); its literal
text is prose (``f"backward() with {n} inputs"``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from ahocorasick_rs import MATCHKIND_LEFTMOST_LONGEST, BytesAhoCorasick

from accumlint.source.source_facts import AUTOGRAD_CONTEXT

#: Bytes that continue an identifier (``\w`` of a bytes pattern): a marker preceded by one is
#: only the tail of a longer name.
_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_IDENTIFIER = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*\Z")
#: What follows a marker used as code: an opening parenthesis, and the first parameter's name.
_CALL_TAIL = re.compile(rb"\s*\(\s*(\w*)")
#: Markers whose use is a subscript, not a call (a mapping read: ``os.environ["WORLD_SIZE"]``).
SUBSCRIPTED_MARKERS = frozenset({b"environ"})
_SUBSCRIPT_TAIL = re.compile(rb"\s*\[")
_AUTOGRAD_CONTEXT = AUTOGRAD_CONTEXT.encode()


def is_use(data: bytes, start: int, marker: bytes) -> bool:
    """Whether the ``marker`` at offset ``start`` of ``data`` is a whole name that is called or defined.

    A call (``loss.backward(``, ``backward (``) or a definition (``def training_step(self``)
    counts, and so does the first argument of ``partial(`` (``partial(clip_grad_norm_, ...)``);
    a longer name that merely contains the marker (``register_backward_hook(``), a
    bare mention (``# then backward``) and an autograd ``Function``'s ``def backward(ctx``
    do not. Only the bytes around the marker are read: :class:`MarkerSearch` drops the uses
    inside strings and comments.
    """
    if start and data[start - 1] in _WORD_BYTES:
        return False
    tail = _CALL_TAIL.match(data, start + len(marker))
    if tail is None and marker in SUBSCRIPTED_MARKERS:
        return _SUBSCRIPT_TAIL.match(data, start + len(marker)) is not None  # `os.environ["WORLD_SIZE"]`
    if tail is None:
        # `partial(torch.nn.utils.clip_grad_norm_, ...)`: calling the partial calls the marker
        return _PARTIAL_HEAD.search(data, max(0, start - 120), start) is not None
    return not (tail.group(1) == _AUTOGRAD_CONTEXT and data[max(0, start - 4) : start] == b"def ")


#: the bytes before a name that is the first argument of ``functools.partial``
_PARTIAL_HEAD = re.compile(rb"\bpartial\(\s*(?:[A-Za-z_][A-Za-z0-9_]*\s*\.\s*)*\Z")


#: A comment or a string literal (its prefix aside), as Python's tokenizer reads them: a
#: backslash escapes the next character (in raw strings too, as far as the end is concerned),
#: a single-quoted string ends at its line's end at the latest, an unterminated one at the end
#: of the file. Exact for source in UTF-8 or a single-byte encoding, where a quote, a ``#`` or
#: a backslash byte is that character. (An f-string of Python 3.12+ that nests its own quotes
#: can shift the spans, within its line for a single-quoted one.)
_PROSE = re.compile(
    rb"#[^\r\n]*"
    rb'|"""(?:[^"\\]+|\\(?:\r\n|.)|"(?!""))*(?:"""|\Z)'
    rb"|'''(?:[^'\\]+|\\(?:\r\n|.)|'(?!''))*(?:'''|\Z)"
    rb'|"(?:[^"\\\r\n]+|\\(?:\r\n|.))*"?'
    rb"|'(?:[^'\\\r\n]+|\\(?:\r\n|.))*'?",
    re.S,
)
_PREFIX_BYTES = frozenset(b"rRbBuUfF")
_HASH = ord("#")
#: A PEP 263 coding declaration (line 1 or 2), and the encodings in which :data:`_PROSE` is exact.
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.M)
_BYTE_TRANSPARENT = re.compile(rb"(?i)(utf[-_]?8|ascii|us-ascii|latin[-_]?1|iso[-_]?8859[-_]?\d+|cp125\d)([-_].*)?")


def _scannable(data: bytes) -> bool:
    """Whether :data:`_PROSE` reads ``data`` as the interpreter would: the file decodes, in UTF-8
    or the single-byte encoding it declares (one that does not decode gets ``ACC000`` where a
    rule reads it, so its uses all count)."""
    head = data[: data.find(b"\n", data.find(b"\n") + 1) + 1 or len(data)]
    declared = _CODING.search(head)
    if declared is not None and not _BYTE_TRANSPARENT.fullmatch(declared.group(1)):
        return False
    try:
        data.decode("utf-8" if declared is None else declared.group(1).decode())
    except (LookupError, UnicodeDecodeError):
        return False
    return True


def _outside_prose(data: bytes, starts: list[int]) -> list[int]:
    """The offsets of ``starts`` (ascending) that lie outside the strings and comments of ``data``
    (all of them where its bytes cannot be scanned: :func:`_scannable`)."""
    if not _scannable(data):
        return starts
    code: list[int] = []
    spans = _PROSE.finditer(data, 0, starts[-1] + 1)  # a span cut at the last offset still covers it
    span = next(spans, None)
    for start in starts:
        while span is not None and span.end() <= start:
            span = next(spans, None)
        if span is None or start < span.start() or (
                _formatted(data, span.start()) and _in_replacement_field(data, span.start(), start)):
            code.append(start)
    return code


def code_offsets(data: bytes, starts: list[int]) -> list[int]:
    """The offsets of ``starts`` (ascending) that are not inside a string or a comment of ``data``
    (all of them where its bytes cannot be scanned)."""
    return _outside_prose(data, starts) if starts else []


def _formatted(data: bytes, start: int) -> bool:
    """Whether the span at ``start`` is an f-string (its replacement fields are code); a
    comment is not."""
    if data[start] == _HASH:
        return False
    begin = start
    while begin > 0 and start - begin < 2 and data[begin - 1] in _PREFIX_BYTES:
        begin -= 1
    return b"f" in data[begin:start].lower() and (begin == 0 or data[begin - 1] not in _WORD_BYTES)


def _in_replacement_field(data: bytes, quote: int, offset: int) -> bool:
    """Whether ``offset`` lies inside a replacement field of the f-string whose opening quote
    is at ``quote``: its braces counted from there, ``{{`` and ``}}`` outside a field being
    literal braces; a quoted string inside a field is skipped whole (``f"{d['}']}"``), so a
    field never ends early. Where the count is unsure it errs towards code (a superset)."""
    position = quote + (3 if data[quote:quote + 3] in (b'"""', b"'''") else 1)
    depth = 0
    while position < offset:
        byte = data[position]
        if depth == 0:
            if byte == _OPEN and data[position + 1] == _OPEN:
                position += 2
                continue
            if byte == _OPEN:
                depth = 1
        elif byte in _QUOTES:
            end = data.find(data[position:position + 1], position + 1)
            if end == -1 or end >= offset:
                return True  # inside a string in a field: code as far as this scan can tell
            position = end
        elif byte == _OPEN:
            depth += 1
        elif byte == _CLOSE:
            depth -= 1
        position += 1
    return depth > 0


_OPEN, _CLOSE = ord("{"), ord("}")
_QUOTES = frozenset(b"\"'")


class MarkerSearch:
    """One pass over a file's bytes for the uses (:func:`is_use`) of a set of markers in its code.

    Raises ``ValueError`` for a marker that is not an ASCII identifier (the single pass is
    exact only for identifiers; see the module docstring).
    """

    def __init__(self, markers: Iterable[bytes]) -> None:
        self.markers = tuple(sorted(set(markers)))
        bad = [marker for marker in self.markers if not _IDENTIFIER.match(marker)]
        if bad or not self.markers:
            raise ValueError(f"markers must be ASCII identifiers, got {bad or 'none'}")
        self._automaton = BytesAhoCorasick(list(self.markers), matchkind=MATCHKIND_LEFTMOST_LONGEST)

    def _uses(self, data: bytes, in_strings: bool) -> dict[int, bytes]:
        found = {
            start: self.markers[index]
            for index, start, _ in self._automaton.find_matches_as_indexes(data)
            if is_use(data, start, self.markers[index])
        }
        if not found or in_strings:
            return found
        return {start: found[start] for start in _outside_prose(data, list(found))}

    def uses(self, data: bytes, in_strings: bool = False) -> list[int]:
        """The offsets in ``data`` where one of the markers is called or defined in code, ascending
        (``in_strings``: in strings and comments too, as in a notebook, whose JSON holds its code
        in strings)."""
        return list(self._uses(data, in_strings))

    def used(self, data: bytes, in_strings: bool = False) -> set[bytes]:
        """The markers called or defined somewhere in the code of ``data`` (``in_strings``: see :meth:`uses`)."""
        return set(self._uses(data, in_strings).values())


@functools.lru_cache(maxsize=64)
def marker_search(markers: tuple[bytes, ...]) -> MarkerSearch:
    """The (cached) :class:`MarkerSearch` for ``markers``."""
    return MarkerSearch(markers)


class NeedlePattern:
    """A case-insensitive alternation of byte patterns, each behind a literal needle it starts
    with: one pass over the lowered bytes finds the needles (Aho-Corasick, overlapping), and
    only there is the pattern tried. Python's ``re`` tries an alternation at every position
    of a file (~30 MB/s); this runs at the speed of the pass.

    ``patterns`` maps each needle (lowercase) to the pattern that must match where it starts
    (lowercase bytes; it should begin with the needle). Raises ``ValueError`` for a needle
    that is empty or not lowercase.
    """

    def __init__(self, patterns: dict[bytes, bytes]) -> None:
        if any(not needle or needle != needle.lower() for needle in patterns):
            raise ValueError("needles must be non-empty lowercase bytes")
        self.needles = tuple(patterns)
        self.patterns = tuple(re.compile(patterns[needle], re.S) for needle in self.needles)
        self._automaton = BytesAhoCorasick(list(self.needles))

    def search(self, data: bytes) -> bool:
        """Whether one of the patterns matches somewhere in ``data`` (ASCII letters in any case)."""
        lowered = data.lower()
        return any(
            self.patterns[index].match(lowered, start) is not None
            for index, start, _ in self._automaton.find_matches_as_indexes(lowered, overlapping=True)
        )


class LedPattern:
    """A byte pattern each of whose matches begins with one of ``needles`` (a lookbehind may
    come first): tried only where a needle starts, found with ``bytes.find`` (memchr speed).
    ``re`` cannot skip ahead to a literal behind a lookbehind or inside an alternation and
    tries such a pattern at every offset (~80 MB/s: 0.7 s a pattern on the transformers
    tree). For a few needles: each is a pass over the bytes. Raises ``ValueError`` for no
    needles or an empty one.
    """

    def __init__(self, pattern: re.Pattern[bytes], needles: Iterable[bytes]) -> None:
        self.pattern = pattern
        self.needles = tuple(sorted(set(needles)))
        if not self.needles or not all(self.needles):
            raise ValueError("needles must be non-empty bytes")

    def search(self, data: bytes) -> bool:
        """Whether the pattern matches somewhere in ``data`` (as ``pattern.search(data)``)."""
        for needle in self.needles:
            start = data.find(needle)
            while start != -1:
                if self.pattern.match(data, start) is not None:
                    return True
                start = data.find(needle, start + 1)
        return False


@functools.lru_cache(maxsize=8)
def names_search(qualified: tuple[str, ...]) -> LedPattern | None:
    """One search for the last two names of every summarized function (``__call__`` aside), as
    whole words (None: no names)."""
    parts = sorted({part.encode() for name in qualified for part in name.split(".")[-2:] if part != "__call__"})
    if not parts:
        return None
    words = b"|".join(re.escape(part) for part in parts)
    return LedPattern(re.compile(rb"(?<![A-Za-z0-9_])(?:" + words + rb")(?![A-Za-z0-9_])"), parts)
