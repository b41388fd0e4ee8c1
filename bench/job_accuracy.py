"""Whole jobs: predicted hours vs the wall time public runs report, leave-one-source-out.

Usage: .venv/bin/python bench/job_accuracy.py [--json] [--write-data] [--quick]
Rows: bench/data/jobs_public.csv (each with its settings, wall time, what that wall time covers, URL and source
date; scope=note rows are skipped). For each job source, the step-time constants of its stack are fitted on the
throughput rows (bench/data/throughput_public.csv) of every *other* source, as throughput_accuracy.py does, so
no job is predicted by constants fitted on its own source.
Tokens the GPU runs follow from what a row states: its counted tokens; else packed rows fill every sequence
(steps x micro-batch x GA x GPUs x length, or examples x epochs x the dataset's mean length); unpacked rows run
sequences (steps x micro-batch x GA x GPUs, or examples x epochs) padded to max_length, or to the longest row of
each micro-batch (the expected longest of `micro_batch` draws from the dataset's length distribution, capped at
max_length). Dataset lengths are bench/data/dataset_lengths.csv (sourced, dated).
Predicted wall time = the terms the row's `wall_includes` names: train (the optimizer steps), eval (in-loop
validation: forward passes over `eval_examples` sequences every `eval_every` optimizer steps), load (the
weights from disk), tokenize (estimate/data/startup.yaml) and save (the checkpoints written every `save_every`
optimizer steps inside the timed loop: each the checkpoint the plan prices, estimate.cost.artifact_sizes of the row's
`precision`, weights plus AdamW state, over startup.yaml's disk_write_bytes_per_s, one writer), so each row compares
like with like.
Speed options a job ran (Liger) add no factor: none was measured for these jobs (estimate/data/speedups.yaml).
The p10-p90 of each job is estimate.intervals' band for its board class, method and GPU count, applied to the
training term, and the share of jobs whose wall time falls inside is printed.
How much of FSDP/ZeRO-3's transfers compute hides on a serial link (scaling.serial_link; interconnect.yaml
serial_link_overlap) is fitted inside each fold too: the OVERLAP_GRID value with the least median over sources of
each source's median |ln(predicted / reported)| on the other sources' serial-link sharded jobs, or, where no other
source has one, the neutral steptime.yaml overlap.sharded (a serial link timed as any other). --write-data writes
the all-rows fit (the same rule on every source, with the step-time constants fitted on every throughput row) into
interconnect.yaml, naming its rows.
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import throughput_accuracy as ta
from flags import refuse_unknown
from run_record import stamp

from cheaptune.catalog.gpus import resolve_gpu
from cheaptune.errors import BadInput
from cheaptune.estimate.cost.cost import artifact_sizes, constants
from cheaptune.estimate.time import intervals
from cheaptune.estimate.time import throughput as tp
from cheaptune.estimate.time.scaling import GATHERING, INTERCONNECT, Layout, serial_link

JOBS = Path(__file__).with_name("data") / "jobs_public.csv"
LENGTHS = Path(__file__).with_name("data") / "dataset_lengths.csv"
WALL_TERMS = ("train", "eval", "load", "tokenize", "save")
# xformers' memory-efficient attention is the kernel behind SDPA's memory-efficient backend (PyTorch docs,
# torch.nn.functional.scaled_dot_product_attention), so a row that ran it is modelled as sdpa
ATTN_AS = {"xformers": "sdpa"}
RESULTS = Path(__file__).with_name("results") / "job_accuracy.json"
OVERLAP_GRID = (0.0, 0.25, 0.5, 0.75, 1.0)  # share of a serial link's sharded transfers compute hides
BF16_BYTES = 2


def ffn_config(cfg: dict) -> dict:
    """`cfg` with the MLP width and KV heads under Llama's names: Falcon calls it ffn_hidden_size (4 x hidden when
    unset, transformers FalconConfig) and shares one KV head when multi_query; GPT-2 n_inner; OPT ffn_dim."""
    inter = cfg.get("intermediate_size") or cfg.get("ffn_hidden_size") or cfg.get("n_inner") or cfg.get("ffn_dim")
    if not inter and cfg.get("model_type") in ("falcon", "gpt2"):
        inter = 4 * int(cfg["hidden_size"])
    if not inter:
        raise ValueError(f"model config ({cfg.get('model_type')}) states no MLP width (intermediate_size, "
                         "ffn_hidden_size, n_inner or ffn_dim); add it to the catalog entry")
    kv = cfg.get("num_key_value_heads") or (1 if cfg.get("multi_query") and not cfg.get("new_decoder_architecture")
                                            else cfg["num_attention_heads"])
    return {**cfg, "intermediate_size": int(inter), "num_key_value_heads": int(kv)}


STATED_TRAINABLE = re.compile(r"([\d.,]+)\s*(M?)\s+trainable parameters")
MODULE_NAME = re.compile(r"^[A-Za-z_][\w.]*$")


def trainable(cfg: dict, row: dict) -> int:
    """Adapter parameters of the row's targets (unknown target names count nothing); a `trainable_extra` that states
    its count ('200 virtual tokens (614,400 trainable parameters)', prompt and prefix tuning) is that count. Whole
    modules it names (embed_tokens,lm_head) are counted by saved_modules, not as adapter weights."""
    if row["method"] == "full":
        return 0
    stated = STATED_TRAINABLE.search(row.get("trainable_extra") or "")
    if stated:
        return int(float(stated[1].replace(",", "")) * (1e6 if stated[2] else 1))
    cfg = ffn_config(cfg)
    r = int(row["lora_r"] or 0)
    known = [t for t in (row["lora_targets"] or "").split(",") if t.strip() and (
        t.strip() in ("mlp", "all-linear") or t.strip().removesuffix("_proj") + "_proj" in ta.LINEAR)]
    return ta.lora_params(cfg, r, ",".join(known)) if known or not row["lora_targets"] else 0


def saved_modules(cfg: dict, row: dict) -> tuple[int, int]:
    """(weights, linear weights) of the whole modules a row trains in place (`trainable_extra` names them, peft
    modules_to_save: embed_tokens, lm_head), as `estimate --train-modules` counts them (throughput.trained_module_params)."""
    if row["method"] == "full" or STATED_TRAINABLE.search(row.get("trainable_extra") or ""):
        return 0, 0
    names = [m.strip() for m in (row.get("trainable_extra") or "").split(",") if MODULE_NAME.match(m.strip())]
    return tp.trained_module_params(cfg, ",".join(names))


def load_lengths(path: Path = LENGTHS) -> dict[str, dict]:
    """{dataset: row} with its length percentiles as numbers."""
    out = {}
    for r in csv.DictReader(path.open()):
        out[r["dataset"]] = {**r, "p": [float(x) / 100 for x in r["percentiles"].split()],
                             "x": [float(x) for x in r["lengths"].split()]}
    return out


def padded_length(dist: dict, micro_batch: int, cap: int, steps: int = 2000) -> float:
    """Mean tokens per sequence when each micro-batch is padded to its longest row, rows truncated at `cap`:
    E[max of `micro_batch` draws] = integral of Q(u) d(u^b), Q the length quantile function (piecewise linear)."""
    total = 0.0
    for i in range(steps):
        lo, hi = i / steps, (i + 1) / steps
        q = min(float(cap), _quantile(dist, (lo + hi) / 2))
        total += q * (hi ** micro_batch - lo ** micro_batch)
    return total


def _quantile(dist: dict, u: float) -> float:
    p, x = dist["p"], dist["x"]
    for j in range(1, len(p)):
        if u <= p[j]:
            return x[j - 1] + (x[j] - x[j - 1]) * (u - p[j - 1]) / (p[j] - p[j - 1])
    return x[-1]


@dataclass(frozen=True)
class Workload:
    """What the GPUs run: tokens (padding included), the length of one sequence, and sequences per epoch x epochs."""

    tokens: float
    seq_len: int
    sequences: float
    basis: str


VIRTUAL = re.compile(r"(\d+) virtual tokens")


def workload(row: dict, lengths: dict[str, dict] | None = None) -> Workload:
    """The row's tokens as the GPUs run them: prompt tuning prepends its virtual tokens to every sequence (peft
    0.21.2 peft_model.py L1964, PeftModelForCausalLM.forward: torch.cat((prompts, inputs_embeds), dim=1)), which
    a row's counted tokens leave out."""
    w = _stated_workload(row, lengths)
    virtual = VIRTUAL.search(row.get("trainable_extra") or "") if row.get("method") == "prompt_tuning" else None
    if not virtual:
        return w
    n = int(virtual[1])
    return Workload(w.tokens + w.sequences * n, w.seq_len + n, w.sequences, f"{w.basis}, + {n} virtual tokens a sequence")


