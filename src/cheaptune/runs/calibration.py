"""Learning from runs: per-(GPU, method) correction factors for memory and speed, fitted from the registry.

A factor is the geometric mean of measured / predicted over a GPU and method's runs (memory: the device
total the probe reads against the plan's peak; speed: the full run's tokens/s, or the probe's when the
run stopped early, against the plan's). The spread of the log ratios gives prediction intervals. The
factors live in one CSV under CHEAPTUNE_HOME, the same format `calibrate --export/--import` moves between
machines, so a team can pool its runs.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from cheaptune.errors import BadInput
from cheaptune.util import atomic
from cheaptune.util.paths import home

FILE = "calibration.csv"
USED_STATUSES = ("finished", "budget-stopped")
Z90 = 1.2816  # standard normal quantile of 0.90: p10-p90 is exp(-+Z90 x sd) around the estimate
# Without calibration data: the speed model's error on public measurements it was not fitted to
# (bench/results/throughput_accuracy.json, 2026-11-30, not_fitted_single_gpu: median |log error| 0.106);
# for a normal error the median of |x| is 0.6745 sd, so sd = 0.106 / 0.6745.
DEFAULT_SPEED_LOG_SD = 0.157


@dataclass(frozen=True)
class Factor:
    """Measured / predicted for one GPU and method; *_log_sd is the spread of log ratios (None for one run)."""

    gpu: str
    method: str
    memory: float | None
    speed: float | None
    runs: int
    memory_log_sd: float | None = None
    speed_log_sd: float | None = None
    updated: str = ""

    def note(self) -> str:
        return f"calibrated from {self.runs} run{'s' if self.runs != 1 else ''} on {self.gpu} ({self.method})"


@dataclass(frozen=True)
class Sample:
    gpu: str
    method: str
    memory_ratio: float | None
    speed_ratio: float | None


def path() -> Path:
    return home() / FILE


def _ratio(measured: float | None, predicted: float | None) -> float | None:
    return measured / predicted if measured and predicted and measured > 0 and predicted > 0 else None


def samples(registry) -> list[Sample]:
    """One sample per finished (or budget-stopped) run that has a GPU and a probe with predictions."""
    out = []
    for run in registry.list_runs():
        if run["status"] not in USED_STATUSES or not run.get("method"):
            continue
        probes = [e["detail"] for e in registry.get_run(run["id"])["events"] if e["kind"] == "probe" and e["detail"]]
        if not probes:
            continue
        probe = probes[-1]
        gpu = run.get("gpu") or probe.get("gpu")
        measured_speed = run.get("tokens_per_s") if run["status"] == "finished" else probe.get("tokens_per_s")
        sample = Sample(gpu or "", run["method"], _ratio(run.get("peak_mem_measured") or probe.get("device_used"),
                                                         run.get("peak_mem_predicted") or probe.get("predicted_peak")),
                        _ratio(measured_speed, probe.get("predicted_tokens_per_s")))
        if gpu and (sample.memory_ratio or sample.speed_ratio):
            out.append(sample)
    return out


def _geo(values: list[float]) -> tuple[float | None, float | None]:
    """Geometric mean and the standard deviation of the logs (None with fewer than two values)."""
    if not values:
        return None, None
    logs = [math.log(v) for v in values]
    mean = sum(logs) / len(logs)
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)) if len(logs) > 1 else None
    return math.exp(mean), sd


def fit(found: Iterable[Sample]) -> list[Factor]:
    """Factors per (GPU, method), sorted."""
    groups: dict[tuple[str, str], list[Sample]] = {}
    for s in found:
        groups.setdefault((s.gpu, s.method), []).append(s)
    today = time.strftime("%Y-%m-%d")
    out = []
    for (gpu, method), group in sorted(groups.items()):
        memory, memory_sd = _geo([s.memory_ratio for s in group if s.memory_ratio])
        speed, speed_sd = _geo([s.speed_ratio for s in group if s.speed_ratio])
        out.append(Factor(gpu, method, memory, speed, len(group), memory_sd, speed_sd, today))
    return out


def to_csv(factors: Iterable[Factor]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=[f.name for f in fields(Factor)], lineterminator="\n")
    writer.writeheader()
    for f in factors:
        writer.writerow({k: "" if v is None else v for k, v in asdict(f).items()})
    return buf.getvalue()


def from_csv(text: str, where: str) -> list[Factor]:
    """Parse a calibration CSV; any bad row is one BadInput line naming it."""
    reader = csv.DictReader(io.StringIO(text))
    need = {"gpu", "method", "memory", "speed", "runs"}
    if not reader.fieldnames or not need <= set(reader.fieldnames):
        raise BadInput(f"{where}: not a calibration CSV (needs columns {', '.join(sorted(need))}); "
                       "write one with `cheaptune calibrate --export FILE`")
    out = []
    for n, row in enumerate(reader, start=2):
        try:
            num = {k: float(row[k]) if row.get(k) not in (None, "") else None
                   for k in ("memory", "speed", "memory_log_sd", "speed_log_sd")}
            runs = int(row["runs"])
        except ValueError as err:
            raise BadInput(f"{where} line {n}: {err}; factors are numbers, runs a whole number") from None
        if not row["gpu"] or not row["method"] or runs < 1 or any(v is not None and not 0 < v < 100 for v in num.values()):
            raise BadInput(f"{where} line {n}: needs a gpu, a method, runs >= 1 and positive factors")
        out.append(Factor(row["gpu"], row["method"], num["memory"], num["speed"], runs, num["memory_log_sd"],
                          num["speed_log_sd"], row.get("updated") or ""))
    return out


def load(where: Path | None = None) -> dict[tuple[str, str], Factor]:
    """The stored factors by (GPU, method); empty when none were fitted."""
    p = where or path()
    if not p.is_file():
        return {}
    return {(f.gpu, f.method): f for f in from_csv(p.read_text(), str(p))}


def save(factors: Iterable[Factor], where: Path | None = None) -> Path:
    p = where or path()
    atomic.write_text(p, to_csv(factors))
    return p


def pool(a: Factor, b: Factor) -> Factor:
    """Two fits of the same GPU and method as one, weighted by their runs (a team pooling its CSVs)."""
    def mix(x: float | None, y: float | None) -> float | None:
        if x is None or y is None:
            return x if y is None else y
        return math.exp((a.runs * math.log(x) + b.runs * math.log(y)) / (a.runs + b.runs))

    def mix_sd(x: float | None, y: float | None) -> float | None:
        if x is None or y is None:
            return x if y is None else y
        return math.sqrt((a.runs * x * x + b.runs * y * y) / (a.runs + b.runs))

    return Factor(a.gpu, a.method, mix(a.memory, b.memory), mix(a.speed, b.speed), a.runs + b.runs,
                  mix_sd(a.memory_log_sd, b.memory_log_sd), mix_sd(a.speed_log_sd, b.speed_log_sd),
                  max(a.updated, b.updated))


def interval(value: float, log_sd: float | None) -> tuple[float, float]:
    """(p10, p90) of a figure that scales with the speed error (hours, $ of compute), whose log spread is
    `log_sd` (DEFAULT_SPEED_LOG_SD without calibration data); a log-normal error is symmetric in logs."""
    sd = DEFAULT_SPEED_LOG_SD if log_sd is None else log_sd
    return value * math.exp(-Z90 * sd), value * math.exp(Z90 * sd)
