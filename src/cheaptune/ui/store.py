"""Read-only access to the run registry for the dashboard.

The trainer writes the registry (SQLite in WAL mode) while the page reads it: a read-only connection
with a short busy timeout never takes a write lock, never creates or migrates the file, and a row
that cannot be decoded is reported on that run alone instead of breaking the whole page.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from cheaptune.runs.registry import seen_status

BUSY_TIMEOUT_S = 2.0  # WAL readers do not wait for writers; this only covers a checkpoint in progress
MAX_POINTS = 5000  # per series sent to a page; plotted curves need no more


class RegistryUnavailable(Exception):
    """The registry file is missing, unreadable or not a registry: shown as one message on the page."""


class RunStore:
    """Runs, events and series of the registry at `path`, read without ever writing to it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        if not self.path.is_file():
            raise RegistryUnavailable(f"no run registry at {self.path} yet; `cheaptune train` creates it")
        try:
            con = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S)
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA query_only = 1")
        except sqlite3.Error as err:
            raise RegistryUnavailable(f"cannot open run registry {self.path} ({err})") from None
        return con

    def _query(self, sql: str, args: tuple | list = ()) -> list[sqlite3.Row]:
        con = self._connect()
        try:
            return con.execute(sql, args).fetchall()
        except sqlite3.Error as err:
            raise RegistryUnavailable(f"run registry {self.path} cannot be read ({err})") from None
        finally:
            con.close()

    def list_runs(self) -> list[dict]:
        """Every run, newest first; a run whose record does not decode carries `problem` instead of failing."""
        return [_decode(r) for r in self._query("SELECT * FROM runs ORDER BY started_at DESC")]

    def get_run(self, run_id: str) -> dict | None:
        """One run (exact id) with its events, segments and per-step series; None when there is no such id."""
        rows = self._query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            return None
        run = _decode(rows[0])
        events = self._query("SELECT at, kind, detail FROM events WHERE run_id = ? ORDER BY id", (run_id,))
        run["events"] = [_event(r, run) for r in events]
        run["segments"] = [dict(r) for r in self._query(
            "SELECT idx, started_at, ended_at, cost_usd FROM segments WHERE run_id = ? ORDER BY idx", (run_id,))]
        run["series"] = series(self._query(
            "SELECT step, elapsed_s, loss, eval_loss, cost_usd FROM points WHERE run_id = ? ORDER BY step", (run_id,)))
        return run


def series(rows: list[sqlite3.Row]) -> list[dict]:
    """The per-step points, thinned evenly (first and last kept) past MAX_POINTS."""
    points = [dict(r) for r in rows]
    if len(points) <= MAX_POINTS:
        return points
    stride = len(points) / MAX_POINTS
    return [points[int(i * stride)] for i in range(MAX_POINTS - 1)] + [points[-1]]


def _decode(row: sqlite3.Row) -> dict[str, Any]:
    run = dict(row)
    raw = run.pop("config_json", None)
    try:
        run["config"] = json.loads(raw) if raw else None
    except ValueError:
        run["config"] = None
        _problem(run, "its stored config is not valid JSON")
    try:
        run["status"] = seen_status(run)
    except (TypeError, ValueError):
        _problem(run, "its process fields are damaged")
    for key, value in run.items():
        if isinstance(value, bytes):  # a column written with the wrong type
            run[key] = None
            _problem(run, f"field {key} holds bytes")
    return run


def _event(row: sqlite3.Row, run: dict) -> dict[str, Any]:
    try:
        detail = json.loads(row["detail"]) if row["detail"] else None
    except ValueError:
        detail = None
        _problem(run, f"a {row['kind']} event's detail is not valid JSON")
    return {"at": row["at"], "kind": row["kind"], "detail": detail}


def _problem(run: dict, text: str) -> None:
    run["problem"] = f"{run['problem']}; {text}" if run.get("problem") else text
