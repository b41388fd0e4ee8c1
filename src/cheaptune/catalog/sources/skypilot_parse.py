"""Parse one SkyPilot `vms.csv` into Offers, by header name, dropping (and counting) bad rows.

Quirks handled (docs/sources.md#skypilot-catalog-quirks): column order differs per cloud; GCP prices a GPU in
an accelerator row with no InstanceType, added here to its host row; 700.0 is a placeholder; spot
above on-demand is invalid; spot equal to on-demand (or 0) means no spot price; AWS lists one row
per zone (we keep the cheapest per instance and region); Azure's ND96isr_H100_v5 says 12 GPUs (8).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path

from cheaptune.catalog.prices import Offer, read_csv_rows
from cheaptune.errors import BadInput

REQUIRED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice", "Region")
PLACEHOLDER_PRICE = 700.0
MIB_PER_GIB = 1024
MIN_PLAUSIBLE_GIB = 4.0  # below this GpuInfo memory is a unit mix-up (RunPod GB, Lambda per-GPU)
GPU_COUNT_FIXES = {("azure", "Standard_ND96isr_H100_v5"): 8}
# Boards SkyPilot names by family only: the NCads H100 v5 VMs "are powered by NVIDIA H100 NVL GPU"
# (MicrosoftDocs/azure-docs@21f95353:articles/virtual-machines/sizes/gpu-accelerated/includes/
# ncadsh100v5-series-summary.md, ms.date 07/31/2024).
GPU_BOARD_FIXES = {("azure", "Standard_NC40ads_H100_v5"): "H100-NVL", ("azure", "Standard_NC80adis_H100_v5"): "H100-NVL"}
# GCP accelerator (name, count) -> host machine type; {n} is the GPU count.
GCP_HOSTS = {
    "A100": "a2-highgpu-{n}g",
    "A100-80GB": "a2-ultragpu-{n}g",
    "H100": "a3-highgpu-{n}g",
    "H100-MEGA": "a3-megagpu-{n}g",
    "H200": "a3-ultragpu-{n}g",
    "B200": "a4-highgpu-{n}g",
}
GCP_L4_HOSTS = {1: "g2-standard-4", 2: "g2-standard-24", 4: "g2-standard-48", 8: "g2-standard-96"}


@dataclass
class ImportResult:
    offers: list[Offer] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)
    unknown_gpus: Counter = field(default_factory=Counter)
    fixed: Counter = field(default_factory=Counter)


def _price(raw: str, col: str, where: str) -> float | None:
    raw = (raw or "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        raise BadInput(f"{where}: column {col}: expected a number, got {raw!r}") from None


def _memory_gib(gpu_info: str, count: float) -> float | None:
    """Per-GPU memory from GpuInfo's TotalGpuMemoryInMiB, when it is plausible."""
    try:
        info = ast.literal_eval(gpu_info) if gpu_info.strip().startswith("{") else None
    except (ValueError, SyntaxError):
        return None
    total = info.get("TotalGpuMemoryInMiB") if isinstance(info, dict) else None
    if not isinstance(total, (int, float)) or count <= 0:
        return None
    per_gpu = total / count / MIB_PER_GIB
    return per_gpu if per_gpu >= MIN_PLAUSIBLE_GIB else None


def _form(instance_type: str) -> str:
    """A board form factor named in the instance type ('pcie', 'nvl', 'sxm'), else ''."""
    for token in re.split(r"[^a-z0-9]+", instance_type.lower()):
        if token in ("pcie", "nvl") or token.startswith("sxm"):
            return token
    return ""


def _kind(cloud: str, instance_type: str) -> str:
    if cloud == "runpod":
        upper = instance_type.upper()
        return "community" if upper.endswith("COMMUNITY") else "secure" if upper.endswith("SECURE") else "on-demand"
    return "on-demand"


def _gcp_host_type(gpu_name: str, count: int) -> str | None:
    if gpu_name == "L4":
        return GCP_L4_HOSTS.get(count)
    pattern = GCP_HOSTS.get(gpu_name)
    return pattern.format(n=count) if pattern else None


