"""The seam around SkyPilot's Python API: validate, launch (managed job or cluster), status, cancel.

Everything that talks to SkyPilot is here, so tests swap in a recording double, and every SkyPilot or
network failure leaves as one CheaptuneError line (no cloud enabled -> say how: `sky check`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cheaptune.errors import BadInput, CheaptuneError
from cheaptune.estimate.cost.cost import SECONDS_PER_HOUR

ENABLE_HINT = "run `sky check` to see which clouds are enabled and how to enable one (credentials), then launch again"
SERVER_HINT = "start one with `sky api start` (or connect with `sky api login -e URL`)"
# Fields of SkyPilot's ManagedJobRecord that `status` reads (sky/schemas/api/responses.py, 0.14).
QUEUE_FIELDS = ("job_id", "job_name", "status", "infra", "resources", "recovery_count", "job_duration",
                "failure_reason")


@dataclass
class LaunchResult:
    job_id: int | None
    cluster: str | None = None


@dataclass(frozen=True)
class LaunchedPrice:
    """What SkyPilot says the launched instance costs: USD per hour for all nodes, on which cloud, for
    which accelerators ("A10G:1"), and from where."""

    per_hour: float
    cloud: str
    accelerators: str | None
    source: str


class Backend(Protocol):
    def validate(self, yaml_path: Path) -> None: ...
    def launch_job(self, task: dict, secrets: dict[str, str], name: str) -> LaunchResult: ...
    def launch_cluster(self, task: dict, secrets: dict[str, str], cluster: str, idle_minutes: int) -> LaunchResult: ...
    def exec_cluster(self, task: dict, secrets: dict[str, str], cluster: str) -> LaunchResult: ...
    def launched_price(self, result: LaunchResult) -> LaunchedPrice | None: ...
    def status(self, job_id: int | None) -> list[dict]: ...
    def cancel(self, job_id: int) -> None: ...


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0].strip() if text else type(exc).__name__


def translate(exc: BaseException) -> CheaptuneError | None:
    """Our one-line error for a SkyPilot or network failure; None for anything we do not recognize."""
    name = type(exc).__name__
    if name == "NoCloudAccessError":
        return BadInput(f"no cloud is enabled for SkyPilot; {ENABLE_HINT}")
    if name == "ResourcesUnavailableError":
        return BadInput(f"SkyPilot found no enabled cloud that can run this task ({_first_line(exc)}); "
                        f"{ENABLE_HINT}, or re-plan with other providers")
    if name in ("ApiServerConnectionError", "ConnectionError", "ConnectTimeout", "ReadTimeout", "Timeout") or (
        isinstance(exc, RuntimeError) and "api server" in str(exc).lower()
    ):
        return BadInput(f"cannot reach a SkyPilot API server ({_first_line(exc)}); {SERVER_HINT}; "
                        f"then {ENABLE_HINT}")
    if name == "CloudError" and "Connection" in str(getattr(exc, "error_type", "")):
        # e.g. the optimizer fetching SkyPilot's catalog with no network
        return BadInput(f"SkyPilot cannot reach the network ({_first_line(exc)[:160]}); check the connection, "
                        f"then {ENABLE_HINT}")
    if name in ("InvalidCloudCredentials", "InvalidCloudConfigs", "CloudUserIdentityError"):
        return BadInput(f"SkyPilot cannot use the cloud credentials ({_first_line(exc)}); {ENABLE_HINT}")
    if type(exc).__module__.startswith("sky."):
        return CheaptuneError(f"SkyPilot: {_first_line(exc)}")
    return None


@contextmanager
def translated() -> Iterator[None]:
    """Re-raise SkyPilot and network failures as one-line CheaptuneErrors."""
    try:
        yield
    except CheaptuneError:
        raise
    except Exception as exc:
        ours = translate(exc)
        if ours is None:
            raise
        raise ours from None


def _sky() -> Any:
    try:
        import sky
    except ImportError:
        raise BadInput("SkyPilot is not installed; install the cloud extra: pip install 'cheaptune[cloud]'") from None
    return sky


@contextmanager
def server_session(keep_on_success: bool) -> Iterator[None]:
    """Run SkyPilot calls; a local API server they had to start is stopped again when they fail (and,
    unless `keep_on_success`, when they succeed), so a command never leaves one behind for nothing."""
    sky = _sky()
    from sky.server import common

    local = common.is_api_server_local()
    was_up = local and common.get_api_server_status().status == common.ApiServerStatus.HEALTHY
    ok = False
    try:
        with translated():
            yield
        ok = True
    finally:
        if local and not was_up and not (ok and keep_on_success):
            with suppress(Exception):  # best effort: the original error is the one to report
                common.get_api_server_status_response.cache_clear()
                if common.get_api_server_status().status == common.ApiServerStatus.HEALTHY:
                    sky.api_stop()


class SkyBackend:
    """SkyPilot 0.14's client SDK: calls return request ids, `sky.stream_and_get` waits and streams logs."""

    def validate(self, yaml_path: Path) -> None:
        """SkyPilot's own schema and task checks, offline (no credentials, no API server)."""
        sky = _sky()
        try:
            sky.Task.from_yaml(str(yaml_path))
        except (ValueError, TypeError, KeyError) as exc:
            raise BadInput(f"SkyPilot rejects {yaml_path}: {_first_line(exc)}") from None

    def _task(self, task: dict, secrets: dict[str, str]) -> Any:
        sky = _sky()
        with translated():
            return sky.Task.from_yaml_config(copy.deepcopy(task), secrets_overrides=list(secrets.items()) or None)

    def launch_job(self, task: dict, secrets: dict[str, str], name: str) -> LaunchResult:
        sky = _sky()
        t = self._task(task, secrets)
        with server_session(keep_on_success=True):
            job_ids, _handle = sky.stream_and_get(sky.jobs.launch(t, name=name))
        return LaunchResult(job_id=job_ids[0] if job_ids else None)

    def launch_cluster(self, task: dict, secrets: dict[str, str], cluster: str, idle_minutes: int) -> LaunchResult:
        sky = _sky()
        t = self._task(task, secrets)
        with server_session(keep_on_success=True):
            job_id, _handle = sky.stream_and_get(
                sky.launch(t, cluster_name=cluster, idle_minutes_to_autostop=idle_minutes, down=True)
            )
        return LaunchResult(job_id=job_id, cluster=cluster)

    def exec_cluster(self, task: dict, secrets: dict[str, str], cluster: str) -> LaunchResult:
        """Run a task on the launched cluster (its setup and mounts are done): the run, with the billed rate."""
        sky = _sky()
        t = self._task(task, secrets)
        with server_session(keep_on_success=True):
            job_id, _handle = sky.stream_and_get(sky.exec(t, cluster_name=cluster))
        return LaunchResult(job_id=job_id, cluster=cluster)

    def launched_price(self, result: LaunchResult) -> LaunchedPrice | None:
        """A cluster's price from SkyPilot's own cost data: its launched resources' hourly cost (the catalog
        row of the instance it got, a marketplace's listing price) x nodes. A managed job's instance lives
        on the jobs controller, which reports no price: None, as for anything SkyPilot does not answer."""
        if result.cluster is None:
            return None
        sky = _sky()
        try:
            with server_session(keep_on_success=True):
                records = sky.stream_and_get(sky.status(cluster_names=[result.cluster]))
            rec = records[0]
            handle = rec.get("handle") if isinstance(rec, dict) else rec.handle
            res, nodes = handle.launched_resources, handle.launched_nodes
            accs = res.accelerators or {}
            name = ",".join(f"{k}:{v:g}" for k, v in accs.items()) or None
            return LaunchedPrice(res.get_cost(SECONDS_PER_HOUR) * nodes, str(res.cloud).lower(), name,
                                 f"SkyPilot's cost of {res.instance_type} in {res.region} x {nodes} node(s)")
        except Exception:  # no price is not a failure: the meter keeps the plan's highest rate
            return None

    def status(self, job_id: int | None) -> list[dict]:
        sky = _sky()
        with server_session(keep_on_success=False):
            try:
                # queue_v2 with the fields we read: 0.14's queue() returns a light set without failure_reason
                # (where the controller writes the exit code) or infra.
                answer = sky.stream_and_get(sky.jobs.queue_v2(
                    refresh=False, skip_finished=False, job_ids=[job_id] if job_id is not None else None,
                    fields=list(QUEUE_FIELDS)))
                records = answer[0] if isinstance(answer, tuple) else answer
            except Exception as exc:
                if type(exc).__name__ != "ClusterNotUpError":  # no jobs controller yet: no managed jobs
                    raise
                records = []
        rows = []
        for r in records or []:
            get = r.get if isinstance(r, dict) else lambda k, r=r: getattr(r, k, None)
            status = get("status")
            rows.append({
                "job_id": get("job_id"), "name": get("job_name"),
                "status": getattr(status, "value", status), "infra": get("infra"),
                "resources": get("resources"), "recoveries": get("recovery_count"),
                "duration_s": get("job_duration"), "failure": get("failure_reason"),
            })
        return rows

    def cancel(self, job_id: int) -> None:
        sky = _sky()
        with server_session(keep_on_success=False):
            sky.stream_and_get(sky.jobs.cancel(job_ids=[job_id]))
