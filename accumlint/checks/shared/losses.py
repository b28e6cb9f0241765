"""What a loss is before it reaches backward: a per-microbatch token mean, a value some
helper already backpropagated, an override's contract with the HF Trainer (P4).

Every answer is evidence the code shows; when it shows none, the answer is "no".
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model import conventions
from accumlint.model.dataflow import (
    MAX_CHAIN,
    arithmetic,
    home,
    located_value_history,
    loss_divisions,
    names_feeding,
    reaching_assignment,
    reaching_definitions,
    value_history,
)
from accumlint.model.events import Event
from accumlint.model.kinds import EventKind
from accumlint.model.names import (
    calls_in,
    declares_attribute,
    dotted,
    keyword,
    last_segment,
    method_name,
    positional,
    walk,
)
from accumlint.model.scopes import FrameKind, Scope, Site

if TYPE_CHECKING:
    from accumlint.model import FileModel
    from accumlint.model.groups import Group
    from accumlint.model.module_functions import ModuleFunctions
    from accumlint.model.names import ImportMap

#: Losses that average over the (unmasked) elements they are given (torch 2.13.0
#: nn/functional.py: ``reduction="mean"`` is the default and skips ``ignore_index``).
_MEAN_LOSS = re.compile(r"(cross_entropy|CrossEntropyLoss|nll_loss|NLLLoss)$")
#: Keys and names that carry masked token labels (HF convention: -100 marks unsupervised tokens).
#: Reshapes that lay token positions out for a token loss (flattened, or classes moved to dim 1).
_T = TypeVar("_T")
_TOKEN_LAYOUT = frozenset({"view", "reshape", "flatten", "transpose", "permute"})
_LABEL_KEYS = frozenset({"labels", "label_ids", "lm_labels", "target_ids"})


@dataclass(frozen=True)
class TokenMean:
    """A mean-reduced token loss feeding a backward: ``call`` computes it; ``evidence`` says
    why its denominator varies per microbatch (masked labels, ``ignore_index``)."""

    call: cst.Call
    evidence: str


def token_mean(event: Event, resolve: Callable[[str, Site], Site | None],
               unmasked: Callable[[], frozenset[str]] = frozenset) -> TokenMean | None:
    """The token-mean loss whose value a backward ``event`` differentiates, when the code shows
    (1) a mean-reduced cross entropy / NLL, (2) over flattened or shifted token positions and
    (3) labels that may be masked (an ``ignore_index`` or labels read from a ``"labels"`` key
    other than the keys ``unmasked()`` gives, asked only then: see :func:`unmasked_collate_keys`).
    ``resolve(name, site)`` finds the assignment reaching a name. ``None`` otherwise."""
    if event.loss is None:
        return None
    at = event.site
    for value, operator, _ in value_history(event.loss, at):
        if operator is not None:
            continue
        for call in calls_in(value):
            constructor = _mean_loss(call, at, resolve)
            if constructor is None:
                continue
            if not _token_level(call, at):
                continue
            evidence = _masking(call, constructor, at, unmasked)
            if evidence is not None:
                return TokenMean(call, evidence)
    return None


def masked_mean_by_hand(event: Event) -> TokenMean | None:
    """``(x * mask).sum() / mask.sum()`` (or ``... / mask.float().sum()``) in the value history
    of a backward's loss: a mean over this microbatch's unmasked elements, written by hand."""
    if event.loss is None:
        return None
    for value, operator, _, at in located_value_history(event.loss, event.site):
        if operator is not None:
            continue
        for node in arithmetic(value):
            if not isinstance(node.operator, cst.Divide):
                continue
            mask = _summed_name(node.right)
            # (in a helper's return, `at` reads its parameters as the caller's arguments)
            if mask is not None and mask in _masked_sum_factors(node.left, at) and _read_from_data(mask, at):
                return TokenMean(node, f"`sum(... * {mask}) / {mask}.sum()` averages over the unmasked elements")
    return None


def handed_a_denominator(event: Event) -> bool:
    """Whether the value history of a backward's loss holds a call given the group's denominator by
    a keyword named for one (:data:`conventions.DENOMINATOR_KEYWORD`: ``num_items_in_batch=``,
    ``total_effective_tokens_in_batch=``): the loss it returns may be normalized by it, out of sight."""
    if event.loss is None:
        return False
    return any(arg.keyword is not None and conventions.DENOMINATOR_KEYWORD.match(arg.keyword.value)
               for value, _, _ in value_history(event.loss, event.site) for call in calls_in(value)
               for arg in call.args)


def _read_from_data(name: str, site: Site) -> bool:
    """Whether a mask comes with the data, so its count varies per microbatch: a loop target
    (``for x, y, mask in loader``), a field of a batch (``batch["loss_mask"]``, ``b.mask``), or
    a comparison against a padding value (``labels != -100``). A mask computed by a call
    (``random_masking(x, ratio)``: often a fixed count) or of unknown origin is not."""
    try:  # (the dotted text of a name, an attribute chain or a constant-key subscript is an expression)
        expression = cst.parse_expression(name)
    except cst.ParserSyntaxError:
        return False
    for value, _, _ in value_history(expression, site):
        if isinstance(value, (cst.Subscript, cst.Comparison)):
            return True
        if isinstance(value, cst.Attribute) and dotted(value) != name:
            return True
    if type(expression) in (cst.Attribute, cst.Subscript):
        # `exp.action_mask`, `micro["mask"]` read where it is used: a field of what the loop draws
        return _read_from_data(dotted(expression.value) or "", site)  # type: ignore[attr-defined]
    name, namespace = home(site.scope, name, site.order, site.inline)  # a helper's parameter: the caller's
    definition = reaching_assignment(site.scope, name, site.order, None, namespace)
    return definition is not None and isinstance(definition.node, cst.For)


def _summed_name(expression: cst.BaseExpression) -> str | None:
    """``mask.sum()`` / ``mask.float().sum()`` / ``torch.sum(mask)`` → ``mask``."""
    if not isinstance(expression, cst.Call):
        return None
    if dotted(expression.func) == "torch.sum" and len(expression.args) == 1:
        return dotted(expression.args[0].value)
    if method_name(expression) != "sum" or expression.args:
        return None
    inner = expression.func.value  # type: ignore[attr-defined]
    while isinstance(inner, cst.Call) and method_name(inner) in _CASTS:
        inner = inner.func.value  # type: ignore[attr-defined]
    return dotted(inner)


_CASTS = frozenset({"float", "int", "long", "to", "type_as", "detach", "bool"})


def _masked_sum_factors(expression: cst.BaseExpression, site: Site) -> set[str]:
    """The names multiplied into a ``(...).sum()`` (following one assignment of the summed name)."""
    found: set[str] = set()
    if not (isinstance(expression, cst.Call) and method_name(expression) == "sum"):
        return found
    summed = expression.func.value  # type: ignore[attr-defined]
    for value, _, _ in value_history(summed, site):
        for node in arithmetic(value):
            if isinstance(node.operator, cst.Multiply):
                found.update(n for n in (dotted(node.left), dotted(node.right)) if n)
    return found


def hf_output_token_mean(event: Event, model_output: Callable[[cst.BaseExpression, Site], bool],
                         collators: set[str]) -> TokenMean | None:
    """``outputs.loss`` (``outputs["loss"]``) of a model call, in a module that builds one of
    the label-masking collators ``collators``: the model's own token mean over the -100-padded
    labels. ``model_output(expression, site)`` says whether an expression is a model's output."""
    if event.loss is None or not collators:
        return None
    for value, operator, _ in value_history(event.loss, event.site):
        if operator is not None:
            continue
        for node in arithmetic(value) if isinstance(value, cst.BinaryOperation) else [value]:
            for side in ((node.left, node.right) if isinstance(node, cst.BinaryOperation) else (node,)):
                holder = _loss_field(side)
                if holder is not None and model_output(holder, event.site):
                    return TokenMean(side, "the model's own loss is a mean over the labels that are not -100, "
                                     f"set by {_quoted(sorted(collators)[0])}")
    return None


