"""The codemods, one per rule: each returns an :class:`~accumlint.fixes.base.Edit` or ``None``.

* ACC001 (safe): move the per-microbatch reset right after the optimizer update, under its
  gate; inside ``accelerator.accumulate()`` (no gate), reset through the optimizer whose
  ``step()`` precedes it instead of the module.
* ACC006 (safe; unsafe for a truthy ``if i % A:``): rewrite the boundary test to
  ``(i + 1) % A == 0`` (``!= 0`` kept for an "accumulating" flag); with an index that
  already starts at 1, drop the ``+ 1``.
* ACC101 (unsafe: the loss value read after it changes): remove the manual division by A
  (a ``loss = loss / A`` line goes away entirely).
* ACC201 (safe; unsafe where the kept values feed a backward, whose gradient through them
  the fix removes): keep ``x.detach()`` instead of ``x``, or ``x.item()`` for a running total
  that is only used as a number afterwards.
* ACC304 (safe; unsafe where it reveals ACC305: :data:`REVEALS`): move the scheduler step
  right after the optimizer update, under its gate (with the ``if`` that guards it alone, such
  as ``if scheduler is not None:``); inside ``accelerator.accumulate()`` (no gate), guard it
  with ``if <accelerator>.sync_gradients:``.
"""

from __future__ import annotations

import libcst as cst

from accumlint import frameworks as fw
from accumlint.fixes.base import (
    SAFE,
    UNSAFE,
    Edit,
    Located,
    expression_call,
    find_gate,
    is_step,
    moved,
    parenthesized,
)
from accumlint.model.events import BACKWARD_CALLS
from accumlint.model.names import dotted, int_value, last_segment, method_name, receiver, walk

# --- ACC001 / ACC304: move a per-microbatch statement under the update gate ----------------


def _accumulate_context(located: Located, node: cst.CSTNode) -> cst.With | None:
    for current in located.ancestors(node):
        if isinstance(current, (cst.For, cst.While, cst.FunctionDef)):
            return None
        if isinstance(current, cst.With):
            for item in current.items:
                if isinstance(item.item, cst.Call) and method_name(item.item) == "accumulate":
                    return current
    return None


def _lone_guard(located: Located, statement: cst.BaseStatement, frame: cst.CSTNode) -> cst.BaseStatement:
    """The ``if`` of ``frame``'s block tree that guards ``statement`` alone (no ``else``), such as
    ``if scheduler is not None:``, else ``statement``: what moves with it keeps its guard."""
    block = located.parent(statement)
    guard = located.parent(block) if block is not None else None
    if (isinstance(block, cst.IndentedBlock) and len(block.body) == 1 and isinstance(guard, cst.If)
            and guard.orelse is None and located.parent_frame(guard) is frame):
        return guard
    return statement


def _move_under_gate(located: Located, node: cst.CSTNode, exclude: str | None,
                     guarded: bool = False) -> Edit | None:
    """Move the statement holding ``node`` (``guarded``: with the ``if`` that guards it alone) to
    right after the update of the nearest gated loop."""
    for frame in located.enclosing_frames(node):
        gate = find_gate(frame, exclude)
        if gate is None:
            continue
        statement = located.owner_in(node, frame)
        if statement is not None and guarded:
            statement = _lone_guard(located, statement, frame)
        if statement is None or statement is gate.node:
            return None
        code = located.module.code_for_node(statement).strip()
        if any(located.module.code_for_node(s).strip() == code for s in gate.node.body.body):
            return Edit(located.rewrite(remove=[statement]), SAFE)  # already there: drop the copy
        body = list(gate.node.body.body)
        after = body[body.index(gate.step)]
        # the reset goes after everything that reads the gradients (clip, step, scaler update)
        return Edit(located.rewrite(remove=[statement], insert_after={after: [moved(statement)]}), SAFE)
    return None


def fix_acc001(located: Located) -> Edit | None:
    """Move the gradient reset after the update (or reset through the prepared optimizer)."""
    node = located.node(cst.Call, cst.Assign, cst.AugAssign, cst.Expr)
    if node is None:
        return None
    edit = _move_under_gate(located, node, exclude=None)
    if edit is not None:
        return edit
    context = _accumulate_context(located, node)
    if context is None or not isinstance(node, cst.Call) or method_name(node) != "zero_grad":
        return None
    steps = [expression_call(s) for s in context.body.body if is_step(s)]
    if not steps:
        return None
    optimizer = receiver(steps[-1])  # type: ignore[arg-type]
    if optimizer is None or not isinstance(node.func, cst.Attribute):
        return None
    if dotted(optimizer) == dotted(node.func.value):
        return None
    return Edit(located.rewrite(replace={node.func.value: optimizer}), SAFE)


