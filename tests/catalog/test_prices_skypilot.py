"""SkyPilot vms.csv importer: the real catalog files and hand-written fixtures of every quirk."""

from __future__ import annotations

from pathlib import Path

import pytest

from cheaptune.catalog.interruption import rate_for
from cheaptune.catalog.sources.bundled import bundled_offers
from cheaptune.catalog.sources.skypilot import find_catalogs, provider_defaults
from cheaptune.catalog.sources.skypilot_parse import parse_vms_csv
from cheaptune.errors import BadInput

FIX = Path(__file__).parent / "fixtures_prices"


@pytest.fixture(scope="module")
def defaults():
    return provider_defaults(bundled_offers())


def by(result, **want):
    return [o for o in result.offers if all(getattr(o, k) == v for k, v in want.items())]


def test_gcp_adds_host_row_to_accelerator_row(defaults):
    r = parse_vms_csv(FIX / "catalogs/v8/gcp/vms.csv", "gcp", defaults)
    (od,) = by(r, gpu="A100", kind="on-demand")
    (spot,) = by(r, gpu="A100", kind="spot")
    assert od.instance_type == "a2-highgpu-1g" and od.price_per_hour == pytest.approx(3.0 + 0.5)  # zone a host
    assert spot.price_per_hour == pytest.approx(1.0 + 0.2)
    assert spot.notice_s == 30 and od.billing_unit_s == 1 and od.min_billed_s == 60
    # A100-80GB accelerator row has spot 2.5 > on-demand 2.0: spot dropped, on-demand kept with host added.
    assert [o.price_per_hour for o in by(r, gpu="A100-80GB")] == [pytest.approx(3.0)]
    assert r.dropped["spot above on-demand"] == 1
    assert r.dropped["GCP accelerator without a host row"] == 1  # H100x8: no a3-highgpu-8g row
    assert r.dropped["700.0 placeholder price"] == 1
    assert not by(r, instance_type="n2-standard-8")


def test_shuffled_columns_zones_spot_equal_and_bad_rows(defaults):
    r = parse_vms_csv(FIX / "catalogs/v8/aws/vms.csv", "aws", defaults)
    (od,) = by(r, gpu="A10G", kind="on-demand")
    (spot,) = by(r, gpu="A10G", kind="spot")
    assert od.price_per_hour == 1.0 and spot.price_per_hour == 0.30  # cheapest zone kept
    # zones priced apart: the kept price is the low end of their range and the row says so; one price is quoted
    assert spot.basis == "range-low" and spot.note.startswith("cheapest of 2 zone prices ($0.3-$")
    assert od.basis == "quoted" and not od.note
    assert spot.notice_s == 120 and rate_for(spot).high > 0  # the rate: interruption.yaml's AWS band
    assert {o.kind for o in by(r, gpu="H100")} == {"on-demand"}  # spot == OD and spot > OD both dropped
    assert r.dropped["spot equal to on-demand (no spot price)"] == 1
    assert r.dropped["spot above on-demand"] == 1
    assert r.dropped["fractional or missing GPU count"] == 1
    assert r.dropped["non-GPU row"] == 1
    assert r.dropped["empty on-demand price"] == 1
    assert [o.kind for o in by(r, gpu="H200")] == ["spot"]
    assert r.unknown_gpus == {"Z9000": 1}


def test_runpod_secure_and_community_kinds(defaults):
    r = parse_vms_csv(FIX / "catalogs/v8/runpod/vms.csv", "runpod", defaults)
    kinds = {(o.kind, o.price_per_hour) for o in r.offers}
    assert kinds == {("secure", 1.64), ("community", 1.19), ("spot", 1.19), ("spot", 0.89)}


def test_newest_schema_version_per_cloud():
    found = find_catalogs(FIX)
    assert found["aws"] == FIX / "catalogs/v8/aws/vms.csv"
    assert set(found) == {"aws", "gcp", "runpod"}


def test_malformed_row_names_file_line_and_column(defaults):
    path = FIX / "bad/v8/lambda/vms.csv"
    with pytest.raises(BadInput) as err:
        parse_vms_csv(path, "lambda", defaults)
    assert str(err.value) == f"{path}:3: column Price: expected a number, got 'abc'"


def test_real_catalog_files(shared_data, defaults):
    root = shared_data / "skypilot-catalog" / "catalogs"
    files = {
        "aws": "v8/aws/vms.gpu_rows_excerpt.csv", "gcp": "v8/gcp/vms.gpu_rows_excerpt.csv",
        "azure": "v6/azure/vms.gpu_rows_excerpt.csv", "cudo": "v8/cudo/vms.excerpt.csv",
        "runpod": "v8/runpod/vms.excerpt.csv", "vast": "v8/vast/vms.csv", "lambda": "v8/lambda/vms.csv",
        "fluidstack": "v6/fluidstack/vms.csv", "paperspace": "v6/paperspace/vms.csv",
    }
    r = {cloud: parse_vms_csv(root / rel, cloud, defaults) for cloud, rel in files.items()}
    # GCP a2-highgpu-1g us-central1: host 0.73948 + accelerator 2.93391 (the gcp excerpt's two rows).
    (a100,) = by(r["gcp"], gpu="A100", gpu_count=1, region="us-central1", kind="on-demand")
    assert a100.price_per_hour == pytest.approx(3.67339)
    assert r["gcp"].dropped["700.0 placeholder price"] == 1
    assert not by(r["gcp"], gpu="A100-80GB", region="us-central1", kind="spot")  # accel spot > OD there
    # Azure ND96isr_H100_v5 says 12 GPUs; it has 8. NC40ads_H100_v5 is an H100 NVL.
    assert {o.gpu_count for o in by(r["azure"], instance_type="Standard_ND96isr_H100_v5")} == {8}
    assert {o.gpu for o in by(r["azure"], instance_type="Standard_NC40ads_H100_v5")} == {"H100-NVL"}
    # Vast names boards by family; memory in GpuInfo picks the board.
    assert {o.gpu for o in by(r["vast"], instance_type="1x-H100_NVL-32-65536")} == {"H100-NVL"}
    assert {o.gpu for o in by(r["vast"], instance_type="1x-A100_PCIE-32-65536")} == {"A100-80GB"}
    assert not by(r["vast"], kind="spot")  # SpotPrice 0.00 everywhere
    assert {o.gpu for o in by(r["lambda"], instance_type="gpu_1x_h100_pcie")} == {"H100-PCIE"}
    assert {o.gpu for o in by(r["fluidstack"], instance_type="H100_PCIE_80GB::1")} == {"H100-PCIE"}
    assert {o.gpu for o in by(r["fluidstack"], instance_type="H100_NVLINK_80GB::8")} == {"H100"}
    assert by(r["runpod"], kind="secure") and not by(r["runpod"], kind="spot")  # v8 spot == price
    assert len(r["lambda"].offers) == len(by(r["lambda"], kind="on-demand")) == 374
    aws_spot = by(r["aws"], instance_type="p5.48xlarge", region="us-east-1", kind="spot")
    assert [o.price_per_hour for o in aws_spot] == [pytest.approx(10.2397)]  # cheapest AZ
    for cloud, res in r.items():
        assert res.offers, cloud
        assert all(o.provider == cloud and o.price_per_hour > 0 for o in res.offers)
        assert all(not o.spot or o.price_per_hour < min(
            (x.price_per_hour for x in by(res, instance_type=o.instance_type, region=o.region) if not x.spot),
            default=float("inf")) for o in res.offers)