def _quoted(evidence: str) -> str:
    return evidence if " " in evidence else f"`{evidence}`"


def pads_labels_with_ignore(module: cst.Module) -> set[str]:
    """A one-element evidence set when a function of ``module`` writes -100 into a
    labels-named value (``labels.masked_fill(m, -100)``, ``torch.where(m, labels, -100)``,
    ``pad_sequence(labels, padding_value=-100)``, ``labels[m] = -100``), else empty."""
    for node in walk(module):
        if isinstance(node, cst.Call) and _writes_ignore(node) and any(
                "label" in name.lower() for name in names_feeding(node)):
            return {"this module's own code"}
        if not isinstance(node, cst.Assign):
            continue
        targets = [t.target.value if isinstance(t.target, cst.Subscript) else t.target for t in node.targets]
        if not any("label" in (dotted(t) or "").lower() for t in targets):
            continue
        if _is_int(node.value, -100) and any(isinstance(t.target, cst.Subscript) for t in node.targets):
            return {"this module's own code"}
        if any(isinstance(n, cst.Call) and _writes_ignore(n) for n in walk(node.value)):
            return {"this module's own code"}
    return set()


def _writes_ignore(call: cst.Call) -> bool:
    name = method_name(call) or last_segment(dotted(call.func) or "")
    if name in ("masked_fill", "masked_fill_", "where") and call.args and _is_int(call.args[-1].value, -100):
        return True
    return name == "pad_sequence" and _is_int(keyword(call, "padding_value"), -100)


def _loss_field(expression: cst.BaseExpression) -> cst.BaseExpression | None:
    if isinstance(expression, cst.Attribute) and expression.attr.value == "loss":
        return expression.value
    if (isinstance(expression, cst.Subscript) and len(expression.slice) == 1
            and isinstance(expression.slice[0].slice, cst.Index)
            and isinstance(expression.slice[0].slice.value, cst.SimpleString)
            and expression.slice[0].slice.value.evaluated_value == "loss"):
        return expression.value
    return None


def _mean_loss(call: cst.Call, site: Site, resolve) -> cst.Call | None:
    """The call (or the criterion's constructor) when ``call`` is a mean-reduced token loss."""
    name = dotted(call.func) or ""
    constructor = call
    if not _MEAN_LOSS.search(last_segment(name)):
        binding = resolve(name, site) if name else None  # criterion = nn.CrossEntropyLoss(...)
        if binding is None or not isinstance(binding.value, cst.Call):
            return None
        if not _MEAN_LOSS.search(last_segment(dotted(binding.value.func))):
            return None
        constructor = binding.value
    reduction = keyword(constructor, "reduction") or keyword(call, "reduction")
    if reduction is not None and not isinstance(reduction, cst.SimpleString):
        reduction = site.scope.bound_value(reduction, constructor)  # a helper's parameter
    if reduction is not None and not (isinstance(reduction, cst.SimpleString)
                                      and reduction.evaluated_value == "mean"):
        return None
    return constructor


def _token_level(call: cst.Call, site: Site) -> bool:
    """The loss's inputs are per-token: flattened (``view(-1, V)``, ``reshape``, ``flatten``) or
    shifted (``logits[..., :-1, :]``) positions."""
    for arg in call.args:
        for value, _, _ in value_history(arg.value, site):
            for node in walk(value):
                if isinstance(node, cst.Call) and (method_name(node) or dotted(node.func)) in _TOKEN_LAYOUT:
                    return True
                if isinstance(node, cst.Slice) and (_is_int(node.upper, -1) or _is_int(node.lower, 1)):
                    return True
    return False