def _stated_workload(row: dict, lengths: dict[str, dict] | None = None) -> Workload:
    """The row's tokens, from what it states (see the module docstring); ValueError says what is missing."""
    lengths = load_lengths() if lengths is None else lengths
    gpus = int(row["gpus_per_node"]) * int(row["nodes"])
    mb, ga, seq = int(row["micro_batch"]), int(row["grad_accum"] or 1), int(row["seq_len"])
    dist = lengths.get(row.get("dataset") or "")
    if row.get("dataset") and dist is None:
        raise ValueError(f"dataset {row['dataset']!r} is not in {LENGTHS.name}; add its length statistics there")
    examples = float(row["train_examples"] or (dist or {}).get("train_examples") or 0)
    epochs = float(row["epochs"] or 1)
    by_steps = float(row["steps"]) * mb * ga * gpus if row["steps"] else None
    if row["packing"] == "yes":
        if row["train_tokens"]:
            t = float(row["train_tokens"])
            return Workload(t, seq, t / seq, "stated")
        if by_steps:
            return Workload(by_steps * seq, seq, by_steps, "packed: steps x batch x GA x GPUs x length")
        if dist and examples:
            t = examples * epochs * float(dist["mean_tokens"])
            return Workload(t, seq, t / seq, f"packed: examples x epochs x {row['dataset']} mean length")
        raise ValueError("token count not stated and not derivable (packed, but no steps and no dataset lengths)")
    n = by_steps or (examples * epochs if examples else None)
    if row["train_tokens"]:
        t = float(row["train_tokens"])
        per = max(1, min(seq, round(t / (float(row["train_examples"]) * epochs)))) if row["train_examples"] else seq
        return Workload(t, per, t / per, "stated")
    if n and row.get("padding") == "max_length":
        return Workload(n * seq, seq, n, "padded to max_length")
    if n and dist:
        per = padded_length(dist, mb, seq)
        return Workload(n * per, max(1, round(per)), n, f"padded to the longest of {mb} {row['dataset']} rows")
    raise ValueError("token count not stated and not derivable (unpacked: no dataset lengths or no step count)")


