"""`cheaptune prices`: list GPU offers from every active price source; `import-skypilot DIR`."""

from __future__ import annotations

from pathlib import Path

import typer

from cheaptune.cli.checks import bounded, path
from cheaptune.cli.vocab import Spot, names_given, spot_flag, spot_option

prices_app = typer.Typer(help=(
    "GPU offers (price per hour) from the bundled snapshot, the live cache, SkyPilot and your CSV.\n\n"
    "Your own prices: a CSV with the bundled snapshot's columns at $CHEAPTUNE_PRICES, else prices.csv in "
    "cheaptune's home ($CHEAPTUNE_HOME, default ~/.cheaptune). A row with the same provider, kind, GPU, count, "
    "region and instance replaces the bundled one; other rows are added. `plan` uses them too."))


COLUMNS = ("provider", "kind", "gpu", "n", "instance", "region", "$/h", "$/GPU-h", "billing", "interrupt/h", "age")
# what goes first when the terminal is narrow: the cells are never cut, the least deciding columns go whole
DROP_ORDER = ("instance", "billing", "$/GPU-h", "age", "interrupt/h", "region", "kind")


def _offer_dict(o) -> dict:
    from dataclasses import asdict
    from datetime import date

    from cheaptune.catalog.interruption import priced_rate
    from cheaptune.plan.price_age import price_facts

    rate = priced_rate(o)
    return {**asdict(o), "spot": o.spot, "price_per_gpu_hour": round(o.price_per_gpu_hour, 6),
            **price_facts(o, date.today()), "interruption": rate.to_dict() if rate else None}


def _age_cell(o) -> str:
    """This row's own price age and basis ('12 d', '430 d', 'undated'; '~' derived or range-low)."""
    from datetime import date

    from cheaptune.plan.price_age import age_days

    age = age_days(o.date, date.today())
    return ("undated" if age is None else f"{age} d") + ("" if o.basis == "quoted" else "~")


def _rate_cell(o) -> str:
    """The interruptions per hour `plan` prices this offer with (* when assumed); '-' when none applies."""
    from cheaptune.catalog.interruption import priced_rate

    rate = priced_rate(o)
    return "-" if rate is None else f"{rate.expected:.2g}" + ("*" if rate.assumed else "")


def _sources_line(sources: list[dict]) -> str:
    parts = []
    for s in sources:
        dropped = sum(s.get("dropped", {}).values())
        extra = f", {dropped} rows dropped" if dropped else ""
        parts.append(f"{s['name']} ({s['where']}, {s['rows']} offers, prices dated {s['date']}{extra})")
    return "sources: " + "; ".join(parts)


