"""Which training event a site performs: backward, gradient reset, optimizer update,
scheduler step, clipping, unscale, scaler update.

A method call counts only when its receiver's role makes it unambiguous: ``x.step()`` is
an optimizer update for an optimizer, a scheduler step for a scheduler, and nothing for
an object we cannot place.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, replace

import libcst as cst

from accumlint import frameworks as fw
from accumlint.model.dataflow import reaching_assignment
from accumlint.model.kinds import EventKind, Role
from accumlint.model.names import dotted, keyword, last_segment, method_name, positional, receiver, walk
from accumlint.model.roles import UNKNOWN, RoleInfo, Roles
from accumlint.model.scopes import FrameKind, Site

#: Lightning's backward under manual optimization
MANUAL_BACKWARD = fw.lightning.MANUAL_BACKWARD
#: mmengine's ``OptimWrapper.update_params(loss)``: a backward (and, at the boundary, the update)
_UPDATE_PARAMS = fw.mmengine.BACKWARD.method
#: the calls that make a backward event (:func:`classify`): a file that calls none of them has
#: no microbatch loop and no backward for a rule to read
BACKWARD_CALLS = frozenset({"backward", MANUAL_BACKWARD, _UPDATE_PARAMS})
#: the methods that make a scheduler step (on a receiver in the scheduler role)
SCHEDULER_STEP_METHODS = frozenset({"step", fw.timm.SCHEDULER_STEP_METHOD})
#: the calls that clip gradients (a function such as ``torch.nn.utils.clip_grad_norm_`` or a method)
CLIP_CALLS = fw.pytorch.CLIP_FUNCTIONS | {fw.lightning.CLIP_METHOD}
#: unscale methods and the receiver roles they unscale for: ``GradScaler.unscale_(optimizer)``
#: (torch 2.13.0 amp/grad_scaler.py) and ``Accelerator.unscale_gradients(optimizer=None)``
#: (accelerate 1.15.0 accelerator.py, a no-op unless fp16 with native AMP)
_UNSCALE = {"unscale_": (Role.SCALER, Role.UNKNOWN), fw.accelerate.UNSCALE_METHOD: (Role.ACCELERATOR, Role.UNKNOWN)}
# `owner.backward(loss)`: these roles take the loss as argument (apex/colossalai optimizers do too)
_BACKWARD_OWNERS = frozenset(
    {Role.ACCELERATOR, Role.ENGINE, Role.FABRIC, Role.MODEL, Role.OPTIM_WRAPPER, Role.OPTIMIZER}
)
#: every method name :func:`classify` turns into an event: any other method call is none, and
#: its receiver's role (the costly part) is never looked up
_EVENT_METHODS = frozenset(
    {"zero_grad", "zero_", "detach_", "update"}
) | BACKWARD_CALLS | SCHEDULER_STEP_METHODS | CLIP_CALLS | frozenset(_UNSCALE)


@dataclass(frozen=True, eq=False)
class Event:
    """A site classified as a training event.

    ``target``: the object acted on (the optimizer stepped, the model reset …) and its role;
    ``loss``: for a backward, the expression whose gradient is taken.
    """

    kind: EventKind
    site: Site
    target: cst.BaseExpression | None
    role: RoleInfo
    method: str
    loss: cst.BaseExpression | None = None

    @property
    def node(self) -> cst.CSTNode:
        """Where a finding about this event is reported (see :attr:`Site.report`)."""
        return self.site.report

    @property
    def order(self) -> int:
        return self.site.order


def classify(site: Site, roles: Roles) -> Event | None:
    """The event ``site`` performs, or ``None`` (not an event, or not decidable): a training
    event of a role (:func:`_classify_training_event`) first, else a gradient rescale or a
    once-per-update hook (:func:`classify_gradient_op`). In an inlined helper, the target and
    the loss are read in the caller's names where the helper's parameters bind them
    (``opt.step()`` in ``helper(optimizer)`` steps ``optimizer``)."""
    if site.framework == "backward":  # a framework-owned loop's backward (model/owned_loops.py)
        return Event(EventKind.BACKWARD, site, None, UNKNOWN, "backward")
    event = _classify_training_event(site, roles) or classify_gradient_op(site)
    if event is None or site.inline is None:
        return event
    changes: dict = {}
    if event.target is not None:
        target, where = site.inline.resolve(event.target)
        if where is None:
            changes["target"] = target
    # the loss stays in the helper's names: the data flow follows the bindings (dataflow.py)
    return replace(event, **changes) if changes else event


def _classify_training_event(site: Site, roles: Roles) -> Event | None:
    if site.call is None:
        return _classify_assignment(site)
    call = site.call
    method = method_name(call)
    if (dotted(call.func) or "").endswith("autograd.backward") or site.alias is not None:
        method = None  # torch.autograd.backward(loss), a partial of a clip: functions
    if method is None:
        if site.followed:
            return None  # the project's own `optimizer_step(...)`: its body's events count instead
        name = site.alias or dotted(call.func) or ""
        if name.endswith("autograd.backward"):
            return Event(EventKind.BACKWARD, site, None, UNKNOWN, "backward", positional(call, 0))
        if last_segment(name) in CLIP_CALLS:
            return Event(EventKind.CLIP, site, positional(call, 0), UNKNOWN, last_segment(name))
        if last_segment(name) == fw.torch_xla.OPTIMIZER_STEP:  # xm.optimizer_step(optimizer)
            target = positional(call, 0)
            return Event(EventKind.UPDATE, site, target, roles.of(target, site), fw.torch_xla.OPTIMIZER_STEP)
        return None
    if method not in _EVENT_METHODS:
        return None
    target = receiver(call)
    role = roles.of(target, site)
    if method in ("backward", MANUAL_BACKWARD):
        if site.followed and any(inline.performs_backward for inline in site.scope.inlined.get(id(call), ())):
            return None  # the project's own `stage.backward(inp, out, grad)`: the backward in its body counts
        if method == MANUAL_BACKWARD or (positional(call, 0) is not None and role.role in _BACKWARD_OWNERS):
            # a model given more than the loss (`stage.backward(inp, out, grad)`) is no engine whose
            # `backward(loss)` we know: its own method, which of its arguments is the loss is open
            several = role.role is Role.MODEL and positional(call, 1) is not None
            return Event(EventKind.BACKWARD, site, target, role, method, None if several else positional(call, 0))
        given = keyword(call, "loss")
        if given is not None or positional(call, 1) is not None and role.role is Role.UNKNOWN \
                and roles.of(positional(call, 1), site).role is Role.OPTIMIZER:
            # `booster.backward(loss=loss, optimizer=opt)`, `booster.backward(loss, opt)`: an owner given the
            # loss (a tensor's own backward takes no `loss=`, nor an optimizer after its gradient)
            return Event(EventKind.BACKWARD, site, target, role, method, given or positional(call, 0))
        loss = target
        if isinstance(loss, cst.Call) and method_name(loss) == "scale":  # scaler.scale(loss).backward()
            loss = positional(loss, 0)
        elif positional(call, 0) is not None and role.role is Role.UNKNOWN and not isinstance(target, cst.Call):
            # `x.backward(y)`: a tensor's backward given its gradient, or an owner (`fabric`, an engine)
            # given the loss; the code leaves open which one is the loss
            loss = None
        return Event(EventKind.BACKWARD, site, target, role, method, loss)
    if method == _UPDATE_PARAMS and role.role is Role.OPTIM_WRAPPER:
        return Event(EventKind.BACKWARD, site, target, role, method, positional(call, 0))
    if method == "zero_grad":
        return Event(EventKind.RESET, site, target, role, method) if role.role is not Role.SCHEDULER else None
    if method in ("zero_", "detach_") and _is_grad(target):
        return Event(EventKind.RESET, site, target, role, method) if not _for_some_parameters(site) else None
    if method == "step":
        if id(call) in no_update_steps(roles.module_scope.node):  # type: ignore[arg-type]
            return None  # a noise scheduler's, an environment's, a generation engine's step
        if role.role in (Role.OPTIMIZER, Role.ENGINE, Role.OPTIM_WRAPPER):
            return Event(EventKind.UPDATE, site, target, role, method)
        if role.role is Role.SCALER:
            return Event(EventKind.UPDATE, site, positional(call, 0), role, "scaler.step")
        if role.role is Role.SCHEDULER:
            return Event(EventKind.SCHEDULER_STEP, site, target, role, method)
        return None
    if method == fw.timm.SCHEDULER_STEP_METHOD and role.role is Role.SCHEDULER:
        return Event(EventKind.SCHEDULER_STEP, site, target, role, method)
    if method in CLIP_CALLS:
        return Event(EventKind.CLIP, site, target, role, method)
    if method in _UNSCALE and role.role in _UNSCALE[method]:
        # an unscale we cannot place (unknown receiver) still counts: rules use it to stay silent
        return Event(EventKind.UNSCALE, site, positional(call, 0) or keyword(call, "optimizer"), role, method)
    if method == "update" and role.role is Role.SCALER:
        return Event(EventKind.SCALER_UPDATE, site, target, role, method)
    return None


def _classify_assignment(site: Site) -> Event | None:
    if not site.targets or site.is_return or site.augmented is not None:
        return None
    if isinstance(site.value, cst.Name) and site.value.value == "None" and not _for_some_parameters(site):
        for name in site.targets:
            if name and name.endswith(".grad"):
                return Event(EventKind.RESET, site, None, UNKNOWN, "grad = None")
    return None


def _for_some_parameters(site: Site) -> bool:
    """Whether ``site`` runs under a test of the item of a loop over a model's parameters
    (:func:`tests_one_parameter`): a reset there clears the gradients of frozen parameters, not
    the group's."""
    loops = [f.node for f in site.frames if f.kind is FrameKind.LOOP]
    return any(f.kind is FrameKind.IF and f.test is not None and tests_one_parameter(f.test, loop)
               for f in site.frames for loop in loops)


