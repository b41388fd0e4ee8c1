"""GRPO step time: cheaptune's estimate (estimate/time/grpo_time.py) vs public GRPO step times, leave-one-source-out.

Usage: .venv/bin/python bench/grpo_accuracy.py [--json] [--write-data]
Rows: bench/data/grpo_public.csv, scope=bench, whose model is in the catalog and whose completion length is
stated (each row with its conditions, URL and source date); a lower-bound row ('>20 minutes') is checked as a
bound, not scored. The three fitted constants of data/grpo.yaml (decode bandwidth efficiency, fixed cost per
layer per decode token step, fixed cost per optimizer step) are fitted on a grid; the headline refits them
without each source in turn and predicts that source. Reported: typical (geometric mean of max(r, 1/r)), worst
and bias (geometric mean of r), r = predicted / measured seconds per step, held-out and in-sample.
--write-data writes the all-row fit into estimate/data/grpo.yaml (values and rows).

What the rows do not state is set as trl and Unsloth ran then (said per row in `assumed`): every row predates
trl 0.18's steps_per_generation, so each micro-step generated its own batch (steps_per_generation 1); trl's
beta then defaulted to 0.04 (a reference forward); no vLLM sampling correction (trl >= 0.22); a micro-batch
whose global batch (x training GPUs) is not a multiple of num_generations was raised to
num_generations (Unsloth's message; trl 0.14 counted prompts); prompts 256 tokens
where not stated; Unsloth's gradient checkpointing on. How long completions run is the task's: rows with a
logged mean completion length are estimated at it (as `--expected-completion-len` does; a call waits for its
longest completion, so this leans fast), the others at max_completion_length; the constants are fitted so. The
second headline is what a user who does not know the length gets: every completion at the cap (the product's
default), with how many rows it covers (at or above the measured time).
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
import sys
from pathlib import Path

import yaml
from flags import refuse_unknown
from run_record import stamp
from throughput_accuracy import lora_params

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.catalog.models import resolve_model
from cheaptune.errors import BadInput
from cheaptune.estimate import grpo_setup
from cheaptune.estimate.grpo_setup import GrpoSetup
from cheaptune.estimate.memory.memory import EstimateRequest
from cheaptune.estimate.time.grpo_time import grpo_step_time

ROWS = Path(__file__).with_name("data") / "grpo_public.csv"
RESULTS = Path(__file__).with_name("results") / "grpo_accuracy.json"
GRID = {"bandwidth_efficiency": (0.15, 0.25, 0.35, 0.5, 0.65, 0.8),
        "per_layer_token_s": (0.0, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3),
        "step_overhead_s": (0.0, 0.5, 1.0, 2.0, 5.0, 10.0)}
DEFAULT_PROMPT = 256
OLD_TRL_BETA = 0.04
BACKEND = {"vllm-dedicated": "vllm-server", "vllm-colocate": "vllm", "transformers": "transformers"}


def _int(text: str, pattern: str, default: int) -> int:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else default


def case(row: dict) -> tuple[GrpoSetup, dict, int, int, object, str, list[str]] | str:
    """(setup, config, params, trainable, board, stack, assumed) of a row, or why it cannot be read."""
    if not row["max_completion_len"]:
        return "completion length not stated"
    if row["backend"] not in BACKEND:
        return f"generation backend {row['backend']!r} not stated"
    try:
        spec = resolve_model(row["model"])
        gpu = resolve_gpu(row["gpu"])
    except BadInput as err:
        return str(err).split(";")[0]
    cond = row["conditions"]
    gens = int(row["num_generations"])
    batch = int(row["per_device_batch"] or 1)
    train_gpus = int(row["train_gpus"] or row["gpus"])
    micro = max(batch, gens) if (batch * train_gpus) % gens else batch
    prompt = _int(cond, r"prompt (?:<= )?(\d+)", DEFAULT_PROMPT)
    stack = "unsloth" if row["framework"] == "unsloth" else "cheaptune"
    backend = BACKEND[row["backend"]]
    sharding = next((s for z, s in (("ZeRO-3", "zero3"), ("ZeRO-2", "zero2")) if z in cond), None)
    ckpt = "checkpointing" in cond or stack == "unsloth"
    r = _int(cond, r"LoRA r(\d+)", 16)
    assumed = [f"steps_per_generation 1, beta {OLD_TRL_BETA}, no sampling correction (trl then)"]
    if micro != batch:
        assumed.append(f"micro-batch {batch} raised to {micro} completions")
    if not re.search(r"prompt (?:<= )?\d+", cond):
        assumed.append(f"prompt {DEFAULT_PROMPT} tokens")
    req = EstimateRequest(model=spec.id, method=row["method"], micro_batch=micro, grad_ckpt=ckpt, gpus=train_gpus,
                          sharding=sharding if train_gpus > 1 else None, lora_r=r)
    cap = int(row["max_completion_len"])
    mean = min(cap, round(float(row["mean_completion_len"]))) if row["mean_completion_len"] else None
    setup = GrpoSetup.build(req, prompt_len=prompt, max_completion_length=cap,
                            num_generations=gens, grad_accum=int(row["grad_accum"] or 1), beta=OLD_TRL_BETA,
                            generation_backend=backend, steps_per_generation=1, importance_sampling=False,
                            server_gpus=max(1, int(row["gpus"]) - train_gpus), expected_completion_length=mean)
    trainable = 0 if row["method"] == "full" else lora_params(spec.config, r)
    return setup, spec.config, spec.params, trainable, gpu, stack, assumed


def predict(c: tuple, consts: dict, at_cap: bool = False) -> tuple[float, dict]:
    """Seconds per step at the row's logged mean completion length (the cap where none is stated), or at the cap."""
    setup, cfg, params, trainable, gpu, stack, _ = c
    t = grpo_step_time(setup, cfg, params, trainable, gpu, stack, consts=consts, at_cap=at_cap)
    return t.step_seconds, t.parts


