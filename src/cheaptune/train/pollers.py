"""Spot-notice pollers: ask the instance metadata service every few seconds whether the VM is going away.

A signal is what most platforms send, but some give the notice only through metadata, and seconds
matter: the notice is 30 s (GCP, Azure) to 120 s (AWS). Every HTTP call has a timeout; an unreachable
endpoint just means "no notice" (the poller must never stop a healthy run).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from functools import cache
from importlib import resources

import yaml

log = logging.getLogger(__name__)

HTTP_TIMEOUT_S = 2.0


@cache
def endpoints() -> dict:
    """Documented endpoint URLs per provider, with sources (train/data/spot_endpoints.yaml)."""
    return yaml.safe_load(resources.files("cheaptune.train").joinpath("data/spot_endpoints.yaml").read_text())


def _request(url: str, method: str = "GET", headers: dict[str, str] | None = None,
             timeout: float | None = None) -> tuple[int, str]:
    """(status, body); 0 when the endpoint cannot be reached."""
    timeout = HTTP_TIMEOUT_S if timeout is None else timeout
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 (metadata URLs from config)
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, ""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, ""


def aws_notice(url: str, token_url: str | None = None) -> str | None:
    """IMDSv2: a session token first, then spot/instance-action (404 = no notice)."""
    token_url = token_url or url.split("/latest/")[0] + "/latest/api/token"
    status, token = _request(token_url, "PUT", {"X-aws-ec2-metadata-token-ttl-seconds": "300"})
    headers = {"X-aws-ec2-metadata-token": token} if status == 200 else {}
    status, body = _request(url, headers=headers)
    if status != 200:
        return None
    try:
        action = json.loads(body).get("action", "terminate")
    except ValueError:
        action = "terminate"
    return f"AWS spot notice ({action})"


def gcp_notice(url: str) -> str | None:
    status, body = _request(url, headers={"Metadata-Flavor": "Google"})
    return "GCP preemption notice" if status == 200 and body.strip().upper() == "TRUE" else None


def azure_notice(url: str) -> str | None:
    status, body = _request(url, headers={"Metadata": "true"})
    if status != 200:
        return None
    try:
        events = json.loads(body).get("Events", [])
    except ValueError:
        return None
    kinds = {e.get("EventType") for e in events if isinstance(e, dict)}
    return "Azure preemption notice" if kinds & {"Preempt", "Terminate"} else None


_CHECKS: dict[str, Callable[[str], str | None]] = {"aws": aws_notice, "gcp": gcp_notice, "azure": azure_notice}


class SpotPoller:
    """A daemon thread calling `check()` every `interval_s`; the first notice calls `on_notice(reason)`."""

    def __init__(self, check: Callable[[], str | None], on_notice: Callable[[str], None], interval_s: float) -> None:
        self.check, self.on_notice, self.interval_s = check, on_notice, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="cheaptune-spot-poller", daemon=True)
        self.notice: str | None = None

    def start(self) -> SpotPoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=HTTP_TIMEOUT_S * 3)

    def _loop(self) -> None:
        while not self._stop.is_set():
            reason = self.check()
            if reason:
                self.notice = reason
                log.warning("%s: checkpointing now", reason)
                self.on_notice(reason)
                return
            self._stop.wait(self.interval_s)


def make_poller(provider: str, on_notice: Callable[[str], None], url: str | None = None,
                interval_s: float = 5.0) -> SpotPoller:
    """A poller for `provider` (aws | gcp | azure) at its documented URL, or `url` when given."""
    target = url or endpoints()[provider]["notice_url"]
    check = _CHECKS[provider]
    return SpotPoller(lambda: check(target), on_notice, interval_s)
