"""The reference drivers of frameworks that count microbatches themselves (Accelerate's
``accumulate()``), run by the simulator as the framework's own code would run them.

The framework's facts are data (``frameworks.<name>.DRIVER``, a
:class:`~accumlint.frameworks.contracts.CountingDriver`); this module holds one counting
object's state during a run: A as the code configured it, the count, the boundary flag, and the
values it wrapped. The interpreter asks it at three places: a context entry (count one
microbatch), a call on a wrapped object (does it act?), a pass over wrapped data (does its last
batch end a group?).
"""

from __future__ import annotations

from accumlint import frameworks as fw
from accumlint.frameworks.contracts import CountingDriver
from accumlint.model.kinds import Role
from accumlint.model.values import Obj, Unknown

#: the counting object's role → its framework's driver
DRIVERS: dict[Role, CountingDriver] = {fw.accelerate.DRIVER.counter: fw.accelerate.DRIVER}
#: the calls that carry A under another name (``GradientAccumulationPlugin(num_steps=A)``), by the
#: framework of the driver they configure
_CARRIERS = {fw.accelerate.DRIVER.framework: fw.accelerate.ACCUMULATION_PLUGIN}
#: every call that carries a setting of the object it is passed to (``CPUOffload(offload_params=True)``
#: for FSDP1's ``cpu_offload=``): the simulated value keeps the setting, by keyword
_SETTING_CARRIERS = (*_CARRIERS.values(), fw.pytorch.CPU_OFFLOAD)


class Counting:
    """One counting object built in a run (``obj``, an accelerator): its ``driver``, ``a`` as
    the code gave it (a value of the run: an int, a :class:`LabeledInt` the configuration can
    bind, or an :class:`Unknown`), the microbatches counted since the last boundary, and the
    values it ``wrapped`` (kept alive so that their identities stay theirs), where its open
    entry began and at which microbatch it was last entered; ``foreign``: a
    keyword handed the counting to another framework (Accelerate's DeepSpeed backend)."""

    __slots__ = ("a", "count", "driver", "entered_at", "entry_drawn", "foreign", "obj", "wrapped")

    def __init__(self, driver: CountingDriver, obj: Obj, kwargs: dict[str, object], starred: bool) -> None:
        self.driver = driver
        self.obj = obj
        self.a = _configured_a(driver, kwargs, starred)
        self.count = 0
        self.foreign = any(keyword in kwargs for keyword in driver.other_backends)
        self.wrapped: list[object] = []
        self.entered_at: int | None = None  # the run's event count at the open entry (None: none open)
        self.entry_drawn = -1  # the run's microbatches drawn at the last entry
        obj.attrs[driver.flag] = True  # no context entered yet: every call acts

    @property
    def synced(self) -> bool:
        """Whether the current microbatch ends a group (the flag, as the code reads it)."""
        return self.obj.attrs.get(self.driver.flag) is not False

    def enter(self, a: int, at_loader_end: bool) -> bool:
        """Count one microbatch (a context entry) with A = ``a``; ``at_loader_end``: the run is at
        the last batch of a pass over data this object wrapped. Returns the new flag."""
        if at_loader_end and self.driver.loader_end_syncs:
            self.count, synced = 0, True
        else:
            self.count += 1
            synced = self.count % a == 0
        self.obj.attrs[self.driver.flag] = synced
        return synced

    def acts(self, role: Role, method: str) -> bool | None:
        """Whether ``method`` of a wrapped object with ``role`` acts now: None where the role is
        unknown and the method is one the driver gates for some role."""
        if self.synced:
            return True
        if (role, method) in self.driver.gated:
            return False
        if role in (Role.UNKNOWN, Role.OTHER) and any(method == gated for _, gated in self.driver.gated):
            return None
        return True


def _configured_a(driver: CountingDriver, kwargs: dict[str, object], starred: bool) -> object:
    if driver.a_keyword in kwargs:
        return kwargs[driver.a_keyword]
    carrier = _CARRIERS.get(driver.framework)
    plugin = kwargs.get(carrier.passed_as) if carrier is not None else None
    if isinstance(plugin, Obj) and carrier is not None and carrier.keyword in plugin.attrs:
        return plugin.attrs[carrier.keyword]
    if plugin is not None or starred:
        return Unknown(f"the {driver.a_keyword} of the {driver.framework} object")
    return driver.a_default


def carrier_attrs(segment: str, args: list[object], kwargs: dict[str, object]) -> dict[str, object] | None:
    """The settings a carrier call (``GradientAccumulationPlugin(4)``) holds, by keyword; None
    where ``segment`` names no carrier."""
    for carrier in _SETTING_CARRIERS:
        if segment == carrier.call:
            positional = {carrier.keyword: args[carrier.position]} if len(args) > carrier.position else {}
            return {**kwargs, **positional}
    return None
