"""What the loop reports about itself, at run time: a logged rate (``runtime_guard.log``, ``wandb.log``,
TensorBoard's ``add_scalar(s)``, ``Accelerator.log``) that counts one microbatch over a
group's time (ACC903) and a resumed scheduler whose position is A times the optimizer's own count of
updates, or 1/A of it (ACC904). Each is judged only where its evidence is there; the card says what
was compared, or why nothing was (:func:`rates` and :func:`resume` give both)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from runtime_guard.checks.base import finding
from runtime_guard.events import SCHEDULER_STEP
from runtime_guard.record import RunRecord
from runtime_guard.report import RuntimeFinding
from runtime_guard.trace import LoggedFigure, Microbatch, ObservedGroup

#: Largest factor between a rate times its time and a count that still counts as that count: the time the
#: loop measures and the probe's (from the previous update attempt to the log call) differ a little.
RATE_TOLERANCE = 1.5


@dataclass
class RateVerdict:
    """One logged rate as judged: ``counts`` maps each count it was compared with (``"examples"``,
    ``"input tokens"``, ``"supervised tokens"``) to (the group's, its last microbatch's); ``implied`` is the
    rate times the seconds it covers; ``verdict`` is "the whole group", "one microbatch", "neither count"
    or "not judged: <why>"."""

    figure: LoggedFigure
    verdict: str
    implied: float | None = None
    counts: dict[str, tuple[int, int]] | None = None
    matched: str = ""  # the count the verdict rests on

    def card(self) -> dict[str, object]:
        f = self.figure
        return {"name": f.name, "value": f.value, "source": f.source, "group": f.group, "unit": f.unit or "unknown",
                "microbatches": f.microbatches, "after_update": f.after_update,
                "seconds_since_previous_update": None if f.seconds is None else round(f.seconds, 6),
                "rate_times_seconds": None if self.implied is None else round(self.implied, 3),
                "counts": {k: {"group": g, "last_microbatch": m} for k, (g, m) in (self.counts or {}).items()},
                "verdict": self.verdict}


def _counts(unit: str, mbs: list[Microbatch]) -> dict[str, tuple[int, int]]:
    """Per count the probe knows for ``unit``: (sum over ``mbs``, the last one's); a count some microbatch
    lacks is left out."""
    readers = ({"examples": lambda mb: mb.examples} if unit == "examples" else
               {"input tokens": lambda mb: mb.tokens, "supervised tokens": lambda mb: mb.ce.tokens if mb.ce else None})
    counts = {}
    for name, read in readers.items():
        values = [read(mb) for mb in mbs]
        if values and all(v is not None and v > 0 for v in values):
            counts[name] = (sum(values), values[-1])
    return counts


def judge_rate(rec: RunRecord, figure: LoggedFigure) -> RateVerdict:
    """Whether ``figure`` times the seconds since the previous update is the count of the group's
    microbatches (right), of its last one only (ACC903), or neither (silent); with D > 1 a figure over
    all replicas (D times the local count) is right too."""
    a, _ = rec.effective_a()
    group = next((g for g in rec.groups if g.index == figure.group), None)
    if not figure.unit:
        return RateVerdict(figure, "not judged: its name gives no unit (tokens, samples or examples per second)")
    if figure.seconds is None:
        return RateVerdict(figure, "not judged: logged before the probe saw an update, so the time it covers "
                                   "is not known")
    if a is None or a < 2:
        return RateVerdict(figure, "not judged: A is not known or 1 (one microbatch is the whole group)")
    if group is None or figure.microbatches != a:
        return RateVerdict(figure, f"not judged: logged after {figure.microbatches} of the group's A = {a} "
                                   "microbatches")
    counts = _counts(figure.unit, group.microbatches[:figure.microbatches])
    if not counts:
        return RateVerdict(figure, f"not judged: the microbatches' {figure.unit} are not known")
    d = (rec.data_parallel.size if rec.data_parallel else None) or 1
    implied = figure.value * figure.seconds
    tolerance = min(RATE_TOLERANCE, a ** 0.4)  # the two counts' ranges stay apart down to A = 2

    def near(count: int) -> bool:
        return any(1 / tolerance <= implied / (count * k) <= tolerance for k in {1, d})

    whole = next((name for name, (count, _) in counts.items() if near(count)), "")
    last = next((name for name, (_, count) in counts.items() if near(count)), "")
    verdict = "the whole group" if whole else "one microbatch" if last else "neither count"
    return RateVerdict(figure, verdict, implied, counts, whole or last)


def rates(rec: RunRecord) -> list[RateVerdict]:
    """Every logged rate, judged."""
    return [judge_rate(rec, f) for f in rec.figures]


def rate_status(verdicts: list[RateVerdict], loggers: list[str] | None = None) -> str:
    """ACC903's line on the card; ``loggers``: the loggers hooked (:mod:`runtime_guard.observe.loggers`)."""
    if any(not v.verdict.startswith("not judged") for v in verdicts):
        return "checked"
    if verdicts:
        return f"not observed: {len(verdicts)} logged rate(s), none judged ({verdicts[0].verdict})"
    hooked = (f"through runtime_guard.log() or the loggers hooked ({', '.join(loggers)})" if loggers else
              "through runtime_guard.log(), and no logger the guard reads (wandb, TensorBoard's SummaryWriter, "
              "tensorboardX, Accelerator.log) was imported by the probe's last update")
    return f"not observed: no rate (tokens or examples per second) was logged while probed {hooked}"


def logged_rates(rec: RunRecord) -> Iterator[RuntimeFinding]:
    """ACC903: a rate that counts one microbatch over the time of the whole group."""
    for v in rates(rec):
        if v.verdict != "one microbatch":
            continue
        f, name = v.figure, v.matched
        whole, last = v.counts[name]  # type: ignore[index]
        a, _ = rec.effective_a()
        yield finding("ACC903", f.group, None,
                      f"`{f.name}` = {f.value:.4g} logged after {f.microbatches} microbatches covers the "
                      f"{f.seconds:.3g} s since the previous update: {v.implied:.4g} {f.unit}, the {name} of the "
                      f"group's last microbatch ({last}), not of its {a} microbatches ({whole}): the figure is "
                      f"{whole / last:.3g}x too small",
                      f"{f.source}({f.name!r}) in group {f.group}")


@dataclass
class ResumeVerdict:
    """ACC904 as judged: the card's ``status`` line and, when the counters disagree by A, the finding."""

    status: str
    finding: RuntimeFinding | None = None


def _steps_per_update(groups: list[ObservedGroup]) -> int | None:
    """The scheduler steps of every closed group when they are all the same number, else ``None``."""
    steps = {g.count(SCHEDULER_STEP) for g in groups}
    return steps.pop() if len(steps) == 1 else None


def resume(rec: RunRecord) -> ResumeVerdict:
    """ACC904: after a resume, the scheduler's position (``last_epoch``) is A times the optimizer's own
    count of applied updates (the scheduler restored from a count of microbatches), or 1/A of it (the
    reverse), while the probed groups step it once per update (times Accelerate's steps per update)."""
    a, _ = rec.effective_a()
    updates, position = rec.updates_at_attach, rec.scheduler_position
    if not rec.scheduler_given or position is None:
        return ResumeVerdict("not observable: no LR scheduler (whose position a resume restores) was given or found")
    if rec.scaler_given:
        return ResumeVerdict("not observable: a GradScaler's skipped updates move the scheduler and not the "
                             "optimizer's count")
    if updates is None:
        return ResumeVerdict("not observed: the optimizer's state held no update count (state['step']) when the "
                             "probe attached (a fresh optimizer, or one that counts none, such as SGD)")
    if updates < 2:
        return ResumeVerdict(f"not observed: the optimizer had applied {updates} update(s) when the probe attached "
                             "(no resumed run)")
    k = rec.scheduler_steps_per_update
    closed = [g for g in rec.full_groups if g.attempted]
    if a is None or a < 2 or not closed or _steps_per_update(closed) != k:
        return ResumeVerdict("not observed: A is not known or 1, or the probed groups did not step the scheduler "
                             f"{k}x per update")
    status = "checked"
    expected = k * updates
    if abs(position - expected) <= k:
        return ResumeVerdict(status)
    for factor, unit in ((a, "microbatches"), (1 / a, "updates converted once more")):
        if abs(position - factor * expected) <= k:
            return ResumeVerdict(status, finding(
                "ACC904", None, None,
                f"when the probe attached the optimizer had applied {updates} updates (its own count, "
                f"state['step']) and the LR scheduler stood at position {position} = {position / expected:.3g} x "
                f"{expected}: the counter it was restored from counts {unit}, and the schedule is A = {a} times "
                f"{'ahead' if factor > 1 else 'behind'}",
                f"optimizer state['step'] = {updates}, scheduler.last_epoch = {position}, "
                f"{k} scheduler step(s) per update while probed"))
    return ResumeVerdict(status)


def resumed_counters(rec: RunRecord) -> Iterator[RuntimeFinding]:
    """ACC904's finding, if any."""
    verdict = resume(rec)
    if verdict.finding is not None:
        yield verdict.finding