def job_of(row: dict, stack: str, network: str = "ethernet", work: Workload | None = None
           ) -> tuple[tp.Job, object, Layout, object]:
    spec = ta._spec(row["model"])
    shape = tp.ModelShape.from_config(spec.config, spec.params)
    work = work or workload(row)
    attn = ATTN_AS.get(row["attn"], row["attn"]) or "sdpa"
    saved, saved_matmul = saved_modules(spec.config, row)
    stacks = ta.row_stack(row)
    job = tp.Job(shape, row["method"], work.seq_len, int(row["micro_batch"]), row["grad_ckpt"] == "yes",
                 trainable(spec.config, row), int(row["grad_accum"] or 1), attn=attn, stack=stack,
                 adapted_modules=tp.adapted_per_layer(row.get("lora_targets")),
                 saved_params=saved, saved_matmul_params=saved_matmul,
                 clip_grads=tp.clips_gradients(stacks.fit), **ta.quant_layout(stacks.trainer))
    gpus, nodes = int(row["gpus_per_node"]), int(row["nodes"])
    layout = Layout(gpus, nodes, row["sharding"] or None, row["offload"] == "yes", row.get("network") or network)
    return job, resolve_gpu(row["gpu"]), layout, shape


def wall_terms(row: dict) -> set[str]:
    """The terms the row's wall time covers (`wall_includes`): declared per row, never assumed."""
    terms = {t.strip() for t in (row.get("wall_includes") or "").split(",") if t.strip()}
    if not terms <= set(WALL_TERMS) or "train" not in terms:
        raise ValueError(f"wall_includes {row.get('wall_includes')!r}: name train and any of {', '.join(WALL_TERMS[1:])}")
    if "save" in terms and not (row.get("save_every") or "").strip():
        raise ValueError("wall_includes names save but save_every (optimizer steps between checkpoints) is empty")
    return terms