def _score(pairs: list[tuple[float, float]]) -> float:
    return sum(math.log(p / m) ** 2 for p, m in pairs)


def fit(cases: list[tuple[dict, tuple]], base: dict) -> dict:
    """The grid point with the least squared log error over `cases`."""
    best, best_err = None, math.inf
    for values in itertools.product(*GRID.values()):
        consts = {**base, **dict(zip(GRID, values, strict=True))}
        err = _score([(predict(c, consts)[0], float(row["step_s"])) for row, c in cases])
        if err < best_err:
            best, best_err = consts, err
    return {k: best[k] for k in GRID}


def stats(ratios: dict[str, float]) -> dict:
    if not ratios:
        return {"rows": 0}
    logs = [math.log(r) for r in ratios.values()]
    worst = max(ratios, key=lambda k: abs(math.log(ratios[k])))
    return {"rows": len(ratios), "typical": round(math.exp(sum(abs(x) for x in logs) / len(logs)), 3),
            "bias": round(math.exp(sum(logs) / len(logs)) - 1, 3),
            "worst": {"id": worst, "factor": round(max(ratios[worst], 1 / ratios[worst]), 3)}}


def evaluate(rows: list[dict]) -> dict:
    base = dict(grpo_setup.constants())
    cases, skipped, bounds = [], {}, []
    for row in rows:
        c = case(row)
        if isinstance(c, str):
            skipped[row["id"]] = c
        elif row["step_basis"].startswith("lower bound"):
            bounds.append((row, c))
        else:
            cases.append((row, c))
    sources = sorted({row["source"] for row, _ in cases})
    full = fit(cases, base)
    loso, held, held_cap = {}, {}, {}
    for src in sources:
        rest = [x for x in cases if x[0]["source"] != src]
        consts = fit(rest, base) if rest else full
        loso[src] = consts
        for row, c in cases:
            if row["source"] == src:
                held[row["id"]] = predict(c, {**base, **consts})[0]
                held_cap[row["id"]] = predict(c, {**base, **consts}, at_cap=True)[0]
    results = []
    for row, c in cases:
        pred, parts = predict(c, {**base, **full})
        gen = (parts["prefill"] + parts["decode"]) / pred
        results.append({"id": row["id"], "source": row["source"], "model": row["model"], "method": row["method"],
                        "gpu": row["gpu"], "gpus": int(row["gpus"]), "backend": row["backend"],
                        "measured": float(row["step_s"]), "mean_completion_len": row["mean_completion_len"] or None,
                        "loso": round(held[row["id"]], 2), "loso_at_cap": round(held_cap[row["id"]], 2),
                        "fitted": round(pred, 2), "generation_share": round(gen, 3),
                        "parts": {k: round(v, 3) for k, v in parts.items()}, "assumed": c[-1]})
    bound_rows = [{"id": row["id"], "measured_lower_bound": float(row["step_s"]),
                   "predicted": round(predict(c, {**base, **full})[0], 1),
                   "consistent": predict(c, {**base, **full})[0] >= float(row["step_s"])} for row, c in bounds]
    return {"fitted_constants": full, "loso_constants": loso, "results": results, "lower_bounds": bound_rows,
            "skipped": skipped,
            "summary": {"loso": stats({r["id"]: r["loso"] / r["measured"] for r in results}),
                        "fitted": stats({r["id"]: r["fitted"] / r["measured"] for r in results}),
                        "loso_at_cap": {**stats({r["id"]: r["loso_at_cap"] / r["measured"] for r in results}),
                                        "at_or_above_measured": sum(r["loso_at_cap"] >= r["measured"]
                                                                    for r in results)},
                        "per_source_loso": {s: stats({r["id"]: r["loso"] / r["measured"] for r in results
                                                      if r["source"] == s}) for s in sources}}}


