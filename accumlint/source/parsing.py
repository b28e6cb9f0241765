"""The parser defences: decoding, the interpreter's parse, nesting limits, a large-stack thread.

Decoding as the interpreter does, the interpreter's parse, the limits that keep LibCST's native
parser (which recurses without a depth check) off the end of its stack, and the thread with a
large stack it runs on. A file past a limit gets ``ACC000`` from the engine, never a crash of
the run."""

from __future__ import annotations

import ast
import os
import queue
import re
import threading

import libcst as cst

from accumlint import heap


def syntax_error_position(text: str, exc: cst.ParserSyntaxError) -> tuple[int, int, str] | None:
    """Where the interpreter puts a syntax error that LibCST reported (LibCST's own position is
    often a token late), or None where the interpreter compiles ``text``: then it is no syntax
    error, but code LibCST cannot parse (tab-then-spaces indentation, thousands of implicitly
    concatenated strings).

    Falls back to LibCST's position and message where the interpreter gives up on the text.
    """
    try:
        ast.parse(text)
    except SyntaxError as err:
        return err.lineno or 1, err.offset or 1, err.msg
    except (RecursionError, MemoryError, ValueError):
        return exc.raw_line, exc.raw_column + 1, exc.message
    return None


#: the reason of the ``ACC000`` of a file the interpreter's parser gives up on
TOO_DEEP = "nesting too deep or code too large for the parser"


def interpreter_parse(text: str) -> ast.Module | tuple[int, int, str]:
    """The ``ast`` module of ``text``, or (line, column, reason) of its first syntax error."""
    try:
        return ast.parse(text)
    except SyntaxError as err:
        return err.lineno or 1, err.offset or 1, f"syntax error: {err.msg}"
    except (RecursionError, MemoryError):  # the interpreter's own nesting limit, or a worker's memory limit
        return 1, 1, TOO_DEEP
    except ValueError as err:  # null bytes
        return 1, 1, f"syntax error: {err}"


#: A file at least this large is judged by the interpreter's parser alone (every file goes
#: through it before LibCST's; a smaller one it rejects may still be newer syntax that LibCST
#: reads): the interpreter's nesting limits (200 brackets, ~3,000 nested operators) and
#: :data:`MAX_CHAIN` keep LibCST's native parser, which recurses without a depth check, off
#: the end of its stack.
INTERPRETER_FIRST_ABOVE = 64 * 1024
#: The longest flat chain (``a and b and ...``, ``a < b < ...``) handed to LibCST: the
#: interpreter's tree keeps it flat, LibCST's parser recurses once per operand.
MAX_CHAIN = 5000
#: The stack of the thread that runs LibCST's native parser (address space, touched only as
#: deep as a file nests): 64 times the usual 8 MiB, so no file under
#: :data:`INTERPRETER_FIRST_ABOVE` can nest deep enough to overflow it.
PARSER_STACK = 512 * 1024 * 1024
_stack_lock = threading.Lock()


_BRACKETS = b"()[]{}"
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(_BRACKETS)))
#: the interpreter's limit on nested brackets (its tokenizer's MAXLEVEL)
MAX_BRACKET_DEPTH = 200


def _bracket_depth_exceeds(data: bytes, limit: int = MAX_BRACKET_DEPTH) -> bool:
    """Whether the brackets in ``data`` (strings and comments included) nest deeper than ``limit``.

    An upper bound on the real nesting, read from the bytes: True sends the file through the
    interpreter's parser, whose exact limit rejects a real case before LibCST (whose time and
    memory grow with the square of the depth: 5,000 brackets take it 2.6 GB) sees it.
    """
    brackets = data.translate(None, _NOT_BRACKETS)
    if brackets.count(b"(") + brackets.count(b"[") + brackets.count(b"{") <= limit:
        return False
    depth = 0
    for byte in brackets:
        if byte in b"([{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth = max(depth - 1, 0)
    return False


#: Prefix operators nest like brackets (the interpreter gives up near 2,700 of them with a
#: RecursionError): a run of :data:`MAX_BRACKET_DEPTH` of one kind sends the file through its
#: parser. A keyword's pattern runs only where the keyword occurs that often at all.
_PREFIX_RUNS: tuple[tuple[bytes, re.Pattern[bytes]], ...] = (
    (b"", re.compile(rb"[-+~][-+~\s]{%d}" % (MAX_BRACKET_DEPTH - 1))),
    (b"not", re.compile(rb"(?:\bnot\s+){%d}" % MAX_BRACKET_DEPTH)),
    (b"await", re.compile(rb"(?:\bawait\s+){%d}" % MAX_BRACKET_DEPTH)),
    (b"lambda", re.compile(rb"(?:\blambda\b[^:\n]*:\s*){%d}" % MAX_BRACKET_DEPTH)),
)


