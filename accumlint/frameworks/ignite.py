"""pytorch-ignite: the ``Engine`` owns the loop and calls the user's process function once per
iteration (one microbatch), with the handlers registered for its events around it.

Source: pytorch-ignite 0.5.5 ``ignite/engine/engine.py`` ``Engine._run_once_on_dataset_as_gen``:
``self.state.iteration += 1``, fire ``ITERATION_STARTED``, ``self._process_function(self,
batch)``, fire ``ITERATION_COMPLETED``; ``EPOCH_STARTED`` / ``EPOCH_COMPLETED`` around each
epoch (``_internal_run_as_gen``). ``state.iteration`` and ``state.epoch`` are therefore 1-based
when user code reads them. A filtered event (``Events.ITERATION_COMPLETED(every=k)``) is a
gate of its own and is not read as a per-iteration handler.
"""

from __future__ import annotations

from accumlint.frameworks.loops import Phase, RegisteredLoop

ENGINE_LOOP = RegisteredLoop(
    framework="pytorch-ignite",
    version="0.5.5",
    source="ignite/engine/engine.py Engine._run_once_on_dataset_as_gen",
    # DeterministicEngine (ignite/engine/deterministic.py) runs the same loop with seeded batches
    constructors=frozenset({"ignite.engine.Engine", "ignite.engine.engine.Engine", "ignite.engine.DeterministicEngine",
                            "ignite.engine.deterministic.DeterministicEngine"}),
    events={
        "EPOCH_STARTED": Phase.EPOCH_START,
        "ITERATION_STARTED": Phase.BATCH_START,
        "ITERATION_COMPLETED": Phase.BATCH_END,
        "EPOCH_COMPLETED": Phase.EPOCH_END,
    },
    counters={"state.iteration": 1},
)
