"""Money: compute billed in the provider's unit and minimum, storage prorated, egress per GB.

Each term is a small pure function so the planner can show it separately and tests can pin its rules.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput

SECONDS_PER_HOUR = 3600.0
BYTES_PER_GB = 1e9
BF16_BYTES = 2
STARTUP_FILE = Path(__file__).parents[1] / "data" / "startup.yaml"


@functools.lru_cache(maxsize=2)
def constants(path: Path = STARTUP_FILE) -> dict[str, float]:
    """The start-up/storage constants (values only; sources stay in the file)."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
        return {k: float(v["value"]) for k, v in doc["constants"].items()}
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as err:
        raise BadInput(f"{path}: not a valid constants file ({err}); restore it from the package") from None


@functools.lru_cache(maxsize=2)
def sources(path: Path = STARTUP_FILE) -> dict[str, str]:
    """Each start-up/storage constant's source, as the data file states it (what the plan cites per time term)."""
    doc = yaml.safe_load(Path(path).read_text())
    return {k: f"{v['kind']}: {v['source']}" for k, v in doc["constants"].items()}


def billed_seconds(run_s: float, billing_unit_s: float = 1, min_billed_s: float = 0) -> float:
    """Seconds the provider charges: rounded up to the billing unit, never below the minimum."""
    if run_s <= 0:
        return 0.0
    unit = max(float(billing_unit_s), 1e-9)
    return max(float(min_billed_s), math.ceil(run_s / unit - 1e-9) * unit)


def compute_cost(run_s: float, price_per_hour: float, billing_unit_s: float = 1, min_billed_s: float = 0) -> float:
    """USD for one instance running `run_s` seconds (the price is per instance, all its GPUs)."""
    return billed_seconds(run_s, billing_unit_s, min_billed_s) / SECONDS_PER_HOUR * price_per_hour


def storage_cost(gb: float, hours: float, gb_month_price: float, hours_per_month: float | None = None) -> float:
    """USD to keep `gb` for `hours` at a $/GB-month rate (prorated)."""
    per_month = hours_per_month or constants()["hours_per_month"]
    return max(gb, 0.0) * max(hours, 0.0) / per_month * max(gb_month_price, 0.0)


def egress_cost(gb: float, per_gb: float | None) -> float:
    """USD for `gb` leaving the provider; providers with no egress fee pass None or 0."""
    return max(gb, 0.0) * (per_gb or 0.0)


@dataclass(frozen=True)
class Artifacts:
    """Sizes (bytes) of what a run writes: the result shipped out and each checkpoint kept."""

    adapter_bytes: int
    merged_bytes: int
    checkpoint_bytes: int

    def shipped_bytes(self, method: str, merged: bool = False) -> int:
        """Full fine-tunes ship the whole model; adapters ship the adapter unless merged."""
        return self.merged_bytes if (method == "full" or merged) else self.adapter_bytes


# Optimizer state saved per trainable parameter, in units of the parameter's own bytes (torch AdamW keeps
# two moments in the parameter's dtype) or as fixed bytes (bitsandbytes 8-bit: two uint8 moments; HF's
# `sgd` has no momentum; Adafactor's factored second moment is negligible per parameter).
OPTIMIZER_STATE = {"adamw": ("per_param_dtype", 2.0), "adamw-8bit": ("bytes", 2.0),
                   "paged-adamw-8bit": ("bytes", 2.0), "sgd": ("bytes", 0.0), "adafactor": ("bytes", 0.0)}
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def trainable_bytes(method: str, precision: str | None = None) -> int:
    """Bytes per trainable weight as the trainer holds (and saves) it: the policy's adapter dtype for
    PEFT methods; for full fine-tuning the base dtype (fp32 master weights under -mixed)."""
    from cheaptune.estimate.policy import DEFAULT_PRECISION, resolve_policy

    pol = resolve_policy(method, precision or DEFAULT_PRECISION[method])
    return _DTYPE_BYTES[pol.base if method == "full" else pol.adapter]


def artifact_sizes(method: str, total_params: int, trainable_params: int, precision: str | None = None,
                   optimizer: str = "adamw") -> Artifacts:
    """Adapter as trained (its real dtype), merged model in 16 bits, and a checkpoint: the trained weights
    plus the optimizer state, both in the dtypes the run keeps (precision None: the method's default)."""
    per_weight = trainable_bytes(method, precision)
    kind, n = OPTIMIZER_STATE[optimizer]
    per_state = n * per_weight if kind == "per_param_dtype" else n
    adapter = trainable_params * per_weight
    merged = total_params * BF16_BYTES
    trained = trainable_params * per_weight if method == "full" else adapter
    ckpt = trained + int(trainable_params * per_state)
    return Artifacts(adapter, merged, ckpt)


def cost_summary(parts: dict[str, float]) -> dict[str, Any]:
    """Round the parts to cents-and-a-bit and add the total (kept in one place for every caller)."""
    out = {k: round(v, 4) for k, v in parts.items()}
    out["total"] = round(sum(parts.values()), 4)
    return out