def nests_deep(data: bytes) -> bool:
    """Whether brackets or a run of prefix operators (``- - -x``, ``not not x``, ``lambda:
    lambda: x``) in ``data`` may nest deeper than :data:`MAX_BRACKET_DEPTH` (an upper bound,
    strings and comments included)."""
    return _bracket_depth_exceeds(data) or any(
        (not keyword or data.count(keyword) >= MAX_BRACKET_DEPTH) and pattern.search(data) is not None
        for keyword, pattern in _PREFIX_RUNS
    )


#: every token that can join two operands of a boolean operation or a comparison
_CHAIN_TOKENS = re.compile(rb"\b(?:and|or|in|is)\b|[<>!=]=|[<>]")


def may_chain(data: bytes) -> bool:
    """Whether ``data`` holds enough ``and``/``or``/comparison tokens (strings and comments
    included) for one expression of more than :data:`MAX_CHAIN` operands: if not, the walk of
    :func:`longest_chain` is not needed."""
    return len(_CHAIN_TOKENS.findall(data)) >= MAX_CHAIN


def longest_chain(tree: ast.AST) -> int:
    """The most operands of one boolean operation or comparison in ``tree``."""
    longest = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.BoolOp):
            longest = max(longest, len(node.values))
        elif isinstance(node, ast.Compare):
            longest = max(longest, len(node.ops) + 1)
    return longest


def parse_module(text: str) -> cst.Module:
    """``libcst.parse_module`` on this process's parser thread, whose stack is :data:`PARSER_STACK`.

    LibCST's native parser recurses once per nesting level and has no depth check: on the
    usual 8 MiB stack ~1,300 nested brackets end the process with a segmentation fault.
    The thread lives as long as the process: a fresh thread per file made each parse about
    a third slower (the native parser's per-thread state starts cold). Raises what
    ``parse_module`` raises.

    LibCST takes only ``\n`` as the end of a file's last line: the final ``\r`` of a file with
    CR-only line ends was missing from the module's code (and from every fix written back);
    the module says it has one.
    """
    reply: queue.SimpleQueue[tuple[bool, object]] = queue.SimpleQueue()
    _parser_requests().put((text, reply))
    parsed, outcome = reply.get()
    if not parsed:
        raise outcome  # type: ignore[misc]
    module: cst.Module = outcome  # type: ignore[assignment]
    if text.endswith("\r") and module.default_newline == "\r" and not module.has_trailing_newline:
        module = module.with_changes(has_trailing_newline=True)
    return module


_parser: tuple[int, queue.SimpleQueue[tuple[str, queue.SimpleQueue[tuple[bool, object]]]]] | None = None


def start_parser() -> None:
    """Start this process's parser thread now (else at the first parse): a worker whose memory
    is bounded maps its :data:`PARSER_STACK` before the bound is set, not past it."""
    _parser_requests()


def _parser_requests() -> queue.SimpleQueue[tuple[str, queue.SimpleQueue[tuple[bool, object]]]]:
    """The request queue of this process's parser thread, started on first use (again in a
    forked child, which inherits the queue but not the thread)."""
    global _parser
    with _stack_lock:
        if _parser is None or _parser[0] != os.getpid():
            requests: queue.SimpleQueue[tuple[str, queue.SimpleQueue[tuple[bool, object]]]] = queue.SimpleQueue()
            heap.one_arena()  # the parse's peak is freed where the next stage can reuse and trim it
            previous = threading.stack_size(PARSER_STACK)  # process-wide: set only for this thread
            try:
                threading.Thread(target=_serve, args=(requests,), name="accumlint-parse", daemon=True).start()
            finally:
                threading.stack_size(previous)
            _parser = (os.getpid(), requests)
        return _parser[1]


def _serve(requests: queue.SimpleQueue[tuple[str, queue.SimpleQueue[tuple[bool, object]]]]) -> None:
    while True:
        text, reply = requests.get()
        try:
            reply.put((True, cst.parse_module(text)))
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
            reply.put((False, exc))
        del text, reply  # hold nothing of a finished file while waiting for the next
