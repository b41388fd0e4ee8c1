"""Per-GPU memory on N GPUs, derived from a single-GPU estimate's breakdown.

Data parallelism changes only where the model state lives, not what one GPU computes per
micro-batch: activations, logits and kernel workspaces stay per GPU, while weights, gradients and
optimizer state are replicated (DDP), partly sharded (ZeRO-2: gradients + optimizer) or fully
sharded (FSDP full shard, ZeRO-3), and each engine adds its communication buffers. Offload moves
sharded state to host RAM. Constants and their sources live in data/sharding.yaml.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

import yaml

from cheaptune.errors import BadInput
from cheaptune.estimate.memory import overheads
from cheaptune.estimate.memory.result import point_of, with_range

DATA = Path(__file__).parents[1] / "data" / "sharding.yaml"
SHARDINGS = ("ddp", "fsdp", "zero2", "zero3")
MODEL_STATE = ("weights", "trainable_weights", "gradients", "optimizer_state")
# category -> is it split across GPUs, per strategy
SHARDED = {
    "ddp": set(),
    "zero2": {"gradients", "optimizer_state"},
    "zero3": {"weights", "trainable_weights", "gradients", "optimizer_state"},
    "fsdp": {"weights", "trainable_weights", "gradients", "optimizer_state"},
}
# category -> moved to host RAM with offload, per strategy (FSDP CPUOffload moves params, hence grads
# and the optimizer step; DeepSpeed offload_optimizer moves grads + optimizer, ZeRO-3 offload_param weights)
OFFLOADED = {
    "zero2": {"gradients", "optimizer_state"},
    "zero3": {"weights", "trainable_weights", "gradients", "optimizer_state"},
    "fsdp": {"weights", "trainable_weights", "gradients", "optimizer_state"},
}


@cache
def constants() -> dict[str, float]:
    raw = yaml.safe_load(DATA.read_text())
    return {k: v["value"] for k, v in raw.items() if isinstance(v, dict)}


def check_sharding(gpus: int, sharding: str | None, offload: bool = False) -> str:
    """The sharding to use for `gpus` GPUs (ddp when unset); BadInput for impossible combinations."""
    if gpus < 1:
        raise BadInput(f"--gpus must be >= 1 (got {gpus})")
    s = (sharding or "ddp").lower().replace("-", "")
    s = {"fsdpcpuoffload": "fsdp", "deepspeed": "zero3", "zero": "zero3"}.get(s, s)
    if s not in SHARDINGS:
        raise BadInput(f"--sharding {sharding!r} is not one of {', '.join(SHARDINGS)}")
    if offload and s == "ddp":
        raise BadInput("--offload needs --sharding fsdp, zero2 or zero3 (DDP keeps everything on the GPU)")
    return s


def _layer_dims(cfg: dict, total_params: int) -> tuple[int, int, int]:
    """(params per decoder layer, params of the root unit: embeddings + lm_head, hidden size)."""
    hidden = int(cfg.get("hidden_size") or cfg.get("n_embd") or cfg.get("d_model") or 0)
    layers = int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or cfg.get("num_layers") or 1)
    vocab = int(cfg.get("vocab_size") or 0)
    root = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    return max(total_params - root, 0) // max(layers, 1), root, hidden


def _quant_state_bytes(single, cfg: dict) -> int:
    """bnb 4-bit quant state (absmax per 64-weight block; nf4-dq: uint8 absmax + fp32 per 256 of them).

    bitsandbytes 0.43.0 nn/modules.py L288-290 (Params4bit._quantize) keeps it on the Linear4bit module and
    L410-417 (Linear4bit.forward) re-attaches it after FSDP flattening replaced the weight: it is a module
    attribute, not a parameter, so FSDP/ZeRO-3 neither shard nor offload it; every GPU holds all of it.
    """
    quant = single.inputs.get("quant")
    if not quant:
        return 0
    _, root, _ = _layer_dims(cfg, single.total_params)
    blocks = max(single.total_params - single.trainable_params - root, 0) / 64
    return int(blocks + blocks / 256 * 4 if quant == "nf4-dq" else blocks * 4)


def _model_config(single) -> dict:
    from cheaptune.catalog.models import resolve_model

    return dict(resolve_model(str(single.inputs.get("model"))).config)


@dataclasses.dataclass(frozen=True)
class FsdpRun:
    """How an FSDP run holds gradients, where it departs from FSDP2's per-parameter default.

    mixed_units: FSDP1 (use_orig_params=True) flattens each wrapped block's frozen and trainable weights into
    one FlatParameter, whose gradient covers every element: torch warns "gradient memory usage will be higher
    than expected" (torch/distributed/fsdp/_wrap_utils.py, quoted in Lightning-AI/litgpt#1538).
    no_sync: gradient accumulation under FSDP1's no_sync() keeps each unit's unsharded gradient on every rank
    until the syncing micro-step (FullyShardedDataParallel.no_sync docstring: "FSDP will accumulate the full
    model gradients (instead of gradient shards) until the eventual sync").
    """

    mixed_units: bool = False
    no_sync: bool = False

    @classmethod
    def of(cls, req) -> FsdpRun:
        """The run a request's trainer makes at its versions: the fsdp1_flat_units mechanism (data/versions.yaml)
        and the profile's fsdp_no_sync (data/profiles.yaml)."""
        from cheaptune.estimate.memory.mechanisms import mechanism
        from cheaptune.estimate.memory.profiles import get_profile

        return cls(mechanism(req, "fsdp1_flat_units"), get_profile(req.trainer).fsdp_no_sync)


def _fsdp_grads(single, cfg: dict, gpus: int, run: FsdpRun) -> tuple[int, int, int]:
    """FSDP gradient bytes per GPU: (held through the micro-steps, after the sync, one unit's unsharded)."""
    b = single.breakdown
    total, trainable = max(single.total_params, 1), single.trainable_params
    layer, root, _ = _layer_dims(cfg, single.total_params)
    if run.mixed_units:  # every element of the blocks' flat params, in the flat param's (weights') dtype
        w_bytes = (b.get("weights", 0) + b.get("trainable_weights", 0)) / total
        full, unit = int((total - root) * w_bytes), int(layer * w_bytes)
    else:
        g_bytes = b.get("gradients", 0) / trainable if trainable and b.get("gradients") else 2.0
        full, unit = b.get("gradients", 0), int(trainable * layer / total * g_bytes)
    synced = -(-full // gpus)
    return (full if run.no_sync else synced), synced, unit


def _comm_buffers(s: str, single, cfg: dict, gpus: int, run: FsdpRun = FsdpRun(),
                  offload: bool = False) -> dict[str, int]:
    """Communication buffers per GPU, by name; they are allocated by torch (count in allocated).

    The gathered root unit adds root x (1 - 1/N) to the local shard counted in weights; with offload that shard
    is on the host (FSDP1 FlatParamHandle.pre_unshard copies it to the GPU, then all-gathers the whole unit),
    so the whole root unit is on the GPU.
    """
    local = 0 if offload else 1
    c = constants()
    b = single.breakdown
    total, trainable = max(single.total_params, 1), single.trainable_params
    w_bytes = (b.get("weights", 0) + b.get("trainable_weights", 0)) / total  # average bytes per param
    g_bytes = b.get("gradients", 0) / trainable if trainable and b.get("gradients") else 2.0
    layer, root, _ = _layer_dims(cfg, single.total_params)
    if s == "ddp":
        return {"ddp_buckets": int(max(c["ddp_bucket_cap_bytes"],
                                       c["ddp_bucket_copy_of_gradients"] * b.get("gradients", 0)))}
    if s == "fsdp":
        return {"fsdp_gathered_units": int(c["fsdp_units_in_flight"] * layer * w_bytes),
                # embeddings and lm_head stay 16-bit even when the blocks are 4-bit
                "fsdp_root_unit": int(c["fsdp_root_unit_unsharded"] * root * max(w_bytes, 2) * (1 - local / gpus)),
                "fsdp_unsharded_grads": _fsdp_grads(single, cfg, gpus, run)[2]}
    reduce = min(c["deepspeed_reduce_bucket_elems"], trainable) * g_bytes
    if s == "zero2":
        gather = min(c["deepspeed_allgather_bucket_elems"], trainable) * w_bytes
        return {"zero_reduce_bucket": int(reduce), "zero_allgather_bucket": int(gather)}
    gather = (layer + c["deepspeed_stage3_prefetch_elems"]) * w_bytes
    return {"zero_reduce_bucket": int(reduce), "zero3_gathered_params": int(gather)}


def _zero3_persistent_lora(single, cfg: dict) -> bool:
    """LoRA matrices under stage3_param_persistence_threshold elements stay whole on every GPU."""
    r = int(single.inputs.get("lora_r") or 0)
    hidden = int(cfg.get("hidden_size") or 0)
    return single.inputs.get("method") in ("lora", "qlora", "dora") and 0 < r * hidden < \
        constants()["deepspeed_stage3_persistence_elems"]


def _model_state(s: str, single, cfg: dict, gpus: int, offload: bool,
                 run: FsdpRun = FsdpRun()) -> tuple[dict[str, int], int]:
    """Per-GPU bytes of each model-state category (gradients: as held through a backward), and the bytes
    moved to host RAM per GPU."""
    b = single.breakdown
    sharded = set(SHARDED[s])
    if s == "zero3" and _zero3_persistent_lora(single, cfg):
        sharded.discard("trainable_weights")
    state = {k: b.get(k, 0) for k in MODEL_STATE}
    if s.startswith("zero") and single.inputs.get("optimizer", "adamw") == "adamw":
        # DeepSpeed keeps fp32 master weights + fp32 moments, whatever the single-GPU state dtype was
        state["optimizer_state"] = max(state["optimizer_state"],
                                       int(constants()["deepspeed_adam_bytes_per_param"] * single.trainable_params))
    per_gpu = {k: (-(-v // gpus) if k in sharded else v) for k, v in state.items()}
    whole = _quant_state_bytes(single, cfg) if "weights" in sharded else 0
    if s == "fsdp":
        per_gpu["gradients"] = _fsdp_grads(single, cfg, gpus, run)[0]
    host = 0
    if offload:
        for k in OFFLOADED[s]:
            host += per_gpu[k]
            per_gpu[k] = 0
    if whole:  # the quant state stays whole on the GPU, in place of its shard
        host -= -(-whole // gpus) if offload else 0
        per_gpu["weights"] += whole - (0 if offload else -(-whole // gpus))
    return per_gpu, host


def _sharded_phases(single, per_gpu: dict[str, int], comm: int, synced_grads: int | None = None,
                    grads_persist: bool = False) -> dict[str, int]:
    """Each phase's per-GPU peak: the single-GPU peak minus only the state that phase holds, plus buffers.

    Weights and optimizer state live through every phase of a steady-state step. Gradients do not exist
    during the forward (zero_grad sets them to None), all exist in the optimizer step, and in the backward
    they are counted only when the backward holds the overall peak (the breakdown is taken there), so
    savings are never credited to a phase that did not have them. `grads_persist`: accumulated gradients
    (FSDP no_sync) live through the forwards too; `synced_grads`: what the optimizer step holds when that
    differs from what the backward held. A single estimate with accumulation (inputs grad_accum > 1) holds every
    gradient in every phase of its later micro-step, so each phase's one-GPU gradients give way to the per-GPU ones.
    """
    b = single.breakdown
    saved = {k: b.get(k, 0) - v for k, v in per_gpu.items()}
    static = saved["weights"] + saved["trainable_weights"] + saved["optimizer_state"]
    peak_phase = single.details.get("peak_phase")
    held = per_gpu["gradients"]
    accumulating = single.inputs.get("grad_accum", 1) > 1
    out = {}
    for ph, v in single.phase_peaks.items():
        had = ph == "optimizer" or ph == peak_phase or accumulating
        now = (synced_grads if ph == "optimizer" and synced_grads is not None else held) \
            if had or grads_persist else 0
        out[ph] = max(v - static - (b.get("gradients", 0) if had else 0) + now, 0) + comm
    return out


def shard_estimate(single, gpus: int, sharding: str | None = "ddp", offload: bool = False,
                   model_config: dict | None = None, fsdp_run: FsdpRun = FsdpRun()):
    """Per-GPU MemoryEstimate for `gpus` data-parallel GPUs, from a 1-GPU estimate of the same request.

    `single` must be the one-GPU estimate at the per-GPU micro-batch. `model_config` (config.json
    fields) sizes FSDP/ZeRO-3 units; when omitted it is resolved from single.inputs["model"]. `fsdp_run`:
    how an FSDP1 run holds gradients (FsdpRun), for a trainer that wraps frozen and trainable weights together.
    """
    s = check_sharding(gpus, sharding, offload)
    if gpus == 1:
        return single
    single = point_of(single)  # shard the simulated estimate; a QLoRA range is taken again on the result
    cfg = model_config if model_config is not None else _model_config(single)
    run = fsdp_run if s == "fsdp" else FsdpRun()
    per_gpu, host = _model_state(s, single, cfg, gpus, offload, run)
    comm = _comm_buffers(s, single, cfg, gpus, run, offload)
    synced = _fsdp_grads(single, cfg, gpus, run)[1] if s == "fsdp" and not offload else None
    phases = _sharded_phases(single, per_gpu, sum(comm.values()), synced, run.no_sync and not offload)
    allocated = max(phases.values())
    reserved, total = overheads.reserved_and_total(allocated)
    if s != "ddp":  # gathers on a side stream keep freed blocks in separate allocator pools
        extra = int(allocated * constants()["sharded_allocator_extra_fraction"])
        reserved, total = reserved + extra, total + extra
    nccl = int(constants()["nccl_buffers_bytes"])
    breakdown = {k: v for k, v in single.breakdown.items()
                 if k not in MODEL_STATE and k not in ("allocator_slack", "cuda_context")}
    breakdown.update({k: v for k, v in per_gpu.items() if v})
    breakdown.update(comm)
    breakdown["allocator_slack"] = reserved - allocated
    breakdown["cuda_context"] = total - reserved
    breakdown["nccl_buffers"] = nccl
    inputs = dict(single.inputs, gpus=gpus, sharding=s, offload=offload)
    inputs.update({f"fsdp_{k}": True for k, v in dataclasses.asdict(run).items() if v})
    details = dict(single.details, sharding=s, gpus=gpus, offload=offload, host_offload_bytes_per_gpu=host,
                   single_gpu_device_total_bytes=single.device_total_bytes)
    return with_range(dataclasses.replace(
        single, peak_allocated_bytes=allocated, peak_reserved_bytes=reserved, device_total_bytes=total + nccl,
        breakdown=breakdown, phase_peaks=phases, basis=f"{single.basis}+{s}", inputs=inputs, details=details,
    ), single.inputs.get("method", ""))
