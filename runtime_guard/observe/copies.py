"""Weight copies (ACC007): the copies of the parameters a loop may average into (an EMA model, a callback's
deep copy), searched for once or twice and sampled at each forward and update attempt
(:mod:`runtime_guard.shadows`)."""

from __future__ import annotations

import torch

from runtime_guard.contain import describe
from runtime_guard.observe import Observer
from runtime_guard.shadows import find_shadows


class WeightCopies(Observer):
    """Finds the weight copies and counts their moves toward the parameters for the open group."""

    def find_shadows(self, last: bool = False) -> None:
        """Find the copies of the parameters a loop may average into; a failure leaves ACC007 unobserved (the
        card says why) and nothing else. Unless this is the ``last`` search, where none is alive yet
        :meth:`check_shadows` searches once more at the second group's first forward."""
        s = self.state
        if not isinstance(s.model, torch.nn.Module):
            s.record.shadow_copies = []  # nothing to copy parameters from: none to follow
            return
        first = s.record.shadow_copies is None
        try:
            s.shadows.shadows = find_shadows(s.model, s.params)
        except Exception as error:  # noqa: BLE001 - the guard's failure: ACC007 not observed, never a raise
            s.record.shadow_search = f"the guard's search for weight copies failed ({describe(error)})"
            s.shadows_later = ""
            return
        s.record.shadow_copies = [c.owner for c in s.shadows.shadows]
        s.shadows_later = "again" if not last and not s.shadows.shadows else ""
        if first:
            s.undo.push("weight copies", s.shadows.clear)

    def check_shadows(self, inside: bool) -> None:
        """Sample the weight copies; moves toward the parameters count for the open group when ``inside``
        it (since its previous forward: the parameters did not change in between).

        The copies are searched for at the first forward after the first update (where the probe sits at
        the start and probes two groups or more: nothing moves a fresh copy before it), or at install and,
        where none was alive then, once more there: a copy made lazily (a callback's deepcopy at its first
        batch end, an EMA built at the first update) is followed from then on."""
        s = self.state
        group = s.group
        if s.shadows_later and not inside and group is not None and group.index >= 1:
            again, s.shadows_later = s.shadows_later == "again", ""
            self.find_shadows(last=True)
            if again and s.shadows.shadows:
                s.record.notes.append(f"weight copies made after the probe attached, found at group {group.index}'s "
                                      f"first forward: {', '.join(s.record.shadow_copies or [])}")
        blends = s.shadows.check() if s.shadows.shadows else []
        s.record.shadows_apart = s.record.shadows_apart or s.shadows.apart
        if inside and blends and s.group is not None:
            s.group.averaged += [(b.owner, b.factor) for b in blends]
