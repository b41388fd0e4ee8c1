"""Alerts: to the log always, and optionally to a webhook (POST JSON) and/or a command.

An alert must never stop or stall training: webhook deliveries run in a background thread with a
timeout on every request and exponential backoff between retries; a command runs without a shell,
with a timeout; every failure is logged and swallowed. Header values are secrets: they are sent but
never logged or stored, and a logged URL keeps only its scheme and host (chat webhooks carry tokens
in the path). Environment: CHEAPTUNE_WEBHOOK_URL, CHEAPTUNE_WEBHOOK_HEADERS (a JSON object).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from cheaptune.errors import BadInput

log = logging.getLogger("cheaptune.runs")

URL_ENV = "CHEAPTUNE_WEBHOOK_URL"
HEADERS_ENV = "CHEAPTUNE_WEBHOOK_HEADERS"


def webhook_from_env(url: str | None, headers: dict[str, str] | None) -> tuple[str | None, dict[str, str]]:
    """The configured webhook, falling back to the environment; BadInput for a malformed value."""
    url = url or os.environ.get(URL_ENV) or None
    merged = dict(headers or {})
    raw = os.environ.get(HEADERS_ENV)
    if raw and not headers:
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict) or not all(isinstance(v, str) for v in parsed.values()):
            raise BadInput(f'{HEADERS_ENV} must be a JSON object of strings, e.g. {{"Authorization": "Bearer ..."}}')
        merged = parsed
    if url and urlsplit(url).scheme not in ("http", "https"):
        raise BadInput(f"webhook URL must start with http:// or https:// (got scheme {urlsplit(url).scheme!r})")
    return url, merged


def safe_url(url: str) -> str:
    """The URL as it may be logged: scheme and host only."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{':' + str(parts.port) if parts.port else ''}/..."


def redact_headers(headers: dict[str, str]) -> dict[str, str]:
    return {k: "***" for k in headers}


@dataclass
class Alerter:
    """Sends alerts; `sleep` is injectable so tests do not wait through the backoff."""

    webhook_url: str | None = None
    webhook_headers: dict[str, str] = field(default_factory=dict)
    command: list[str] | None = None
    timeout_s: float = 10.0
    retries: int = 3
    backoff_s: float = 1.0
    command_timeout_s: float = 60.0
    sleep: Callable[[float], None] = time.sleep
    _threads: list[threading.Thread] = field(default_factory=list, repr=False)

    def send(self, kind: str, message: str, payload: dict | None = None) -> None:
        """Log the alert, then hand it to the webhook (background) and the command; never raises."""
        log.warning("cheaptune alert [%s]: %s", kind, message)
        body = {"source": "cheaptune", "kind": kind, "message": message, **(payload or {})}
        if self.webhook_url:
            t = threading.Thread(target=self._post, args=(body,), name="cheaptune-webhook", daemon=True)
            self._threads.append(t)
            t.start()
        if self.command:
            self._run_command(body)

    def join(self, timeout_s: float = 30.0) -> None:
        """Wait (bounded) for pending webhook deliveries, e.g. before the process exits."""
        deadline = time.monotonic() + timeout_s
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._threads = [t for t in self._threads if t.is_alive()]

    def _post(self, body: dict) -> bool:
        data = json.dumps(body, default=str).encode()
        headers = {"Content-Type": "application/json", **self.webhook_headers}
        where = safe_url(self.webhook_url or "")
        for attempt in range(1, self.retries + 1):
            req = urllib.request.Request(self.webhook_url or "", data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 (http/https checked)
                    if resp.status < 300:
                        return True
                    problem = f"HTTP {resp.status}"
            except urllib.error.HTTPError as err:
                problem = f"HTTP {err.code}"
            except (urllib.error.URLError, OSError, ValueError) as err:
                problem = type(err).__name__
            log.warning("webhook %s attempt %d/%d failed: %s (headers %s)", where, attempt, self.retries,
                        problem, redact_headers(self.webhook_headers))
            if attempt < self.retries:
                self.sleep(self.backoff_s * 2 ** (attempt - 1))
        log.error("webhook %s gave up after %d attempts; training continues", where, self.retries)
        return False

    def _run_command(self, body: dict) -> None:
        """Run the alert command (argument list, no shell) with the alert as JSON in CHEAPTUNE_ALERT."""
        env = {**os.environ, "CHEAPTUNE_ALERT": json.dumps(body, default=str)}
        try:
            proc = subprocess.run(self.command, env=env, timeout=self.command_timeout_s, capture_output=True, check=False)  # noqa: S603
        except (OSError, subprocess.TimeoutExpired) as err:
            log.error("alert command %s failed: %s", self.command[0], type(err).__name__)
            return
        if proc.returncode != 0:
            log.error("alert command %s exited with %d", self.command[0], proc.returncode)
