"""The memory bench builds every row as a user would: `estimate`'s own options, nothing else; and scores by source."""

from __future__ import annotations

import csv
import inspect

from cheaptune.cli.estimate import request_from_options


def _rows(m) -> list[dict]:
    return list(csv.DictReader((m.HERE / "data" / "vram_measured_public.csv").open()))


def test_every_row_is_estimate_options_only(bench, tmp_path):
    m = bench("memory_accuracy")
    allowed = set(inspect.signature(request_from_options).parameters)
    rows = [r for r in _rows(m) if r["num_gpus"] == "1" and r["seq_len"].isdigit()]
    assert len(rows) > 100
    for row in rows:
        assert set(m.cli_options(row, tmp_path)) <= allowed, row["id"]
    lc10 = next(r for r in rows if r["id"] == "LC10")
    opts = m.cli_options(lc10, tmp_path)
    assert opts["trainer"] == "litgpt==0.4.0.dev0" and opts["versions"] == "bitsandbytes==0.42.0"
    req, _ = request_from_options(**opts)
    assert req.versions == "bitsandbytes==0.42.0,litgpt==0.4.0.dev0" and req.trainer == "litgpt"


def test_stated_versions_reads_exact_pins_only(bench):
    m = bench("memory_accuracy")
    assert m.stated_versions("litgpt 0.4.5; bitsandbytes==0.42.0 (pyproject); torch>=2.2.0") == (
        "0.4.5", "bitsandbytes==0.42.0")
    assert m.stated_versions("unsloth 2024.8; transformers 4.44.2; torch 2.4.0+cu121; xformers 0.0.27") == (
        "2024.8", "torch==2.4.0+cu121,transformers==4.44.2")
    assert m.stated_versions("") == (None, None)


def test_leave_one_source_out_refits_the_slack_without_the_scored_source(bench):
    m = bench("memory_accuracy")
    gib = 2**30
    rows = [dict(id="a", group="A", metric="max_reserved", method="lora", measured_bytes=12 * gib, allocated_bytes=10 * gib),
            dict(id="b", group="B", metric="max_reserved", method="lora", measured_bytes=11 * gib, allocated_bytes=10 * gib)]
    m.loso(rows)
    a, b = rows
    assert abs(a["loso_slack_fraction"] - 0.1) < 1e-9 and abs(b["loso_slack_fraction"] - 0.2) < 1e-9
    assert abs(a["loso_error"] - (11 / 12 - 1)) < 1e-6 and abs(b["loso_error"] - (12 / 11 - 1)) < 1e-6


def test_slack_is_fitted_once_per_source_on_reserved_and_nvidia_smi_rows(bench):
    """A benchmark's 3 rows count once against another source's 1; an nvidia-smi total counts as the pool after the
    CUDA context comes off; an allocated peak says nothing about the pool."""
    from cheaptune.estimate.memory import overheads

    m = bench("memory_accuracy")
    gib, ctx = 2**30, overheads.constants()["cuda_context_bytes"]
    many = [dict(group="A", metric="max_reserved", measured_bytes=10.5 * gib, allocated_bytes=10 * gib)] * 3
    smi = [dict(group="B", metric="nvml", measured_bytes=12 * gib + ctx, allocated_bytes=10 * gib)]
    alloc = [dict(group="C", metric="max_allocated", measured_bytes=30 * gib, allocated_bytes=10 * gib)]
    assert abs(m.fit_slack(many + smi + alloc) - (0.05 + 0.2) / 2) < 1e-9
    assert m.fit_slack(alloc) is None


def test_accumulation_comes_from_what_the_row_states(bench):
    m = bench("memory_accuracy")
    assert m.stated_accumulation({"note": "padded per batch; gradient accumulation 4; lora_alpha 16", "micro_batch": "2"}) == 4
    assert m.stated_accumulation({"note": "defaults.yaml: gradient_accumulation_steps 1", "micro_batch": "8"}) == 1
    assert m.stated_accumulation({"note": "full.yaml: global batch 32, 1 epoch(s)", "micro_batch": "4"}) == 8
    assert m.stated_accumulation({"note": "", "micro_batch": "4"}) == 1


def test_rows_the_simulation_cannot_run_say_why(bench):
    m = bench("memory_accuracy")
    assert "reads tensor values" in m.not_simulated("NotImplementedError: aten::bincount: attempted to run this")
    assert "--full-sim" in m.not_simulated("ValueError: Config specifies more adapter layers '28' than the model has '2'.")
    assert m.not_simulated("model type needs custom code") == "not simulated: model type needs custom code"


def test_a_capped_row_runs_at_its_datasets_longest_sample_when_that_is_shorter(bench):
    m = bench("memory_accuracy")
    note = "loaded as unsloth/Llama-3.1-8B; unsloth/alpaca-cleaned truncated at max_seq_length 2048, padded per batch"
    assert m.seq_len_seen({"seq_len": "2048", "seq_len_kind": "cap", "note": note}) == 1304
    assert m.seq_len_seen({"seq_len": "1024", "seq_len_kind": "cap", "note": note}) == 1024
    assert m.seq_len_seen({"seq_len": "4096", "seq_len_kind": "packed", "note": note}) == 4096
    assert m.seq_len_seen({"seq_len": "2048", "seq_len_kind": "cap", "note": "mlabonne/FineTome-100k truncated"}) == 2048


def test_a_row_measured_below_its_stored_state_is_reported_unreadable(bench):
    m = bench("memory_accuracy")
    gib = 2**30
    # a full fine-tune's weights are trainable_weights in the breakdown; a frozen base's are weights
    held = {"trainable_weights": 6 * gib, "gradients": 6 * gib, "optimizer_state": 8 * gib, "activations": 3 * gib}
    why = m.unreadable(15.4 * gib, held)  # LC18's shape: a 3B bf16 full fine-tune read 15.4 GiB
    assert why.startswith("unreadable") and "20.00 GiB" in why
    assert m.unreadable(20.5 * gib, held) == ""  # at or above the stored state: readable, whatever the activations


def test_unsloth_rows_train_embed_and_head_whole_and_only_rope_scaled_rows_pass_the_long_context_flag(bench, tmp_path):
    """Unsloth's get_peft_model moves embed_tokens and lm_head from the targets to modules_to_save, so US10 passes
    them as --train-modules; litgpt's lm_head stays a LoRA target. --allow-long-context is for a row that states RoPE
    scaling (US26), not for one whose length exceeds learned positions (the GPT-BigCode rows stay refused)."""
    m = bench("memory_accuracy")
    rows = {r["id"]: r for r in _rows(m)}
    us10 = m.cli_options(rows["US10"], tmp_path)
    assert us10["train_modules"] == "embed_tokens,lm_head" and us10["lora_targets"] == "all-linear"
    lc33 = m.cli_options(rows["LC33"], tmp_path)
    assert "train_modules" not in lc33 and "lm_head" in lc33["lora_targets"]
    assert m.cli_options(rows["US26"], tmp_path)["allow_long_context"] is True
    assert m.cli_options(rows["FA1"], tmp_path)["allow_long_context"] is False
