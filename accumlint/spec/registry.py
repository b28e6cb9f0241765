"""The rules by code, known without importing them.

Importing a rule loads LibCST and the group model (about a quarter of a second); a run
answered entirely from the cache never needs either. The selection, the cache key and the
``noqa`` code check read this view of the rule spec (``accumlint/spec/__init__.py``) instead;
``tests/catalogue/test_registry.py`` checks that every entry names the class that implements it.
"""

from __future__ import annotations

from accumlint.spec import PARSE_ERROR_CODE, RULES, RuleSpec, spec_of

__all__ = ["PARSE_ERROR_CODE", "PARSE_ERROR_NAME", "PARSE_ERROR_URL", "RULES", "RuleSpec"]

#: a file could not be read, decoded or parsed (reported by the engine, not by a rule)
PARSE_ERROR_NAME = spec_of(PARSE_ERROR_CODE).name
PARSE_ERROR_URL = spec_of(PARSE_ERROR_CODE).url