def _masking(call: cst.Call, constructor: cst.Call, site: Site,
             unmasked: Callable[[], frozenset[str]]) -> str | None:
    ignored = keyword(call, "ignore_index") or keyword(constructor, "ignore_index")
    if ignored is not None:
        # a helper's loss (inlined at the backward) reads the helper's own names
        origin = next((s for s in reversed(site.scope.sites) if s.order <= site.order and s.value is call), site)
        if len(call.args) > 1 and _fixed_window(call.args[1].value, origin):
            return None  # packed blocks cut to one length: every microbatch has the same token count
        if (_negative_literal(ignored) and len(call.args) > 1
                and _copied_inputs(call.args[1].value, call.args[0].value, origin)):
            return None  # targets copied from the token ids, never masked: no id equals a negative ignore value
        if _negative_literal(ignored) and len(call.args) > 1 and _drawn_classes(call.args[1].value, origin):
            return None  # targets drawn as class indices: none equals a negative ignore value
        return "`ignore_index` skips masked tokens"
    for arg in call.args[1:]:
        for value, _, _ in value_history(arg.value, site):
            for node in walk(value):
                if isinstance(node, cst.Subscript) and last_segment(dotted(node)) in _LABEL_KEYS \
                        and _key_of(node) not in unmasked():
                    return "the labels come from a `labels` field (masked tokens are -100)"
    return None


#: Calls that write an ignore value into labels (or pick positions to supervise).
_MASKING_CALLS = frozenset({"masked_fill", "masked_fill_", "where", "fill_", "index_fill_", "scatter_",
                            "masked_scatter_", "pad", "pad_sequence", "masked_select"})


def _copied_inputs(targets: cst.BaseExpression, scores: cst.BaseExpression, site: Site) -> bool:
    """Whether the targets of a token loss are the inputs themselves, never masked: their value
    history reads a non-label field (``batch["input_ids"].clone()``) or slices the tensor the
    scores are computed from (``ids[:, 1:]`` beside ``model(ids[:, :-1])``), reads no label field
    (``batch["labels"]``, ``b.labels``), writes no ignore value (``masked_fill``, ``where``, a
    negative literal, padding) and none of its names is written in place in the scope
    (``labels[labels == pad] = -100``, ``labels.masked_fill_(...)``). Every position is then
    supervised, so ``ignore_index`` skips nothing: the token count is the microbatch's shape."""
    inputs = {dotted(node) for value, _, _ in value_history(scores, site) for node in walk(value)
              if isinstance(node, (cst.Name, cst.Attribute))}
    copied = False
    chain: set[str] = set()
    for value, operator, _ in value_history(targets, site):
        if operator is not None:
            return False  # `labels -= ...`: arithmetic on the targets
        for node in walk(value):
            if isinstance(node, cst.Call) and (method_name(node) or last_segment(dotted(node.func) or "")) \
                    in _MASKING_CALLS:
                return False
            if _is_int(node, -100):
                return False  # the ignore value written some other way
            if isinstance(node, cst.Attribute) and node.attr.value in _LABEL_KEYS:
                return False
            if isinstance(node, cst.Name):
                chain.add(node.value)
            if not isinstance(node, cst.Subscript):
                continue
            key = _key_of(node)
            if key in _LABEL_KEYS:
                return False
            copied = copied or key is not None or dotted(node.value) in inputs
    return copied and not any(_written_in_place(other, chain) for other in site.scope.sites)


#: Calls whose result is class indices in ``[0, C)``: a draw from a categorical distribution
#: (``Categorical(...).sample()``, ``torch.multinomial``) or the arg-max of scores (torch 2.13.0
#: distributions/categorical.py, functional.py). No index they give equals a negative ignore value.
_DRAWING_CALLS = frozenset({"sample", "multinomial", "argmax"})
#: Methods that keep every element of the targets (layout, dtype, a copy): the spine passes them.
_KEEPS_ELEMENTS = _TOKEN_LAYOUT | _CASTS | frozenset({"contiguous", "clone", "squeeze", "unsqueeze", "long"})


def _drawn_classes(targets: cst.BaseExpression, site: Site) -> bool:
    """Whether the targets of a token loss are class indices the code draws itself (a sample of
    the model's own distribution, ``torch.multinomial``, an ``argmax``), followed back through
    reshapes, casts and plain assignments (every definition that may reach) to the drawing call,
    with none of the names on the way written in place (``drawn[m] = -1``). Targets combined with
    anything else (``torch.where(keep, drawn, -1)``) or of unknown origin are not: they may hold
    the ignore value."""
    work: list[tuple[cst.BaseExpression, int]] = [(targets, site.order)]
    names: set[str] = set()
    drawn = False
    for _ in range(MAX_CHAIN * 4):
        if not work:
            return drawn and not any(_written_in_place(other, names) for other in site.scope.sites)
        current, order = work.pop()
        while isinstance(current, cst.Call) and method_name(current) in _KEEPS_ELEMENTS:
            current = current.func.value  # type: ignore[attr-defined]
        if isinstance(current, cst.Call) and (method_name(current) or last_segment(dotted(current.func) or "")) \
                in _DRAWING_CALLS:
            drawn = True
            continue
        name = dotted(current) if isinstance(current, (cst.Name, cst.Attribute)) else None
        if name is None:
            return False
        definitions, on_entry = reaching_definitions(site.scope, name, order, inline=site.inline)
        if on_entry or not definitions:
            return False
        names.add(name)
        for definition in definitions:
            if definition.augmented is not None or definition.value is None \
                    or isinstance(definition.node, (cst.For, cst.With)):
                return False
            work.append((definition.value, definition.order))
    return False


def _negative_literal(node: cst.BaseExpression) -> bool:
    """``-100``, ``-1``: a value no token id takes (a pad id would ignore the padding)."""
    return (isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
            and isinstance(node.expression, cst.Integer))


def _written_in_place(site: Site, names: set[str]) -> bool:
    """``labels[m] = -100`` or ``labels.masked_fill_(m, -100)`` on one of ``names``."""
    statement = site.statement
    if isinstance(statement, cst.Assign) and any(
            isinstance(t.target, cst.Subscript) and dotted(t.target.value) in names for t in statement.targets):
        return True
    call = site.call
    method = method_name(call) if call is not None else None
    return bool(method and method.endswith("_") and dotted(call.func.value) in names)  # type: ignore[union-attr]


