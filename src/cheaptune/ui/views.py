"""What the dashboard shows of runs: display rows, one run's page, filters. Pure functions over
the records `ui.store` reads, shared by the HTML pages and the JSON the pages poll."""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

GIB = 2.0**30
FILTERS = ("status", "method", "gpu", "provider", "q")
RUN_HEADERS = ["run", "status", "method", "GPU", "provider", "$ spent", "$ budget", "$ predicted", "tokens/s",
               "started"]
EXPORTS = ("merged", "ollama", "vllm")
QUIET_EVENTS = {"start", "probe", "eval"}  # shown in their own sections


def money(x: float | None) -> str:
    return "-" if x is None else f"${x:,.2f}"


def number(x: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def when(ts: float | None) -> str:
    return "-" if not ts else time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def run_row(run: dict) -> dict[str, Any]:
    """One line of the runs table: the id for links and the display cells in RUN_HEADERS order."""
    return {
        "id": run["id"], "status": run.get("status"), "problem": run.get("problem"),
        "cells": [run.get("name") or run["id"], run.get("status") or "-", run.get("method") or "-",
                  _hardware(run), run.get("provider") or "-", money(run.get("cost_actual_usd")),
                  money(run.get("budget_usd")), money(run.get("cost_predicted_usd")),
                  number(run.get("tokens_per_s")), when(run.get("started_at"))],
    }


def _hardware(run: dict) -> str:
    gpu = run.get("gpu") or "-"
    return f"{gpu} x{run['gpu_count']}" if run.get("gpu_count") and run["gpu_count"] > 1 else gpu


def matches(run: dict, filters: dict[str, str]) -> bool:
    """Exact status/method/GPU/provider (case-insensitive); `q` is text anywhere in id, name or model."""
    for key in ("status", "method", "gpu", "provider"):
        want = filters.get(key)
        if want and (run.get(key) or "").lower() != want.lower():
            return False
    q = (filters.get("q") or "").lower()
    return not q or any(q in (run.get(k) or "").lower() for k in ("id", "name", "model"))


def choices(runs: list[dict]) -> dict[str, list[str]]:
    """The values each filter can take among these runs (for the select boxes)."""
    return {k: sorted({str(r[k]) for r in runs if r.get(k)}) for k in ("status", "method", "gpu", "provider")}


def _rates(run: dict) -> str:
    """The metered rate, or the plan's and the billed rate side by side (runs.billed) when they differ."""
    from cheaptune.runs.billed import latest

    billed = latest(run)
    if billed is None or billed["planned_per_hour"] == billed["billed_per_hour"]:
        return f"{money(run.get('price_per_hour'))}/h"
    return f"{money(billed['planned_per_hour'])}/h planned, {money(billed['billed_per_hour'])}/h billed"


def run_page(run: dict) -> dict[str, Any]:
    """Everything the run page shows; `problems` name what is wrong with this run alone."""
    problems = [run["problem"]] if run.get("problem") else []
    out_dir = run.get("output_dir")
    if out_dir and not Path(out_dir).is_dir():
        problems.append(f"run folder {out_dir} is missing (moved or deleted); resume and export need it")
    events = run.get("events", [])
    return {
        "id": run["id"], "name": run.get("name") or run["id"], "status": run.get("status"), "problems": problems,
        "facts": [("model", run.get("model") or "-"), ("method", run.get("method") or "-"),
                  ("GPU", _hardware(run)), ("provider", run.get("provider") or "-"),
                  ("price", _rates(run)),
                  ("steps", f"{number(run.get('steps'))} of {number(run.get('total_steps'))}"),
                  ("tokens", number(run.get("tokens"))), ("train loss", number(run.get("train_loss"), "{:.4g}")),
                  ("eval loss", number(run.get("eval_loss"), "{:.4g}")), ("started", when(run.get("started_at"))),
                  ("segments", str(len(run.get("segments", []))))],
        "money": [("spent", money(run.get("cost_actual_usd"))), ("budget", money(run.get("budget_usd"))),
                  ("predicted", money(run.get("cost_predicted_usd"))),
                  ("projected", money(run.get("cost_projected_usd")))],
        "probe": probe_rows(run, events),
        "events": [{"when": when(e["at"]), "kind": e["kind"], "text": _event_text(e)}
                   for e in events if e["kind"] not in QUIET_EVENTS],
        "evals": [_eval(e) for e in events if e["kind"] == "eval" and isinstance(e["detail"], dict)],
        "commands": commands(run),
        "series": run.get("series", []), "budget_usd": run.get("budget_usd"),
        "cost_predicted_usd": run.get("cost_predicted_usd"),
    }


def probe_rows(run: dict, events: list[dict]) -> list[dict[str, str]]:
    """Predicted against measured memory and speed: the last probe event, else the run's own columns."""
    probe = next((e["detail"] for e in reversed(events) if e["kind"] == "probe" and isinstance(e["detail"], dict)), {})
    mem = (probe.get("predicted_peak") or run.get("peak_mem_predicted"),
           probe.get("device_used") or run.get("peak_mem_measured"))
    speed = (probe.get("predicted_tokens_per_s"), probe.get("tokens_per_s") or run.get("tokens_per_s"))
    rows = []
    for label, (pred, meas), scale, fmt in (("peak memory (GiB)", mem, GIB, "{:.2f}"),
                                           ("speed (tokens/s)", speed, 1.0, "{:,.0f}")):
        if pred is None and meas is None:
            continue
        diff = f"{100 * (meas - pred) / pred:+.0f}%" if pred and meas is not None else "-"
        rows.append({"what": label, "predicted": number(pred and pred / scale, fmt),
                     "measured": number(meas and meas / scale, fmt), "difference": diff})
    return rows


def commands(run: dict) -> list[tuple[str, str]]:
    """The exact commands that continue from this run: resume (same output folder) and exports."""
    rid = shlex.quote(run["id"])
    out = []
    if run.get("output_dir"):
        out.append(("resume (with the config or plan it was started from)",
                    f"cheaptune train CONFIG --output-dir {shlex.quote(run['output_dir'])} --resume auto"))
    out += [(f"export {kind}", f"cheaptune export {rid} --to {kind}") for kind in EXPORTS]
    return out


def _event_text(event: dict) -> str:
    """The event in words, as `report` prints it (runs.events), less the kind its own column shows."""
    from cheaptune.runs.events import event_line

    text = event_line(event)
    return text.removeprefix(f"{event['kind']}: ") if text != event["kind"] else ""


def _eval(event: dict) -> dict[str, Any]:
    d = event["detail"]
    tuned, base = d.get("tuned") or {}, d.get("base") or {}
    keys = [k for k, v in tuned.items() if isinstance(v, (int, float))]
    return {"when": when(event["at"]), "rows": [(k, number(base.get(k), "{:.4g}"), number(tuned[k], "{:.4g}"))
                                                for k in keys]}