#: keywords only the ``step`` of an object that is no optimizer, LR scheduler nor scaler takes
_FOREIGN_STEP_KEYWORDS = fw.diffusers.NOISE_STEP_KEYWORDS | fw.pytorch.PIPELINE_STEP_KEYWORDS


@functools.lru_cache(maxsize=256)
def no_update_steps(module: cst.Module) -> frozenset[int]:
    """``id``s of the module's ``.step(...)`` calls (its functions' included) whose shape shows an
    object that is no optimizer, LR scheduler nor gradient scaler, whatever its name: the result
    unpacked into two names or more (``obs, reward, done, info = env.step(action)``, an
    environment's), three positional arguments or more or a noise scheduler's keywords
    (``noise_scheduler.step(pred, t, x)``, diffusers' ``SchedulerMixin``) or a pipeline schedule's
    (``pp_schedule.step(x, target=y, losses=out)``), the result indexed or an
    attribute of it read (``.step(...).prev_sample``, ``.step(..., return_dict=False)[0]``), or the
    result of an argument-less ``step()`` handed on (``outputs.extend(engine.step())``, a generation
    engine's). An optimizer's ``step(closure=None)`` returns the closure's loss or None, an LR
    scheduler's ``step(epoch)`` and ``ReduceLROnPlateau.step(metrics, epoch)`` None, a scaler's
    ``step(optimizer, *args)`` what the optimizer's returns (torch 2.13.0 ``optim/optimizer.py``,
    ``optim/lr_scheduler.py``, ``amp/grad_scaler.py``; DeepSpeed's and Accelerate's wrappers return
    None). One walk per module: every syntactic question of it reads the same set."""
    found: set[int] = set()
    read: set[int] = set()  # steps with an attribute of their result read, or called as a method
    called: set[int] = set()
    for child in walk(module):
        kind = type(child)
        if kind is cst.Assign and _is_step(child.value) and any(
                type(t.target) in (cst.Tuple, cst.List) and len(t.target.elements) > 1 for t in child.targets):
            found.add(id(child.value))
        elif kind is cst.Call and _is_step(child):
            positional = [a for a in child.args if a.keyword is None and not a.star]
            if len(positional) >= 3 or any(a.keyword is not None and a.keyword.value in _FOREIGN_STEP_KEYWORDS
                                           for a in child.args):
                found.add(id(child))
        elif kind is cst.Call and type(child.func) is cst.Attribute and _is_step(child.func.value):
            called.add(id(child.func.value))  # `opt.step(closure).item()`: a loss's method
        if kind is cst.Call:
            found.update(id(a.value) for a in child.args if _is_step(a.value) and not a.value.args)
        elif kind is cst.Subscript and _is_step(child.value):
            found.add(id(child.value))
        elif kind is cst.Attribute and _is_step(child.value):
            read.add(id(child.value))
        elif kind in (cst.For, cst.CompFor) and _is_step(child.iter) and not child.iter.args:
            found.add(id(child.iter))
    return frozenset(found | (read - called))


