"""The public-data tables under bench/data: every row sourced, dated no later than it was read, in range.

These tables feed the step-time fit and its leave-one-source-out score; a typo in a board, a date or a
per-GPU flag silently moves a fitted constant, so each row is checked here rather than trusted.
"""

from __future__ import annotations

import csv
import datetime as dt
import re
from pathlib import Path

import pytest

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.catalog.models import resolve_model
from cheaptune.estimate.time.scaling import SHARDINGS
from cheaptune.estimate.time.throughput import ADAPTER_METHODS, ModelShape, load_table

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"
STACKS = {"cheaptune", "hf", "trl", "axolotl", "unsloth", "torchtune", "fms-fsdp", "litgpt", "other"}
URL = re.compile(r"^(https://\S+|[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:\S+)$")


def rows(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="") as f:
        return list(csv.DictReader(f))


def day(text: str) -> dt.date:
    return dt.date.fromisoformat(text)


def check_common(r: dict[str, str]) -> None:
    """Source, URL, and a source date that is `undated` or not after the day the row was read."""
    assert r["source"].strip(), f"{r['id']}: no source"
    assert URL.match(r["url"]), f"{r['id']}: url {r['url']!r} is neither https://... nor owner/repo@commit:path"
    read = day(r["retrieved"])
    assert read <= dt.date.today(), f"{r['id']}: read in the future ({read})"
    if r["source_date"] != "undated":
        assert day(r["source_date"]) <= read, f"{r['id']}: source date {r['source_date']} after it was read ({read})"
        assert day(r["source_date"]) >= dt.date(2017, 1, 1), f"{r['id']}: source date {r['source_date']} predates the boards"


def positive(r: dict[str, str], *keys: str) -> None:
    for k in keys:
        assert float(r[k]) > 0, f"{r['id']}: {k} must be > 0, got {r[k]!r}"


@pytest.mark.parametrize("name", ["throughput_public.csv", "gemm_measured.csv", "jobs_public.csv", "grpo_public.csv"])
def test_every_row_has_a_dated_source_and_a_unique_id(name: str) -> None:
    table = rows(name)
    assert table, f"{name} is empty"
    ids = [r["id"] for r in table]
    assert len(ids) == len(set(ids)), f"{name}: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}"
    for r in table:
        check_common(r)
        if "stack" in r:
            assert r["stack"] in STACKS, f"{r['id']}: stack {r['stack']!r} not one of {sorted(STACKS)}"
        if r.get("scope", "bench") == "bench":
            resolve_gpu(r.get("gpu") or r["board"])  # raises on a board the catalog does not know


def implied_fraction_of_peak(r: dict[str, str], params: int) -> float:
    """Lower-bound FLOP rate per GPU (6N/token full, 4N adapters: forward + activation gradients) over the datasheet peak."""
    gpu = resolve_gpu(r["gpu"])
    gpus = int(r["gpus_per_node"]) * int(r["nodes"])
    per_gpu = float(r["tokens_per_s"]) / (1 if r["per_gpu"] == "yes" else gpus)
    flops_per_token = (6 if r["method"] == "full" else 4) * params
    return flops_per_token * per_gpu / ((gpu.bf16_tflops or gpu.fp16_tflops) * 1e12)


def test_throughput_rows_the_bench_reads_are_complete_and_physically_possible() -> None:
    table = rows("throughput_public.csv")
    assert {r["scope"] for r in table} <= {"bench", "note"}
    bench = [r for r in table if r["scope"] == "bench"]
    for r in bench:
        positive(r, "tokens_per_s", "seq_len", "micro_batch", "gpus_per_node", "nodes")
        assert r["method"] == "full" or r["method"] in ADAPTER_METHODS, f"{r['id']}: method {r['method']!r}"
        if r["method"] != "full":
            assert int(r["lora_r"]) > 0, f"{r['id']}: an adapter row needs its rank"
        assert r["sharding"] in ("", *SHARDINGS), f"{r['id']}: sharding {r['sharding']!r}"
        assert (int(r["gpus_per_node"]) * int(r["nodes"]) > 1) == bool(r["sharding"]), f"{r['id']}: sharding iff >1 GPU"
        for flag in ("grad_ckpt", "compiled", "per_gpu", "offload"):
            assert r[flag] in ("yes", "no"), f"{r['id']}: {flag} is {r[flag]!r}"
        spec = resolve_model(r["model"])  # an MoE token passes through its active experts only
        shape = ModelShape.from_config(spec.config, spec.params)
        frac = implied_fraction_of_peak(r, shape.active_params or spec.params)
        # floor 1%: a 0.6B model on a B200 is launch-bound near 2% (surogate-benchmarks SU27: 17k tok/s, flat from H100 to B200)
        assert 0.01 < frac <= 1.0, f"{r['id']}: implied {frac:.1%} of the datasheet peak (per_gpu flag or value wrong?)"


