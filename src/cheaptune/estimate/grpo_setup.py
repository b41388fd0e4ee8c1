"""What one GRPO optimizer step does, in trl's terms, and the architecture facts its estimates read.

A GRPO step samples `num_generations` completions per prompt, scores them, and trains on them. Its cost
depends on settings SFT does not have (trl's GRPOConfig names, the same keys `train` takes: num_generations,
max_completion_length, beta, generation_backend, vllm_gpu_memory_utilization), so they live here beside the
SFT estimator's request, which describes the policy's training micro-step (micro_batch = completions per GPU,
seq_len = prompt + completion). Constants: data/grpo.yaml.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cheaptune.errors import BadInput

DATA = Path(__file__).parent / "data" / "grpo.yaml"
BACKENDS = ("vllm", "vllm-server", "transformers")  # trl: use_vllm + vllm_mode colocate | server, or generate()


@functools.lru_cache(maxsize=2)
def constants(path: Path = DATA) -> dict[str, Any]:
    """data/grpo.yaml as {name: value}; a malformed file is one BadInput line."""
    try:
        doc = yaml.safe_load(Path(path).read_text())
        flat = {**{k: v["value"] for k, v in doc["defaults"].items()},
                **{k: v["value"] for k, v in doc["vllm"].items()},
                **{k: v["value"] for k, v in doc["generation"].items() if isinstance(v, dict)},
                "step_overhead_s": doc["step_overhead_s"]["value"]}
    except (OSError, yaml.YAMLError, KeyError, TypeError) as err:
        raise BadInput(f"{path}: not a valid GRPO constants table ({err}); restore it from the package") from None
    return flat


@dataclass(frozen=True)
class GrpoSetup:
    """One GRPO step. `request` is the policy's training micro-step (estimate.memory.EstimateRequest) on each of
    `request.gpus` training GPUs; the rest are the RL settings, with trl 1.16's defaults."""

    request: Any
    prompt_len: int = 256
    max_completion_length: int = 256
    num_generations: int = 8
    grad_accum: int = 1
    beta: float = 0.0  # > 0: a reference model scores every completion (a frozen copy for full fine-tuning)
    generation_backend: str = "vllm"  # vllm (colocated) | vllm-server | transformers
    vllm_gpu_memory_utilization: float | None = None  # colocated vLLM's share (trl: colocate only); None: 0.3
    server_memory_utilization: float | None = None  # `trl vllm-serve --gpu_memory_utilization`; None: its 0.9
    server_gpus: int = 1  # vllm-server: GPUs of the generator (data-parallel replicas), beside the training GPUs
    steps_per_generation: int | None = None  # None: grad_accum (trl >= 0.18); 1: one generation per micro-step
    importance_sampling: bool | None = None  # None: trl 1.16's default (on with vLLM: one more policy forward)
    expected_completion_length: int | None = None  # the longest completion a call typically runs to; None: the cap

    def __post_init__(self) -> None:
        if self.generation_backend not in BACKENDS:
            raise BadInput(f"generation backend {self.generation_backend!r} is not one of {', '.join(BACKENDS)}")
        if min(self.prompt_len, self.max_completion_length, self.grad_accum, self.server_gpus) < 1:
            raise BadInput("prompt length, completion length, accumulation steps and server GPUs must be >= 1")
        if self.num_generations < 2:
            raise BadInput(f"num_generations must be >= 2 (got {self.num_generations}): GRPO scores each "
                           "completion against its group")
        if self.beta < 0:
            raise BadInput(f"beta must be >= 0 (got {self.beta})")
        for util in (self.vllm_gpu_memory_utilization, self.server_memory_utilization):
            if util is not None and not 0 < util < 1:
                raise BadInput(f"vLLM's gpu_memory_utilization must be in (0, 1) (got {util})")
        expected = self.expected_completion_length
        if expected is not None and not 1 <= expected <= self.max_completion_length:
            raise BadInput(f"the expected completion length ({expected}) must be between 1 and max_completion_length "
                           f"({self.max_completion_length})")
        if self.request.seq_len != self.prompt_len + self.max_completion_length:
            raise BadInput("the training request's seq_len must be prompt_len + max_completion_length")

    @classmethod
    def build(cls, request: Any, **rl: Any) -> GrpoSetup:
        """The setup whose training micro-step is `request` at seq_len = prompt + completion."""
        seq = rl.get("prompt_len", 256) + rl.get("max_completion_length", 256)
        return cls(dataclasses.replace(request, seq_len=seq), **rl)

    @property
    def seq_len(self) -> int:
        return self.prompt_len + self.max_completion_length

    @property
    def server(self) -> bool:
        return self.generation_backend == "vllm-server"

    @property
    def memory_utilization(self) -> float:
        """The generator's share of its GPU: GRPOConfig's vllm_gpu_memory_utilization applies to colocated vLLM
        only (trl 1.16 grpo_config.py); a server takes the share `trl vllm-serve` was started with."""
        util = self.server_memory_utilization if self.server else self.vllm_gpu_memory_utilization
        if util is not None:
            return util
        return constants()["server_memory_utilization" if self.server else "colocate_memory_utilization"]

    @property
    def spg(self) -> int:
        return self.steps_per_generation or self.grad_accum

    @property
    def rounds(self) -> int:
        """Generation calls per optimizer step."""
        return math.ceil(self.grad_accum / self.spg)

    @property
    def completions_per_gpu(self) -> int:
        """Completions each training GPU trains on per optimizer step."""
        return self.request.micro_batch * self.grad_accum

    @property
    def completions(self) -> int:
        """Completions per optimizer step, all GPUs."""
        return self.completions_per_gpu * self.request.gpus

    @property
    def engine_batch(self) -> int:
        """Sequences one generator engine holds at once: a training GPU's share of a generation call when
        colocated, the whole call's over the server's replicas otherwise."""
        per_call = self.request.micro_batch * self.spg
        return math.ceil(per_call * self.request.gpus / self.server_gpus) if self.server else per_call

    @property
    def policy_logprob_passes(self) -> int:
        """Policy forwards before the training step: the old log-probs trl computes for vLLM's sampling
        correction (trl 1.16 grpo_trainer.py), none with transformers generation at one iteration."""
        on = self.importance_sampling
        if on is None:
            on = bool(constants()["importance_sampling"])
        return int(on and self.generation_backend != "transformers")

    @property
    def reference_passes(self) -> int:
        return int(self.beta > 0)


