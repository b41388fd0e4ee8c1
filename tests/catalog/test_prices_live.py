"""`prices refresh` through gpuhunt, offline: recorded catalogs in gpuhunt's own format served by a local
HTTP server that plays its catalog bucket and Vast.ai's offer search. No test reaches the network."""

from __future__ import annotations

import io
import json
import threading
import zipfile
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cheaptune.catalog import live
from cheaptune.catalog.sources import load_offers
from cheaptune.catalog.sources.live_cache import read_meta, read_offers
from cheaptune.errors import BadInput

gpuhunt = pytest.importorskip("gpuhunt", reason="the .[live] extra is not installed")  # noqa: F841
FIXTURES = Path(__file__).parent / "fixtures_gpuhunt"
VERSION = "20261130-00"
OFFLINE_ONLY = ("vastai",)  # Vast (served locally below); the credentialed online providers would need the network


class Provider(BaseHTTPRequestHandler):
    """GET <provider>/version and <provider>/<version>/catalog.zip for the recorded providers (others
    404, as a failed provider); POST /vast/bundles/ answers with the recorded Vast.ai offers."""

    catalogs: dict[str, bytes] = {}
    vast_status = 200

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = self.path.strip("/").split("/")
        if parts[0] not in self.catalogs:
            return self._send(404, b"no such provider")
        if parts[1:] == ["version"]:
            return self._send(200, VERSION.encode())
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            z.writestr(f"{parts[0]}.csv", self.catalogs[parts[0]])
        self._send(200, buf.getvalue())

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._send(self.vast_status, (FIXTURES / "vast_bundles.json").read_bytes())


@pytest.fixture
def server(monkeypatch):
    Provider.catalogs = {p: (FIXTURES / f"{p}.csv").read_bytes() for p in ("aws", "lambdalabs")}
    Provider.vast_status = 200
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_port}"
    monkeypatch.setenv("GPUHUNT_CATALOG_URL", base)  # gpuhunt's own setting for where its catalogs live
    monkeypatch.setattr("gpuhunt.providers.vastai.bundles_url", f"{base}/vast/bundles/")
    monkeypatch.setattr(live, "ONLINE", OFFLINE_ONLY)  # `prices refresh` through the CLI, too
    yield Provider
    httpd.shutdown()
    httpd.server_close()


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)


def test_refresh_maps_offers_drops_bad_rows_by_reason_and_reports_failed_providers(server):
    meta, results = live.refresh(NOW, online=OFFLINE_ONLY)
    aws, lam, vast = results["aws"], results["lambda"], results["vast"]
    assert {(o.kind, o.gpu, o.gpu_count, o.instance_type) for o in aws.offers} == {
        ("on-demand", "L4", 1, "g6.xlarge"), ("spot", "L4", 1, "g6.xlarge"), ("spot", "H100", 8, "p5.48xlarge"),
        ("on-demand", "A100-80GB", 8, "p4de.24xlarge")}
    assert dict(aws.dropped) == {"no GPU": 1, "zero, negative or missing price": 1, "unknown GPU": 1, "duplicate row": 1}
    assert dict(lam.dropped) == {"malformed row (truncated file?)": 1} and len(lam.offers) == 3
    assert {o.gpu for o in lam.offers} == {"A100", "H100"}  # 40 GB A100 is not the 80 GB board
    # our billing facts per provider, not gpuhunt's: AWS per second with a 60 s minimum, Lambda per minute
    assert {(o.billing_unit_s, o.min_billed_s) for o in aws.offers} == {(1, 60)}
    assert all(o.date == "2026-11-30" and o.source.startswith("gpuhunt") for o in aws.offers + lam.offers)
    # gpuhunt's AWS spot price is the cheapest zone of the region: labelled as the low end of a range
    assert {o.basis for o in aws.offers if o.spot} == {"range-low"}
    assert {o.basis for o in aws.offers + lam.offers if not o.spot} == {"quoted"}
    assert [o.basis for o in vast.offers if o.spot] == ["range-low"] and "minimum bid" in next(
        o.note for o in vast.offers if o.spot)
    # the marketplace: one on-demand and one interruptible row per listing, the GTX 1080 unknown to us
    assert {(o.kind, o.gpu, o.instance_type) for o in vast.offers} == {
        ("on-demand", "RTX6000-Ada", "4242001"), ("spot", "RTX6000-Ada", "4242001"), ("on-demand", "RTX4090", "4242002")}
    assert vast.dropped["unknown GPU"] == 1
    facts = {o.instance_type: o.listing for o in vast.offers}
    assert facts["4242001"] == {"reliability": 0.991, "verified": True, "inet_down_mbps": 850.0, "disk_gb": 100.0}
    assert facts["4242002"]["verified"] is False
    cached = {o.instance_type: o.listing for o in read_offers() if o.provider == "vast"}
    assert cached == facts  # the listing facts survive the cache
    failed = {p for p, r in results.items() if r.error}
    assert {"azure", "gcp", "runpod"} <= failed and "404" in results["gcp"].error
    assert meta["providers"]["gcp"]["error"] and meta["providers"]["aws"]["rows"] == 4


def test_plan_sources_prefer_the_newer_cache_per_provider(server):
    live.refresh(NOW, online=OFFLINE_ONLY)
    offers = load_offers()
    aws = [o for o in offers if o.provider == "aws"]
    assert aws and all(o.source.startswith("gpuhunt") for o in aws)  # the cache replaced the snapshot's AWS
    assert any(o.provider == "gcp" and not o.source.startswith("gpuhunt") for o in offers)  # failed: bundled kept
    bundled = load_offers(only=("bundled",))
    assert not any(o.source.startswith("gpuhunt") for o in bundled)


def test_a_failed_provider_keeps_its_previous_rows_and_all_failing_writes_nothing(server):
    live.refresh(NOW, online=OFFLINE_ONLY)
    before = {o.instance_type for o in read_offers() if o.provider == "vast"}
    server.vast_status = 500
    meta, results = live.refresh(datetime(2026, 12, 1, tzinfo=timezone.utc), online=OFFLINE_ONLY)
    assert "500" in results["vast"].error
    assert {o.instance_type for o in read_offers() if o.provider == "vast"} == before  # kept, still dated 11-30
    assert meta["providers"]["vast"]["fetched_at"].startswith("2026-11-30") and meta["providers"]["vast"]["error"]
    assert meta["providers"]["aws"]["fetched_at"].startswith("2026-12-01")
    server.catalogs = {}
    with pytest.raises(BadInput, match="no provider could be fetched, the previous price cache is kept"):
        live.refresh(datetime(2026, 12, 2, tzinfo=timezone.utc), online=OFFLINE_ONLY)
    assert read_meta()["fetched_at"].startswith("2026-12-01")


def test_refresh_cli_says_what_each_provider_gave(server, run_cli):
    code, out, err = run_cli("prices", "refresh")
    assert code == 0, err
    assert "aws: 4 offers; dropped rows: 1 duplicate row, 1 no GPU" in out
    assert "gcp: FAILED (HTTPError" in out
    code, out, _ = run_cli("prices", "--provider", "aws", "--json")
    doc = json.loads(out)
    assert any(s["name"] == "live-cache" and s["failed"] for s in doc["sources"])