def _key_of(subscript: cst.Subscript) -> str | None:
    """The string key of ``batch["target_ids"]``, if that is what it reads."""
    element = subscript.slice[0].slice if len(subscript.slice) == 1 else None
    if isinstance(element, cst.Index) and isinstance(element.value, cst.SimpleString):
        return element.value.evaluated_value  # type: ignore[return-value]
    return None


def unmasked_collate_keys(functions: ModuleFunctions) -> frozenset[str]:
    """The label keys (``"target_ids"``) that every ``collate_fn`` of the module's loaders builds
    by cutting stacked blocks (``ids[:, 1:]``), with no -100 written and no padding anywhere in the
    function: every microbatch then holds the same number of supervised tokens. A key that one
    collate function builds otherwise is not among them. Where every collator stacks the
    examples as built, the dataset code's labels count too: a ``__getitem__`` that cuts a block
    (``chunk[1:]``) or a function that copies another field (``result["labels"] =
    result["input_ids"].copy()``), with nothing padded or set to -100.

    The collate functions read: the module's own, one imported from a project module by name
    (``collate_fn=pack``), and those of a project loader class of another module whose instance
    the module iterates (``loader = PackedLoader(...)``; ``next(loader)``, ``for b in loader``, or
    handed to a function of the module that does). Only those names are looked up: following
    every import would spend the project's budget of followed modules."""
    cut: set[str] = set()
    other: set[str] = set()
    for collate in _collate_functions(functions):
        _read_collate(collate, cut, other)
    if _batches_stacked_as_built(functions):
        for producer in _label_producers(functions):
            _read_collate(producer, cut, other)
            _read_label_writes(producer, cut, other)
    for name in _iterated_instances_of(functions):
        found = functions.class_named(name, any_module=True)
        if found is not None and found[0] is not functions:
            for collate in _collate_functions(found[0], found[1]):
                _read_collate(collate, cut, other)
    return frozenset(cut - other)


#: collators that stack the examples as built: no padding, no label written
_STACKING_COLLATORS = frozenset({"default_data_collator", "default_collate"})


def _batches_stacked_as_built(module: ModuleFunctions) -> bool:
    """Whether every ``collate_fn=`` of the module is one of its own functions or methods (read by
    :func:`_collate_functions`) or a collator that stacks the examples unchanged: the labels a
    dataset builds reach the loss as built."""
    for node in walk(module._module):
        collate = keyword(node, "collate_fn") if isinstance(node, cst.Call) else None
        if collate is None:
            continue
        if isinstance(collate, cst.Name) and collate.value in module.functions:
            continue
        if isinstance(collate, cst.Attribute) and dotted(collate.value) == "self":
            continue
        if last_segment(dotted(collate) or "") not in _STACKING_COLLATORS:
            return False
    return True


def _label_producers(module: ModuleFunctions) -> Iterator[cst.FunctionDef]:
    """The module's dataset code that builds label fields: each class's ``__getitem__`` and the
    functions that write a label key (``result["labels"] = ...`` in a ``dataset.map`` function)."""
    for (_, name), method in module.methods.items():
        if name == "__getitem__":
            yield method
    for function in module.functions.values():
        if any(isinstance(n, cst.Assign) and any(isinstance(t.target, cst.Subscript) and _key_of(t.target)
                                                 in _LABEL_KEYS for t in n.targets) for n in walk(function.body)):
            yield function


def _read_label_writes(function: cst.FunctionDef, cut: set[str], other: set[str]) -> None:
    """Sort the label keys ``function`` writes (``result["labels"] = result["input_ids"].copy()``)
    into ``cut`` (a copy of another field, in a function that pads nothing and writes no -100) and
    ``other``."""
    padded = _pads(function)
    for node in walk(function.body):
        if not isinstance(node, cst.Assign):
            continue
        for target in node.targets:
            key = _key_of(target.target) if isinstance(target.target, cst.Subscript) else None
            if key in _LABEL_KEYS:
                copied = not padded and _copies_a_field(node.value)
                (cut if copied else other).add(key)  # type: ignore[arg-type]


def _copies_a_field(value: cst.BaseExpression) -> bool:
    """``x["input_ids"].copy()`` (``.clone()``, ``list(...)``, ``[...]``, a slice): another field as is."""
    while True:
        if isinstance(value, cst.Call) and method_name(value) in ("copy", "clone") and not value.args:
            value = value.func.value  # type: ignore[attr-defined]
        elif isinstance(value, cst.Call) and dotted(value.func) in ("list", "copy.deepcopy", "copy.copy") \
                and len(value.args) == 1:
            value = value.args[0].value
        else:
            break
    key = _key_of(value) if isinstance(value, cst.Subscript) else None
    return key is not None and key not in _LABEL_KEYS


def _collate_functions(module: ModuleFunctions, owner: cst.ClassDef | None = None) -> Iterator[cst.FunctionDef]:
    """The functions and methods passed as ``collate_fn=`` (``pack``, ``self.pack``, an imported
    ``pack``) in the module, or only in the methods of its class ``owner``."""
    if owner is None:
        bodies = (module._module, *(f.body for f in module.functions.values()),
                  *(f.body for f in module.methods.values()))
    else:
        bodies = tuple(f.body for (cls, _), f in module.methods.items() if cls is owner)
    for node in (n for body in bodies for n in walk(body)):
        collate = keyword(node, "collate_fn") if isinstance(node, cst.Call) else None
        if isinstance(collate, cst.Name) and collate.value in module.functions:
            yield module.functions[collate.value]
        elif isinstance(collate, cst.Name):
            found = module.imported(collate.value, any_module=True)
            if found is not None and isinstance(found[1], cst.FunctionDef):
                yield found[1]
        elif isinstance(collate, cst.Attribute) and dotted(collate.value) == "self":
            yield from (f for (cls, name), f in module.methods.items() if name == collate.attr.value
                        and (owner is None or cls is owner))


