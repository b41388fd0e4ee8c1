"""The plausibility guard: no plan row shows an MFU above the best published one for its method class and board."""

from __future__ import annotations

import pytest

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


def test_a_capped_row_says_so_and_a_board_without_rows_borrows_the_best_share_of_its_matmul_rate():
    from cheaptune.estimate.time import throughput as tp

    board = next(g for g in list_gpus() if f"{g.name}/adapter" not in ceilings.table() and g.vendor == "nvidia")
    c = ceilings.ceiling(board, "lora")
    assert not c.own_board
    best = max(v["of_gemm"] for k, v in ceilings.table().items() if k.endswith("/adapter"))
    gemm = tp.sustained_rate(board, "bf16", tp.load_table()) / tp.peak_flops(board)[0]
    assert c.mfu == pytest.approx(best * gemm, rel=1e-3)  # the best share, at this board's measured matmul rate
    tps, line = ceilings.capped(1000.0, 0.99, board, "lora")
    assert tps == pytest.approx(1000.0 * c.mfu / 0.99)
    assert line.startswith(f"MFU capped at {c.mfu:.0%}") and f"no public adapter row on {board.name}" in line
    assert ceilings.capped(1000.0, 0.01, board, "lora") == (1000.0, "")
    own = ceilings.ceiling(resolve_gpu("A100-80GB"), "full")
    assert own.own_board and own.mfu == ceilings.table()["A100-80GB/full"]["mfu"]
