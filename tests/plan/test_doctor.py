"""Each doctor check fires on its mistake and stays quiet otherwise; `cheaptune doctor CONFIG`."""

from __future__ import annotations

import json

import pytest

from cheaptune.plan import doctor
from cheaptune.plan.doctor import Facts, run_checks

GIB = 1024**3
CLEAN = Facts(method="lora", gpu_name="A100", gpu_bf16=True, precision="bf16", peak_bytes=40 * GIB,
              gpu_memory_bytes=80 * GIB, spot=False, budget_usd=10.0, seq_len=2048, context_length=4096,
              tokens_per_s=5000, packing=True, dataloader_workers=2, overhead_share=0.05, per_second_billing=True,
              egress_merged_usd=0.0, egress_adapter_usd=0.0, total_usd=5.0)


def codes(**changes) -> set[str]:
    import dataclasses

    return {f.code for f in run_checks(dataclasses.replace(CLEAN, **changes))}


def test_clean_facts_have_no_findings():
    assert run_checks(CLEAN) == []


@pytest.mark.parametrize("changes, code", [
    ({"peak_bytes": 78 * GIB}, "thin_headroom"),
    ({"peak_bytes": 81 * GIB}, "does_not_fit"),
    ({"method": "full", "peft_alternative": "lora on A100 ($2.00)"}, "full_where_peft_fits"),
    ({"method": "qlora", "lora_same_gpu": "$2.00 vs $3.00"}, "qlora_where_lora_fits"),
    ({"spot_alternative": "spot at aws would cost $1.00"}, "on_demand_where_spot_ok"),
    ({"spot": True, "checkpoint_minutes": None}, "spot_without_checkpoints"),
    ({"spot": True, "checkpoint_minutes": 240.0}, "spot_without_checkpoints"),
    ({"budget_usd": None}, "no_budget"),
    ({"gpu_bf16": False, "precision": None}, "no_bf16"),
    ({"seq_len": 8192}, "seq_beyond_context"),
    ({"overhead_share": 0.6}, "short_job"),
    ({"egress_merged_usd": 2.0}, "merged_egress"),
    ({"packing": False}, "data_starvation"),
    ({"tokens_per_s": 50_000, "dataloader_workers": 0}, "data_starvation"),
    ({"missing": ("base_model", "datasets")}, "missing_inputs"),
    ({"data_problems": ("dataset d.jsonl not found: pass a file",)}, "data_not_found"),
    ({"rented": True, "shuts_down": False}, "machine_left_running"),
])
def test_each_check_fires(changes, code):
    assert code in codes(**changes)


def test_every_check_has_a_test_and_one_line_messages():
    tested = {"does_not_fit", "thin_headroom", "full_where_peft_fits", "qlora_where_lora_fits", "on_demand_where_spot_ok",
              "spot_without_checkpoints", "no_budget", "no_bf16", "seq_beyond_context", "short_job", "merged_egress",
              "data_starvation", "missing_inputs", "machine_left_running", "data_not_found"}
    assert {c.__name__ for c in doctor.CHECKS} == tested
    worst = Facts(method="full", peft_alternative="x", spot=True, gpu_bf16=False, gpu_name="T4", seq_len=9000,
                  context_length=4096, packing=False, overhead_share=0.9, egress_merged_usd=9.0, total_usd=10.0,
                  peak_bytes=15 * GIB, gpu_memory_bytes=15 * GIB)
    for f in run_checks(worst):
        assert "\n" not in f.message and f.severity in ("error", "warn", "info")


def test_doctor_cli_on_axolotl_config(tmp_path, run_cli):
    cfg = tmp_path / "qlora.yml"
    cfg.write_text("base_model: meta-llama/Llama-2-7b-hf\nadapter: qlora\nsequence_len: 8192\n"
                   "sample_packing: false\nspot_notice: aws\n")
    code, out, err = run_cli("doctor", str(cfg), "--gpu", "T4", "--json")
    assert code == 0, err
    found = {f["code"] for f in json.loads(out)["findings"]}
    assert {"spot_without_checkpoints", "no_budget", "no_bf16", "seq_beyond_context", "data_starvation"} <= found
    code, out, _ = run_cli("doctor", str(cfg))
    assert code == 0 and "[no_budget]" in out


def test_doctor_cli_bad_config_is_exit_2(tmp_path, run_cli):
    bad = tmp_path / "bad.yml"
    bad.write_text("sequence_len: [oops\n")
    code, _, err = run_cli("doctor", str(bad))
    assert code == 2 and "error:" in err and "Traceback" not in err
    code, _, err = run_cli("doctor", str(tmp_path / "missing.yml"))
    assert code == 2


def test_doctor_estimates_the_configs_own_settings(tmp_path, run_cli):
    """A 70B full fine-tune at micro-batch 16, seq 4096 on a T4 cannot fit: the doctor says so with the peak
    it estimated for those settings (fp16-mixed on a board without bf16), and a small LoRA run fits."""
    cfg = tmp_path / "big.yml"
    cfg.write_text("base_model: meta-llama/Llama-2-70b-hf\nmethod: full\nmicro_batch_size: 16\n"
                   "sequence_len: 4096\nbudget_usd: 5\n")
    code, out, err = run_cli("doctor", str(cfg), "--gpu", "T4", "--json")
    assert code == 0, err
    found = {f["code"]: f for f in json.loads(out)["findings"]}
    assert found["does_not_fit"]["severity"] == "error"
    peak = float(found["does_not_fit"]["message"].split("estimated peak ")[1].split(" GiB")[0])
    assert peak > 16 * 70e9 / GIB  # fp32 master weights + fp32 moments: far beyond the board
    assert "thin_headroom" not in found


