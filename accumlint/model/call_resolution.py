"""Which functions a call may reach from the code being walked: through ``self`` and the
class, its bases, ``super()``, imports, function-valued names (every candidate a path),
closures and callables stored as attributes."""

from __future__ import annotations

from dataclasses import replace

import libcst as cst

from accumlint.model import summaries
from accumlint.model.callgraph import Inline
from accumlint.model.module_functions import Callee, ModuleFunctions
from accumlint.model.names import dotted
from accumlint.model.scopes import Frame, FrameKind, Scope


class CallResolution:
    """The call resolution of :class:`accumlint.model.statement_walk._Walker` (a mixin over its state)."""

    scope: Scope
    functions: ModuleFunctions
    values: dict[tuple[int, str], cst.BaseExpression]

    def current_class(self, inline: Inline | None) -> tuple[ModuleFunctions, cst.ClassDef] | None:
        if inline is not None:
            owner = inline.foreign if inline.foreign is not None else self.functions
            if inline.class_def is not None:
                return owner, inline.class_def  # type: ignore[return-value]
            if not inline.closure:
                return None
            inline = inline.parent
            return self.current_class(inline)
        return (self.functions, self.scope.class_def) if self.scope.class_def is not None else None

    def module_of(self, inline: Inline | None) -> ModuleFunctions:
        while inline is not None and inline.closure and inline.foreign is None:
            inline = inline.parent
        if inline is not None and inline.foreign is not None:
            return inline.foreign  # type: ignore[return-value]
        return self.functions

    def callable_of(self, func: cst.BaseExpression, inline: Inline | None, depth: int) -> list[Callee | str]:
        if depth > 4:
            return []
        if inline is not None:
            value, where = inline.resolve(func)
            if where is not inline or value is not func:
                return self.callable_of(value, where, depth + 1)
        owner = self.module_of(inline)
        row = summaries.lookup(owner.imports.qualify(dotted(func))) if summaries.LIBRARY_SUMMARIES else None
        if row is not None:  # a library function described by a table row
            return [Callee(summaries.function(row), summaries.owner_of(row), None, row.method,  # type: ignore[arg-type]
                           None)]
        if type(func) is cst.Name:  # exact types: isinstance on LibCST's (ABC) classes is slow
            name = func.value
            value = self.values.get((id(inline) if inline is not None else 0, name))
            if value is not None:
                return self.value_callable(value, inline, depth, func)
            function = owner.functions.get(name)
            if function is not None and owner.class_of.get(function) is None:
                return [Callee(function, owner)]
            found = owner.imported(name) if name not in owner.classes else None
            if found is not None and isinstance(found[1], cst.FunctionDef):
                return [Callee(found[1], found[0])]
            if found is None and name not in owner.classes:
                located = self.class_of_value(func, inline, depth + 1)  # an instance called
                if located is not None:
                    method = located[0].method(located[1], "__call__") or located[0].method(located[1], "forward")
                    return [Callee(method[0], method[1], located[1], True, func)] if method else []
            return []
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            receiver = func.value
            if (type(receiver) is cst.Call and type(receiver.func) is cst.Name
                    and receiver.func.value == "super"):
                current = self.current_class(inline)
                if current is None:
                    return []
                found = current[0].method(current[1], method, skip_own=True)
                return [Callee(found[0], found[1], current[1], True, cst.Name("self"))] if found else []
            located = self.class_of_value(receiver, inline, depth)
            if located is not None:
                found = located[0].method(located[1], method)
                if found is not None:
                    self_value = receiver if isinstance(receiver, (cst.Name, cst.Attribute)) else None
                    return [Callee(found[0], found[1], located[1], True, self_value)]
            if located is not None and dotted(receiver) == "self":
                below = located[0].subclass_method(located[1], method)  # a mixin calls what a subclass defines
                if below is not None:
                    return [Callee(below[0], below[1], below[2], True, cst.Name("self"))]
            name = dotted(receiver)
            if located is None and name and name.split(".", 1)[0] in owner.imports.names:
                # `import utils` ... `utils.train_micro(...)`: a function of an imported project module
                found = owner.imported(f"{name}.{method}")
                if found is not None and isinstance(found[1], cst.FunctionDef):
                    return [Callee(found[1], found[0])]
            if name == "self" or (name and name.startswith("self.")):
                current = self.current_class(inline)
                if current is not None and name != "self":
                    attribute = f"{name}.{method}"
                    values = current[0].attributes(current[1]).get(attribute, [])
                    if len(values) == 1:
                        return self.value_callable(values[0], inline, depth, func)
                elif current is not None:
                    values = current[0].attributes(current[1]).get(f"self.{method}", [])
                    if len(values) == 1:
                        return self.value_callable(values[0], inline, depth, func)
            return []
        return []

    def value_callable(self, value: cst.BaseExpression, inline: Inline | None, depth: int,
                       called: cst.BaseExpression | None = None) -> list[Callee | str]:
        """What calling ``called``, a name bound to ``value``, reaches (an instance called: ``called``
        is its ``self``)."""
        if isinstance(value, cst.IfExp):
            found: list[Callee | str] = []
            bound = inline.rewrite(value.test) if inline is not None else None
            for branch, arm in (("body", value.body), ("orelse", value.orelse)):
                frame = Frame(FrameKind.IF, value, branch, bound)
                for callee in self.callable_of(arm, inline, depth + 1):
                    found.append(replace(callee, frame=frame) if isinstance(callee, Callee) else callee)
            return found
        if isinstance(value, cst.Call):
            target = self.module_of(inline).partial_of(value)
            if target is not None and not any(arg.star for arg in value.args):
                # `partial(run_backward, half)`: the function, its first arguments fixed by the partial
                found = self.callable_of(target, inline, depth + 1)
                if found:
                    return [replace(callee, leading=(*value.args[1:], *callee.leading))
                            if isinstance(callee, Callee) else callee for callee in found]
                text = dotted(target)
                return [text] if text else []
            row = summaries.lookup(f"{self.module_of(inline).imports.qualify(dotted(value.func))}.__call__") if (
                summaries.LIBRARY_SUMMARIES) else None
            if row is not None:  # an instance of a library class whose __call__ a table row describes
                return [Callee(summaries.function(row), summaries.owner_of(row), None, True,  # type: ignore[arg-type]
                               None)]
            located = self.class_of_value(value, inline, depth)
            if located is not None:  # an instance called: its __call__ (an nn.Module's: forward)
                method = located[0].method(located[1], "__call__") or located[0].method(located[1], "forward")
                return [Callee(method[0], method[1], located[1], True, called)] if method else []
            return []
        if isinstance(value, (cst.Name, cst.Attribute)):
            return self.callable_of(value, inline, depth + 1)
        return []

    def class_of_value(self, value: cst.BaseExpression, inline: Inline | None,
                       depth: int) -> tuple[ModuleFunctions, cst.ClassDef] | None:
        """The project class whose instance ``value`` is, when the code shows it: a constructor
        call, a name or ``self`` attribute assigned one, the class of ``self``, or the one class
        that defines every method the function calls on the name."""
        if depth > 4:
            return None
        owner = self.module_of(inline)
        if type(value) is cst.Call:
            return owner.class_named(dotted(value.func))
        name = dotted(value)
        if not name:
            return None
        if name == "self":
            return self.current_class(inline)
        if inline is not None:
            resolved, where = inline.resolve(value)
            if where is not inline or resolved is not value:
                return self.class_of_value(resolved, where, depth + 1)
        bound = self.values.get((id(inline) if inline is not None else 0, name))
        if bound is not None:
            return self.class_of_value(bound, inline, depth + 1)
        if name.startswith("self."):
            current = self.current_class(inline)
            if current is not None:
                values = current[0].attributes(current[1]).get(name, [])
                if len(values) == 1 and isinstance(values[0], cst.Call):
                    return current[0].class_named(dotted(values[0].func))
            return None
        function = inline.function if inline is not None else self.scope.node
        if isinstance(function, cst.FunctionDef) and "." not in name:
            passed = owner.annotated_class(function, name) or (
                owner.passed_class(function, name) if inline is None else None)
            value = owner.module_value(name) if passed is None else None
            if type(value) is cst.Call and name not in owner.local_names(function):
                # a module-level object the function reads as a global (`manager = Manager(model)`)
                passed = owner.class_named(dotted(value.func))
            return passed or owner.duck_class(owner.receivers(function).get(name, set()))
        return None
