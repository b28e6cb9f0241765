"""torchvision's reference training scripts (torchvision 0.21, ``references/classification/utils.py``
and ``references/detection/utils.py``): ``MetricLogger.log_every(iterable, print_freq, header=None)``
yields the items of ``iterable`` one by one, in order, printing progress every ``print_freq`` of
them. The class is copied into many training codebases (DETR, DeiT, MAE, BEiT, LAVIS and their
descendants): a loop over ``metric_logger.log_every(data_loader, ...)`` passes over the loader."""

from __future__ import annotations

VERSION = "0.21"
#: Every version a fact of this module was read in.
READ_VERSIONS = (VERSION,)

#: Methods whose iteration is their first argument's.
ITERATION_WRAPPERS = frozenset({"log_every"})
