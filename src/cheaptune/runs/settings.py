"""GuardSettings: every knob of the guard rails, validated in one place (BadInput, exit code 2)."""

from __future__ import annotations

from dataclasses import dataclass, field

from cheaptune.errors import BadInput
from cheaptune.runs.shutdown import ON_FINISH, PRESETS


@dataclass
class GuardSettings:
    """Money and time guard rails for one training run.

    price_per_hour is per instance (all `gpu_count` GPUs together, as catalog Offer.price_per_hour);
    gpu_count is recorded, not multiplied. Billing rounds each segment up to `billing_unit_s` and at
    least `min_billed_s`. Alert thresholds are fractions of `budget_usd`. Webhook URL/headers fall back
    to CHEAPTUNE_WEBHOOK_URL / CHEAPTUNE_WEBHOOK_HEADERS. `alert_command` is an argument list (no shell)
    that gets the alert as JSON in $CHEAPTUNE_ALERT. `shutdown_command` (argument list) overrides the
    preset. `idle_minutes` alerts after that long without a finished step; with `idle_stop` the run
    also checkpoints and stops.
    """

    price_per_hour: float | None = None
    gpu_count: int = 1
    billing_unit_s: float = 1
    min_billed_s: float = 0
    budget_usd: float | None = None
    max_hours: float | None = None
    alert_thresholds: tuple[float, ...] = (0.5, 0.8, 1.0)
    webhook_url: str | None = None
    webhook_headers: dict[str, str] = field(default_factory=dict)
    alert_command: list[str] | None = None
    on_finish: str = "nothing"
    shutdown_preset: str = "auto"
    shutdown_command: list[str] | None = None
    dry_run_shutdown: bool = False
    idle_minutes: float | None = None
    idle_stop: bool = False
    starvation_threshold: float = 0.10
    predicted_cost_usd: float | None = None
    predicted_peak_bytes: int | None = None
    # Beyond the contract's fields: tuning with safe defaults.
    checkpoint_s: float = 60.0  # assumed time to save a checkpoint until one is measured (train sizes it)
    force: bool = False  # a projection over the budget warns instead of stopping; the cap still holds
    reproject_after_steps: int = 5  # the first projection (train: after the probe), then every reproject_minutes
    reproject_minutes: float = 10.0
    heartbeat_s: float = 10.0
    spend_file: str | None = None  # runs.ledger.FILE beside the checkpoints: the spend a resumed segment starts from
    webhook_timeout_s: float = 10.0
    webhook_retries: int = 3

    def __post_init__(self) -> None:
        self.alert_thresholds = tuple(sorted({float(t) for t in self.alert_thresholds}))
        problems = []
        if self.price_per_hour is not None and self.price_per_hour < 0:
            problems.append("price per hour must be >= 0")
        if self.budget_usd is not None and self.budget_usd <= 0:
            problems.append("--budget must be > 0 USD")
        if self.budget_usd is not None and self.price_per_hour is None:
            problems.append("--budget needs a price: give a plan, --provider/--gpu/--offer or --price-per-hour")
        if self.max_hours is not None and self.max_hours <= 0:
            problems.append("--max-hours must be > 0")
        if any(not 0 < t <= 10 for t in self.alert_thresholds):
            problems.append("alert thresholds are fractions of the budget in (0, 10], e.g. 0.5,0.8,1.0")
        if self.on_finish not in ON_FINISH:
            problems.append(f"--on-finish must be one of {', '.join(ON_FINISH)}")
        if self.shutdown_preset not in PRESETS:
            problems.append(f"shutdown preset must be one of {', '.join(PRESETS)}")
        if self.shutdown_preset == "custom" and not self.shutdown_command:
            problems.append("shutdown preset custom needs a shutdown command (argument list)")
        if self.idle_minutes is not None and self.idle_minutes <= 0:
            problems.append("idle minutes must be > 0")
        if not 0 < self.starvation_threshold < 1:
            problems.append("starvation threshold is a fraction in (0, 1), e.g. 0.10")
        if self.billing_unit_s <= 0 or self.min_billed_s < 0:
            problems.append("billing unit must be > 0 s and the minimum >= 0 s")
        for name in ("alert_command", "shutdown_command"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, str) or not value):
                problems.append(f"{name} must be a non-empty argument list, not a shell string")
        if problems:
            raise BadInput("; ".join(problems))
