"""The plausibility guard: no plan row shows an MFU above the best published one for its method class and board."""

from __future__ import annotations

import pytest
import yaml

from cheaptune.catalog.gpus import list_gpus, resolve_gpu
from cheaptune.estimate.cost.cost import constants
from cheaptune.estimate.time import ceilings
from cheaptune.estimate.time.throughput import ModelShape, flops_per_token
from cheaptune.plan.candidates import FitOutcome, GpuFit
from cheaptune.plan.pricing import price_option
from cheaptune.plan.workload import Workload
from tests.plan.fakes import offer

SHAPES = {"1b": ModelShape(params=1_100_000_000, hidden=2048, layers=22, vocab=32000, tied_embeddings=False),
          "7b": ModelShape(params=6_738_000_000, hidden=4096, layers=32, vocab=32000, tied_embeddings=False)}
TRAINABLE = {"full": None, "lora": 0.006, "qlora": 0.006}


def test_every_ceiling_names_its_row_and_source():
    for key, c in ceilings.table().items():
        assert key.split("/")[1] in ("full", "adapter") and 0 < c["mfu"] < 1 and c["of_gemm"] <= 1
        assert c["row"] and c["url"].startswith("https://") and c["source_date"]


@pytest.mark.parametrize("method", ["full", "lora", "qlora"])
def test_no_plan_row_over_the_catalog_beats_the_best_published_mfu(method):
    w = Workload(tokens=5_000_000, epochs=1, seq_len=2048, effective_batch=16)
    for gpu in list_gpus():
        for shape in SHAPES.values():
            trainable = shape.params if method == "full" else int(shape.params * TRAINABLE[method])
            fit = FitOutcome(True, 8, False, gpu.memory_bytes // 2, trainable, shape.params, "fake")
            o = price_option(GpuFit(method, gpu, fit), offer("x", gpu.name, 1.0), w, shape, constants())
            f = flops_per_token(shape, method, w.seq_len, False, 0 if method == "full" else trainable)
            mfu = f.model * o.tokens_per_s / (gpu.peak_tflops(o.precision) * 1e12)
            assert mfu <= ceilings.ceiling(gpu, method).mfu * 1.001, (gpu.name, method, mfu)


def _share_of(gpu, mfu: float) -> float:
    from cheaptune.estimate.time import throughput as tp

    return mfu / (tp.sustained_rate(gpu, "bf16", tp.load_table()) / tp.peak_flops(gpu)[0])


@pytest.mark.parametrize("method", ["full", "lora"])
def test_no_board_is_held_below_its_own_rows_or_tighter_than_its_class(method):
    """A real upper bound, monotone in evidence: every board's ceiling is at least the best published MFU on it,
    and every board of an architecture class (rows or none) gets the class's one share of its matmul rate."""
    from cheaptune.estimate.time.intervals import board_class

    cls, rows = ceilings.method_class(method), ceilings.table()
    by_class: dict[str, set[float]] = {}
    for gpu in list_gpus():
        c = ceilings.ceiling(gpu, method)
        own = rows.get(f"{gpu.name}/{cls}")
        if own and _share_of(gpu, own["mfu"]) <= 1:
            assert c.mfu >= own["mfu"] - 1e-9, (gpu.name, c.mfu, own["mfu"])
        by_class.setdefault(board_class(gpu), set()).add(round(c.share, 9))
        assert c.mfu == pytest.approx(c.share / _share_of(gpu, 1.0))  # the share at this board's matmul rate
    assert all(len(shares) == 1 for shares in by_class.values()), by_class
    for key, entry in rows.items():  # and no row on a board of the class beats the class's share
        board, kind = key.split("/")
        gpu = resolve_gpu(board)
        if kind == cls and _share_of(gpu, entry["mfu"]) <= 1:
            assert ceilings.ceiling(gpu, method).share >= _share_of(gpu, entry["mfu"]) - 1e-9, key


def test_the_h200_and_b200_adapters_and_the_rowless_b300_share_the_hopper_class_bound():
    """The single Surogate rows no longer hold the H200 (or B200) below the H100's bound, nor does the B300,
    with no row, take a looser one: one share of the measured matmul rate for the class."""
    h100, h200, b200, b300 = (ceilings.ceiling(resolve_gpu(n), "lora") for n in ("H100", "H200", "B200", "B300"))
    assert h100.share == h200.share == b200.share == b300.share and h100.scope == "hopper+"
    assert h200.mfu >= ceilings.table()["H200/adapter"]["mfu"] and b200.mfu >= ceilings.table()["B200/adapter"]["mfu"]


@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_faster_board_of_the_same_class_is_never_priced_slower_by_the_cap(method):
    """Capped speed = ceiling x peak / FLOPs per token: with one share per class it follows the sustained rate."""
    from cheaptune.estimate.time import throughput as tp
    from cheaptune.estimate.time.intervals import board_class

    def cap(gpu) -> float:  # tokens/s the cap leaves a job asking 0.99 of the peak at 1e12 FLOPs per token
        peak = tp.peak_flops(gpu)[0]
        return ceilings.capped(0.99 * peak / 1e12, 0.99, gpu, method)[0]

    gpus = list_gpus()
    for a in gpus:
        for b in gpus:
            rate = lambda g: tp.sustained_rate(g, "bf16", tp.load_table())  # noqa: E731
            if board_class(a) == board_class(b) and rate(a) > rate(b):
                assert cap(a) >= cap(b), (a.name, b.name, cap(a), cap(b))


def test_a_class_with_rows_on_one_board_takes_the_best_share_of_any_board(tmp_path):
    """One board's best row is one run, not a bound: its class borrows the best share of any board until rows
    on MIN_BOARDS boards of the class show its own; a row faster than its board's matmul rate bounds nothing."""
    row = {"row": "R", "source": "s", "url": "https://example.org", "source_date": "undated", "read": "2026-12-01"}
    path = tmp_path / "ceilings.yaml"
    path.write_text(yaml.safe_dump({"ceilings": {"L40S/adapter": {**row, "mfu": 0.1, "row": "low"},
                                                 "A100-80GB/adapter": {**row, "mfu": 0.4, "row": "best"},
                                                 "RTX4090/adapter": {**row, "mfu": 1.2, "row": "impossible"}}}))
    l4, l40s = resolve_gpu("L4"), resolve_gpu("L40S")
    c = ceilings.ceiling(l4, "lora", path)
    assert (c.scope, c.row, c.row_board) == ("any", "best", "A100-80GB")
    assert c.share == pytest.approx(_share_of(resolve_gpu("A100-80GB"), 0.4))
    assert ceilings.ceiling(l40s, "lora", path).mfu > 0.1  # above its own single row
    path2 = tmp_path / "two.yaml"
    path2.write_text(yaml.safe_dump({"ceilings": {"L40S/adapter": {**row, "mfu": 0.1, "row": "low"},
                                                  "L4/adapter": {**row, "mfu": 0.12, "row": "l4"},
                                                  "A100-80GB/adapter": {**row, "mfu": 0.4, "row": "best"}}}))
    two = ceilings.ceiling(l40s, "lora", path2)  # two Ada boards: the class's own best share
    assert two.scope == "datacenter-ada" and two.share == pytest.approx(max(_share_of(l4, 0.12), _share_of(l40s, 0.1)))


def test_a_capped_row_says_so():
    board = resolve_gpu("B300")
    c = ceilings.ceiling(board, "lora")
    tps, line = ceilings.capped(1000.0, 0.99, board, "lora")
    assert tps == pytest.approx(1000.0 * c.mfu / 0.99)
    assert line.startswith(f"MFU capped at {c.mfu:.0%}: {c.share:.0%} of B300's measured matmul rate")
    assert f"on hopper+ boards: row {c.row} on {c.row_board}" in line
    assert ceilings.capped(1000.0, 0.01, board, "lora") == (1000.0, "")
