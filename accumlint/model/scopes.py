"""What the statement walk (:mod:`accumlint.model.statement_walk`) produces: the control-flow frames
around a statement, the sites (calls and assignments in execution order) and the scope they
belong to."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import libcst as cst

from accumlint.model.callgraph import Inline
from accumlint.model.names import (
    dotted,
)


class FrameKind(str, Enum):
    LOOP = "loop"
    IF = "if"  # branch "body" or "orelse"
    GUARD = "guard"  # statements after `if cond: continue` run only when cond is false
    WITH = "with"
    HANDLER = "except handler"
    HELPER = "helper call"
    MATCH = "match case"


@dataclass(frozen=True, eq=False)
class Frame:
    """A control construct around a site. ``node`` is the loop / if / with / try / call node
    (for IF, also a conditional expression ``a if cond else b`` around a call in one arm)."""

    kind: FrameKind
    node: cst.CSTNode
    branch: str = ""  # for IF: "body" or "orelse"
    #: in an inlined helper: the condition rewritten into the caller's names (``if update_grad:``
    #: in ``scaler(loss, opt, update_grad=(i + 1) % A == 0)`` tests the caller's boundary)
    bound: cst.BaseExpression | None = None
    #: the inlined call whose names ``bound`` is rewritten from, on first use (rewriting costs)
    binder: Inline | None = None

    @property
    def test(self) -> cst.BaseExpression | None:
        """The condition of an IF or GUARD frame, or a while loop's test; for the IF frame of
        one candidate of ``f = a if cond else b``, ``cond``."""
        if self.binder is not None:
            source = self.node.test if isinstance(self.node, (cst.If, cst.IfExp)) else None
            object.__setattr__(self, "bound", self.binder.rewrite(source) if source is not None else None)
            object.__setattr__(self, "binder", None)
        if self.bound is not None:
            return self.bound
        if isinstance(self.node, (cst.If, cst.While, cst.IfExp)):
            return self.node.test
        return None


@dataclass(eq=False)
class Scope:
    """A function (or the module's top level) whose statements were walked."""

    node: cst.FunctionDef | cst.Module
    class_def: cst.ClassDef | None
    sites: list[Site] = field(default_factory=list)
    loop_spans: dict[cst.CSTNode, tuple[int, int]] = field(default_factory=dict)  # loop → (first, end) order
    statement_orders: dict[int, int] = field(default_factory=dict)  # id(compound statement) → its first order
    #: id(call) → the inlined calls of it; id(inlined call) → the `return` sites of its body
    inlined: dict[int, list[Inline]] = field(default_factory=dict)
    returns: dict[int, list[Site]] = field(default_factory=dict)
    #: in a framework-owned loop: dotted counter name → its value on the first microbatch
    #: (``engine.state.iteration`` → 1; :mod:`accumlint.model.owned_loops`)
    counter_starts: dict[str, int] = field(default_factory=dict)
    #: in a framework-owned loop: dotted names the framework binds → their role's value (``"optimizer"``)
    framework_roles: dict[str, str] = field(default_factory=dict)
    #: target name → the sites of :attr:`sites` that bind it, in order (:meth:`assignments_to`),
    #: indexed up to site ``_indexed``
    _bound: dict[str, list[Site]] = field(default_factory=dict, init=False, repr=False)
    _indexed: int = field(default=0, init=False, repr=False)

    def assignments_to(self, name: str) -> list[Site]:
        """The sites that bind ``name`` (one of their ``targets``), in execution order. An index
        kept beside :attr:`sites` (which the walk only appends to), brought up to date on each call:
        the data-flow questions ask it for one name at a time, many times per scope."""
        if self._indexed < len(self.sites):
            bound = self._bound
            for site in self.sites[self._indexed:]:
                for target in dict.fromkeys(site.targets):
                    if target is not None:
                        bound.setdefault(target, []).append(site)
            self._indexed = len(self.sites)
        return self._bound.get(name, [])

    def returns_of(self, call: cst.Call) -> list[Site]:
        """The ``return`` sites (in the helper's names) of the helpers ``call`` was inlined to."""
        found: list[Site] = []
        for inline in self.inlined.get(id(call), ()):
            found.extend(self.returns.get(id(inline), ()))
        return found

    def bound_value(self, expression: cst.BaseExpression, call: cst.Call) -> cst.BaseExpression:
        """``expression``, read in the code around ``call`` (a call in an inlined helper's body),
        rewritten into the scope's own names: a parameter becomes its argument, or its literal
        default when the caller does not pass it (``reduction=loss_reduction`` in a forward called
        as ``model(x, y)`` → ``"mean"``). Unchanged when ``call`` is the scope's own code or the
        value is unknown (``*args``, a parameter the helper reassigns)."""
        site = next((s for s in self.sites if s.call is call), None)
        if site is None or site.inline is None:
            return expression
        root = (dotted(expression) or "").split(".", 1)[0]
        if any(s.inline is site.inline and root in s.targets and s.order < site.order for s in self.sites):
            return expression  # the helper rebinds the parameter before the call
        value, where = site.inline.resolve(expression)
        return value if where is None else expression

    def within(self, loop: cst.CSTNode) -> list[Site]:
        """The sites inside one of this scope's own loops, in execution order."""
        start, end = self.loop_spans[loop]
        return self.sites[start:end]

    def inlining_depth(self, loop: cst.CSTNode) -> int:
        """How many inlined calls this scope's walk went through to reach ``loop`` (0: a loop
        of the scope's own code, or one with no site to tell)."""
        start, end = self.loop_spans[loop]
        inline = self.sites[start].inline if start < end else None
        return len(inline.chain()) if inline is not None else 0

    @property
    def name(self) -> str:
        return self.node.name.value if isinstance(self.node, cst.FunctionDef) else "<module>"


class _WeakScope:
    """A dataclass field that holds its :class:`Scope` by weak reference.

    A scope lists its sites and each site names its scope: held strongly, that cycle keeps
    the file's whole LibCST tree alive until the garbage collector's next full pass, so the
    memory of a large file is not given back before the next file is parsed. The model's
    scope list owns the scopes; a site read after its model is gone has no scope (None).
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = f"_{name}_ref"

    def __get__(self, site: Any, owner: type | None = None) -> Scope:
        if site is None:
            raise AttributeError("no default")  # the dataclass field is required
        return site.__dict__[self.attribute]()

    def __set__(self, site: Any, scope: Scope) -> None:
        site.__dict__[self.attribute] = weakref.ref(scope)


def unpacked(value: cst.BaseExpression | None, position: int, count: int) -> cst.BaseExpression | None:
    """The part of an assigned (or returned) ``value`` that lands in target ``position`` of
    ``count``: the value itself for one target, the matching element of a tuple or list literal of
    ``count`` elements; None otherwise (a call's result, a starred or mismatched unpacking)."""
    if count == 1:
        return value
    if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == count:
        return value.elements[position].value
    return None


@dataclass(eq=False)
class Site:
    """A call or an assignment at one place of a scope.

    ``order`` is the execution order inside the scope (inlined helper sites included);
    ``frames`` go from the outermost to the innermost construct.
    """

    node: cst.CSTNode  # the Call, or the assignment statement, or the Return
    statement: cst.BaseSmallStatement
    frames: tuple[Frame, ...]
    order: int
    scope: Scope = _WeakScope()  # type: ignore[assignment]  # required: the descriptor has no default
    call: cst.Call | None = None
    targets: tuple[str | None, ...] = ()  # dotted names bound by an assignment (None: not a name)
    value: cst.BaseExpression | None = None  # the assigned value (for an AugAssign: the operand)
    augmented: cst.BaseAugOp | None = None
    is_return: bool = False
    helper: cst.FunctionDef | None = None  # set on sites that came from an inlined helper
    #: the inlined call this site is part of (its bindings and the calls around it)
    inline: Inline | None = None
    #: the library function a call stands for (``self.clip_fn = partial(clip_grad_norm_, ...)``)
    alias: str | None = None
    #: the call was followed into a function of the project (it is no library call of that name)
    followed: bool = False
    #: the framework event this site stands for in a framework-owned loop (``"backward"``: the
    #: framework's backward, or an inherited framework method that runs it)
    framework: str | None = None

    @property
    def in_helper(self) -> bool:
        return self.helper is not None

    def value_of(self, name: str) -> cst.BaseExpression | None:
        """The expression this assignment gives ``name``: the whole value for a single target, the
        element at ``name``'s position in a tuple or list of as many (``r, w = rank(), world()``);
        None where ``name`` is no target or the value is unpacked at run time (a call's result)."""
        if name not in self.targets:
            return None
        return unpacked(self.value, self.targets.index(name), len(self.targets))

    @property
    def report(self) -> cst.CSTNode:
        """The node a finding about this site is reported at: the site itself, or the call of
        the helper it is part of when the helper is another module's (the finding belongs in the
        file that calls it) or performs no backward (a clip or update wrapper, correct where it
        is written: the call in the microbatch loop is what runs too often). A wrapper of this
        module that holds the loop itself (``fit()`` called once from ``main()``) is not lifted
        past: its call runs outside every loop, and the finding belongs at the call in the loop."""
        if self.inline is None:
            return self.node
        node: cst.CSTNode = self.node
        outside = self.inline.foreign is not None  # `node` is in another module's code
        backward_below = False  # a helper inside the one at hand performs the backward
        for inline in self.inline.chain():
            # a function that calls another module's microbatch step (`epoch()` calling
            # `runner.run(...)`, whose code backpropagates) is no wrapper either
            performs = inline.performs_backward or backward_below
            wrapper = not performs and not self._loops_only_inside(inline.call)
            if outside or inline.foreign is not None or wrapper:
                node = inline.call
                outside = inline.parent is not None and inline.parent.foreign is not None
                backward_below = performs
            else:
                break
        return node

    def _loops_only_inside(self, call: cst.CSTNode) -> bool:
        """Whether every loop around this site is inside the helper that ``call`` runs (none
        encloses the call itself)."""
        kinds = [frame.kind for frame in self.frames]
        marks = [i for i, frame in enumerate(self.frames) if frame.kind is FrameKind.HELPER and frame.node is call]
        if not marks:
            return False
        return FrameKind.LOOP in kinds[marks[0]:] and FrameKind.LOOP not in kinds[:marks[0]]

    @property
    def under_no_grad(self) -> bool:
        """Whether the site runs inside ``with torch.no_grad()`` / ``torch.inference_mode()``
        (no graph is built there)."""
        for frame in self.frames:
            if type(frame.node) is cst.With:  # exact types: isinstance on LibCST's (ABC) classes is slow here
                for item in frame.node.items:
                    callee = dotted(item.item.func) if type(item.item) is cst.Call else None
                    if callee and callee.rsplit(".", 1)[-1] in ("no_grad", "inference_mode"):
                        return True
        return False

    def inside(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` (a loop, with, if …) encloses this site."""
        return any(frame.node is node for frame in self.frames)

    def excludes(self, other: Site) -> bool:
        """Whether this site and ``other`` never run in the same pass: they sit in different
        branches of one ``if``, or one is in the body of an ``if cond: continue`` and the other
        after it."""
        mine = {id(frame.node): frame for frame in self.frames}
        for frame in other.frames:
            own = mine.get(id(frame.node))
            if own is None or own.kind is frame.kind is FrameKind.GUARD:
                continue
            if own.kind is frame.kind is FrameKind.IF and own.branch != frame.branch:
                return True
            if {own.kind, frame.kind} == {FrameKind.IF, FrameKind.GUARD}:
                return True
        return False

    def frames_inside(self, node: cst.CSTNode) -> tuple[Frame, ...]:
        """The frames nested inside ``node`` (empty when ``node`` does not enclose the site)."""
        for index, frame in enumerate(self.frames):
            if frame.node is node:
                return self.frames[index + 1 :]
        return ()
