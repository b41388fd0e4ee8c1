"""GPU speed options the trainer turns on through transformers/trl: Liger kernels, torch.compile and the
bitsandbytes 8-bit / paged optimizers (FlashAttention-2 is `attn: flash`, checked in methods).

Each is an optional extra, looked up lazily (never imported here), and refused with one line where it
cannot work: no CUDA GPU, or the package not installed. Checking before the model loads means a typo'd
or impossible setting costs seconds, not a rented GPU's start-up.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from cheaptune.errors import BadInput

# option -> (module to find, pip install name, the pyproject extra that installs it)
PACKAGES = {
    "liger_kernel": ("liger_kernel", "liger-kernel", "liger"),
    "torch_compile": ("triton", "triton", "compile"),
    "bitsandbytes optimizer": ("bitsandbytes", "bitsandbytes", "qlora"),
}
# HF `optim` names that run on bitsandbytes (8-bit state and/or paged memory), CUDA only here.
BNB_OPTIMIZERS = ("adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit", "paged_adamw_32bit", "paged_adamw",
                  "paged_lion_8bit", "paged_lion_32bit", "lion_8bit", "lion_32bit", "adam_8bit")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def asked(cfg: Any) -> list[str]:
    """The speed options this config turns on, by the names PACKAGES uses."""
    out = [name for name in ("liger_kernel", "torch_compile") if getattr(cfg, name)]
    if cfg.optimizer in BNB_OPTIMIZERS:
        out.append("bitsandbytes optimizer")
    return out


def check(cfg: Any, device: str) -> None:
    """Refuse, in one line naming every problem, options that cannot run on `device` or are not installed."""
    problems = []
    for name in asked(cfg):
        label = f"optimizer {cfg.optimizer}" if name == "bitsandbytes optimizer" else f"{name}: true"
        module, pip_name, extra = PACKAGES[name]
        if device != "cuda":
            problems.append(f"{label} needs a CUDA GPU (turn it off on this machine)")
        elif not _installed(module):
            problems.append(f"{label} needs the {pip_name} package (pip install 'cheaptune[{extra}]')")
    if problems:
        raise BadInput("; ".join(problems))


def fit_planned(cfg: Any, device: str) -> tuple[Any, str | None]:
    """Turn off the speed options a plan alone turned on (`cfg._planned_speedups`) that cannot run here
    (no CUDA GPU, or not installed), with one line saying so: they change speed, never what is trained, so a
    GPU plan still runs on a CPU. Options the user set stay, and `check` refuses them as before."""
    off = [name for name in getattr(cfg, "_planned_speedups", ()) if getattr(cfg, name)
           and (device != "cuda" or not _installed(PACKAGES[name][0]))]
    if not off:
        return cfg, None
    why = "no CUDA GPU here" if device != "cuda" else "not installed here (pip install 'cheaptune[liger,compile]')"
    return cfg.model_copy(update=dict.fromkeys(off, False)), \
        f"the plan's {' and '.join(off)} turned off: {why}; they change speed only, so the run trains the same"


def trainer_args(cfg: Any) -> dict[str, Any]:
    """SFTConfig fields for the options. trl 1.16 applies Liger's layer kernels (RMSNorm, RoPE, SwiGLU) and
    keeps its own chunked LM-head loss instead of Liger's fused linear cross-entropy (both never build the
    full logits)."""
    return {"use_liger_kernel": cfg.liger_kernel, "torch_compile": cfg.torch_compile}