def _iterated_instances_of(module: ModuleFunctions) -> list[str]:
    """The names of classes not defined in the module whose instances it iterates: ``Cls(...)``
    (or ``iter(Cls(...))``), directly or through a name, read by ``for``, ``next``, ``iter`` or
    ``enumerate``, or passed to a function of the module that reads the matching parameter so
    (``train_step(model, loader)``)."""
    def built_by(value: cst.BaseExpression) -> str | None:
        while isinstance(value, cst.Call) and dotted(value.func) in _ITERATING and value.args:
            value = value.args[0].value
        called = dotted(value.func) if isinstance(value, cst.Call) else None
        return called if called and called not in module.functions and called not in module.classes else None

    def iterated(body: cst.CSTNode) -> list[cst.BaseExpression]:
        return [n.iter if isinstance(n, cst.For) else n.args[0].value for n in walk(body)
                if isinstance(n, cst.For) or isinstance(n, cst.Call) and n.args and dotted(n.func) in _ITERATING]

    consuming_params: dict[str, set[int | str]] = {}
    for name, function in module.functions.items():
        read = {e.value for e in iterated(function.body) if isinstance(e, cst.Name)}
        params = function.params.params
        consuming_params[name] = {i for i, p in enumerate(params) if p.name.value in read} | {
            p.name.value for p in params if p.name.value in read}
    built: dict[str, str] = {}  # variable -> the class called to build it
    consumed: list[cst.BaseExpression] = iterated(module._module)
    for node in walk(module._module):
        if isinstance(node, cst.Assign) and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            called = built_by(node.value)
            if called is not None:
                built[node.targets[0].target.value] = called
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value in consuming_params:
            wanted = consuming_params[node.func.value]
            for i, arg in enumerate(node.args):
                if (i if arg.keyword is None else arg.keyword.value) in wanted:
                    consumed.append(arg.value)
    classes = {built_by(e) for e in consumed} | {built.get(e.value) for e in consumed if isinstance(e, cst.Name)}
    return sorted(c for c in classes if c is not None)


#: calls that iterate their first argument
_ITERATING = frozenset({"next", "iter", "enumerate"})


def _read_collate(function: cst.FunctionDef, cut: set[str], other: set[str]) -> None:
    """Sort the label keys ``function`` returns into ``cut`` (from stacked blocks) and ``other``."""
    padded = _pads(function)
    assigned = {t.target.value: a.value for a in walk(function.body) if isinstance(a, cst.Assign)
                for t in a.targets if isinstance(t.target, cst.Name)}
    for ret in (n for n in walk(function.body) if isinstance(n, cst.Return) and isinstance(n.value, cst.Dict)):
        for element in ret.value.elements:  # type: ignore[union-attr]
            key = element.key.evaluated_value if isinstance(element, cst.DictElement) and isinstance(
                element.key, cst.SimpleString) else None
            if key in _LABEL_KEYS:
                (other if padded or not _cut_from_blocks(element.value, assigned) else cut).add(key)


def _pads(function: cst.FunctionDef) -> bool:
    """Whether ``function`` pads or writes -100 anywhere."""
    return any(isinstance(n, cst.Call) and (_writes_ignore(n) or "pad" in last_segment(
        dotted(n.func) or method_name(n) or "").lower()) or _is_int(n, -100) for n in walk(function.body))


def _cut_from_blocks(value: cst.BaseExpression, assigned: dict[str, cst.BaseExpression]) -> bool:
    """Whether ``value`` (through the collate function's own assignments) slices something and
    reads no label field: ``ids[:, 1:]`` of ``ids = torch.stack(blocks)``."""
    pending, seen, sliced = [value], set(), False
    while pending:
        current = pending.pop()
        for node in walk(current):
            if isinstance(node, cst.Subscript) and last_segment(dotted(node)) in _LABEL_KEYS:
                return False
            if isinstance(node, cst.Subscript) and _key_of(node) in _LABEL_KEYS:
                return False
            if isinstance(node, cst.Attribute) and node.attr.value in _LABEL_KEYS:
                return False  # `self.labels[i:j]`: labels stored elsewhere, masked or not
            sliced = sliced or isinstance(node, cst.Slice)
            if isinstance(node, cst.Name) and node.value in assigned and node.value not in seen:
                seen.add(node.value)
                pending.append(assigned[node.value])
    return sliced


def _fixed_window(targets: cst.BaseExpression, site: Site) -> bool:
    """Whether the targets are a window of fixed length cut from a packed block
    (``blk[:, 1:ctx + 1]``: a slice whose upper bound is a name, plus a constant), not labels
    read from a batch field: every microbatch then holds the same number of tokens."""
    windows = labelled = 0
    for value, _, _ in value_history(targets, site):
        for node in walk(value):
            if isinstance(node, cst.Subscript) and last_segment(dotted(node)) in _LABEL_KEYS:
                labelled += 1
            if isinstance(node, cst.Slice) and _named_bound(node.upper):
                windows += 1
    return windows > 0 and labelled == 0


def _named_bound(node: cst.BaseExpression | None) -> bool:
    """``ctx`` or ``ctx + 1`` (a length held in a name), not ``-1`` or ``None``."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add):
        return _named_bound(node.left) and isinstance(node.right, cst.Integer)
    return isinstance(node, (cst.Name, cst.Attribute)) and dotted(node) != "None"


def _is_int(node: cst.CSTNode | None, value: int) -> bool:
    if isinstance(node, cst.Integer):
        return node.value == str(value)
    return (isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus)
            and isinstance(node.expression, cst.Integer) and node.expression.value == str(-value))



def loss_history_in_view(group: Group, event: Event) -> bool:
    """Whether a backward inlined from a helper has its loss's whole history in view: the helper
    computes the loss itself (``def step(model, x, y): loss = crit(model(x), y); loss.backward()``,
    in this module or another), or it holds the group's micro-loop too (``def forward_backward(batch):
    for micro in ...: loss.backward()``). A backward helper given the caller's loss (``def
    backward(loss, scaler)``) or backpropagating what a parameter's method returns (a pipeline
    engine's ``sum(state.pop_all()).backward()``) is not read."""
    inline = event.site.inline
    if inline is None:
        return False
    call = event.site.call
    if call is None or call.args or not isinstance(call.func, cst.Attribute):
        return False  # `self.backward(state)`: a method of the user's, not a tensor's backward
    if (dotted(call.func.value) or "").split(".")[0] in ("self", "cls"):
        return False
    if event.loss is not None and _computed_in(event.loss, event.site, event.order):
        return True
    if any(link.foreign is not None for link in inline.chain()):
        return False
    return any(node is group.loop for node in walk(inline.function))


