"""Live tensor-storage accounting under a TorchDispatchMode: the peak and what held it.

Counts storages, not tensors, so views and autograd-saved aliases are counted once; a storage
is freed when its last holder dies (weakref.finalize on the one Python UntypedStorage object
per C++ storage). Works the same on real, meta and fake tensors, which is what lets tests compare
a fake run with a real CPU run byte for byte.
"""

from __future__ import annotations

import math
import weakref
from collections import defaultdict
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Category given to a new storage, by the phase that created it.
PHASE_CATEGORY = {"forward": "activations", "backward": "temporaries", "optimizer": "optimizer_state"}
CUDA_ALLOC_ROUND = 512  # bytes: the CUDA caching allocator's block granularity


class PeakTracker(TorchDispatchMode):
    """Tracks live bytes per category and the per-phase peak with its breakdown."""

    def __init__(self, round_to: int = CUDA_ALLOC_ROUND):
        super().__init__()
        self.round_to = round_to
        self.live: dict[int, list] = {}
        self.cur: dict[str, int] = defaultdict(int)
        self.total = 0
        self.phase = "forward"
        self.forward_category: str | None = None  # overrides the phase's category (e.g. logits_loss)
        self.bucket = "head"  # where backward is in the stack: head, top, mid, bottom (see extrapolate.py)
        self.bucket_peaks: dict[str, int] = defaultdict(int)
        self.phase_peaks: dict[str, int] = defaultdict(int)
        self.peak = 0
        self.peak_breakdown: dict[str, int] = {}
        self.peak_phase = ""
        # bytes an op holds inside itself while it runs (a kernel's buffer its fake implementation shows none of)
        self.inside_op: Callable[[object, tuple], int] | None = None

    def track(self, tensors, category: str) -> None:
        """Count already existing tensors (weights, buffers) under `category`."""
        for t in tensors:
            if isinstance(t, torch.Tensor):
                self._add(t, category)
        self._update_peak()

    def retag(self, tensor: torch.Tensor, category: str) -> None:
        """Move a tensor's storage to another category (grads, optimizer state), adding it if new."""
        key = self._add(tensor, category)
        entry = self.live[key]
        if entry[1] != category:
            self.cur[entry[1]] -= entry[0]
            self.cur[category] += entry[0]
            entry[1] = category

    def reset_peaks(self) -> None:
        self.phase_peaks = defaultdict(int)
        self.bucket_peaks = defaultdict(int)
        self.peak = 0
        self.peak_breakdown = {}
        self._update_peak()

    def _add(self, t: torch.Tensor, category: str) -> int:
        st = t.untyped_storage()
        key = id(st)
        if key not in self.live:
            n = math.ceil(st.nbytes() / self.round_to) * self.round_to
            self.live[key] = [n, category]
            self.cur[category] += n
            self.total += n
            weakref.finalize(st, self._free, key)
        return key

    def _free(self, key: int) -> None:
        entry = self.live.pop(key, None)
        if entry is not None:
            self.cur[entry[1]] -= entry[0]
            self.total -= entry[0]

    def _update_peak(self, inside: int = 0) -> None:
        total = self.total + inside
        if total > self.phase_peaks[self.phase]:
            self.phase_peaks[self.phase] = total
        if self.phase == "backward" and total > self.bucket_peaks[self.bucket]:
            self.bucket_peaks[self.bucket] = total
        if total > self.peak:
            self.peak = total
            self.peak_phase = self.phase
            self.peak_breakdown = {k: v for k, v in self.cur.items() if v}
            if inside:
                self.peak_breakdown["temporaries"] = self.peak_breakdown.get("temporaries", 0) + inside

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        category = (self.phase == "forward" and self.forward_category) or PHASE_CATEGORY[self.phase]
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._add(t, category)
        # inputs are still alive here, so this is the op's true high-water mark
        self._update_peak(self.inside_op(func, args) if self.inside_op is not None else 0)
        return out
