"""Training throughput: cheaptune's step-time model vs public measured runs, and a crude baseline.

Usage: .venv/bin/python bench/throughput_accuracy.py [--fit] [--json]
Rows: bench/data/throughput_public.csv (each with its conditions, URL and date). Sources marked fit=yes
are the only ones the fitted constants in estimate/data/steptime.yaml were chosen on (`--fit` redoes that
grid search); the headline is on the others. Baseline: 6N (full) or 4N (adapters) FLOPs per token at a
fixed 40% of the datasheet peak. Rows run with torch.compile are compared after dividing by the compile
speed-up torchtune measured on the same job (rows TT7/TT6), since cheaptune trains uncompiled.
Error = |ln(predicted / measured)|; x1.2 is 0.18.
"""

from __future__ import annotations

import csv
import datetime as dt
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

from run_record import stamp

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.catalog.models import resolve_model
from cheaptune.estimate import throughput as tp
from cheaptune.estimate.scaling import Layout

ROWS = Path(__file__).with_name("data") / "throughput_public.csv"
RESULTS = Path(__file__).with_name("results") / "throughput_accuracy.json"
COMPILE_SPEEDUP = 8998 / 7075  # torchtune ladder: '+ compile' over '+ packing', same job
BASELINE_MFU = 0.40
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_params(cfg: dict, r: int) -> int:
    """LoRA parameters on every linear layer of a Llama-style block: r x (in + out) each."""
    h, inter, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    kv = h // cfg["num_attention_heads"] * cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    dims = {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}
    return layers * sum(r * (i + o) for i, o in (dims[n] for n in LINEAR))


def job_of(row: dict) -> tuple[tp.Job, object, Layout, tp.ModelShape]:
    spec = resolve_model(row["model"])
    shape = tp.ModelShape.from_config(spec.config, spec.params)
    trainable = lora_params(spec.config, int(row["lora_r"])) if row["method"] != "full" else 0
    job = tp.Job(shape, row["method"], int(row["seq_len"]), int(row["micro_batch"]), row["grad_ckpt"] == "yes",
                 trainable, attn=row["attn"])
    gpus, nodes = int(row["gpus_per_node"]), int(row["nodes"])
    layout = Layout(gpus, nodes, row["sharding"] or None, row["offload"] == "yes", row["network"] or "ethernet")
    return job, resolve_gpu(row["gpu"]), layout, shape


def measured(row: dict) -> float:
    """Total tokens/s over all GPUs, uncompiled."""
    v = float(row["tokens_per_s"]) * (int(row["gpus_per_node"]) * int(row["nodes"]) if row["per_gpu"] == "yes" else 1)
    return v / COMPILE_SPEEDUP if row["compiled"] == "yes" else v


def baseline(row: dict, gpu, layout: Layout, shape: tp.ModelShape) -> float:
    k = 6 if row["method"] == "full" else 4
    return BASELINE_MFU * tp.peak_flops(gpu)[0] * layout.gpus / (k * shape.params)


def evaluate(rows: list[dict], table: dict | None = None) -> list[dict]:
    out = []
    for row in rows:
        job, gpu, layout, shape = job_of(row)
        st = tp.step_time(job, gpu, layout, table)
        m = measured(row)
        out.append({"id": row["id"], "source": row["source"], "fit": row["fit"] == "yes", "model": row["model"],
                    "method": row["method"], "gpu": row["gpu"], "gpus": layout.gpus,
                    "sharding": layout.sharding, "offload": layout.offload, "seq_len": job.seq_len,
                    "micro_batch": job.micro_batch, "grad_ckpt": job.grad_ckpt, "compiled": row["compiled"] == "yes",
                    "measured": round(m, 1), "predicted": round(st.tokens_per_s, 1),
                    "baseline": round(baseline(row, gpu, layout, shape), 1),
                    "parts": {k: round(v, 4) for k, v in st.parts.items()}, "conditions": row["conditions"],
                    "url": row["url"], "retrieved": row["retrieved"]})
    return out


def err(r: dict, key: str) -> float:
    return abs(math.log(r[key] / r["measured"]))


def summary(results: list[dict]) -> dict:
    out = {}
    for fit, multi in itertools.product((True, False), (False, True)):
        sub = [r for r in results if r["fit"] == fit and (r["gpus"] > 1) == multi]
        if not sub:
            continue
        name = f"{'fitted' if fit else 'not_fitted'}_{'multi' if multi else 'single'}_gpu"
        out[name] = {"rows": len(sub)}
        for key in ("predicted", "baseline"):
            worst = max(sub, key=lambda r, k=key: err(r, k))
            out[name][key] = {"median_abs_log": round(statistics.median(err(r, key) for r in sub), 3),
                              "typical_factor": round(math.exp(statistics.median(err(r, key) for r in sub)), 2),
                              "geo_mean_ratio": round(math.exp(statistics.fmean(math.log(r[key] / r["measured"])
                                                                                for r in sub)), 2),
                              "worst": {"id": worst["id"], "factor": round(math.exp(err(worst, key)), 2)}}
    return out


def fit(rows: list[dict]) -> dict:
    """Grid search of the fitted constants on the fit=yes rows: least median |ln ratio|."""
    rows = [r for r in rows if r["fit"] == "yes"]
    base = tp.load_table()
    best = None
    for e_max, t_half, h_half, f_full, f_ad in itertools.product(
            (0.6, 0.66, 0.7, 0.74, 0.78, 0.82), (100, 200, 400, 800), (300, 600, 1200),
            (0.0002, 0.0004, 0.0008), (0.0005, 0.001, 0.002, 0.003)):
        t = {**base, "efficiency": {"e_max": e_max, "tokens_half": t_half, "hidden_half": h_half},
             "fixed_per_layer_s": {"full": f_full, "adapter": f_ad}}
        res = evaluate(rows, t)
        score = statistics.median(err(r, "predicted") for r in res) + 0.2 * max(err(r, "predicted") for r in res)
        if best is None or score < best[0]:
            best = (score, e_max, t_half, h_half, f_full, f_ad)
    return dict(zip(("score", "e_max", "tokens_half", "hidden_half", "fixed_full", "fixed_adapter"), best, strict=True))


def main(argv: list[str]) -> int:
    rows = list(csv.DictReader(ROWS.open()))
    if "--fit" in argv:
        print(json.dumps(fit(rows), indent=1))
        return 0
    results = evaluate(rows)
    doc = {"benchmark": "throughput_accuracy", "date": dt.date.today().isoformat(), "rows": len(results),
           "compile_speedup": round(COMPILE_SPEEDUP, 3), "baseline_mfu": BASELINE_MFU,
           "summary": summary(results), "results": results}
    if "--json" in argv:
        print(json.dumps(doc, indent=1))
        return 0
    RESULTS.write_text(json.dumps(stamp(doc), indent=1) + "\n")
    print(f"{'id':5} {'fit':3} {'model':14} {'meth':5} {'gpu':9} {'N':>3} {'measured':>9} {'pred':>8} {'ratio':>6} {'base':>6}")
    for r in results:
        print(f"{r['id']:5} {'y' if r['fit'] else 'n':3} {r['model'][-14:]:14} {r['method']:5} {r['gpu']:9} {r['gpus']:>3} "
              f"{r['measured']:>9.0f} {r['predicted']:>8.0f} {r['predicted'] / r['measured']:>6.2f} "
              f"{r['baseline'] / r['measured']:>6.2f}")
    print(json.dumps(doc["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
