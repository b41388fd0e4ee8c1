"""Fit the estimator's GPU-side constants and the MFU table from a gpu_validate results JSON.

    python bench/gpu_recalibrate.py bench/results/gpu_validate_<date>_H200.json
    (same as: python bench/gpu_validate.py --recalibrate FILE)

Prints, for estimate/data/overheads.yaml: the CUDA context (nvidia-smi used minus torch's max reserved,
sampled at step ends while the cache holds the step's blocks) and the allocator slack fraction
(reserved / allocated - 1); for estimate/data/steptime.yaml: the median measured MFU per (GPU, method
kind: full or adapter), to set the board's sustained fraction; and the estimator's error per case. It only prints: a person copies the values, with this file's
name and date as their source, so a bad run cannot silently rewrite the tables.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

MIB = 1 << 20


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def fit(doc: dict[str, Any]) -> dict[str, Any]:
    """The fitted constants; pure so tests can feed a synthetic results document."""
    ok = [r for r in doc["cases"] if r.get("status") == "ok" and r.get("measured", {}).get("max_reserved_bytes")]
    context = [r["measured"]["nvidia_smi_used_mib"] * MIB - r["measured"]["max_reserved_bytes"]
               for r in ok if r["measured"].get("nvidia_smi_used_mib")]
    slack = [r["measured"]["max_reserved_bytes"] / r["measured"]["max_allocated_bytes"] - 1 for r in ok]
    cls = doc.get("gpu") or "cpu"
    mfu: dict[str, list[float]] = {}
    for r in ok:
        if r["measured"].get("mfu"):
            mfu.setdefault("full" if r["method"] == "full" else "adapter", []).append(r["measured"]["mfu"])
    errors = []
    for r in ok:
        p, m = r.get("predicted", {}), r["measured"]
        if "peak_allocated_bytes" not in p:
            continue
        smi = (m.get("nvidia_smi_used_mib") or 0) * MIB
        errors.append({"case": r["case"],
                       "allocated": p["peak_allocated_bytes"] / m["max_allocated_bytes"] - 1,
                       "reserved": p["peak_reserved_bytes"] / m["max_reserved_bytes"] - 1,
                       "device_total": p["device_total_bytes"] / smi - 1 if smi else None,
                       "tokens_per_s": p["throughput"]["tokens_per_s"] / m["tokens_per_s"] - 1
                       if m.get("tokens_per_s") and "throughput" in p else None})
    return {
        "source": f"gpu_validate {doc.get('date')} on {doc.get('gpu')}",
        "cases_ok": len(ok),
        "overheads": {
            "cuda_context_bytes": int(max(context)) if context else None,  # erring high, as the table does
            "cuda_context_median_bytes": int(statistics.median(context)) if context else None,
            "allocator_slack_fraction": round(_quantile(slack, 0.9), 4) if slack else None,
            "allocator_slack_median": round(statistics.median(slack), 4) if slack else None,
        },
        "mfu": {cls: {k: {"mfu": round(statistics.median(v), 3), "n": len(v), "min": round(min(v), 3),
                          "max": round(max(v), 3)} for k, v in sorted(mfu.items())}},
        "relative_errors": errors,
        "worst_underprediction": {k: min((e[k] for e in errors if e[k] is not None), default=None)
                                  for k in ("allocated", "reserved", "device_total")},
    }


def recalibrate(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise SystemExit(f"cannot read {path}: {err}; pass a JSON written by bench/gpu_validate.py") from None
    out = fit(doc)
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python bench/gpu_recalibrate.py RESULTS.json")
    recalibrate(Path(sys.argv[1]))
