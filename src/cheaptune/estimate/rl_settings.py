"""The GRPO settings that drive an RL run's cost, as one part of the training settings (TrainSettings.rl).

Their names are the train config's keys (cheaptune.train.grpo_options, trl's GRPOConfig names), so a plan's
`train.rl` becomes config fields unchanged and `read_back` of a built GRPOTrainer yields the same object.
Every field is resolved: `generation_backend` is vllm (colocated), vllm-server or transformers, never auto.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class RLSettings(BaseModel):
    """Rollouts and reference model of a GRPO run (defaults: trl 1.16's GRPOConfig, except the completion
    length, cheaptune's 256)."""

    model_config = ConfigDict(extra="forbid")

    num_generations: int = Field(8, ge=2, description="completions sampled per prompt")
    max_completion_length: int = Field(256, ge=1, description="tokens generated per completion at most")
    beta: float = Field(0.0, ge=0, description="KL weight; > 0 scores with a reference model")
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"] = "dapo"
    temperature: float = Field(1.0, gt=0)
    generation_backend: Literal["vllm", "vllm-server", "transformers"] = "vllm"
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, lt=1, description="colocated vLLM's share of the GPU")

    @classmethod
    def from_config(cls, cfg: Any, device: str = "cuda") -> RLSettings:
        """The settings a GRPO TrainConfig runs on `device` (its `auto` backend resolved as the trainer does)."""
        backend = cfg.generation_backend
        if backend == "auto":
            backend = "vllm" if device == "cuda" else "transformers"
        return cls(num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
                   beta=cfg.beta, loss_type=cfg.loss_type, temperature=cfg.temperature, generation_backend=backend,
                   vllm_gpu_memory_utilization=cfg.vllm_gpu_memory_utilization)

    @classmethod
    def from_args(cls, args: Any) -> RLSettings:
        """The settings a built GRPOTrainer runs, from its GRPOConfig."""
        backend = "transformers" if not args.use_vllm else "vllm-server" if args.vllm_mode == "server" else "vllm"
        return cls(num_generations=args.num_generations, max_completion_length=args.max_completion_length,
                   beta=args.beta, loss_type=args.loss_type, temperature=args.temperature, generation_backend=backend,
                   vllm_gpu_memory_utilization=args.vllm_gpu_memory_utilization)

    def grpo_setup(self, request: Any, prompt_len: int, grad_accum: int = 1) -> Any:
        """The GRPO estimators' input (estimate.grpo_setup.GrpoSetup) for these settings on `request`."""
        from cheaptune.estimate.grpo_setup import GrpoSetup

        return GrpoSetup.build(request, prompt_len=prompt_len, max_completion_length=self.max_completion_length,
                               num_generations=self.num_generations, grad_accum=grad_accum, beta=self.beta,
                               generation_backend=self.generation_backend,
                               vllm_gpu_memory_utilization=self.vllm_gpu_memory_utilization)
