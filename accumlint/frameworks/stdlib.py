"""Python's standard library, where a training script's settings come from.

argparse (CPython 3.11, ``Lib/argparse.py``): ``parser.add_argument(...)`` declares an option,
``parser.parse_args()`` returns the namespace of parsed options. An option's attribute is its
``dest=``, else its first long option string without the leading dashes and with ``-`` as ``_``
(``_ActionsContainer._get_optional_kwargs``); a run given no value for it reads its ``default=``.
"""

from __future__ import annotations

#: the parser method that declares an option
ADD_OPTION = "add_argument"

#: the parser methods that return the namespace of parsed options itself (not in a tuple)
PARSE_OPTIONS = frozenset({"parse_args"})

#: the keywords of ``add_argument`` that name the option's attribute and its default
DEST, DEFAULT = "dest", "default"

#: keywords of ``add_argument`` under which the default is not what the option holds as given
#: (``action="count"`` adds to it, ``nargs`` makes a list)
NOT_AS_GIVEN = frozenset({"action", "nargs"})


def option_attribute(flags: list[str], dest: str | None) -> str | None:
    """The namespace attribute of an option declared with ``flags`` (the positional strings of
    ``add_argument``) and ``dest=``; None for a positional argument or one with short flags only."""
    if dest:
        return dest
    long = next((flag for flag in flags if flag.startswith("--")), None)
    return long[2:].replace("-", "_") if long else None