def kv_bytes_per_token(cfg: dict[str, Any], dtype_bytes: int | None = None) -> int:
    """KV-cache bytes per token: layers x kv heads x head dim x 2 (K and V) x dtype bytes."""
    c = cfg.get("text_config") or cfg
    layers = int(c.get("num_hidden_layers") or c.get("n_layer") or 0)
    heads = int(c.get("num_attention_heads") or c.get("n_head") or 0)
    hidden = int(c.get("hidden_size") or c.get("n_embd") or 0)
    if not layers or not heads or not hidden:
        raise BadInput("model config lacks num_hidden_layers/num_attention_heads/hidden_size; pass a complete "
                       "config.json")
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    dtype = int(dtype_bytes or constants()["kv_dtype_bytes"])
    return layers * kv_heads * head_dim * 2 * dtype


def generator_weight_bytes(params: int, method: str, stack: str) -> float:
    """Bytes of the generator's weights: 16-bit, as trl loads vLLM from the model name (a QLoRA run's vLLM
    holds the bf16 base); Unsloth's fast_inference loads the 4-bit base into vLLM itself."""
    if method == "qlora" and stack == "unsloth":
        from cheaptune.estimate.time.throughput import load_table

        return params * float(load_table()["dequant"]["stored_bytes_per_param"]["value"])
    return params * 2.0
