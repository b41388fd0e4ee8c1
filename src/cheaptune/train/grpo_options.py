"""The GRPO keys of the training config: the rewards and the settings that drive an RL run's cost.

A mixin of TrainConfig (cheaptune.train.config), so the keys sit at the top level of the YAML as the
issue and trl spell them (`reward: exact_match`, `answer_column: answer`, `num_generations: 8`) and are
validated in the same single pass as every other key. Defaults are trl's GRPOConfig defaults (trl 1.16)
unless said otherwise.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

BUILTIN_REWARDS = ("exact_match", "numeric", "regex", "json", "length")


class RewardSpec(BaseModel):
    """One reward: a built-in name or the path of a user's .py file, and its weight in the sum."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description=f"{' | '.join(BUILTIN_REWARDS)} | path/to/rewards.py")
    weight: float = 1.0

    @model_validator(mode="after")
    def _known(self) -> RewardSpec:
        if self.name not in BUILTIN_REWARDS and not self.name.endswith(".py"):
            from cheaptune.util.names import did_you_mean

            raise ValueError(f"reward {self.name!r} is neither a built-in ({', '.join(BUILTIN_REWARDS)})"
                             f"{did_you_mean(self.name, BUILTIN_REWARDS)} nor a .py file path")
        return self


class GrpoFields(BaseModel):
    """Keys read only with `objective: grpo`."""

    reward: str | list[str | RewardSpec] | None = Field(
        None, description="exact_match | numeric | regex | json | length | path/to/rewards.py, or a list of "
                          "those or of {name, weight}")
    answer_column: str = Field("answer", description="exact_match/numeric: the column holding the right answer")
    reward_tolerance: float = Field(1e-6, ge=0, description="numeric: the largest accepted |answer - truth|")
    reward_pattern: str | None = Field(None, description="regex: a completion scores 1 when this pattern matches")
    reward_json_keys: list[str] = Field(default_factory=list, description="json: keys the object must have")
    reward_target_length: int = Field(256, ge=1, description="length: tokens beyond this are penalised")
    num_generations: int = Field(8, ge=2, description="completions sampled per prompt (the GRPO group)")
    max_completion_length: int = Field(256, ge=1, description="tokens generated per completion (trl: 512)")
    temperature: float = Field(1.0, gt=0, description="sampling temperature of the rollouts")
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"] = Field(
        "dapo", description="trl's GRPO loss aggregation")
    generation_backend: Literal["auto", "vllm", "vllm-server", "transformers"] = Field(
        "auto", description="auto: colocated vllm on CUDA (extra rl), transformers on CPU")
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, lt=1, description="colocated vllm's share of the GPU")
    vllm_server_url: str | None = Field(None, description="vllm-server: base URL of `trl vllm-serve`")

    def reward_specs(self) -> list[RewardSpec]:
        """The rewards as a list of specs (a single name or path is one spec of weight 1)."""
        items = self.reward if isinstance(self.reward, list) else [self.reward] if self.reward else []
        return [RewardSpec(name=x) if isinstance(x, str) else x for x in items]

    @model_validator(mode="after")
    def _check_grpo(self) -> GrpoFields:
        if getattr(self, "objective", None) != "grpo":
            return self
        specs = self.reward_specs()
        if not specs:
            raise ValueError("objective grpo needs a reward: set reward: exact_match (with answer_column), numeric, "
                             "regex, json, length, or the path of a .py file defining reward(prompts, completions, "
                             "**columns)")
        names = {s.name for s in specs}
        if "regex" in names:
            _compile(self.reward_pattern)
        if self.generation_backend == "vllm-server" and not self.vllm_server_url:
            raise ValueError("generation_backend vllm-server needs vllm_server_url (where `trl vllm-serve` listens)")
        batch = (getattr(self, "micro_batch_size", 1) * getattr(self, "gradient_accumulation_steps", 1)
                 * getattr(self, "gpu_count", 1))
        if batch % self.num_generations:
            raise ValueError(f"micro_batch_size x gradient_accumulation_steps x gpu_count ({batch}) completions per "
                             f"step must "
                             f"be a multiple of num_generations ({self.num_generations}): each prompt's group of "
                             "completions is scored together")
        return self


def _compile(pattern: str | None) -> Any:
    import re

    if not pattern:
        raise ValueError("reward regex needs reward_pattern (a Python regular expression)")
    try:
        return re.compile(pattern)
    except re.error as err:
        raise ValueError(f"reward_pattern {pattern!r} is not a valid regular expression: {err}") from None
