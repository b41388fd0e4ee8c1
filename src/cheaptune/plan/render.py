"""Showing a plan: the JSON document, a rich table, Markdown. Computing stays in the planner."""

from __future__ import annotations

import os
from typing import Any

from cheaptune.plan.candidates import GIB
from cheaptune.plan.planner import PlanResult
from cheaptune.plan.price_age import label as price_label
from cheaptune.plan.pricing import Option

WIDE = 180
OPTION_KEYS = ("method", "gpu", "gpu_count", "num_nodes", "network", "sharding", "provider", "region", "spot", "kind",
               "instance_type", "price_per_hour", "peak_vram_bytes", "gpu_memory_bytes", "micro_batch", "grad_accum",
               "grad_ckpt", "tokens_per_s", "hours", "risk", "checkpoint_minutes", "precision", "pessimistic_total",
               "price_as_of", "price_source", "price_age_days", "price_basis")


def option_dict(o: Option, details: bool = False) -> dict[str, Any]:
    d = {k: getattr(o, k, None) for k in OPTION_KEYS}
    d["hardware"] = o.hardware()
    d["cost"] = dict(o.cost)
    if details:
        d["details"] = o.details
    return d


def to_json(r: PlanResult) -> dict[str, Any]:
    w = r.workload
    return {
        "model": r.model_id,
        "workload": {"tokens": w.tokens, "trained_tokens": round(w.trained_tokens), "epochs": w.epochs, "seq_len": w.seq_len, "effective_batch": w.effective_batch,
                     "network": w.network, "examples": w.examples, "tokens_exact": w.tokens_exact, "tokens_basis": w.tokens_basis},
        "optimize": r.constraints.optimize,
        "objective": r.workload.objective,
        "options": [option_dict(o, details=i == 0) for i, o in enumerate(r.options[: r.constraints.top])],
        "recommended": option_dict(r.recommended, details=True) if r.recommended else None,
        "why": r.why,
        "why_not": r.why_not,
        "high_end": r.high_end,
        "hosted": r.hosted,
        "data_audit": r.audit,
        "excluded": [{"option": e.option, "reason": e.reason, "kind": e.kind} for e in r.excluded],
        "warnings": [f.to_dict() for f in r.warnings],
        "notes": r.notes,
        "advice": r.advice,
    }


def _row(o: Option) -> list[str]:
    return row_cells(option_dict(o))


def row_cells(d: dict[str, Any]) -> list[str]:
    """One table row (HEADERS) from an option's JSON form, so a saved `plan --json` renders the same."""
    c = d["cost"]
    mode = "spot" if d["spot"] else d["kind"]
    return [
        d["method"], d["hardware"], f"{d['provider']}/{d['region']}", mode, price_label(d),
        f"{d['peak_vram_bytes'] / GIB:.1f}/{d['gpu_memory_bytes'] / GIB:.0f} GiB",
        f"{d['micro_batch']}/{d['grad_accum']}/{'on' if d['grad_ckpt'] else 'off'}", f"{d['tokens_per_s']:,.0f}",
        f"{d['hours']:.2f}", f"{c['compute']:.2f}", f"{c['storage'] + c['egress']:.2f}", f"{c['spot_overhead']:.2f}",
        f"{c['total']:.2f}", d["risk"],
    ]


HEADERS = ["method", "GPU", "provider/region", "pricing", "price", "peak VRAM", "mb/accum/ckpt", "tok/s", "hours",
           "$ compute", "$ stor+egress", "$ spot loss", "$ total", "risk"]
CORE = ("method", "GPU", "provider/region", "pricing", "price", "peak VRAM", "hours", "$ total", "risk")  # what decides


def _text_sections(r: PlanResult) -> list[tuple[str, list[str]]]:
    return text_sections(to_json(r))


