"""`cheaptune runs`, `cheaptune report RUN`, `cheaptune compare RUN...`: what runs cost against what they got."""

from __future__ import annotations

from pathlib import Path

import typer

from cheaptune.cli.checks import path

_STATUS_HELP = "Only runs with this status (running, finished, failed, budget-stopped, preempted, killed, launched, lost)."


def _money(x) -> str:
    """The meter's spelling (`runs.meter.usd`): cents from $1 up, four decimals below, so a $0.15 cap passed
    by a fraction of a cent does not read as the cap itself."""
    from cheaptune.runs.meter import usd

    return "-" if x is None else usd(x)


def _num(x, fmt: str = "{:.4g}") -> str:
    return "-" if x is None else fmt.format(x)


def runs_cmd(
    status: str = typer.Option(None, "--status", help=_STATUS_HELP),
    model: str = typer.Option(None, "--model", help="Only runs whose model contains this text."),
    limit: int = typer.Option(20, "--limit", min=1, help="At most this many runs, newest first."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List recorded runs (a run killed without finishing shows as killed)."""
    from cheaptune.cli.output import console, emit_json
    from cheaptune.errors import BadInput
    from cheaptune.runs.registry import Registry
    from cheaptune.runs.schema import STATUSES

    if status and status not in (*STATUSES, "launched", "lost"):
        raise BadInput(f"--status must be one of {', '.join((*STATUSES, 'launched', 'lost'))} (got {status!r})")
    rows = Registry().list_runs(status=status, model=model, limit=limit)
    if json_out:
        emit_json(rows)
        return
    if not rows:
        console().print("no runs recorded yet")
        return
    cells = [[r["id"], r["name"] or "-", r["status"], r["model"] or "-", r["method"] or "-", r["gpu"] or "-",
              _num(r["steps"], "{}"), _money(r["cost_actual_usd"]), _money(r["cost_predicted_usd"]), _num(r["eval_loss"])]
             for r in rows]
    _print_fitted(("id", "name", "status", "model", "method", "gpu", "steps", "$ actual", "$ predicted", "eval loss"),
                  cells, ("model", "steps", "eval loss", "method", "gpu", "$ predicted", "name"))


def report_cmd(
    run: str = typer.Argument(..., help="Run id, unique id prefix, or name."),
    out: Path = typer.Option(None, "--out", parser=path, help="Folder for the PNG plots (default: reports/RUN in cheaptune's home)."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Summarize one run (cost actual against predicted, loss, alerts) and write PNG plots."""
    from cheaptune.cli.output import console, emit_json
    from cheaptune.runs.registry import Registry
    from cheaptune.runs.report import summarize, write_plots
    from cheaptune.util.paths import home

    record = Registry().get_run(run)
    summary = summarize(record)
    summary["plots"] = [str(p) for p in write_plots(record, out or home() / "reports" / record["id"])]
    if json_out:
        emit_json(summary)
        return
    c = console()
    c.print(f"[bold]run {summary['id']}[/] {summary['name'] or ''}  status: {summary['status']}")
    c.print(f"{summary['model'] or '-'} / {summary['method'] or '-'} on {summary['gpu'] or '-'} "
            f"({summary['provider'] or '-'}, {_rates(summary)})")
    ratio = f" ({summary['cost_ratio']:.0%} of predicted)" if summary["cost_ratio"] else ""
    c.print(f"cost: {_money(summary['cost_actual_usd'])} actual, {_money(summary['cost_predicted_usd'])} predicted"
            f"{ratio}, budget {_money(summary['budget_usd'])}; {summary['segments']} segment(s)")
    c.print(f"steps {_num(summary['steps'], '{}')}, train loss {_num(summary['train_loss'])}, "
            f"eval loss {_num(summary['eval_loss'])}")
    from cheaptune.runs.events import event_line

    for e in summary["alerts"]:
        c.print(f"  {event_line(e)}", markup=False, highlight=False)
    for p in summary["plots"]:
        c.print(f"plot: {p}")


def _rates(summary: dict) -> str:
    """'$0.69/h', or the plan's and the billed rate side by side when they differ."""
    planned, billed = summary["planned_per_hour"], summary["billed_per_hour"]
    if planned == billed:
        return f"{_money(billed)}/h"
    return f"{_money(planned)}/h planned, {_money(billed)}/h billed"


def compare_cmd(
    runs: list[str] = typer.Argument(..., help="Two or more run ids, prefixes or names."),
    plot: Path = typer.Option(None, "--plot", parser=path, help="Write a cost-against-eval-loss scatter PNG here."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Compare runs: cost against eval loss, cheapest first; marks runs no other run beats on both."""
    from cheaptune.cli.output import console, emit_json
    from cheaptune.errors import BadInput
    from cheaptune.runs.compare import compare_rows, plot_compare
    from cheaptune.runs.registry import Registry

    reg = Registry()
    found = list({rec["id"]: rec for rec in (reg.get_run(r) for r in runs)}.values())  # one run named twice: once
    if len(found) < 2:
        raise BadInput(f"compare needs two or more runs (got {len(found)} different: {', '.join(runs)}); "
                       f"for one run use `cheaptune report {runs[0]}`")
    rows = compare_rows(found)
    written = plot_compare(rows, plot) if plot else None
    if plot and written is None:
        typer.echo(f"no plot written to {plot}: none of these runs has both a cost and an eval loss "
                   "(set val_set_size to record eval loss)", err=True)
    if json_out:
        emit_json({"runs": rows, "plot": str(written) if written else None})
        return
    cells = [[r["id"], r["name"] or "-", r["method"] or "-", r["gpu"] or "-", _money(r["cost_usd"]),
              _money(r["cost_predicted_usd"]), _num(r["eval_loss"]),
              "-" if r["quality"] is None else f"{r['quality_metric']} {100 * r['quality']:.1f}%",
              r["vs_cheapest"] or "-", "yes" if r["pareto"] else ""] for r in rows]
    _print_fitted(("id", "name", "method", "gpu", "$ actual", "$ predicted", "eval loss", "quality", "vs cheapest",
                   "best trade-off"), cells, ("method", "gpu", "$ predicted", "name", "quality", "vs cheapest"))
    if written:
        console().print(f"plot: {written}")


def _print_fitted(headers: tuple[str, ...], cells: list[list[str]], drop: tuple[str, ...]) -> None:
    """The table at the terminal's width with whole ids (what `report` and `compare` take, or a prefix)."""
    from cheaptune.cli.output import console, fitted_table

    out = console()
    table, dropped = fitted_table(out, headers, cells, drop)
    out.print(table)
    if dropped:
        out.print(f"left out at this width: {', '.join(dropped)} (--json has every field)", style="dim", highlight=False)


def register(app: typer.Typer) -> None:
    app.command("runs")(runs_cmd)
    app.command("report")(report_cmd)
    app.command("compare")(compare_cmd)