def _computed_in(expression: cst.BaseExpression, site: Site, order: int, depth: int = 0) -> bool:
    """Whether the value of ``expression``, read at ``order`` in the inlined helper ``site`` is
    part of, is computed by that helper: every name it reads is assigned there (not a parameter,
    nor a loop or ``with`` target), from a call or from names computed there in turn."""
    names = names_feeding(expression)
    if not names or depth > MAX_CHAIN:
        return False
    for name in names:
        root = name.split(".", 1)[0].split("[", 1)[0]
        definition = reaching_assignment(site.scope, root, order, None, site.inline)
        if definition is None or definition.value is None or isinstance(definition.node, (cst.For, cst.With)):
            return False
        if not isinstance(definition.value, cst.Call) and not _computed_in(definition.value, definition,
                                                                            definition.order, depth + 1):
            return False
    return True


def never_scaled(event: Event) -> bool:
    """Whether nothing divides or multiplies the loss of a backward ``event`` on its way there
    (no ``/``, ``*``, ``/=``, ``*=`` in its value history)."""
    if event.loss is None:
        return False
    for name in names_feeding(event.loss):
        definition = reaching_assignment(event.site.scope, name, event.order, None, event.site.inline)
        if definition is not None and isinstance(definition.node, cst.With):
            return False  # `with amp.scale_loss(loss, opt) as scaled:` — what the context yields is not read
        if definition is not None and isinstance(definition.node, cst.For):
            return False  # `for scaler, loss in zip(scalers, losses):` — the elements' history is not read
    for value, operator, _ in value_history(event.loss, event.site):
        if isinstance(operator, (cst.DivideAssign, cst.MultiplyAssign)):
            return False
        if any(isinstance(node.operator, (cst.Divide, cst.Multiply)) for node in arithmetic(value)):
            return False
        if any(method_name(call) in _SCALING_METHODS for call in calls_in(value)):
            return False  # `loss.sum().mul(scale / n).backward()`: a product written as a tensor method
    return True


#: tensor methods that multiply or divide (torch 2.13.0 ``Tensor.mul`` / ``div`` and their aliases)
_SCALING_METHODS = frozenset({"mul", "div", "multiply", "divide", "true_divide"})


_GRADIENT_SCALING = frozenset({"div_", "mul_", "scale_grads", "_scale_grads", "scale_gradients",
                               "_foreach_div_", "_foreach_mul_", "multiply_grads"})


def scales_gradients(sites: list[Site]) -> bool:
    """Whether some site rescales gradients by hand (``p.grad /= n``, ``p.grad.div_(n)``,
    torchtune's ``scale_grads``), which normalizes after the backward instead of before."""
    for site in sites:
        if site.call is not None and last_segment(dotted(site.call.func)) in _GRADIENT_SCALING:
            return True
        if any(t and t.endswith(".grad") for t in site.targets) and site.value is not None and (
                site.augmented is not None or any(True for _ in arithmetic(site.value))):
            return True
    return False


def hands_parameters_over(sites: list[Site], imports: ImportMap) -> bool:
    """Whether some site calls a function neither followed into the project nor imported from a
    library, passing it a model's parameters (``fn(model.parameters(), n)``): what it does to
    their gradients is not in view."""
    for site in sites:
        call = site.call
        callee = dotted(call.func) if call is not None else None
        if call is None or site.followed or callee in _BUILTINS or imports.qualify(callee) is not None:
            continue
        if any(isinstance(arg.value, cst.Call) and method_name(arg.value) in _PARAMETER_METHODS for arg in call.args):
            return True
    return False


_PARAMETER_METHODS = frozenset({"parameters", "named_parameters"})
_BUILTINS = frozenset(dir(builtins))  # `list(model.parameters())` reads them


def retains_graph(backward: Event) -> bool:
    """Whether a backward keeps its graph for another backward: ``retain_graph=`` anything but a
    literal ``False``/``None``, or ``create_graph=True`` (torch's default for ``retain_graph``
    then). A backward read from a framework's loop (no call) retains nothing we can see."""
    call = backward.site.call
    if call is None:
        return False
    flag = keyword(call, "retain_graph")
    if flag is None:
        flag = keyword(call, "create_graph")
        return isinstance(flag, cst.Name) and flag.value == "True"
    return not (isinstance(flag, cst.Name) and flag.value in ("False", "None"))


def retained_backwards(events: list[Event], sites: list[Site]) -> list[Event]:
    """Backwards with ``retain_graph=True`` after which no backward (nor ``autograd.grad``) of
    the same sites runs again: the retained graph is never used."""
    backwards = [e for e in events if e.kind is EventKind.BACKWARD and e.site.call is not None]
    second_pass = any(s.call is not None and (dotted(s.call.func) or "").endswith("autograd.grad") for s in sites)
    retained: list[Event] = []
    for event in backwards:
        flag = keyword(event.site.call, "retain_graph")  # type: ignore[arg-type]
        if not (isinstance(flag, cst.Name) and flag.value == "True") or second_pass:
            continue
        if not any(other.order > event.order for other in backwards):
            retained.append(event)
    return retained


# --- a value backpropagated before it is divided ----------------------------------------------