def text_sections(doc: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The plan's prose, titled, from its JSON form (what `plan --json` prints, or a file of it)."""
    w = doc["workload"]
    trained = w.get("trained_tokens", w["tokens"])
    cut = f", {trained:,} of them train (--seq-len {w['seq_len']} cuts the rest)" if trained < w["tokens"] else ""
    head = [f"{doc['model']}: {w['tokens']:,} tokens/epoch ({w['tokens_basis']}){cut} x {w['epochs']:g} epochs, "
            f"seq {w['seq_len']}, effective batch {w['effective_batch']}"]
    return [
        ("Plan", head),
        ("Recommendation", [doc["why"]] if doc.get("why") else []),
        ("Why not the others", doc.get("why_not") or []),
        ("Spot interruption at the high end", [doc["high_end"]] if doc.get("high_end") else []),
        ("The hosted alternative", [doc["hosted"]] if doc.get("hosted") else []),
        ("Data audit", doc.get("data_audit") or []),
        ("Warnings", [f"[{f['code']}] {f['message']}" for f in doc.get("warnings") or []]),
        ("Notes", doc.get("notes") or []),
        ("What would make it feasible", doc.get("advice") or []),
    ]


def print_rich(r: PlanResult, console: Any, wide: bool = False) -> None:
    """The plan at the console's width: every column when they fit (or with `wide`), else the columns that
    decide (CORE) when those fit, else one block per option; a cell is never cut."""
    if wide or (not console.is_terminal and console.width < WIDE and not os.environ.get("COLUMNS")):
        console.width = max(console.width, WIDE)  # piped with no COLUMNS: do not squeeze the table into 80
    title, head = _text_sections(r)[0]
    console.print(f"[bold]{title}[/bold]: {head[0]}")
    rows = [_row(o) for o in r.options[: r.constraints.top]]
    if rows:
        table, narrow = _table(HEADERS, rows), False
        if not wide and _natural_width(console, table) > console.width:
            keep, narrow = [HEADERS.index(h) for h in CORE], True
            table = _table(list(CORE), [[row[i] for i in keep] for row in rows])
        if narrow and _natural_width(console, table) > console.width:
            _print_stacked(console, rows)
        else:
            console.print(table)
        if narrow:
            console.print("more columns (tok/s, batch, $ parts): --wide or --json", style="dim", highlight=False)
    for name, lines in _text_sections(r)[1:]:
        if lines:
            console.print(f"[bold]{name}[/bold]")
            for line in lines:
                console.print(f"  - {line}", highlight=False, markup=False)


def _table(headers: list[str], rows: list[list[str]]) -> Any:
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    for h in headers:
        table.add_column(h, justify="right" if h.startswith(("$", "tok", "hours")) else "left", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    return table


def _natural_width(console: Any, table: Any) -> int:
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(10**5), table).maximum  # unclamped


def _print_stacked(console: Any, rows: list[list[str]]) -> None:
    """One short block per option, for terminals too narrow for even the deciding columns."""
    cell = dict(zip(HEADERS, range(len(HEADERS)), strict=True))
    for n, row in enumerate(rows, 1):
        console.print(f"{n}. {row[cell['method']]} on {row[cell['GPU']]}, {row[cell['provider/region']]}, "
                      f"{row[cell['pricing']]} (price {row[cell['price']]})", highlight=False, markup=False)
        console.print(f"   ${row[cell['$ total']]} total, {row[cell['hours']]} h, VRAM {row[cell['peak VRAM']]}, "
                      f"risk {row[cell['risk']]}", highlight=False, markup=False)


def to_markdown(r: PlanResult) -> str:
    out = []
    for name, lines in _text_sections(r)[:1]:
        out += [f"## {name}", "", lines[0], ""]
    if r.options:
        out += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        out += ["| " + " | ".join(_row(o)) + " |" for o in r.options[: r.constraints.top]]
        out.append("")
    for name, lines in _text_sections(r)[1:]:
        if lines:
            out += [f"### {name}", ""] + [f"- {line}" for line in lines] + [""]
    return "\n".join(out)