@functools.lru_cache(maxsize=256)
def steps_with_argument(module: cst.Module) -> frozenset[str]:
    """The dotted receivers of the module's ``x.step(y, ...)`` calls with more positional arguments
    than a DeepSpeed engine's ``step`` is given (:data:`accumlint.frameworks.deepspeed.STEP_POSITIONALS`):
    an object whose update is handed the optimizer (``scaler.step(opt)``, another library's
    accelerator ``accel.step(opt)``) or a scheduler given an epoch, never a counting engine."""
    return frozenset(dotted(child.func.value) for child in walk(module)
                     if _is_step(child) and dotted(child.func.value)
                     and sum(1 for a in child.args if a.keyword is None and not a.star) > fw.deepspeed.STEP_POSITIONALS)


def _is_step(node: cst.CSTNode) -> bool:
    return type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value == "step"


# --- gradient rescales and once-per-update hooks (ACC307, ACC007) ------------------------------

#: in-place tensor methods that rescale what they are called on (``p.grad.div_(n)``)
_RESCALE_METHODS = frozenset({"div_", "mul_", "divide_", "multiply_"})
#: calls that rescale every ``.grad`` of their argument (or receiver) in place: fairseq's
#: ``optimizer.multiply_grads(c)``, torchtune's ``training.scale_grads(model, scaler)``
GRAD_RESCALE_CALLS = fw.fairseq.GRAD_RESCALE_CALLS | fw.torchtune.GRAD_RESCALE_CALLS
#: foreach kernels that rescale a list in place: a rescale when the list is named for gradients
_FOREACH_RESCALES = frozenset({"_foreach_div_", "_foreach_mul_"})
#: foreach kernels that blend a list in place (``torch._foreach_lerp_(ema, params, 1 - d)``): with the
#: scaling ones, a weight average when the list is named for one
_FOREACH_BLENDS = frozenset({"_foreach_add_", "_foreach_lerp_"})
#: calls defined to run once per optimizer update: torch's ``AveragedModel.update_parameters``,
#: peft's AdaLoRA ``update_and_allocate(global_step)`` (their framework modules), and EMA helpers
#: named for it
UPDATE_HOOK_CALLS = frozenset({fw.pytorch.SWA_UPDATE_HOOK, fw.peft.UPDATE_HOOK, "update_ema", "ema_update",
                               "ema_step", "step_ema", "update_ema_model", "update_moving_average"})
