"""Per-GPU memory under DDP/FSDP/ZeRO: our prediction vs published multi-GPU measurements.

Usage: .venv/bin/python bench/multi_gpu_accuracy.py [--json]   -> bench/results/multi_gpu_accuracy.json
Rows: bench/data/vram_multi_gpu.csv (the multi-GPU rows of vram_measured_public.csv; sources:
docs/sources.md#public-measurements).
Each row is estimated through `estimate`'s own options (memory_accuracy.cli_options: its trainer, stated versions and
settings) plus --gpus, --sharding and --offload, and what the row's multi-GPU run did (FSDP_RUN); how the trainer's
FSDP holds gradients comes from its profile and versions (sharding.FsdpRun.of). Each row's single-GPU estimate is
simulated (cached on disk after the first run), then sharded as estimate_memory does it for --gpus N.
Metric mapping: max_allocated / torch_peak -> peak_allocated; per_gpu_screenshot (nvidia-smi) -> device_total.
Accuracy is summarised apart for the rows a constant was fitted on (FITTED) and the rest; the headline is the rest.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
import tempfile
from pathlib import Path

from flags import refuse_unknown
from memory_accuracy import TRAINER, cli_options
from run_record import stamp

from cheaptune.cli.estimate import request_from_options
from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory

ROWS = Path(__file__).with_name("data") / "vram_multi_gpu.csv"
UNIT = {"GB": 1e9, "GiB": 2**30, "MB": 1e6, "MiB": 2**20}
RESULTS = Path(__file__).with_name("results") / "multi_gpu_accuracy.json"
# framework -> options of its multi-GPU run beyond the single-GPU ones
FSDP_RUN = {
    # litgpt@8641822 (the resource tables' commit, Oct 2023) finetune/lora.py L83-89: FSDPStrategy(...,
    # activation_checkpointing_policy={Block}); its flat units and no_sync accumulation come from the litgpt profile
    # at version 0.1.0 (data/versions.yaml fsdp1_flat_units, profiles.yaml fsdp_no_sync)
    "litgpt": {"grad_ckpt": True},
}

# sharded_allocator_extra_fraction (estimate/data/sharding.yaml) was calibrated on these nvidia-smi rows
FITTED = {"P13", "P14", "P15", "P17"}


def request(row: dict) -> EstimateRequest:
    sharding = row["sharding"]
    with tempfile.TemporaryDirectory() as tmp:
        opts = {**cli_options(row, Path(tmp)), "gpus": int(row["num_gpus"]),
                "sharding": sharding.replace("-cpu-offload", ""), "offload": sharding.endswith("cpu-offload")}
        if sharding.startswith("fsdp"):
            opts.update(FSDP_RUN.get(row["framework"], {}))
        return request_from_options(**opts)[0]


def predict(row: dict) -> tuple[float, str]:
    est = estimate_memory(request(row))
    field = "device_total_bytes" if row["metric"] == "per_gpu_screenshot" else "peak_allocated_bytes"
    rng = est.details.get("range", {}).get(field)  # QLoRA: scored on its simulated (lower) end
    return (rng[0] if rng else getattr(est, field)) / UNIT[row["unit"]], field


def est_trainer(row: dict) -> str:
    return TRAINER.get(row["framework"], ("cheaptune", {}))[0].split("==")[0]


def summary(rows: list[dict]) -> dict:
    """Median |error| and the worst under- and over-prediction of predicted / measured - 1."""
    errs = [r["ratio_exact"] - 1 for r in rows]
    if not errs:
        return {"rows": 0}
    return {"rows": len(errs), "ids": [r["id"] for r in rows], "median_abs_error": statistics.median(map(abs, errs)),
            "worst_under": min(errs), "worst_over": max(errs)}


def main(argv: list[str]) -> int:
    if (code := refuse_unknown(argv, ('--json',), __doc__)) is not None:
        return code
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
