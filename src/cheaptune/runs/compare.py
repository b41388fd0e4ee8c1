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
    for row in rows:
        row["pareto"] = row["cost_usd"] is not None and row["eval_loss"] is not None and not any(
            o is not row and o["cost_usd"] is not None and o["eval_loss"] is not None
            and o["cost_usd"] <= row["cost_usd"] and o["eval_loss"] <= row["eval_loss"]
            and (o["cost_usd"], o["eval_loss"]) != (row["cost_usd"], row["eval_loss"])
            for o in rows
        )
    return sorted(rows, key=lambda r: (r["cost_usd"] is None, r["cost_usd"] or 0.0))


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
