"""Peak memory of a GRPO step, by part: the policy's training step, the reference copy, the generation engine.

Why parts and not one number: an RL run fails for reasons an SFT estimate cannot show. Colocated vLLM takes
its `gpu_memory_utilization` share of the GPU whatever the trainer needs, and inside that share its weights and
the KV cache of one generation call (num_generations x (prompt + completion) tokens per prompt) must fit, or
the run is refused here rather than after renting. The training step is the SFT simulator's
(estimate_memory) at micro_batch = completions and seq_len = prompt + completion; a server generator's GPUs are
sized apart. Constants: data/grpo.yaml.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.estimate.grpo_setup import GrpoSetup, constants, generator_weight_bytes, kv_bytes_per_token

GIB = 2**30
GATHERED = ("zero3", "fsdp")  # shardings that split a frozen reference copy over the GPUs too
MAX_UTILIZATION = 0.95  # the most of a GPU a refusal suggests giving vLLM (the CUDA context and trainer need some)


@dataclass
class GrpoMemory:
    """Bytes per training GPU by part (`parts`, summing to `total_bytes`) and, in server mode, per generator GPU."""

    parts: dict[str, int]
    total_bytes: int
    generator_parts: dict[str, int]
    generator_total_bytes: int
    kv_bytes_per_token: int
    engine_batch: int
    kv_needed_bytes: int
    kv_capacity_bytes: int | None  # the vLLM share left for the KV cache; None with transformers generation
    train: Any  # the policy step's MemoryEstimate
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["train"] = {"device_total_bytes": self.train.device_total_bytes, "basis": self.train.basis,
                      "trainable_params": self.train.trainable_params, "total_params": self.train.total_params}
        return d


def _policy_step(setup: GrpoSetup) -> Any:
    """The SFT simulator's estimate of the policy's micro-step (GRPO's loss is a per-token log-prob loss over
    the completion: the same step shape as SFT at this length)."""
    from cheaptune.estimate.memory.memory import estimate_memory

    return estimate_memory(dataclasses.replace(setup.request, objective="sft", precompute_ref=False))


def _reference_bytes(setup: GrpoSetup, params: int) -> int:
    """A frozen 16-bit copy of the model when beta > 0 and the weights train; PEFT scores with the adapters
    disabled (no copy)."""
    if not setup.reference_passes or setup.request.method != "full":
        return 0
    req = setup.request
    share = req.gpus if req.gpus > 1 and (req.sharding or "ddp") in GATHERED else 1
    return int(params * 2 / share)


def estimate_grpo_memory(setup: GrpoSetup, gpu_memory_bytes: int | None = None,
                         generator_memory_bytes: int | None = None, stack: str = "cheaptune") -> GrpoMemory:
    """The parts of one GRPO step. `gpu_memory_bytes`: the training GPU (colocated vLLM's share is a fraction
    of it); `generator_memory_bytes`: a server generator's GPU (the training GPU's size when None)."""
    from cheaptune.estimate.memory.memory import model_config

    cfg, _ = model_config(setup.request.model)
    train = _policy_step(setup)
    params = train.total_params
    c = constants()
    kv_tok = kv_bytes_per_token(cfg)
    batch = setup.engine_batch
    kv_need = batch * setup.seq_len * kv_tok
    parts = {"policy training step": train.device_total_bytes}
    ref = _reference_bytes(setup, params)
    if ref:
        parts["reference copy"] = ref
    notes = []
    if setup.reference_passes and not ref:
        notes.append(f"beta {setup.beta:g}: the reference is the base model with the adapters disabled (no copy)")
    weights = int(generator_weight_bytes(params, setup.request.method, stack))
    workspace = int(c["workspace_bytes"])
    gen_parts: dict[str, int] = {}
    capacity = None
    if setup.generation_backend == "transformers":
        parts["generation kv cache (transformers)"] = kv_need
        notes.append("transformers generation runs in the training process: its KV cache is added to the step")
    else:
        where = gpu_memory_bytes if not setup.server else (generator_memory_bytes or gpu_memory_bytes)
        if where is None:
            raise BadInput("a GRPO estimate with vLLM needs the GPU (--gpu): vLLM's share is a fraction of its memory")
        pool = int(setup.memory_utilization * where)
        capacity = pool - weights - workspace
        engine = {"vllm weights": weights, "vllm workspace": workspace,
                  "vllm kv cache (one generation call)": kv_need,
                  "vllm share unused": max(0, pool - weights - workspace - kv_need)}
        if setup.server:
            gen_parts = engine
        else:
            parts.update(engine)
    total = sum(parts.values())
    gen_total = sum(gen_parts.values())
    return GrpoMemory(parts, total, gen_parts, gen_total, kv_tok, batch, kv_need, capacity, train, notes)


def kv_refusal(mem: GrpoMemory, setup: GrpoSetup, gpu_name: str, gpu_memory_bytes: int) -> str | None:
    """One line when vLLM's share cannot hold its weights and one generation call's KV cache, with what to change;
    None when it can."""
    if mem.kv_capacity_bytes is None or mem.kv_capacity_bytes >= mem.kv_needed_bytes:
        return None
    util = setup.memory_utilization
    need_util = (mem.kv_needed_bytes + mem.generator_parts.get("vllm weights", mem.parts.get("vllm weights", 0))
                 + int(constants()["workspace_bytes"])) / gpu_memory_bytes
    fits = max(0, mem.kv_capacity_bytes) // max(1, setup.seq_len * mem.kv_bytes_per_token)
    where = "the vLLM server's" if setup.server else "colocated vLLM's"
    key = "trl vllm-serve's --gpu_memory_utilization" if setup.server else "vllm_gpu_memory_utilization"
    raise_it = (f"raise {key} to {math.ceil(need_util * 100) / 100:.2f}, " if need_util <= MAX_UTILIZATION
                else f"even {MAX_UTILIZATION:.0%} of the GPU would not hold them: ")
    return (f"{where} share of the {gpu_name} ({util:.2f} x {gpu_memory_bytes / GIB:.0f} GiB) holds the KV cache "
            f"of {fits} of the {mem.engine_batch} sequences of one generation call ({mem.engine_batch} x "
            f"{setup.seq_len} tokens need {mem.kv_needed_bytes / GIB:.2f} GiB, {max(0, mem.kv_capacity_bytes) / GIB:.2f} "
            f"GiB are left after the weights): {raise_it}lower the micro-batch, num_generations or "
            "max_completion_length, or generate on a vllm-server")


def fit_problem(mem: GrpoMemory, setup: GrpoSetup, gpu_name: str, gpu_memory_bytes: int,
                headroom: float = 0.10) -> str | None:
    """Why this GRPO step does not fit a `gpu_name` training GPU (the KV refusal first), or None."""
    kv = kv_refusal(mem, setup, gpu_name, gpu_memory_bytes)
    if kv:
        return kv
    budget = gpu_memory_bytes * (1 - headroom)
    if mem.total_bytes > budget:
        colocated = "vllm weights" in mem.parts
        req = setup.request
        fixes = [x for x, on in (("lower vllm_gpu_memory_utilization", colocated), ("the micro-batch", req.micro_batch > 1),
                                 ("turn on gradient checkpointing", not req.grad_ckpt),
                                 ("use LoRA", req.method == "full")) if on]
        share = " (vLLM's share included)" if colocated else ""
        return (f"a GRPO step needs {mem.total_bytes / GIB:.1f} GiB per training GPU{share}, over the "
                f"{budget / GIB:.1f} GiB a {gpu_name} gives with {headroom:.0%} headroom: "
                f"{', '.join(fixes + ['use a larger GPU'])}")
    return None
