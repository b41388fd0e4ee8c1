"""The cold path: simulate (or, failing that, the analytic fallback) and add CUDA-side overheads."""

from __future__ import annotations

import logging

from cheaptune.errors import BadInput
from cheaptune.estimate.memory import cache, overheads
from cheaptune.estimate.memory.mechanisms import resident_bytes
from cheaptune.estimate.memory.result import MemoryEstimate

log = logging.getLogger(__name__)
CUSTOM_CODE = "model type needs custom code"  # the one fallback that is not a failure: it is cached


def hf_config(cfg: dict, name: str = "config"):
    """A transformers config for a config.json dict; None when it needs custom (remote) code. A model_type
    transformers knows whose fields it refuses (hidden size not a multiple of the heads, a string for a size)
    is bad input, said in one line, not estimated by formula as if it were custom code."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from cheaptune.catalog.models import ModelSpec, to_hf_config

    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        return None  # unknown to transformers: custom code
    return to_hf_config(ModelSpec(id=name, family=model_type, config=cfg))  # `name` in its refusal


def _simulated(req, cfg: dict):
    hf = hf_config(cfg, req.model if isinstance(req.model, str) else "config")  # what the user named
    if hf is None:
        return None, CUSTOM_CODE
    from cheaptune.estimate.memory.extrapolate import simulate_extrapolated
    from cheaptune.estimate.memory.simulate import simulate

    try:
        if req.full_sim:
            return (simulate(req, hf), {"layers_simulated": [hf.num_hidden_layers], "extrapolated": False}), ""
        return simulate_extrapolated(req, hf), ""
    except BadInput:
        raise
    except Exception as err:  # noqa: BLE001 - any failure under fake tensors falls back to the formula
        log.warning("simulation failed (%s: %s); using the analytic estimate", type(err).__name__, err)
        return None, f"{type(err).__name__}: {err}"[:200]


def versions_detail(req) -> dict:
    """The library versions the estimate took and the version-dependent mechanisms they give (versions.py)."""
    from cheaptune.estimate.memory.versions import resolve

    res = resolve(req.trainer, req.versions, req.method)
    return {"libraries": res.libraries, "mechanisms": res.flags, "not_known": list(res.notes)}


def compute(req, cfg: dict, inputs: dict, version: str):
    sim, why = _simulated(req, cfg)
    if sim is not None:
        res, how = sim
        phase_peaks, breakdown = dict(res.phase_peaks), dict(res.breakdown)
        trainable, total, max_lin, basis = res.trainable_params, res.total_params, res.max_linear_elems, "simulated"
        details = dict(how)
    else:
        from cheaptune.estimate.memory.analytic import analytic_estimate

        a = analytic_estimate(req, cfg)
        phase_peaks, breakdown = a["phase_peaks"], a["breakdown"]
        trainable, total, basis = a["trainable_params"], a["total_params"], "analytic"
        max_lin = int(cfg.get("hidden_size", 0)) * int(cfg.get("intermediate_size", 0))
        details = {"why_analytic": why, **({cache.SIMULATION_FAILED: True} if why != CUSTOM_CODE else {})}
    ws = overheads.workspaces(req, cfg, max_lin, simulated=basis == "simulated")
    resident = resident_bytes(req, cfg)  # trainer buffers held all run (Unsloth's per-layer RoPE caches)
    peaks = {ph: phase_peaks[ph] + ws[ph] + resident for ph in phase_peaks}
    peak_phase = max(peaks, key=peaks.get)
    breakdown["kernel_workspaces"] = ws[peak_phase]
    if resident:
        breakdown["rope_cache"] = resident
    allocated = max(peaks.values())
    reserved, device_total = overheads.reserved_and_total(allocated)
    breakdown["allocator_slack"] = reserved - allocated
    breakdown["cuda_context"] = device_total - reserved
    details["peak_phase"] = peak_phase
    details["versions"] = versions_detail(req)
    return MemoryEstimate(
        peak_allocated_bytes=allocated, peak_reserved_bytes=reserved, device_total_bytes=device_total,
        breakdown=breakdown, phase_peaks=peaks, trainable_params=trainable, total_params=total,
        basis=basis, inputs=inputs, version=version, details=details,
    )
