"""Extraction of the microbatch body: the body of the innermost loop that runs a backward
moves into a function (of the same module, or of ``utils.py`` beside it, imported absolutely,
under an alias, or relatively within a package) or into a method of a small class holding the
loop's fixed objects on ``self``, called once per microbatch. (:mod:`tests.metamorphic.trainer`
splits the loop into the methods of a trainer class with the same machinery.)

Every name of the enclosing function that the body reads is passed in; every name it assigns
that is read after it (later in the function, or in the next iteration) is returned and
assigned back. The body's statements run in the same order on the same values. Applies where
the loop lies directly in a function (not at module level), its body has no ``break``,
``continue``, ``return``, ``yield``, ``await``, ``global``, ``nonlocal`` or ``super()`` of its
own, and every value it reads is bound before the loop (else the call could not pass it)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import ComprehensionScope, FunctionScope, GlobalScope

from tests.metamorphic.base import (
    FreshNames,
    Program,
    backward_loops,
    children,
    code,
    enclosing_method,
    innermost,
    insert_import,
    metadata,
    own_control,
    parse,
    stmt,
    transformation,
    walk,
)


@dataclass
class _Extraction:
    """What a body needs: the module, the loop around it, the names it takes in (in order of
    first use), the names it gives back, those it takes that the loop never assigns, the reads
    of each name it takes, and the module-level names it reads."""

    module: cst.Module
    loop: cst.For | cst.While
    params: list[str]
    returns: list[str]
    fixed: list[str]  # params never assigned in the loop: the objects a class can hold
    accesses: dict[str, list[int]]  # param → ids of its Name reads in the body
    global_reads: set[str]


def _evaluation_order(node: cst.CSTNode):
    """Names under ``node`` in the order Python evaluates them (an assignment's value before its
    targets, a ``for``'s iterable before its target)."""
    if isinstance(node, cst.Name):
        yield node
        return
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
        # a nested scope reads at call time, after everything before it: its defaults first
        yield from (n for child in children(node) for n in _evaluation_order(child))
        return
    below = list(children(node))
    if isinstance(node, cst.Assign):
        below = [node.value, *node.targets]
    elif isinstance(node, cst.AnnAssign):
        below = [c for c in (node.value, node.annotation, node.target) if c is not None]
    elif isinstance(node, cst.NamedExpr):
        below = [node.value, node.target]
    elif isinstance(node, cst.For):
        below = [node.iter, node.target, node.body, *([node.orelse] if node.orelse else [])]
    for child in below:
        yield from _evaluation_order(child)


@dataclass
class _Flow:
    """The data flow of a region (statements of one function, run as a unit): the names it
    takes in (in order of first use), those it gives back, those it takes that ``loop`` never
    assigns, the reads of each name it takes, and the module-level names it reads with their
    reads."""

    params: list[str]
    returns: list[str]
    fixed: list[str]
    accesses: dict[str, list[int]]
    global_reads: set[str]
    global_accesses: dict[str, list[int]]


def _flow(
    scopes: Mapping,
    positions: Mapping,
    scope: FunctionScope,
    region: Sequence[cst.CSTNode],
    loop: cst.CSTNode,
    *,
    whole_loop: bool = False,
    bound: frozenset[str] = frozenset(),
    take_bound: bool = False,
) -> _Flow | None:
    """The flow of ``region`` (statements of ``scope``'s function inside ``loop``, run once per
    iteration; or, ``whole_loop``, ``[loop]`` itself, run once), or None where a value it takes
    may be unbound when it starts: a name counts as bound where it is a parameter, is assigned
    before ``loop`` outside it, is ``loop``'s target (unless ``whole_loop``) or is in ``bound``
    (surely assigned by the statements before the region). ``take_bound``: every name the
    region reads that is bound before it is taken in, even where the region's first use of it is
    an assignment (which may be conditional: the read then sees the value from before)."""
    inside = {id(n) for node in region for n in walk(node)}
    in_loop = {id(n) for n in walk(loop)}
    start = positions[loop].start.line
    order = {id(n): k for k, n in enumerate(n for node in region for n in _evaluation_order(node))}
    loop_targets = set() if whole_loop else _targets(loop)
    params: dict[str, int] = {}
    returns: dict[str, int] = {}
    fixed: set[str] = set()
    accesses: dict[str, list[int]] = {}
    by_name: dict[str, list] = {}
    for assignment in scope.assignments:
        by_name.setdefault(assignment.name, []).append(assignment)
    # `x += 1` reads x first
    augmented = {id(n.target) for node in region for n in walk(node) if isinstance(n, cst.AugAssign)}
    for name, assignments in by_name.items():
        references = {id(a.node): a.node for x in assignments for a in x.references}
        if any(not isinstance(n, cst.Name) for n in references.values()):
            return None  # a string annotation names it
        reads = list(references.values())
        stores = [_store_node(x.node) for x in assignments]
        reads_in = [n for n in reads if id(n) in inside]
        stores_in = [n for n in stores if id(n) in inside]
        reads_in += [n for n in stores_in if id(n) in augmented]
        if not reads_in and not stores_in:
            continue
        first = min(
            (order.get(id(n), 1 << 30), kind)
            for kind, group in (("read", reads_in), ("store", stores_in))
            for n in group
        )
        # assigned in the region and read after it (later in the function, or first thing in the
        # next iteration): given back; read before any assignment in it, or given back without
        # a sure assignment: taken in, so it must be bound before the region
        carried = first[1] == "read"
        if stores_in and ((carried and not whole_loop) or any(id(n) not in inside for n in reads)):
            returns[name] = first[0]
        needed = carried or (name in returns and not _surely_assigned(region, name))
        if needed or (take_bound and reads_in):
            bound_before = (
                name in bound
                or any(isinstance(x.node, cst.Param) for x in assignments)
                or any(
                    id(n) in loop_targets or (id(n) not in in_loop and positions[n].start.line < start) for n in stores
                )
            )
            if not bound_before:
                if needed:
                    return None
                continue
            params[name] = first[0]
            accesses[name] = [id(n) for n in reads_in]
            if not any(id(n) in in_loop for n in stores):
                fixed.add(name)
    global_accesses: dict[str, list[int]] = {}
    for node in (n for r in region for n in walk(r)):
        if not isinstance(node, cst.Name) or scopes.get(node) is None:
            continue
        for access in scopes[node].accesses[node.value]:
            if access.node is not node:
                continue
            for referent in access.referents:
                if isinstance(referent.scope, GlobalScope):
                    global_accesses.setdefault(node.value, []).append(id(node))
                elif (
                    isinstance(referent.scope, FunctionScope)
                    and referent.scope is not scope
                    and id(referent.node) not in inside
                    and not isinstance(referent.scope, ComprehensionScope)
                ):
                    return None  # an enclosing function's name (a closure): no plumbing for it
    ordered = sorted(params, key=params.__getitem__)
    return _Flow(
        ordered,
        sorted(returns, key=returns.__getitem__),
        [n for n in ordered if n in fixed],
        accesses,
        set(global_accesses),
        global_accesses,
    )


def _microbatch_loop(text: str) -> tuple[cst.Module, cst.For | cst.While, Mapping, Mapping, FunctionScope] | None:
    """The first innermost loop that runs a backward, with the module's scopes and positions and
    the loop's function scope, where that loop is a plain ``for``/``while`` (indented body, no
    ``else``) lying directly in a function of a top-level ``def`` or ``class``."""
    module = parse(text)
    if module is None:
        return None
    loops = innermost(backward_loops(module))
    if not loops:
        return None
    loop = loops[0]
    if not isinstance(loop.body, cst.IndentedBlock) or (isinstance(loop, cst.For) and loop.asynchronous):
        return None
    if getattr(loop, "orelse", None) is not None:
        return None
    resolved = metadata(module)
    if resolved is None:
        return None
    scopes, positions = resolved
    scope = scopes.get(loop)
    if not isinstance(scope, FunctionScope) or not any(_holds(s, loop) for s in module.body):
        return None
    return module, loop, scopes, positions, scope


@functools.lru_cache(maxsize=16)
def _analyse(text: str) -> _Extraction | None:
    found = _microbatch_loop(text)
    if found is None:
        return None
    module, loop, scopes, positions, scope = found
    if own_control(loop.body):
        return None
    flow = _flow(scopes, positions, scope, loop.body.body, loop)
    if flow is None:
        return None
    return _Extraction(module, loop, flow.params, flow.returns, flow.fixed, flow.accesses, flow.global_reads)


def _holds(statement: cst.CSTNode, loop: cst.CSTNode) -> bool:
    return isinstance(statement, (cst.FunctionDef, cst.ClassDef)) and any(n is loop for n in walk(statement))


def _targets(loop: cst.CSTNode) -> set[int]:
    return {id(n) for n in walk(loop.target)} if isinstance(loop, cst.For) else set()


def _store_node(node: cst.CSTNode) -> cst.CSTNode:
    if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Param)):
        return node.name
    return node


