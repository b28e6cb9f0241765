"""The rules, one small class each over the model; the registry lists them in code order.

A rule is declared once, in ``accumlint/spec/__init__.py`` (``implemented_by=(module, class)``); this
list imports the classes it names, so adding a rule registers nothing here.

A family is a module (``gate.py``) or, where it has analyses of its own, a package whose
``__init__.py`` holds the rule classes and whose other modules hold the analyses only its rules
read (``schedule/schedules.py``, ``tail/analysis.py``); the analyses two families read are in
:mod:`.shared`. The model imports none of them.
"""

from __future__ import annotations

from importlib import import_module

from accumlint.checks.base import Rule
from accumlint.spec import RULES


def _implementation(module: str, name: str) -> type[Rule]:
    rule = getattr(import_module(f"accumlint.checks.{module}"), name)
    if not (isinstance(rule, type) and issubclass(rule, Rule)):
        raise TypeError(f"accumlint.checks.{module}.{name} is not a Rule")
    return rule


ALL_RULES: list[type[Rule]] = [_implementation(*rule.implemented_by) for rule in RULES if rule.implemented_by]
