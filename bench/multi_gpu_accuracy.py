"""Per-GPU memory under DDP/FSDP/ZeRO: our prediction vs published multi-GPU measurements.

Usage: .venv/bin/python bench/multi_gpu_accuracy.py [--json]   -> bench/results/multi_gpu_accuracy.json
Rows: bench/data/vram_multi_gpu.csv (the multi-GPU rows of vram_measured_public.csv; sources:
docs/sources.md#public-measurements).
Each row is estimated with its trainer's profile and row-level settings, from the one mapping the single-GPU bench
uses (memory_accuracy.TRAINER), plus what the row's multi-GPU run did (FSDP_RUN). Each row's single-GPU estimate is
simulated (cached on disk after the first run), then sharded as estimate_memory does it for --gpus N.
Metric mapping: max_allocated / torch_peak -> peak_allocated; per_gpu_screenshot (nvidia-smi) -> device_total.
Accuracy is summarised apart for the rows a constant was fitted on (FITTED) and the rest; the headline is the rest.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

from memory_accuracy import TRAINER, _targets
from run_record import stamp

from cheaptune.estimate.memory import EstimateRequest, estimate_memory

ROWS = Path(__file__).with_name("data") / "vram_multi_gpu.csv"
UNIT = {"GB": 1e9, "GiB": 2**30, "MB": 1e6, "MiB": 2**20}
RESULTS = Path(__file__).with_name("results") / "multi_gpu_accuracy.json"
# framework -> request settings of its multi-GPU run, beyond the single-GPU ones in TRAINER
FSDP_RUN = {
    # litgpt@8641822 (the resource tables' commit, Oct 2023) finetune/lora.py L83-89: FSDPStrategy(auto_wrap_policy=
    # {Block}, activation_checkpointing_policy={Block}, state_dict_type="full", limit_all_gathers=True,
    # cpu_offload=False); Lightning@71aed751 (its requirements.txt pin) fabric/strategies/fsdp.py L173-175 defaults
    # use_orig_params=True, so each Block's frozen and LoRA weights share one FlatParameter; lora.py L40-43
    # batch_size 128 / micro_batch_size -> 128 accumulation steps run under fabric.no_backward_sync (L215), which is
    # FSDP1's no_sync() (fsdp.py L760-773)
    "litgpt": {"grad_ckpt": True, "fsdp_mixed_units": True, "fsdp_no_sync": True},
}

# sharded_allocator_extra_fraction (estimate/data/sharding.yaml) was calibrated on these nvidia-smi rows
FITTED = {"P13", "P14", "P15", "P17"}


def request(row: dict) -> EstimateRequest:
    trainer, settings = TRAINER.get(row["framework"], ("cheaptune", {}))
    sharding = row["sharding"]
    settings = {"grad_ckpt": row["grad_ckpt"] == "yes", **settings}
    if sharding.startswith("fsdp"):
        settings.update(FSDP_RUN.get(row["framework"], {}))
    return EstimateRequest(
        model=row["model"], method=row["method"], lora_r=int(row["lora_r"] or 16),
        lora_targets=_targets(row["lora_targets"]), micro_batch=int(row["micro_batch"]), seq_len=int(row["seq_len"]),
        precision=row["precision"] or None, quant=row["quant"] or None, optimizer="adamw",
        attn="sdpa" if row["attn"] == "flash" else row["attn"], gpus=int(row["num_gpus"]),
        sharding=sharding.replace("-cpu-offload", ""), offload=sharding.endswith("cpu-offload"),
        trainer=trainer, **settings,
    )


def predict(row: dict) -> tuple[float, str]:
    est = estimate_memory(request(row))
    field = "device_total_bytes" if row["metric"] == "per_gpu_screenshot" else "peak_allocated_bytes"
    return getattr(est, field) / UNIT[row["unit"]], field


def est_trainer(row: dict) -> str:
    return TRAINER.get(row["framework"], ("cheaptune", {}))[0]


def summary(rows: list[dict]) -> dict:
    """Median |error| and the worst under- and over-prediction of predicted / measured - 1."""
    errs = [r["ratio_exact"] - 1 for r in rows]
    if not errs:
        return {"rows": 0}
    return {"rows": len(errs), "ids": [r["id"] for r in rows], "median_abs_error": statistics.median(map(abs, errs)),
            "worst_under": min(errs), "worst_over": max(errs)}


def main(argv: list[str]) -> int:
    out = []
    for row in csv.DictReader(ROWS.open()):
        measured = float(row["value"])
        try:
            pred, field = predict(row)
        except Exception as err:  # noqa: BLE001 - a bench reports every row, failures included
            out.append({"id": row["id"], "error": f"{type(err).__name__}: {err}"[:160]})
            continue
        out.append({"id": row["id"], "model": row["model"], "method": row["method"], "gpus": int(row["num_gpus"]),
                    "sharding": row["sharding"], "measured": measured, "predicted": round(pred, 2),
                    "unit": row["unit"], "compared": field, "trainer": est_trainer(row), "ratio": round(pred / measured, 2),
                    "ratio_exact": pred / measured, "fitted": row["id"] in FITTED, "source": row["source"]})
    scored = [r for r in out if "error" not in r]
    doc = stamp({"benchmark": "multi_gpu_accuracy", "rows": out,
                 "not_fitted": summary([r for r in scored if not r["fitted"]]),
                 "fitted": summary([r for r in scored if r["fitted"]])})
    from cheaptune.util import atomic

    atomic.write_text(RESULTS, json.dumps(doc, indent=1) + "\n")
    if "--json" in argv:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"{'id':5} {'model':28} {'meth':6} {'N':>2} {'sharding':17} {'measured':>9} {'predicted':>9} {'ratio':>6}")
    for r in out:
        if "error" in r:
            print(f"{r['id']:5} ERROR {r['error']}")
            continue
        print(f"{r['id']:5} {r['model'][-28:]:28} {r['method']:6} {r['gpus']:>2} {r['sharding']:17} "
              f"{r['measured']:>7.1f}{r['unit']:>2} {r['predicted']:>7.1f}{r['unit']:>2} {r['ratio']:>6.2f}"
              f"{'  (fitted)' if r['fitted'] else ''}")
    for name in ("not_fitted", "fitted"):
        s = doc[name]
        if s["rows"]:
            print(f"{name:10} rows {s['rows']}  median |error| {s['median_abs_error']:.1%}  "
                  f"worst under {s['worst_under']:+.1%}  worst over {s['worst_over']:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