def _surely_assigned(statements: Sequence[cst.CSTNode], name: str) -> bool:
    """Whether one of ``statements`` is a simple assignment that binds ``name`` (on every path)."""
    for statement in statements:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                targets = (
                    [t.target for t in small.targets]
                    if isinstance(small, cst.Assign)
                    else ([small.target] if isinstance(small, (cst.AnnAssign, cst.AugAssign)) else [])
                )
                if any(isinstance(n, cst.Name) and n.value == name for t in targets for n in walk(t)):
                    return True
    return False


def _call_statement(call: str, returns: list[str]) -> cst.BaseStatement:
    if not returns:
        return stmt(f"{call}\n")
    if len(returns) == 1:
        return stmt(f"{returns[0]} = {call}\n")
    return stmt(f"{', '.join(returns)} = {call}\n")


def _return_line(returns: list[str]) -> list[cst.BaseStatement]:
    return [stmt(f"return {', '.join(returns)}\n")] if returns else []


def _function(name: str, params: list[str], body: cst.IndentedBlock, returns: list[str]) -> cst.FunctionDef:
    template = stmt(f"def {name}({', '.join(params)}):\n    pass\n")
    return template.with_changes(
        body=body.with_changes(body=[*body.body, *_return_line(returns)], header=cst.TrailingWhitespace()),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()],
    )