#: methods of an EMA-named object that move the average: ``ema.update(model)`` (timm 1.x
#: ``utils/model_ema.py`` ``ModelEmaV2.update``, torch_ema ``ExponentialMovingAverage.update``),
#: and the decay of a hand-written average (``ema_p.mul_(d).add_(p, alpha=1 - d)``, ``lerp_``)
_EMA_METHODS = frozenset({"update", "step", "mul_", "lerp_"})
_EMA_NAME = re.compile(r"(^|_)ema($|_|model|s$)")
#: in-place tensor methods that can blend another tensor into the one they are called on
_BLEND_METHODS = frozenset({"copy_", "lerp_", "mul_", "add_"})
#: the method an :data:`EventKind.UPDATE_HOOK` event names when it is a blend found by what it
#: does (:func:`_blends_weights`), not by a hook's name
WEIGHT_BLEND = "weight average"
#: module methods whose results pair one model's tensors with another's in ``zip(a.X(), b.X())``
_WEIGHT_LISTS = frozenset({"parameters", "buffers"})
#: every name :func:`classify_gradient_op` looks at (others cost one set lookup)
GRADIENT_OP_NAMES = (_RESCALE_METHODS | GRAD_RESCALE_CALLS | _FOREACH_RESCALES | _FOREACH_BLENDS | UPDATE_HOOK_CALLS
                     | _EMA_METHODS | _BLEND_METHODS)


