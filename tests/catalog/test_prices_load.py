"""load_offers: bundled, then SkyPilot replacing providers, then the user CSV; filters and sorting."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheaptune.catalog.gpus import list_gpus
from cheaptune.catalog.prices import cheapest_per_gpu, filter_offers
from cheaptune.catalog.sources import active_sources, all_sources, load_offers
from cheaptune.catalog.sources.bundled import bundled_offers
from cheaptune.errors import BadInput

FIX = Path(__file__).parent / "fixtures_prices"


@pytest.fixture
def no_sky(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.sky/catalogs of the machine running the tests
    monkeypatch.delenv("CHEAPTUNE_SKY_CATALOGS", raising=False)
    monkeypatch.delenv("CHEAPTUNE_PRICES", raising=False)


def test_sources_are_discovered_in_priority_order():
    assert [s.name for s in all_sources()] == ["bundled", "live-cache", "skypilot", "user-csv"]


def test_bundled_only(no_sky):
    assert len(load_offers()) == len(bundled_offers())
    assert [s["name"] for s in active_sources()] == ["bundled"]


def test_skypilot_replaces_its_providers(no_sky, monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_SKY_CATALOGS", str(FIX))
    offers = load_offers()
    aws = [o for o in offers if o.provider == "aws"]
    assert aws and all(o.source.startswith("skypilot catalog") for o in aws)
    assert not any(o.instance_type == "p4d.24xlarge" for o in aws)  # bundled AWS rows are gone
    assert any(o.provider == "lambda" and not o.source.startswith("skypilot catalog") for o in offers)
    sky = next(s for s in active_sources() if s["name"] == "skypilot")
    assert sky["clouds"] == ["aws", "gcp", "runpod"] and sky["dropped"]["spot above on-demand"] == 2


def test_user_csv_overrides_and_adds(no_sky, monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_PRICES", str(FIX / "user_prices.csv"))
    offers = load_offers()
    h100 = [o for o in offers if o.provider == "lambda" and o.instance_type == "gpu_1x_h100_sxm5"]
    assert [o.price_per_hour for o in h100] == [1.00]
    (mine,) = [o for o in offers if o.provider == "mycloud"]
    assert mine.gpu == "RTX4090" and mine.price_per_gpu_hour == pytest.approx(0.025)
    assert len(offers) == len(bundled_offers()) + 1
    assert active_sources()[-1]["date"] == "2026-12-01"


def test_user_csv_in_home_is_picked_up(no_sky, tmp_path, monkeypatch):
    from cheaptune.util.paths import home

    (home() / "prices.csv").write_text((FIX / "user_prices.csv").read_text())
    assert any(o.provider == "mycloud" for o in load_offers())


def test_missing_env_files_are_bad_input(no_sky, monkeypatch, tmp_path):
    monkeypatch.setenv("CHEAPTUNE_PRICES", str(tmp_path / "nope.csv"))
    with pytest.raises(BadInput, match="CHEAPTUNE_PRICES points to"):
        load_offers()


def test_filters_and_sorting():
    offers = bundled_offers()
    h100 = filter_offers(offers, gpu="h100 sxm")
    assert h100 and {o.gpu for o in h100} == {"H100"}
    prices = [o.price_per_hour for o in h100]
    assert prices == sorted(prices)
    assert all(o.spot for o in filter_offers(offers, spot=True))
    assert not any(o.spot for o in filter_offers(offers, spot=False))
    assert {o.kind for o in filter_offers(offers, community=True)} == {"community"}
    assert all(o.price_per_hour <= 1.0 for o in filter_offers(offers, max_price=1.0))
    big = filter_offers(offers, min_memory_gib=90)
    assert big and {o.gpu for o in big} <= {"H100-NVL", "GH200", "H200", "B200", "B300", "GB200", "MI300X", "MI325X", "RTXPRO6000"}
    assert not any(o.provider in {"aws", "gcp"} for o in filter_offers(offers, exclude_providers=["AWS", "gcp"]))
    assert {o.provider for o in filter_offers(offers, provider="Vast")} == {"vast"}
    by_mem = filter_offers(offers, sort="memory")
    memory = {g.name: g.memory_gib for g in list_gpus()}
    assert [memory[o.gpu] for o in by_mem] == sorted((memory[o.gpu] for o in by_mem), reverse=True)
    by_provider = [o.provider for o in filter_offers(offers, sort="provider")]
    assert by_provider == sorted(by_provider)
    with pytest.raises(BadInput, match="did you mean"):
        filter_offers(offers, gpu="H1000")
    with pytest.raises(BadInput, match="unknown sort"):
        filter_offers(offers, sort="cheap")


def test_cheapest_per_gpu():
    grouped = cheapest_per_gpu(filter_offers(bundled_offers()))
    assert len(grouped) == len({o.gpu for o in grouped})
    for o in grouped:
        same = [x.price_per_gpu_hour for x in bundled_offers() if x.gpu == o.gpu]
        assert o.price_per_gpu_hour == min(same)
