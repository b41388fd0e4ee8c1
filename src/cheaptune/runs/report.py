"""A run's report: a summary of what it cost against what was predicted, and PNG plots (matplotlib Agg)."""

from __future__ import annotations

import io
from pathlib import Path

from cheaptune.runs.billed import latest
from cheaptune.util.atomic import write_bytes


def _ratio(actual: float | None, predicted: float | None) -> float | None:
    return actual / predicted if actual is not None and predicted else None


def summarize(run: dict) -> dict:
    """The headline figures of a registry run record (as `Registry.get_run` returns it)."""
    keys = ("id", "name", "status", "model", "method", "gpu", "gpu_count", "provider", "offer", "price_per_hour",
            "budget_usd", "steps", "total_steps", "tokens", "tokens_per_s", "train_loss", "eval_loss",
            "cost_actual_usd", "cost_predicted_usd", "cost_projected_usd", "peak_mem_predicted", "peak_mem_measured",
            "elapsed_s", "stop_reason", "config_hash", "started_at", "ended_at")
    out = {k: run.get(k) for k in keys}
    out["cost_ratio"] = _ratio(run.get("cost_actual_usd"), run.get("cost_predicted_usd"))
    out["memory_ratio"] = _ratio(run.get("peak_mem_measured"), run.get("peak_mem_predicted"))
    out["segments"] = len(run.get("segments", []))
    out["alerts"] = [e for e in run.get("events", []) if e["kind"] not in ("start", "finish")]
    billed = latest(run)  # planned and billed rate side by side (runs.billed); none recorded: the one metered rate
    out["planned_per_hour"] = billed["planned_per_hour"] if billed else run.get("price_per_hour")
    out["billed_per_hour"] = billed["billed_per_hour"] if billed else run.get("price_per_hour")
    return out


ON_SCALE = 3.0  # a reference line more than this many times what was spent would flatten the curve


def cost_scale(spent: float, lines: dict[str, float]) -> tuple[float, dict[str, float], list[str]]:
    """(top of the y axis, the lines drawn, notes for the lines off scale): the axis follows what was spent
    (cents against a $5 budget must not draw a flat line at zero); a line far above it is named instead."""
    drawn = {k: v for k, v in lines.items() if v <= ON_SCALE * max(spent, 1e-9)}
    top = 1.15 * max([spent, *drawn.values()]) or 1.0
    off = [f"{k} ${v:.2f} off scale ({v / spent:.0f}x spent)" if spent > 0 else f"{k} ${v:.2f} off scale"
           for k, v in lines.items() if k not in drawn]
    return top, drawn, off


def bars(pred: float | None, act: float | None) -> list[tuple[str, float | None, str]]:
    """(label, height or None, text in place of a missing bar) for the predicted-vs-actual panel."""
    return [("predicted", pred, "no plan"), ("actual", act, "not measured")]


def write_plots(run: dict, out_dir: str | Path) -> list[Path]:
    """loss.png, cost.png and predicted.png under `out_dir`; plots with no data are skipped."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    series = run.get("series", [])
    written: list[Path] = []

    def save(fig, name: str) -> None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        write_bytes(out / name, buf.getvalue())
        written.append(out / name)

    losses = [(p["step"], p["loss"]) for p in series if p["loss"] is not None]
    evals = [(p["step"], p["eval_loss"]) for p in series if p["eval_loss"] is not None]
    if losses or evals:
        fig, ax = plt.subplots(figsize=(6, 4))
        for pts, label in ((losses, "train loss"), (evals, "eval loss")):
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="." if len(pts) < 50 else None, label=label)
        ax.set(xlabel="step", ylabel="loss", title=f"Loss - run {run['id']}")
        ax.legend()
        save(fig, "loss.png")

    costs = [(p["elapsed_s"] / 3600, p["cost_usd"]) for p in series if p["cost_usd"] is not None and p["elapsed_s"] is not None]
    if costs:
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(*zip(*costs, strict=True), label="$ spent")
        refs = {k: run[key] for k, key in (("budget", "budget_usd"), ("predicted", "cost_predicted_usd")) if run.get(key)}
        top, drawn, off = cost_scale(max(c for _, c in costs), refs)
        for k, v in drawn.items():
            ax.axhline(v, color="red" if k == "budget" else "gray", linestyle="--" if k == "budget" else ":",
                       label=f"{k} ${v:.2f}")
        ax.set(xlabel="hours", ylabel="USD", title="Cost over time", ylim=(0, top))
        if off:
            ax.text(0.02, 0.98, "; ".join(off), transform=ax.transAxes, va="top", fontsize=8)
        ax.legend(loc="lower right")
        save(fig, "cost.png")

    pairs = [(label, run.get(p), run.get(a), scale) for label, p, a, scale in (
        ("cost (USD)", "cost_predicted_usd", "cost_actual_usd", 1.0),
        ("peak memory (GiB)", "peak_mem_predicted", "peak_mem_measured", 2.0**30),
    ) if run.get(p) is not None or run.get(a) is not None]
    if pairs:
        fig, axes = plt.subplots(1, len(pairs), figsize=(4 * len(pairs), 4), squeeze=False)
        for ax, (label, pred, act, scale) in zip(axes[0], pairs, strict=True):
            shown = bars(pred, act)
            ax.bar([b[0] for b in shown], [0 if b[1] is None else b[1] / scale for b in shown], color=["gray", "tab:blue"])
            for i, (_, height, missing) in enumerate(shown):
                if height is None:
                    ax.text(i, 0, missing, ha="center", va="bottom", color="dimgray")
            ax.set(title=label)
        save(fig, "predicted.png")
    return written
