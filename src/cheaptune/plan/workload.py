"""What the user asks for: the job (tokens, epochs, batch) and the constraints on where it may run."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

from cheaptune.errors import BadInput
from cheaptune.util.names import did_you_mean

OPTIMIZE = ("cost", "time")  # what the ranking minimises
OBJECTIVES = ("sft", "dpo", "orpo")  # the training objective (estimate.policy.OBJECTIVES)
SPOT_MODES = ("auto", "only", "never")
AUTO_METHODS = ("full", "lora", "qlora")
KNOWN_METHODS = ("full", "lora", "qlora", "dora")
# Between nodes when --network is not given: the price files do not say which instances have InfiniBand,
# so a multi-node option is timed over Ethernet (estimate.time.scaling NETWORKS), the slower of the two.
INTER_NODE_NETWORK = "ethernet"


@dataclass(frozen=True)
class Workload:
    """The training job: tokens per epoch and how they are batched."""

    tokens: int
    epochs: float = 1.0
    seq_len: int = 2048
    effective_batch: int = 16  # sequences per optimiser step
    examples: int | None = None
    tokens_exact: bool = False
    tokens_basis: str = "given"
    dataset_bytes: int = 0
    lengths: tuple[int, ...] = field(default=(), repr=False, compare=False)  # tokens per example, when counted
    duplicates: int = 0  # examples identical to an earlier one
    skipped: str = ""  # bad rows left out by --skip-bad-rows: how many, and the first
    objective: str = "sft"  # sft | dpo | orpo; for dpo/orpo tokens count both rows of each pair
    # the adapter's target modules (plan --lora-targets, or a config's lora_targets): sized, saved, and timed by
    # their per-module fixed cost (estimate.time.throughput.adapted_per_layer); None: all-linear, the default
    lora_targets: str | None = None
    # the network between the nodes of a multi-node option (plan --network: a name, a rate per node or an
    # instance type, estimate.time.scaling.network_gbit); None: not stated, INTER_NODE_NETWORK assumed. Here, not
    # on Constraints, so every re-pricing of an option (budget search, data audit, spot) times the same link.
    network: str | None = None

    @property
    def inter_node_network(self) -> str:
        """The network a multi-node option is timed over: the stated one, else the assumed INTER_NODE_NETWORK."""
        return self.network or INTER_NODE_NETWORK

    @cached_property
    def trained_tokens(self) -> float:
        """Tokens per epoch the trainer trains: each example is cut to --seq-len before packing, so a dataset
        file's long examples count only up to it (a sampled count is scaled up); without lengths, all."""
        if not self.lengths:
            return float(self.tokens)
        return self.tokens * sum(min(n, self.seq_len) for n in self.lengths) / max(sum(self.lengths), 1)

    @property
    def train_tokens(self) -> float:
        return self.trained_tokens * self.epochs

    @property
    def sequences(self) -> int:
        """Sequences per epoch with packing (the trainer packs by default)."""
        return max(1, math.ceil(self.trained_tokens / self.seq_len))

    def validate(self) -> Workload:
        if self.tokens <= 0:
            raise BadInput("the dataset has no tokens; pass a non-empty dataset or --tokens N with N > 0")
        if self.epochs <= 0:
            raise BadInput(f"--epochs must be > 0; got {self.epochs}")
        if self.seq_len < 16:
            raise BadInput(f"--seq-len must be at least 16; got {self.seq_len}")
        if self.effective_batch < 1:
            raise BadInput(f"--effective-batch must be >= 1; got {self.effective_batch}")
        if self.objective not in OBJECTIVES:
            raise BadInput(f"--objective must be one of {', '.join(OBJECTIVES)}; got {self.objective!r}")
        return self


@dataclass(frozen=True)
class Constraints:
    """Where and how the job may run, and what the ranking optimises."""

    methods: tuple[str, ...] = AUTO_METHODS
    budget_usd: float | None = None
    deadline_hours: float | None = None
    providers: tuple[str, ...] = ()
    exclude_providers: tuple[str, ...] = ()
    spot: str = "auto"
    community: bool = True
    max_gpus: int = 8  # GPUs in all (per node x nodes); more than one only where one GPU cannot serve
    headroom: float = 0.10
    optimize: str = "cost"
    top: int = 8
    lora_r: int = 16
    # the speed options (estimate.speedups.for_gpu): true, those that pay on each board; false, none
    # (--no-speedups); a tuple, exactly those a config sets (plan --config)
    speedups: bool | tuple[str, ...] = True
    gpus: tuple[str, ...] = field(default=())  # restrict to these canonical GPU names (empty: all)

    def validate(self) -> Constraints:
        if self.optimize not in OPTIMIZE:
            raise BadInput(f"--optimize must be one of {', '.join(OPTIMIZE)}; got {self.optimize!r}")
        if self.spot not in SPOT_MODES:
            raise BadInput(f"--spot must be one of {', '.join(SPOT_MODES)}; got {self.spot!r}")
        if not 0 <= self.headroom < 0.9:
            raise BadInput(f"--headroom is a fraction of GPU memory in [0, 0.9); got {self.headroom}")
        for m in self.methods:
            if m not in KNOWN_METHODS:
                raise BadInput(f"--method {m!r} is not planned; use auto or one of {', '.join(KNOWN_METHODS)}")
        if self.budget_usd is not None and self.budget_usd <= 0:
            raise BadInput(f"--budget must be a positive amount of USD; got {self.budget_usd}")
        if self.deadline_hours is not None and self.deadline_hours <= 0:
            raise BadInput(f"--deadline must be a positive number of hours; got {self.deadline_hours}")
        if self.max_gpus < 1 or self.top < 1:
            raise BadInput("--max-gpus and --top must be at least 1")
        return self


def check_providers(c: Constraints, known: Iterable[str]) -> None:
    """--provider / --exclude-providers name providers the catalog has (a typo would silently filter all)."""
    names = sorted({k.lower() for k in known})
    for flag, given in (("--provider", c.providers), ("--exclude-providers", c.exclude_providers)):
        check_provider_names(flag, given, names)


def check_provider_names(flag: str, given: Iterable[str], known: Iterable[str]) -> None:
    """Each of `given` is a provider in `known` (any case); else one line naming the flag and the closest."""
    names = sorted({k.lower() for k in known})
    for p in given:
        if p.lower() not in names:
            hint = did_you_mean(p, names) or f"; known: {', '.join(names)}"
            raise BadInput(f"{flag}: no provider {p!r} in the price catalog{hint}")


def parse_methods(value: str) -> tuple[str, ...]:
    """'auto' -> the methods auto compares; 'lora,qlora' -> those."""
    if value.strip().lower() == "auto":
        return AUTO_METHODS
    methods = tuple(m.strip().lower() for m in value.split(",") if m.strip())
    if not methods:
        raise BadInput("--method is empty; use auto or one of " + ", ".join(KNOWN_METHODS))
    return methods
