"""`plan --config`: the run another trainer's config file describes, as the planner's inputs.

The memory keys come from the foreign-config reader (plan/foreign_config.py); this module adds the keys
that change time and cost (epochs, accumulation, max steps: the `time` lists of data/foreign_keys.yaml)
and a fit that sizes exactly the config's run (its trainer, micro-batch, checkpointing, LoRA) on each GPU.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cheaptune.errors import BadInput
from cheaptune.plan.candidates import FitFn, FitOutcome, planned_micro
from cheaptune.plan.foreign_config import OPTIM, ForeignConfig, axolotl_keys, detect, request_for
from cheaptune.util.yamlfile import beside_config, looks_local, read_mapping

# Defaults when a config leaves a time key unset, per trainer: axolotl src/axolotl/utils/schemas/config.py
# (num_epochs 1.0, gradient_accumulation_steps 1); LLaMA-Factory: transformers TrainingArguments
# (num_train_epochs 3.0); litgpt: litgpt/finetune/lora.py setup() TrainArgs (epochs 5, global_batch_size 128).
EPOCH_KEY = {"axolotl": "num_epochs", "llama-factory": "num_train_epochs"}
DEFAULT_EPOCHS = {"axolotl": 1.0, "llama-factory": 3.0, "litgpt": 5.0}
LITGPT_GLOBAL_BATCH = 128


@dataclass(frozen=True)
class ConfigRun:
    """The config's run: the estimator's request, and how many sequences over how many epochs."""

    config: ForeignConfig | None  # None: a cheaptune config, read as `cheaptune train` reads it
    request: Any  # EstimateRequest; precision None: the trainer's default
    epochs: float
    effective_batch: int  # sequences per optimizer step (micro-batch x accumulation)
    max_steps: int | None  # optimizer steps, when the config caps them
    dataset: str | None  # a local dataset file the config names
    # Sized for cheaptune's trainer (a cheaptune config, or `--save`): the TrainSettings fields `cheaptune train`
    # runs from this config, less the method (the plan's) and the precision unless the config fixes it.
    settings: dict[str, Any] | None = None
    said: tuple[str, ...] = ()  # how the config was read for cheaptune's trainer, one line each
    dataset_missing: str | None = None  # a dataset file the config names that is in neither folder
    pinned: dict[str, str] | None = None  # library -> where its pin came from (flag | config): request.versions

    def missing_dataset_error(self, config: str | Path) -> BadInput | None:
        """Why the plan has no data when the config names a file that is not there (None when it does not)."""
        if self.dataset_missing is None:
            return None
        return BadInput(f"the config's dataset {self.dataset_missing} was not found (looked in {Path(config).parent} "
                        "and the working folder); fix datasets[0].path, or pass --data FILE or --tokens N")

    @property
    def speed_options(self) -> tuple[str, ...]:
        """The planner's speed options (estimate.speedups.PLANNED) the run turns on itself: priced at its own
        speed. Another trainer's run (no settings) is priced without them: the time model is cheaptune's."""
        from cheaptune.estimate.time.speedups import PLANNED

        return tuple(name for name in PLANNED if (self.settings or {}).get(name))


def _number(raw: dict, key: str, default: float, path, kind=float) -> float:
    value = raw.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise BadInput(f"{path}: {key} must be a positive number; got {value!r}")
    return kind(value)


def config_pins(raw: dict, path, trainer: str | None, versions: str | None) -> tuple[str | None, dict, dict]:
    """(trainer, pins, library -> 'flag' | 'config') from the config's `trainer:` and `versions:` keys and the
    --trainer and --versions flags, which win (a trainer's ==VERSION pins its package, estimate/memory/versions.py)."""
    from cheaptune.estimate.memory import versions as known
    from cheaptune.estimate.memory.profiles import get_profile

    try:
        file_trainer, file_pins = known.config_trainer(raw.get("trainer")), known.config_versions(raw.get("versions"))
    except ValueError as err:
        raise BadInput(f"{path}: {err}") from None
    flag_pins = known.parse_pins(versions)
    for given, pins in ((None if trainer else file_trainer, file_pins), (trainer, flag_pins)):  # --trainer X: all of it
        name, ver = known.split_trainer(given)
        if ver is not None:
            if not get_profile(name).package:
                raise BadInput(f"--trainer {given}: the {get_profile(name).name} profile is what cheaptune runs now; "
                               "drop ==version")
            pins[get_profile(name).package] = ver
    pins, origins = known.with_origins(flag_pins, file_pins)
    given = trainer or file_trainer
    return (get_profile(given).name if given else None), pins, origins


def read_run(path: str | Path, trainer: str | None = None, own: bool = False, versions: str | None = None,
             **flags: Any) -> ConfigRun:
    """The run `path` describes; one BadInput line for an unknown or contradictory key. `flags` given
    (not None) win over the config, as in `estimate --config`: model, seq_len, lora_r, lora_targets, epochs,
    effective_batch; `trainer` and `versions` (--trainer, --versions) win over its `trainer:` and `versions:`.
    `own`: size the run `cheaptune train` makes of it (what a saved plan runs)."""
    from cheaptune.estimate.memory.versions import join_pins

    raw = read_mapping(path, "config", "pass a cheaptune, Axolotl, LLaMA-Factory or litgpt YAML config")
    name, pins, origins = config_pins(raw, path, trainer, versions)
    kind = _kind(raw, name)
    who = trainer or raw.get("trainer")
    if own and who is not None and name != "cheaptune":
        raise BadInput(f"--save sizes the run `cheaptune train` makes of the config, not {name}'s; drop "
                       f"{'--trainer' if trainer else 'the config key trainer:'} {who}, or plan without --save to "
                       f"size {name}'s run")
    if kind == "cheaptune":
        run = _own_run(path, flags)
        unstated = _profile_defaults(raw, name, run.request.method, flags) if name and name != "cheaptune" else {}
        req = dataclasses.replace(run.request, trainer=name or "cheaptune", versions=join_pins(pins), **unstated)
        return dataclasses.replace(run, request=req, pinned=origins, settings={**run.settings, **unstated})
    given = {k: flags.get(k) for k in ("model", "seq_len", "lora_r", "lora_targets")}
    req, fc = request_for(str(path), name, {**given, "versions": join_pins(pins)}, {})
    if req.gpus > 1:
        raise BadInput(f"{path}: devices {req.gpus}: plan --config sizes one GPU; set devices: 1, or plan the model "
                       "without --config to compare multi-GPU layouts")
    if fc.trainer == "litgpt":
        train = raw.get("train") or {}
        batch = int(_number(train, "global_batch_size", LITGPT_GLOBAL_BATCH, path, int))
        if batch < req.micro_batch:
            raise BadInput(f"{path}: train.global_batch_size {batch} is below train.micro_batch_size "
                           f"{req.micro_batch}; raise it")
        if raw.get("quantize") and raw.get("precision") == "bf16-mixed":
            raise BadInput(f"{path}: quantize with precision bf16-mixed is refused by litgpt; use bf16-true")
        epochs = _number(train, "epochs", DEFAULT_EPOCHS["litgpt"], path)
        steps = train.get("max_steps")
    else:
        accum = int(_number(raw, "gradient_accumulation_steps", 1, path, int))
        batch = req.micro_batch * accum
        epochs = _number(raw, EPOCH_KEY[fc.trainer], DEFAULT_EPOCHS[fc.trainer], path)
        steps = raw.get("max_steps")
    steps = int(steps) if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None
    if flags.get("epochs") is not None:
        epochs, steps = flags["epochs"], None
    batch = flags.get("effective_batch") or batch
    entries = raw.get("datasets") or []
    first = entries[0].get("path") if entries and isinstance(entries[0], dict) else None
    settings, said = None, ()
    if own:  # Axolotl's keys are read by `cheaptune train` itself; the others through the estimate's mapping
        settings, said = _train_fields(path, flags)[1:] if fc.trainer == "axolotl" else (_request_fields(req), ())
    return ConfigRun(fc, req, epochs, batch, steps, _local_dataset(first, path), settings, tuple(said),
                     _missing(first, path), origins)


def is_own_config(raw: dict, trainer: str | None) -> bool:
    """Is `raw` a cheaptune config (read as `cheaptune train` reads it), not another trainer's?"""
    return _kind(raw, trainer) == "cheaptune"


def _kind(raw: dict, trainer: str | None) -> str:
    """Whose config this is: --trainer (or the config's trainer:), else by its keys; cheaptune's when no other
    trainer's keys are found, it uses keys only cheaptune reads (method, precision, objective, ...), or the trainer
    named has no config reader (hf, unsloth, torchtune: the config's settings sized with that profile)."""
    if trainer is not None:
        from cheaptune.estimate.memory.profiles import get_profile
        from cheaptune.plan.foreign_config import readers

        name = get_profile(trainer).name
        return name if name in readers() else "cheaptune"
    found = detect(raw)
    if found is None:
        return "cheaptune"
    if found == "axolotl":
        from cheaptune.estimate.memory.versions import CONFIG_KEYS
        from cheaptune.train.config import known_keys

        if set(raw) & (known_keys() - axolotl_keys() - set(CONFIG_KEYS)):  # versions: is read from any config
            return "cheaptune"
    return found


# request field -> the cheaptune config keys that state it (train/config.py); what none of them states is the
# named trainer's default (data/profiles.yaml), as its run would have it, not cheaptune's
_STATED_BY = {"grad_ckpt": ("gradient_checkpointing",), "lora_dropout": ("lora_dropout",),
              "lora_targets": ("lora_targets", "lora_target_modules", "lora_target_linear"), "loss": ()}


def _profile_defaults(raw: dict, trainer: str, method: str, flags: dict[str, Any]) -> dict[str, Any]:
    """The settings a cheaptune config sized as another trainer's run (hf, unsloth, torchtune) leaves unstated,
    at that trainer's defaults: e.g. Unsloth checkpoints unless the config says gradient_checkpointing: false."""
    from cheaptune.estimate.memory.profiles import get_profile
    from cheaptune.estimate.settings import LORA_METHODS

    prof = get_profile(trainer)
    out = {k: getattr(prof, k) for k, keys in _STATED_BY.items() if not any(raw.get(key) is not None for key in keys)}
    if flags.get("lora_targets") is not None:
        out.pop("lora_targets", None)
    if method not in LORA_METHODS:
        out = {k: v for k, v in out.items() if not k.startswith("lora")}
    return out


def _train_fields(path, flags: dict[str, Any]) -> tuple[Any, dict[str, Any], list[str]]:
    """(TrainConfig, settings fields, notes): the config as `cheaptune train` reads it, flags winning. An
    optimizer the estimator does not name is planned as the one with the same state (said in a note)."""
    from cheaptune.estimate.policy import hf_optim
    from cheaptune.train.config import build
    from cheaptune.train.methods import asked_precision
    from cheaptune.train.settings import from_config, our_optimizer

    cfg = build(path, None, {"base_model": flags.get("model"), "sequence_len": flags.get("seq_len"),
                             "lora_r": flags.get("lora_r"), "lora_targets": flags.get("lora_targets"),
                             "num_epochs": flags.get("epochs")})
    said: list[str] = []
    if our_optimizer(cfg.optimizer) is None:
        ours = OPTIM.get(str(cfg.optimizer))
        if ours is None:
            raise BadInput(f"{path}: optimizer {cfg.optimizer!r} cannot be planned; use adamw_torch_fused, "
                           "adamw_bnb_8bit, paged_adamw_8bit, sgd or adafactor")
        said.append(f"optimizer {cfg.optimizer} is planned and saved as {hf_optim(ours)} (the same optimizer "
                    "state; what `train --plan` runs)")
        cfg = cfg.model_copy(update={"optimizer": hf_optim(ours)})
    fixed = asked_precision(cfg)
    drop = {"method", "grad_accum", "epochs", "gpus", "sharding", "checkpoint_minutes", "loss", "objective",
            "precompute_ref", *(() if fixed else ("precision",))}
    return cfg, from_config(cfg, fixed or "fp32").model_dump(exclude=drop), said


def _request_fields(req: Any) -> dict[str, Any]:
    """Settings fields from another trainer's request: the same model, adapter, batch and kernels, run by
    cheaptune's trainer (its loss; its precision for the GPU unless the config fixes one)."""
    fields = {"quant": req.quant, "optimizer": req.optimizer, "lora_r": req.lora_r, "lora_alpha": req.lora_alpha,
              "lora_targets": req.lora_targets, "lora_dropout": req.lora_dropout, "micro_batch": req.micro_batch, "grad_ckpt": req.grad_ckpt,
              "attn": req.attn, "seq_len": req.seq_len}
    return {**fields, "precision": req.precision} if req.precision else fields


def _own_run(path, flags: dict[str, Any]) -> ConfigRun:
    """A cheaptune config: the run `cheaptune train` makes of it, sized with cheaptune's trainer."""
    import dataclasses

    cfg, fields, said = _train_fields(path, flags)
    said = [*cfg.foreign_notes("config keys"), *said]
    if not cfg.base_model:
        raise BadInput(f"{path}: base_model is missing; set it to the model to train, or pass --model")
    req = dataclasses.replace(own_settings(fields, cfg.method, "fp32").request(cfg.base_model),
                              precision=fields.get("precision"))
    steps = cfg.max_steps if cfg.max_steps > 0 and flags.get("epochs") is None else None
    batch = flags.get("effective_batch") or cfg.micro_batch_size * cfg.gradient_accumulation_steps
    first = cfg.datasets[0].path if cfg.datasets else None
    return ConfigRun(None, req, cfg.num_epochs, batch, steps, _local_dataset(first, path), fields, tuple(said),
                     _missing(first, path))


def own_settings(fields: dict[str, Any], method: str, gpu_precision: str, **planned: Any):
    """The TrainSettings cheaptune's trainer runs for `method` on a GPU trained at `gpu_precision` (the
    config's own precision wins), with the planner's choices (`planned`) over the config's."""
    from cheaptune.estimate.settings import TrainSettings

    kept = {k: v for k, v in fields.items() if k != "quant" or method == "qlora"}
    return TrainSettings(**{"precision": gpu_precision, **kept, **planned, "method": method})


def _local_dataset(first: str | None, path) -> str | None:
    """The first dataset as every command reads a config's paths (beside the config, else from the working
    folder: util.yamlfile.beside_config); None for a hub dataset or a missing file (then --data or --tokens)."""
    if not first:
        return None
    local = Path(beside_config(str(first), path))
    return str(local.resolve()) if local.is_file() else None


def _missing(first: str | None, path) -> str | None:
    """The config's first dataset when it names a local file that is in neither folder."""
    if first and looks_local(str(first)) and _local_dataset(first, path) is None:
        return str(first)
    return None


def epochs_for(run: ConfigRun, tokens: int, seq_len: int) -> float:
    """The epochs the run trains: `max_steps` optimizer steps over `tokens` when the config caps them
    (the trainer stops at whichever comes first), else the config's epochs."""
    if run.max_steps is None:
        return run.epochs
    return min(run.epochs, run.max_steps * run.effective_batch * seq_len / tokens)


def config_fit(run: ConfigRun, headroom: float) -> FitFn:
    """A FitFn for exactly the config's run: its peak on each GPU at its own micro-batch; a GPU is kept
    when that peak leaves `headroom` free. Sized for cheaptune's trainer (`run.settings`), the settings a
    saved plan stores; else without an explicit precision another trainer takes its profile's default."""
    from cheaptune.estimate.memory.memory import estimate_memory
    from cheaptune.estimate.policy import HELD_MICRO_STEPS

    base = run.request
    accum = planned_micro(base.micro_batch, run.effective_batch)[1]  # what the plan saves: > 1 holds the gradients

    def fit(method: str, mem: int, precision: str) -> FitOutcome:
        if run.settings is not None:  # a cheaptune config's trainer: key, and any config's versions (read_run)
            own = own_settings(run.settings, method, precision, grad_accum=accum).request(base.model)
            est = estimate_memory(dataclasses.replace(own, trainer=own.trainer if run.config else base.trainer,
                                                      versions=base.versions))
        else:
            own = base.precision or (precision if base.trainer == "cheaptune" else None)
            quant = base.quant if method == "qlora" else None
            est = estimate_memory(dataclasses.replace(base, method=method, precision=own, quant=quant,
                                                      grad_accum=min(accum, HELD_MICRO_STEPS)))
        fits = est.device_total_bytes <= mem * (1 - headroom)
        return FitOutcome(fits, base.micro_batch if fits else 0, base.grad_ckpt, est.device_total_bytes,
                          est.trainable_params, est.total_params, est.basis)

    return fit


def notes(run: ConfigRun, best: Any = None) -> list[str]:
    """What the plan took from the config and what it left out, once each; sized for cheaptune's trainer
    from another trainer's config, a line when that trainer's own step peaks differently on `best`."""
    from cheaptune.plan.foreign_config import time_keys

    req, fc = run.request, run.config
    who = fc.trainer if run.settings is None else req.trainer if fc is None and req.trainer != "cheaptune" \
        else "cheaptune train"
    out = [f"sized as {who} runs the config: micro-batch {req.micro_batch}, "
           f"{run.effective_batch} sequences per step, {run.epochs:g} epochs"
           + (f" or {run.max_steps} steps, whichever is first" if run.max_steps else ""), *run.said]
    if run.pinned:
        from cheaptune.estimate.memory.versions import parse_pins

        pins = parse_pins(req.versions)
        out.append("versions pinned: " + ", ".join(f"{lib}=={pins[lib]} ({how})" for lib, how in sorted(run.pinned.items())))
    if fc is None:
        return out
    skipped = [k for k in fc.ignored if k not in time_keys(fc.trainer)]
    if skipped:
        out.append(f"config keys ignored (no change to memory, time or cost): {', '.join(skipped)}")
    if fc.named:
        out.append(f"config keys not modelled (they change the run): {', '.join(fc.named)}")
    if run.settings is not None and best is not None:
        theirs = config_fit(dataclasses.replace(run, settings=None), 0.0)(best.method, best.gpu_memory_bytes, "")
        if theirs.peak_bytes != best.peak_vram_bytes:
            out.append(f"peak {best.peak_vram_bytes / 2**30:.2f} GiB on the {best.gpu} is cheaptune's trainer (what "
                       f"`train --plan` runs); {fc.trainer} would peak at {theirs.peak_bytes / 2**30:.2f} GiB")
    return out
