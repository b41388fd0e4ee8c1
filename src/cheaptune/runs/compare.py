"""Compare runs: what each cost against the eval loss it reached (the trade-off a user chooses on)."""

from __future__ import annotations

from pathlib import Path

from cheaptune.util.atomic import write_bytes


def compare_rows(runs: list[dict]) -> list[dict]:
    """One row per run, cheapest first; `pareto` marks the runs no other run beats on both cost and eval loss."""
    rows = [{
        "id": r["id"], "name": r.get("name"), "status": r["status"], "model": r.get("model"),
        "method": r.get("method"), "gpu": r.get("gpu"), "provider": r.get("provider"),
        "cost_usd": r.get("cost_actual_usd"), "cost_predicted_usd": r.get("cost_predicted_usd"),
        "eval_loss": r.get("eval_loss"), "train_loss": r.get("train_loss"), "steps": r.get("steps"),
    } for r in runs]
    for row, run in zip(rows, runs, strict=True):
        row.update(_quality(run))
    _versus_cheapest(rows)
    for row in rows:
        row["pareto"] = row["cost_usd"] is not None and row["eval_loss"] is not None and not any(
            o is not row and o["cost_usd"] is not None and o["eval_loss"] is not None
            and o["cost_usd"] <= row["cost_usd"] and o["eval_loss"] <= row["eval_loss"]
            and (o["cost_usd"], o["eval_loss"]) != (row["cost_usd"], row["eval_loss"])
            for o in rows
        )
    return sorted(rows, key=lambda r: (r["cost_usd"] is None, r["cost_usd"] or 0.0))


def _quality(run: dict) -> dict:
    """The headline score of the run's last eval (accuracy, else JSON schema validity, else exact match)."""
    evals = [e["detail"] for e in run.get("events", []) if e["kind"] == "eval" and e.get("detail")]
    tuned = evals[-1].get("tuned", {}) if evals else {}
    key = next((k for k in ("accuracy", "schema_valid", "json_valid", "exact_match") if k in tuned), None)
    return {"quality_metric": key, "quality": tuned.get(key) if key else None,
            "quality_base": evals[-1].get("base", {}).get(key) if key else None}


def _versus_cheapest(rows: list[dict]) -> None:
    """'+6.0 points for 2.1x the cost' against the cheapest run scored on the same metric."""
    scored = [r for r in rows if r["quality"] is not None and r["cost_usd"]]
    for row in rows:
        row["vs_cheapest"] = None
        peers = [r for r in scored if r["quality_metric"] == row["quality_metric"]]
        if row in scored and len(peers) > 1:
            ref = min(peers, key=lambda r: r["cost_usd"])
            if ref is not row:
                row["vs_cheapest"] = (f"{100 * (row['quality'] - ref['quality']):+.1f} points for "
                                      f"{row['cost_usd'] / ref['cost_usd']:.1f}x the cost")


def plot_compare(rows: list[dict], path: str | Path) -> Path | None:
    """A scatter of cost against eval loss (runs lacking either are left out); None when none qualify."""
    pts = [r for r in rows if r["cost_usd"] is not None and r["eval_loss"] is not None]
    if not pts:
        return None
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    ax.scatter([r["cost_usd"] for r in pts], [r["eval_loss"] for r in pts],
               c=["tab:green" if r["pareto"] else "tab:gray" for r in pts])
    for r in pts:
        ax.annotate(r["name"] or r["id"], (r["cost_usd"], r["eval_loss"]), fontsize=8)
    ax.set(xlabel="cost (USD)", ylabel="eval loss", title="Cost against eval loss (green: not beaten)")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    write_bytes(path, buf.getvalue())
    return Path(path)
