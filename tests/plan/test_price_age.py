"""Each plan option carries its price's date, source, age and basis; stale, undated or derived prices are
labelled, ranked after a fresh quoted one within the stated tolerance, riskier, and warned about."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import date, timedelta

import pytest

from cheaptune.plan import render
from cheaptune.plan.planner import make_plan
from cheaptune.plan.price_age import STALE_DAYS, TRUST_TOLERANCE, price_age
from cheaptune.plan.workload import Constraints, Workload
from tests.plan.fakes import GPUS, SHAPE_7B, fake_fit, offer

W = Workload(tokens=20_000_000, epochs=2, seq_len=2048, effective_batch=16)
TODAY = date.today()


def dated(o, days_old: int | None, basis: str = "quoted", source: str = "https://example.com/prices"):
    o.date = "undated" if days_old is None else (TODAY - timedelta(days=days_old)).isoformat()
    o.basis, o.source = basis, source
    return o


def plan(offers, c=Constraints(methods=("lora",))):
    return make_plan("test-7b", SHAPE_7B, 4096, W, c, GPUS, offers, fake_fit())


def test_every_option_carries_its_price_date_source_age_and_basis_in_the_json():
    r = plan([dated(offer("fresh", "H100", 2.50), 3), dated(offer("old", "A100-80GB", 3.40), None, "derived")])
    doc = render.to_json(r)
    by = {o["provider"]: o for o in doc["options"]}
    assert by["fresh"]["price_as_of"] == (TODAY - timedelta(days=3)).isoformat()
    assert (by["fresh"]["price_age_days"], by["fresh"]["price_basis"]) == (3, "quoted")
    assert by["fresh"]["price_source"] == "https://example.com/prices"
    assert (by["old"]["price_as_of"], by["old"]["price_age_days"], by["old"]["price_basis"]) == ("undated", None, "derived")
    assert doc["recommended"]["price_as_of"] == r.recommended.price_as_of


def test_a_fresh_quoted_price_within_the_tolerance_ranks_before_an_undated_or_derived_one():
    fresh = dated(offer("fresh", "H100", 2.50), 2)
    cheap = [dated(offer("stale", "H100", 2.40, region="r2"), None),
             dated(offer("derived", "H100", 2.40, region="r3"), 1, "derived"),
             dated(offer("ancient", "H100", 2.40, region="r4"), STALE_DAYS + 1)]
    for other in cheap:
        r = plan([fresh, other])
        assert r.recommended.provider == "fresh", other.provider
        assert r.recommended.total > r.options[1].total  # it costs a little more, and the plan says why
        assert "whose price is" in r.why and f"within {TRUST_TOLERANCE:.0%}" in r.why
    # past the tolerance the cheaper, untrusted price still wins: trust is worth at most 10%
    far = dated(offer("stale", "H100", 2.50 / (1 + 3 * TRUST_TOLERANCE), region="r2"), None)
    assert plan([fresh, far]).recommended.provider == "stale"


def test_the_risk_column_rises_with_price_age():
    fresh, old = (plan([dated(offer("p", "H100", 2.50), days)]).recommended for days in (1, STALE_DAYS + 5))
    assert (fresh.risk, old.risk) == ("low", "medium")
    spot = [plan([dated(offer("p", "H100", 1.0, spot=True, rate=0.01), days)]).recommended for days in (1, None)]
    assert [o.risk for o in spot] == ["medium", "high"]  # a spot risk, then a spot risk on an undated price


def test_the_table_and_recommendation_say_how_old_the_price_is_and_label_derived_ones():
    r = plan([dated(offer("vast", "H100", 1.0, spot=True, rate=0.01), None, "derived")])
    cells = render.row_cells(render.option_dict(r.recommended))
    assert cells[render.HEADERS.index("price")] == "undated derived"
    assert "price $1/h, undated (as of undated, derived: https://example.com/prices)" in r.why
    r = plan([dated(offer("p", "H100", 2.50), 12)])
    assert render.row_cells(render.option_dict(r.recommended))[render.HEADERS.index("price")] == "12 d"
    assert ", 12 d old (as of" in r.why


@pytest.mark.parametrize(("days", "basis", "warned"), [
    (1, "quoted", False), (STALE_DAYS, "quoted", False), (STALE_DAYS + 1, "quoted", True),
    (None, "quoted", True), (1, "derived", True), (1, "range-low", True),
])
def test_a_warning_when_the_recommended_or_runner_up_price_is_untrusted(days, basis, warned):
    r = plan([dated(offer("a", "H100", 2.50), 1), dated(offer("b", "A100-80GB", 3.40), days, basis)])
    assert r.options[1].provider == "b"  # the runner-up
    notes, warnings = price_age(r.options, TODAY, has_cache=True)
    assert notes[0].startswith("price ages: recommended a/H100 price as of")
    assert bool(warnings) == warned
    if warned:
        assert warnings[0].code == "stale-prices" and "runner-up price (b/A100-80GB" in warnings[0].message
        assert "cheaptune prices refresh" in warnings[0].message and "CHEAPTUNE_PRICES" in warnings[0].message


def test_the_warning_counts_age_from_the_day_it_is_given():
    r = plan([dated(offer("a", "H100", 2.50), 1)])
    assert price_age(r.options, TODAY, has_cache=True)[1] == []
    notes, warnings = price_age(r.options, TODAY + timedelta(days=STALE_DAYS), has_cache=True)
    assert "(31 d;" in notes[0] and "is 31 days old" in warnings[0].message


def test_a_plan_without_a_live_cache_says_where_its_prices_came_from():
    r = plan([dated(offer("a", "H100", 2.50), 1)])
    notes, _ = price_age(r.options, TODAY, has_cache=False)
    assert any("no live cache yet" in n for n in notes)
    notes, _ = price_age(r.options, TODAY, has_cache=True, choice="bundled")
    assert "prices: the bundled snapshot only (--prices bundled)" in notes


def test_a_saved_plan_without_price_fields_still_renders():
    r = plan([dated(offer("a", "H100", 2.50), 1)])
    d = render.option_dict(r.recommended)
    for k in ("price_as_of", "price_source", "price_age_days", "price_basis"):
        d.pop(k)
    assert render.row_cells(d)[render.HEADERS.index("price")] == "not recorded"


def test_ranking_with_time_objective_ignores_price_trust():
    a, b = dated(offer("a", "H100", 2.50), None), dated(offer("b", "H100", 2.50, region="r2"), 1)
    r = plan([a, b], Constraints(methods=("lora",), optimize="time"))
    assert {o.provider for o in r.options} == {"a", "b"}
    assert replace(r.options[0]).hours <= r.options[1].hours


def test_the_text_plan_warns_on_an_old_recommended_price_and_the_json_dates_it(run_cli, tiny_model_dir, tmp_path,
                                                                               monkeypatch):
    """End to end: a user CSV whose only T4 price is a year old; the plan's JSON dates it and the text warns."""
    from cheaptune.catalog.prices import COLUMNS

    old = (TODAY - timedelta(days=365)).isoformat()
    row = {"provider": "oldcloud", "kind": "on-demand", "gpu": "T4", "gpu_count": "1", "instance_type": "t4-1",
           "region": "r1", "price_per_hour": "0.01", "billing_unit_s": "1", "min_billed_s": "0",
           "storage_gb_month": "0.1", "egress_per_gb": "0", "interruption_per_hour": "", "notice_s": "0",
           "source": "https://example.com/oldcloud/prices", "date": old, "basis": "quoted", "read": old, "note": ""}
    csv_file = tmp_path / "prices.csv"
    csv_file.write_text(",".join(COLUMNS) + "\n" + ",".join(row[c] for c in COLUMNS) + "\n")
    monkeypatch.setenv("CHEAPTUNE_PRICES", str(csv_file))
    args = ("plan", str(tiny_model_dir), "--tokens", "100000", "--gpu", "T4", "--seq-len", "128", "--provider", "oldcloud")
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    best = json.loads(out)["recommended"]
    assert (best["price_as_of"], best["price_age_days"], best["price_source"]) == (
        old, 365, "https://example.com/oldcloud/prices")
    code, out, err = run_cli(*args)
    assert code == 0, err
    assert "[stale-prices] the recommended price (oldcloud/T4, $0.01/h) is 365 days old" in " ".join(out.split())
