"""The rules, one small class each over the model; the registry lists them in code order.

A rule is declared once, in ``accumlint/spec/__init__.py`` (``implemented_by=(module, class)``); this
list imports the classes it names, so adding a rule registers nothing here.
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
