"""The run registry: one SQLite file (WAL, busy timeout) that every run writes to and `cheaptune runs` reads.

Use from the trainer:

    run = Registry().start_run(name="x", config=cfg_dict, model="...", method="lora", gpu="A100-80GB",
                               provider="runpod", offer="...", price_per_hour=1.89, budget_usd=20,
                               cost_predicted_usd=7.5, peak_mem_predicted=..., total_steps=1000)
    run.update(steps=10, train_loss=1.2)      # any column of RUN_COLUMNS
    run.event("preempted", {"signal": "SIGTERM"})
    run.add_segment_cost(3.21)                # the CURRENT segment's cost so far (latest value wins)
    run.finish("finished")                    # or failed | budget-stopped | preempted
    run = Registry().resume_run(run.id)       # same record, a new segment (its own billing)

Each call opens its own short connection, so handles are safe to use from threads and processes.
A run that dies without `finish` (SIGKILL, power loss) is found on the next read: its pid is gone on
this host (checked with the process start time, so a reused pid does not fool it) and it is marked
"killed"; a run on another host whose heartbeat is older than STALE_S reads as "lost".
A run started elsewhere (`start_run(remote="skypilot:job/42")`, by `cheaptune launch`) is not tied to
a local pid: it reads "launched" until `set_remote_status` records what the remote side reports.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.runs import schema
from cheaptune.runs.schema import STATUSES
from cheaptune.util.files import check_file
from cheaptune.util.names import did_you_mean
from cheaptune.util.paths import home

STALE_S = 15 * 60
BUSY_TIMEOUT_S = 30.0


def default_path() -> Path:
    return home() / "runs.sqlite"


class Registry:
    """The registry file at `path` (default: runs.sqlite in cheaptune's home folder)."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists():
            check_file(self.path, "run registry", allow_empty=True)
        with self.connect() as con:
            schema.create(con, self.path)

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        """A connection inside one transaction: committed on success, rolled back on error, closed."""
        try:
            con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S)
        except sqlite3.Error as err:
            raise BadInput(f"cannot open run registry {self.path} ({err}); check the folder") from None
        con.row_factory = sqlite3.Row
        try:
            con.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            with con:
                yield con
        except (sqlite3.OperationalError, sqlite3.DatabaseError) as err:
            if isinstance(err, (sqlite3.IntegrityError, sqlite3.ProgrammingError)):
                raise
            raise BadInput(f"run registry {self.path} cannot be used ({err}); if it is damaged, move it aside "
                           "(nothing is deleted) and cheaptune starts a new one") from None
        finally:
            con.close()

    def start_run(self, *, config: dict | None = None, run_id: str | None = None, remote: str | None = None,
                  **fields: Any) -> RunHandle:
        """Record a new running run (segment 0) and return its handle; fields are RUN_COLUMNS.

        `remote` (e.g. "skypilot:job/42") marks a run that executes elsewhere: status "launched", and
        the reaper leaves it alone although the recording process exits."""
        now = time.time()
        rid = run_id or time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + uuid.uuid4().hex[:6]
        row = schema.check_fields(fields)
        if config is not None:
            row["config_json"], row["config_hash"] = schema.config_record(config)
        row.update(id=rid, status="launched" if remote else "running", started_at=now, heartbeat_at=now,
                   remote=remote, **_process_identity())
        with self.connect() as con:
            cols = ", ".join(row)
            con.execute(f"INSERT INTO runs ({cols}) VALUES ({', '.join('?' * len(row))})", list(row.values()))
            con.execute("INSERT INTO segments (run_id, idx, started_at, cost_usd) VALUES (?, 0, ?, 0)", (rid, now))
            _event(con, rid, "start", None)
        return RunHandle(self, rid, segment=0)

    def resume_run(self, ref: str) -> RunHandle:
        """Continue a run's record in a new segment (a fresh instance, billed on its own)."""
        rid = self.resolve(ref)
        now = time.time()
        with self.connect() as con:
            idx = con.execute("SELECT COALESCE(MAX(idx), -1) + 1 FROM segments WHERE run_id = ?", (rid,)).fetchone()[0]
            con.execute("UPDATE segments SET ended_at = COALESCE(ended_at, ?) WHERE run_id = ?", (now, rid))
            con.execute("INSERT INTO segments (run_id, idx, started_at, cost_usd) VALUES (?, ?, ?, 0)", (rid, idx, now))
            ident = _process_identity()
            con.execute(
                "UPDATE runs SET status='running', ended_at=NULL, heartbeat_at=?, pid=?, host=?, proc_start=? WHERE id=?",
                (now, ident["pid"], ident["host"], ident["proc_start"], rid),
            )
            _event(con, rid, "resume", {"segment": idx})
        return RunHandle(self, rid, segment=idx)

    def resolve(self, ref: str) -> str:
        """A run id from an id, a unique id prefix, or a name (the latest run with it); BadInput otherwise."""
        if not ref.strip():  # an empty prefix would match every run and pick one
            raise BadInput("the run is empty; give a run id, id prefix or name (`cheaptune runs` lists them)")
        with self.connect() as con:
            hits = [r[0] for r in con.execute("SELECT id FROM runs WHERE id LIKE ? ESCAPE '\\' ORDER BY started_at DESC", (f"{_like(ref)}%",))]
            if ref in hits:
                return ref
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                raise BadInput(f"run id prefix {ref!r} matches {len(hits)} runs; give more characters")
            named = con.execute("SELECT id FROM runs WHERE name = ? ORDER BY started_at DESC LIMIT 1", (ref,)).fetchone()
            if named:
                return named[0]
            known = [r[0] for r in con.execute("SELECT id FROM runs ORDER BY started_at DESC LIMIT 200")]
        raise BadInput(f"no run {ref!r} in {self.path}{did_you_mean(ref, known)}; `cheaptune runs` lists them")

    def list_runs(self, status: str | None = None, model: str | None = None, limit: int | None = None) -> list[dict]:
        """Runs, newest first, with dead runs marked; `model` matches a substring, case-insensitively."""
        self.reap()
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if status:
            sql += " AND status = ?"
            args.append(status)
        if model:
            sql += " AND LOWER(COALESCE(model, '')) LIKE ? ESCAPE '\\'"
            args.append(f"%{_like(model.lower())}%")
        sql += " ORDER BY started_at DESC"
        if limit:
            sql += " LIMIT ?"
            args.append(int(limit))
        with self.connect() as con:
            return [_view(r) for r in con.execute(sql, args)]

    def get_run(self, ref: str) -> dict:
        """One run with its events, segments and per-step series; BadInput for an unknown id."""
        rid = self.resolve(ref)
        self.reap()
        with self.connect() as con:
            run = _view(con.execute("SELECT * FROM runs WHERE id = ?", (rid,)).fetchone())
            run["events"] = [
                {"at": r["at"], "kind": r["kind"], "detail": json.loads(r["detail"]) if r["detail"] else None}
                for r in con.execute("SELECT * FROM events WHERE run_id = ? ORDER BY id", (rid,))
            ]
            run["segments"] = [dict(r) for r in con.execute("SELECT * FROM segments WHERE run_id = ? ORDER BY idx", (rid,))]
            run["series"] = [
                dict(r) for r in con.execute(
                    "SELECT step, elapsed_s, loss, eval_loss, cost_usd FROM points WHERE run_id = ? ORDER BY step", (rid,)
                )
            ]
        return run

    def set_remote_status(self, remote: str, status: str) -> int:
        """Record what the remote side reports for runs started with `remote` (`cheaptune launch --status`);
        returns how many runs changed. Final statuses also close the run."""
        if status not in (*STATUSES, "launched"):
            raise ValueError(f"status must be one of launched, {', '.join(STATUSES)}")
        now = time.time()
        ended = None if status in ("launched", "running") else now
        with self.connect() as con:
            ids = [r[0] for r in con.execute("SELECT id FROM runs WHERE remote = ? AND status != ?", (remote, status))]
            for rid in ids:
                con.execute("UPDATE runs SET status = ?, ended_at = ?, heartbeat_at = ? WHERE id = ?", (status, ended, now, rid))
                _event(con, rid, "remote_status", {"remote": remote, "status": status})
        return len(ids)

    def reap(self) -> None:
        """Mark runs whose process died on this host without `finish` as killed (lost heartbeats elsewhere stay)."""
        host = socket.gethostname()
        with self.connect() as con:
            rows = con.execute("SELECT id, pid, proc_start FROM runs WHERE status='running' AND host=? AND remote IS NULL",
                               (host,)).fetchall()
            for r in rows:
                if not _alive(r["pid"], r["proc_start"]):
                    con.execute("UPDATE runs SET status='killed', ended_at=heartbeat_at WHERE id=? AND status='running'", (r["id"],))
                    con.execute("UPDATE segments SET ended_at=COALESCE(ended_at, ?) WHERE run_id=?", (time.time(), r["id"]))
                    _event(con, r["id"], "killed", {"pid": r["pid"], "detail": "process ended without finishing the run"})


