"""Current offers through gpuhunt (dstack's GPU offer catalog), mapped to our Offer rows.

gpuhunt publishes one catalog per "offline" provider (AWS, Azure, GCP, Lambda, RunPod, OCI, ...) and
queries the "online" ones live: Vast.ai without credentials, the others with the user's (each provider's
own environment variables, read by its `from_env`). Every provider we could not reach is reported with
why (no credentials, not in this gpuhunt, an error). It carries prices, GPUs, regions and
spot flags; billing unit, minimum, storage and egress are ours (the bundled snapshot's rows for the same
provider, see sources/skypilot.provider_defaults), and spot interruption comes from interruption.yaml.
Bad rows are dropped and counted by reason, never planned on.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from cheaptune.catalog.prices import Offer

HTTP_TIMEOUT_S = 30.0  # gpuhunt's catalog download sets none; we bound every socket it opens
PROVIDER_NAMES = {"lambdalabs": "lambda", "vastai": "vast"}  # gpuhunt's name -> ours (SkyPilot's)
# gpuhunt's ONLINE_PROVIDERS (gpuhunt _internal/catalog.py; a test keeps this equal to the installed one):
# vastai needs no credentials, the others read theirs from the environment
ONLINE = ("crusoe", "daytona", "digitalocean", "hotaisle", "jarvislabs", "lium", "seeweb", "vastai", "vultr")
# providers whose gpuhunt spot price is the low end of what a rental pays (gpuhunt 0.1.34): AWS keeps the
# cheapest zone of a region (providers/aws.py: min(zone_prices)); Vast.ai's interruptible row is the listing's
# minimum bid plus disk (providers/vastai.py: min_bid + disk_cost), and a rental pays its bid, which others outbid
LOW_END_SPOT = {"aws": "gpuhunt keeps the cheapest zone of the region",
                "vast": "the listing's minimum bid: an interruptible rental pays its own bid, which others may outbid"}


@dataclass
class ProviderResult:
    """What one provider gave: its offers, rows dropped by reason, or why it failed."""

    offers: list[Offer] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)
    error: str | None = None


class _Collect(logging.Handler):
    """gpuhunt logs (not raises) a provider that failed to load and a malformed row it skipped."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _reason(err: BaseException | None) -> str:
    if err is None:
        return "unknown error"
    return f"{type(err).__name__}: {err}".strip().rstrip(":")


def to_offers(items: Iterable[Any], provider: str, source: str, date: str, defaults: Any) -> ProviderResult:
    """gpuhunt CatalogItems of one provider -> Offers, dropping bad rows with a counted reason."""
    from cheaptune.catalog.gpus import normalize_gpu_name

    out = ProviderResult()
    seen: set[tuple] = set()
    for item in items:
        price = float(item.price) if item.price is not None else math.nan
        if not item.gpu_count or not item.gpu_name:
            out.dropped["no GPU"] += 1
            continue
        if not math.isfinite(price) or price <= 0:
            out.dropped["zero, negative or missing price"] += 1
            continue
        gpu = normalize_gpu_name(item.gpu_name, item.gpu_memory)
        if gpu is None:
            out.dropped["unknown GPU"] += 1
            continue
        kind = "spot" if item.spot else "on-demand"
        key = (kind, gpu, item.gpu_count, item.location, item.instance_name)
        if key in seen:
            out.dropped["duplicate row"] += 1
            continue
        seen.add(key)
        facts = defaults(provider, kind, gpu)
        low = LOW_END_SPOT.get(provider, "") if item.spot else ""
        out.offers.append(Offer(provider=provider, kind=kind, gpu=gpu, gpu_count=int(item.gpu_count),
                                instance_type=item.instance_name, region=item.location or "any",
                                price_per_hour=price, source=source, date=date, read=date, **facts,
                                basis="range-low" if low else "quoted", note=low))
    return out


