"""Every row of every bundled data file names its source and the date that source gives, honestly.

A row's `source_date` (prices.csv: `date`) is the source's own date or `undated`, never later than the
day it was read; a file-level date may not speak for its rows; rows recalled from memory are gone, and a GPU
figure no read source gives is listed under `assumed`.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import yaml

from cheaptune.catalog import DATA_DIR, REF_PATTERN
from cheaptune.catalog.prices import BASES, UNDATED
from cheaptune.catalog.sources.bundled import PRICES_FILE, bundled_offers
from cheaptune.catalog.sources.skypilot import FALLBACK

ROOT = Path(__file__).resolve().parents[2]
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
REF = re.compile(REF_PATTERN)
FILE_DATES = ("retrieved", "date", "read", "source_date")  # top-level keys that would date a whole file


def _not_after(source_date: str, read: str, where: str) -> None:
    assert source_date == UNDATED or DATE.match(source_date), f"{where}: source date {source_date!r}"
    if DATE.match(read) and source_date != UNDATED:
        assert source_date <= read, f"{where}: the source's date {source_date} is after the day it was read {read}"


def test_every_price_row_has_a_url_or_commit_source_and_an_honest_date():
    offers = bundled_offers()
    assert offers
    for o in offers:
        where = f"{o.provider}/{o.kind}/{o.gpu}x{o.gpu_count}/{o.instance_type}"
        assert REF.match(o.source), f"{where}: source {o.source!r} is not a URL or repo@commit:path"
        assert DATE.match(o.read), f"{where}: read {o.read!r}"
        assert o.basis in BASES, where
        _not_after(o.date, o.read, where)
        assert "[MEM]" not in o.source + o.note and "recalled" not in o.source + o.note, f"{where}: from memory"
    # the SkyPilot catalog files carry no date, so their rows say so instead of taking the day they were read
    catalog = [o for o in offers if o.source.startswith("skypilot-org/skypilot-catalog@")]
    assert catalog and all(o.date == UNDATED for o in catalog)


def test_no_data_file_keeps_a_fact_marked_as_recalled_from_memory():
    """[MEM] marked a figure written from memory; an unsourced fact is unknown and takes the fallback instead."""
    marked = [p.name for p in sorted(DATA_DIR.iterdir()) if p.is_file() and "[MEM" in p.read_text()]
    assert not marked, f"{marked}: source each [MEM] fact or remove it (prices.md: 'Provider-wide facts')"


def test_provider_wide_facts_without_a_source_take_the_pessimistic_fallback():
    """prices.md says which facts no source gives; prices.csv must price them as FALLBACK does, not as a guess."""
    unknown = {"cudo", "fluidstack"}  # no billing, storage or egress page found
    rows = [o for o in bundled_offers() if o.provider in unknown]
    assert {o.provider for o in rows} == unknown
    for o in rows:
        assert (o.billing_unit_s, o.min_billed_s, o.storage_gb_month, o.egress_per_gb) == (
            FALLBACK["billing_unit_s"], FALLBACK["min_billed_s"], FALLBACK["storage_gb_month"],
            FALLBACK["egress_per_gb"]), f"{o.provider}/{o.gpu}"
    # the granularity is not stated for paperspace, storage is not priced for vast and vultr
    for o in bundled_offers():
        if o.provider == "paperspace":
            assert (o.billing_unit_s, o.min_billed_s) == (FALLBACK["billing_unit_s"], FALLBACK["min_billed_s"])
        if o.provider in ("vast", "vultr"):
            assert o.storage_gb_month == FALLBACK["storage_gb_month"], f"{o.provider}/{o.gpu}"


def test_the_price_file_header_does_not_date_its_rows():
    head = [ln for ln in PRICES_FILE.read_text().splitlines() if ln.startswith("#")]
    assert head and not any(re.search(r"\d{4}-\d{2}-\d{2}", ln) for ln in head), head


def test_derived_and_range_low_prices_are_labelled():
    by = {(o.provider, o.kind, o.gpu, o.gpu_count): o for o in bundled_offers()}
    assert by["vast", "spot", "H100", 1].basis == "derived"  # 50% of the on-demand row
    assert by["aws", "spot", "A100", 8].basis == "range-low"  # the cheapest zone of a $2.47-8.19 range
    assert by["lambda", "on-demand", "H100", 8].basis == "quoted"


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize(("path", "key"), [
    (DATA_DIR / "gpus.yaml", "gpus"),
    (DATA_DIR / "interruption.yaml", "rates"),
    (DATA_DIR / "kernels.yaml", "kernels"),
])
def test_every_yaml_row_carries_its_own_source_and_dates(path, key):
    doc = _yaml(path)
    assert not set(FILE_DATES) & set(doc), f"{path.name}: a file-level date speaks for every row"
    for row in doc[key]:
        where = f"{path.name}: {row.get('name') or row.get('provider') or row.get('arch')}"
        assert "http" in row["source"] or REF.search(row["source"]), where
        read = str(row["read"])
        assert DATE.match(read), f"{where}: read {read!r} (a row recalled from memory must be checked or go)"
        assert "recalled" not in str(row.get("checked", "")), f"{where}: checked says recalled"
        _not_after(str(row["source_date"]), read, where)


def test_every_model_entry_names_the_copy_it_was_checked_against_and_its_dates():
    """models.yaml's `source` is the hub config no build machine can read; `checked` names the copy that was read."""
    doc = _yaml(DATA_DIR / "models.yaml")
    assert not set(FILE_DATES) & set(doc), "models.yaml: a file-level date speaks for every row"
    assert "recalled" not in (DATA_DIR / "models.yaml").read_text(), "models.yaml: an entry is still from memory"
    for row in doc["models"]:
        where = f"models.yaml: {row['id']}"
        assert {"source_date", "read"} <= set(row), f"{where}: needs its own source_date and read"
        checked = str(row["checked"])
        assert REF.search(checked) or checked.startswith("not verified"), f"{where}: checked names no source"
        assert DATE.match(str(row["read"])), f"{where}: read {row['read']!r}"
        _not_after(str(row["source_date"]), str(row["read"]), where)


