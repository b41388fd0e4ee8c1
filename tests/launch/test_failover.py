"""`launch --watch`: train's out-of-memory exit (11) becomes the plan's next, larger offer, re-submitted with the
same bucket and --resume auto; a limit on failovers; exit 11 with one line when no larger offer is left.
The SkyPilot seam is a scripted double (no cloud is reachable): each launch gets the next job id and the
queue answers from a script per job."""

from __future__ import annotations

import pytest

from cheaptune.errors import BadInput, BudgetStop, OutOfMemory
from cheaptune.launch import launcher
from cheaptune.launch.failover import exit_code, next_offer, ran_on
from cheaptune.launch.options import LaunchOptions
from cheaptune.launch.watch import watch
from cheaptune.plan.planfile import save
from cheaptune.runs.registry import Registry

from .conftest import RecordingBackend, make_plan, offer

OOM_ROW = "Job exited with exit code 11 (user program failure). See `sky jobs logs 1`"


class ScriptedBackend(RecordingBackend):
    """Job ids 1, 2, ... in launch order; `ends[i]` is job i+1's last queue row (after one RUNNING poll)."""

    def __init__(self, ends: list[dict]) -> None:
        super().__init__()
        self.ends, self.polls = ends, {}

    def launch_job(self, task, secrets, name):
        super().launch_job(task, secrets, name)
        return launcher.LaunchResult(job_id=len(self.launched))

    @property
    def launched(self) -> list[dict]:
        return [c for k, c in self.calls if k == "launch_job"]

    def status(self, job_id):
        self.calls.append(("status", {"job_id": job_id}))
        self.polls[job_id] = self.polls.get(job_id, 0) + 1
        row = {"job_id": job_id, "name": "x", "status": "RUNNING", "resources": None, "failure": None}
        return [row if self.polls[job_id] == 1 else {**row, **self.ends[job_id - 1]}]


def _plan():
    """RTX4090 chosen; an RTX3090 (not larger), an L40S (48 GB) and an A100-80GB as alternatives."""
    return make_plan(offer("runpod", "RTX4090", 0.69, total=3.0),
                     [offer("runpod", "RTX3090", 0.43, total=2.9), offer("runpod", "A100-80GB", 1.6, total=6.0),
                      offer("runpod", "L40S", 0.86, total=4.0)], budget=10.0, total=3.0)


def _oom(gpu: str) -> dict:
    return {"status": "FAILED", "failure": OOM_ROW, "resources": f"1x[{gpu}:1]"}


OPTS = LaunchOptions(install="cheaptune")


def _run(tmp_path, backend, plan=None, **kw):
    plan = plan or _plan()
    first = launcher.launch(plan, OPTS, backend, tmp_path / "t.yaml", env={})
    lines: list[str] = []
    info = watch(plan, OPTS, backend, first, sleep=lambda s: None, echo=lines.append,
                 out=tmp_path / "t.yaml", env={}, **kw)
    return first, info, lines


def test_oom_fails_over_to_the_cheapest_larger_offer_with_the_same_bucket(tmp_path):
    backend = ScriptedBackend([_oom("RTX4090"), {"status": "SUCCEEDED"}])
    first, info, lines = _run(tmp_path, backend)
    tasks = [c["task"] for c in backend.launched]
    assert len(tasks) == 2 and info["final"] == "SUCCEEDED" and info["job_id"] == 2
    again = tasks[1]
    assert again["resources"]["accelerators"] == "L40S:1"  # cheapest larger; the 24 GB RTX3090 is not larger
    assert "any_of" not in again["resources"]
    assert "--resume auto" in again["run"]
    bucket = tasks[0]["file_mounts"]["/cheaptune/checkpoints"]
    assert again["file_mounts"]["/cheaptune/checkpoints"] == bucket == {
        "name": f"cheaptune-ckpt-{first['name']}", "mode": "MOUNT_CACHED", "persistent": True}
    assert len(lines) == 1 and "out of memory on runpod/any RTX4090:1" in lines[0] and "L40S" in lines[0]

    old, new = Registry().get_run(first["run_id"]), Registry().get_run(info["run_id"])
    event = next(e for e in old["events"] if e["kind"] == "failover")["detail"]
    assert event["to"].startswith("runpod/any L40S:1") and event["next_job_id"] == 2
    assert event["bucket"] == bucket["name"] and old["status"] == "failed"
    assert new["gpu"] == "L40S" and new["status"] == "finished"
    assert info["failovers"] == [event]


def test_failovers_are_limited_and_no_larger_offer_exits_11(tmp_path):
    backend = ScriptedBackend([_oom("RTX4090"), _oom("L40S"), _oom("A100-80GB")])
    with pytest.raises(OutOfMemory, match="no larger offer") as err:
        _run(tmp_path, backend)
    first, *moved = [c["task"]["resources"] for c in backend.launched]
    assert [r["accelerators"] for r in first["any_of"]] == ["RTX4090:1", "RTX3090:1"]  # within the 10% margin
    assert [r["accelerators"] for r in moved] == ["L40S:1", "A100-80GB:1"]
    assert err.value.exit_code == 11 and "\n" not in str(err.value) and "--bucket cheaptune-ckpt-" in str(err.value)

    limited = ScriptedBackend([_oom("RTX4090"), _oom("L40S")])
    with pytest.raises(OutOfMemory, match=r"failover limit \(1\)"):
        _run(tmp_path, limited, max_failovers=1)
    assert len(limited.launched) == 2


