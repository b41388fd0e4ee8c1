"""Step-time model: FLOP counting rules, the parts of a step, and the fitted rows it reproduces."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cheaptune.errors import BadInput
from cheaptune.estimate.time import throughput as tp

LLAMA_8B = tp.ModelShape(params=8_030_000_000, hidden=4096, layers=32, vocab=128256, tied_embeddings=False)
LLAMA_3B = tp.ModelShape(params=3_210_000_000, hidden=3072, layers=28, vocab=128256, tied_embeddings=True)
LLAMA2_7B = tp.ModelShape(params=6_738_000_000, hidden=4096, layers=32, vocab=32000, tied_embeddings=False)


def gpu(**kw):
    base = dict(name="X", arch="ampere", tier="datacenter", bf16=True, bf16_tflops=312.0, fp16_tflops=312.0,
                fp32_tflops=19.5, mem_bw_gbs=1555)
    base.update(kw)
    return SimpleNamespace(**base)


A100 = gpu(name="A100")
RTX4090 = gpu(name="RTX4090", arch="ada", tier="consumer", bf16_tflops=165.2, fp16_tflops=165.2, mem_bw_gbs=1008)


def test_lora_skips_weight_gradients_and_full_does_not():
    lora = tp.flops_per_token(LLAMA_8B, "lora", 2048, grad_ckpt=False)
    full = tp.flops_per_token(LLAMA_8B, "full", 2048, grad_ckpt=False)
    assert lora.backward_weights == 0
    assert full.backward_weights == pytest.approx(2 * LLAMA_8B.matmul_params)
    assert full.total / lora.total == pytest.approx(1.5, rel=0.02)  # 6N vs 4N


def test_checkpointing_adds_one_forward():
    plain = tp.flops_per_token(LLAMA_8B, "full", 2048, grad_ckpt=False)
    ckpt = tp.flops_per_token(LLAMA_8B, "full", 2048, grad_ckpt=True)
    assert ckpt.total - plain.total == pytest.approx(plain.forward)


def test_attention_grows_with_sequence_and_embedding_lookup_is_not_a_matmul():
    short = tp.flops_per_token(LLAMA_8B, "lora", 512, False).forward
    long = tp.flops_per_token(LLAMA_8B, "lora", 8192, False).forward
    assert long > short
    assert LLAMA_8B.matmul_params == LLAMA_8B.params - 128256 * 4096
    assert LLAMA_3B.matmul_params == LLAMA_3B.params  # tied: the embedding is also the LM head


def job(shape=LLAMA_8B, method="lora", seq=2048, micro=2, ckpt=False, trainable=0, **kw):
    return tp.Job(shape, method, seq, micro, ckpt, trainable, **kw)


def test_each_stack_has_its_own_constants_and_cheaptune_runs_the_hf_stacks():
    """torchtune's compiled table no longer sets the HF stack's speed: each stack its own efficiency."""
    table = tp.load_table()
    assert tp.stack_constants(table, "cheaptune") is tp.stack_constants(table, "hf")
    assert tp.stack_constants(table, "hf") is not tp.stack_constants(table, "torchtune")
    assert tp.stack_for("llama-factory") == "hf" and tp.stack_for("unsloth") == "unsloth"
    hf = tp.step_time(job(LLAMA_3B, "full", 4096, 2), A100)
    tt = tp.step_time(job(LLAMA_3B, "full", 4096, 2, stack="torchtune"), A100)
    e = {s: tp.matmul_efficiency(2 * 4096, LLAMA_3B.hidden, table, s) for s in ("hf", "torchtune")}
    assert e["hf"] != e["torchtune"]
    assert (hf.tokens_per_s < tt.tokens_per_s) == (e["hf"] < e["torchtune"])
    with pytest.raises(BadInput, match="trainer stack 'magic'"):
        tp.step_time(job(stack="magic"), A100)


def test_parts_add_up_and_mfu_is_model_flops_over_peak():
    st = tp.step_time(job(micro=4, grad_accum=3), A100)
    assert st.step_seconds == pytest.approx(sum(st.parts.values()))
    assert set(st.parts) == {"compute", "elementwise", "communication", "optimizer", "dequant", "fixed"}
    assert st.parts["communication"] == 0 and st.parts["dequant"] == 0
    f = tp.flops_per_token(LLAMA_8B, "lora", 2048, False)
    assert st.mfu == pytest.approx(f.model * st.tokens_per_s / 312e12)
    assert st.tokens_per_s == pytest.approx(4 * 2048 * 3 / st.step_seconds)


def test_small_micro_steps_are_less_efficient_and_fixed_cost_does_not_shrink():
    small = tp.step_time(job(seq=512, micro=1), A100)
    big = tp.step_time(job(seq=512, micro=8), A100)
    assert big.tokens_per_s > 1.1 * small.tokens_per_s
    assert small.parts["fixed"] == pytest.approx(big.parts["fixed"])


def test_adapted_linears_per_layer_follow_the_lora_targets():
    assert tp.adapted_per_layer("q,v") == tp.adapted_per_layer("q_proj,v_proj") == 2
    assert tp.adapted_per_layer("qv") == 2 and tp.adapted_per_layer("attention,lm_head") == 4
    assert tp.adapted_per_layer("mlp") == 3 and tp.adapted_per_layer("q,k,v,o,mlp") == 7
    assert tp.adapted_per_layer("") == tp.adapted_per_layer(None) == tp.adapted_per_layer("all-linear") == 7


def test_each_adapted_linear_adds_a_fixed_cost_per_layer_and_micro_step():
    """The launch-bound floor: a LoRA on q,v pays for 2 wrapped linears per layer, all-linear for 7; a full
    fine-tune and prompt tuning wrap none."""
    table = tp.load_table()
    per = 0.0004
    hf = tp.stack_constants(table, "hf")
    t = {**table, "stacks": {**table["stacks"], "hf": {**hf, "fixed_per_layer_s": {
        **hf["fixed_per_layer_s"], "per_module": {"value": per}}}}}
    qv = tp.step_time(job(method="lora", grad_accum=3, adapted_modules=2), A100, table=t)
    every = tp.step_time(job(method="lora", grad_accum=3, adapted_modules=7), A100, table=t)
    assert every.parts["fixed"] - qv.parts["fixed"] == pytest.approx(3 * LLAMA_8B.layers * 5 * per)
    for method in ("full", "prompt_tuning"):
        a, b = (tp.step_time(job(method=method, adapted_modules=n), A100, table=t) for n in (2, 7))
        assert a.parts["fixed"] == pytest.approx(b.parts["fixed"])


def test_long_sequences_cost_little_with_flash_attention_and_much_with_eager():
    short = tp.step_time(job(seq=2048, micro=4), A100).tokens_per_s
    long = tp.step_time(job(seq=8192, micro=1), A100).tokens_per_s
    assert 0.85 < long / short < 1.05  # measured 2k -> 8k: about -2% (issue 14)
    eager = tp.step_time(job(seq=8192, micro=1, attn="eager"), A100).tokens_per_s
    assert eager < 0.8 * long
    with pytest.raises(BadInput, match="attn"):
        tp.step_time(job(attn="xformers"), A100)


def test_qlora_is_slower_than_lora_like_litgpt_measured():
    lora = tp.step_time(job(LLAMA2_7B, "lora", 512, 1), A100)
    qlora = tp.step_time(job(LLAMA2_7B, "qlora", 512, 1), A100)
    # LitGPT measured 1.56x (7B), 2.0x (13B) at micro-batch 1; LLaMA-Factory's HF rows (LF1, LF4) about 1.0x at
    # batch 4 x 1024, where dequantisation is shared by more tokens: between the two
    assert 1.1 <= lora.tokens_per_s / qlora.tokens_per_s <= 2.0
    assert qlora.parts["dequant"] > 0 and lora.parts["dequant"] == 0


def test_full_fine_tune_pays_a_memory_bound_optimizer_step():
    full = tp.step_time(job(method="full", micro=1, seq=512, clip_grads=False), A100)
    assert full.parts["optimizer"] == pytest.approx(LLAMA_8B.params * 28 / (1555e9 * 0.8))


def test_no_bf16_gpu_uses_fp16_peak():
    t4 = gpu(name="T4", arch="turing", bf16=False, bf16_tflops=None, fp16_tflops=65.0, fp32_tflops=8.1)
    assert tp.peak_flops(t4) == (65e12, "fp16")
    assert tp.peak_flops(t4, "fp32") == (8.1e12, "fp32")


def test_a_power_capped_board_runs_at_its_measured_matmul_rate_not_its_datasheet():
    from cheaptune.catalog.gpus import resolve_gpu

    table = tp.load_table()
    for name, fraction in (("L4", 0.470), ("L40S", 0.744), ("H100", 0.727)):  # bench/data/gemm_measured.csv
        g = resolve_gpu(name)
        assert tp.sustained_rate(g, "bf16", table) == pytest.approx(g.bf16_tflops * 1e12 * fraction)


def test_hopper_is_faster_than_ampere_per_gpu():
    h100 = gpu(name="H100", arch="hopper", bf16_tflops=989.4, fp16_tflops=989.4, mem_bw_gbs=3350)
    a = tp.step_time(job(micro=4), A100).tokens_per_s
    h = tp.step_time(job(micro=4), h100).tokens_per_s
    assert 1.5 < h / a < 3.5


def test_shape_from_config_and_bad_config():
    cfg = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000}
    s = tp.ModelShape.from_config(cfg, 6_738_000_000)
    assert s.layers == 32 and not s.tied_embeddings
    moe = {"hidden_size": 4096, "num_hidden_layers": 32, "vocab_size": 32000, "num_local_experts": 8,
           "num_experts_per_tok": 2, "intermediate_size": 14336}
    assert tp.ModelShape.from_config(moe, 46_700_000_000).active_params < 15e9
    with pytest.raises(BadInput):
        tp.ModelShape.from_config({"vocab_size": 3}, 10)


def test_unknown_method_is_bad_input():
    with pytest.raises(BadInput, match="method"):
        tp.step_time(job(method="magic"), A100)


def test_dpo_adds_one_reference_forward_per_token_and_precomputing_spreads_it_over_the_epochs():
    assert tp.reference_passes("orpo") == tp.reference_passes("sft") == 0.0
    assert tp.reference_passes("dpo") == 1.0 and tp.reference_passes("dpo", True, epochs=4) == 0.25
    sft = tp.flops_per_token(LLAMA_8B, "lora", 2048, grad_ckpt=False)
    dpo = tp.flops_per_token(LLAMA_8B, "lora", 2048, grad_ckpt=False, reference=1.0)
    assert dpo.total - sft.total == pytest.approx(sft.forward)  # the reference has no adapter FLOPs to speak of
    assert dpo.total / sft.total == pytest.approx(1.5, rel=0.02)  # 6N vs 4N for LoRA (8N vs 6N for full)


def test_a_preference_micro_step_runs_two_rows_per_pair():
    sft = tp.step_time(tp.Job(LLAMA_8B, "lora", 1024, 2), A100)
    orpo = tp.step_time(tp.Job(LLAMA_8B, "lora", 1024, 2, objective="orpo"), A100)
    dpo = tp.step_time(tp.Job(LLAMA_8B, "lora", 1024, 2, objective="dpo", reference=1.0), A100)
    assert orpo.parts["compute"] > 1.5 * sft.parts["compute"]  # twice the tokens (better matmul efficiency)
    assert dpo.tokens_per_s < orpo.tokens_per_s < 1.2 * sft.tokens_per_s
    assert dpo.flops_per_token / orpo.flops_per_token == pytest.approx(1.5, rel=0.02)


def test_elementwise_work_runs_at_the_memory_bandwidth_once_per_pass():
    table = tp.load_table()
    hf = {**table["stacks"]["hf"], "elementwise_bytes": {"value": 200, "label": "fitted"}}
    table = {**table, "stacks": {**table["stacks"], "hf": hf}}
    st = tp.step_time(job(seq=2048, micro=2, grad_accum=3), A100, table=table)
    per_pass = 200 * LLAMA_8B.hidden * LLAMA_8B.layers  # bytes per token per pass
    bw = 1555e9 * 0.80  # the test board has no measured bandwidth: steptime.yaml sustained_bandwidth.default
    assert st.parts["elementwise"] == pytest.approx(3 * 2 * 2048 * per_pass * 3 / bw)  # fwd + 2x bwd
    half_bw = tp.step_time(job(seq=2048, micro=2, grad_accum=3), gpu(name="A100", mem_bw_gbs=777.5), table=table)
    assert half_bw.parts["elementwise"] == pytest.approx(2 * st.parts["elementwise"])
    assert half_bw.parts["compute"] == pytest.approx(st.parts["compute"])  # the matmuls do not care
    ckpt = tp.step_time(job(seq=2048, micro=2, grad_accum=3, ckpt=True), A100, table=table)
    assert ckpt.parts["elementwise"] == pytest.approx(st.parts["elementwise"] * 4 / 3)  # + the recompute


def test_boards_below_sm80_run_attention_at_the_memory_efficient_rate():
    # No FlashAttention-2 below compute capability 8.0: sdpa and flash both fall to the memory-efficient kernel
    # (steptime.yaml attention_kernel.pre_sm80); eager is slower still and keeps its own figure.
    table = tp.load_table()
    turing, ampere = gpu(name="T", compute_capability="7.5"), gpu(name="A", compute_capability="8.0")
    slow = table["attention_kernel"]["pre_sm80"]["value"]
    assert tp.attention_efficiency("sdpa", turing, table) == tp.attention_efficiency("flash", turing, table) == slow
    assert tp.attention_efficiency("sdpa", ampere, table) == table["attention_kernel"]["sdpa"]["value"] > slow
    assert tp.attention_efficiency("eager", turing, table) == table["attention_kernel"]["eager"]["value"]
    assert tp.attention_efficiency("sdpa", gpu(name="AMD", compute_capability=None), table) > slow
    job = tp.Job(LLAMA_8B, "lora", 4096, 2, trainable_params=40_000_000)
    t_turing, t_ampere = tp.step_time(job, turing), tp.step_time(job, ampere)
    assert t_turing.parts["compute"] > t_ampere.parts["compute"]  # same board otherwise: only attention slowed


def test_the_t4_runs_its_matmuls_at_its_lowest_measured_rate_not_its_colab_burst():
    # steptime.yaml sustained_fraction: the T4 is power-bound (70 W, its clock falls under load), so it is timed at
    # the lowest reading any source gives (chsasank's 25.0 TFLOP/s), not zzc0721's 42.7 from a seconds-long sweep.
    table = tp.load_table()
    t4 = SimpleNamespace(name="T4", bf16=False, bf16_tflops=None, fp16_tflops=65.0, fp32_tflops=8.1)
    assert tp.sustained_rate(t4, "fp16", table) == pytest.approx(25.0e12, rel=0.002)
    base_clock_share = 585 / 1590  # NVIDIA guarantees the base clock under any load (steptime.yaml clock_source)
    assert base_clock_share * 65e12 < tp.sustained_rate(t4, "fp16", table) < 0.6 * 42.71e12


def test_no_stack_runs_its_matmuls_above_the_measured_gemm_rate():
    # e_max is the step's matmul efficiency against the board's measured GEMM rate: 1.0 is its physical bound, the
    # top of bench/throughput_accuracy.py's grid (the Unsloth stack fits there).
    table = tp.load_table()
    own = {name: s for name, s in table["stacks"].items() if "same_as" not in s}
    assert own and all(0 < s["efficiency"]["e_max"]["value"] <= 1.0 for s in own.values())
    assert tp.matmul_efficiency(10**6, 10**6, table, "unsloth") <= 1.0
    assert tp.matmul_efficiency(10**6, 10**6, table, "unsloth", full=True) <= 1.0  # e_max x full_ratio, capped


def with_full_ratio(table: dict, ratio: float) -> dict:
    hf = table["stacks"]["hf"]
    eff = {**hf["efficiency"], "full_ratio": {"value": ratio, "label": "fitted"}}
    return {**table, "stacks": {**table["stacks"], "hf": {**hf, "efficiency": eff}}}


def test_a_full_fine_tunes_matmuls_run_at_full_ratio_times_an_adapter_steps_share():
    """steptime.yaml full_ratio: full fine-tunes reach e_max x full_ratio of the matmul rate, adapters e_max; never
    above the measured GEMM rate, and nothing but the compute of full fine-tunes moves."""
    base = with_full_ratio(tp.load_table(), 1.0)
    fast = with_full_ratio(base, 1.25)
    adapter = tp.matmul_efficiency(8192, 4096, base, "hf")
    assert tp.matmul_efficiency(8192, 4096, base, "hf", full=True) == pytest.approx(adapter)
    assert tp.matmul_efficiency(8192, 4096, fast, "hf", full=True) == pytest.approx(1.25 * adapter)
    assert tp.matmul_efficiency(8192, 4096, fast, "hf") == pytest.approx(adapter)
    capped = with_full_ratio(base, 50.0)
    e = tp.stack_constants(base, "hf")["efficiency"]
    width = 4096 / (4096 + e["hidden_half"]["value"])
    assert tp.matmul_efficiency(8192, 4096, capped, "hf", full=True) == pytest.approx(width)  # 1.0 x the width term
    slow_full, fast_full = (tp.step_time(job(LLAMA_3B, "full", 4096, 2, stack="hf"), A100, table=t) for t in (base, fast))
    assert fast_full.parts["compute"] == pytest.approx(slow_full.parts["compute"] / 1.25)
    assert fast_full.parts["fixed"] == slow_full.parts["fixed"]
    slow_lora, fast_lora = (tp.step_time(job(LLAMA_3B, "lora", 4096, 2, stack="hf"), A100, table=t) for t in (base, fast))
    assert fast_lora.step_seconds == slow_lora.step_seconds