def measures_only(call: cst.Call | None) -> bool:
    """Whether a clip call's threshold is infinite (``clip_grad_norm_(params, float("inf"))``): it
    only measures the norm and leaves the gradients unchanged."""
    if call is None:
        return False
    threshold = keyword(call, "max_norm") or keyword(call, "clip_value") or positional(call, 1)
    if threshold is None:
        return False
    if last_segment(dotted(threshold)) == "inf":  # math.inf, torch.inf, np.inf
        return True
    return (isinstance(threshold, cst.Call) and dotted(threshold.func) == "float" and len(threshold.args) == 1
            and isinstance(threshold.args[0].value, cst.SimpleString)
            and threshold.args[0].value.evaluated_value.lower().lstrip("+") in ("inf", "infinity"))


def _is_grad(expression: cst.BaseExpression | None) -> bool:
    """``p.grad``, ``p.grad.data``, ``param.grad`` (a gradient tensor by attribute, not by guess)."""
    name = dotted(expression) if expression is not None else None
    return bool(name) and (name.endswith(".grad") or name.endswith(".grad.data"))  # type: ignore[union-attr]


def _iterates_grads(site: Site, target: cst.BaseExpression | None) -> bool:
    """Whether ``target`` is the item of an enclosing ``for g in grads`` whose iterable lists
    gradient tensors: ``[p.grad for p in params if p.grad is not None]``, written there or assigned
    to the name iterated (``grads = [...]; for g in grads:``)."""
    if not isinstance(target, cst.Name):
        return False
    for frame in reversed(site.frames):
        loop = frame.node
        if not (isinstance(loop, cst.For) and isinstance(loop.target, cst.Name) and loop.target.value == target.value):
            continue
        iterable = loop.iter
        if isinstance(iterable, cst.Name):
            assigned = reaching_assignment(site.scope, iterable.value, site.order, None, site.inline)
            iterable = assigned.value if assigned is not None and assigned.value is not None else iterable
        return isinstance(iterable, (cst.ListComp, cst.GeneratorExp)) and _is_grad(iterable.elt)
    return False


#: calls that measure a gradient norm (a hand-written clip's first half, :func:`clips_by_hand`)
_NORM_CALLS = frozenset({"norm", "vector_norm", "_foreach_norm"})