def best_measured_matmul() -> dict[str, float]:
    """The fastest measured bf16/fp16 matmul per board (gemm_measured.csv), TFLOP/s."""
    best: dict[str, float] = {}
    for r in rows("gemm_measured.csv"):
        name = resolve_gpu(r["board"]).name
        best[name] = max(best.get(name, 0.0), float(r["measured_tflops"]))
    return best


def test_no_bench_row_computes_faster_than_its_boards_measured_matmul_rate() -> None:
    # Forward + activation gradients alone (6 x matmul parameters per token full, 4 x adapters; no attention, no
    # recompute) cannot outrun the board's best measured matmul: a row that does ran on another board or counted
    # other tokens (torchtune's '1x A6000' LoRA row did: 1.14x an RTX A6000's rate, so it is scope=note).
    best = best_measured_matmul()
    for r in (r for r in rows("throughput_public.csv") if r["scope"] == "bench"):
        gpu, spec = resolve_gpu(r["gpu"]), resolve_model(r["model"])
        if gpu.name not in best:
            continue
        per_gpu = float(r["tokens_per_s"]) / (1 if r["per_gpu"] == "yes" else int(r["gpus_per_node"]) * int(r["nodes"]))
        tflops = (6 if r["method"] == "full" else 4) * ModelShape.from_config(spec.config, spec.params).matmul_params * per_gpu / 1e12
        assert tflops <= best[gpu.name], f"{r['id']}: {tflops:.0f} TFLOP/s over {gpu.name}'s measured {best[gpu.name]:.0f}"


def test_gemm_rows_sit_between_a_third_of_the_datasheet_and_its_boost_clock_overshoot() -> None:
    # GeForce boards run above the rated boost clock, so a measured matmul can exceed the datasheet by ~15%.
    for r in rows("gemm_measured.csv"):
        gpu = resolve_gpu(r["board"])
        peak = gpu.bf16_tflops if r["dtype"] == "bf16" else gpu.fp16_tflops
        assert r["dtype"] in ("bf16", "fp16") and peak, f"{r['id']}: no {r['dtype']} peak for {gpu.name}"
        assert r["label"] == "measured"
        assert 0.3 <= float(r["measured_tflops"]) / peak <= 1.2, f"{r['id']}: {r['measured_tflops']} vs peak {peak}"


def test_each_measured_sustained_fraction_is_its_rows_rate_over_the_catalog_dense_peak() -> None:
    # steptime.yaml names a gemm_measured.csv row per measured board; a row or a catalog peak edited alone
    # would leave the fraction the step-time model uses out of step with the measurement it cites.
    gemm = {r["id"]: r for r in rows("gemm_measured.csv")}
    for name, entry in load_table()["sustained_fraction"]["boards"].items():
        if entry["label"] != "measured":
            continue
        r = gemm[entry["row"]]
        gpu = resolve_gpu(r["board"])
        assert gpu.name == name, f"{name}: its row {r['id']} measured {gpu.name}"
        peak = gpu.bf16_tflops if r["dtype"] == "bf16" else gpu.fp16_tflops
        assert entry["value"] == pytest.approx(float(r["measured_tflops"]) / peak, abs=0.0015), name


def test_gemm_covers_the_boards_the_plan_recommends() -> None:
    boards = {resolve_gpu(r["board"]).name for r in rows("gemm_measured.csv")}
    wanted = {"T4", "L4", "A10G", "RTX3090", "RTX4090", "RTX5090", "RTXA6000", "L40S", "A100", "A100-80GB", "H100", "H200",
              "MI300X"}
    assert wanted <= boards, f"no measured matmul rate for {sorted(wanted - boards)}"


def test_job_rows_state_wall_time_and_the_settings_to_predict_it() -> None:
    for r in rows("jobs_public.csv"):
        positive(r, "wall_s", "micro_batch", "gpus_per_node", "nodes")
        if r["grad_accum"]:  # blank only where the source does not state it
            positive(r, "grad_accum")
        assert r["method"] == "full" or r["method"] in ADAPTER_METHODS, f"{r['id']}: method {r['method']!r}"
        assert r["tokens_basis"] in ("counted", "packed", "not stated"), f"{r['id']}: tokens_basis {r['tokens_basis']!r}"
        if r["tokens_basis"] != "not stated":
            positive(r, "train_tokens")
            assert float(r["train_tokens"]) / float(r["wall_s"]) < 2e6, f"{r['id']}: over 2M tokens/s"
        assert r["steps"] or r["epochs"] or r["tokens_basis"] == "counted", f"{r['id']}: no steps, epochs or token count"


def test_grpo_rows_have_a_step_time_and_a_generation_backend() -> None:
    for r in rows("grpo_public.csv"):
        positive(r, "step_s", "gpus")
        assert r["backend"] in ("vllm-colocate", "vllm-server", "vllm-dedicated", "transformers", "other"), f"{r['id']}: {r['backend']!r}"
        assert float(r["step_s"]) < 3600, f"{r['id']}: a step over an hour"
