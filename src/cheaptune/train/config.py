"""The training config: one YAML file, Axolotl's common keys, HF TrainingArguments names as aliases.

Validated in one place (pydantic) so a typo fails before any model loads, with a did-you-mean line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from cheaptune.errors import BadInput
from cheaptune.estimate.policy import DEFAULT_QUANT, INT8_REFUSAL, LORA_DROPOUT, QUANTS, VIRTUAL_TOKENS
from cheaptune.train.grpo_options import GrpoFields
from cheaptune.util.names import did_you_mean
from cheaptune.util.yamlfile import read_mapping, with_config_paths

METHODS = ("full", "lora", "qlora", "dora", "ia3", "prompt_tuning", "prefix_tuning")
Method = Literal["full", "lora", "qlora", "dora", "ia3", "prompt_tuning", "prefix_tuning"]
PrecisionName = Literal["bf16-true", "bf16-mixed", "fp16-mixed", "fp32"]
PREFERENCE_METHODS = ("full", "lora", "qlora", "dora")  # what cheaptune trains with dpo and orpo


def _alias(*names: str) -> Any:
    return Field(validation_alias=AliasChoices(*names))


class DatasetSpec(BaseModel):
    """One dataset entry (Axolotl's `datasets: [{path, type}]`); `type` is the row format or `auto`."""

    model_config = ConfigDict(extra="forbid")
    path: str
    type: str = "auto"


class TrainConfig(GrpoFields, BaseModel):
    """Everything `cheaptune train` needs; field names follow Axolotl, aliases follow HF (GRPO's keys:
    cheaptune.train.grpo_options)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)  # no inf budget or price

    base_model: str | None = Field(None, validation_alias=AliasChoices("base_model", "model_name_or_path", "model"))
    method: Method | None = Field(None, description="full | lora | qlora | dora | ia3 | prompt_tuning | prefix_tuning")
    objective: Literal["sft", "dpo", "orpo", "kto", "grpo"] = Field(
        "sft", validation_alias=AliasChoices("objective", "rl"), description="sft | dpo | orpo | kto | grpo (Axolotl's rl)")
    beta: float | None = Field(None, ge=0, validation_alias=AliasChoices("beta", "rl_beta", "orpo_alpha"),
                               description="dpo: strength of the pull to the reference (default 0.1); orpo: weight "
                               "of the odds-ratio term (0.1); grpo: KL weight, a reference model only above 0 (0)")
    precompute_ref_log_probs: bool = Field(False, description="dpo: reference log-probs computed once before "
                                           "training, so no reference model is held (full fine-tuning)")
    adapter: Literal["lora", "qlora"] | None = Field(None, description="Axolotl spelling of the method")
    load_in_4bit: bool = False
    load_in_8bit: bool = Field(False, description="Axolotl's int8 base: refused (see estimate.policy.INT8_REFUSAL)")
    quant: str | None = Field(None, description="qlora base: nf4, or nf4-dq (default)")
    attn: Literal["sdpa", "flash", "eager"] = Field("sdpa", description="attention kernel (flash: flash-attn 2)")
    liger_kernel: bool = Field(False, description="Liger's Triton kernels (RMSNorm, RoPE, SwiGLU); CUDA, extra liger")
    torch_compile: bool = Field(False, description="torch.compile the model; CUDA, extra compile (triton)")
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(LORA_DROPOUT, ge=0.0, lt=1.0, description="default: the estimate's policy")
    lora_target_modules: list[str] | str | None = None
    lora_target_linear: bool | None = None
    lora_targets: str = Field("all-linear", description="preset: qv | attention | mlp | all-linear, +lm_head")
    lora_modules_to_save: list[str] | str | None = Field(None, description="modules trained whole beside the "
                                                         "adapter (peft modules_to_save), e.g. [embed_tokens, lm_head] "
                                                         "for new tokens")
    num_virtual_tokens: int = Field(VIRTUAL_TOKENS, ge=1, description="prompt/prefix tuning length")
    datasets: list[DatasetSpec] = Field(default_factory=list)
    val_set_size: float = Field(0.0, ge=0.0, description="fraction (<1) or row count (>=1) held out")
    sequence_len: int = Field(2048, ge=8, validation_alias=AliasChoices("sequence_len", "max_length", "max_seq_length"))
    sample_packing: bool = Field(True, validation_alias=AliasChoices("sample_packing", "packing"))
    micro_batch_size: int = Field(1, ge=1, validation_alias=AliasChoices("micro_batch_size", "per_device_train_batch_size"))
    gradient_accumulation_steps: int = Field(1, ge=1)
    num_epochs: float = Field(1.0, gt=0, validation_alias=AliasChoices("num_epochs", "num_train_epochs"))
    max_steps: int = Field(-1, ge=-1)
    learning_rate: float = Field(2e-4, gt=0)
    lr_scheduler: str = Field("cosine", validation_alias=AliasChoices("lr_scheduler", "lr_scheduler_type"))
    warmup_steps: int = Field(0, ge=0)
    optimizer: str | None = Field(None, validation_alias=AliasChoices("optimizer", "optim"),
                                  description="HF optim name; default: the policy's (fused AdamW)")
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    precision: PrecisionName | None = Field(None, description="default: the policy's per method on a GPU, fp32 on CPU")
    bf16: bool | None = Field(None, description="HF spelling: true = bf16-mixed (precision wins when set)")
    fp16: bool | None = Field(None, description="HF spelling: true = fp16-mixed")
    gradient_checkpointing: bool = False
    output_dir: str = "./outputs"
    checkpoint_dir: str | None = Field(None, description="checkpoints folder (default: output_dir)")
    save_steps: int | None = Field(None, ge=1)
    save_minutes: float | None = Field(None, gt=0, description="also save every N minutes of wall clock")
    save_total_limit: int = Field(3, ge=1, description="keep the last K checkpoints (and the best)")
    eval_steps: int | None = Field(None, ge=1)
    logging_steps: int = Field(1, ge=1)
    seed: int = Field(42, ge=0, le=2**32 - 1)  # numpy's range, which transformers' set_seed uses
    resume: str = Field("auto", description="auto | never | path to a checkpoint-N folder")
    merge: bool = False
    report_to: list[str] | str | None = Field(None, description="tensorboard | wandb | mlflow | none (several "
                                              "allowed); default: tensorboard when installed, else none")
    eval_after: bool = Field(False, description="score the tuned model against its base after training")
    eval_data: str | None = Field(None, description="held-out file for eval_after (default: the validation split)")
    sample_prompts: list[str] = Field(default_factory=list)
    sample_max_new_tokens: int = Field(32, ge=1)
    skip_bad_rows: bool = False
    dataset_num_proc: int | None = Field(None, ge=1)
    dataloader_num_workers: int = Field(0, ge=0)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # the software the run has: estimate/plan size its version-dependent terms (estimate/memory/versions.py);
    # the --versions and --trainer flags win over these; `train` runs what is installed and warns on a mismatch
    versions: Any = Field(None, description="library -> version, e.g. {bitsandbytes: \"0.42.0\"} (checked by "
                          "_check_versions, one line naming the key)")
    trainer: str | None = Field(None, description="trainer profile the estimate sizes (NAME or NAME==VERSION); "
                                "default cheaptune")
    # guard rails (cheaptune.runs.guard.GuardSettings); the meter's price and the caps are numbers, strictly: in
    # pydantic's lax mode `budget_usd: true` was a $1 cap and `price_per_hour: yes` a $1/h meter, silently
    price_per_hour: float | None = Field(None, ge=0, strict=True)
    gpu_count: int = Field(1, ge=1)
    billing_unit_s: int = Field(1, ge=1)
    min_billed_s: int = Field(0, ge=0)
    budget_usd: float | None = Field(None, gt=0, strict=True)
    max_hours: float | None = Field(None, gt=0, strict=True)
    alert_thresholds: list[float] = Field(default_factory=lambda: [0.5, 0.8, 1.0])
    webhook_url: str | None = None
    alert_command: list[str] | None = None
    on_finish: str = "nothing"
    shutdown_command: list[str] | None = None
    dry_run_shutdown: bool = False
    idle_minutes: float | None = Field(None, gt=0)
    idle_stop: bool = False
    predicted_cost_usd: float | None = Field(None, ge=0)  # negative would pass the over-budget preflight
    predicted_peak_bytes: int | None = None
    predicted_tokens_per_s: float | None = None
    predicted_gpu: str | None = Field(None, description="the GPU the plan predicted for (the probe compares "
                                      "speed only on it)")
    # probe and out-of-memory fallbacks (cheaptune.train.probe, cheaptune.train.oom)
    probe_steps: int = Field(3, ge=0, description="optimizer steps measured at the start (0: no probe)")
    allow_optimizer_change: bool = Field(False, description="out of memory: may switch to the paged 8-bit AdamW")
    # spot notices
    spot_notice: Literal["none", "aws", "gcp", "azure"] = "none"
    spot_notice_url: str | None = None
    spot_poll_seconds: float = Field(5.0, gt=0)

    @model_validator(mode="after")
    def _resolve_method(self) -> TrainConfig:
        """Axolotl spells the method as adapter/load_in_4bit; our `method` wins when both are given."""
        if self.method is None:
            if self.adapter == "qlora" or (self.adapter == "lora" and self.load_in_4bit):
                self.method = "qlora"
            else:
                self.method = "lora"
        if self.load_in_8bit or self.quant == "int8":
            raise ValueError(INT8_REFUSAL)
        if self.quant is not None and self.quant not in QUANTS:
            raise ValueError(f"quant {self.quant!r} is not one of {', '.join(QUANTS)}")
        if self.method == "qlora" and self.quant is None:
            self.quant = DEFAULT_QUANT["qlora"]
        if self.method != "qlora" and self.quant is not None:
            raise ValueError(f"quant {self.quant} needs method qlora (it quantizes the frozen base)")
        if self.lora_target_linear and not self.lora_target_modules:
            self.lora_targets = "all-linear"
        if self.lora_modules_to_save and self.method not in ("lora", "qlora", "dora"):
            raise ValueError(f"lora_modules_to_save trains modules beside a LoRA adapter; method {self.method} has "
                             "none (full trains every weight already)")
        if self.beta is None:
            self.beta = 0.0 if self.objective == "grpo" else 0.1
        if self.objective in ("dpo", "orpo", "kto") and self.beta <= 0:
            raise ValueError(f"objective {self.objective} needs beta above 0 (got {self.beta})")
        if self.objective == "kto" and self.micro_batch_size < 2:
            raise ValueError("objective kto needs micro_batch_size 2 or more: trl estimates its KL term from the "
                             "other completions of a micro-batch")
        if self.objective != "sft" and self.method not in PREFERENCE_METHODS:
            raise ValueError(f"objective {self.objective} trains {', '.join(PREFERENCE_METHODS)}; "
                             f"not {self.method}")
        if self.objective in ("dpo", "kto", "grpo") and "lm_head" in f"{self.lora_targets} {self.lora_target_modules}":
            raise ValueError(f"trl's {self.objective.upper()} reads log-probs from the LM head's weight, so an adapter on lm_head would "
                             "never train; drop lm_head from the targets")
        if self.eval_after and (self.method == "full" or not (self.eval_data or self.val_set_size)):
            raise ValueError("eval_after scores an adapter against its base on held-out rows: it needs an adapter "
                             "method and val_set_size or eval_data")
        return self

    @model_validator(mode="after")
    def _check_versions(self) -> TrainConfig:
        """`versions` and `trainer` are checked as the --versions and --trainer flags are (one line naming the key)."""
        from cheaptune.estimate.memory.versions import config_trainer, config_versions

        self.versions = config_versions(self.versions) or None
        self.trainer = config_trainer(self.trainer)
        return self

    def version_notes(self) -> list[str]:
        """One line per pinned library whose installed version differs (the estimate was for the pinned one),
        and one when `trainer` names another trainer than the one `cheaptune train` runs."""
        from packaging.version import Version

        from cheaptune.estimate.memory.profiles import get_profile
        from cheaptune.estimate.memory.versions import installed

        out = []
        for lib, ver in (self.versions or {}).items():
            have = installed(lib) or "not installed"
            pin = Version(ver)  # a pin without a local label (+cpu, +cu121) matches every build of its release
            if have == "not installed" or (Version(have) if pin.local else Version(Version(have).public)) != pin:
                out.append(f"versions.{lib}: the config pins {ver}, this run has {have}; the estimate was for {ver}, "
                           f"the run trains with {have}")
        if self.trainer and get_profile(self.trainer).name != "cheaptune":
            out.append(f"trainer: {self.trainer} sizes estimates only; `cheaptune train` runs its own trainer")
        return out

    # settings of a plan that the config file or a flag replaced: {field: (planned, given)} (config.build)
    _plan_overrides: dict[str, tuple[Any, Any]] = PrivateAttr(default_factory=dict)
    _plan_override_origins: dict[str, str] = PrivateAttr(default_factory=dict)  # field: where the new value came from
    # lines on how the plan was adapted to this machine (a GPU count other than the plan's: config.build)
    _plan_notes: list[str] = PrivateAttr(default_factory=list)
    _plan_priced: bool = PrivateAttr(default=False)  # price_per_hour is the plan's (train.billing drops it elsewhere)
    _plan_budgeted: bool = PrivateAttr(default=False)  # budget_usd is the plan's, sized for its GPU's price
    _planned_speedups: tuple[str, ...] = PrivateAttr(default=())  # speed options the plan alone turned on
    _billed: dict | None = PrivateAttr(default=None)  # billed above the plan's rate (runs.billed.against_plan)
    # Axolotl keys read but not used: (ignored: change nothing; named: cheaptune trains them its own way)
    _foreign: tuple[list[str], list[str]] = PrivateAttr(default_factory=lambda: ([], []))

    def foreign_notes(self, where: str) -> list[str]:
        """One line for the Axolotl keys ignored and one for those trained differently (none when none)."""
        ignored, named = self._foreign
        out = [f"{where}: ignored (no change to memory, time or cost): {', '.join(ignored)}"] if ignored else []
        if named:
            out.append(f"{where}: not honoured (cheaptune trains these its own way): {', '.join(named)}")
        return out

    @property
    def checkpoint_root(self) -> Path:
        return Path(self.checkpoint_dir or self.output_dir)

    def guard_fields(self) -> dict[str, Any]:
        """The fields GuardSettings takes, by their GuardSettings names."""
        keys = ("price_per_hour", "gpu_count", "billing_unit_s", "min_billed_s", "budget_usd", "max_hours",
                "webhook_url", "alert_command", "on_finish", "shutdown_command", "dry_run_shutdown",
                "idle_minutes", "idle_stop", "predicted_cost_usd", "predicted_peak_bytes")
        out = {k: getattr(self, k) for k in keys}
        out["alert_thresholds"] = tuple(self.alert_thresholds)
        return out


def known_keys() -> set[str]:
    """Every accepted key: field names and their aliases."""
    keys: set[str] = set()
    for name, field in TrainConfig.model_fields.items():
        keys.add(name)
        alias = field.validation_alias
        if isinstance(alias, AliasChoices):
            keys.update(str(a) for a in alias.choices)
    return keys


def canonical_name(key: str) -> str:
    """The field a config key sets (its alias resolved); an unknown key as it is."""
    for name, field in TrainConfig.model_fields.items():
        if key == name or (isinstance(field.validation_alias, AliasChoices)
                           and key in {str(a) for a in field.validation_alias.choices}):
            return name
    return key


def _canonical(raw: dict[str, Any]) -> dict[str, Any]:
    """Map aliases to field names so later overrides (plan, CLI) replace rather than clash."""
    return {canonical_name(k): v for k, v in raw.items()}


def check_keys(raw: dict[str, Any], where: str) -> None:
    known = known_keys()
    for key in raw:
        if key not in known:
            raise BadInput(f"{where}: unknown key '{key}'{did_you_mean(str(key), known)}")


def validate(raw: dict[str, Any], where: str = "config", origins: dict[str, str] | None = None) -> TrainConfig:
    """Validate a mapping; the first problem becomes one BadInput line naming the field and where it came
    from (`origins`: field -> "command line" for flags, so a bad flag is not blamed on the config file)."""
    raw, foreign = _read_foreign(raw, where)
    check_keys(raw, where)
    try:
        cfg = TrainConfig.model_validate(_canonical(raw))
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(x) for x in first["loc"]) or "config"
        where = (origins or {}).get(str(first["loc"][0]), where) if first["loc"] else where
        if not first["loc"]:  # a rule across fields (model validator): its message says it all
            raise BadInput(f"{where}: {str(first['msg']).removeprefix('Value error, ')}") from None
        raise BadInput(f"{where}: {field}: {first['msg']} (got {first.get('input')!r})") from None
    cfg._foreign = foreign
    return cfg


def _read_foreign(raw: dict[str, Any], where: str) -> tuple[dict[str, Any], tuple[list[str], list[str]]]:
    """Axolotl keys the trainer does not take, sorted by the foreign-config reader's key tables."""
    from cheaptune.plan.foreign_config import for_train

    kept, ignored, named = for_train(raw, known_keys(), where)
    return kept, (ignored, named)


def _flag_origins(overrides: dict[str, Any] | None) -> dict[str, str]:
    return {k: "command line" for k, v in (overrides or {}).items() if v is not None}


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The config file as a mapping, its relative dataset paths read from the config's folder."""
    return with_config_paths(read_mapping(path, "config file", "pass the path of a YAML training config"), path)


def build(path: str | Path | None, plan_path: str | Path | None = None,
          overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The plan, then the config file's own keys, then CLI flags (later wins); validated once at the end."""
    raw: dict[str, Any] = {}
    foreign: tuple[list[str], list[str]] = ([], [])
    if path is not None:
        file_raw, foreign = _read_foreign(read_yaml(path), f"config file {path}")
        check_keys(file_raw, f"config file {path}")
        raw = _canonical(file_raw)
    cli = {k: v for k, v in (overrides or {}).items() if v is not None}
    changed: dict[str, tuple[Any, Any]] = {}
    notes: list[str] = []
    raw_user = dict(raw)  # the config file's own keys, before the plan's are merged in
    if plan_path is not None:
        from cheaptune.train.planmerge import SETTING_KEYS, from_plan, run_budget

        # on another GPU count the accumulation keeps the planned batch, unless a flag sets it
        gpus = None if "gradient_accumulation_steps" in cli else cli.get("gpu_count")
        planned, note = from_plan(plan_path, raw, gpus)
        notes = [note] if note else []
        # a setting the config file or a flag gives explicitly wins over the plan, and is reported
        changed = {k: (planned[k], v) for k, v in {**raw, **cli}.items()
                   if k in SETTING_KEYS and k in planned and v != planned[k]}
        # the file's own keys win too (its price is not replaced by the plan's; of two budgets the lower holds);
        # a key left empty (`budget_usd:`) takes the plan's, unless it is a setting the file changes (reported above)
        raw = {**planned, **{k: v for k, v in raw.items() if v is not None or k in changed}}
        if "budget_usd" in raw:  # the lower of the plan's and the file's cap (a flag, merged below, wins)
            raw["budget_usd"] = run_budget(planned.get("budget_usd"), raw_user.get("budget_usd"))
    raw.update(cli)
    cfg = validate(raw, f"config file {path}" if path else "config", _flag_origins(overrides))
    cfg._plan_overrides = changed
    cfg._plan_override_origins = {k: "command line" if k in cli else f"config file {path}" for k in changed}
    cfg._plan_notes = notes
    cfg._plan_priced = plan_path is not None and "price_per_hour" not in raw_user and "price_per_hour" not in cli
    own = raw_user.get("budget_usd")  # the file's cap, if any: the run keeps it where it is the lower
    cfg._plan_budgeted = plan_path is not None and "budget_usd" not in cli and cfg.budget_usd is not None \
        and cfg.budget_usd == planned.get("budget_usd") and (own is None or own > cfg.budget_usd)
    if plan_path is not None:
        from cheaptune.estimate.time.speedups import PLANNED

        cfg._planned_speedups = tuple(k for k in PLANNED if planned.get(k) and k not in raw_user and k not in cli)
    cfg._foreign = foreign
    return cfg


def guard_settings(cfg: TrainConfig, **extra: Any):
    """GuardSettings from the config (only the fields GuardSettings has), plus `extra` ones (force, ...);
    building it is the guard rails' own validation (on_finish, alert_thresholds, ...)."""
    import dataclasses

    from cheaptune.runs.settings import GuardSettings

    names = {f.name for f in dataclasses.fields(GuardSettings)}
    return GuardSettings(**{k: v for k, v in cfg.guard_fields().items() if k in names}, **extra)


def check_hf_names(cfg: TrainConfig) -> None:
    """The optimizer and scheduler names against transformers' own lists: its TrainingArguments refuses an
    unknown one only after the model and data are loaded, with a traceback. Only names the config, a plan or a
    flag set are checked (the defaults are transformers' own), so a config naming neither costs no torch import."""
    named = {k: getattr(cfg, k) for k in ("lr_scheduler", "optimizer") if k in cfg.model_fields_set}
    if not any(v is not None for v in named.values()):
        return
    from transformers.trainer_utils import SchedulerType
    from transformers.training_args import OptimizerNames

    for key, names in (("lr_scheduler", SchedulerType), ("optimizer", OptimizerNames)):
        known = [n.value for n in names]
        value = named.get(key)
        if value is not None and value not in known:
            raise BadInput(f"{key} {value!r} is not a transformers {names.__name__}{did_you_mean(str(value), known)}; "
                           f"use one of {', '.join(known[:8])}, ...")


TRACKERS = ("tensorboard", "wandb", "mlflow")  # transformers' report_to integrations cheaptune's extras install


def tracker_names(value: str | list[str]) -> list[str]:
    """report_to's trackers by name ([] for none, which must stand alone); an unknown one is refused. Whether
    each is installed (and W&B logged in) depends on the machine: train.tracking checks that where it trains."""
    names = [n.strip().lower() for n in (value.split(",") if isinstance(value, str) else value) if n.strip()]
    if names == ["none"] or not names:
        return []
    for name in names:
        if name not in TRACKERS:
            raise BadInput(f"report_to: unknown tracker {name!r}; use any of {', '.join(TRACKERS)} or none")
    return list(dict.fromkeys(names))


def check_merge(cfg: TrainConfig) -> None:
    """Fail before training, not after, when --merge cannot work for the method."""
    if cfg.merge and cfg.method in ("prompt_tuning", "prefix_tuning"):
        raise BadInput(f"--merge is not possible for {cfg.method} (virtual tokens are not weights); drop --merge")


def check_before_load(cfg: TrainConfig) -> None:
    """Everything `train` refuses of a config alone, on any machine, before any model loads: one function so
    `train`, `launch`'s dry run and `doctor` refuse the same configs with the same line. What depends on the
    machine it runs on (CUDA, installed packages, a W&B login, the dataset files, the model cache) is checked
    by `train` there."""
    guard_settings(cfg)
    check_hf_names(cfg)
    check_merge(cfg)
    if cfg.report_to is not None:
        tracker_names(cfg.report_to)