def clips_by_hand(function: cst.FunctionDef) -> bool:
    """Whether a project function is a norm clip written by hand: it measures a norm (``g.norm()``,
    ``torch.norm(...)``) and rescales gradient tensors in place (``p.grad.mul_(coef)``, or the
    items of a list of ``.grad`` tensors) under a test (``if coef < 1:``), or is named like
    PyTorch's clip (``clip_grad_norm``): whatever its name, a clip, not a rescale on every call."""
    if function.name.value in fw.pytorch.CLIP_FUNCTIONS:
        return True
    nodes = list(walk(function.body))
    if not any(type(n) is cst.Call and last_segment(dotted(n.func) or "") in _NORM_CALLS for n in nodes):
        return False
    lists = {e.target.value for e in nodes if type(e) is cst.For and type(e.target) is cst.Name
             and type(e.iter) in (cst.ListComp, cst.GeneratorExp) and _is_grad(e.iter.elt)}
    lists |= {s.targets[0].target.value for s in nodes if type(s) is cst.Assign and len(s.targets) == 1
              and type(s.targets[0].target) is cst.Name and type(s.value) in (cst.ListComp, cst.GeneratorExp)
              and _is_grad(s.value.elt)}
    iterated = {e.target.value for e in nodes if type(e) is cst.For and type(e.target) is cst.Name
                and type(e.iter) is cst.Name and e.iter.value in lists} | lists

    def rescales(node: cst.CSTNode) -> bool:
        if not (type(node) is cst.Call and method_name(node) in _RESCALE_METHODS):
            return False
        target = _chain_root(receiver(node))
        return _is_grad(target) or type(target) is cst.Name and target.value in iterated

    return any(type(n) is cst.If and any(rescales(m) for m in walk(n.body)) for n in nodes)


#: words that make an EMA-named object a smoothed metric rather than an average of weights
_METRIC_WORDS = ("loss", "meter", "metric", "acc", "time", "speed", "throughput", "norm", "reward", "score", "stat",
                 "sched", "optim")