def _with_loop_body(
    module: cst.Module,
    loop: cst.CSTNode,
    statements: list[cst.BaseStatement],
    before: cst.CSTNode | None,
    prelude: list[cst.BaseStatement],
    also: dict[int, Callable[[cst.CSTNode], cst.CSTNode]] | None = None,
) -> cst.Module:
    """The module with the loop's body replaced by ``statements``, ``prelude`` statements right
    before the loop, ``before`` (a def) inserted before the module-level statement that holds
    the loop, and the nodes whose ids ``also`` names changed by its functions."""

    class Edit(cst.CSTTransformer):
        def on_leave(self, original_node, updated_node):  # type: ignore[no-untyped-def]
            if original_node is loop:
                changed = updated_node.with_changes(body=updated_node.body.with_changes(body=statements))
                return cst.FlattenSentinel([*prelude, changed]) if prelude else changed
            change = (also or {}).get(id(original_node))
            return change(updated_node) if change else updated_node

    edited = module.visit(Edit())
    if before is None:
        return edited
    body = list(edited.body)
    index = next(k for k, s in enumerate(module.body) if any(n is loop for n in walk(s)))
    body.insert(index, before)
    return edited.with_changes(body=body)


@transformation("own_method", "extract")
def extract_own_method(program: Program) -> Program | None:
    """In a method, the microbatch body → a new method of the same class right after it, called
    per microbatch as ``self.m(...)``: the objects already on ``self`` stay there, the other
    values it reads are arguments. Applies where :func:`extract_function` does and the loop lies
    directly in a method whose first parameter is ``self``, which the body reads and never
    assigns."""
    if not program.is_single or "self" not in program.text:
        return None
    module = parse(program.text)
    loops = innermost(backward_loops(module)) if module is not None else []
    if not loops or enclosing_method(module, loops[0]) is None:
        return None  # checked before the scope analysis, which costs more
    extraction = _analyse(program.text)
    if extraction is None or "self" not in extraction.params or "self" in extraction.returns:
        return None
    found = enclosing_method(extraction.module, extraction.loop)
    if found is None:
        return None
    owner, method = found
    name = FreshNames(program.text)("_microbatch_step_")
    params = [p for p in extraction.params if p != "self"]
    helper = _function(name, ["self", *params], extraction.loop.body, extraction.returns)
    helper = helper.with_changes(leading_lines=[cst.EmptyLine(indent=False)])
    call = _call_statement(f"self.{name}({', '.join(params)})", extraction.returns)
    index = next(k for k, item in enumerate(owner.body.body) if item is method)

    def add(updated: cst.ClassDef) -> cst.ClassDef:
        body = list(updated.body.body)
        body.insert(index + 1, helper)
        return updated.with_changes(body=updated.body.with_changes(body=body))

    module = _with_loop_body(extraction.module, extraction.loop, [call], None, [], {id(owner): add})
    return program.replace({program.main: module.code})


