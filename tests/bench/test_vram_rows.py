"""Every public peak-memory row is usable: a source with its own date, numbers in range, a known board and method.

The bench (bench/memory_accuracy.py, bench/multi_gpu_accuracy.py) and the fitted constants read these rows; a row
without its source date, on an unknown board, or above its board's memory would calibrate on something unchecked.
"""

from __future__ import annotations

import csv
import datetime
import re
from pathlib import Path

import pytest
from peft import PeftType

from cheaptune.catalog.gpus import list_gpus, normalize_gpu_name
from cheaptune.estimate import policy

DATA = Path(__file__).resolve().parents[2] / "bench" / "data"
FILES = ("vram_measured_public.csv", "vram_multi_gpu.csv")
UNIT_BYTES = {"GB": 1e9, "GiB": 2**30, "MiB": 2**20, "MB": 1e6}
METRICS = {"max_allocated", "max_reserved", "torch_peak", "peak_active", "nvml", "per_gpu_screenshot",
           "max_allocated_per_gpu", "torch_peak_per_gpu", "nvml_per_gpu_mean", "max_reserved_per_gpu",
           "unstated"}  # unstated: the source gives a peak without naming its counter (QwenLM/Qwen README)
METHODS = set(policy.METHODS) | {p.value.lower() for p in PeftType}
# spellings of optimizers the estimator does not model apart (fused AdamW, bitsandbytes' paged 32-bit AdamW)
OPTIMIZERS = set(policy.OPTIMIZERS) | {"adamw-fused", "paged-adamw-32bit"}
SEQ_KINDS = {"", "cap", "fixed", "packed", "longest"}
UNNAMED_BOARD = re.compile(r"GPU-(\d+)GB")  # the source gives only the board's memory


def _rows(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(newline="") as fh:
        return list(csv.DictReader(fh))


def _board_gib(gpu: str) -> float | None:
    unnamed = UNNAMED_BOARD.fullmatch(gpu)
    if unnamed:
        return int(unnamed[1]) * 1e9 / 2**30
    canonical = normalize_gpu_name(gpu)
    return next((g.memory_gib for g in list_gpus() if g.name == canonical), None)


@pytest.mark.parametrize("name", FILES)
def test_rows_have_a_dated_source_and_sane_fields(name: str) -> None:
    rows = _rows(name)
    assert rows, name
    problems: list[str] = []
    ids = [r["id"] for r in rows]
    problems += [f"duplicate id {i}" for i in sorted({i for i in ids if ids.count(i) > 1})]
    today = datetime.date.today().isoformat()
    source = ""
    for r in rows:
        rid = r["id"]
        if None in r:
            problems.append(f"{rid}: more fields than the header (an unquoted comma?)")
            continue
        source = source if r["source"].startswith("same") else r["source"]
        if not source.strip():
            problems.append(f"{rid}: no source")
        date = r.get("source_date", "")
        if date != "undated" and not (re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", date) and date <= today):
            problems.append(f"{rid}: source_date {date!r} is not the source's YYYY-MM-DD (or 'undated')")
        if "retrieved" in r["source"]:
            problems.append(f"{rid}: a retrieval day in the source text is not the source's date")
        if r["method"] not in METHODS:
            problems.append(f"{rid}: unknown method {r['method']!r}")
        if (r["method"] == "qlora") != bool(r["quant"]):
            problems.append(f"{rid}: qlora rows and only they name a quantization")
        if r["precision"] not in policy.PRECISIONS:
            problems.append(f"{rid}: unknown precision {r['precision']!r}")
        if r["optimizer"] not in OPTIMIZERS:
            problems.append(f"{rid}: unknown optimizer {r['optimizer']!r}")
        if r["metric"] not in METRICS or r["unit"] not in UNIT_BYTES:
            problems.append(f"{rid}: unknown metric/unit {r['metric']!r} {r['unit']!r}")
            continue
        gib = float(r["value"]) * UNIT_BYTES[r["unit"]] / 2**30
        board = _board_gib(r["gpu"]) if r["gpu"] else None
        if r["gpu"] and board is None:
            problems.append(f"{rid}: unknown GPU {r['gpu']!r}")
        if not r["gpu"] and "board not named" not in r["note"]:
            problems.append(f"{rid}: no GPU and no note saying the source names none")
        if not 0.05 <= gib <= (board * 1.01 if board else 200):
            problems.append(f"{rid}: {gib:.2f} GiB is outside (0.05 GiB, the board's {board} GiB]")
        if not (r["micro_batch"].isdigit() and int(r["micro_batch"]) >= 1 and r["num_gpus"].isdigit()
                and int(r["num_gpus"]) >= 1):
            problems.append(f"{rid}: micro_batch/num_gpus must be positive integers")
        if not (r["seq_len"].isdigit() and 1 <= int(r["seq_len"]) <= 1_000_000 or r["seq_len"] == "short"):
            problems.append(f"{rid}: seq_len {r['seq_len']!r}")
        if r["params_b"] and not 0.01 <= float(r["params_b"]) <= 1000:
            problems.append(f"{rid}: params_b {r['params_b']} out of range")
        if r["lora_r"] and not (r["lora_r"].isdigit() and int(r["lora_r"]) >= 1):
            problems.append(f"{rid}: lora_r {r['lora_r']!r}")
        if r.get("seq_len_kind", "") not in SEQ_KINDS:
            problems.append(f"{rid}: seq_len_kind {r['seq_len_kind']!r}")
        if r.get("ckpt_kind") and (r["ckpt_kind"] == "none") != (r["grad_ckpt"] == "no"):
            problems.append(f"{rid}: ckpt_kind {r['ckpt_kind']!r} contradicts grad_ckpt {r['grad_ckpt']!r}")
    assert not problems, "\n".join(problems)


def test_public_rows_reach_the_issue_31_targets() -> None:
    """150+ rows, 10+ independent sources, QLoRA at least a third (issue 31)."""
    rows = _rows("vram_measured_public.csv")
    groups = {r["source_group"] for r in rows}
    assert "" not in groups, [r["id"] for r in rows if not r["source_group"]]
    assert len(rows) >= 150 and len(groups) >= 10
    assert 3 * sum(r["method"] == "qlora" for r in rows) >= len(rows)


def test_board_check_catches_a_row_above_its_board() -> None:
    assert _board_gib("Tesla T4") == pytest.approx(15.0)
    assert _board_gib("GPU-40GB") == pytest.approx(37.25, abs=0.01)
    assert _board_gib("no such board") is None
