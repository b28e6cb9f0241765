"""The rule registry: every rule class, in code order."""

from __future__ import annotations

from accumlint.checks.base import Rule
from accumlint.checks.framework_usage import AccumulateContextMisplaced, EngineStepGated
from accumlint.checks.memory import LossKeptWithGraph
from accumlint.checks.normalization import DoubleNormalization
from accumlint.checks.resets import MissingGradReset, ResetBetweenBackwardAndStep, ZeroGradInsideGroup
from accumlint.checks.schedule import SchedulerPerMicrobatch
from accumlint.checks.sync import NoSyncMissesForward, NoSyncNeverSyncs
from accumlint.checks.updates import IrregularUpdateBoundary, StepEveryMicrobatch

ALL_RULES: list[type[Rule]] = sorted(
    [
        ZeroGradInsideGroup,
        MissingGradReset,
        ResetBetweenBackwardAndStep,
        StepEveryMicrobatch,
        IrregularUpdateBoundary,
        DoubleNormalization,
        LossKeptWithGraph,
        SchedulerPerMicrobatch,
        NoSyncMissesForward,
        NoSyncNeverSyncs,
        AccumulateContextMisplaced,
        EngineStepGated,
    ],
    key=lambda rule: rule.code,
)