def _call(callee: str, extraction: _Extraction, extra: list[str] = ()) -> cst.BaseStatement:
    return _call_statement(f"{callee}({', '.join([*extraction.params, *extra])})", extraction.returns)


@transformation("function", "extract")
def extract_function(program: Program) -> Program | None:
    """The microbatch body → a module-level function of the same file, called per microbatch
    with the objects and values it reads passed as arguments (see the module's docstring).
    Applies to a one-file program whose first innermost backward loop qualifies."""
    if not program.is_single:
        return None
    extraction = _analyse(program.text)
    if extraction is None:
        return None
    name = FreshNames(program.text)("microbatch_step_")
    helper = _function(name, extraction.params, extraction.loop.body, extraction.returns)
    module = _with_loop_body(extraction.module, extraction.loop, [_call(name, extraction)], helper, [])
    return program.replace({program.main: module.code})


@transformation("method", "extract")
def extract_method(program: Program) -> Program | None:
    """The microbatch body → the ``run`` method of a new class whose instance, built right
    before the loop, holds on ``self`` the objects the body reads and the loop never
    reassigns (model, optimizer, scaler, A...); the per-microbatch values are arguments.
    Applies where :func:`extract_function` does and the body reads at least one such object."""
    if not program.is_single:
        return None
    extraction = _analyse(program.text)
    if extraction is None or not extraction.fixed:
        return None
    fresh = FreshNames(program.text)
    cls, instance, receiver = fresh("MicrobatchStep"), fresh("stepper_"), "self"
    if "self" in extraction.params:
        receiver = fresh("step_self_")
    fields = {name: ("owner" if name == receiver else name) for name in extraction.fixed}
    on_self = {
        node_id: f"{receiver}.{fields[name]}" for name in extraction.fixed for node_id in extraction.accesses[name]
    }

    class Rewrite(cst.CSTTransformer):
        def leave_Name(self, original_node: cst.Name, updated_node: cst.Name):  # type: ignore[no-untyped-def]
            new = on_self.get(id(original_node))
            return cst.parse_expression(new) if new else updated_node

    body = extraction.loop.body.visit(Rewrite())
    args = [name for name in extraction.params if name not in fields]
    init_lines = "".join(f"        {receiver}.{fields[n]} = {n}\n" for n in extraction.fixed)
    template = stmt(
        f"class {cls}:\n    def __init__({receiver}, {', '.join(extraction.fixed)}):\n{init_lines}\n"
        f"    def run({', '.join([receiver, *args])}):\n        pass\n"
    )
    run = template.body.body[1]
    run = run.with_changes(
        body=body.with_changes(body=[*body.body, *_return_line(extraction.returns)], header=cst.TrailingWhitespace())
    )
    holder = template.with_changes(
        body=template.body.with_changes(body=[template.body.body[0], run]),
        leading_lines=[cst.EmptyLine(), cst.EmptyLine()],
    )
    prelude = [stmt(f"{instance} = {cls}({', '.join(extraction.fixed)})\n")]
    call = _call_statement(f"{instance}.run({', '.join(args)})", extraction.returns)
    module = _with_loop_body(extraction.module, extraction.loop, [call], holder, prelude)
    return program.replace({program.main: module.code})