def fix_acc304(located: Located) -> Edit | None:
    """Step the scheduler once per update: under the gate, or only on Accelerate's sync microbatch."""
    node = located.node(cst.Call)
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    scheduler = dotted(node.func.value)
    edit = _move_under_gate(located, node, exclude=scheduler, guarded=True)
    if edit is not None:
        return edit
    context = _accumulate_context(located, node)
    statement = located.statement(node)
    if context is None or statement is None or expression_call(statement) is not node:
        return None
    accumulate = next(i.item for i in context.items if isinstance(i.item, cst.Call))
    accelerator = receiver(accumulate)  # type: ignore[arg-type]
    if accelerator is None:
        return None
    guarded = cst.If(
        test=cst.Attribute(value=accelerator, attr=cst.Name(fw.accelerate.SYNC_FLAG)),
        body=cst.IndentedBlock(body=[statement.with_changes(leading_lines=())]),
        leading_lines=statement.leading_lines,
    )
    return Edit(located.rewrite(replace={statement: guarded}), SAFE)


# --- ACC006: the boundary test ----------------------------------------------------------------


def _first_modulo(node: cst.CSTNode) -> cst.BinaryOperation | None:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Modulo):
        return node
    for child in node.children:
        found = _first_modulo(child)
        if found is not None:
            return found
    return None