def _chain_root(expression: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """The object a chain of method calls starts from (``ema_p.mul_(d).add_(p)`` → ``ema_p``)."""
    while isinstance(expression, cst.Call) and isinstance(expression.func, cst.Attribute):
        expression = expression.func.value
    return expression


def _names_a_metric(expression: cst.BaseExpression | None) -> bool:
    """Whether a hook's object is named for a metric (``ema_loss.update(loss)``, ``meter.update_ema``)."""
    expression = _chain_root(expression)
    name = (dotted(expression) or "").lower() if expression is not None else ""
    return any(word in name for word in _METRIC_WORDS)


def is_ema_name(expression: cst.BaseExpression | None) -> bool:
    """Whether an expression's root or last segment is named like an EMA (``ema``, ``model_ema``,
    ``self.ema_model``, ``ema_p``); the chained ``ema_p.mul_(d).add_(...)`` is followed to ``ema_p``."""
    expression = _chain_root(expression)
    name = dotted(expression) if expression is not None else None
    if not name:
        return False
    parts = [part.lower() for part in name.split(".")]
    return any(_EMA_NAME.search(part) for part in (parts[0], parts[-1]))


def _root(expression: cst.BaseExpression | None) -> str | None:
    """The name a chain of in-place calls and ``.data`` starts from (``s.data.mul_(d)`` → ``s``)."""
    expression = _chain_root(expression)
    name = dotted(expression) if isinstance(expression, (cst.Name, cst.Attribute)) else None
    return name.removesuffix(".data") if name else None


def _paired_weights(node: cst.CSTNode) -> tuple[str, str, frozenset[str]] | None:
    """The two targets of ``for a, b in zip(m1.parameters(), m2.parameters())`` (or ``buffers()``;
    one side may be a list the code keeps, ``zip(self.shadow, net.parameters())``): one model's
    tensor beside another's, position by position; with the targets that may move toward the other
    (beside a kept list only the list's: the model's own, moved toward the list, ``p.add_(v,
    alpha=-lr)`` over momentum buffers, is an optimizer's update by hand)."""
    if not isinstance(node, cst.For) or not isinstance(node.target, (cst.Tuple, cst.List)):
        return None
    call = node.iter
    if not (isinstance(call, cst.Call) and dotted(call.func) == "zip" and len(call.args) == 2
            and len(node.target.elements) == 2):
        return None
    lists = [isinstance(a.value, cst.Call) and method_name(a.value) in _WEIGHT_LISTS for a in call.args]
    if not any(lists) or not all(listed or isinstance(a.value, (cst.Name, cst.Attribute))
                                 for listed, a in zip(lists, call.args, strict=True)):
        return None
    names = [dotted(e.value) if isinstance(e.value, cst.Name) else None for e in node.target.elements]
    if not (names[0] and names[1]):
        return None
    movable = frozenset(names) if all(lists) else frozenset({names[lists.index(False)]})
    return names[0], names[1], movable  # type: ignore[return-value]


#: a model's tensors by name: ``for name, value in <model>.<list>()`` (``.items()`` of a state dict)
_NAMED_WEIGHT_LISTS = frozenset({"named_parameters", "named_buffers"})


def _keyed_weights(node: cst.CSTNode) -> tuple[str, str] | None:
    """``(key, value)`` of ``for key, value in m.state_dict().items()`` (or ``m.named_parameters()``):
    one model's tensors by name, which another's, looked up by the same key, can be moved toward."""
    if not isinstance(node, cst.For) or not isinstance(node.target, (cst.Tuple, cst.List)) \
            or len(node.target.elements) != 2:
        return None
    call = node.iter
    if isinstance(call, cst.Call) and method_name(call) == "items" and not call.args:
        call = receiver(call)
        listed = isinstance(call, cst.Call) and method_name(call) == "state_dict"
    else:
        listed = isinstance(call, cst.Call) and method_name(call) in _NAMED_WEIGHT_LISTS
    names = [e.value.value if isinstance(e.value, cst.Name) else None for e in node.target.elements]
    return (names[0], names[1]) if listed and names[0] and names[1] else None


def _keyed_blend(site: Site, call: cst.Call) -> bool:
    """``other[key].add_(... value ...)`` (or ``lerp_``, ``mul_``) inside a walk of
    :func:`_keyed_weights`: the tensor of the same name in another dict moved toward this model's."""
    target = _chain_root(receiver(call))
    if isinstance(target, cst.Attribute) and target.attr.value == "data":
        target = target.value
    if not (isinstance(target, cst.Subscript) and len(target.slice) == 1
            and isinstance(target.slice[0].slice, cst.Index) and isinstance(target.slice[0].slice.value, cst.Name)):
        return False
    key = target.slice[0].slice.value.value
    read = {n.value for a in call.args for n in walk(a.value) if isinstance(n, cst.Name)}
    return any(pair is not None and pair[0] == key and pair[1] in read
               for pair in map(_keyed_weights, (f.node for f in reversed(site.frames))))


def _blends_weights(site: Site, call: cst.Call, method: str) -> bool:
    """Whether an in-place call moves one model's tensor toward another's: ``s.lerp_(p, w)``,
    ``s.mul_(d).add_(p, alpha=1 - d)``, ``s.copy_(torch.lerp(p, s, d))`` with ``s, p`` paired by
    a loop over two models' parameters (:func:`_paired_weights`). A weight average (EMA, a
    target network's soft update) by what it does, whatever the helper is called; a plain
    ``s.copy_(p)`` is no blend (the weights do not change inside a group, so copying them on
    every microbatch is harmless)."""
    root = _root(receiver(call))
    pair = next((p for p in map(_paired_weights, (f.node for f in reversed(site.frames)))
                 if p is not None and root in p[2]), None) if root is not None else None
    if pair is None:
        # (most `add_`/`copy_` calls: the arguments are never walked)
        return root is None and method != "copy_" and _keyed_blend(site, call)
    other = pair[1] if root == pair[0] else pair[0]
    read = {n.value for a in call.args for n in walk(a.value) if isinstance(n, cst.Name)}
    if any(isinstance(n, cst.Attribute) and n.attr.value == "grad" and dotted(n.value) == other
           for a in call.args for n in walk(a.value)):
        return False  # `buf.mul_(m).add_(p.grad)`: a momentum buffer of the gradients, no weight average
    return other in read and (method != "copy_" or root in read)


def classify_gradient_op(site: Site) -> Event | None:
    """A gradient rescale (``p.grad.div_(n)``, ``p.grad /= n``, ``multiply_grads``, ``scale_grads``)
    or a once-per-update hook (``ema.update(model)``, ``swa.update_parameters(model)``,
    ``model.update_and_allocate(step)``), or ``None``."""
    call = site.call
    if call is None:
        if site.augmented is not None and isinstance(site.augmented, (cst.DivideAssign, cst.MultiplyAssign)):
            if any(t and (t.endswith(".grad") or t.endswith(".grad.data")) for t in site.targets):
                return Event(EventKind.GRAD_RESCALE, site, None, UNKNOWN, "grad rescale")
        return None
    method = method_name(call)
    name = method or last_segment(dotted(call.func) or "")
    if name not in GRADIENT_OP_NAMES:
        return None
    target = receiver(call) if method is not None else None
    if name in _RESCALE_METHODS and (_is_grad(target) or _iterates_grads(site, target)):
        return Event(EventKind.GRAD_RESCALE, site, target, UNKNOWN, name)
    if name in GRAD_RESCALE_CALLS:
        return Event(EventKind.GRAD_RESCALE, site, target if target is not None else positional(call, 0),
                     UNKNOWN, name)
    if name in _FOREACH_RESCALES or name in _FOREACH_BLENDS:
        first = positional(call, 0)
        if name in _FOREACH_RESCALES and "grad" in last_segment(dotted(first) or "").lower():
            return Event(EventKind.GRAD_RESCALE, site, first, UNKNOWN, name)
        if is_ema_name(first) and not _names_a_metric(first):  # `torch._foreach_mul_(ema_params, d)`
            return Event(EventKind.UPDATE_HOOK, site, first, UNKNOWN, name)
        return None
    if (name in UPDATE_HOOK_CALLS or name in _EMA_METHODS) and _names_a_metric(target):
        return None  # a smoothed loss or meter: no once-per-update hook on the weights
    if name in UPDATE_HOOK_CALLS:
        return Event(EventKind.UPDATE_HOOK, site, target, UNKNOWN, name)
    if name in _EMA_METHODS and method is not None and is_ema_name(target):
        if name in ("update", "step") and isinstance(target, cst.Call):
            return None  # `ema_p.mul_(d).update(...)` is no EMA object's method
        return Event(EventKind.UPDATE_HOOK, site, target, UNKNOWN, name)
    if name in _BLEND_METHODS and method is not None and _blends_weights(site, call, name):
        return Event(EventKind.UPDATE_HOOK, site, target, UNKNOWN, WEIGHT_BLEND)
    return None


def tests_one_parameter(test: cst.BaseExpression, loop: cst.CSTNode) -> bool:
    """Whether ``test`` reads the item of ``loop`` where it is a ``for`` over a model's parameters
    (``for name, p in model.named_parameters(): if "head" in name:``, through ``enumerate``,
    ``list``, ``tuple``), other than its gradient's existence: what it guards runs for some
    parameters only."""
    if type(loop) is not cst.For:
        return False
    iterable = loop.iter
    while type(iterable) is cst.Call and dotted(iterable.func) in ("enumerate", "list", "tuple") and iterable.args:
        iterable = iterable.args[0].value
    if not (type(iterable) is cst.Call and type(iterable.func) is cst.Attribute
            and iterable.func.attr.value in fw.pytorch.PARAMETER_ITERATORS):
        return False
    items = {n.value for n in walk(loop.target) if type(n) is cst.Name}
    # (`if p.grad is not None:`, `if p.requires_grad:` hold for every parameter the group trains)
    guarded = {id(n.value) for n in walk(test) if type(n) is cst.Attribute and n.attr.value in _EVERY_TRAINED}
    return any(type(n) is cst.Name and n.value in items and id(n) not in guarded for n in walk(test))


#: a parameter's attributes whose test holds for every parameter the group trains
_EVERY_TRAINED = frozenset({"grad", "requires_grad"})
