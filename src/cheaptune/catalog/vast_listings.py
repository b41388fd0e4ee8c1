"""Vast.ai marketplace listings: gpuhunt's query and GPU-name mapping, plus the listing facts it drops.

A Vast offer is one host's machine. gpuhunt's VastAIProvider keeps its price, GPU and place but not what
says how far to trust the machine; we send the same query (gpuhunt builds the body) and keep, per
listing, its reliability score, host verification, download bandwidth and disk. Prices follow gpuhunt's
rule: the hourly base price plus the listing's disk at its storage rate, and an interruptible row at the
minimum bid where the listing takes bids.
"""

from __future__ import annotations

from typing import Any

HOURS_PER_MONTH = 30 * 24  # Vast's storage_cost is USD per GB-month; gpuhunt spreads it over 720 h


def _facts(raw: dict[str, Any]) -> dict[str, Any]:
    reliability = raw.get("reliability2", raw.get("reliability"))
    return {
        "reliability": None if reliability is None else float(reliability),
        "verified": raw.get("verification") == "verified" or raw.get("verified") is True,
        "inet_down_mbps": raw.get("inet_down"),
        "disk_gb": raw.get("disk_space"),
    }


def _items(raw: dict[str, Any]) -> list[Any]:
    from gpuhunt import AcceleratorVendor, CatalogItem, correct_gpu_memory_gib
    from gpuhunt.providers.vastai import get_dstack_gpu_name, get_location

    name = get_dstack_gpu_name(str(raw["gpu_name"]))
    disk = float(raw["disk_space"])
    disk_cost = disk * float(raw["storage_cost"]) / HOURS_PER_MONTH
    base = CatalogItem(provider="vastai", instance_name=str(raw["id"]), location=get_location(raw.get("geolocation")),
                       price=round(float(raw["dph_base"]) + disk_cost, 5), cpu=int(raw.get("cpu_cores_effective") or 0),
                       memory=float(raw.get("cpu_ram") or 0) / 1000, gpu_count=int(raw["num_gpus"]), gpu_name=name,
                       gpu_memory=float(correct_gpu_memory_gib(name, float(raw["gpu_ram"]))), spot=False,
                       disk_size=disk, gpu_vendor=AcceleratorVendor.NVIDIA if raw["num_gpus"] else None)
    items = [base]
    if raw.get("min_bid"):
        items.append(CatalogItem(**{**base.__dict__, "price": round(float(raw["min_bid"]) + disk_cost, 5), "spot": True}))
    return items


def fetch_listings(timeout_s: float) -> tuple[list[Any], dict[str, dict[str, Any]], int]:
    """(gpuhunt CatalogItems, {listing id: facts}, malformed offers skipped) from one search request."""
    import requests
    from gpuhunt import QueryFilter
    from gpuhunt.providers import vastai

    body = vastai.VastAIProvider().make_filters(QueryFilter())
    resp = requests.post(vastai.bundles_url, json=body, timeout=timeout_s)
    resp.raise_for_status()
    items: list[Any] = []
    facts: dict[str, dict[str, Any]] = {}
    malformed = 0
    for raw in resp.json().get("offers", []):
        try:
            items += _items(raw)
            facts[str(raw["id"])] = _facts(raw)
        except (KeyError, TypeError, ValueError):
            malformed += 1
    return items, facts, malformed