def predict(row: dict, table: dict, consts: dict, network: str) -> dict:
    work = workload(row)
    job, gpu, layout, shape = job_of(row, "fit", network, work)
    terms = wall_terms(row)
    st = tp.step_time(job, gpu, layout, table)
    train_s = work.tokens / st.tokens_per_s
    extra = {}
    if "eval" in terms:  # forward passes only: the forward's share of a training token's FLOPs
        f = tp.flops_per_token(shape, job.method, job.seq_len, job.grad_ckpt, job.trainable_params,
                               saved_matmul_params=job.saved_matmul_params)
        evals = work.sequences // (job.micro_batch * job.grad_accum * layout.gpus) // int(row["eval_every"])
        extra["eval"] = evals * float(row["eval_examples"]) * job.seq_len / st.tokens_per_s * f.forward / f.total
    if "load" in terms:
        extra["load"] = shape.params * BF16_BYTES / consts["disk_read_bytes_per_s"]
    if "tokenize" in terms:
        extra["tokenize"] = work.tokens / consts["dataset_tokenize_tokens_per_s"]
    if "save" in terms:
        extra["save"] = save_seconds(row, work, job, layout, consts)
    return {"train_s": train_s, "other_s": extra, "wall_s": train_s + sum(extra.values()),
            "board_class": intervals.board_class(gpu), "gpus": layout.gpus, "tokens": work.tokens,
            "tokens_basis": work.basis, "serial_link": serial_link(layout, gpu)}


