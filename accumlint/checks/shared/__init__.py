"""The analyses that the rules of more than one family read, over the model's public facts.

A family's own analyses live beside its rules (``accumlint/checks/<family>/``); the ones here have
readers in two families or more: the loss's multiplicative chain (:mod:`.loss_chain`: normalization,
data parallel), the counters' units (:mod:`.counts`: schedule, updates, facts to record) and which
models a gradient reaches (:mod:`.leaks`: resets, framework usage). Nothing in
:mod:`accumlint.model` imports them.
"""