def write_data(doc: dict) -> None:
    """The all-row fit into estimate/data/grpo.yaml (comments above each key kept: values edited in place)."""
    path = grpo_setup.DATA
    text = path.read_text()
    for key, value in doc["fitted_constants"].items():
        text = re.sub(rf"({key}: {{value: )[^,]+(, label: fitted)", rf"\g<1>{value:g}\g<2>", text)
    ids = ", ".join(r["id"] for r in doc["results"])
    text = re.sub(r'(  rows: )".*"', f'\\g<1>"{ids} ({", ".join(doc["summary"]["per_source_loso"])})"', text)
    yaml.safe_load(text)  # still valid
    path.write_text(text)


def main(argv: list[str]) -> int:
    if (code := refuse_unknown(argv, ('--json', '--write-data'), __doc__)) is not None:
        return code
    rows = [r for r in csv.DictReader(ROWS.open()) if r.get("scope") == "bench"]
    ev = evaluate(rows)
    doc = {"benchmark": "grpo_accuracy", "rows": len(ev["results"]),
           "sources": len({r["source"] for r in ev["results"]}), **ev}
    if "--json" in argv:
        print(json.dumps(doc, indent=1))
        return 0
    RESULTS.write_text(json.dumps(stamp(doc), indent=1) + "\n")
    if "--write-data" in argv:
        write_data(doc)
    print(f"{'id':5} {'source':18} {'gpu':9} {'measured':>8} {'loso':>7} {'at cap':>7} {'fit':>7} {'gen%':>5}")
    for r in ev["results"]:
        print(f"{r['id']:5} {r['source'][:18]:18} {r['gpu']:9} {r['measured']:>8.1f} {r['loso']:>7.1f} "
              f"{r['loso_at_cap']:>7.1f} {r['fitted']:>7.1f} {r['generation_share']:>5.0%}")
    s = ev["summary"]
    print(f"{doc['rows']} rows, {doc['sources']} sources; held-out typical x{s['loso']['typical']} "
          f"bias {s['loso']['bias']:+.0%} worst {s['loso']['worst']}; in-sample typical x{s['fitted']['typical']}")
    cap = s["loso_at_cap"]
    print(f"held out with every completion at the cap (the default when the length is not known): typical "
          f"x{cap['typical']} bias {cap['bias']:+.0%} worst {cap['worst']}; at or above the measured time on "
          f"{cap['at_or_above_measured']} of {doc['rows']} rows")
    print(f"fitted: {ev['fitted_constants']}; skipped: {ev['skipped']}; lower bounds: {ev['lower_bounds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
