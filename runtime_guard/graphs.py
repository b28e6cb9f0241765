"""Which microbatch graphs, saved activations and outputs are still alive (ACC201, ACC202).

Three signals chosen in the design notes (§2), all without a gc walk:

* a *graph sentinel*: an object stored in ``output.grad_fn.metadata`` (a public dict of the
  autograd node); it dies with the node, i.e. when nothing keeps that graph any more.
  Nodes themselves cannot be weak-referenced.
* *saved-tensor bytes*: a ``saved_tensors_hooks`` pack hook returns a holder whose death
  (the autograd engine frees saved variables during backward) decrements a per-microbatch
  counter. The holder keeps ``t.detach()``: keeping ``t`` would make a cycle node -> holder ->
  tensor -> grad_fn = node for outputs a node saves, and leak graphs that are never
  backwarded (a trap measured in §2). Inside non-reentrant activation checkpointing the
  checkpoint's own hooks take precedence: bytes are "outside checkpointed regions".
* *kept outputs*: ``weakref.finalize`` on each output tensor.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from typing import Any

import torch


class _Sentinel:
    """Lives in an autograd node's metadata; tells the tracker when the node died."""

    __slots__ = ("serial", "tracker", "__weakref__")

    def __init__(self, serial: int, tracker: GraphTracker) -> None:
        self.serial = serial
        self.tracker = tracker

    def __del__(self) -> None:
        self.tracker.graphs_alive.discard(self.serial)