def test_budget_stop_and_other_failures_are_not_failed_over(tmp_path):
    stopped = ScriptedBackend([{"status": "FAILED", "failure": "Job exited with exit code 10 (user program failure)."}])
    with pytest.raises(BudgetStop):
        _run(tmp_path, stopped)
    crashed = ScriptedBackend([{"status": "FAILED_SETUP", "failure": "Job exited with exit code 1"}])
    with pytest.raises(Exception, match="FAILED_SETUP .exit 1.") as err:
        _run(tmp_path, crashed)
    assert err.value.exit_code == 1 and len(crashed.launched) == 1


def test_which_offer_ran_and_what_fits():
    plan = _plan()
    any_of = [plan.offer, plan.alternatives[2]]
    assert ran_on({"resources": "1x[L40S:1]"}, any_of).gpu == "L40S"
    assert ran_on({"resources": None}, any_of).gpu == "L40S"  # unknown: the larger, never retried
    assert exit_code({"failure": OOM_ROW}) == 11 and exit_code({"failure": None}) is None
    # The method must still fit: a plan whose peak needs more than 48 GB skips the L40S.
    big = plan.model_copy(update={"prediction": plan.prediction.model_copy(update={"peak_vram_bytes": 60 * 2**30})})
    assert next_offer(big, plan.offer).gpu == "A100-80GB"
    # Over the budget: not offered.
    poor = plan.model_copy(update={"budget_usd": 5.0})
    assert next_offer(poor, plan.offer).gpu == "L40S" and next_offer(poor, plan.alternatives[2]) is None


def test_cli_watch_fails_over_and_exits_11_in_one_line(tmp_path, run_cli, monkeypatch):
    plan_path = tmp_path / "plan.yaml"
    save(_plan(), plan_path)
    backend = ScriptedBackend([_oom("RTX4090"), _oom("L40S")])
    monkeypatch.setattr("cheaptune.launch.backend.SkyBackend", lambda: backend)
    monkeypatch.setattr("cheaptune.launch.watch.POLL_S", 0.0)
    code, _out, err = run_cli("launch", str(plan_path), "--watch", "--max-failovers", "1", "--install", "cheaptune",
                              "--out", str(tmp_path / "t.yaml"))
    lines = err.strip().splitlines()
    assert code == 11 and lines[-1].startswith("error:") and "failover limit" in lines[-1], err
    assert any(line.startswith("out of memory on runpod/any RTX4090:1") for line in lines)
    code, _out, err = run_cli("launch", str(plan_path), "--watch", "--cluster", "dev")
    assert code == 2 and "--watch" in err and len(err.strip().splitlines()) == 1


def test_cli_watches_a_launched_job_again(tmp_path, run_cli, monkeypatch):
    plan_path = tmp_path / "plan.yaml"
    save(_plan(), plan_path)
    backend = ScriptedBackend([{"status": "SUCCEEDED"}])
    monkeypatch.setattr("cheaptune.launch.backend.SkyBackend", lambda: backend)
    monkeypatch.setattr("cheaptune.launch.watch.POLL_S", 0.0)
    code, out, err = run_cli("launch", str(plan_path), "--watch", "--job", "1")
    assert code == 0 and "managed job 1" in out and "succeeded" in out, err
    assert not backend.launched  # followed, not launched again

    def unreachable(job_id):
        raise BadInput("cannot reach a SkyPilot API server")

    monkeypatch.setattr(backend, "status", unreachable)
    code, _out, err = run_cli("launch", str(plan_path), "--watch", "--job", "1")
    assert code == 2 and "--watch --job 1" in err and len(err.strip().splitlines()) == 2  # the note, the error


def test_status_asks_skypilot_for_the_exit_code_fields(monkeypatch):
    """SkyPilot 0.14's `jobs.queue()` returns a light field set without failure_reason; status asks queue_v2
    for the record fields it reads (checked against SkyPilot's own ManagedJobRecord)."""
    import sky
    from sky.jobs.state import ManagedJobStatus
    from sky.schemas.api.responses import ManagedJobRecord

    from cheaptune.launch.backend import QUEUE_FIELDS, SkyBackend
    from cheaptune.launch.failover import job_status

    assert set(QUEUE_FIELDS) <= set(ManagedJobRecord.model_fields)
    monkeypatch.setenv("SKYPILOT_API_SERVER_ENDPOINT", "http://127.0.0.1:9")  # remote: no local server is started
    asked: dict = {}
    monkeypatch.setattr(sky.jobs, "queue_v2", lambda **kw: asked.update(kw) or "request-id")
    record = ManagedJobRecord(job_id=3, job_name="ct", status=ManagedJobStatus.FAILED, resources="1x[L40S:1]",
                              failure_reason=OOM_ROW)
    monkeypatch.setattr(sky, "stream_and_get", lambda request: ([record], 1, {}, 1))
    rows = SkyBackend().status(3)
    assert asked["job_ids"] == [3] and "failure_reason" in asked["fields"]
    assert job_status(rows[0]) == "FAILED" and exit_code(rows[0]) == 11 and rows[0]["resources"] == "1x[L40S:1]"
