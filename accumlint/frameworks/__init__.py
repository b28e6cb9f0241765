"""Framework adapters as data, one module per framework (issue 15).

Each module states what its framework does per microbatch and per optimizer update (who divides
the loss by A and by what, who gates the update, the reset, the scheduler and the clip, when
gradient sync is decided, how the partial last group is treated, which user hooks it calls per
microbatch and in which order, where A comes from), with the package version and the source file
each fact was read from. The linter's model and the runtime guard both read these rows; a
framework's version bump edits its one module.
"""
