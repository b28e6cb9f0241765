"""The rule registry: every rule class, in code order."""

from __future__ import annotations

from accumlint.checks.base import Rule
from accumlint.checks.data_parallel import (
    DuplicateSamplesAcrossReplicas,
    EffectiveBatchCountsDevices,
    GlobalDenominatorWithAveraging,
)
from accumlint.checks.facts import BatchnormWithAccumulation
from accumlint.checks.framework_usage import AccumulateContextMisplaced, EngineStepGated
from accumlint.checks.gradient_ops import ClipBeforeUnscale, ClipInsideGroup, ScalerInsideGroup
from accumlint.checks.memory import LossKeptWithGraph, RetainGraphInLoop
from accumlint.checks.normalization import (
    DoubleNormalization,
    FrameworkExpectsNormalization,
    MeanOfMeans,
    MissingNormalization,
    NormalizationAfterBackward,
)
from accumlint.checks.resets import MissingGradReset, ResetBetweenBackwardAndStep, ZeroGradInsideGroup
from accumlint.checks.schedule import (
    AmbiguousStepUnit,
    SchedulerHorizonUnitMismatch,
    SchedulerPerMicrobatch,
    SchedulerSteppedTwice,
)
from accumlint.checks.sync import NoSyncMissesForward, NoSyncNeverSyncs
from accumlint.checks.tail import PartialFinalGroup
from accumlint.checks.updates import IrregularUpdateBoundary, StepEveryMicrobatch

ALL_RULES: list[type[Rule]] = sorted(
    [
        ZeroGradInsideGroup,
        MissingGradReset,
        ResetBetweenBackwardAndStep,
        StepEveryMicrobatch,
        PartialFinalGroup,
        IrregularUpdateBoundary,
        DoubleNormalization,
        MeanOfMeans,
        MissingNormalization,
        NormalizationAfterBackward,
        FrameworkExpectsNormalization,
        LossKeptWithGraph,
        RetainGraphInLoop,
        ClipInsideGroup,
        ClipBeforeUnscale,
        ScalerInsideGroup,
        SchedulerPerMicrobatch,
        SchedulerHorizonUnitMismatch,
        SchedulerSteppedTwice,
        NoSyncMissesForward,
        NoSyncNeverSyncs,
        DuplicateSamplesAcrossReplicas,
        EffectiveBatchCountsDevices,
        GlobalDenominatorWithAveraging,
        AccumulateContextMisplaced,
        EngineStepGated,
        BatchnormWithAccumulation,
        AmbiguousStepUnit,
    ],
    key=lambda rule: rule.code,
)
