"""The event letters of the guard's traces and their words in the timeline.

Torch-free: ``show`` renders saved cards without torch.

The letters, words and meanings are declared once, with the linter's event kinds, in
:class:`accumlint.spec.vocabulary.EventKind`; the constants below name each letter for the guard's
observers and checks (``event.kind == BACKWARD``).
"""

from __future__ import annotations

from accumlint.spec.vocabulary import LETTERS, EventKind

__all__ = [
    "BACKWARD", "CLIP", "EPOCH_END", "EVENTS", "FORWARD", "LETTERS", "MARKS", "RESET", "SCALE", "SCALER_STEP",
    "SCALER_UPDATE", "SCHEDULER_STEP", "UNSCALE", "UPDATE", "legend", "timeline_legend",
]


def _letter(kind: EventKind) -> str:
    if kind.letter is None:
        raise ValueError(f"the guard does not trace {kind.value}")
    return kind.letter


FORWARD = _letter(EventKind.FORWARD)
BACKWARD = _letter(EventKind.BACKWARD)  # the end of one backward reaching the probed parameters
RESET = _letter(EventKind.RESET)
CLIP = _letter(EventKind.CLIP)
UPDATE = _letter(EventKind.UPDATE)  # an optimizer update attempt
SCHEDULER_STEP = _letter(EventKind.SCHEDULER_STEP)
SCALE = _letter(EventKind.SCALE)
UNSCALE = _letter(EventKind.UNSCALE)
SCALER_STEP = _letter(EventKind.SCALER_STEP)
SCALER_UPDATE = _letter(EventKind.SCALER_UPDATE)
EPOCH_END = _letter(EventKind.EPOCH_END)

#: letter -> (word in a group's timeline, what was observed), in legend order
EVENTS: dict[str, tuple[str, str]] = {
    kind.letter: (kind.word, kind.observed)  # type: ignore[misc]
    for kind in EventKind if kind.letter is not None
}

#: Separators and marks of the timeline and the evidence traces.
MARKS = {"|": "between microbatches", "‖": "after the group's last backward", "*": "the watched tail (not a group)"}


def legend(letters: str) -> str:
    """``F = forward ..., B = backward ...`` for the letters and marks that occur in ``letters``."""
    words = set(letters.replace("‖", " ‖ ").replace("|", " | ").replace("*", " ").split())
    named = [f"{k} = {meaning}" for k, (_, meaning) in EVENTS.items() if k in words]
    return ", ".join(named + [f"{k} {meaning}" for k, meaning in MARKS.items() if k in letters])


def timeline_legend(timelines: str) -> str:
    """The timeline words and marks that occur in ``timelines``, with their meanings."""
    words = set(timelines.replace("‖", " ‖ ").replace("|", " | ").split())
    named = [f"{word} = {meaning}" for word, meaning in EVENTS.values() if word in words]
    return ", ".join(named + [f"{k} {meaning}" for k, meaning in MARKS.items() if k in timelines])
