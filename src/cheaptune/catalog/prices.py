"""Price catalog: the `Offer` row, its CSV format, and the filters and sorts over offers.

Sources live in `catalog/sources/` (one module each) and import the row type from here;
`catalog.sources.load_offers` applies them in priority order: the bundled snapshot is the base,
SkyPilot catalogs replace whole providers (so a plan agrees with what SkyPilot will pick), and a
user CSV overrides single rows. Filters are pure functions; the core re-applies them whatever a
source did.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field, fields
from datetime import date
from pathlib import Path

from cheaptune.errors import BadInput

KINDS = ("on-demand", "spot", "community", "secure")
SORTS = ("price", "gpu", "provider", "memory")
SECONDS_PER_HOUR = 3600
UNDATED = "undated"  # a source that gives no date: the price's age is unknown, so it counts as old
# how the price was had: read as published, derived from another figure (spot as a share of on-demand),
# or the low end of a published range (the cheapest zone); only "quoted" is a price someone offers as is
BASES = ("quoted", "derived", "range-low")
OPTIONAL_COLUMNS = ("basis", "read", "note")  # a user CSV or an older cache may leave them out
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# The most a row may state: the ranges a plan file holds its offer to (plan.planfile), so any offer read here
# can be saved in a plan (a min_billed_s beyond them ended `plan --save` in a traceback).
MAX_GPU_COUNT = 4096
MAX_PRICE_PER_HOUR = 1e5
MAX_BILLING_UNIT_S = 86_400  # a day
MAX_MIN_BILLED_S = 86_400 * 31  # a month


@dataclass(frozen=True)
class Offer:
    """One rentable configuration at one price (per instance, all its GPUs), with its billing facts."""

    provider: str
    kind: str
    gpu: str
    gpu_count: int
    instance_type: str
    region: str
    price_per_hour: float
    billing_unit_s: int
    min_billed_s: int
    storage_gb_month: float
    egress_per_gb: float
    interruption_per_hour: float | None
    notice_s: int
    source: str  # a URL or repo@commit:path
    date: str  # the date the source gives for the price (YYYY-MM-DD), or UNDATED; never the day we read it
    basis: str = "quoted"  # one of BASES
    read: str = ""  # the day the source was read (YYYY-MM-DD), empty when not recorded
    note: str = ""  # caveats in words (which zone, which board, labels the source mixes up)
    # a marketplace listing's facts (reliability, verified, inet_down_mbps, disk_gb): one machine, not a
    # product line; only live sources know them, so they are not a CSV column
    listing: dict | None = field(default=None, compare=False, repr=False)

    @property
    def spot(self) -> bool:
        return self.kind == "spot"

    @property
    def price_per_gpu_hour(self) -> float:
        return self.price_per_hour / self.gpu_count

    @property
    def dated(self) -> bool:
        return self.date != UNDATED

    @property
    def sort_date(self) -> str:
        """The date for 'newest' comparisons: an undated row is older than any dated one."""
        return self.date if self.dated else ""

    @property
    def key(self) -> tuple[str, str, str, int, str, str]:
        """What a user CSV row must match to override this offer."""
        return (self.provider, self.kind, self.gpu, self.gpu_count, self.region, self.instance_type)


COLUMNS = tuple(f.name for f in fields(Offer) if f.name != "listing")


def date_span(offers: list[Offer]) -> str | None:
    """'2026-03-10..2026-10-07, 12 undated': the price dates a source holds, not one date for them all."""
    days = sorted({o.date for o in offers if o.dated})
    undated = sum(not o.dated for o in offers)
    span = (days[0] if len(days) == 1 else f"{days[0]}..{days[-1]}") if days else ""
    parts = [p for p in (span, f"{undated} undated" if undated else "") if p]
    return ", ".join(parts) or None


def _number(raw: str, col: str, where: str, *, integer: bool = False, minimum: float = 0.0,
            maximum: float = math.inf) -> float:
    what = "a whole number" if integer else "a number"
    try:
        value = float(raw)
    except ValueError:
        raise BadInput(f"{where}: column {col}: expected {what}, got {raw!r}") from None
    if not math.isfinite(value) or value < minimum or value > maximum or (integer and value != int(value)):
        upto = (f" and <= {int(maximum)}" if integer else f" and <= {maximum:g}") if math.isfinite(maximum) else ""
        raise BadInput(f"{where}: column {col}: expected {what} >= {minimum:g}{upto}, got {raw!r}")
    return int(value) if integer else value


def _is_date(text: str) -> bool:
    """YYYY-MM-DD and a real day: '2026-13-45' matched the pattern and was then read as undated, silently."""
    if not _DATE.match(text):
        return False
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def parse_row(row: dict[str, str], where: str) -> Offer:
    """One snapshot-format row -> Offer; any bad cell is ONE BadInput line naming file:line and column."""
    from cheaptune.catalog.gpus import list_gpus, normalize_gpu_name
    from cheaptune.util.names import did_you_mean

    cell = {c: (row.get(c) or "").strip() for c in COLUMNS}
    for col in ("provider", "kind", "gpu", "instance_type", "region", "source", "date"):
        if not cell[col]:
            raise BadInput(f"{where}: column {col}: expected a value, got an empty cell")
    if cell["kind"] not in KINDS:
        raise BadInput(f"{where}: column kind: expected one of {', '.join(KINDS)}, got {cell['kind']!r}")
    gpu = normalize_gpu_name(cell["gpu"])
    if gpu is None:
        hint = did_you_mean(cell["gpu"], [g.name for g in list_gpus()]) or "; run `cheaptune gpus` for the list"
        raise BadInput(f"{where}: column gpu: unknown GPU {cell['gpu']!r}{hint}")
    for col in ("date", "read"):
        if cell[col] and not (_is_date(cell[col]) or (col == "date" and cell[col] == UNDATED)):
            extra = f" or {UNDATED}" if col == "date" else ""
            raise BadInput(f"{where}: column {col}: expected YYYY-MM-DD{extra}, got {cell[col]!r}")
    basis = cell["basis"] or "quoted"
    if basis not in BASES:
        raise BadInput(f"{where}: column basis: expected one of {', '.join(BASES)}, got {basis!r}")
    rate = cell["interruption_per_hour"]
    return Offer(
        provider=cell["provider"].lower(),
        kind=cell["kind"],
        gpu=gpu,
        gpu_count=int(_number(cell["gpu_count"], "gpu_count", where, integer=True, minimum=1, maximum=MAX_GPU_COUNT)),
        instance_type=cell["instance_type"],
        region=cell["region"],
        price_per_hour=_number(cell["price_per_hour"], "price_per_hour", where, minimum=1e-9,
                               maximum=MAX_PRICE_PER_HOUR),
        billing_unit_s=int(_number(cell["billing_unit_s"], "billing_unit_s", where, integer=True, minimum=1,
                                   maximum=MAX_BILLING_UNIT_S)),
        min_billed_s=int(_number(cell["min_billed_s"], "min_billed_s", where, integer=True,
                                 maximum=MAX_MIN_BILLED_S)),
        storage_gb_month=_number(cell["storage_gb_month"], "storage_gb_month", where),
        egress_per_gb=_number(cell["egress_per_gb"], "egress_per_gb", where),
        interruption_per_hour=_number(rate, "interruption_per_hour", where) if rate else None,
        notice_s=int(_number(cell["notice_s"] or "0", "notice_s", where, integer=True)),
        source=cell["source"],
        date=cell["date"],
        basis=basis,
        read=cell["read"],
        note=cell["note"],
    )


def read_csv_rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """(header, [(line number, row)]) of a CSV; '#' lines are comments; unreadable files are BadInput."""
    from cheaptune.util.files import read_text

    text = read_text(path, "price file", "fix the path, or see catalog/data/prices.csv for the format")
    blanked = "".join("\n" if ln.lstrip().startswith("#") else ln for ln in text.splitlines(keepends=True))
    reader = csv.reader(io.StringIO(blanked))
    header: list[str] | None = None
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        for cells in reader:
            if not cells or not any(c.strip() for c in cells):
                continue
            if header is None:
                header = [c.strip() for c in cells]
                continue
            if len(cells) > len(header):
                raise BadInput(f"{path}:{reader.line_num}: expected {len(header)} columns, got {len(cells)}")
            rows.append((reader.line_num, dict(zip(header, cells, strict=False))))
    except csv.Error as err:
        raise BadInput(f"{path}:{reader.line_num}: not valid CSV ({err})") from None
    if header is None:
        raise BadInput(f"{path}: empty price file; expected a header line")
    return header, rows


def read_price_csv(path: Path) -> list[Offer]:
    """Every row of a snapshot-format CSV (the bundled one or a user's)."""
    header, rows = read_csv_rows(path)
    missing = [c for c in COLUMNS if c not in header and c not in OPTIONAL_COLUMNS]
    if missing:
        raise BadInput(f"{path}:1: missing column(s) {', '.join(missing)}; expected {','.join(COLUMNS)}")
    return [parse_row(row, f"{path}:{line}") for line, row in rows]


def filter_offers(
    offers: list[Offer],
    gpu: str | None = None,
    provider: str | None = None,
    exclude_providers: list[str] | tuple[str, ...] | None = None,
    min_memory_gib: float | None = None,
    spot: bool | None = None,
    community: bool | None = None,
    max_price: float | None = None,
    sort: str = "price",
) -> list[Offer]:
    """Offers that pass every given filter, sorted (price is per instance-hour; ties by per-GPU price)."""
    from cheaptune.catalog.gpus import list_gpus, resolve_gpu

    if sort not in SORTS:
        raise BadInput(f"unknown sort {sort!r}; expected one of {', '.join(SORTS)}")
    memory = {g.name: g.memory_gib for g in list_gpus()}
    want_gpu = resolve_gpu(gpu).name if gpu else None
    excluded = {p.lower() for p in exclude_providers or ()}
    out = [
        o
        for o in offers
        if (want_gpu is None or o.gpu == want_gpu)
        and (provider is None or o.provider == provider.lower())
        and o.provider not in excluded
        and (min_memory_gib is None or memory.get(o.gpu, 0.0) >= min_memory_gib)
        and (spot is None or o.spot == spot)
        and (community is None or (o.kind == "community") == community)
        and (max_price is None or o.price_per_hour <= max_price)
    ]
    keys = {
        "price": lambda o: (o.price_per_hour, o.price_per_gpu_hour, o.provider),
        "gpu": lambda o: (o.gpu, o.price_per_hour),
        "provider": lambda o: (o.provider, o.gpu, o.price_per_hour),
        "memory": lambda o: (-memory.get(o.gpu, 0.0), o.price_per_hour),
    }
    return sorted(out, key=keys[sort])


def cheapest_per_gpu(offers: list[Offer]) -> list[Offer]:
    """The cheapest offer (per GPU-hour) for each GPU, in the order the input was sorted."""
    best: dict[str, Offer] = {}
    for o in offers:
        if o.gpu not in best or o.price_per_gpu_hour < best[o.gpu].price_per_gpu_hour:
            best[o.gpu] = o
    keep = {id(o) for o in best.values()}
    return [o for o in offers if id(o) in keep]
