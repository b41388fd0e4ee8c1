"""Unsloth's per-layer RoPE caches (data/versions.yaml unsloth_rope_per_layer, unsloth_rope_full_length): sized by
release, checked against the after-load reserve its notebooks printed."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from types import SimpleNamespace

from cheaptune.estimate.memory.mechanisms import resident_bytes
from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory

ROWS = Path(__file__).parents[2] / "bench" / "data" / "vram_measured_public.csv"
LLAMA3 = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32}
GIB = 2**30


def _req(version: str | None, trainer: str = "unsloth", seq_len: int = 2048):
    pins = f"unsloth=={version}" if version else None
    return SimpleNamespace(trainer=trainer, versions=pins, method="qlora", seq_len=seq_len)


def test_cache_length_and_width_follow_the_release():
    long_ctx = {**LLAMA3, "max_position_embeddings": 131072}
    per_layer = 2 * 128 * 2  # cos and sin, head_dim 128, 16-bit
    assert resident_bytes(_req("2024.6"), long_ctx) == 32 * 131072 * per_layer  # max_position_embeddings long
    assert resident_bytes(_req("2024.8"), long_ctx) == 32 * 32768 * per_layer  # dynamic RoPE: 4 x 8192 to start
    assert resident_bytes(_req("2024.8", seq_len=40000), long_ctx) == 32 * 40960 * per_layer  # grown by 8192s
    gemma = {"model_type": "gemma2", "num_hidden_layers": 26, "hidden_size": 2304, "num_attention_heads": 8,
             "head_dim": 256, "max_position_embeddings": 8192}
    assert resident_bytes(_req("2024.8"), gemma) == 26 * 2 * 8192 * 256 * 4  # Gemma's class keeps them fp32


def test_no_cache_from_2025_1_1_nor_for_other_trainers_nor_the_current_release():
    cfg = {**LLAMA3, "max_position_embeddings": 131072}
    assert resident_bytes(_req("2025.1.1"), cfg) == 0  # one shared model.model.rotary_emb
    assert resident_bytes(_req(None), cfg) == 0  # --trainer unsloth: the current release
    assert resident_bytes(_req(None, trainer="hf"), cfg) == 0


def _after_load(row_id: str) -> float:
    row = next(r for r in csv.DictReader(ROWS.open()) if r["id"] == row_id)
    return float(re.search(r"reserved after load ([\d.]+) GB", row["note"])[1])


def test_the_term_is_the_after_load_difference_the_notebooks_printed():
    """Llama-3.1-8B (131072 positions, unsloth 2024.8) and Llama-3-8B (8192, 2024.9.post4) load the same 4-bit shapes;
    their notebooks' reserve after loading differs by the caches' length alone."""
    measured = _after_load("US1") - _after_load("US4")  # GiB: the notebooks print x / 1024**3 as 'GB'
    grown = resident_bytes(_req("2024.8"), {**LLAMA3, "max_position_embeddings": 131072})
    base = resident_bytes(_req("2024.9.post4"), {**LLAMA3, "max_position_embeddings": 8192})
    assert abs((grown - base) / GIB - measured) < 0.02, (measured, (grown - base) / GIB)


def test_the_estimate_holds_the_cache_all_run(tiny_cfg):
    cfg = tiny_cfg.to_dict()
    kw = dict(model=cfg, method="lora", micro_batch=1, seq_len=32, trainer="unsloth", lora_targets="qv")
    old = estimate_memory(EstimateRequest(**kw, versions="unsloth==2024.6"))
    new = estimate_memory(EstimateRequest(**kw, versions="unsloth==2025.1.1"))
    cache = resident_bytes(_req("2024.6", seq_len=32), cfg)
    assert cache > 0 and old.breakdown["rope_cache"] == cache and "rope_cache" not in new.breakdown
    assert all(old.phase_peaks[ph] - new.phase_peaks[ph] == cache for ph in new.phase_peaks)
