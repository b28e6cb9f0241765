"""The reference drivers of frameworks that count microbatches themselves (Accelerate's
``accumulate()``, DeepSpeed's ``engine.step()``), run by the simulator as the framework's own
code would run them.

The framework's facts are data (``frameworks.<name>.DRIVER``, a
:class:`~accumlint.frameworks.contracts.CountingDriver`); this module holds one counting
object's state during a run: A as the code configured it, the count, the boundary flag, and the
values it wrapped. The interpreter asks it at four places: a context entry or a call of the
counting method (count one microbatch), a call on a wrapped object (does it act?), a pass over
wrapped data (does its last batch end a group?).
"""

from __future__ import annotations

from collections.abc import Callable

from accumlint import frameworks as fw
from accumlint.frameworks.contracts import CountingDriver
from accumlint.model.kinds import Role
from accumlint.model.values import Function, Obj, Unknown

#: the counting object's role → its framework's driver
DRIVERS: dict[Role, CountingDriver] = {d.counter: d for d in fw.COUNTING_DRIVERS}
#: the functions that build a counting object among others (``deepspeed.initialize``) → its driver
BUILDERS: dict[str, CountingDriver] = {d.builder: d for d in DRIVERS.values() if d.builder is not None}
#: the calls that carry A under another name (``GradientAccumulationPlugin(num_steps=A)``), by the
#: framework of the driver they configure
_CARRIERS = {fw.accelerate.DRIVER.framework: fw.accelerate.ACCUMULATION_PLUGIN}
#: every call that carries a setting of the object it is passed to (``CPUOffload(offload_params=True)``
#: for FSDP1's ``cpu_offload=``): the simulated value keeps the setting, by keyword
_SETTING_CARRIERS = (*_CARRIERS.values(), fw.pytorch.CPU_OFFLOAD)


class Counting:
    """One counting object built in a run (``obj``: an accelerator, an engine; an :class:`Unknown`
    for one known from use): its ``driver``, ``a`` as the code gave it (a value of the run: an
    int, a :class:`LabeledInt` the configuration can bind, or an :class:`Unknown`), the
    microbatches counted (since the last boundary, or in all where the driver never restarts),
    and the values it ``wrapped`` (kept alive so that their identities stay theirs), where its
    open entry began and at which microbatch it was last entered or stepped; ``foreign``: a
    keyword handed the counting to another framework (Accelerate's DeepSpeed backend);
    ``refused``: why the run cannot drive it (its config turns the counting off), or "";
    ``scheduler``: the scheduler it steps at each boundary (None: none; an :class:`Unknown`
    without a label: whether it holds one is unknown)."""

    __slots__ = ("a", "count", "driver", "entered_at", "entry_drawn", "foreign", "obj", "refused", "resolved",
                 "scheduler", "wrapped")

    def __init__(self, driver: CountingDriver, obj: Obj | Unknown, kwargs: dict[str, object], starred: bool,
                 open_a: Callable[[str], object] | None = None) -> None:
        self.driver = driver
        self.obj = obj
        self.a = _configured_a(driver, kwargs, starred, open_a)
        self.resolved: int | None = None  # A once the run knows it
        self.count = 0
        self.foreign = any(keyword in kwargs for keyword in driver.other_backends)
        self.refused = _refused(driver, kwargs)
        self.scheduler: object = None
        self.wrapped: list[object] = []
        self.entered_at: int | None = None  # the run's event count at the open entry (None: none open)
        self.entry_drawn = -1  # the run's microbatches drawn at the last entry
        if isinstance(obj, Obj) and not driver.flag_call:
            obj.attrs[driver.flag] = True  # no context entered yet: every call acts

    @property
    def synced(self) -> bool:
        """Whether the current microbatch ends a group (the flag, as the code reads it)."""
        if self.driver.flag_call:  # asked of the count: ``(micro_steps + 1) % A == 0``
            return self.resolved is None or (self.count + 1) % self.resolved == 0
        return not isinstance(self.obj, Obj) or self.obj.attrs.get(self.driver.flag) is not False

    def enter(self, a: int, at_loader_end: bool) -> bool:
        """Count one microbatch (a context entry) with A = ``a``; ``at_loader_end``: the run is at
        the last batch of a pass over data this object wrapped. Returns the new flag."""
        if at_loader_end and self.driver.loader_end_syncs:
            self.count, synced = 0, True
        else:
            self.count += 1
            synced = self.count % a == 0
        if isinstance(self.obj, Obj):
            self.obj.attrs[self.driver.flag] = synced
        return synced

    def step(self, a: int) -> bool:
        """Count one microbatch at a call of the driver's counting method with A = ``a``; returns
        whether it ended a group (the boundary, asked before the count moves on)."""
        self.resolved = a
        boundary = self.synced
        self.count += 1
        return boundary

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

    def hold_scheduler(self, args: list[object], kwargs: dict[str, object], label: str) -> object:
        """Settle the scheduler a built counter holds from its builder's ``args``/``kwargs`` and
        returns it (``label``: the builder's code): the one passed, one its config builds, None
        where the config is seen and builds none, an :class:`Unknown` where the config is not seen."""
        keyword, position = self.driver.scheduler or ("", -1)
        given = kwargs.get(keyword, args[position] if 0 <= position < len(args) else None)
        config = _config(self.driver, kwargs)
        if isinstance(given, Function):  # a callable that builds it from the optimizer
            given = Obj(Role.SCHEDULER, "construction", f"{label}[{self.driver.returns.index(Role.SCHEDULER)}]")
        if given is not None:
            self.scheduler = given
        elif isinstance(config, dict) and self.driver.scheduler_key in config:
            self.scheduler = Obj(Role.SCHEDULER, "construction", f"the {self.driver.framework} config's scheduler")
        elif not isinstance(config, dict):
            self.scheduler = Unknown(None)
        return self.scheduler