def _plus_one(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """``x`` of ``x + 1`` (parentheses dropped), or ``None``."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add) and int_value(expr.right) == 1:
        return expr.left.with_changes(lpar=[], rpar=[]) if not isinstance(expr.left, cst.BinaryOperation) else None
    return None


def fix_acc006(located: Located) -> Edit | None:
    """Rewrite the update gate to fire on the last microbatch of every group: ``(i + 1) % A == 0``."""
    node = located.node(cst.Assign, cst.Comparison, cst.BinaryOperation, cst.UnaryOperation, cst.BaseExpression)
    if node is None:
        return None
    modulo = _first_modulo(node)
    if modulo is None:
        return None
    base = _plus_one(modulo.left)
    if base is not None:  # `(i + 1) % A` on an index that starts at 1
        left: cst.BaseExpression = base
    else:
        left = cst.BinaryOperation(
            left=modulo.left,
            operator=cst.Add(),
            right=cst.Integer("1"),
            lpar=[cst.LeftParen()],
            rpar=[cst.RightParen()],
        )
    new_modulo = modulo.with_changes(left=left)
    parent = located.parent(modulo)
    if isinstance(parent, cst.Comparison) and parent.left is modulo:
        if len(parent.comparisons) == 1 and int_value(parent.comparisons[0].comparator) == 0:
            return Edit(located.rewrite(replace={modulo: new_modulo}), SAFE)
        return None
    test = cst.Comparison(
        left=new_modulo, comparisons=[cst.ComparisonTarget(operator=cst.Equal(), comparator=cst.Integer("0"))]
    )
    if isinstance(parent, cst.If) and parent.test is modulo:  # `if i % A:` runs on A - 1 of A
        return Edit(located.rewrite(replace={modulo: test}), UNSAFE)
    if isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not):  # `not i % A`
        return Edit(located.rewrite(replace={parent: test}), SAFE)
    return None


# --- ACC101: the manual division ---------------------------------------------------------


def fix_acc101(located: Located) -> Edit | None:
    """Remove the division by A that the framework does again."""
    node = located.node(cst.BinaryOperation)
    if not isinstance(node, cst.BinaryOperation) or not isinstance(node.operator, cst.Divide):
        return None
    parent = located.parent(node)
    left = node.left
    if (
        isinstance(parent, cst.Assign)
        and len(parent.targets) == 1
        and isinstance(left, cst.Name)
        and dotted(parent.targets[0].target) == left.value
    ):
        line = located.parent(parent)
        if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1:
            return Edit(located.rewrite(remove=[line]), UNSAFE)  # `loss = loss / A`
        return None
    replacement = left.with_changes(lpar=node.lpar, rpar=node.rpar) if node.lpar and not left.lpar else left
    return Edit(located.rewrite(replace={node: replacement}), UNSAFE)


# --- ACC201: a kept loss -------------------------------------------------------------------


def _later_uses(located: Located, anchor: cst.CSTNode, name: str) -> list[cst.CSTNode]:
    """Parents of the uses of ``name`` after ``anchor`` in the enclosing function (or module)."""
    frames = [f for f in located.enclosing_frames(anchor) if isinstance(f, cst.FunctionDef)]
    scope: cst.CSTNode = frames[0] if frames else located.module
    names = [node for node in walk(scope) if isinstance(node, cst.Name) and node.value == name]
    positions = located.positions_of([anchor, *names])
    line = positions[anchor].end.line
    uses = []
    for node in names:
        parent = located.parent(node)
        if positions[node].start.line > line and parent is not None:
            uses.append(parent)
    return uses


def _needs_tensor(located: Located, uses: list[cst.CSTNode]) -> bool:
    """Whether a later use needs a tensor: a method or attribute of it, or a ``torch.*`` call on it."""
    for use in uses:
        if isinstance(use, cst.Attribute):
            return True
        for ancestor in (use, *located.ancestors(use)):
            if isinstance(ancestor, cst.Call) and (dotted(ancestor.func) or "").startswith(("torch.", "F.")):
                return True
            if isinstance(ancestor, cst.BaseStatement):
                break
    return False


#: calls that backpropagate what they read: ``x.backward()``, ``accelerator.backward(x)``,
#: ``torch.autograd.backward(x)``, ``torch.autograd.grad(x, params)``, Lightning's and mmengine's
_BACKPROPAGATING = BACKWARD_CALLS | {"grad"}


def _feeds_backward(located: Located, anchor: cst.CSTNode, name: str, depth: int = 0) -> bool:
    """Whether a read of ``name`` (a dotted name: ``losses``, ``self.losses``) in the enclosing
    function (anywhere: a loop brings an earlier line round again), other than in ``anchor``,
    flows into a backward: read by a backpropagating call, or assigned to a name that is
    (through at most three assignments)."""
    frames = [f for f in located.enclosing_frames(anchor) if isinstance(f, cst.FunctionDef)]
    scope: cst.CSTNode = frames[0] if frames else located.module
    inside = set(map(id, walk(anchor)))
    for node in walk(scope):
        if not isinstance(node, (cst.Name, cst.Attribute)) or id(node) in inside or dotted(node) != name:
            continue
        for ancestor in located.ancestors(node):
            if isinstance(ancestor, cst.Call) and (
                    method_name(ancestor) or last_segment(dotted(ancestor.func))) in _BACKPROPAGATING:
                return True
            if isinstance(ancestor, (cst.Assign, cst.AugAssign, cst.AnnAssign)) and depth < 3:
                targets = ([t.target for t in ancestor.targets] if isinstance(ancestor, cst.Assign)
                           else [ancestor.target])
                if any(dotted(t) not in (None, name) and _feeds_backward(located, ancestor, dotted(t) or "", depth + 1)
                       for t in targets):
                    return True
            if isinstance(ancestor, cst.BaseStatement):
                break
    return False


def _kept(value: cst.BaseExpression, method: str) -> cst.BaseExpression:
    return cst.Call(func=cst.Attribute(value=parenthesized(value), attr=cst.Name(method)))


def fix_acc201(located: Located) -> Edit | None:
    """Keep the value without its graph: ``.detach()`` (a tensor is needed later) or ``.item()``."""
    node = located.node(cst.Call, cst.AugAssign, cst.Assign)
    if isinstance(node, cst.Call) and method_name(node) in ("append", "extend", "add") and len(node.args) == 1:
        value, container = node.args[0].value, dotted(receiver(node))
        running_total = False
    elif isinstance(node, cst.AugAssign):
        value, container = node.value, dotted(node.target)
        running_total = True
    else:
        return None
    if container is None or isinstance(value, cst.Call) and method_name(value) in ("detach", "item"):
        return None
    root = container.split(".")[0]
    needs_tensor = _needs_tensor(located, _later_uses(located, node, root))
    method = "item" if running_total and not needs_tensor else "detach"
    # a later backward through the kept values (`sum(losses).backward()`) loses their gradient
    safety = UNSAFE if _feeds_backward(located, node, container) else SAFE
    return Edit(located.rewrite(replace={value: _kept(value, method)}), safety)


#: code -> the codes whose findings its fix may reveal: ACC305 judges the horizon of a scheduler
#: stepped once per update only, so while the scheduler steps every microbatch (ACC304) a horizon
#: counted in microbatches is masked (and, in a sense, consistent: the schedule runs to its end).
#: A fix after which only these codes have more findings is kept, but as unsafe: applied alone
#: it leaves the schedule stretched A-fold until the horizon is fixed too.
REVEALS: dict[str, frozenset[str]] = {"ACC304": frozenset({"ACC305"})}

FIXERS = {
    "ACC001": (SAFE, fix_acc001),
    "ACC006": (SAFE, fix_acc006),
    "ACC101": (UNSAFE, fix_acc101),
    "ACC201": (SAFE, fix_acc201),
    "ACC304": (SAFE, fix_acc304),
}