def fetch(date: str, online: Iterable[str] | None = None) -> dict[str, ProviderResult]:
    """Every gpuhunt provider we can reach: {our provider name: result}; failures say why."""
    import gpuhunt

    from cheaptune.catalog.sources.bundled import bundled_offers
    from cheaptune.catalog.sources.skypilot import provider_defaults

    defaults = provider_defaults(bundled_offers())
    collect = _Collect()
    log = logging.getLogger("gpuhunt")
    log.addHandler(collect)
    old_timeout = socket.getdefaulttimeout()
    socket.setdefaulttimeout(HTTP_TIMEOUT_S)
    results: dict[str, ProviderResult] = {}
    try:
        catalog = gpuhunt.Catalog(balance_resources=False, auto_reload=False)
        with contextlib.suppress(gpuhunt.GPUHuntError):  # all offline providers failed: reported from the log
            catalog.load()
        for name in ONLINE if online is None else online:
            if name == "vastai":
                results["vast"] = _vast(date, defaults)
            else:
                results[PROVIDER_NAMES.get(name, name)] = _online(catalog, name, date, defaults)
        for name in catalog.catalog:
            ours = PROVIDER_NAMES.get(name, name)
            try:
                items = catalog.query(provider=name)
            except Exception as err:  # noqa: BLE001 - a provider's failure is reported, not fatal
                results[ours] = ProviderResult(error=_reason(err))
                continue
            version = catalog.catalog[name].version
            results[ours] = to_offers(items, ours, f"gpuhunt {name} catalog {version}", date, defaults)
        for record in collect.records:
            if not record.args or not isinstance(record.msg, str):
                continue
            ours = PROVIDER_NAMES.get(str(record.args[0]), str(record.args[0]))
            if record.msg.startswith("Skipping malformed row") and ours in results:
                results[ours].dropped["malformed row (truncated file?)"] += 1
            elif record.msg.startswith("Failed to load"):
                err = record.exc_info[1] if record.exc_info else None
                results.setdefault(ours, ProviderResult(error=_reason(err)))
    finally:
        socket.setdefaulttimeout(old_timeout)
        log.removeHandler(collect)
    return results


def _online(catalog: Any, name: str, date: str, defaults: Any) -> ProviderResult:
    """A credentialed online provider, built by its own `from_env`; why not, when it cannot be queried."""
    import importlib

    import gpuhunt

    try:
        module = importlib.import_module(f"gpuhunt.providers.{name}")
    except ImportError:
        return ProviderResult(error="not queried: this gpuhunt version has no such provider")
    cls = next((c for c in vars(module).values() if isinstance(c, type) and getattr(c, "NAME", None) == name
                and hasattr(c, "from_env")), None)
    if cls is None:
        return ProviderResult(error="not queried: its gpuhunt provider cannot be built from the environment")
    try:
        provider = cls.from_env()
    except gpuhunt.MissingCredsError as err:
        return ProviderResult(error=f"not queried: no credentials ({err})")
    except Exception as err:  # noqa: BLE001 - a provider's failure is reported, not fatal
        return ProviderResult(error=_reason(err))
    catalog.add_provider(provider)
    try:
        items = catalog.query(provider=name)
    except Exception as err:  # noqa: BLE001 - a provider's failure is reported, not fatal
        return ProviderResult(error=_reason(err))
    return to_offers(items, PROVIDER_NAMES.get(name, name), f"gpuhunt {name} live query", date, defaults)


def _vast(date: str, defaults: Any) -> ProviderResult:
    """Vast.ai's marketplace, live, each offer carrying its listing's facts (catalog/vast_listings.py)."""
    from cheaptune.catalog.vast_listings import fetch_listings

    try:
        items, facts, malformed = fetch_listings(HTTP_TIMEOUT_S)
    except Exception as err:  # noqa: BLE001 - a provider's failure is reported, not fatal
        return ProviderResult(error=_reason(err))
    res = to_offers(items, "vast", "gpuhunt vastai live search (listing facts kept)", date, defaults)
    res.offers = [replace(o, listing=facts.get(o.instance_type)) for o in res.offers]
    if malformed:
        res.dropped["malformed row (truncated file?)"] += malformed
    return res


def refresh(fetched_at: datetime | None = None,
            online: Iterable[str] | None = None) -> tuple[dict[str, Any], dict[str, ProviderResult]]:
    """Fetch every provider (the offline catalogs and the `online` ones, default ONLINE) and write the dated
    cache; (meta, results). See sources/live_cache.py."""
    from cheaptune.catalog.sources.live_cache import write_cache
    from cheaptune.errors import BadInput

    try:
        import gpuhunt  # noqa: F401
    except ImportError:
        raise BadInput("live prices need gpuhunt: pip install 'cheaptune[live]' (or use --prices bundled)") from None
    now = fetched_at or datetime.now(timezone.utc)
    results = fetch(now.date().isoformat(), online)
    return write_cache(results, now.isoformat(timespec="seconds")), results
