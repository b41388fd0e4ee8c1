"""Whole jobs: predicted hours (training + start-up) vs the wall time public runs report, leave-one-source-out.

Usage: .venv/bin/python bench/job_accuracy.py [--json]
Rows: bench/data/jobs_public.csv (each with its settings, wall time and what that wall time covers, URL and
source date; scope=note rows are skipped). For each job source, the step-time constants of its stack are fitted
on the throughput rows (bench/data/throughput_public.csv) of every *other* source, as throughput_accuracy.py
does, so no job is predicted by constants fitted on its own source. Predicted wall time = train tokens /
tokens/s + loading the weights and tokenising (estimate/data/startup.yaml; a public run's wall time starts in
its script, so no provisioning or install). A job whose token count is not stated is trained at steps x sequences x length when packed, else skipped
(said per row). Unpacked rows train at their mean length (train tokens / examples
per epoch): dynamic padding pads each batch to its longest row, so the prediction errs fast there. Speed options
a job ran (Liger) add no factor: none was measured for these jobs (estimate/data/speedups.yaml). The p10-p90 of
each job is estimate.intervals' band for its board class, method and GPU count, and the share of jobs whose wall
time falls inside is printed.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import sys
from pathlib import Path

import throughput_accuracy as ta
from run_record import stamp

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.errors import BadInput
from cheaptune.estimate.cost.cost import constants
from cheaptune.estimate.time import intervals
from cheaptune.estimate.time import throughput as tp
from cheaptune.estimate.time.scaling import Layout

JOBS = Path(__file__).with_name("data") / "jobs_public.csv"
RESULTS = Path(__file__).with_name("results") / "job_accuracy.json"
BF16_BYTES = 2


def trainable(cfg: dict, row: dict) -> int:
    """Adapter parameters of the row's targets (unknown target names count nothing), plus whole extra modules."""
    if row["method"] == "full":
        return 0
    r = int(row["lora_r"] or 0)
    known = [t for t in (row["lora_targets"] or "").split(",") if t.strip() and (
        t.strip() in ("mlp", "all-linear") or t.strip().removesuffix("_proj") + "_proj" in ta.LINEAR)]
    n = ta.lora_params(cfg, r, ",".join(known)) if known or not row["lora_targets"] else 0
    extra = [m for m in (row.get("trainable_extra") or "").split(",") if m.strip()]
    return n + len(extra) * int(cfg.get("vocab_size", 0)) * int(cfg["hidden_size"])


def train_tokens(row: dict) -> float:
    """Tokens trained: as stated, else steps x sequences per step x length for packed rows (every row full)."""
    if row["train_tokens"]:
        return float(row["train_tokens"])
    if row["packing"] == "yes" and row["steps"]:
        gpus = int(row["gpus_per_node"]) * int(row["nodes"])
        return float(row["steps"]) * int(row["micro_batch"]) * int(row["grad_accum"] or 1) * gpus * int(row["seq_len"])
    raise ValueError("token count not stated and not derivable (unpacked, or no step count)")


def job_of(row: dict, stack: str, network: str = "ethernet") -> tuple[tp.Job, object, Layout, object]:
    spec = ta._spec(row["model"])
    shape = tp.ModelShape.from_config(spec.config, spec.params)
    seq = int(row["seq_len"])
    if row["packing"] != "yes" and row["train_examples"]:
        epochs = float(row["epochs"] or 1)
        seq = max(1, min(seq, round(train_tokens(row) / (float(row["train_examples"]) * epochs))))
    job = tp.Job(shape, row["method"], seq, int(row["micro_batch"]), row["grad_ckpt"] == "yes",
                 trainable(spec.config, row), int(row["grad_accum"] or 1), attn=row["attn"] or "sdpa", stack=stack)
    gpus, nodes = int(row["gpus_per_node"]), int(row["nodes"])
    layout = Layout(gpus, nodes, row["sharding"] or None, row["offload"] == "yes", row.get("network") or network)
    return job, resolve_gpu(row["gpu"]), layout, shape


def predict(row: dict, table: dict, consts: dict, network: str) -> dict:
    job, gpu, layout, shape = job_of(row, "fit", network)
    st = tp.step_time(job, gpu, layout, table)
    train_s = train_tokens(row) / st.tokens_per_s
    start = {"load": shape.params * BF16_BYTES / consts["disk_read_bytes_per_s"],
             "tokenize": train_tokens(row) / consts["dataset_tokenize_tokens_per_s"]}
    return {"train_s": train_s, "startup_s": start, "wall_s": train_s + sum(start.values()),
            "board_class": intervals.board_class(gpu), "gpus": layout.gpus}


