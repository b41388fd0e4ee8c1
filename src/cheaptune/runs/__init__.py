"""Runs: the registry (SQLite), the cost meter, guard rails inside training, alerts, shutdown, reports."""
