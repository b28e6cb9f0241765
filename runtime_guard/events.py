"""The event letters of the guard's traces and their words in the timeline (torch-free: ``show``
renders saved cards without torch)."""

from __future__ import annotations

#: letter -> (word in a group's timeline, what was observed)
EVENTS: dict[str, tuple[str, str]] = {
    "F": ("F", "forward of the probed model (one microbatch)"),
    "B": ("B", "backward reaching its parameters"),
    "Z": ("zero", "gradient reset (zero_grad)"),
    "C": ("clip", "gradient clipping"),
    "S": ("step", "optimizer update attempt"),
    "L": ("sched", "LR scheduler step"),
    "K": ("scale", "GradScaler.scale"),
    "X": ("unscale", "GradScaler.unscale_"),
    "s": ("scaler.step", "GradScaler.step"),
    "U": ("scaler.update", "GradScaler.update"),
    "E": ("epoch-end", "the watched loader's epoch ended"),
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