class _Saved:
    """What a pack hook returns: a detached alias of the saved tensor plus accounting.

    ``state`` = [serial, nbytes, backward that last unpacked it] is shared with the tracker,
    which never references the holder itself (the autograd graph owns it)."""

    __slots__ = ("tensor", "state", "tracker")

    def __init__(self, tensor: torch.Tensor, serial: int, tracker: GraphTracker) -> None:
        self.tensor = tensor
        nbytes = tensor.untyped_storage().nbytes() if tensor.layout == torch.strided else 0
        self.state = [serial, nbytes, -1]
        self.tracker = tracker
        tracker._saved_add(id(self), self.state)

    def __del__(self) -> None:
        self.tracker._saved_remove(id(self))


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """The tensors of a module output or a loaded batch: a tensor, a tuple/list, a mapping (a dict, an HF
    ``ModelOutput`` or ``BatchEncoding``)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from tensors_in(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors_in(item)


def batch_shapes(batch: Any) -> Counter[tuple[int, ...]]:
    """The shapes of a loaded batch's tensors whose first dimension is its first tensor's (the examples), with
    how many tensors have each; empty when the batch holds no tensor with a dimension."""
    tensors = [t for t in tensors_in(batch) if t.dim() >= 1]
    if not tensors:
        return Counter()
    examples = tensors[0].shape[0]
    return Counter(tuple(t.shape) for t in tensors if t.shape[0] == examples)


class GraphTracker:
    """Counts, per microbatch serial, live graphs, live saved bytes and live output bytes.

    ``current`` is the serial of the microbatch whose forward ran last; saved tensors are
    charged to it. ``backward_serial`` numbers backward passes for ACC202.
    """

    def __init__(self) -> None:
        self.current = -1
        self.graphs_alive: set[int] = set()
        self.saved_bytes: dict[int, int] = defaultdict(int)
        self._live_saved: dict[int, list[int]] = {}  # id(holder) -> its shared state
        self.live_bytes = 0
        self.peak_bytes = 0
        self.output_bytes: dict[int, int] = defaultdict(int)
        self.backward_serial = 0
        self.active = True

    # -- saved tensors -------------------------------------------------------------------
    def _saved_add(self, key: int, state: list[int]) -> None:
        self._live_saved[key] = state
        self.saved_bytes[state[0]] += state[1]
        self.live_bytes += state[1]
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)

    def _saved_remove(self, key: int) -> None:
        state = self._live_saved.pop(key, None)
        if state is not None:
            self.saved_bytes[state[0]] -= state[1]
            self.live_bytes -= state[1]

    def pack(self, tensor: torch.Tensor) -> Any:
        """Pack hook: a holder of ``tensor.detach()`` while probing, the tensor itself after."""
        if not self.active:
            return tensor
        return _Saved(tensor.detach(), self.current, self)

    def unpack(self, packed: Any) -> torch.Tensor:
        """Unpack hook: the saved tensor (records which backward unpacked it)."""
        if isinstance(packed, _Saved):
            packed.state[2] = self.backward_serial
            return packed.tensor
        return packed

    def retained_after_backward(self) -> int:
        """Bytes unpacked by the current backward that are still alive (ACC202 evidence)."""
        return self.alive_unpacked_by(self.backward_serial)

    def alive_unpacked_by(self, backward: int) -> int:
        """Bytes still alive whose last unpacking was by backward number ``backward``."""
        return sum(state[1] for state in list(self._live_saved.values()) if state[2] == backward)

    # -- graphs and outputs --------------------------------------------------------------
    def watch_output(self, serial: int, output: Any) -> None:
        """Put a sentinel into the grad_fn of the first output tensor that has one, and
        account the bytes of every output tensor until it dies."""
        sentinel_set = False
        for t in tensors_in(output):
            if not sentinel_set and t.grad_fn is not None:
                t.grad_fn.metadata[("runtime_guard", serial)] = _Sentinel(serial, self)
                self.graphs_alive.add(serial)
                sentinel_set = True
            if t.layout == torch.strided:
                nbytes = t.untyped_storage().nbytes()
                self.output_bytes[serial] += nbytes
                weakref.finalize(t, self._output_died, serial, nbytes).atexit = False

    def _output_died(self, serial: int, nbytes: int) -> None:
        self.output_bytes[serial] -= nbytes

    def kept_output_bytes(self, before: int) -> int:
        """Bytes of outputs of microbatches with serial < ``before`` still alive."""
        return sum(b for s, b in self.output_bytes.items() if s < before)


class SavedTensorHooks:
    """The tracker's pack and unpack hooks on the saved-tensor default-hook stack of the loop's thread.

    That stack is per thread and only its top can be popped: the program may have pushed its own
    hooks above the guard's (``saved_tensors_hooks(...)``, ``save_on_cpu()``), and the probe may be
    detached from another thread. ``remove()`` pops the guard's hooks when they are the top of the
    calling thread's stack; otherwise they become pass-through and pop themselves at their next
    call on the loop's thread, i.e. the first tensor that thread saves once the program's hooks
    above them are gone. The program's hooks are never popped.
    """

    def __init__(self, tracker: GraphTracker) -> None:
        self.tracker = tracker
        self.thread = threading.get_ident()
        self.removed = False
        # the exact objects pushed: the stack's top is compared by identity
        self._hooks = (self.pack, self.unpack)

    def push(self) -> None:
        """Push the hooks on the calling thread's stack (the loop's)."""
        torch._C._autograd._push_saved_tensors_default_hooks(*self._hooks)

    def remove(self) -> None:
        """Pop the hooks now when they are the calling thread's top, else at their next call there."""
        self.removed = True
        self._pop_if_top()

    @property
    def pushed(self) -> bool:
        """True until the hooks were popped from the loop thread's stack."""
        return self._hooks is not None

    def _pop_if_top(self) -> None:
        if self._hooks is None or threading.get_ident() != self.thread:
            return
        top = torch._C._autograd._top_saved_tensors_default_hooks(False)
        if top is not None and top[0] is self._hooks[0]:
            # the frame torch runs this pack hook in holds its own references to the hooks
            torch._C._autograd._pop_saved_tensors_default_hooks()
            self._hooks = None

    def pack(self, tensor: torch.Tensor) -> Any:
        """The tracker's pack hook while probing; after ``remove()`` the tensor itself, and the hooks
        leave the stack (called, they are its top)."""
        if self.removed:
            self._pop_if_top()
            return tensor
        return self.tracker.pack(tensor)

    def unpack(self, packed: Any) -> torch.Tensor:
        """The tracker's unpack hook (it passes plain tensors through)."""
        return self.tracker.unpack(packed)