class RunHandle:
    """Writes one run's progress; every method is one short transaction."""

    def __init__(self, registry: Registry, run_id: str, segment: int) -> None:
        self.registry, self.id, self.segment = registry, run_id, segment

    def update(self, **fields: Any) -> None:
        """Set RUN_COLUMNS fields (steps, tokens, train_loss, cost_projected_usd, ...) and beat the heartbeat."""
        row = schema.check_fields(fields)
        if "config" in fields:
            raise ValueError("config is fixed at start_run")
        row["heartbeat_at"] = time.time()
        with self.registry.connect() as con:
            con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in row)} WHERE id = ?", [*row.values(), self.id])

    def event(self, kind: str, detail: Any = None) -> None:
        """Append an event (alert, preemption, resume, warning) with a JSON-able detail."""
        with self.registry.connect() as con:
            _event(con, self.id, kind, detail)

    def add_segment_cost(self, usd: float) -> None:
        """Set the current segment's cost so far; the run's cost_actual_usd becomes the sum over segments."""
        with self.registry.connect() as con:
            con.execute("UPDATE segments SET cost_usd = ? WHERE run_id = ? AND idx = ?", (float(usd), self.id, self.segment))
            con.execute(
                "UPDATE runs SET cost_actual_usd = (SELECT SUM(cost_usd) FROM segments WHERE run_id = ?), heartbeat_at = ? "
                "WHERE id = ?",
                (self.id, time.time(), self.id),
            )

    def prior_cost_usd(self) -> float:
        """What earlier segments of this run cost (0 for a fresh run)."""
        with self.registry.connect() as con:
            row = con.execute(
                "SELECT COALESCE(SUM(cost_usd), 0) FROM segments WHERE run_id = ? AND idx < ?", (self.id, self.segment)
            ).fetchone()
        return float(row[0])

    def prior_elapsed_s(self) -> float:
        """Wall time of earlier segments (for --max-hours across resumes)."""
        with self.registry.connect() as con:
            row = con.execute(
                "SELECT COALESCE(SUM(ended_at - started_at), 0) FROM segments WHERE run_id = ? AND idx < ? AND ended_at IS NOT NULL",
                (self.id, self.segment),
            ).fetchone()
        return float(row[0])

    def fire_once(self, key: str) -> bool:
        """True the first time `key` is claimed for this run, in any process or segment; False afterwards."""
        with self.registry.connect() as con:
            cur = con.execute("INSERT OR IGNORE INTO fired (run_id, key, at) VALUES (?, ?, ?)", (self.id, key, time.time()))
            return cur.rowcount == 1

    def record_point(self, step: int, *, elapsed_s: float | None = None, loss: float | None = None,
                     eval_loss: float | None = None, cost_usd: float | None = None) -> None:
        """One point of the per-step series the report plots; later values for the same step merge in."""
        with self.registry.connect() as con:
            con.execute(
                "INSERT INTO points (run_id, step, elapsed_s, loss, eval_loss, cost_usd) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(run_id, step) DO UPDATE SET elapsed_s = COALESCE(excluded.elapsed_s, elapsed_s), "
                "loss = COALESCE(excluded.loss, loss), eval_loss = COALESCE(excluded.eval_loss, eval_loss), "
                "cost_usd = COALESCE(excluded.cost_usd, cost_usd)",
                (self.id, int(step), elapsed_s, loss, eval_loss, cost_usd),
            )

    def finish(self, status: str, **fields: Any) -> None:
        """Close the run (finished | failed | budget-stopped | preempted) and its current segment."""
        if status not in STATUSES or status == "running":
            raise ValueError(f"finish status must be one of {', '.join(s for s in STATUSES if s != 'running')}")
        now = time.time()
        row = schema.check_fields(fields)
        row.update(status=status, ended_at=now, heartbeat_at=now)
        with self.registry.connect() as con:
            con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in row)} WHERE id = ?", [*row.values(), self.id])
            con.execute("UPDATE segments SET ended_at = ? WHERE run_id = ? AND idx = ?", (now, self.id, self.segment))
            _event(con, self.id, "finish", {"status": status})


