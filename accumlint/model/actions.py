"""Actions meant once per optimizer update (ACC010): a checkpoint save, an evaluation, a log
point, a push to the hub. The simulator records each as an action event where the code calls
one (:class:`accumlint.model.interpreter.Interpreter`), so a rule can count how often it runs
between two updates.

What counts is data, by the call's name: a library call whose value is dropped (a statement of
its own) with a name in :data:`ACTION_FUNCTIONS` (resolved through the imports) or a method in
:data:`ACTION_METHODS`; and a call of a project function that evaluates (:func:`evaluates`).
Names that also mean a computation (``torch.log``) are left out: the call must be a statement.
"""

from __future__ import annotations

import libcst as cst

from accumlint.model.names import dotted, exact_kinds, walk

CHECKPOINT = "checkpoint save"
LOG = "log point"
PUSH = "push to the hub"
EVALUATION = "evaluation"

#: library functions (their qualified names) that are an action, and which
ACTION_FUNCTIONS: dict[str, str] = {
    "torch.save": CHECKPOINT,
    "wandb.log": LOG,
    "mlflow.log_metric": LOG,
    "mlflow.log_metrics": LOG,
}

#: methods that are an action on whatever receives them (an accelerator, a model, a trainer, a
#: logger or summary writer), and which; ``save`` alone is left out (``Image.save``, ``np.save``)
ACTION_METHODS: dict[str, str] = {
    "save_pretrained": CHECKPOINT,
    "save_state": CHECKPOINT,
    "save_model": CHECKPOINT,
    "save_checkpoint": CHECKPOINT,
    "push_to_hub": PUSH,
    "log_metrics": LOG,
    "add_scalar": LOG,
    "add_scalars": LOG,
}

#: the names of an evaluation pass, a method (``self.evaluate()``, ``trainer.validate()``, a framework's
#: own) or a project function that trains nothing: called as a statement, it is an evaluation
EVALUATION_NAMES = frozenset({"evaluate", "validate", "evaluation", "validation", "run_evaluation",
                              "run_validation", "evaluate_model", "validate_model"})

#: ``x.log(...)`` as a statement is a log point where ``x`` is a tracker: an Accelerate accelerator
#: (``accelerator.log``) or an object of these libraries (``run = wandb.init(); run.log(...)``)
TRACKER_LIBRARIES = ("wandb.", "mlflow.", "comet_ml.", "neptune.")

#: context managers and decorators that turn gradients off (a function run under one evaluates)
NO_GRAD = frozenset({"torch.no_grad", "no_grad", "torch.inference_mode", "inference_mode"})
#: the loops of a pass over data (:func:`evaluates`)
_LOOP_KINDS = exact_kinds(cst.For, cst.While)


def action_of(call: cst.Call, qualified: str | None, tracker: bool = False) -> str | None:
    """The action a call made as a statement performs (``qualified``: its callee resolved
    through the imports; ``tracker``: its receiver is a tracker), None where it is none."""
    if qualified in ACTION_FUNCTIONS:
        return ACTION_FUNCTIONS[qualified]
    if not isinstance(call.func, cst.Attribute):
        return None
    method = call.func.attr.value
    if method in ACTION_METHODS:
        return ACTION_METHODS[method]
    if method == "eval" and not call.args or method in EVALUATION_NAMES:
        return EVALUATION  # `model.eval()` in the loop starts an evaluation pass; `self.evaluate()` is one
    return LOG if method == "log" and tracker else None


def evaluates(function: cst.FunctionDef) -> bool:
    """Whether a project function evaluates: it switches a model to evaluation mode (``.eval()``),
    runs under ``no_grad``/``inference_mode`` (a decorator or a ``with`` in its body) and holds a
    loop (a pass over data). A weight average stepped under ``no_grad`` switches no mode."""
    decorated = decorated_without_grad(function)
    nodes = list(walk(function.body))
    # exact types: isinstance on LibCST's (ABC) node classes is slow, and every node is tested
    with_no_grad = any(type(n) is cst.WithItem and type(n.item) is cst.Call and dotted(n.item.func) in NO_GRAD
                       for n in nodes)
    switches = any(type(n) is cst.Call and type(n.func) is cst.Attribute and n.func.attr.value == "eval"
                   and not n.args for n in nodes)
    return (decorated or with_no_grad) and switches and any(type(n) in _LOOP_KINDS for n in nodes)


def decorated_without_grad(function: cst.FunctionDef) -> bool:
    """Whether ``function`` is decorated with ``torch.no_grad`` / ``torch.inference_mode`` (with
    or without a call): nothing it computes builds a graph."""
    return any(dotted(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) in NO_GRAD
               for d in function.decorators)
