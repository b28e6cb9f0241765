"""PEFT (peft 0.17 ``tuners/adalora/model.py``): AdaLoRA's rank allocator is advanced by the user,
once per optimizer update."""

from __future__ import annotations

VERSION = "0.17"
#: Every version a fact of this module was read in (the installed one first).
READ_VERSIONS = (VERSION,)

#: ``AdaLoraModel.update_and_allocate(global_step)``: scores importance on the accumulated
#: gradients and moves the rank budget's schedule; meant to run once per optimizer update
#: (after ``optimizer.step()``), so a call per microbatch advances it A times per update.
UPDATE_HOOK = "update_and_allocate"