def start_run(**kwargs: Any) -> RunHandle:
    return Registry().start_run(**kwargs)


def resume_run(run_id: str) -> RunHandle:
    return Registry().resume_run(run_id)


def list_runs(**kwargs: Any) -> list[dict]:
    return Registry().list_runs(**kwargs)


def get_run(run_id: str) -> dict:
    return Registry().get_run(run_id)


def seen_status(run: dict) -> str:
    """The status a reader shows without writing (the dashboard): what `reap` and `_view` would make of it."""
    if run.get("status") != "running" or run.get("remote"):
        return str(run.get("status"))
    if run.get("host") == socket.gethostname():
        return "running" if _alive(run.get("pid"), run.get("proc_start")) else "killed"
    stale = run.get("heartbeat_at") and time.time() - run["heartbeat_at"] > STALE_S
    return "lost" if stale else "running"


def _event(con: sqlite3.Connection, rid: str, kind: str, detail: Any) -> None:
    con.execute(
        "INSERT INTO events (run_id, at, kind, detail) VALUES (?, ?, ?, ?)",
        (rid, time.time(), kind, None if detail is None else json.dumps(detail, default=str)),
    )


def _view(row: sqlite3.Row) -> dict:
    run = dict(row)
    run["config"] = json.loads(run.pop("config_json")) if run.get("config_json") else None
    stale = run.get("heartbeat_at") and time.time() - run["heartbeat_at"] > STALE_S
    if run["status"] == "running" and stale and run.get("host") != socket.gethostname():
        run["status"] = "lost"
    return run


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _process_identity() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "proc_start": _proc_start(os.getpid())}


def _proc_start(pid: int) -> str | None:
    """The process start time in clock ticks since boot (Linux), so a reused pid is told apart."""
    fields = _proc_stat(pid)
    return fields[19] if fields else None


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (index 0 is the state), or None off Linux."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _alive(pid: int | None, proc_start: str | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _proc_stat(pid)
    if fields is None:
        return True
    # A zombie (state Z) has exited; only its parent has not collected it yet.
    return fields[0] != "Z" and (proc_start is None or fields[19] == proc_start)
