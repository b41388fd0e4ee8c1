"""Render the README's Performance table and bench/README's latency table from bench/results/*.json.

The text between `<!-- figures:start -->` and `<!-- figures:end -->` is generated, so a figure in the docs is
always the one in the results file (tests/bench/test_figures.py fails when they disagree).
Run: .venv/bin/python bench/render_figures.py   (rewrites both files in place; --check only compares)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
START, END = "<!-- figures:start -->", "<!-- figures:end -->"


def _load(name: str) -> dict:
    return json.loads((RESULTS / f"{name}.json").read_text())


def _pct(x: float) -> str:
    return f"{x:+.0%}" if abs(x) >= 0.1 else f"{x:+.1%}"


def _date(doc: dict) -> str:
    return doc.get("date") or doc["run"]["date"]


def _cores(doc: dict) -> int | None:
    return doc.get("run", {}).get("machine", {}).get("cpu_cores") or doc.get("machine", {}).get("cpu_count")


def _speed_row(doc: dict) -> str:
    parts = []
    for m in doc["models"]:
        r = m["ratio"]
        if "median" in r:  # one baseline: median (min-max) over the pairs
            parts.append(f"{m['model']} {r['median']:.2f}x ({r['min']:.2f}-{r['max']:.2f})")
        else:  # several baselines: the median per baseline (CPU time), and by wall time when recorded
            wall = m.get("ratio_wall", {})
            parts.append(f"{m['model']} " + ", ".join(
                f"{v:.2f}x vs {k}" + (f" (wall {wall[k]:.2f}x)" if k in wall else "") for k, v in r.items()))
    return "; ".join(parts)


def _per_trainer(mem: dict) -> str:
    """'litgpt 49 rows 2.6% / -24%, ...': leave-one-source-out, per trainer profile."""
    parts = []
    for name, d in sorted(mem["loso"]["per_trainer"].items(), key=lambda kv: -kv[1]["rows"]):
        parts.append(f"{name} {d['rows']} rows {d['median_abs_error']:.1%} / {_pct(d['worst_under'])}")
    return ", ".join(parts)


def _steps_row(steps: dict) -> str:
    """The step-time model scored leave-one-source-out, with the in-sample figure beside it."""
    cov = steps["coverage"]
    a, f, b = (steps["summary"]["all"][k] for k in ("loso", "fitted", "baseline"))
    per = ", ".join(f"{k} GPU{'s' if k != '1' else ''} x{v['loso']['typical']:.2f}"
                    for k, v in steps["summary"]["per_gpus"].items())
    return (f"| step time vs {steps['rows']} public runs ({steps['sources']} sources, {steps['boards']} boards), each "
            f"source predicted by constants fitted without it (`throughput_accuracy.py`): typical / bias / worst "
            f"| x{a['typical']:.2f} / {_pct(a['bias'])} / x{a['worst']['factor']:.2f} ({per}; fitted rows x{f['typical']:.2f}; "
            f"40%-of-peak baseline x{b['typical']:.2f}; p10-p90 holds {cov['inside_p10_p90']:.0%} of held-out rows) "
            f"| x1.15 / +-10% / x2 |")


def _jobs_row(jobs: dict) -> str:
    """Whole jobs: predicted wall time over the terms each run's wall time covers (its `wall_includes`: training,
    in-loop evaluation, weight load, tokenising) vs reported, leave-one-source-out."""
    a, cov = jobs["summary"]["all"]["loso"], jobs["coverage"]
    return (f"| whole-job hours vs {jobs['rows']} public runs' wall time, predicted over the terms each run's time covers "
            f"(training, in-loop eval, load, tokenise) ({jobs['sources']} sources; "
            f"{len(jobs['skipped'])} more skipped: no token count, or a model the catalog lacks) (`job_accuracy.py`): "
            f"typical / bias / worst | x{a['typical']:.2f} / {_pct(a['bias'])} / x{a['worst']['factor']:.2f} "
            f"(p10-p90 holds {cov['inside_p10_p90']:.0%}) | x1.15 / +-10% / x2 |")


def _grpo_row(grpo: dict) -> str:
    """GRPO step time, leave-one-source-out, at the runs' logged completion length and at the cap."""
    s = grpo["summary"]
    a, cap, f = s["loso"], s["loso_at_cap"], s["fitted"]
    return (f"| GRPO step time vs {grpo['rows']} public runs ({grpo['sources']} sources), each source predicted by "
            f"constants fitted without it (`grpo_accuracy.py`), at the runs' logged completion length: typical / bias / "
            f"worst | x{a['typical']:.2f} / {_pct(a['bias'])} / x{a['worst']['factor']:.2f} (every completion at the cap, "
            f"the default when the length is not known: x{cap['typical']:.2f} / {_pct(cap['bias'])} / "
            f"x{cap['worst']['factor']:.2f}, at or above the measured time on {cap['at_or_above_measured']} of "
            f"{grpo['rows']}; fitted rows x{f['typical']:.2f}) | x1.15 / +-10% / x2 |")


