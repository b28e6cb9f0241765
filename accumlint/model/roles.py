"""Which object plays which role: optimizer, scheduler, scaler, model, DDP model, accelerator,
DeepSpeed engine …

Evidence, strongest first: a known constructor or framework call (resolved through the
module's imports), ``accelerator.prepare(...)`` / ``deepspeed.initialize(...)`` unpacking,
a type annotation, and last the variable's name or, where the name says nothing, a use (an
object whose ``.parameters()`` build an optimizer is a model). The latest binding before a use wins
(source order inside the function; then the class's ``self.`` attributes; then the module).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import conventions
from accumlint.model.callgraph import bind
from accumlint.model.dataflow import reaching_definitions
from accumlint.model.kinds import Evidence, Role
from accumlint.model.module_functions import ModuleFunctions
from accumlint.model.names import (
    ImportMap,
    call_name,
    dotted,
    last_segment,
    method_name,
    positional,
    receiver,
    walk,
)
from accumlint.model.scopes import Scope, Site
from accumlint.model.statement_walk import walk_scopes


@dataclass(frozen=True)
class RoleInfo:
    """What we know of one object.

    ``prepared``: True when it came out of ``accelerator.prepare`` (or a ``prepare_*``
    call), False when it was built in this code and never prepared, None when unknown.
    ``owner``: ``"deepspeed"`` for objects returned by ``deepspeed.initialize``.
    ``origin``: the call that built it (e.g. the ``Accelerator(...)`` call, to read its A).
    """

    role: Role
    evidence: Evidence
    prepared: bool | None = None
    owner: str | None = None
    origin: cst.Call | None = None


UNKNOWN = RoleInfo(Role.UNKNOWN, Evidence.NAME)
#: an order after every site of a scope: what a name holds where the scope ends
_END_OF_SCOPE = 1 << 30
_DEEPSPEED_TUPLE = fw.deepspeed.INITIALIZE_RETURNS
_STEPPING_ROLES = frozenset({Role.SCHEDULER, Role.OPTIMIZER, Role.SCALER, Role.ENGINE, Role.ACCELERATOR,
                             Role.OPTIM_WRAPPER})
_PREPARE_SINGLE = {
    "prepare_model": Role.MODEL,
    "prepare_optimizer": Role.OPTIMIZER,
    "prepare_scheduler": Role.SCHEDULER,
    "prepare_data_loader": Role.LOADER,
}


#: calls on an object that show it is no optimizer: called itself (a model's forward), asked for
#: its parameters, a backward run through it (a DeepSpeed engine, an Accelerator)
_NOT_AN_OPTIMIZER = frozenset({"()", "parameters", "named_parameters", "backward", "forward", "train", "eval"})
#: the use of a name given a loss to backpropagate (``engine.backward(loss)``)
_BACKWARD_OF_A_LOSS = "backward(loss)"
#: attributes only an optimizer has (torch 2.x ``Optimizer.param_groups``)
_OPTIMIZER_STATE = frozenset({"param_groups"})
_OPTIMIZER_READS = frozenset("." + attribute for attribute in _OPTIMIZER_STATE)


def _caller_receiver(site: Site) -> str | None:
    """The caller's dotted name that receives a method call of an inlined helper's site, or None
    (no method call, or a receiver that is the helper's own)."""
    call = site.call
    if call is None or site.inline is None or not method_name(call):
        return None
    target = receiver(call)
    if target is None:
        return None
    resolved, where = site.inline.resolve(target)
    name = dotted(resolved) if where is None else None
    return name if name and "[" not in name else None


@dataclass(frozen=True)
class _Uses:
    """Roles of one scope's names shown by the calls made on them."""

    optimizers: frozenset[str]
    scalers: frozenset[str]
    #: names that run a loss's backward and step (``model.backward(loss); model.step()``)
    engines: frozenset[str] = frozenset()


def role_from_name(name: str | None) -> Role:
    """The role a variable's name suggests (weakest evidence), ``UNKNOWN`` if none."""
    if not name:
        return Role.UNKNOWN
    if name in fw.lightning.ACCESSORS:
        return fw.lightning.ACCESSORS[name]
    segment = last_segment(name).lower().lstrip("_")  # private attributes: self._optimizer
    for pattern, role in conventions.NAME_PATTERNS:
        if pattern.match(segment):
            return role
    return Role.UNKNOWN


class Roles:
    """Role lookups for one module."""

    def __init__(self, imports: ImportMap, scopes: list[Scope], project: object | None = None,
                 functions: ModuleFunctions | None = None) -> None:
        self.imports = imports
        self.functions = functions  # the module's defs (and, through its project, imported ones), or None
        self.project = project  # the module's ProjectView (its importers build its classes), or None
        self._importer_roles: list[Roles] | None = None
        self._deepspeed: bool | None = None  # see `deepspeed_in_view`
        self.scopes = scopes
        self.module_scope = scopes[0]
        self._bindings: dict[Scope, dict[str, list[Site]]] = {}
        self._class_bindings: dict[cst.ClassDef, dict[str, list[Site]]] = {}
        for scope in scopes:
            table: dict[str, list[Site]] = {}
            for site in scope.sites:
                if site.targets and not site.in_helper and site.augmented is None:
                    for name in site.targets:
                        if name:
                            table.setdefault(name, []).append(site)
                            if scope.class_def is not None and name.startswith("self."):
                                self._class_bindings.setdefault(scope.class_def, {}).setdefault(name, []).append(
                                    site
                                )
            self._bindings[scope] = table
        self._cache: dict[tuple[int, str, int], RoleInfo] = {}
        self._callees: dict[int, str] = {}  # id(call) → qualify_call(call); the tree outlives this
        self._own: dict[int, Site] | None = None
        self._trained: dict[int, frozenset[str]] = {}  # id(scope) → names whose parameters an optimizer updates
        self._uses: dict[int, _Uses] = {}  # id(scope) → the roles its names' calls show
        #: id(scope) → what its own sites show, before the asking scope filters it
        self._raw_uses: dict[int, tuple[tuple[str, str], ...]] = {}
        self._raw_trained: dict[int, tuple[str, ...]] = {}
        self._returning: set[int] = set()  # ids of the helper calls whose returns are being read
        self.classes: dict[str, cst.ClassDef] = {
            statement.name.value: statement
            for statement in scopes[0].node.body  # type: ignore[union-attr]
            if isinstance(statement, cst.ClassDef)
        }

    # --- public -----------------------------------------------------------------------------
    def of(self, expression: cst.BaseExpression | None, site: Site) -> RoleInfo:
        """The role of ``expression`` as seen at ``site`` (``UNKNOWN`` when undecidable)."""
        if expression is None:
            return UNKNOWN
        if site.inline is not None:
            # a helper's name: read it where its value lives (the caller's argument, or the
            # helper's own assignments in its own scope)
            resolved, where = site.inline.resolve(expression)
            if where is None:
                expression = resolved
            else:
                own = self.own_site(site.node) if where is site.inline and where.foreign is None else None
                if own is None:
                    return self._by_name(dotted(resolved))
                site = own
        if isinstance(expression, cst.Call):
            info = self._from_value(expression, site.scope, site.order, 0, "") or self._returned(expression, site.scope)
            if info is not None:
                return info
        return self.named(dotted(expression), site.scope, site.order)

    def _returned(self, call: cst.Call, scope: Scope) -> RoleInfo | None:
        """The role of what a project helper ``call`` was inlined to returns, where every
        ``return`` of it gives one role (``get_optimizer().step()``, a getter of the optimizer)."""
        if id(call) in self._returning:
            return None  # a helper whose return reads its own call again (recursion)
        returns = [s for s in scope.returns_of(call) if s.value is not None and s.value is not call]
        self._returning.add(id(call))
        try:
            infos = {self.of(s.value, s) for s in returns}
        finally:
            self._returning.discard(id(call))
        roles = {info.role for info in infos}
        return next(iter(infos)) if len(roles) == 1 and Role.UNKNOWN not in roles else None

    def named(self, name: str | None, scope: Scope, order: int, depth: int = 0) -> RoleInfo:
        """The role of the dotted ``name`` at execution position ``order`` of ``scope``."""
        if not name:
            return UNKNOWN
        framework = scope.framework_roles.get(name)
        if framework is not None:  # bound by the framework that owns this loop (model/owned_loops.py)
            return RoleInfo(Role(framework), Evidence.CONSTRUCTOR)
        key = (id(scope), name, order)
        if key not in self._cache:
            self._cache[key] = self._resolve(name, scope, order, depth)
        return self._cache[key]

    def own_site(self, node: cst.CSTNode) -> Site | None:
        """The site of ``node`` in its own scope (not a copy inlined into a caller)."""
        if self._own is None:
            self._own = {id(site.node): site for scope in self.scopes for site in scope.sites if not site.in_helper}
        return self._own.get(id(node))

    def _by_name(self, name: str | None) -> RoleInfo:
        role = role_from_name(name)
        if role is Role.ENGINE and not self.imports.imports_module("deepspeed"):
            role = Role.UNKNOWN
        return RoleInfo(role, Evidence.NAME) if role is not Role.UNKNOWN else UNKNOWN

    def qualify_call(self, call: cst.Call) -> str:
        """A call's callee, resolved through the imports when possible (else its own text)."""
        qualified = self._callees.get(id(call))  # several rules ask for every call of the module
        if qualified is None:
            text = call_name(call) or ""
            qualified = self._callees[id(call)] = self.imports.qualify(text) or text
        return qualified

    # --- resolution -------------------------------------------------------------------------
    def _resolve(self, name: str, scope: Scope, order: int, depth: int) -> RoleInfo:
        if depth > 6:
            return UNKNOWN
        bindings = self._bindings[scope].get(name, [])
        definitions, on_entry = reaching_definitions(scope, name, order, bindings) if bindings else ([], False)
        if definitions:
            infos = [self._from_binding(site, name, depth) for site in definitions]
            latest = infos[0]
            if latest is not None:
                # a parameter's own value reaches too when no definition runs on some path
                entry = on_entry and self._is_parameter(name, scope)
                if not entry and all(info is not None and (info.role, info.prepared, info.owner) == (
                        latest.role, latest.prepared, latest.owner) for info in infos):
                    return latest  # every definition that may reach says the same (`prepare()` in both arms)
                # `if args.deepspeed: optimizer = ...`: the name may still hold its earlier value
                return replace(latest, prepared=None, owner=None)
        if name.startswith("self.") and scope.class_def is not None:
            for site in reversed(self._class_bindings.get(scope.class_def, {}).get(name, [])):
                if site.scope is not scope or site.order < order:
                    info = (self._constructed(scope.class_def, name, depth, site)
                            or self._from_binding(site, name, depth))
                    if info is not None:
                        return info
                    break
            else:
                # a base class's loop reads what its subclasses' constructors store
                info = self._constructed(scope.class_def, name, depth)
                if info is not None:
                    return info
        elif "." in name:
            info = self._instance_attribute(name, scope, order, depth)
            if info is not None:
                return info
        annotated = self._from_parameter(name, scope)
        if annotated is not None and annotated.role is Role.MODEL and name in self._used_names(scope).engines \
                and self.deepspeed_in_view():
            # `model: torch.nn.Module` given `.backward(loss)` and `.step()`: a DeepSpeed engine, itself a
            # module (deepspeed 0.x, runtime/engine.py: `class DeepSpeedEngine(Module)`)
            return RoleInfo(Role.ENGINE, Evidence.USE)
        if annotated is not None:
            return annotated
        if scope is not self.module_scope and "." not in name:
            for site in reversed(self._bindings[self.module_scope].get(name, [])):
                info = self._from_binding(site, name, depth)
                if info is not None:
                    return info
                break
        if self._names_function(name, scope):
            return UNKNOWN
        role = role_from_name(name)
        if role is Role.ENGINE and not self.imports.imports_module("deepspeed"):
            role = Role.UNKNOWN
        if role in (Role.UNKNOWN, Role.MODEL) and name in self._used_names(scope).engines \
                and self.deepspeed_in_view():
            # a module has no backward of a loss: what runs one and steps is the engine, however it
            # was built (`ds_init = deepspeed.initialize` carried from the argument parser, or in the
            # script that imports this epoch function and hands it the engine)
            return RoleInfo(Role.ENGINE, Evidence.USE)
        if role is Role.UNKNOWN and name in self._trained_names(scope):
            return RoleInfo(Role.MODEL, Evidence.USE)
        if role is Role.UNKNOWN:
            uses = self._used_names(scope)
            if name in uses.optimizers:
                return RoleInfo(Role.OPTIMIZER, Evidence.USE)
            if name in uses.scalers:
                return RoleInfo(Role.SCALER, Evidence.USE)
        return RoleInfo(role, Evidence.NAME) if role is not Role.UNKNOWN else UNKNOWN

    def _names_function(self, name: str, scope: Scope) -> bool:
        """Whether the plain ``name`` is bound only by a ``def`` (this module's, at any depth, or a
        project module's it imports), by no assignment here nor a parameter of ``scope``: a
        function is none of the objects a role names, so its name is no evidence
        (``evaluate_model(...)`` computes with a model, it is not one; its call is no forward)."""
        if self.functions is None or "." in name or role_from_name(name) is Role.UNKNOWN:
            return False
        if self._bindings[scope].get(name) or self._bindings[self.module_scope].get(name) \
                or self._is_parameter(name, scope):
            return False  # also bound to a value (an object passed in may be a model)
        if name in self.functions.functions:
            return True
        found = self.functions.imported(name, any_module=True) if self.imports.qualify(name) else None
        return found is not None and isinstance(found[1], cst.FunctionDef)

    # --- instances of this module's classes ------------------------------------------------
    def init_value(self, class_def: cst.ClassDef, name: str) -> cst.BaseExpression | None:
        """The value ``__init__`` of ``class_def`` gives the attribute ``name`` (``self.criterion``)
        when that is its only binding in the class's methods, else None."""
        sites = self._class_bindings.get(class_def, {}).get(name, [])
        if len(sites) != 1 or sites[0].scope.name != "__init__":
            return None
        return self._stored_value(sites[0], name)

    def _init_binding(self, class_def: cst.ClassDef, name: str) -> tuple[Scope, Site] | None:
        """The ``__init__`` of ``class_def`` and its last binding of the ``self.`` attribute ``name``."""
        for scope in self.scopes:
            if scope.class_def is class_def and scope.name == "__init__":
                sites = self._bindings[scope].get(name)
                return (scope, sites[-1]) if sites else None
        return None

    def _at_construction(self, class_def: cst.ClassDef, name: str, call: cst.Call, site: Site,
                         depth: int, where: Roles | None = None) -> RoleInfo | None:
        """The role of ``self.<attr>`` (``name``) on the instance ``call`` builds at ``site``: what
        ``__init__`` stores there, a parameter read as the constructor's argument at ``site``
        (``Trainer(engine, scheduler)`` whose ``__init__`` keeps ``self.engine = engine``); ``where``:
        the roles of the importing module the construction is in (None: this one)."""
        where = where or self
        found = self._init_binding(class_def, name)
        if found is None:
            return None
        argument = self._stored_argument(found[0], found[1], call, name)
        if argument is False:
            return self._from_binding(found[1], name, depth + 1)
        if argument is None:
            return None
        if isinstance(argument, cst.Call):
            info = where._from_value(argument, site.scope, site.order, 0, "", depth + 1)
        else:
            info = where.named(dotted(argument), site.scope, site.order, depth + 1)
        return info if info is not None and info.role is not Role.UNKNOWN else None

    @staticmethod
    def _stored_value(binding: Site, name: str) -> cst.BaseExpression | None:
        """The value ``binding`` gives ``name``: the whole value, or its element in a tuple
        assignment of as many names (``self.net, self.opt = net, opt``)."""
        return binding.value_of(name)

    def _stored_argument(self, init: Scope, binding: Site, call: cst.Call, name: str,
                         ) -> cst.BaseExpression | None | bool:
        """The argument of the constructor ``call`` that ``__init__`` (``init``) stores unchanged
        in ``name`` at ``binding`` (``self.engine = engine``); False where it stores no parameter,
        None where the argument is unknown or the parameter is reassigned first."""
        value = self._stored_value(binding, name)
        if not (isinstance(value, cst.Name) and self._is_parameter(value.value, init)):
            return False
        if reaching_definitions(init, value.value, binding.order)[0]:
            return None
        return bind(init.node, call, None, True).get(value.value)  # type: ignore[arg-type]

    def _constructions(self, class_def: cst.ClassDef, subclasses: bool,
                       ) -> list[tuple[cst.ClassDef, cst.Call, Site, Roles]]:
        """Every instance of ``class_def`` (``subclasses``: of the module's classes deriving from it)
        built in this module's own code, or, where it builds none, in the checked modules that
        import it: (its class, the constructor call, the site, the roles of its module)."""
        classes = [c for c in self.classes.values() if any(dotted(b.value) == class_def.name.value
                                                           for b in c.bases)] if subclasses else [class_def]
        found = []
        for owner in classes:
            found.extend((owner, call, site, self) for call, site in _built(self.scopes, owner.name.value))
        if not found:
            for importer in self._importers():
                for owner in classes:
                    qualified = f"{_module_stem(self.project)}.{owner.name.value}"
                    for call, site in _built(importer.scopes, None):
                        if (importer.imports.qualify(dotted(call.func) or "") or "").endswith(qualified):
                            found.append((owner, call, site, importer))
        return found

    @property
    def importer_modules(self) -> list[cst.Module]:
        """The trees of the checked modules that import this one's classes (see :meth:`_importers`)."""
        return [roles.module_scope.node for roles in self._importers()]  # type: ignore[misc]

    def deepspeed_in_view(self) -> bool:
        """Whether DeepSpeed is imported by this module or by a checked module that imports it (the
        script that builds the engine and hands it to this module's functions), computed once."""
        if self._deepspeed is None:
            self._deepspeed = self.imports.imports_module(fw.deepspeed.PACKAGE)
            index = getattr(self.project, "index", None)
            if not self._deepspeed and index is not None:
                for importer in index.importers(self.project.path)[:_MAX_IMPORTERS]:  # type: ignore[attr-defined]
                    loaded = index.importer_functions(importer)
                    if loaded is not None and ImportMap(loaded[0]._module).imports_module(fw.deepspeed.PACKAGE):
                        self.project.used[importer] = loaded[1]  # type: ignore[attr-defined]  # its change makes this stale
                        self._deepspeed = True
                        break
        return self._deepspeed

    def _importers(self) -> list[Roles]:
        """The roles of the checked modules that import this one (walked alone, their calls not
        followed), computed once: where a trainer class is built on the script's objects."""
        if self._importer_roles is None:
            self._importer_roles = []
            index = getattr(self.project, "index", None)
            if index is not None and self.classes:
                for importer in index.importers(self.project.path, sorted(self.classes))[:_MAX_IMPORTERS]:  # type: ignore[attr-defined]
                    loaded = index.importer_functions(importer)
                    if loaded is None:
                        continue
                    module = loaded[0]._module
                    scopes, _ = walk_scopes(module)
                    self._importer_roles.append(Roles(ImportMap(module), scopes))
                    self.project.used[importer] = loaded[1]  # type: ignore[attr-defined]  # its change makes this stale
        return self._importer_roles

    def prepared_from(self, name: str, scope: Scope, order: int, depth: int = 0) -> str | None:
        """The dotted argument of the ``<accelerator>.prepare(...)`` call whose result ``name``
        holds at ``order`` (``enc, head = acc.prepare(enc_raw, head_raw)`` → ``head_raw`` for
        ``head``; ``self.net`` bound in ``__init__`` from ``prepare(net)`` → ``net``), following
        plain aliases (``self.head = head``) and a constructor's argument stored on ``self``: the
        name an optimizer built before the preparation knows the model by. None when ``name`` is
        not bound by one such call in view."""
        if name.startswith("self.") and scope.class_def is not None:
            binding = self._init_binding(scope.class_def, name)
            site = binding[1] if binding is not None else None
        else:
            definitions, on_entry = reaching_definitions(scope, name, order, self._bindings[scope].get(name, []))
            site = definitions[0] if len(definitions) == 1 and not on_entry else None
        if site is None or name not in site.targets or isinstance(site.node, (cst.For, cst.With)):
            stored = self.stored(name, scope, order) if depth < 4 else None
            if stored is None:
                return None
            # `self.net` stored from a constructor argument: what that argument holds where it is built
            return self.prepared_from(stored[0], stored[1], _END_OF_SCOPE, depth + 1)
        value, position = site.value_of(name), 0
        if value is None:  # `a, b = accelerator.prepare(x, y)`: the call's argument at the position
            value, position = site.value, site.targets.index(name)
        if isinstance(value, (cst.Name, cst.Attribute)) and len(site.targets) == 1 and depth < 4:
            alias = dotted(value)  # `self.head = head`, `net = model`: what the other name holds
            return self.prepared_from(alias, site.scope, site.order, depth + 1) if alias else None
        if not (isinstance(value, cst.Call) and method_name(value) == "prepare"):
            return None
        return dotted(positional(value, position))

    def stored_name(self, name: str, scope: Scope, order: int) -> str:
        """``name`` where it holds what a constructor of this module's class was given (see
        :meth:`stored`), else ``name`` itself."""
        found = self.stored(name, scope, order)
        return found[0] if found is not None else name

    def stored(self, name: str, scope: Scope, order: int) -> tuple[str, Scope] | None:
        """What ``name`` holds where a constructor of this module's class was given it: ``self.net``
        in a method (or ``trainer.net`` after ``trainer = Trainer(net)``) whose ``__init__`` stores its
        parameter ``net`` is the dotted argument every construction in view passes (``net``), with
        the scope that passes it. None where no construction is in view or they disagree."""
        if name.startswith("self.") and scope.class_def is not None:
            own = self._init_binding(scope.class_def, name)
            built = self._constructions(scope.class_def, own is None)
        elif name.count(".") == 1:
            root = name.partition(".")[0]
            definitions, on_entry = reaching_definitions(scope, root, order, self._bindings[scope].get(root, []))
            value = definitions[0].value if len(definitions) == 1 and not on_entry else None
            class_def = self.classes.get(dotted(value.func) or "") if isinstance(value, cst.Call) else None
            if class_def is None:
                return None
            built = [(class_def, value, definitions[0], self)]  # type: ignore[list-item]
            name = "self." + name.partition(".")[2]
        else:
            return None
        found = set()
        for owner, call, site, _ in built:
            binding = self._init_binding(owner, name)
            argument = self._stored_argument(*binding, call, name) if binding is not None else None
            found.add((dotted(argument), site.scope) if isinstance(argument, cst.BaseExpression) else None)
        stored = next(iter(found)) if len(found) == 1 else None
        return stored if stored is not None and stored[0] is not None else None  # type: ignore[return-value]

    def _constructed(self, class_def: cst.ClassDef, name: str, depth: int, binding: Site | None = None,
                     ) -> RoleInfo | None:
        """The role of ``self.<attr>`` in the methods of ``class_def`` where ``__init__`` stores a
        parameter (``binding``; None: the class does not bind it, its subclasses may) and every
        instance of the class (or of its subclasses) is built in this module with arguments of one
        role. None where no construction is in view or they disagree."""
        if binding is not None and not (binding.scope.name == "__init__"
                                        and isinstance(self._stored_value(binding, name), cst.Name)):
            return None
        infos = [self._at_construction(owner, name, call, site, depth, where)
                 for owner, call, site, where in self._constructions(class_def, binding is None)]
        if not infos or any(info is None for info in infos):
            return None
        first = infos[0]
        agree = all((i.role, i.prepared, i.owner) == (first.role, first.prepared, first.owner)  # type: ignore[union-attr]
                    for i in infos)
        return first if agree else None

    def _instance_attribute(self, name: str, scope: Scope, order: int, depth: int) -> RoleInfo | None:
        """The role of ``trainer.engine`` where ``trainer`` is an instance of a class of this module
        built in ``scope`` (``trainer = Trainer(engine)``): what its ``__init__`` stores there."""
        root, _, attribute = name.partition(".")
        if "." in attribute:
            return None
        definitions, on_entry = reaching_definitions(scope, root, order, self._bindings[scope].get(root, []))
        if on_entry or len(definitions) != 1 or len(definitions[0].targets) != 1:
            return None
        value = definitions[0].value
        class_def = self.classes.get(dotted(value.func) or "") if isinstance(value, cst.Call) else None
        if class_def is None:
            return None
        stored = _property_reads(class_def, attribute)
        if stored is not None:  # `holder.optimizer`, a property returning `self._optimizer`
            info = self.named(f"{root}.{stored}", scope, order, depth + 1)
            return info if info.role is not Role.UNKNOWN else None
        return self._at_construction(class_def, f"self.{attribute}", value, definitions[0], depth)  # type: ignore[arg-type]



    def _related(self, scope: Scope) -> list[Scope]:
        """The scopes whose names ``scope`` can see by role: itself, the module's, and the
        other methods of its class (``self.`` attributes)."""
        return [s for s in self.scopes if s is scope or s is self.module_scope
                or scope.class_def is not None and s.class_def is scope.class_def]

    def _scope_uses(self, scope: Scope) -> tuple[tuple[str, str], ...]:
        """Every (owner, use) the own sites of ``scope`` show (:meth:`_used_names`), whoever
        asks: collected once per scope, since every scope of a class (and every scope at all,
        for the module's) reads the same ones."""
        found = self._raw_uses.get(id(scope))
        if found is None:
            pairs: dict[tuple[str, str], None] = {}
            for site in scope.sites:
                if site.in_helper:
                    # a helper's method call on a caller's object (`engine.step()` in `step(engine, b)`)
                    # is a use of the caller's name; the helper's own names stay its own
                    caller = _caller_receiver(site)
                    if caller is not None:
                        use = method_name(site.call)
                        pairs[caller, use] = None  # type: ignore[index, arg-type]
                        if use == "backward" and site.call.args:  # type: ignore[union-attr]
                            pairs[caller, _BACKWARD_OF_A_LOSS] = None
                    continue
                for node in walk(site.node) if site.call is None else (site.call,):
                    kind = type(node)  # exact types: isinstance on LibCST's (ABC) node classes is slow
                    if kind is cst.Call:
                        owner = dotted(receiver(node)) if method_name(node) else dotted(node.func)
                        use = method_name(node) or "()"
                        if use == "backward" and node.args and owner and "[" not in owner:
                            pairs[owner, _BACKWARD_OF_A_LOSS] = None
                    elif kind is cst.Attribute and node.attr.value in _OPTIMIZER_STATE:
                        owner, use = dotted(node.value), "." + node.attr.value
                    else:
                        continue
                    if owner and "[" not in owner:
                        # (an element, `opts[0]`, says nothing of the others the code steps by name)
                        pairs[owner, use] = None
            found = self._raw_uses[id(scope)] = tuple(pairs)
        return found

    def _scope_trained(self, scope: Scope) -> tuple[str, ...]:
        """The names whose ``.parameters()`` an optimizer built at an own site of ``scope``
        updates (:meth:`_trained_names`), collected once per scope as :meth:`_scope_uses`."""
        found = self._raw_trained.get(id(scope))
        if found is None:
            names: dict[str, None] = {}
            for site in scope.sites:
                for value in (site.value, site.call):
                    if type(value) is cst.Call and not site.in_helper and \
                            constructor_role(self.qualify_call(value), False) is Role.OPTIMIZER:
                        names.update(dict.fromkeys(parameter_owners(value)))
            found = self._raw_trained[id(scope)] = tuple(names)
        return found

    def _used_names(self, scope: Scope) -> _Uses:
        """What the uses of each name of ``scope`` (and of the module, and ``self.`` attributes of
        its class) show. An optimizer: a name whose ``param_groups`` are read, or whose ``step()``
        and ``zero_grad()`` are both called while it is never called itself, asked for its
        ``parameters()`` nor runs a ``backward`` (a model resets but does not step; a scheduler
        steps but does not reset; a DeepSpeed engine runs the backward). A gradient scaler: a
        name whose ``unscale_()`` is called, or its ``scale()``, ``step()`` and ``update()``. An
        engine: a name given a loss's backward (``.backward(loss)``) whose ``step()`` is called."""
        found = self._uses.get(id(scope))
        if found is None:
            used: dict[str, set[str]] = {}  # name → the methods called on it ("()": itself), ".attr"s read
            for other in self._related(scope):
                for owner, use in self._scope_uses(other):
                    if other is scope or owner.startswith("self.") or other is self.module_scope and "." not in owner:
                        used.setdefault(owner, set()).add(use)
            optimizers = frozenset(
                name for name, uses in used.items()
                if not uses & _NOT_AN_OPTIMIZER and ({"step", "zero_grad"} <= uses or uses & _OPTIMIZER_READS))
            scalers = frozenset(name for name, uses in used.items()
                                if "unscale_" in uses or {"scale", "step", "update"} <= uses)
            engines = frozenset(name for name, uses in used.items() if {_BACKWARD_OF_A_LOSS, "step"} <= uses)
            found = self._uses[id(scope)] = _Uses(optimizers - scalers, scalers, engines)
        return found

    def _trained_names(self, scope: Scope) -> frozenset[str]:
        """The names of ``scope`` (and the module's, and ``self.`` attributes of its class)
        whose ``.parameters()`` an optimizer is built on (``SGD(net.parameters())``): each is a
        model, whatever it is called or however it was built (``nn.Linear(...)``, a factory)."""
        found = self._trained.get(id(scope))
        if found is None:
            names = {n for other in self._related(scope) for n in self._scope_trained(other)
                     if other is scope or n.startswith("self.") or other is self.module_scope and "." not in n}
            found = self._trained[id(scope)] = frozenset(names)
        return found

    @staticmethod
    def _is_parameter(name: str, scope: Scope) -> bool:
        if not isinstance(scope.node, cst.FunctionDef):
            return False
        params = scope.node.params
        return any(p.name.value == name for p in (*params.posonly_params, *params.params, *params.kwonly_params))

    def _from_binding(self, site: Site, name: str, depth: int) -> RoleInfo | None:
        position = site.targets.index(name)
        value = site.value
        if isinstance(site.node, (cst.For, cst.With)):
            return None  # loop targets and `as` names: no role from the iterable
        if isinstance(value, (cst.Tuple, cst.List)) and len(site.targets) == len(value.elements):
            value = value.elements[position].value
            position = 0
        if isinstance(value, cst.Call):
            info = self._from_value(value, site.scope, site.order, position, name, depth)
            if info is None and len(site.targets) == 1 and depth <= 6:
                info = self._returned(value, site.scope)  # `loader = make_loader()`: what the helper returns
            return info
        if len(site.targets) > 1:
            return None  # `a, b = pair`: the pair's role says nothing about its elements
        if isinstance(value, (cst.Name, cst.Attribute)) and dotted(value) != name:
            info = self.named(dotted(value), site.scope, site.order, depth + 1)
            return info if info.role is not Role.UNKNOWN else None
        return None

    def _from_value(self, call: cst.Call, scope: Scope, order: int, position: int, target: str,
                    depth: int = 0) -> RoleInfo | None:
        qualified = self.qualify_call(call)
        method = method_name(call)
        initialize = fw.deepspeed.INITIALIZE
        if qualified.endswith(initialize) or qualified == "initialize" and self.imports.qualify(
            "initialize"
        ) == initialize:
            if position < len(_DEEPSPEED_TUPLE):
                return RoleInfo(_DEEPSPEED_TUPLE[position], Evidence.CONSTRUCTOR, owner=fw.deepspeed.PACKAGE,
                                origin=call)
            return None
        if method is not None:
            owner = self.named(dotted(receiver(call)), scope, order, depth + 1)
            if owner.role is Role.ACCELERATOR or (owner.role is Role.UNKNOWN and method.startswith("prepare")):
                if method == "prepare":
                    argument = positional(call, position)
                    inner = self.named(dotted(argument), scope, order, depth + 1) if argument is not None else UNKNOWN
                    if isinstance(argument, cst.Call):  # `prepare(get_optimizer())`: what the getter returns
                        inner = self._returned(argument, scope) or UNKNOWN
                    if inner.role is Role.UNKNOWN:
                        inner = RoleInfo(role_from_name(target), Evidence.NAME)
                    return replace(inner, prepared=True)
                if method in _PREPARE_SINGLE:
                    return RoleInfo(_PREPARE_SINGLE[method], Evidence.CONSTRUCTOR, prepared=True, origin=call)
            if owner.role is Role.FABRIC and method in ("setup", "setup_module", "setup_optimizers"):
                role = Role.MODEL if (method == "setup_module" or (method == "setup" and position == 0)) else (
                    Role.OPTIMIZER
                )
                return RoleInfo(role, Evidence.CONSTRUCTOR, owner="fabric", origin=call)
        text = call_name(call)
        local = self.classes.get(text or "")
        if local is not None:
            # a class of this module: a scheduler or optimizer only if it derives from one
            for base in local.bases:
                base_name = dotted(base.value)
                role = constructor_role(self.imports.qualify(base_name) or base_name or "", False)
                if role is not None:
                    return RoleInfo(role, Evidence.CONSTRUCTOR, prepared=False, origin=call)
            if role_from_name(target) in _STEPPING_ROLES:
                return RoleInfo(Role.OTHER, Evidence.CONSTRUCTOR, origin=call)  # e.g. a KL annealer's step()
            return None
        if f"{text}()" in fw.lightning.ACCESSORS:  # opt = self.optimizers()
            return RoleInfo(fw.lightning.ACCESSORS[f"{text}()"], Evidence.CONSTRUCTOR, origin=call)
        role = constructor_role(qualified, self.imports.qualify(text) is not None)
        if role is not None:
            return RoleInfo(role, Evidence.CONSTRUCTOR, prepared=False, origin=call)
        return None

    def _from_parameter(self, name: str, scope: Scope) -> RoleInfo | None:
        if not isinstance(scope.node, cst.FunctionDef) or "." in name:
            return None
        for param in scope.node.params.params + scope.node.params.kwonly_params:
            if param.name.value == name and param.annotation is not None:
                annotation = param.annotation.annotation
                text = dotted(annotation) if isinstance(annotation, (cst.Name, cst.Attribute)) else None
                role = constructor_role(self.imports.qualify(text) or text or "", False)
                if role is not None:
                    return RoleInfo(role, Evidence.ANNOTATION)
        return None


#: importers read for the constructions of a module's classes
_MAX_IMPORTERS = 8


def _property_reads(class_def: cst.ClassDef, attribute: str) -> str | None:
    """``X`` where ``class_def`` defines ``attribute`` as a ``@property`` whose body is only
    ``return self.X`` (a read of another attribute of the instance), else None."""
    body = class_def.body.body if isinstance(class_def.body, cst.IndentedBlock) else ()
    for statement in body:
        if not (isinstance(statement, cst.FunctionDef) and statement.name.value == attribute
                and any(dotted(d.decorator) == "property" for d in statement.decorators)):
            continue
        inner = statement.body.body if isinstance(statement.body, cst.IndentedBlock) else ()
        line = inner[-1] if len(inner) == 1 or (len(inner) == 2 and _is_docstring(inner[0])) else None
        small = line.body[0] if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
        value = small.value if isinstance(small, cst.Return) else None
        name = dotted(value) if isinstance(value, cst.Attribute) else None
        if name is not None and name.count(".") == 1 and name.startswith("self."):
            return name.partition(".")[2]
    return None


def _is_docstring(statement: cst.CSTNode) -> bool:
    return (isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
            and isinstance(statement.body[0], cst.Expr) and isinstance(statement.body[0].value, cst.SimpleString))


def _built(scopes: list[Scope], name: str | None) -> list[tuple[cst.Call, Site]]:
    """The constructor calls (of the class ``name``; None: any call) in the scopes' own code."""
    found = []
    for scope in scopes:
        for site in scope.sites:
            value = site.value if type(site.value) is cst.Call else site.call
            if isinstance(value, cst.Call) and not site.in_helper and (name is None or dotted(value.func) == name):
                found.append((value, site))
    return found


def _module_stem(project: object | None) -> str:
    """The module name a project view's file is imported as (its file name without ``.py``)."""
    path = str(getattr(project, "path", ""))
    return path.rsplit("/", 1)[-1].removesuffix(".py")


@functools.lru_cache(maxsize=4096)
def constructor_role(qualified: str, resolved: bool) -> Role | None:
    """The role of the value a callee returns, from the framework constructor tables. Cached (the
    tables are constants): the simulator asks it of the same few callees in every run."""
    if not qualified:
        return None
    if fw.diffusers.NOISE_SCHEDULER.match(qualified):
        return Role.OTHER  # a diffusion noise scheduler: named "...Scheduler", no LR scheduler
    if qualified in fw.CONSTRUCTORS:
        return fw.CONSTRUCTORS[qualified]
    for prefix, role in fw.CONSTRUCTOR_PREFIXES:
        if qualified.startswith(prefix):
            tail = qualified[len(prefix):]
            if role is Role.OPTIMIZER and (not tail[:1].isupper() or "." in tail):
                continue
            return role
    segment = last_segment(qualified)
    for pattern, role in conventions.CONSTRUCTOR_NAME_PATTERNS:
        if pattern.match(segment):
            if resolved and role in conventions.ONE_FRAMEWORK_ROLES and \
                    qualified.split(".")[0] not in _framework_packages(role):
                return None  # `audiotools.ml.Accelerator`: another library's class of that name
            return role
    return None


@functools.cache
def _framework_packages(role: Role) -> frozenset[str]:
    """The top-level packages whose constructors the framework tables list for ``role``."""
    return frozenset(name.split(".")[0] for name, found in fw.CONSTRUCTORS.items() if found is role)


def parameter_owners(call: cst.Call) -> set[str]:
    """The dotted names whose ``.parameters()`` / ``.named_parameters()`` the arguments of
    ``call`` read (``[{"params": net.parameters()}]`` included)."""
    found = set()
    for argument in call.args:
        for node in walk(argument.value):
            if isinstance(node, cst.Call) and method_name(node) in ("parameters", "named_parameters"):
                owner = dotted(receiver(node))
                if owner:
                    found.add(owner)
    return found
