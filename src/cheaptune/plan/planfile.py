"""The plan file: what `cheaptune plan --save` writes and `train --plan` / `launch` read.

It is the contract between the planner, the trainer and the launcher, so it lives apart from all three.
No secrets ever go in it (webhook URLs with tokens, API keys): those stay in the environment.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from cheaptune.catalog.prices import MAX_BILLING_UNIT_S, MAX_MIN_BILLED_S, MAX_PRICE_PER_HOUR
from cheaptune.catalog.prices import MAX_GPU_COUNT as MAX_GPUS
from cheaptune.errors import BadInput
from cheaptune.estimate.settings import TrainSettings
from cheaptune.util import atomic
from cheaptune.util.yamlfile import read_mapping

PLAN_VERSION = 2  # 2: `train` holds every setting resolved (estimate.settings.TrainSettings)
OLD_VERSIONS = {1: "version 1 plan files stored a precision other than the one the plan was sized at"}
# The ranges the CLI flags allow (cli.vocab MAX_BUDGET_USD / MAX_GPUS, train --price-per-hour): a hand-edited
# plan is held to the same, so no number read from it can switch a guard rail off (NaN, inf, negative).
MAX_USD = 1e9
MAX_HOURS = 1e6
MAX_BYTES = 2**60
KINDS = ("on-demand", "spot", "community", "secure")  # catalog.prices.KINDS
BASES = ("quoted", "derived", "range-low")  # catalog.prices.BASES
CPU_BOARD = "CPU"  # offer.gpu of a plan for the CPU it was made on (demo.cpuplan): train runs it there, launch refuses it


def is_cpu_board(gpu: str | None) -> bool:
    """Is `gpu` (a plan's offer.gpu) the CPU board, in any case? A hand-edited plan may spell it "cpu"; train
    and launch must read it alike (train.probe.on_planned_board, launch.task.select_offers)."""
    return str(gpu).strip().lower() == CPU_BOARD.lower()


class _Strict(BaseModel):
    """No unknown keys, no NaN or infinity, no coercion of a wrong type (`gpu_count: true` is not 1)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class CostBreakdown(_Strict):
    compute: float = Field(ge=0, le=MAX_USD, description="GPU-hours billed in the offer's unit and minimum x price, USD")
    storage: float = Field(0.0, ge=0, le=MAX_USD, description="dataset + checkpoints kept during the run, USD")
    egress: float = Field(0.0, ge=0, le=MAX_USD, description="adapter or merged weights leaving the provider, USD")
    spot_overhead: float = Field(0.0, ge=0, le=MAX_USD, description="expected cost of work lost to preemptions, USD")
    total: float = Field(ge=0, le=MAX_USD, description="expected total, USD")
    pessimistic_total: float | None = Field(None, ge=0, le=MAX_USD, description="pessimistic bound (spot), USD")


class Offer(_Strict):
    """One place to run: a provider's instance with its price and billing rules."""

    provider: str = Field(min_length=1)
    gpu: str = Field(min_length=1)
    gpu_count: int = Field(1, ge=1, le=MAX_GPUS)
    num_nodes: int = Field(1, ge=1, le=MAX_GPUS, description="instances in a multi-node job; gpu_count is per instance")
    network: str | None = Field(None, min_length=1, description="between the nodes of a multi-node job: the network "
                                "its time was priced over (plan --network; ethernet when not stated); None on one node")
    region: str = Field("any", min_length=1)
    spot: bool = False
    kind: str = Field("on-demand", description="on-demand | spot | community | secure")
    instance_type: str | None = None
    # 0 is a machine already paid for (the CPU a plan runs on); launch refuses it (launch.task.select_offers).
    price_per_hour: float = Field(ge=0, le=MAX_PRICE_PER_HOUR, description="USD per instance-hour")
    billing_unit_s: int = Field(1, ge=1, le=MAX_BILLING_UNIT_S)
    min_billed_s: int = Field(60, ge=0, le=MAX_MIN_BILLED_S)
    total_cost: float | None = Field(None, ge=0, le=MAX_USD, description="this offer's expected total for the job, USD")
    price_basis: str = Field("quoted", description="quoted | derived (e.g. spot as a share of on-demand) | range-low")
    price_as_of: str = Field("undated", description="the date the price's source gives")

    @field_validator("network")
    @classmethod
    def _known_network(cls, value: str | None) -> str | None:
        from cheaptune.estimate.time.scaling import network_gbit

        if value is not None:
            try:
                network_gbit(value)
            except BadInput as err:  # a hand-edited plan: said with the file's path (problem)
                raise ValueError(str(err)) from None
        return value

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if value not in KINDS:
            raise ValueError(f"must be one of {', '.join(KINDS)}")
        return value

    @field_validator("price_basis")
    @classmethod
    def _known_basis(cls, value: str) -> str:
        if value not in BASES:
            raise ValueError(f"must be one of {', '.join(BASES)}")
        return value


class Prediction(_Strict):
    peak_vram_bytes: int = Field(ge=0, le=MAX_BYTES, description="per GPU, device total (what nvidia-smi shows)")
    gpu_memory_bytes: int = Field(gt=0, le=MAX_BYTES)
    tokens: int = Field(ge=0, le=2**62, description="training tokens per epoch")
    tokens_per_s: float = Field(gt=0, le=1e12)
    hours: float = Field(ge=0, le=MAX_HOURS)
    cost: CostBreakdown


class PlanFile(_Strict):
    version: int = PLAN_VERSION
    created: str = Field(description="ISO timestamp")
    cheaptune_version: str
    model: str = Field(min_length=1, description="what from_pretrained loads: a hub id or a local model folder")
    model_label: str | None = Field(None, description="the name the user planned with (a catalog alias)")
    dataset: str | None = None
    train: TrainSettings
    offer: Offer
    prediction: Prediction
    budget_usd: float | None = Field(None, gt=0, le=MAX_USD)
    deadline_hours: float | None = Field(None, gt=0, le=MAX_HOURS)
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
    bad = next(_not_finite(raw), None)
    if bad is not None:
        raise BadInput(f"plan file {p}: {bad[0]}: must be a finite number (got {bad[1]!r}); fix the value or make "
                       f"the plan again with `cheaptune plan ... --save {p}`")
    try:
        return PlanFile.model_validate(raw, strict=True)  # strict reaches the nested train settings too
    except ValidationError as err:
        raise BadInput(problem(p, err)) from None


def _not_finite(value: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """(path, value) of every NaN or infinity anywhere in the file, the train settings included."""
    if isinstance(value, float) and not math.isfinite(value):
        yield where, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _not_finite(v, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _not_finite(v, f"{where}.{i}")


def problem(path: Path, err: ValidationError) -> str:
    """One line for every field that failed: where, what is wrong, the value given, and how to fix it."""
    return (f"plan file {path}: {fields_wrong(err)}; fix the value or make the plan again with "
            f"`cheaptune plan ... --save {path}`")


def fields_wrong(err: ValidationError) -> str:
    """The first three fields that failed (where, what is wrong, the value given), and how many more."""
    found = err.errors()
    parts = []
    for e in found[:3]:
        where = ".".join(str(x) for x in e["loc"])
        given = f" (got {e['input']!r})" if e["type"] != "missing" and not isinstance(e["input"], dict | list) else ""
        parts.append(f"{where}: {e['msg']}{given}")
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return f"{'; '.join(parts)}{more}"
