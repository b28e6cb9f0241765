"""What both framework callbacks share: one probe, attached on the loop's thread, detached after
the probed groups, and the report published once (attribute, JSON file, log line, printout)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from runtime_guard.events import RESET, SCALER_STEP, UPDATE
from runtime_guard.probe import OnFinding, Probe
from runtime_guard.report import GuardFindingError, GuardSetupWarning, GuardWarning, Report
from runtime_guard.user_frames import stacklevel_outside_guard

logger = logging.getLogger("runtime_guard.integrations")


class GuardSession:
    """One probe run driven by a framework's callback hooks.

    The probe itself always collects; ``on_finding`` is applied here, at the callback hook that
    publishes the report, so a ``"raise"`` surfaces from a framework hook (after the hooks were
    removed and the report was written) instead of from inside the model's forward.
    """

    def __init__(
        self,
        framework: str,
        *,
        groups: int,
        on_finding: OnFinding,
        json_path: str | Path | None,
        print_report: bool,
        probe_options: dict[str, Any],
    ) -> None:
        if groups < 1:
            raise ValueError(f"groups must be >= 1, got {groups}")
        if on_finding not in ("collect", "warn", "raise"):
            raise ValueError(f"on_finding must be 'collect', 'warn' or 'raise', got {on_finding!r}")
        for key in ("on_finding", "groups", "accumulation_steps", "scheduler", "scaler", "accelerator"):
            if key in probe_options:
                raise ValueError(f"{key} is set by the callback, not through probe options")
        self.framework = framework
        self.groups = groups
        self.on_finding = on_finding
        self.json_path = json_path
        self.print_report = print_report
        self.probe_options = probe_options
        self.probe: Probe | None = None
        self.report: Report | None = None
        self.framework_facts: dict[str, Any] = {"name": framework}

    @property
    def started(self) -> bool:
        """True once a probe was created (it attaches once per callback)."""
        return self.probe is not None

    def start(
        self,
        model: Any,
        optimizer: Any,
        *,
        accumulation_steps: int | None,
        accumulation_source: str,
        scheduler: Any = None,
        scaler: Any = None,
        notes: list[str] | None = None,
        unobservable: list[str] | None = None,
        facts: dict[str, Any] | None = None,
        user_normalizes: str = "",
        scheduler_owner: str = "",
    ) -> Probe:
        """Create and attach the probe (on the calling thread, which must run the loop)."""
        probe = Probe(model, optimizer, accumulation_steps=accumulation_steps, scheduler=scheduler, scaler=scaler,
                      groups=self.groups, on_finding="collect", **self.probe_options)
        if accumulation_steps is not None:
            probe.record.accumulation_source = accumulation_source
        probe.record.notes.extend(notes or [])
        probe.record.unobservable.extend(unobservable or [])
        probe.record.user_normalizes = user_normalizes
        if scheduler_owner:
            probe.record.scheduler_owner, probe.record.scheduler_steps_per_update = scheduler_owner, 0
        self.framework_facts.update(facts or {})
        self.probe = probe.attach()
        return probe

    def _nothing_seen(self, probe: Probe, hint: str) -> str:
        """One sentence for a probe that saw no training event on the objects it was given: what it
        saw instead (update attempts and resets of the optimizer, which then trains another module)."""
        rec = probe.record
        kinds = [e.kind for e in rec.before_first_forward]
        steps, resets = kinds.count(UPDATE) + kinds.count(SCALER_STEP), kinds.count(RESET)
        other = (f"; meanwhile {rec.optimizer_class} made {steps} update attempt(s) and {resets} reset(s), so the "
                 "loop forwards another module" if steps or resets else "")
        text = (f"runtime_guard ({self.framework}): no training events on the objects it was given: no grad-enabled "
                f"forward of {rec.model_class} was seen{other}; nothing was checked")
        return f"{text} ({hint})" if hint else text

    def poll(self, publish: bool) -> None:
        """Finish once the probe has seen its groups (it may have detached itself already)."""
        if self.probe is not None and self.report is None and self.probe.done:
            self.finish(clean=True, publish=publish)

    def finish(self, clean: bool, publish: bool, no_forward_hint: str = "") -> Report | None:
        """Detach (idempotent), keep the report, and publish it: JSON, print, log, then warn/raise."""
        if self.probe is None or self.report is not None:
            return self.report
        probe = self.probe
        if probe.attached and no_forward_hint and not any(g.microbatches for g in probe.record.groups):
            probe.record.notes.append(no_forward_hint)
        if probe.attached:
            probe.__exit__(None if clean else RuntimeError, None, None)
        report = probe.report()
        report.card["framework"] = self.framework_facts
        self.report = report
        card = report.card
        nothing = None if any(g.microbatches for g in probe.record.groups) else self._nothing_seen(probe,
                                                                                                  no_forward_hint)
        if nothing is not None:
            card["no_training_events"] = nothing  # before the JSON is written
            logger.warning(nothing)
        if publish:
            if self.json_path is not None:
                report.to_json(self.json_path)
            if self.print_report:
                print(report)
            if nothing is not None:
                warnings.warn(GuardSetupWarning(nothing), stacklevel=stacklevel_outside_guard())
        logger.info("runtime_guard (%s): %d finding(s) %s; A = %s, m = %s, update attempts = %s", self.framework,
                    len(report.findings), sorted(report.codes), card.get("A"), card.get("m"),
                    card.get("updates", {}).get("attempted"))
        if clean and report.findings:
            if self.on_finding == "warn":
                for finding in report.findings:
                    warnings.warn(GuardWarning(finding.one_line()), stacklevel=stacklevel_outside_guard())
            elif self.on_finding == "raise":
                raise GuardFindingError(report)
        return report


class SessionCallback:
    """The user-facing part both callbacks share (mixed into the framework's callback class)."""

    _session: GuardSession
    _publish: bool

    @property
    def report(self) -> Report | None:
        """The report once the probe finished."""
        return self._session.report

    @property
    def probe(self) -> Probe | None:
        """The probe once attached."""
        return self._session.probe

    def detach(self) -> Report | None:
        """Detach now (idempotent) and publish the report."""
        return self._session.finish(clean=True, publish=self._publish, no_forward_hint=self._no_forward_hint())

    def _no_forward_hint(self) -> str:
        """What the card says when no forward of the model was seen."""
        return ""