def evaluate(jobs: list[dict], through: list[dict], grid: dict = ta.GRID) -> tuple[list[dict], list[dict]]:
    """(results, skipped): each job predicted with constants fitted on the other sources' throughput rows."""
    base, consts = tp.load_table(), constants()
    fits: dict[tuple[str, str], dict] = {}
    out, skipped = [], []
    for row in jobs:
        stack = ta.FIT_AS.get(row["stack"], row["stack"])
        key = (row["source"], stack)
        try:
            if key not in fits:
                others = [r for r in through if r["source"] != row["source"]]
                mine = [r for r in others if ta.stack_of(r) == stack]
                pooled = ta.fit(others, base, grid)
                fits[key] = ta.fit_stack(mine, base, grid, pooled) if mine else pooled
            # a job row without a network takes the one its source's own throughput rows state
            nets = {r["network"] for r in through if r["source"] == row["source"] and r["network"]}
            p = predict(row, ta.with_constants(base, "fit", fits[key]), consts, nets.pop() if len(nets) == 1 else "ethernet")
        except (BadInput, KeyError, ValueError) as err:
            skipped.append({"id": row["id"], "why": f"{type(err).__name__}: {err}"[:160]})
            continue
        lo, mid, hi, why = intervals.time_band(resolve_gpu(row["gpu"]), row["method"], p["gpus"], stack=stack)
        measured = float(row["wall_s"])
        out.append({"id": row["id"], "source": row["source"], "stack": row["stack"], "model": row["model"],
                    "method": row["method"], "gpu": row["gpu"], "gpus": p["gpus"], "measured": measured,
                    "loso": round(p["wall_s"], 1), "train_s": round(p["train_s"], 1),
                    "startup_s": {k: round(v, 1) for k, v in p["startup_s"].items()},
                    "inside_p10_p90": p["train_s"] * lo + sum(p["startup_s"].values()) <= measured
                    <= p["train_s"] * hi + sum(p["startup_s"].values()), "interval_basis": why,
                    "wall_basis": row["wall_basis"], "url": row["url"], "source_date": row["source_date"] or "undated",
                    "constants": fits[key]})
    return out, skipped


def main(argv: list[str]) -> int:
    jobs = [r for r in csv.DictReader(JOBS.open()) if r.get("scope", "bench") != "note"]
    through = [r for r in csv.DictReader(ta.ROWS.open()) if r.get("scope", "bench") != "note"]
    results, skipped = evaluate(jobs, through)
    # hours: the ratio is of predicted / measured wall time, so r > 1 reads slow, r < 1 fast
    s = ta.summary([{**r, "fitted": r["loso"], "baseline": r["loso"]} for r in results])
    s = {k: ({g: {"loso": v["loso"]} for g, v in s[k].items()} if k != "all" else {"loso": s[k]["loso"]}) for k in s}
    cov = {"rows": len(results), "inside_p10_p90": round(sum(r["inside_p10_p90"] for r in results) / len(results), 3)}
    doc = {"benchmark": "job_accuracy", "date": dt.date.today().isoformat(), "rows": len(results),
           "sources": len({r["source"] for r in results}), "boards": len({r["gpu"] for r in results}),
           "ratio": "predicted / reported wall time", "targets": ta.TARGETS, "summary": s, "coverage": cov,
           "skipped": skipped, "results": results}
    lines = ta.check({**s, "per_board": {b: {"loso": v["loso"]} for b, v in s["per_board"].items()}}, cov)
    doc["checks"] = lines
    if "--json" in argv:
        print(json.dumps(doc, indent=1))
        return 0
    RESULTS.write_text(json.dumps(stamp(doc), indent=1) + "\n")
    print(f"{'id':6} {'stack':9} {'model':18} {'meth':5} {'gpu':10} {'N':>3} {'wall h':>7} {'pred h':>7} {'ratio':>6} in")
    for r in results:
        print(f"{r['id']:6} {r['stack'][:9]:9} {r['model'][-18:]:18} {r['method']:5} {r['gpu']:10} {r['gpus']:>3} "
              f"{r['measured'] / 3600:>7.2f} {r['loso'] / 3600:>7.2f} {r['loso'] / r['measured']:>6.2f} "
              f"{'y' if r['inside_p10_p90'] else 'n'}")
    for group in ("per_board", "per_method", "per_gpus", "per_stack"):
        print(group)
        for k, v in s[group].items():
            print(f"  {k:12} jobs {v['loso']['rows']:3}  x{v['loso']['typical']:.3f} bias {v['loso']['bias']:+.1%} "
                  f"worst {v['loso']['worst']['id']} x{v['loso']['worst']['factor']:.2f}")
    print(f"{len(results)} jobs, {doc['sources']} sources, {doc['boards']} boards; skipped {len(skipped)}: "
          + "; ".join(f"{x['id']} ({x['why'][:60]})" for x in skipped))
    for line in lines:
        print(line)
    return 0 if math.isfinite(cov["inside_p10_p90"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
