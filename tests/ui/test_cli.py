"""`cheaptune ui` input checks: one line and exit 2 for a public host without a token, a busy port, a bad path."""

from __future__ import annotations

import socket

import pytest
import uvicorn


@pytest.fixture
def served(monkeypatch) -> list[dict]:
    """Records uvicorn.run calls instead of serving forever."""
    calls: list[dict] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append({"app": app, **kw}))
    return calls


def _one_line_error(code: int, err: str, needle: str) -> None:
    assert code == 2 and needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_public_host_needs_a_token(run_cli, served):
    code, _, err = run_cli("ui", "--host", "0.0.0.0")
    _one_line_error(code, err, "--token")
    assert not served


def test_short_token_is_refused(run_cli, served):
    _one_line_error(*run_cli("ui", "--token", "abc")[::2], "too short")


def test_missing_plans_path_is_refused(run_cli, served, tmp_path):
    _one_line_error(*run_cli("ui", "--plans", str(tmp_path / "nope"))[::2], "does not exist")


def test_busy_port_is_one_line(run_cli, served):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        _one_line_error(*run_cli("ui", "--port", str(port))[::2], "cannot listen")
    assert not served


def test_serves_on_localhost_and_with_a_token(run_cli, served, tmp_path):
    code, _, err = run_cli("ui", "--port", "0", "--plans", str(tmp_path))
    assert code == 2 and "--port" in err  # ports start at 1
    code, _, err = run_cli("ui", "--port", "18765", "--plans", str(tmp_path))
    assert code == 0 and served[-1]["host"] == "127.0.0.1" and served[-1]["port"] == 18765
    assert "http://127.0.0.1:18765/runs" in err
    code, _, err = run_cli("ui", "--host", "0.0.0.0", "--port", "18766", "--token", "long-enough-token")
    assert code == 0 and served[-1]["host"] == "0.0.0.0" and "?token=long-enough-token" in err