def _config(driver: CountingDriver, kwargs: dict[str, object]) -> object:
    """The config mapping passed to the builder (a dict where the run evaluates it), or None."""
    return next((kwargs[k] for k in driver.config_keywords if k in kwargs), None)


def _configured_a(driver: CountingDriver, kwargs: dict[str, object], starred: bool,
                  open_a: Callable[[str], object] | None) -> object:
    config = _config(driver, kwargs)
    if isinstance(config, dict) and driver.a_keyword in config:
        return config[driver.a_keyword]
    if driver.a_keyword in kwargs and not driver.config_keywords:
        return kwargs[driver.a_keyword]
    carrier = _CARRIERS.get(driver.framework)
    plugin = kwargs.get(carrier.passed_as) if carrier is not None else None
    if isinstance(plugin, Obj) and carrier is not None and carrier.keyword in plugin.attrs:
        return plugin.attrs[carrier.keyword]
    if driver.a_default is None and open_a is not None:  # a config the run does not see: A of the configuration
        return open_a(f"the {driver.framework} config's {driver.a_keyword}")
    if plugin is not None or starred:
        return Unknown(f"the {driver.a_keyword} of the {driver.framework} object")
    return driver.a_default


def _refused(driver: CountingDriver, kwargs: dict[str, object]) -> str:
    """Why the run cannot drive the counter its builder's ``kwargs`` configure, or ""."""
    config = _config(driver, kwargs)
    if driver.unmanaged is None or not isinstance(config, dict) or driver.unmanaged[0] not in config:
        return ""
    key, off = driver.unmanaged
    value = config[key]
    if isinstance(value, bool) or value is None:
        return f"its config sets {key!r} to {value}: the code decides the boundary" if value == off else ""
    return f"its config's {key!r} is a value the run does not know"


def carrier_attrs(segment: str, args: list[object], kwargs: dict[str, object]) -> dict[str, object] | None:
    """The settings a carrier call (``GradientAccumulationPlugin(4)``) holds, by keyword; None
    where ``segment`` names no carrier."""
    for carrier in _SETTING_CARRIERS:
        if segment == carrier.call:
            positional = {carrier.keyword: args[carrier.position]} if len(args) > carrier.position else {}
            return {**kwargs, **positional}
    return None
