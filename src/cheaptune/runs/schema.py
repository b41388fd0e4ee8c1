"""The registry's tables and the fields a run may carry (one place, so writers and readers agree)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput

STATUSES = ("running", "finished", "failed", "budget-stopped", "preempted", "killed")

# Columns a caller may set through start_run(**fields) / RunHandle.update(**fields) / finish(**fields).
RUN_COLUMNS = {
    "name": "TEXT", "model": "TEXT", "method": "TEXT", "gpu": "TEXT", "gpu_count": "INTEGER",
    "provider": "TEXT", "offer": "TEXT", "price_per_hour": "REAL", "budget_usd": "REAL",
    "output_dir": "TEXT", "steps": "INTEGER", "total_steps": "INTEGER", "tokens": "INTEGER",
    "tokens_per_s": "REAL", "train_loss": "REAL", "eval_loss": "REAL", "cost_actual_usd": "REAL",
    "cost_predicted_usd": "REAL", "cost_projected_usd": "REAL", "peak_mem_predicted": "INTEGER",
    "peak_mem_measured": "INTEGER", "stop_reason": "TEXT", "elapsed_s": "REAL",
}
_FIXED = {
    "id": "TEXT PRIMARY KEY", "status": "TEXT NOT NULL", "config_json": "TEXT", "config_hash": "TEXT",
    "started_at": "REAL", "ended_at": "REAL", "heartbeat_at": "REAL", "pid": "INTEGER", "host": "TEXT",
    "proc_start": "TEXT",
}

_TABLES = [
    f"CREATE TABLE IF NOT EXISTS runs ({', '.join(f'{k} {t}' for k, t in {**_FIXED, **RUN_COLUMNS}.items())})",
    "CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, at REAL, "
    "kind TEXT NOT NULL, detail TEXT)",
    "CREATE TABLE IF NOT EXISTS segments (run_id TEXT NOT NULL, idx INTEGER NOT NULL, started_at REAL, "
    "ended_at REAL, cost_usd REAL NOT NULL DEFAULT 0, PRIMARY KEY (run_id, idx))",
    "CREATE TABLE IF NOT EXISTS points (run_id TEXT NOT NULL, step INTEGER NOT NULL, elapsed_s REAL, loss REAL, "
    "eval_loss REAL, cost_usd REAL, PRIMARY KEY (run_id, step))",
    "CREATE TABLE IF NOT EXISTS fired (run_id TEXT NOT NULL, key TEXT NOT NULL, at REAL, PRIMARY KEY (run_id, key))",
    "CREATE INDEX IF NOT EXISTS events_run ON events (run_id)",
]

# Config keys whose values are never stored (webhook headers, tokens, keys).
SECRET_MARKERS = ("header", "token", "secret", "password", "api_key", "apikey", "authorization", "webhook_url")


VERSION = 1  # PRAGMA user_version this code writes; 0 = registries from before versioning


def create(con: sqlite3.Connection, path: Path) -> None:
    """Create the tables once, or bring an older registry up to VERSION after copying it aside.

    WAL lets readers run beside one writer, across processes. A registry from a newer cheaptune is
    refused untouched: an old reader must never rewrite what it does not understand."""
    found = con.execute("PRAGMA user_version").fetchone()[0]
    if found > VERSION:
        raise BadInput(f"run registry {path} was written by a newer cheaptune (schema {found}, this one reads "
                       f"{VERSION}); upgrade cheaptune, or set CHEAPTUNE_HOME to another folder to keep both")
    if found == VERSION:
        return
    had_runs = con.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='runs'").fetchone()
    if had_runs:
        backup = path.with_name(f"{path.name}.v{found}.bak")
        with sqlite3.connect(backup) as copy:
            con.backup(copy)
        copy.close()
    con.execute("PRAGMA journal_mode=WAL")
    for sql in _TABLES:
        con.execute(sql)
    if "remote" not in {r[1] for r in con.execute("PRAGMA table_info(runs)")}:
        con.execute("ALTER TABLE runs ADD COLUMN remote TEXT")  # registries from before remote runs
    con.execute(f"PRAGMA user_version = {VERSION}")


def check_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that are run columns; a typo is a programming error, reported with the valid names."""
    unknown = sorted(set(fields) - set(RUN_COLUMNS) - {"config"})
    if unknown:
        raise ValueError(f"unknown run field(s) {unknown}; valid: {sorted(RUN_COLUMNS)}")
    return {k: v for k, v in fields.items() if k != "config"}


def redact(obj: Any) -> Any:
    """A copy of a config with secret-looking values replaced by '***'."""
    if isinstance(obj, dict):
        return {
            k: "***" if any(m in str(k).lower() for m in SECRET_MARKERS) and v else redact(v) for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    return obj


def config_record(config: dict) -> tuple[str, str]:
    """The stored (redacted) config JSON and a short hash of it, to tell identical configs apart."""
    text = json.dumps(redact(config), sort_keys=True, default=str)
    return text, hashlib.sha256(text.encode()).hexdigest()[:12]