def backpropagated_values(events: list[Event], sites: list[Site]) -> dict[int, Event]:
    """Nodes of the scope whose value was already backpropagated, mapped to that backward:
    ``id(call)`` of a same-module helper call that runs backward on the value it returns."""
    found: dict[int, Event] = {}
    for event in events:
        if event.kind is not EventKind.BACKWARD or not event.site.in_helper or event.loss is None:
            continue
        call = _innermost_helper_call(event.site)
        if call is None:
            continue
        loss_names = set(names_feeding(event.loss))
        for site in sites:
            if (site.is_return and site.helper is event.site.helper and _innermost_helper_call(site) is call
                    and site.value is not None and loss_names & set(names_feeding(site.value))):
                found[id(call)] = event
    return found


def _innermost_helper_call(site: Site) -> cst.CSTNode | None:
    for frame in reversed(site.frames):
        if frame.kind is FrameKind.HELPER:
            return frame.node
    return None


def divided_after_backward(
    scope: Scope, events: list[Event], is_divisor: Callable[[cst.BaseExpression], bool]
) -> Iterator[tuple[cst.CSTNode, Event]]:
    """Divisions by an accepted divisor of a value whose backward already ran: ``helper(b) / A``
    where the helper backpropagates what it returns, or ``loss /= A`` (``loss = loss / A``)
    after ``loss.backward()`` with no backward of the result afterwards. A division in an inlined
    helper is read in the helper's names, after a backward of that same helper call."""
    done = backpropagated_values(events, scope.sites)
    backwards = [e for e in events if e.kind is EventKind.BACKWARD and e.loss is not None]
    for site in scope.sites:
        if site.value is None or not site.targets:
            continue
        own = [e for e in backwards if e.site.inline is site.inline]
        if isinstance(site.augmented, cst.DivideAssign) and is_divisor(site.value):
            name = site.targets[0]
            event = _backward_of(name, site, own)
            if event is not None and not _backpropagated_later(name, site, events):
                yield site.node, event
            continue
        value = site.value
        if not (isinstance(value, cst.BinaryOperation) and isinstance(value.operator, cst.Divide)
                and is_divisor(value.right)):
            continue
        numerator = value.left
        if isinstance(numerator, cst.Call) and id(numerator) in done:
            if not any(_backpropagated_later(t, site, events) for t in site.targets if t):
                yield value, done[id(numerator)]
            continue
        name = dotted(numerator)
        if name is None:
            continue
        definition = reaching_assignment(scope, name, site.order, None, site.inline)
        if (definition is not None and isinstance(definition.value, cst.Call) and id(definition.value) in done
                and not _backpropagated_later(name, site, events)):
            yield value, done[id(definition.value)]  # loss = helper(b); loss = loss / A
        elif name in site.targets:
            event = _backward_of(name, site, own)
            if event is not None and not _backpropagated_later(name, site, events):
                yield value, event


def _backward_of(name: str, site: Site, backwards: list[Event]) -> Event | None:
    """The backward of ``name``'s current value that ran before ``site`` in the same pass (the
    backwards given are those of ``site``'s namespace)."""
    definition = reaching_assignment(site.scope, name, site.order, None, site.inline)
    for event in backwards:
        if not (event.order < site.order and dotted(event.loss) == name):
            continue
        if definition is None or definition.order < event.order:
            return event
    return None


def _backpropagated_later(name: str, site: Site, events: list[Event]) -> bool:
    """Whether a backward after ``site`` may go through ``name``'s value: one of ``site``'s own
    namespace that reads it, or any backward in another (a helper's, or the caller of a helper
    that returns the value: its names are not compared)."""
    return any(e.kind is EventKind.BACKWARD and e.order > site.order and e.loss is not None
               and (e.site.inline is not site.inline or name in names_feeding(e.loss)) for e in events)


# --- HF Trainer compute_loss overrides ---------------------------------------------------------

# (the Trainer's attributes and parameters are rows of ``accumlint.frameworks.transformers``)


def ignores_parameter(function: cst.FunctionDef, parameter: str) -> bool:
    """Whether ``function`` declares ``parameter`` and never reads it (nor passes ``locals()``)."""
    params = function.params
    declared = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
    if parameter not in declared:
        return False
    for node in walk(function.body):
        if isinstance(node, cst.Name) and node.value in (parameter, "locals", "vars"):
            return False
    return True


def reads_key(function: cst.FunctionDef, key: str) -> bool:
    """Whether ``function``'s body mentions the string constant ``key`` (``inputs["labels"]``,
    ``inputs.pop("labels")``)."""
    return any(isinstance(node, cst.SimpleString) and node.evaluated_value == key for node in walk(function.body))


def trained_models_take_no_loss_kwargs(module: cst.Module, trainer_class: str) -> bool:
    """Whether every model this module gives ``trainer_class(model=...)`` is an instance of a class
    defined here whose ``forward`` takes no ``**kwargs`` (and that declares no ``accepts_loss_kwargs``).

    transformers 5.24.0 ``Trainer.__init__`` sets ``model_accepts_loss_kwargs`` from that signature;
    without it ``num_items_in_batch`` is ``None`` in ``training_step``, which then divides the returned
    loss by A itself. ``False`` when no such construction is seen or a model cannot be resolved."""
    classes = {node.name.value: node for node in walk(module) if isinstance(node, cst.ClassDef)}
    bound: dict[str, list[cst.BaseExpression]] = {}
    for node in walk(module):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Call):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    bound.setdefault(target.target.value, []).append(node.value)
    models: list[cst.BaseExpression] = []
    for node in walk(module):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == trainer_class:
            given = [a.value for a in node.args if a.keyword is not None and a.keyword.value == "model"]
            given += [node.args[0].value] if node.args and node.args[0].keyword is None else []
            if not given:
                return False
            models.extend(given)
    if not models:
        return False
    for expression in models:
        calls = bound.get(expression.value, []) if isinstance(expression, cst.Name) else [expression]
        if not calls:
            return False
        for call in calls:
            name = call.func.value if isinstance(call, cst.Call) and isinstance(call.func, cst.Name) else None
            if name not in classes or not _forward_takes_no_kwargs(classes[name]):
                return False
    return True