def save_seconds(row: dict, work: Workload, job: tp.Job, layout: Layout, consts: dict) -> float:
    """The checkpoints saved inside the timed loop (one every `save_every` optimizer steps), each the plan's
    checkpoint (weights + AdamW state in the row's `precision`, the method's default when blank) written by one
    process at the start-up file's disk rate, as FULL_STATE_DICT gathers to rank 0 and as one GPU writes."""
    steps = int(work.sequences // (job.micro_batch * job.grad_accum * layout.gpus))
    trained = job.shape.params if job.method == "full" else job.trainable_params + job.saved_params
    ckpt = artifact_sizes(job.method, job.shape.params, trained, (row.get("precision") or "").strip() or None)
    return steps // int(row["save_every"]) * ckpt.checkpoint_bytes / consts["disk_write_bytes_per_s"]


def network_of(row: dict, through: list[dict]) -> str:
    """A job row without a network takes the one its source's own throughput rows state, else ethernet."""
    nets = {r["network"] for r in through if r["source"] == row["source"] and r["network"]}
    return nets.pop() if len(nets) == 1 else "ethernet"


def constants_of(row: dict, tables: dict, base: dict, overlap: float) -> dict:
    """The constants that time `row`: its stack's step-time fit in `tables` and the serial-link overlap."""
    return {**tables.get(ta.row_stack(row, base).timed, tables["pooled"]), "serial_link_overlap": overlap}


def predict_with(row: dict, c: dict, base: dict, consts: dict, through: list[dict]) -> dict:
    table = {**ta.with_constants(base, "fit", c), "serial_link_overlap": {"value": c["serial_link_overlap"]}}
    return predict(row, table, consts, network_of(row, through))


def overlap_rows(jobs: list[dict], through: list[dict]) -> list[dict]:
    """The jobs the serial-link overlap times: sharded (FSDP/ZeRO-3) on a serial link."""
    out = []
    for row in jobs:
        try:
            _, gpu, layout, _ = job_of(row, "fit", network_of(row, through), workload(row))
            wall_terms(row)
        except (BadInput, KeyError, ValueError):
            continue
        if layout.sharding in GATHERING and serial_link(layout, gpu):
            out.append(row)
    return out


def fit_overlap(rows: list[dict], tables: dict, base: dict, consts: dict, through: list[dict],
                grid: tuple[float, ...] = OVERLAP_GRID) -> dict:
    """{value, rows, score, scores (per grid value)}: the grid value with the least median over sources of each source's median
    |ln(predicted / reported wall)| on `rows` (of equal scores, the one nearest the neutral overlap.sharded);
    value None where there are no rows."""
    if not rows:
        return {"value": None, "rows": [], "score": None}
    neutral, best, scores = float(base["overlap"]["sharded"]["value"]), None, {}
    for v in sorted(grid, key=lambda v: abs(v - neutral)):
        errs: dict[str, list[float]] = {}
        for row in rows:
            p = predict_with(row, constants_of(row, tables, base, v), base, consts, through)
            errs.setdefault(row["source"], []).append(abs(math.log(p["wall_s"] / float(row["wall_s"]))))
        score = scores[v] = statistics.median(statistics.median(e) for e in errs.values())
        if best is None or score < best[0] - 1e-12:
            best = (score, v)
    return {"value": best[1], "rows": [r["id"] for r in rows], "score": round(best[0], 4),
            "scores": {str(v): round(scores[v], 4) for v in sorted(scores)}}


def evaluate(jobs: list[dict], through: list[dict], grid: dict = ta.GRID) -> tuple[list[dict], list[dict], dict]:
    """(results, skipped, overlap folds): each job predicted with step-time constants fitted on the other
    sources' throughput rows and a serial-link overlap fitted on the other sources' serial-link jobs."""
    base, consts = tp.load_table(), constants()
    serial = overlap_rows(jobs, through)
    folds: dict[str, dict] = {}
    out, skipped = [], []
    for source in dict.fromkeys(r["source"] for r in jobs):
        tables = ta.fitted_tables([r for r in through if r["source"] != source], base, grid)
        fold = fit_overlap([r for r in serial if r["source"] != source], tables, base, consts, through)
        if fold["value"] is None:
            fold = {**fold, "value": float(base["overlap"]["sharded"]["value"]), "note": "no other source has a serial-link sharded job: the neutral "
                                                      "steptime.yaml overlap.sharded"}
        folds[source] = fold
        for row in (r for r in jobs if r["source"] == source):
            c = constants_of(row, tables, base, fold["value"])
            try:
                p = predict_with(row, c, base, consts, through)
            except (BadInput, KeyError, ValueError) as err:
                skipped.append({"id": row["id"], "why": f"{type(err).__name__}: {err}"[:160]})
                continue
            out.append(result(row, p, c, ta.row_stack(row, base).timed))
    order = {r["id"]: i for i, r in enumerate(jobs)}
    return sorted(out, key=lambda r: order[r["id"]]), skipped, folds


def result(row: dict, p: dict, c: dict, stack: str) -> dict:
    lo, mid, hi, why = intervals.time_band(resolve_gpu(row["gpu"]), row["method"], p["gpus"], stack=stack,
                                           serial_link=p["serial_link"])
    measured = float(row["wall_s"])
    return {"id": row["id"], "source": row["source"], "stack": row["stack"], "model": row["model"],
            "method": row["method"], "gpu": row["gpu"], "gpus": p["gpus"], "serial_link": p["serial_link"],
            "measured": measured,
            "loso": round(p["wall_s"], 1), "train_s": round(p["train_s"], 1),
            "other_s": {k: round(v, 1) for k, v in p["other_s"].items()},
            "tokens": round(p["tokens"]), "tokens_basis": p["tokens_basis"],
            "inside_p10_p90": p["train_s"] * lo + sum(p["other_s"].values()) <= measured
            <= p["train_s"] * hi + sum(p["other_s"].values()), "interval_basis": why,
            "wall_basis": row["wall_basis"], "url": row["url"], "source_date": row["source_date"] or "undated",
            "constants": c}


def all_rows_overlap(jobs: list[dict], through: list[dict], grid: dict = ta.GRID) -> dict:
    """The planner's serial-link overlap: the fold rule on every source, with the step-time constants fitted on
    every throughput row (what throughput_accuracy.py --write-data gives steptime.yaml)."""
    base = tp.load_table()
    return fit_overlap(overlap_rows(jobs, through), ta.fitted_tables(through, base, grid), base, constants(), through)


def write_overlap(fit: dict, jobs: list[dict], path: Path = INTERCONNECT) -> None:
    """Replace interconnect.yaml's serial_link_overlap block with the all-rows fit, naming its rows."""
    by = {r["id"]: r["source"] for r in jobs}
    named = ", ".join(f"{i} ({by[i]})" for i in fit["rows"])
    today = dt.date.today().isoformat()
    curve = ", ".join(f"{v} {x}" for v, x in fit.get("scores", {}).items()) or fit["score"]
    block = (f"serial_link_overlap:\n  value: {fit['value']}\n  label: fitted\n  rows: \"{named}\"\n  source: >-\n"
             f"    bench/job_accuracy.py --write-data: of {', '.join(map(str, OVERLAP_GRID))}, the value with the least "
             f"median over sources\n    of each source's median |ln(predicted / reported wall time)| on these jobs"
             f"\n    (score by value: {curve}), with the step-time constants fitted on every throughput row.\n    The job "
             f"bench scores each job with this value refitted without its source\n    "
             f"(bench/results/job_accuracy.json serial_link_overlap); a fold with no other source's job takes\n    the "
             f"neutral steptime.yaml overlap.sharded (a serial link timed as any other). GeForce boards, which also\n"
             f"    have no peer-to-peer, keep overlap.sharded: answerai-fsdp-qlora's RTX 4090 FSDP rows read 0.91-1.04 of their\n"
             f"    tokens/s with it (bench/throughput_accuracy.py AQ14-AQ22) and 0.70-0.97 without\n"
             f"  source_date: \"{today}\"\n  read: \"{today}\"\n")
    text = path.read_text()
    new, n = re.subn(r"^serial_link_overlap:\n(?:[ \t]+.*\n)*", block, text, count=1, flags=re.M)
    if n != 1:
        raise BadInput(f"{path}: no serial_link_overlap block to replace; restore it from the package")
    path.write_text(new)


def overlap_doc(folds: dict) -> dict:
    values = [f["value"] for f in folds.values()]
    return {"grid": list(OVERLAP_GRID), "spread": [min(values), max(values)], "folds": folds,
            "rule": "per held-out source: the grid value with the least median over the other sources of their "
                    "median |ln(predicted / reported)| on serial-link sharded jobs"}


def main(argv: list[str]) -> int:
    if (code := refuse_unknown(argv, ('--json', '--write-data', '--quick'), __doc__)) is not None:
        return code
    jobs = [r for r in csv.DictReader(JOBS.open()) if r.get("scope", "bench") != "note"]
    through = [r for r in csv.DictReader(ta.ROWS.open()) if r.get("scope", "bench") != "note"]
    # --quick: the throughput bench's narrower search (shared constants fixed), for iterating, not for data
    quick = "--quick" in argv
    if quick and "--write-data" in argv:
        print("--quick and --write-data do not mix: fitted data comes from the full search; drop --quick")
        return 2
    results, skipped, folds = evaluate(jobs, through, ta.QUICK if quick else ta.GRID)
    # hours: the ratio is of predicted / measured wall time, so r > 1 reads slow, r < 1 fast
    s = ta.summary([{**r, "fitted": r["loso"], "baseline": r["loso"]} for r in results])
    s = {k: ({g: {"loso": v["loso"]} for g, v in s[k].items()} if k != "all" else {"loso": s[k]["loso"]}) for k in s}
    cov = {"rows": len(results), "inside_p10_p90": round(sum(r["inside_p10_p90"] for r in results) / len(results), 3)}
    doc = {"benchmark": "job_accuracy", "date": dt.date.today().isoformat(), "rows": len(results),
           "sources": len({r["source"] for r in results}), "boards": len({r["gpu"] for r in results}),
           "ratio": "predicted / reported wall time", "targets": ta.TARGETS, "summary": s, "coverage": cov,
           "serial_link_overlap": overlap_doc(folds), "skipped": skipped, "results": results}
    lines = ta.check({**s, "per_board": {b: {"loso": v["loso"]} for b, v in s["per_board"].items()}}, cov)
    doc["checks"] = lines
    if "--json" in argv:
        print(json.dumps(doc, indent=1))
        return 0
    RESULTS.write_text(json.dumps(stamp(doc), indent=1) + "\n")
    if "--write-data" in argv:
        fit = all_rows_overlap(jobs, through)
        write_overlap(fit, jobs)
        print(f"serial_link_overlap, all rows: {fit['value']} on {', '.join(fit['rows'])} (score {fit['score']}): "
              f"written to {INTERCONNECT.name}")
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
    o = doc["serial_link_overlap"]
    print(f"serial_link_overlap per fold (held-out source: value, fitted on): spread {o['spread'][0]}-{o['spread'][1]}")
    for source, f in folds.items():
        print(f"  {source:28} {f['value']:.2f}  {', '.join(f['rows']) or f.get('note', '')}")
    for line in lines:
        print(line)
    return 0 if math.isfinite(cov["inside_p10_p90"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
