import json
import multiprocessing as mp
import os
import subprocess
import sys
import threading

import pytest

from cheaptune.errors import BadInput
from cheaptune.runs.registry import Registry


def _writer(path, n):
    reg = Registry(path)
    for i in range(n):
        run = reg.start_run(name=f"p{os.getpid()}-{i}", model="tiny")
        for step in range(5):
            run.update(steps=step)
            run.record_point(step, loss=1.0 / (step + 1))
        run.add_segment_cost(0.5)
        run.event("alert", {"i": i})
        run.finish("finished", eval_loss=1.0)


def test_concurrent_writers_threads_and_processes(tmp_path):
    path = tmp_path / "runs.sqlite"
    Registry(path)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), 4)) for _ in range(2)]
    threads = [threading.Thread(target=_writer, args=(path, 4)) for _ in range(3)]
    for w in procs + threads:
        w.start()
    for w in threads + procs:
        w.join(60)
    assert all(p.exitcode == 0 for p in procs)
    runs = Registry(path).list_runs()
    assert len(runs) == 20 and {r["status"] for r in runs} == {"finished"}
    assert all(r["cost_actual_usd"] == 0.5 and r["steps"] == 4 for r in runs)
    assert len(Registry(path).get_run(runs[0]["id"])["series"]) == 5


def test_sigkilled_run_reads_as_killed(run_cli):
    code = (
        "import os, signal; from cheaptune.runs.registry import Registry\n"
        "r = Registry().start_run(name='doomed', model='tiny'); r.update(steps=3)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=os.environ.copy(), timeout=60)
    assert proc.returncode == -9
    rc, out, _ = run_cli("runs", "--json")
    assert rc == 0
    (run,) = json.loads(out)
    assert run["name"] == "doomed" and run["status"] == "killed" and run["steps"] == 3
    assert any(e["kind"] == "killed" for e in Registry().get_run(run["id"])["events"])


def test_live_run_stays_running_and_resume_adds_segment():
    reg = Registry()
    run = reg.start_run(name="live", config={"lr": 1e-4, "webhook_headers": {"Authorization": "x"}})
    assert reg.list_runs()[0]["status"] == "running"
    run.add_segment_cost(2.0)
    run.finish("preempted")
    again = reg.resume_run("live")
    again.add_segment_cost(1.0)
    again.finish("finished")
    rec = reg.get_run(run.id[:10])
    assert rec["status"] == "finished" and rec["cost_actual_usd"] == pytest.approx(3.0)
    assert [e["kind"] for e in rec["events"]] == ["start", "finish", "resume", "finish"]
    assert rec["config"]["webhook_headers"] == "***" and len(rec["config_hash"]) == 12


def test_unknown_run_and_bad_fields():
    reg = Registry()
    reg.start_run(name="a")
    with pytest.raises(BadInput, match="no run 'nope'"):
        reg.get_run("nope")
    with pytest.raises(ValueError, match="unknown run field"):
        reg.start_run(stepz=1)


def test_remote_run_is_launched_not_killed_until_its_status_is_recorded():
    code = ("from cheaptune.runs.registry import Registry\n"
            "print(Registry().start_run(name='sky', model='tiny', remote='skypilot:job/42').id)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=os.environ.copy(), capture_output=True, text=True,
                          timeout=60, check=True)
    rid = proc.stdout.strip()
    reg = Registry()
    reg.start_run(name="local-dead", model="tiny")  # a local run in this live process stays running
    (run,) = reg.list_runs(status="launched")  # the launching process is gone: still not "killed"
    assert run["id"] == rid and run["remote"] == "skypilot:job/42" and run["ended_at"] is None
    assert reg.set_remote_status("skypilot:job/42", "running") == 1
    assert reg.get_run(rid)["status"] == "running"  # running remotely: the reaper still skips it
    assert reg.set_remote_status("skypilot:job/42", "finished") == 1
    done = reg.get_run(rid)
    assert done["status"] == "finished" and done["ended_at"] is not None
    assert [e["detail"]["status"] for e in done["events"] if e["kind"] == "remote_status"] == ["running", "finished"]
    with pytest.raises(ValueError):
        reg.set_remote_status("skypilot:job/42", "exploded")


def test_old_registry_file_gains_the_remote_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
    con.commit()
    con.close()
    Registry(path)
    cols = {r[1] for r in sqlite3.connect(path).execute("PRAGMA table_info(runs)")}
    assert "remote" in cols


def test_corrupt_registry_is_one_line_and_kept(tmp_path):

    p = tmp_path / "runs.sqlite"
    p.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(BadInput, match="run registry .* cannot be used .*move it aside"):
        Registry(p)
    assert p.read_bytes() == b"this is not sqlite at all" * 100
    with pytest.raises(BadInput, match="is a folder"):
        Registry(tmp_path)


def test_newer_registry_refused_untouched_and_old_one_backed_up(tmp_path):
    import sqlite3

    from cheaptune.runs import schema

    newer = tmp_path / "newer.sqlite"
    with sqlite3.connect(newer) as con:
        con.execute(f"PRAGMA user_version = {schema.VERSION + 1}")
    con.close()
    before = newer.read_bytes()
    with pytest.raises(BadInput, match="written by a newer cheaptune"):
        Registry(newer)
    assert newer.read_bytes() == before

    old = tmp_path / "old.sqlite"  # a version-0 registry: runs table without the `remote` column
    with sqlite3.connect(old) as con:
        con.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, status TEXT NOT NULL, started_at REAL)")
        con.execute("INSERT INTO runs VALUES ('r1', 'finished', 1.0)")
    con.close()
    Registry(old)
    backup = tmp_path / "old.sqlite.v0.bak"
    with sqlite3.connect(backup) as con:
        assert [r[1] for r in con.execute("PRAGMA table_info(runs)")] == ["id", "status", "started_at"]
        assert con.execute("SELECT id FROM runs").fetchall() == [("r1",)]
    con.close()
    with sqlite3.connect(old) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == schema.VERSION
        assert "remote" in [r[1] for r in con.execute("PRAGMA table_info(runs)")]
    con.close()
    assert Registry(old).path == old and not (tmp_path / "old.sqlite.v1.bak").exists()


def test_home_that_is_a_file(tmp_path, monkeypatch):
    from cheaptune.util.paths import home

    (tmp_path / "f").write_text("x")
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path / "f"))
    with pytest.raises(BadInput, match=r"a file is in the way\); set CHEAPTUNE_HOME"):
        home()