def readme_table() -> str:
    mem, multi, lat = _load("memory_accuracy"), _load("multi_gpu_accuracy"), _load("plan_latency")
    speed, steps = _load("throughput_vs_hf"), _load("throughput_accuracy")
    ours, acc, poor = mem["loso"], mem["accelerate"], mem["gpu_poor"]
    qlora = ours["qlora"]
    mo, mf = multi["not_fitted"], multi["fitted"]
    cmd = lat["commands"]
    dates = sorted({_date(d) for d in (mem, multi, lat, speed, steps)})
    rows = [
        f"| what (dates: {', '.join(dates)}; {_cores(lat)}-core CPU machine, no GPU) | result | target |",
        "| --- | --- | --- |",
        f"| estimate vs {ours['rows']} public single-GPU measurements from {ours['sources']} sources, leave-one-source-out "
        f"(the allocator slack refitted without each source), each row through `estimate`'s own options with its "
        f"trainer's profile and stated versions (`memory_accuracy.py`): median abs error / worst under-prediction "
        f"| {ours['median_abs_error']:.1%} / {_pct(ours['worst_under'])} ({len(ours['under_10pct_rows'])} rows under "
        f"-10%; QLoRA {qlora['rows']} rows {qlora['median_abs_error']:.1%} / {_pct(qlora['worst_under'])}, the upper end "
        f"of its range (what plans fit) holds {mem['qlora_range']['covered']} of them, worst "
        f"{_pct(mem['qlora_range']['worst_under_of_upper_end'])}; median of "
        f"per-source medians {ours['median_of_source_medians']:.1%}; {_per_trainer(mem)}; weights-only formula: "
        f"{acc['median_abs_error']:.0%} / {_pct(acc['worst_under'])}; fixed-overhead formula: "
        f"{poor['median_abs_error']:.0%} / {_pct(poor['worst_under'])}) | 5% / -10% (QLoRA 8%) |",
        f"| estimate vs {mo['rows']} public multi-GPU measurements not used for fitting (`multi_gpu_accuracy.py`) "
        f"| {mo['median_abs_error']:.1%} / {_pct(mo['worst_under'])} (on the {mf['rows']} fitted rows: "
        f"{mf['median_abs_error']:.1%} / {_pct(mf['worst_under'])}) | 10% / -10% |",
        _steps_row(steps),
        _jobs_row(_load("job_accuracy")),
        _grpo_row(_load("grpo_accuracy")),
        f"| `cheaptune train` vs plain Trainer scripts, real tokens per CPU-second (`throughput_vs_hf.py`; shared machine: wall time in brackets) | {_speed_row(speed)} "
        f"| >= {speed['target_ratio']}x |",
    ]
    for key, what in (("estimate_7b", "estimate Llama-2-7B LoRA seq 2048"), ("estimate_70b", "estimate Llama-3.1-70B LoRA"),
                      ("plan_7b", "plan Llama-3.1-8B over the whole catalog")):
        c = cmd[key]
        rows.append(f"| {what}, cold / warm (`plan_latency.py`) | {c['cold_s']:.1f} s / {c['warm_s']:.2f} s{_cpu(c, lat)} "
                    f"| {c['cold_target_s']:g} s / {c['warm_target_s']:g} s |")
    return "\n".join(rows)


def bench_latency_table() -> str:
    lat = _load("plan_latency")
    rows = ["| command | cold s (target) | warm s (target) | meets |", "| --- | --- | --- | --- |"]
    for c in lat["commands"].values():
        rows.append(f"| `{' '.join(c['command'])}` | {c['cold_s']:.1f} ({c['cold_target_s']:g}) "
                    f"| {c['warm_s']:.2f} ({c['warm_target_s']:g}){_cpu(c, lat)} | {'yes' if c['meets_targets'] else 'no'} |")
    return "\n".join(rows)


def _cpu(c: dict, lat: dict) -> str:
    """The CPU seconds beside the wall seconds, when measured: on a loaded machine the wall time grows."""
    if "cold_cpu_s" not in c:
        return ""
    load = lat.get("machine", {}).get("load_avg_1m")
    return (f" (CPU {c['cold_cpu_s']:.1f} s / {c['warm_cpu_s']:.2f} s" + (f"; load {load:g}" if load is not None else "")
            + (f"; {n} memory simulation{'s' * (n != 1)} cold" if (n := c.get("cold_estimates")) else "") + ")")


def splice(text: str, body: str, where: str) -> str:
    """`text` with the part between the markers replaced by `body`."""
    head, sep, rest = text.partition(START)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise SystemExit(f"{where}: no {START} ... {END} markers")
    return f"{head}{START}\n{body}\n{END}{tail}"


TARGETS = {REPO / "README.md": readme_table, REPO / "bench" / "README.md": bench_latency_table}


def rendered() -> dict[Path, str]:
    return {path: splice(path.read_text(), make(), path.name) for path, make in TARGETS.items()}


def main(argv: list[str]) -> int:
    stale = [p for p, text in rendered().items() if p.read_text() != text]
    if "--check" in argv:
        for p in stale:
            print(f"{p.relative_to(REPO)} differs from bench/results; run bench/render_figures.py")
        return 1 if stale else 0
    for p, text in rendered().items():
        p.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
