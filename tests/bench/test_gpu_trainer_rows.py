"""bench/gpu_trainer_rows.py: the trainers' configs, their memory logs as they print them, and the public CSV rows.

Neither trainer is installed here: the logs in tests/bench/data were captured from the CPU smoke run
(axolotl 0.19.0, llamafactory 0.9.5; bench/README.md), where both print their memory fields as zeros.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
AXOLOTL_LOG = (DATA / "axolotl_0.19_stdout.txt").read_text()  # the Trainer's printed logs, lines around them
LLAMAFACTORY_JSONL = (DATA / "llamafactory_0.9.5_trainer_log.jsonl").read_text()  # its output_dir/trainer_log.jsonl


def test_cases_filter_and_full_only_on_the_small_model(bench):
    g = bench("gpu_trainer_rows")
    every = g.cases(g.TRAINERS, ("lora", "full", "qlora"), smoke=False)
    assert {c.trainer for c in every} == set(g.TRAINERS) and len({c.name for c in every}) == len(every)
    assert {c.model for c in every if c.method == "full"} == {g.MODELS[0]}
    # QLoRA last: a call without bitsandbytes gets every other row before its deadline
    methods = [c.method for c in every]
    assert methods.index("qlora") > max(i for i, m in enumerate(methods) if m != "qlora")
    only = g.cases(("llama-factory",), ("lora",), smoke=False)
    assert only and all(c.trainer == "llama-factory" and c.method == "lora" for c in only)


def test_configs_say_the_same_run_in_each_trainers_words(bench, tmp_path):
    g, tl = bench("gpu_trainer_rows"), bench("trainer_logs")
    case = g.Case("axolotl", g.MODELS[0], "qlora", 1024, 2, False)
    ax = tl.axolotl_config(case, tmp_path / "m", tmp_path / "d.jsonl", tmp_path / "o", 10, cuda=True)
    lf = tl.llamafactory_config(case, tmp_path / "m", tmp_path / "d.jsonl", tmp_path / "o", 10, cuda=True)
    assert (ax["sequence_len"], ax["micro_batch_size"], ax["max_steps"]) == (1024, 2, 10)
    assert (lf["cutoff_len"], lf["per_device_train_batch_size"], lf["max_steps"]) == (1024, 2, 10)
    assert ax["excess_length_strategy"] == "truncate" and not ax["sample_packing"]  # rows cut, never packed
    assert ax["adapter"] == "qlora" and ax["load_in_4bit"] and lf["quantization_bit"] == 4
    assert ax["lora_r"] == lf["lora_rank"] == 16 and ax["lora_dropout"] == lf["lora_dropout"] == 0.0
    assert ax["gradient_checkpointing"] is False and lf["disable_gradient_checkpointing"] is True
    assert ax["optimizer"] == lf["optim"] == "adamw_torch_fused" and ax["bf16"] and lf["bf16"]
    full = g.Case("llama-factory", g.MODELS[0], "full", 512, 1, True)
    lf_full = tl.llamafactory_config(full, tmp_path, tmp_path / "d.jsonl", tmp_path, 10, cuda=False)
    ax_full = tl.axolotl_config(full, tmp_path, tmp_path / "d.jsonl", tmp_path, 10, cuda=False)
    assert lf_full["finetuning_type"] == "full" and "lora_rank" not in lf_full and "adapter" not in ax_full
    assert not lf_full["bf16"] and lf_full["optim"] == "adamw_torch" and lf_full["dataset"] == "d"


def test_dataset_rows_are_longer_than_the_sequence(bench, tmp_path):
    g = bench("gpu_trainer_rows")
    from cheaptune.demo.tiny import train_tokenizer

    path = g.write_dataset(tmp_path, 128, 4)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    tok = train_tokenizer()
    assert len(rows) == 4 and all(len(tok(r["output"])["input_ids"]) > 128 for r in rows)
    assert json.loads((tmp_path / "dataset_info.json").read_text()) == {path.stem: {"file_name": path.name}}


def test_axolotl_log_lines_parse_to_the_largest_step(bench):
    tl = bench("trainer_logs")
    steps = tl.axolotl_steps(AXOLOTL_LOG)
    assert len(steps) == 2
    gpu = [dict(s, **{"memory/max_allocated (GiB)": v}) for s, v in zip(steps, (3.5, 4.25), strict=True)]
    got = {m["metric"]: m for m in tl.metrics("axolotl", gpu)}
    assert set(got) == set(tl.METRICS["axolotl"])
    alloc = got["memory/max_allocated (GiB)"]
    assert alloc["value"] == 4.25 and alloc["per_step"] == [3.5, 4.25] and alloc["csv_metric"] == "max_allocated"
    assert got["memory/device_reserved (GiB)"]["torch_counter"] == "torch.cuda.max_memory_reserved()"


def test_llamafactory_log_parses_and_ignores_other_lines(bench, tmp_path):
    tl = bench("trainer_logs")
    (tmp_path / "trainer_log.jsonl").write_text(LLAMAFACTORY_JSONL + "not json\n{\"loss\": 1.0}\n")
    steps = tl.read_steps("llama-factory", "", tmp_path)
    assert len(steps) == 2 and all("vram_reserved" in s for s in steps)
    assert tl.read_steps("llama-factory", "", tmp_path / "missing") == []
    got = {m["metric"]: m["csv_metric"] for m in tl.metrics("llama-factory", steps)}
    assert got == {"vram_allocated": "max_allocated", "vram_reserved": "max_reserved"}


def _gpu_result(tmp_path, bench):
    g = bench("gpu_trainer_rows")
    runs = []
    for trainer, method, metrics in (("axolotl", "lora", {"memory/max_allocated (GiB)": 7.5,
                                                          "memory/device_reserved (GiB)": 8.0}),
                                     ("llama-factory", "full", {"vram_allocated": 21.04}),
                                     ("llama-factory", "lora", {})):
        steps = [metrics]
        runs.append({"trainer": trainer, "model": g.MODELS[0], "method": method, "seq_len": 2048, "micro_batch": 2,
                     "grad_ckpt": True, "status": "ok" if metrics else "error", "config_file": f"{trainer}.yaml",
                     "version": {"torch": "2.11.0"}, "metrics": bench("trainer_logs").metrics(trainer, steps)})
    doc = {"benchmark": "gpu_trainer_rows", "date": "2026-12-02", "mode": "gpu",
           "machine": {"device": "NVIDIA H200"}, "runs": runs}
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path


def test_to_csv_rows_fit_the_public_csv_and_the_memory_bench(bench, tmp_path, capsys):
    g, tl = bench("gpu_trainer_rows"), bench("trainer_logs")
    public = tmp_path / "public.csv"
    public.write_text(tl.PUBLIC_CSV.read_text())
    before = public.read_text()
    rows = g.main(["--to-csv", str(_gpu_result(tmp_path, bench)), "--append", str(public)])
    assert [r["id"] for r in rows] == ["AXG1", "AXG2", "LFG1"]  # the failed run gives no row
    printed = list(csv.DictReader(io.StringIO(",".join(tl.COLUMNS) + "\n" + capsys.readouterr().out)))
    assert printed == rows
    assert public.read_text().startswith(before)
    table = {r["id"]: r for r in csv.DictReader(public.open())}
    ax, lf = table["AXG2"], table["LFG1"]
    assert (ax["metric"], ax["value"], ax["unit"], ax["gpu"]) == ("max_reserved", "8", "GiB", "H200")
    assert lf["precision"] == "bf16-mixed" and lf["lora_r"] == "" and lf["framework"] == "llama-factory"
    assert ax["source"] == "measured by cheaptune bench/gpu_trainer_rows.py on H200, 2026-12-02"
    assert "'memory/device_reserved (GiB)'" in ax["note"] and "since previous log" in ax["note"]
    accuracy = (tl.PUBLIC_CSV.parents[1] / "memory_accuracy.py").read_text()
    assert all(f'"{r["framework"]}": (' in accuracy for r in rows)  # the memory bench maps each framework
    again = g.main(["--to-csv", str(tmp_path / "result.json"), "--append", str(public)])
    assert [r["id"] for r in again] == ["AXG3", "AXG4", "LFG2"]  # ids never collide with rows already there


@pytest.mark.parametrize("content, why", [(None, "No such file"), ("{}", "not a gpu_trainer_rows result"),
                                          ('{"benchmark": "gpu_trainer_rows", "runs": [], "mode": "cpu-smoke"}',
                                           "only a GPU run")])
def test_to_csv_bad_result_is_one_line_exit_2(bench, tmp_path, capsys, content, why):
    g = bench("gpu_trainer_rows")
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as err:
        g.main(["--to-csv", str(path)])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and why in lines[0] and lines[0].startswith("error:")


def test_run_case_reads_the_trainers_log_with_only_its_own_site_dirs(bench, tmp_path, monkeypatch):
    """A stand-in interpreter prints axolotl's captured log and the PYTHONPATH it was given."""
    g = bench("gpu_trainer_rows")
    fake = tmp_path / "python"
    fake.write_text(f'#!/bin/sh\n[ "$1" = "-c" ] && exit 0\ncat {DATA / "axolotl_0.19_stdout.txt"}\n'
                    'echo "PYTHONPATH=$PYTHONPATH"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PYTHONPATH", "/parent/only")
    case = g.Case("axolotl", g.MODELS[0], "lora", 256, 2, False)
    cfg, out = g.write_config(case, tmp_path / "m", tmp_path / "d.jsonl", tmp_path, 2, cuda=False)
    row = g.run_case(case, cfg, out, str(fake), "/site/axolotl", timeout=60)
    assert row["status"] == "ok" and row["steps_logged"] == 2 and row["config"] == cfg.read_text()
    assert {m["metric"] for m in row["metrics"]} == set(bench("trainer_logs").METRICS["axolotl"])
    log = (tmp_path / f"{out.name}.log").read_text()
    assert f"PYTHONPATH=/site/axolotl:{tmp_path / 'stubs'}\n" in log and "/parent/only" not in log
    assert (tmp_path / "stubs" / "wandb" / "__init__.py").exists()
    failed = g.run_case(case, cfg, out, "/bin/false", None, timeout=60)
    assert failed["status"] == "error" and failed["metrics"] == [] and "log_tail" in failed


def test_wheel_manifest_pins_each_group_once(bench):
    tl = bench("trainer_logs")
    lines = [x for x in (tl.PUBLIC_CSV.parents[1] / "gpu_trainer_wheels.txt").read_text().splitlines()
             if x and not x.startswith("#")]
    groups: dict[str, dict[str, str]] = {}
    for line in lines:
        pin, _, why = line.partition("  # ")
        name, _, version = pin.partition("==")
        group, _, reason = why.partition(": ")
        assert version and reason and group in {"common", "axolotl", "llama-factory", "qlora"}, line
        assert name not in groups.setdefault(group, {}), f"{name} twice in {group}"
        groups[group][name] = version
    # the versions the captured logs, the docstring and the CSV framework name speak of
    assert groups["axolotl"]["axolotl"] == "0.19.0" and tl.FRAMEWORK["axolotl"] == "axolotl-0.19"
    assert groups["llama-factory"]["llamafactory"] == "0.9.5" and groups["qlora"] == {"bitsandbytes": "0.50.2"}