def test_doctor_on_an_empty_config_says_model_and_data_are_missing(tmp_path, run_cli):
    empty = tmp_path / "empty.yml"
    empty.write_text("{}\n")
    code, out, err = run_cli("doctor", str(empty), "--json")
    assert code == 0, err
    (missing,) = [f for f in json.loads(out)["findings"] if f["code"] == "missing_inputs"]
    assert missing["severity"] == "error" and "no base_model and no datasets" in missing["message"]


def test_doctor_flags_a_rented_machine_left_running(tmp_path, run_cli):
    cfg = tmp_path / "rented.yml"
    cfg.write_text("base_model: m/x\ndatasets: [{path: d.jsonl}]\nprice_per_hour: 2.5\nbudget_usd: 10\n")
    code, out, _ = run_cli("doctor", str(cfg), "--json")
    assert code == 0 and "machine_left_running" in {f["code"] for f in json.loads(out)["findings"]}
    cfg.write_text(cfg.read_text() + "on_finish: stop\n")
    code, out, _ = run_cli("doctor", str(cfg), "--json")
    assert code == 0 and "machine_left_running" not in {f["code"] for f in json.loads(out)["findings"]}


@pytest.mark.parametrize("key", ["optimizer", "lr_scheduler"])
def test_doctor_refuses_a_name_train_refuses(key, tmp_path, run_cli):
    """train refuses an optimizer or scheduler transformers lacks before loading (train.config.check_before_load);
    doctor exited 0 with findings on it. Now it is doctor's one line for an invalid config, exit 2."""
    cfg = tmp_path / "cfg.yml"
    cfg.write_text(f"base_model: m/x\ndatasets: [{{path: d.jsonl}}]\n{key}: banana\n")
    code, out, err = run_cli("doctor", str(cfg), "--json")
    assert code == 2 and out == "", (out, err)
    assert err.startswith(f"error: {cfg}: {key} 'banana' is not a transformers ") and err.count("\n") == 1, err


def test_doctor_does_not_refuse_a_budget_whose_price_train_gets_from_a_plan_or_flag(tmp_path, run_cli):
    """GuardSettings refuses a budget with no price; train gets the price from --plan or --price-per-hour, so
    doctor, checking the file alone, still reports findings on it."""
    cfg = tmp_path / "cfg.yml"
    cfg.write_text("base_model: m/x\ndatasets: [{path: d.jsonl}]\nbudget_usd: 5\non_finish: stop\n")
    code, out, err = run_cli("doctor", str(cfg), "--json")
    assert code == 0 and "no_budget" not in {f["code"] for f in json.loads(out)["findings"]}, err


def test_doctor_says_a_dataset_train_would_not_find(tmp_path, run_cli):
    """train refuses a dataset path that is not there before loading (data.readers.iter_rows); doctor said
    nothing. Paths are read from the config's folder, as train reads them."""
    cfg = tmp_path / "cfg.yml"
    cfg.write_text("base_model: m/x\ndatasets: [{path: d.jsonl}]\nbudget_usd: 5\non_finish: stop\n")
    code, out, err = run_cli("doctor", str(cfg), "--json")
    found = {f["code"]: f for f in json.loads(out)["findings"]}
    assert code == 0 and found["data_not_found"]["severity"] == "error", err
    assert "dataset d.jsonl not found" in found["data_not_found"]["message"]
    (tmp_path / "d.jsonl").write_text('{"text": "hi"}\n')
    code, out, _ = run_cli("doctor", str(cfg), "--json")
    assert code == 0 and "data_not_found" not in {f["code"] for f in json.loads(out)["findings"]}


def test_doctor_says_train_refuses_bf16_on_a_board_without_it(tmp_path, run_cli):
    """train.methods.resolve_precision refuses bf16 on a GPU without it before loading; doctor --gpu T4 only
    advised fp16 (a warning), now it is an error naming the precision to use."""
    cfg = tmp_path / "cfg.yml"
    cfg.write_text("base_model: m/x\nprecision: bf16-mixed\nbudget_usd: 5\non_finish: stop\n")
    code, out, err = run_cli("doctor", str(cfg), "--gpu", "T4", "--json")
    (f,) = [f for f in json.loads(out)["findings"] if f["code"] == "no_bf16"]
    assert code == 0 and f["severity"] == "error" and "use precision: fp16-mixed" in f["message"], err
    cfg.write_text(cfg.read_text().replace("bf16-mixed", "fp16-mixed"))
    code, out, _ = run_cli("doctor", str(cfg), "--gpu", "T4", "--json")
    (f,) = [f for f in json.loads(out)["findings"] if f["code"] == "no_bf16"]
    assert f["severity"] == "info"