def _forward_takes_no_kwargs(class_def: cst.ClassDef) -> bool:
    if declares_attribute(class_def, frozenset({"accepts_loss_kwargs"})):
        return False
    body = class_def.body.body if isinstance(class_def.body, cst.IndentedBlock) else ()
    forward = next((s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "forward"), None)
    return forward is not None and not isinstance(forward.params.star_kwarg, cst.Param)


# --- the questions a rule asks of a module's losses -----------------------------------------------


def backward_token_mean(model: FileModel, event: Event) -> TokenMean | None:
    """The mean-reduced token loss (with maskable labels) a backward ``event`` differentiates, if shown."""
    return token_mean(event, lambda name, site: model.reaching(name, site), lambda: _memo(
        model, "losses.unmasked_keys", lambda: unmasked_collate_keys(model.functions)))


def labels_padded_with_ignore(model: FileModel) -> set[str]:
    """Evidence that the module's own collate code pads labels with -100 (:func:`pads_labels_with_ignore`),
    walked once per module."""
    return _memo(model, "losses.pads_labels", lambda: pads_labels_with_ignore(model.module))


def may_rescale_gradients(model: FileModel, group: Group) -> bool:
    """Whether the group's code hands a model's parameters to a function it cannot see
    (``self.divide_grads_(self.model.parameters(), n)`` with the function given from outside): it
    may rescale their gradients (:func:`hands_parameters_over`); or the module registers a DDP
    communication hook of its own, which may rescale them at the sync."""
    events = {id(event.site) for event in group.events}
    return hands_parameters_over([s for s in group.region_sites if id(s) not in events], model.imports) \
        or _memo(model, "losses.own_comm_hook", lambda: _own_comm_hook(model.module))


def _own_comm_hook(module: cst.Module) -> bool:
    """Whether ``module`` registers a DDP communication hook of its own (not a stock one of torch's): it
    decides what each synchronized gradient bucket becomes, a division by A too."""
    for call in walk(module):
        if type(call) is cst.Call and method_name(call) == fw.pytorch.REGISTER_COMM_HOOK:
            hook = positional(call, 1) or keyword(call, "hook")
            if last_segment(dotted(hook)) not in fw.pytorch.STOCK_COMM_HOOKS:
                return True
    return False


def divisions_after_backward(model: FileModel, group: Group) -> list[tuple[cst.CSTNode, Event]]:
    """Divisions by A (or a microbatch count) of a loss whose backward already ran, in ``group``
    (:func:`divided_after_backward`)."""
    def is_count(divisor: cst.BaseExpression) -> bool:
        return model.is_accumulation_name(divisor) or (isinstance(divisor, cst.Call) and dotted(divisor.func) == "len")

    events = [e for e in model.events[group.scope] if e.site.inside(group.loop)]
    return [(node, event) for node, event in divided_after_backward(group.scope, events, is_count)
            if event.site.inside(group.loop) and any(s.node is node or s.value is node for s in group.loop_sites)]


def retained_in_group(model: FileModel, group: Group) -> list[Event]:
    """Backwards of ``group``'s loop with ``retain_graph=True`` that nothing backpropagates again
    (:func:`retained_backwards`), among those whose loss each pass computes anew."""
    if group.accumulates is not True:
        return []
    return retained_backwards([e for e in group.events if group.in_loop(e) and _fresh_graph(model, e, group)],
                              group.loop_sites)


def _fresh_graph(model: FileModel, event: Event, group: Group) -> bool:
    """Whether a backward's loss is computed anew in each pass of the loop (a forward call in the
    expression, or an assignment in the loop body), not a graph built once outside it."""
    if event.loss is None:
        return False
    if isinstance(event.loss, cst.Call) or any(isinstance(n, cst.Call) for n in walk(event.loss)):
        return True
    name = dotted(event.loss)
    definition = model.reaching(name, event.site) if name else None
    return (definition is not None and definition.inside(group.loop)
            and not isinstance(definition.node, (cst.For, cst.With)))


def hf_overrides_ignoring_count(model: FileModel) -> list[cst.FunctionDef]:
    """HF Trainer subclasses' ``compute_loss`` overrides that accept ``num_items_in_batch`` and
    ignore it, with no declaration of how their loss is normalized and no division by A
    (transformers trainer.py ``training_step``: the loss then counts as normalized)."""
    if not any(model.imports.imports_module(package) for package in fw.transformers.TRAINER_PACKAGES):
        return []
    found: list[cst.FunctionDef] = []
    for scope in model.scopes:
        function, owner = scope.node, scope.class_def
        if (not isinstance(function, cst.FunctionDef) or owner is None
                or function.name.value != fw.transformers.COMPUTE_LOSS):
            continue
        if not any(model.imports.qualify(dotted(base.value)) in fw.transformers.TRAINER_CLASSES
                   for base in owner.bases):
            continue
        if not ignores_parameter(function, fw.transformers.COUNT_PARAMETER):
            continue
        if not reads_key(function, fw.transformers.COUNTED_KEY):
            continue  # without labels in the batch the Trainer counts nothing and divides by A itself
        if declares_attribute(owner, fw.transformers.NORMALIZATION_ATTRS):
            continue
        if trained_models_take_no_loss_kwargs(model.module, owner.name.value):
            continue  # the Trainer divides by A itself: a mean of means at most (ACC102's matter)
        returns = [s for s in scope.sites if s.is_return and not s.in_helper and s.value is not None]
        if any(loss_divisions(s.value, s, model.is_accumulation_name) for s in returns):
            continue  # `mean / A`: a mean of means at the right scale (ACC102's matter)
        found.append(function)
    return found


def _memo(model: FileModel, key: str, compute: Callable[[], _T]) -> _T:
    """``compute()`` once per module, kept in :attr:`FileModel.memo` under ``key``."""
    if key not in model.memo:
        model.memo[key] = compute()
    return model.memo[key]  # type: ignore[return-value]
