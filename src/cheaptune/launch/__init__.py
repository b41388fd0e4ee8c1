"""Run a plan on a rented GPU through SkyPilot: task YAML, managed-job launch, status, cancel."""
