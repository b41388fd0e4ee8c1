"""What the data costs: length distribution, what --seq-len cuts, duplicates, and the price of another
--seq-len, for a plan made from a dataset file (the token counter keeps each example's length).

Other sequence lengths are priced on the recommended GPU and offer with the same memory fit: shorter
sequences only need less memory; a longer one is not re-checked, and the line says so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cheaptune.plan.pricing import Option, repriced
from cheaptune.plan.workload import Workload

MIN_SEQ = 128


def _kept(lengths: list[int], seq: int) -> int:
    return sum(min(n, seq) for n in lengths)


def audit(w: Workload, best: Option, shape: Any, consts: dict, context: int | None) -> list[str]:
    """Lines for the plan's data audit; empty without per-example lengths."""
    lengths = sorted(w.lengths)
    if not lengths:
        return []
    n, total, seq = len(lengths), sum(lengths), w.seq_len

    def q(p: float) -> int:
        return lengths[min(n - 1, int(p * n))]

    truncated = sum(x > seq for x in lengths) / n
    cut = 1 - _kept(lengths, seq) / max(total, 1)
    padding = 1 - _kept(lengths, seq) / (n * seq)
    lines = [f"example lengths: median {q(0.5)}, p90 {q(0.9)}, p99 {q(0.99)}, max {lengths[-1]} tokens ({n} examples)",
             f"--seq-len {seq} truncates {truncated:.1%} of examples and cuts {cut:.1%} of the tokens; the plan "
             f"prices the {w.trained_tokens:,.0f} tokens per epoch that train. The trainer packs examples, so "
             f"nothing is padded (unpacked, {padding:.0%} of every sequence would be padding)"]
    if w.skipped:
        lines.append(w.skipped)
    if w.duplicates:
        lines.append(f"{w.duplicates} examples are exact duplicates of earlier ones ({w.duplicates / n:.1%}); "
                     f"dropping them saves about ${best.total * w.duplicates / n:.2f}")
    if best.fit is None or best.offer is None:
        return lines
    def cost(s: int) -> float:  # the workload prices what trains at `s` (Workload.trained_tokens)
        return repriced(best, dataclasses.replace(w, seq_len=s), shape, consts).total

    base = cost(seq)
    for s in (seq // 2, seq * 2):
        if s < MIN_SEQ or (context is not None and s > context) or (s > seq and seq >= lengths[-1]):
            continue
        other, trunc = cost(s), sum(x > s for x in lengths) / n
        change = f"{(1 - other / base):.0%} cheaper" if other < base else f"{(other / base - 1):.0%} dearer"
        note = "" if s < seq else f"; memory not re-checked: plan with --seq-len {s}"
        lines.append(f"seq {seq} -> {s}: {change} (${other:.2f} vs ${base:.2f}), {trunc:.1%} of examples truncated{note}")
    return lines
