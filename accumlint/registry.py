"""The rules by code, known without importing them.

Importing a rule loads LibCST and the group model (about a quarter of a second); a run
answered entirely from the cache never needs either. The selection, the cache key and the
``noqa`` code check read this table instead. ``tests/test_registry.py`` keeps it equal to the
rule classes (``accumlint.checks.ALL_RULES``), which stay the source of each rule's behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass

#: a file could not be read, decoded or parsed (reported by the engine, not by a rule)
PARSE_ERROR_CODE = "ACC000"
PARSE_ERROR_NAME = "parse-error"
PARSE_ERROR_URL = "https://github.com/accumlint/accumlint/blob/main/README.md#exit-codes"


@dataclass(frozen=True)
class RuleEntry:
    """One rule: its code, the module of ``accumlint.checks`` and the class that implement it,
    and whether a run without a selection enables it."""

    code: str
    module: str
    cls: str
    default_enabled: bool = True

    @property
    def qualified_name(self) -> str:
        """``accumlint.checks.<module>.<class>``."""
        return f"accumlint.checks.{self.module}.{self.cls}"


RULES: tuple[RuleEntry, ...] = (
    RuleEntry("ACC001", "resets", "ZeroGradInsideGroup"),
    RuleEntry("ACC002", "resets", "MissingGradReset"),
    RuleEntry("ACC003", "resets", "ResetBetweenBackwardAndStep"),
    RuleEntry("ACC004", "updates", "StepEveryMicrobatch"),
    RuleEntry("ACC005", "tail", "PartialFinalGroup"),
    RuleEntry("ACC006", "updates", "IrregularUpdateBoundary"),
    RuleEntry("ACC101", "normalization", "DoubleNormalization"),
    RuleEntry("ACC102", "normalization", "MeanOfMeans"),
    RuleEntry("ACC103", "normalization", "MissingNormalization", default_enabled=False),
    RuleEntry("ACC104", "normalization", "NormalizationAfterBackward"),
    RuleEntry("ACC105", "normalization", "FrameworkExpectsNormalization"),
    RuleEntry("ACC201", "memory", "LossKeptWithGraph"),
    RuleEntry("ACC202", "memory", "RetainGraphInLoop"),
    RuleEntry("ACC301", "gradient_ops", "ClipInsideGroup"),
    RuleEntry("ACC302", "gradient_ops", "ClipBeforeUnscale"),
    RuleEntry("ACC303", "gradient_ops", "ScalerInsideGroup"),
    RuleEntry("ACC304", "schedule", "SchedulerPerMicrobatch"),
    RuleEntry("ACC305", "schedule", "SchedulerHorizonUnitMismatch"),
    RuleEntry("ACC306", "schedule", "SchedulerSteppedTwice"),
    RuleEntry("ACC401", "sync", "NoSyncMissesForward"),
    RuleEntry("ACC402", "sync", "NoSyncNeverSyncs"),
    RuleEntry("ACC403", "data_parallel", "DuplicateSamplesAcrossReplicas"),
    RuleEntry("ACC404", "data_parallel", "EffectiveBatchCountsDevices"),
    RuleEntry("ACC405", "data_parallel", "GlobalDenominatorWithAveraging"),
    RuleEntry("ACC501", "framework_usage", "AccumulateContextMisplaced"),
    RuleEntry("ACC502", "framework_usage", "EngineStepGated"),
    RuleEntry("ACC901", "facts", "BatchnormWithAccumulation", default_enabled=False),
    RuleEntry("ACC902", "schedule", "AmbiguousStepUnit", default_enabled=False),
)
