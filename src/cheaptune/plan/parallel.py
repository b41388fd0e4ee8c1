"""A cold plan's fits on every core: independent micro-batch searches run in forked worker processes.

The planner asks for fits (method, memory size, precision) in a fixed order and says which it will ask
for next (`ahead`). A fit's search depends only on its own points (microsearch), and fits of one
(method, precision) share points, so each such group runs one fit at a time, in the order asked, and
different groups run side by side; workers share points through the on-disk estimate cache (atomic
writes). Results are handed back in the order the planner asks, an error as the same exception, so the
plan is the serial plan byte for byte. Workers are forked after the parent has estimated the first point
of the fit asked for now (they inherit its imports) and live until the planner says it needs no more fits.
CHEAPTUNE_WORKERS=1, one core, or not Linux (no fork): serial in this process.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from cheaptune.errors import BadInput
from cheaptune.plan.candidates import FitFn, FitOutcome

if TYPE_CHECKING:  # imported where a pool starts: a warm plan never pays for them
    from concurrent.futures import Future, ProcessPoolExecutor

ENV = "CHEAPTUNE_WORKERS"
MAX_WORKERS = 4  # more workers than (method, precision) groups a plan has (4-6) buy nothing
WINDOW = 16  # fits looked at ahead: the planner's ranking cuts the list off, so few past it are wasted
Key = tuple[str, int, str]  # (method, gpu memory bytes, precision)

_FIT: FitFn | None = None  # the serial fit the forked workers run (inherited, so closures need no pickling)


def workers_wanted() -> int:
    """CHEAPTUNE_WORKERS, else min(cores, MAX_WORKERS); 1 off Linux (no fork: spawn would re-import torch
    in every worker, which costs more than it saves)."""
    raw = os.environ.get(ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise BadInput(f"{ENV} must be a whole number >= 1 (got {raw!r}); 1 plans serially, unset it to use every core")
        wanted = int(raw)
    else:
        wanted = min(os.cpu_count() or 1, MAX_WORKERS)
    return wanted if sys.platform.startswith("linux") else 1


def _start_worker() -> None:
    """Fresh stdio objects (a lock a parent thread, such as a spinner's, held at fork stays held in the
    child's copy) and one intra-op thread, as torch's DataLoader workers do (torch/utils/data/_utils/worker.py)."""
    sys.stdout = os.fdopen(os.dup(1), "w", buffering=1)
    sys.stderr = os.fdopen(os.dup(2), "w", buffering=1)
    import torch

    torch.set_num_threads(1)


def _run(key: Key) -> tuple[bool, Any]:
    """One fit in a worker; an exception is returned, to be raised where the planner asks for this fit."""
    try:
        return True, _FIT(*key)
    except Exception as err:  # noqa: BLE001 - handed back as it is, raised by the parent
        return False, err


class ParallelFit:
    """A FitFn: `fit` run serially, or in worker processes for the fits `ahead` names."""

    def __init__(self, fit: FitFn, cold: Callable[[Key], bool], warm: Callable[[Key], object] | None = None,
                 workers: int | None = None):
        self._fit, self._cold, self._warm = fit, cold, warm
        self._workers = workers_wanted() if workers is None else workers
        self._queued: dict[tuple[str, str], list[Key]] = {}  # per (method, precision), in the order named
        self._running: dict[Future, Key] = {}
        self._done: dict[Key, tuple[bool, Any]] = {}
        self._seen: set[Key] = set()  # named once: warm, queued, running or done
        self._pool: ProcessPoolExecutor | None = None  # started on the first cold fits of two groups
        self._procs: list[Any] = []  # the pool's worker processes
        self._size = 0
        self._broken = False

    def ahead(self, keys: Iterable[Key]) -> None:
        """The fits the planner asks for next, in order (the first now); an empty list: no more."""
        keys = list(keys)
        if not keys:
            self.close()
            return
        if self._workers < 2:
            return
        for key in keys[:WINDOW]:
            if key not in self._seen:
                self._seen.add(key)
                if self._cold(key):
                    self._queued.setdefault((key[0], key[2]), []).append(key)
        self._dispatch(keys[0])

    def __call__(self, method: str, mem: int, precision: str) -> FitOutcome:
        key = (method, mem, precision)
        if self._pool is not None and self._waits_for(key):
            from concurrent.futures import FIRST_COMPLETED, wait

            self._dispatch(key)
            while key not in self._done and self._running:
                finished, _ = wait(self._running, return_when=FIRST_COMPLETED)
                for future in finished:
                    self._collect(future)
                if self._broken:  # a worker died (killed, out of memory): the rest is fitted here, serially
                    self.close()
                    self._workers = 1
                    break
                self._dispatch(key)
        if key in self._done:
            ok, value = self._done.pop(key)
            if ok:
                return value
            raise value
        self._drop(key)
        return self._fit(method, mem, precision)

    def close(self) -> None:
        """End the workers; fits not yet started are dropped (the planner no longer needs them)."""
        for key in [*self._running.values(), *(k for keys in self._queued.values() for k in keys)]:
            self._seen.discard(key)  # not fitted: a later plan with this fit (plan --maximize) may name it again
        self._queued.clear()
        if self._pool is not None:
            if self._running:  # fits the planner pruned after naming them: stop them rather than wait
                for proc in self._procs:
                    proc.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            for proc in self._procs:
                proc.join()
            self._pool, self._procs = None, []
        self._running.clear()

    def _waits_for(self, key: Key) -> bool:
        return key in self._done or key in self._running.values() or key in self._queued.get((key[0], key[2]), [])

    def _drop(self, key: Key) -> None:
        group = self._queued.get((key[0], key[2]), [])
        if key in group:
            group.remove(key)

    def _collect(self, future: Future) -> None:
        from concurrent.futures.process import BrokenProcessPool

        key = self._running.pop(future)
        try:
            self._done[key] = future.result()
        except BrokenProcessPool:
            self._broken = True

    def _dispatch(self, first: Key) -> None:
        """Start the next fit of every idle group, the group of `first` first, up to the worker count."""
        busy = {(k[0], k[2]) for k in self._running.values()}
        ready = [g for g, keys in self._queued.items() if keys and g not in busy]
        ready.sort(key=lambda g: g != (first[0], first[2]))
        if self._pool is None:
            if len(ready) < 2:  # one group: the parent is as fast alone
                return
            self._open(self._queued[ready[0]][0], len(ready))
        for group in ready[: max(0, self._size - len(self._running))]:
            key = self._queued[group].pop(0)
            self._running[self._pool.submit(_run, key)] = key

    def _open(self, first: Key, groups: int) -> None:
        """Fork the workers after the first point of the first group's search (the fit asked for now) is
        estimated here (`warm`): torch, transformers, peft, bitsandbytes, the model's class (4-5 s of imports)
        and what a first simulation loads (0.8 s) are then loaded once and inherited, not once per worker. The
        other groups' first points run in the workers: what a further kind of step adds on first use is
        under 0.1 s (a QLoRA or full point after a LoRA one), so warming them here only kept a core idle."""
        global _FIT
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        if self._warm is not None:
            with contextlib.suppress(Exception):  # the fit that needs this point raises it where the planner asks
                self._warm(first)
        _FIT = self._fit
        before = set(multiprocessing.active_children())
        self._size = min(self._workers, groups)
        self._pool = ProcessPoolExecutor(max_workers=self._size,
                                         mp_context=multiprocessing.get_context("fork"), initializer=_start_worker)
        self._pool.submit(int).result()  # with fork every worker starts at the first submit
        self._procs = [p for p in multiprocessing.active_children() if p not in before]