def parse_vms_csv(path: Path, cloud: str, defaults) -> ImportResult:
    """Offers of one cloud's vms.csv; `defaults(provider, kind, gpu)` fills billing/storage/egress/spot facts."""
    header, rows = read_csv_rows(path)
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise BadInput(f"{path}:1: missing column(s) {', '.join(missing)}; is this a SkyPilot vms.csv?")
    from cheaptune.catalog.gpus import normalize_gpu_name

    result = ImportResult()
    stamp = date.fromtimestamp(path.stat().st_mtime).isoformat()
    hosts: dict[tuple[str, str], list[tuple[str, float | None, float | None]]] = {}
    if cloud == "gcp":
        for line, row in rows:
            if row.get("InstanceType") and not row.get("AcceleratorName"):
                od = _price(row.get("Price", ""), "Price", f"{path}:{line}")
                sp = _price(row.get("SpotPrice", ""), "SpotPrice", f"{path}:{line}")
                hosts.setdefault((row["InstanceType"], row["Region"]), []).append((row.get("AvailabilityZone", ""), od, sp))
    best: dict[tuple, Offer] = {}
    zones: dict[tuple, set[float]] = {}  # every price seen per offer key (one per availability zone)
    for line, row in rows:
        where = f"{path}:{line}"
        instance, accel = (row.get("InstanceType") or "").strip(), (row.get("AcceleratorName") or "").strip()
        if not accel:
            if not (cloud == "gcp" and instance):
                result.dropped["non-GPU row"] += 1
            continue
        raw_count = _price(row.get("AcceleratorCount", ""), "AcceleratorCount", where)
        count = GPU_COUNT_FIXES.get((cloud, instance), raw_count)
        if count != raw_count:
            result.fixed[f"{instance}: GPU count {raw_count:g} -> {count}"] += 1
        if count is None or count < 1 or count != int(count):
            result.dropped["fractional or missing GPU count"] += 1
            continue
        count = int(count)
        od, sp = _price(row.get("Price", ""), "Price", where), _price(row.get("SpotPrice", ""), "SpotPrice", where)
        if od == PLACEHOLDER_PRICE or sp == PLACEHOLDER_PRICE:
            result.dropped["700.0 placeholder price"] += 1
            continue
        if sp is not None and od is not None and sp > od:  # checked before GCP adds the host's price
            result.dropped["spot above on-demand"] += 1
            sp = None
        if cloud == "gcp" and not instance:
            instance = _gcp_host_type(accel, count) or ""
            host = hosts.get((instance, row["Region"]), [])
            zone = [h for h in host if h[0] == row.get("AvailabilityZone", "")] or host
            if not zone:
                result.dropped["GCP accelerator without a host row"] += 1
                continue
            h_od, h_sp = zone[0][1], zone[0][2]
            od = od + h_od if od is not None and h_od is not None else None
            sp = sp + h_sp if sp is not None and h_sp is not None else None
        form = _form(instance)
        gpu = GPU_BOARD_FIXES.get((cloud, instance)) or normalize_gpu_name(f"{accel} {form}".strip(), memory_gib=_memory_gib(row.get("GpuInfo", ""), count))
        if gpu is None:
            result.dropped["unknown GPU"] += 1
            result.unknown_gpus[accel] += 1
            continue
        if od is None or od <= 0:
            result.dropped["empty on-demand price"] += 1
            od = None
        if sp is not None and od is not None and sp == od:
            result.dropped["spot equal to on-demand (no spot price)"] += 1
            sp = None
        elif sp is not None and sp <= 0:
            sp = None
        region = row["Region"].strip() or "any"
        source = f"skypilot catalog {path}"
        for kind, price in ((_kind(cloud, instance), od), ("spot", sp)):
            if price is None:
                continue
            facts = defaults(cloud, kind, gpu)
            offer = Offer(cloud, kind, gpu, count, instance, region, round(price, 6), **facts, source=source, date=stamp,
                          read=stamp)
            key = offer.key
            zones.setdefault(key, set()).add(offer.price_per_hour)
            if key not in best or offer.price_per_hour < best[key].price_per_hour:
                best[key] = offer
    # a region's zones priced apart collapse to the cheapest: that price is the low end of a range, and says so
    result.offers = [o if len(zones[k]) == 1 else replace(
        o, basis="range-low", note=f"cheapest of {len(zones[k])} zone prices (${min(zones[k]):g}-${max(zones[k]):g})")
        for k, o in best.items()]
    return result