def test_a_gpu_figure_no_read_source_gives_is_marked_assumed_and_shown():
    """Unsourced figures stay usable but visible: listed under `assumed`, loaded by the catalog, in `gpus`."""
    from cheaptune.catalog.gpus import list_gpus

    specs = {g.name: g for g in list_gpus()}
    assert set(specs["RTXA5000"].assumed) == {"memory_gib", "bf16_tflops", "fp16_tflops", "fp32_tflops",
                                             "mem_bw_gbs"}  # no page with its figures was found
    assert specs["H100"].assumed == () and specs["H100"].fp32_tflops == 66.9  # glennklockwood, not 67.0
    assert "fp32_tflops" in specs["MI300X"].assumed


def test_hosted_prices_each_have_a_dated_source():
    doc = _yaml(DATA_DIR / "hosted.yaml")
    assert not set(FILE_DATES) & set(doc)
    sources = doc["sources"]
    assert {o["provider"] for o in doc["offers"]} == set(sources)
    for name, s in sources.items():
        assert REF.search(s["source"]), name
        _not_after(str(s["source_date"]), str(s["read"]), name)


def test_overheads_entries_are_dated_one_by_one():
    doc = _yaml(ROOT / "src/cheaptune/estimate/data/overheads.yaml")
    assert not set(FILE_DATES) & set(doc)
    for name, entry in doc.items():
        _not_after(str(entry["source_date"]), str(entry["read"]), name)
        assert entry["source"], name


@pytest.mark.parametrize("path", sorted((ROOT / "bench/data").glob("*.csv")), ids=lambda p: p.name)
def test_public_measurement_rows_date_their_source_apart_from_the_read(path):
    """Every measurement row says the date its source gives (or undated), never later than the day it was read."""
    with path.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    assert rows and "source_date" in rows[0], path.name
    for r in rows:
        where = f"{path.name}: {r.get('id')}"
        assert r.get("source") or r.get("url"), where
        _not_after(r["source_date"], r.get("retrieved") or "", where)


SRC = ROOT / "src/cheaptune"
SOURCE_DAY = re.compile(r"^\d{4}-\d{2}(-\d{2})?$")  # some sources give only the month
CONSTANT_FILES = [SRC / "estimate/data" / n for n in ("steptime.yaml", "speedups.yaml", "startup.yaml", "sharding.yaml",
                                                      "versions.yaml", "profiles.yaml", "grpo.yaml", "mfu_ceilings.yaml")]
CONSTANT_FILES += [SRC / "launch/data/skypilot_names.yaml", SRC / "data/token_estimate.yaml"]


def _sourced(node, where: str):
    """Every mapping in a YAML tree that names a `source`, with where it sits."""
    if isinstance(node, dict):
        if "source" in node:
            yield where, node
        for key, value in node.items():
            yield from _sourced(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _sourced(value, f"{where}[{i}]")


@pytest.mark.parametrize("path", CONSTANT_FILES, ids=lambda p: p.name)
def test_every_sourced_constant_dates_its_source_apart_from_the_read(path):
    """The estimators' and launcher's constants: no file-level date; each entry that names a source says the
    date that source gives (or undated) and the day it was read, never the other way round."""
    doc = _yaml(path)
    assert not set(FILE_DATES) & set(doc), f"{path.name}: a file-level date speaks for every entry"
    entries = list(_sourced(doc, path.name))
    assert entries, f"{path.name}: no entry names its source"
    for where, entry in entries:
        assert "source_date" in entry and "read" in entry, f"{where}: source_date and read are missing"
        read, source_date = str(entry["read"]), str(entry["source_date"])
        assert DATE.match(read), f"{where}: read {read!r}"
        assert source_date == UNDATED or SOURCE_DAY.match(source_date), f"{where}: source date {source_date!r}"
        assert source_date == UNDATED or source_date <= read, f"{where}: source date {source_date} after read {read}"
