"""The plan file: what `cheaptune plan --save` writes and `train --plan` / `launch` read.

It is the contract between the planner, the trainer and the launcher, so it lives apart from all three.
No secrets ever go in it (webhook URLs with tokens, API keys): those stay in the environment.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from cheaptune.errors import BadInput
from cheaptune.estimate.settings import TrainSettings
from cheaptune.util import atomic
from cheaptune.util.yamlfile import read_mapping

PLAN_VERSION = 2  # 2: `train` holds every setting resolved (estimate.settings.TrainSettings)
OLD_VERSIONS = {1: "version 1 plan files stored a precision other than the one the plan was sized at"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CostBreakdown(_Strict):
    compute: float = Field(description="GPU-hours billed in the offer's unit and minimum x price, USD")
    storage: float = Field(0.0, description="dataset + checkpoints kept during the run, USD")
    egress: float = Field(0.0, description="adapter or merged weights leaving the provider, USD")
    spot_overhead: float = Field(0.0, description="expected cost of work lost to preemptions, USD")
    total: float = Field(description="expected total, USD")
    pessimistic_total: float | None = Field(None, description="pessimistic bound (spot), USD")


class Offer(_Strict):
    """One place to run: a provider's instance with its price and billing rules."""

    provider: str
    gpu: str
    gpu_count: int = 1
    num_nodes: int = Field(1, ge=1, description="instances in a multi-node job; gpu_count is per instance")
    region: str = "any"
    spot: bool = False
    kind: str = Field("on-demand", description="on-demand | spot | community | secure")
    instance_type: str | None = None
    price_per_hour: float = Field(description="USD per instance-hour")
    billing_unit_s: int = 1
    min_billed_s: int = 60
    total_cost: float | None = Field(None, description="this offer's expected total for the job, USD")


class Prediction(_Strict):
    peak_vram_bytes: int = Field(description="per GPU, device total (what nvidia-smi shows)")
    gpu_memory_bytes: int
    tokens: int = Field(description="training tokens per epoch")
    tokens_per_s: float
    hours: float
    cost: CostBreakdown


class PlanFile(_Strict):
    version: int = PLAN_VERSION
    created: str = Field(description="ISO timestamp")
    cheaptune_version: str
    model: str = Field(description="what from_pretrained loads: a hub id or a local model folder")
    model_label: str | None = Field(None, description="the name the user planned with (a catalog alias)")
    dataset: str | None = None
    train: TrainSettings
    offer: Offer
    prediction: Prediction
    budget_usd: float | None = None
    deadline_hours: float | None = None
    alternatives: list[Offer] = Field(default_factory=list, description="near-best offers for failover (any_of)")


def save(plan: PlanFile, path: str | Path) -> None:
    """Write the plan atomically as YAML."""
    atomic.write_text(path, yaml.safe_dump(plan.model_dump(mode="json"), sort_keys=False))


def load(path: str | Path) -> PlanFile:
    """Read and validate a plan file; any problem is one BadInput line."""
    p = Path(path)
    raw = read_mapping(p, "plan file", f"create one with `cheaptune plan ... --save {p}`")
    version = raw.get("version", PLAN_VERSION)
    if version != PLAN_VERSION:
        why = OLD_VERSIONS.get(version, f"this cheaptune reads version {PLAN_VERSION}") if isinstance(version, int) else "not a number"
        raise BadInput(f"plan file {p}: version {version!r} cannot be used ({why}); make it again with "
                       f"`cheaptune plan ... --save {p}`")
    try:
        return PlanFile.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise BadInput(f"plan file {p}: {where}: {first['msg']}") from None
