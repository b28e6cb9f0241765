"""fastprogress (fastprogress 1.0.3 ``fastprogress/fastprogress.py``): progress bars that iterate
what they wrap. ``master_bar(gen)`` (``MasterBar.__iter__``) and ``progress_bar(gen, parent=...)``
(``ProgressBar.__iter__``) yield the items of ``gen`` one by one, in order, and nothing else: a
loop over one passes over ``gen`` (an epoch range, a data loader)."""

from __future__ import annotations

VERSION = "1.0.3"
#: Every version a fact of this module was read in (the installed one first).
READ_VERSIONS = (VERSION,)

#: Callees whose iteration is their first argument's.
ITERATION_WRAPPERS = frozenset({"master_bar", "progress_bar"})
