"""`cheaptune prices` and `cheaptune prices import-skypilot` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FIX = Path(__file__).parent / "fixtures_prices"


@pytest.fixture(autouse=True)
def _no_sky(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CHEAPTUNE_SKY_CATALOGS", raising=False)
    monkeypatch.delenv("CHEAPTUNE_PRICES", raising=False)


def test_table_lists_filtered_offers_and_sources(run_cli):
    code, out, _ = run_cli("prices", "--gpu", "H100", "--limit", "3")
    assert code == 0
    assert "3 of" in out and "H100" in out and "A100" not in out
    assert "sources: bundled" in out and "undated" in out  # the span of the rows' own dates, not one file date
    assert "prices dated 2026-03-10..2026-10-24" in out and "read 2026-11-30" not in out


def test_each_row_shows_its_own_age(run_cli):
    from datetime import date

    from cheaptune.plan.price_age import age_days

    code, out, _ = run_cli("prices", "--provider", "nebius", "--gpu", "H100", "--spot", "never", "--json")
    rows = json.loads(out)["offers"]
    assert code == 0 and rows and all(r["price_as_of"] == "2026-10-07" for r in rows)
    assert rows[0]["price_age_days"] == age_days("2026-10-07", date.today()) and rows[0]["price_basis"] == "quoted"
    code, out, _ = run_cli("prices", "--provider", "vast", "--gpu", "H100", "--spot", "only", "--json")
    derived = next(r for r in json.loads(out)["offers"] if r["price_per_hour"] == 0.935)
    # no date of its own, and derived from the on-demand row: the table's age cell says both
    assert (derived["price_as_of"], derived["price_age_days"], derived["price_basis"]) == ("undated", None, "derived")
    from cheaptune.catalog.sources import load_offers
    from cheaptune.cli.prices import _age_cell

    vast = next(o for o in load_offers() if o.provider == "vast" and o.spot and o.price_per_hour == 0.935)
    assert _age_cell(vast) == "undated~"


def test_json_output(run_cli):
    code, out, _ = run_cli("prices", "--gpu", "A100-80GB", "--spot", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["offers"] and doc["matched"] == len(doc["offers"])
    assert all(o["gpu"] == "A100-80GB" and o["spot"] for o in doc["offers"])
    prices = [o["price_per_hour"] for o in doc["offers"]]
    assert prices == sorted(prices)
    assert doc["sources"][0]["name"] == "bundled"


def test_spot_rates_are_the_ones_the_plan_prices_with(run_cli):
    """A spot row without its own rate showed '-' although the plan priced it from interruption.yaml."""
    from cheaptune.catalog.interruption import priced_rate
    from cheaptune.catalog.sources import load_offers

    code, out, _ = run_cli("prices", "--spot", "--provider", "aws", "--json")
    spot = json.loads(out)["offers"]
    assert code == 0 and spot and any(o["interruption_per_hour"] is None for o in spot)
    by_key = {(o.provider, o.instance_type, o.region): o for o in load_offers() if o.spot}
    for o in spot:
        assert o["interruption"] == priced_rate(by_key[o["provider"], o["instance_type"], o["region"]]).to_dict()
        # a spot row without its own rate gets the table's: its URL and that source's date (data, not appended text)
        assert o["interruption"]["expected"] > 0 and "https://" in o["interruption"]["source"]
        assert o["interruption"]["source_date"] == "2025-05-01"  # AWS Spot Instance Advisor bands
    code, out, _ = run_cli("prices", "--spot", "--provider", "aws", "--limit", "1")
    row = next(line for line in out.splitlines() if "spot" in line)
    assert code == 0 and not row.rstrip(" │").endswith("-") and "the rate `plan` prices with" in out


def test_group_by_gpu(run_cli):
    _, out, _ = run_cli("prices", "--group-by-gpu", "--json")
    gpus = [o["gpu"] for o in json.loads(out)["offers"]]
    assert len(gpus) == len(set(gpus)) >= 26


def test_import_skypilot_then_list(run_cli):
    code, out, _ = run_cli("prices", "import-skypilot", str(FIX))
    assert code == 0
    assert "gcp: kept" in out and "1 700.0 placeholder price" in out
    _, out, _ = run_cli("prices", "--provider", "aws", "--json")
    doc = json.loads(out)
    assert doc["offers"] and all(o["source"].startswith("skypilot catalog") for o in doc["offers"])
    assert [s["name"] for s in doc["sources"]] == ["bundled", "skypilot"]


def test_import_skypilot_json_counts(run_cli):
    code, out, _ = run_cli("prices", "import-skypilot", str(FIX), "--json")
    doc = json.loads(out)
    assert code == 0 and doc["clouds"]["aws"]["dropped"]["spot above on-demand"] == 1
    assert doc["clouds"]["aws"]["unknown_gpus"] == {"Z9000": 1}


def test_bad_inputs_exit_2_with_one_line(run_cli, monkeypatch, tmp_path):
    code, out, err = run_cli("prices", "import-skypilot", str(FIX / "bad"))
    assert code == 2 and err.count("\n") == 1 and "vms.csv:3: column Price: expected a number" in err
    from cheaptune.util.paths import home

    assert not (home() / "skypilot-catalogs").exists()  # nothing half-imported
    bad = tmp_path / "mine.csv"
    bad.write_text((FIX / "user_prices.csv").read_text().replace("1.00,60", "cheap,60"))
    monkeypatch.setenv("CHEAPTUNE_PRICES", str(bad))
    code, out, err = run_cli("prices")
    assert code == 2 and "mine.csv:3: column price_per_hour: expected a number, got 'cheap'" in err
    code, _, err = run_cli("prices", "import-skypilot", str(tmp_path / "missing"))
    assert code == 2 and "is not a folder" in err
