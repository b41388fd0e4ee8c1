"""Spot-notice pollers against a local HTTP server that plays each provider's metadata endpoint."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from cheaptune.train import pollers


class _Metadata(http.server.BaseHTTPRequestHandler):
    """Plays AWS IMDSv2, GCP and Azure metadata; `notice` switches the preemption on."""

    notice = False
    seen_headers: list[dict] = []

    def log_message(self, *args):
        pass

    def _send(self, code: int, body: str = "") -> None:
        data = body.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        if self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
            return self._send(200, "tok123")
        return self._send(400)

    def do_GET(self):
        type(self).seen_headers.append(dict(self.headers))
        if self.path == "/latest/meta-data/spot/instance-action":
            if self.headers.get("X-aws-ec2-metadata-token") != "tok123":
                return self._send(401)
            if self.notice:
                return self._send(200, json.dumps({"action": "terminate", "time": "2026-11-30T00:02:00Z"}))
            return self._send(404)
        if self.path == "/computeMetadata/v1/instance/preempted":
            if self.headers.get("Metadata-Flavor") != "Google":
                return self._send(403)
            return self._send(200, "TRUE" if self.notice else "FALSE")
        if self.path.startswith("/metadata/scheduledevents"):
            if self.headers.get("Metadata") != "true":
                return self._send(400)
            events = [{"EventId": "1", "EventType": "Preempt", "ResourceType": "VirtualMachine"}] if self.notice else []
            return self._send(200, json.dumps({"DocumentIncarnation": 1, "Events": events}))
        if self.path == "/slow":  # slower than the client's timeout: it has gone, so nothing is written back
            time.sleep(1)
            return None
        return self._send(404)


@pytest.fixture
def server():
    _Metadata.notice = False
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()  # joins the request threads: none outlives the test to write into the next one's output


PATHS = {
    "aws": "/latest/meta-data/spot/instance-action",
    "gcp": "/computeMetadata/v1/instance/preempted",
    "azure": "/metadata/scheduledevents?api-version=2020-07-01",
}


@pytest.mark.parametrize("provider", sorted(PATHS))
def test_notice_only_when_the_endpoint_says_so(server, provider):
    check = pollers._CHECKS[provider]
    assert check(server + PATHS[provider]) is None
    _Metadata.notice = True
    assert "notice" in check(server + PATHS[provider])


def test_documented_endpoints_have_sources():
    for provider, entry in pollers.endpoints().items():
        assert provider in pollers._CHECKS
        assert entry["notice_url"].startswith("http://") and entry["source"].startswith("https://")


def test_unreachable_or_slow_endpoint_is_no_notice(server, monkeypatch):
    monkeypatch.setattr(pollers, "HTTP_TIMEOUT_S", 0.3)
    start = time.monotonic()
    assert pollers.gcp_notice("http://127.0.0.1:9/computeMetadata/v1/instance/preempted") is None
    assert pollers._request(server + "/slow", timeout=0.3) == (0, "")
    assert time.monotonic() - start < 3


def test_poller_thread_calls_back_once(server):
    got = []
    poller = pollers.make_poller("aws", got.append, url=server + PATHS["aws"], interval_s=0.05).start()
    time.sleep(0.2)
    assert got == []
    _Metadata.notice = True
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.02)
    poller.stop()
    assert got == ["AWS spot notice (terminate)"]
