import json
import logging
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from cheaptune.errors import BadInput
from cheaptune.runs.alerts import Alerter, webhook_from_env


@pytest.fixture
def server():
    """A loopback HTTP server that fails the first `fail` POSTs with 500, then records bodies and headers."""
    got, state = [], {"fail": 0}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if state["fail"] > 0:
                state["fail"] -= 1
                self.send_response(500)
            else:
                got.append((json.loads(body), dict(self.headers)))
                self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_port}/hooks/SECRETPATH", got, state
    httpd.shutdown()
    httpd.server_close()


def test_webhook_posts_json_with_headers_and_retries_on_500(server, caplog):
    url, got, state = server
    state["fail"] = 2
    sleeps = []
    a = Alerter(url, {"Authorization": "Bearer tok-123"}, sleep=sleeps.append, backoff_s=0.5, retries=3)
    with caplog.at_level(logging.WARNING, logger="cheaptune.runs"):
        a.send("budget_threshold", "50% used", {"run_id": "r1"})
        a.join(10)
    assert len(got) == 1
    body, headers = got[0]
    assert body["kind"] == "budget_threshold" and body["run_id"] == "r1"
    assert headers["Authorization"] == "Bearer tok-123"
    assert sleeps == [0.5, 1.0]  # exponential backoff between the three attempts
    text = caplog.text
    assert "HTTP 500" in text and "tok-123" not in text and "SECRETPATH" not in text


def test_failing_webhook_never_raises(caplog):
    a = Alerter("http://127.0.0.1:9/nothing-listens", {"X-Key": "s3cret"}, sleep=lambda s: None, timeout_s=2)
    with caplog.at_level(logging.WARNING, logger="cheaptune.runs"):
        a.send("stop", "stopping")
        a.join(20)
    assert "gave up after 3 attempts" in caplog.text and "s3cret" not in caplog.text


def test_alert_command_gets_the_alert(tmp_path):
    out = tmp_path / "alert.json"
    code = f"import os; open({str(out)!r}, 'w').write(os.environ['CHEAPTUNE_ALERT'])"
    Alerter(command=[sys.executable, "-c", code]).send("idle", "no progress")
    assert json.loads(out.read_text())["kind"] == "idle"


def test_webhook_from_env(monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_WEBHOOK_URL", "https://example.invalid/h")
    monkeypatch.setenv("CHEAPTUNE_WEBHOOK_HEADERS", '{"Authorization": "Bearer x"}')
    assert webhook_from_env(None, None) == ("https://example.invalid/h", {"Authorization": "Bearer x"})
    monkeypatch.setenv("CHEAPTUNE_WEBHOOK_HEADERS", "Authorization: x")
    with pytest.raises(BadInput, match="JSON object"):
        webhook_from_env(None, None)
    with pytest.raises(BadInput, match="http"):
        webhook_from_env("file:///etc/passwd", {"a": "b"})