@prices_app.callback(invoke_without_command=True)
def prices(
    ctx: typer.Context,
    gpu: list[str] | None = typer.Option(None, "--gpu", help="Only these GPUs, any spelling (H100, A100-80GB, "
                                         "'RTX 4090'); repeatable or a comma list."),
    provider: str | None = typer.Option(None, "--provider", help="Only these providers (aws, gcp, runpod, vast...; "
                                        "a comma list)."),
    min_memory: float | None = typer.Option(None, "--min-memory", callback=bounded(0, 1e5),
                                            help="Minimum GPU memory in GiB."),
    spot: Spot = spot_option("both"),
    community: bool | None = typer.Option(None, "--community/--no-community", help="Only or no community-cloud offers."),
    max_price: float | None = typer.Option(None, "--max-price", callback=bounded(0, 1e5, above=True),
                                           help="Maximum $ per instance-hour."),
    sort: str = typer.Option("price", "--sort", help="price | gpu | provider | memory."),
    group_by_gpu: bool = typer.Option(False, "--group-by-gpu", help="Only the cheapest offer (per GPU-hour) per GPU."),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Show at most this many offers."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List offers cheapest first, with the sources in use and their dates."""
    if ctx.invoked_subcommand is not None:
        return
    from cheaptune.catalog.gpus import resolve_gpu
    from cheaptune.catalog.prices import cheapest_per_gpu, filter_offers
    from cheaptune.catalog.sources import active_sources, load_offers
    from cheaptune.plan.workload import check_provider_names

    wanted = {resolve_gpu(g).name for g in names_given("--gpu", gpu)}
    names = {p.lower() for p in names_given("--provider", None if provider is None else [provider], "cheaptune prices")}
    every = load_offers()
    check_provider_names("--provider", names, (o.provider for o in every))
    offers = filter_offers(every, min_memory_gib=min_memory, community=community, max_price=max_price, sort=sort,
                           spot=spot_flag(spot))
    offers = [o for o in offers if (not wanted or o.gpu in wanted) and (not names or o.provider in names)]
    if group_by_gpu:
        offers = cheapest_per_gpu(offers)
    total = len(offers)
    offers = offers[:limit] if limit else offers
    sources = active_sources()
    if json_out:
        from cheaptune.cli.output import emit_json

        emit_json({"offers": [_offer_dict(o) for o in offers], "matched": total, "sources": sources})
        return
    from cheaptune.cli.output import console, fitted_table, left_out

    rows = [[o.provider, o.kind, o.gpu, str(o.gpu_count), o.instance_type or "-", o.region,
             f"{o.price_per_hour:.4g}", f"{o.price_per_gpu_hour:.4g}", f"{o.billing_unit_s}s/{o.min_billed_s}s",
             _rate_cell(o), _age_cell(o)] for o in offers]
    out = console()
    table, dropped = fitted_table(out, COLUMNS, rows, DROP_ORDER, right=("n", "interrupt/h", "age"),
                                  title=f"{len(offers)} of {total} offers")
    out.print(table)
    if dropped:
        out.print(left_out(dropped), soft_wrap=True)
    out.print("interrupt/h: the rate `plan` prices with (the middle of its range; * assumed); --json gives "
              "each range and its source", soft_wrap=True)
    out.print("age: days since the date each row's source gives (undated: none given; ~ derived or the low end of a "
              "range); refresh with `cheaptune prices refresh` or your own CSV", soft_wrap=True)
    out.print(_sources_line(sources), soft_wrap=True)


@prices_app.command("import-skypilot")
def import_skypilot(
    directory: Path = typer.Argument(..., parser=path, help="A SkyPilot catalog folder, e.g. ~/.sky/catalogs (v8/<cloud>/vms.csv)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Copy a SkyPilot catalog into cheaptune's state; its clouds then replace the bundled prices."""
    from cheaptune.catalog.sources.skypilot import copy_catalogs

    target, results = copy_catalogs(directory.expanduser())
    report = {
        cloud: {"kept": len(r.offers), "dropped": dict(r.dropped), "unknown_gpus": dict(r.unknown_gpus),
                "fixed": dict(r.fixed)}
        for cloud, r in results.items()
    }
    if json_out:
        from cheaptune.cli.output import emit_json

        emit_json({"copied_to": str(target), "clouds": report})
        return
    typer.echo(f"imported {len(report)} cloud catalog(s) into {target}")
    for cloud, r in report.items():
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(r["dropped"].items())) or "none"
        typer.echo(f"  {cloud}: kept {r['kept']} offers; dropped rows: {reasons}")


@prices_app.command("refresh")
def refresh(
    json_out: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    progress: bool = typer.Option(False, "--progress", help="Say what is being fetched on stderr even under --json "
                                  "or when stderr is not a terminal (shown by default in a terminal)."),
) -> None:
    """Fetch current offers through gpuhunt into a dated cache that `plan` then prefers (needs the `live` extra installed)."""
    from cheaptune.catalog.live import refresh as fetch_and_cache
    from cheaptune.catalog.sources.live_cache import cache_dir
    from cheaptune.cli.output import progress_wanted, status

    with status(progress_wanted(progress, json_out), "fetching current offers from every provider through gpuhunt"):
        meta, results = fetch_and_cache()
    if json_out:
        from cheaptune.cli.output import emit_json

        emit_json({"cache": str(cache_dir()), **meta})
        return
    typer.echo(f"price cache {cache_dir()} written {meta['fetched_at']}")
    for provider, r in sorted(results.items()):
        if r.error:
            before = meta["providers"][provider].get("fetched_at")
            kept = f"previous rows kept (fetched {before})" if before else "no previous rows"
            typer.echo(f"  {provider}: FAILED ({r.error}); {kept}")
            continue
        reasons = ", ".join(f"{n} {why}" for why, n in sorted(r.dropped.items())) or "none"
        typer.echo(f"  {provider}: {len(r.offers)} offers; dropped rows: {reasons}")


def register(app: typer.Typer) -> None:
    app.add_typer(prices_app, name="prices")
