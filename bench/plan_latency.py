"""How long a user waits for `cheaptune estimate` and `cheaptune plan`: cold (fresh cache, new process) and warm.

Each command runs as a user runs it, `python -m cheaptune ...` in a new process; "cold" uses a fresh
CHEAPTUNE_HOME (no cached estimates), "warm" repeats the same command with that cache in place.
Targets: estimate 7B cold <= 20 s, 70B cold <= 60 s, warm <= 2 s (issues 3 and 4); plan 7B cold <= 20 s,
warm <= 0.5 s, and `models` warm <= 1 s (issue 33). Each row also counts the memory simulations the cold run
made (files in the fresh estimate cache), the figure the planner's micro-batch search and pruning reduce.

    python bench/plan_latency.py            # full: writes bench/results/plan_latency.json
    python bench/plan_latency.py --quick    # smoke: a 135M estimate only
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from run_record import stamp

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "plan_latency.json"
EST = ["estimate", "--method", "lora", "--micro-batch", "1", "--seq-len", "2048", "--json"]
# name -> (command after `cheaptune`, cold target s, warm target s)
COMMANDS: dict[str, tuple[list[str], float, float]] = {
    "estimate_7b": (["estimate", "--model", "Llama-2-7B", *EST[1:]], 20.0, 2.0),
    "estimate_70b": (["estimate", "--model", "Llama-3.1-70B", *EST[1:]], 60.0, 2.0),
    "plan_7b": (["plan", "Llama-3.1-8B", "--tokens", "10000000", "--json"], 20.0, 0.5),
    "models": (["models"], 10.0, 1.0),
}
QUICK = {"estimate_135m": (["estimate", "--model", "SmolLM2-135M", *EST[1:]], 20.0, 2.0)}


def timed(args: list[str], home: Path, timeout: float) -> dict[str, Any]:
    """Seconds of one `python -m cheaptune ARGS` process, with its exit code."""
    env = {**os.environ, "CHEAPTUNE_HOME": str(home), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    start, before = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-m", "cheaptune", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    # CPU seconds: what the command costs on an idle machine; wall seconds grow with the load average
    out = {"seconds": round(time.monotonic() - start, 2), "cpu_s": round(cpu, 2), "exit_code": proc.returncode}
    if proc.returncode != 0:
        out["stderr"] = proc.stderr.strip().splitlines()[-1:] if proc.stderr.strip() else []
    return out


def measure(commands: dict[str, tuple[list[str], float, float]], warm_runs: int, timeout: float) -> dict[str, Any]:
    rows = {}
    for name, (args, cold_target, warm_target) in commands.items():
        with tempfile.TemporaryDirectory(prefix="ct_latency_") as home:
            cold = timed(args, Path(home), timeout)
            simulated = len(list(Path(home).glob("**/estimate/*.json")))
            warms = [timed(args, Path(home), timeout) for _ in range(warm_runs)]
        warm = min(w["seconds"] for w in warms)
        rows[name] = {"command": ["cheaptune", *args], "cold_s": cold["seconds"], "cold_cpu_s": cold["cpu_s"],
                      "cold_estimates": simulated, "warm_s": warm, "warm_cpu_s": min(w["cpu_s"] for w in warms),
                      "warm_runs_s": [w["seconds"] for w in warms], "cold_target_s": cold_target,
                      "warm_target_s": warm_target, "meets_targets": cold["seconds"] <= cold_target
                      and warm <= warm_target, "exit_codes": [cold["exit_code"], *(w["exit_code"] for w in warms)]}
        if cold["exit_code"] or any(w["exit_code"] for w in warms):
            rows[name]["error"] = cold.get("stderr") or next(w["stderr"] for w in warms if w["exit_code"])
        print(f"{name}: cold {cold['seconds']:.1f} s ({cold['cpu_s']:.1f} s CPU; target {cold_target:g}), warm "
              f"{warm:.2f} s ({rows[name]['warm_cpu_s']:.2f} s CPU; target {warm_target:g})", flush=True)
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke: one small estimate, cold and warm")
    p.add_argument("--warm-runs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before one command is abandoned")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args(argv)
    import platform

    rows = measure(QUICK if a.quick else COMMANDS, a.warm_runs, a.timeout)
    doc = {"benchmark": "plan_latency", "date": dt.date.today().isoformat(), "mode": "quick" if a.quick else "full",
           "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                       "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "1"),
                       "load_avg_1m": round(os.getloadavg()[0], 2)},
           "commands": rows}
    from cheaptune.util import atomic

    a.out.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(a.out, json.dumps(stamp(doc), indent=2) + "\n")
    return doc


if __name__ == "__main__":
    main()