def _top_imports(module: cst.Module) -> tuple[list[cst.BaseStatement], set[str]]:
    """The module-level import statements (``__future__`` first) and the names they bind."""
    statements, names = [], set()
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine) and all(
            isinstance(s, (cst.Import, cst.ImportFrom)) for s in statement.body
        ):
            for small in statement.body:
                if isinstance(small.names, cst.ImportStar):
                    return [], set()
                for alias in small.names:
                    bound = alias.asname.name if alias.asname else alias.name
                    while isinstance(bound, cst.Attribute):
                        bound = bound.value
                    names.add(bound.value)
            statements.append(statement.with_changes(leading_lines=[]))
    statements.sort(key=lambda s: "__future__" not in code(s))
    return statements, names


def _extract_module(program: Program, style: str) -> Program | None:
    """``style``: ``from`` (``from utils import f``), ``alias`` (``import utils as helpers``) or
    ``relative`` (the program becomes a package ``pkg/``: ``from .utils import f``)."""
    if not program.is_single or program.main == "utils.py" or "/" in program.main:
        return None
    extraction = _analyse(program.text)
    if extraction is None:
        return None
    fresh = FreshNames(program.text)
    imports, imported = _top_imports(extraction.module)
    # the script's other module-level names (constants, functions) are not in utils.py: passed in
    extra = sorted(extraction.global_reads - imported - set(extraction.params))
    name = fresh("microbatch_step_")
    helper = _function(name, [*extraction.params, *extra], extraction.loop.body, extraction.returns)
    helper_text = cst.Module(body=[*imports, helper]).code
    if style == "alias":
        as_name = "helpers" if "helpers" not in fresh.taken else fresh("helpers")
        call, import_line = _call(f"{as_name}.{name}", extraction, extra), f"import utils as {as_name}\n"
    else:
        relative = "." if style == "relative" else ""
        call, import_line = _call(name, extraction, extra), f"from {relative}utils import {name}\n"
    module = _with_loop_body(extraction.module, extraction.loop, [call], None, [])
    module = insert_import(module, import_line)
    if style != "relative":
        return program.replace({program.main: module.code, "utils.py": helper_text})
    package = "pkg" if "pkg" not in fresh.taken else fresh("pkg")
    # run as the package's module, the script needs an importable name
    main = f"{package}/{program.main if program.main.removesuffix('.py').isidentifier() else 'train.py'}"
    return Program(((f"{package}/__init__.py", ""), (main, module.code), (f"{package}/utils.py", helper_text)), main)


@transformation("module", "extract")
def extract_module(program: Program) -> Program | None:
    """The microbatch body → a function of ``utils.py`` beside the script (``from utils import
    f``), called per microbatch; the script's imports are repeated there and its other
    module-level names the body reads are passed as arguments. Applies where
    :func:`extract_function` does (the result is a two-file project)."""
    return _extract_module(program, "from")


@transformation("module_alias", "extract")
def extract_module_alias(program: Program) -> Program | None:
    """As ``extract.module``, imported as ``import utils as helpers`` and called
    ``helpers.f(...)``."""
    return _extract_module(program, "alias")


@transformation("module_relative", "extract")
def extract_module_relative(program: Program) -> Program | None:
    """As ``extract.module``, with the program turned into a package (``pkg/__init__.py``, the
    script as ``pkg/NAME.py``, or ``pkg/train.py`` where its name is no module name, run as
    ``python -m pkg.NAME``, and ``pkg/utils.py``) whose script imports the function relatively:
    ``from .utils import f``. Applies where ``extract.module`` does."""
    return _extract_module(program, "relative")
