"""Trainer profiles: every setting cited, and each quirk really simulated (it moves the peak)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from cheaptune.errors import BadInput
from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory
from cheaptune.estimate.memory.profiles import _profiles, get_profile, trainers

STOCK = Path(__file__).parent / "data" / "axolotl_llama2_qlora.yml"  # axolotl v0.18.0 examples/llama-2/qlora.yml


def test_every_profile_setting_names_its_source():
    assert set(trainers()) == {"cheaptune", "hf", "axolotl", "llama-factory", "litgpt", "torchtune", "unsloth"}
    for prof in _profiles().values():
        for name in (f.name for f in dataclasses.fields(prof)):
            if name in ("name", "about", "version", "sources", "package", "release", "releases"):
                continue
            if getattr(prof, name) != getattr(get_profile("cheaptune"), name):
                assert prof.sources.get(name), f"{prof.name}.{name} has no source"
        for release in prof.releases:  # each older release carries its own source
            assert release["versions"] and release["libraries"] and release["source"], prof.name
    assert get_profile("LLaMA_Factory").name == "llama-factory" and get_profile("litgpt==0.4.9").name == "litgpt"
    assert "no longer maintained" in get_profile("torchtune").about
    with pytest.raises(BadInput, match="not one of"):
        get_profile("nemo")


def _peak(cfg, **kw) -> dict:
    base = dict(model=cfg.to_dict(), method="qlora", micro_batch=2, seq_len=128, lora_targets="qv")
    est = estimate_memory(EstimateRequest(**{**base, **kw}))
    return {"peak": est.peak_allocated_bytes, **est.breakdown, "inputs": est.inputs}


def test_profile_quirks_change_the_simulated_peak(tiny_cfg):
    ours, hf = _peak(tiny_cfg), _peak(tiny_cfg, trainer="hf")
    # peft's prepare_model_for_kbit_training: embeddings and norms in fp32 (the tiny model is mostly embeddings)
    assert hf["weights"] > 1.5 * ours["weights"] and hf["inputs"]["loss"] == "hf"
    old_bnb, new_bnb = _peak(tiny_cfg, trainer="litgpt==0.4.9"), _peak(tiny_cfg, trainer="litgpt")  # bnb 0.42.0 pin
    assert old_bnb["peak"] > new_bnb["peak"] and new_bnb["inputs"]["loss"] == "chunked"
    dropped = _peak(tiny_cfg, trainer="litgpt", lora_dropout=0.3)
    assert dropped["peak"] > _peak(tiny_cfg, trainer="litgpt", lora_dropout=0.0)["peak"]
    lf = _peak(tiny_cfg, trainer="llama-factory")
    assert lf["trainable_weights"] == 2 * ours["trainable_weights"]  # fp32 QLoRA adapters vs bf16
    assert _peak(tiny_cfg, trainer="torchtune", method="full")["inputs"]["precision"] == "bf16-true"
    with pytest.raises(BadInput, match="dropout"):
        _peak(tiny_cfg, lora_dropout=1.5)


def test_hf_profile_keeps_pefts_fp32_adapters_under_bf16_true(tiny_cfg):
    """peft's get_peft_model casts adapters to fp32 by default; without autocast (bf16-true, as PEFT's MetaMathQA
    runs train) each adapter casts its input to fp32 and keeps that copy for backward, where bf16 adapters keep none."""
    kw = dict(method="lora", precision="bf16-true", lora_targets="qv", loss="hf", lora_dropout=0.0)
    ours, hf = _peak(tiny_cfg, **kw), _peak(tiny_cfg, trainer="hf", **kw)
    assert hf["trainable_weights"] == 2 * ours["trainable_weights"]
    b, s, h = 2, 128, tiny_cfg.hidden_size
    copies = 2 * b * s * h * 4 * tiny_cfg.num_hidden_layers  # the q and v inputs in fp32, every block
    assert hf["activations"] - ours["activations"] >= copies // 2 and hf["peak"] > ours["peak"]
    off = _peak(tiny_cfg, trainer="hf", autocast_adapter_dtype=False, **kw)  # a run that turned peft's cast off
    assert off["trainable_weights"] == ours["trainable_weights"] and off["inputs"]["autocast_adapter_dtype"] is False
    assert "autocast_adapter_dtype" not in hf["inputs"]  # other requests keep their cache keys
    ln = {"peft_type": "LN_TUNING", "task_type": None, "target_modules": ["input_layernorm"]}
    ln_hf = _peak(tiny_cfg, trainer="hf", **{**kw, "peft_config": json.dumps(ln)})  # peft skips its cast for LN tuning
    ln_off = _peak(tiny_cfg, trainer="hf", autocast_adapter_dtype=False, **{**kw, "peft_config": json.dumps(ln)})
    assert ln_hf["peak"] == ln_off["peak"]  # its 16-bit norm copies, not fp32 ones whose fp32 outputs flow on
    full = _peak(tiny_cfg, trainer="hf", method="full", precision="bf16-true", loss="hf")
    assert full["trainable_weights"] == _peak(tiny_cfg, method="full", precision="bf16-true", loss="hf")["trainable_weights"]


def test_axolotl_casts_the_kbit_upcast_back_from_0_3_0(tiny_cfg):
    """Axolotl since v0.3.0 casts norms and embeddings back to 16 bits after peft's fp32 upcast; an older
    release (axolotl==0.1.0) keeps the upcast, and the two are cached apart."""
    now, hf = _peak(tiny_cfg, trainer="axolotl"), _peak(tiny_cfg, trainer="hf")
    old = _peak(tiny_cfg, trainer="axolotl==0.1.0")
    assert old["weights"] > 1.5 * now["weights"] and old["weights"] == hf["weights"]
    assert "versions" not in now["inputs"] and old["inputs"]["versions"] == "axolotl==0.1.0"


def test_litgpt_bf16_mixed_keeps_every_weight_and_logits_chunk_in_fp32(tiny_cfg, make_request):
    """Lightning Fabric's bf16-mixed builds the model in fp32 (bench row R18); under either precision Fabric
    casts the outputs to fp32 (convert_output), so the logits chunks litgpt holds are fp32."""
    from cheaptune.estimate.memory.simulate import simulate

    lit = _peak(tiny_cfg, trainer="litgpt", method="lora", precision="bf16-mixed")
    ours = _peak(tiny_cfg, method="lora", precision="bf16-mixed")
    true16 = _peak(tiny_cfg, trainer="litgpt", method="lora", precision="bf16-true")
    assert ours["weights"] == true16["weights"]  # bf16 frozen base in both
    assert lit["weights"] == pytest.approx(2 * ours["weights"], rel=0.02)  # fp32 (fp32 buffers in all three)
    assert lit["logits_loss"] == pytest.approx(true16["logits_loss"], rel=0.1)
    kw = dict(method="lora", lora_targets="qv", precision="bf16-true", micro_batch=2, seq_len=128)
    fp32 = simulate(make_request(tiny_cfg, trainer="litgpt", **kw), tiny_cfg).breakdown["logits_loss"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(_profiles(), "litgpt", dataclasses.replace(get_profile("litgpt"), fp32_outputs=False))
        bf16 = simulate(make_request(tiny_cfg, trainer="litgpt", **kw), tiny_cfg).breakdown["logits_loss"]
    assert bf16 < 0.8 * fp32


def test_cli_estimate_config_and_trainer(run_cli, tiny_cfg, tmp_path):
    model = tmp_path / "config.json"
    model.write_text(json.dumps(tiny_cfg.to_dict()))
    cfg = tmp_path / "ax.yml"
    cfg.write_text(STOCK.read_text().replace("NousResearch/Llama-2-7b-hf", str(model)))
    code, out, err = run_cli("estimate", "--config", str(cfg), "--seq-len", "64", "--json")
    assert code == 0, err
    obj = json.loads(out)
    assert obj["inputs"]["trainer"] == "axolotl" and "tokenizer_type" in obj["config"]["ignored"]
    code, out, err = run_cli("estimate", "--config", str(cfg), "--seq-len", "64")
    assert code == 0 and "ignored by the memory estimate" in out and out.count("tokenizer_type") == 1
    code, _, err = run_cli("estimate", "--model", str(model), "--method", "lora")
    assert code == 2 and "--micro-batch" in err and len(err.strip().splitlines()) == 1
    code, _, err = run_cli("estimate", "--model", str(model), "--method", "lora", "--micro-batch", "1",
                           "--seq-len", "32", "--trainer", "nemo")
    assert code == 2 and "nemo" in err


def _tiny_phi():
    from transformers import PhiConfig

    return PhiConfig(hidden_size=64, intermediate_size=256, num_attention_heads=4, num_hidden_layers=2,
                     vocab_size=128, max_position_embeddings=256, hidden_act="gelu_new")


def test_litgpt_runs_torchs_fused_gelu_where_hf_phi_runs_a_python_one(make_request):
    from cheaptune.estimate.memory.build import instantiate_on_meta
    from cheaptune.estimate.memory.profiles import apply_model_quirks
    from cheaptune.estimate.memory.simulate import simulate

    model = instantiate_on_meta(_tiny_phi())
    assert apply_model_quirks(model, "cheaptune") == 0
    assert apply_model_quirks(model, "litgpt") == 2  # one activation per block
    acts = [m for m in model.modules() if isinstance(m, torch.nn.GELU)]
    assert len(acts) == 2 and all(m.approximate == "tanh" for m in acts)
    # the fused kernel keeps only its input: the simulated step holds less than with the Python GELU
    cfg = _tiny_phi()
    kw = dict(method="lora", lora_targets="qv", precision="bf16-true", micro_batch=2, seq_len=128, loss="hf")
    litgpt = simulate(make_request(cfg, trainer="litgpt", **kw), cfg)
    python_gelu = dataclasses.replace(get_profile("litgpt"), fused_gelu=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(_profiles(), "litgpt", python_gelu)
        unfused = simulate(make_request(cfg, trainer="litgpt", **kw), cfg)
    assert litgpt.breakdown["activations"] < unfused.breakdown["activations"]


def _saved_bytes(cfg, targets: list[str], fused: bool) -> int:
    """Bytes of the storages autograd saves in one step of the HF class with peft LoRA (dropout 0.05) on `targets`."""
    import peft
    from transformers import AutoModelForCausalLM

    from cheaptune.estimate.memory.fused_qkv import apply_fused_qkv

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_dropout=0.05, target_modules=targets),
                                autocast_adapter_dtype=False)
    if fused:
        assert apply_fused_qkv(model, cfg, qv_preset=True) == cfg.num_hidden_layers
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.train()(input_ids=ids).logits.float().sum().backward()
    return sum(storages.values())


@pytest.mark.parametrize("arch", ["llama-mha", "llama-gqa", "gpt_neox"])
def test_litgpt_fused_qkv_holds_what_its_fused_projection_and_lora_keep(arch):
    """Per block and token, litgpt keeps the fused output's q and k parts (SDPA saves v, a view of it; only with as
    many kv heads as heads, and where the HF class has separate projections; with fewer, its repeated k and v are not
    held: fused_qkv.py says why) and zero_pad's source (q and v updates), but one LoRA dropout where peft runs one
    per adapted projection."""
    from transformers import GPTNeoXConfig, LlamaConfig

    h, tokens, layers = 64, 2 * 16, 2
    shape = dict(hidden_size=h, intermediate_size=128, num_attention_heads=4, num_hidden_layers=layers, vocab_size=128)
    if arch == "gpt_neox":  # fused query_key_value, adapted whole by peft: only zero_pad's source is new
        cfg, targets, kv = GPTNeoXConfig(**shape), ["query_key_value"], h
        held, dropouts = h + kv, 0
    else:
        kv = h if arch == "llama-mha" else h // 2
        cfg = LlamaConfig(**shape, num_key_value_heads=kv // 16, max_position_embeddings=64)
        targets = ["q_proj", "v_proj"]
        # one dropout fewer per block: its output (2 bytes an element) and, where the input needs a gradient (not in
        # the first block), torch's CPU dropout noise (2 bytes; CUDA keeps a 1-byte mask)
        held, dropouts = (h + kv if kv == h else 0) + (h + kv), 2 * h + 4 * h
    extra = _saved_bytes(cfg, targets, fused=True) - _saved_bytes(cfg, targets, fused=False)
    assert extra == tokens * (layers * 2 * held - dropouts)


def test_math_sdpa_in_16_bits_as_torch_before_2_5_ran_it(make_request):
    """Falcon's one kv head sends SDPA to its math path, which keeps the [heads, T, T] probabilities: torch >= 2.5
    upcasts them to fp32, torch 2.1 (litgpt's resource tables) kept bf16, half the bytes; the flag is restored."""
    from transformers import FalconConfig

    from cheaptune.estimate.memory.simulate import simulate

    cfg = FalconConfig(hidden_size=64, num_attention_heads=4, multi_query=True, new_decoder_architecture=False,
                       alibi=False, num_hidden_layers=2, vocab_size=128, max_position_embeddings=512)
    kw = dict(method="full", precision="bf16-true", micro_batch=1, seq_len=256, loss="hf")
    fp32 = simulate(make_request(cfg, **kw), cfg).breakdown["activations"]
    bf16 = simulate(make_request(cfg, versions="torch==2.1.0", **kw), cfg).breakdown["activations"]
    probs = 2 * 4 * 256 * 256  # one block's probabilities in bf16, what the upcast adds at least
    assert fp32 - bf16 >= probs and not torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()


def test_any_peft_method_is_built_from_its_saved_config(tiny_cfg):
    """A saved PeftConfig (here VeRA, as in PEFT's method_comparison results) is what the simulation trains."""
    from cheaptune.estimate.memory.build import peft_config_from_json

    vera = {"peft_type": "VERA", "task_type": None, "r": 8, "target_modules": ["q_proj", "v_proj"],
            "peft_version": "0.19.2.dev0@UNKNOWN", "base_model_name_or_path": "meta-llama/Llama-3.2-3B"}
    assert type(peft_config_from_json(json.dumps(vera))).__name__ == "VeraConfig"
    base = dict(model=tiny_cfg.to_dict(), method="lora", micro_batch=1, seq_len=16, precision="bf16-true", trainer="hf")
    est = estimate_memory(EstimateRequest(**base, peft_config=json.dumps(vera)))
    h, kv = tiny_cfg.hidden_size, tiny_cfg.num_key_value_heads * tiny_cfg.hidden_size // tiny_cfg.num_attention_heads
    # VeRA trains two scaling vectors per target (lambda_d: r, lambda_b: out); its projections are frozen, shared
    per_layer = (8 + h) + (8 + kv)
    assert est.basis == "simulated" and est.trainable_params == per_layer * tiny_cfg.num_hidden_layers
    assert est.inputs["peft_config"] == json.dumps(vera)
    with pytest.raises(BadInput, match="PEFT config not usable"):
        estimate_memory(EstimateRequest(**base, peft_config=json.dumps({"peft_type": "NOPE"})))
    with pytest.raises(BadInput, match="adapter method"):
        estimate_memory(EstimateRequest(**{**base, "method": "full"}, peft_config=json.dumps(vera)))


def test_litgpt_quantizes_falcons_linears_where_transformers_leaves_them_16_bit():
    """litgpt's own model has plain torch.nn.Linear layers, all swapped to 4 bits; transformers' 4-bit loader
    skips FalconLinear, so only the transformers-based profiles refuse falcon QLoRA."""
    from transformers import FalconConfig

    cfg = FalconConfig(hidden_size=64, num_attention_heads=4, multi_query=True, new_decoder_architecture=False,
                       alibi=False, num_hidden_layers=2, vocab_size=128, max_position_embeddings=512).to_dict()
    base = dict(model=cfg, method="qlora", micro_batch=1, seq_len=32, lora_targets="qv")
    lit = estimate_memory(EstimateRequest(**base, trainer="litgpt"))
    assert lit.basis == "simulated" and lit.total_params > lit.trainable_params > 0
    with pytest.raises(BadInput, match="FalconLinear are not replaced"):
        estimate_memory(EstimateRequest(**base, trainer="hf"))


def test_unsloth_offloaded_checkpointing_keeps_block_inputs_off_the_gpu(tiny_cfg):
    """Unsloth's checkpointing moves each block's input to host RAM: the GPU holds no block input between
    forward and backward, where in-GPU (reentrant) checkpointing holds one per block (seen at the forward's peak,
    the end of the stack; the backward's is set by the loss, the same in both)."""
    layers = 4
    cfg = {**tiny_cfg.to_dict(), "num_hidden_layers": layers}
    kw = dict(model=cfg, method="qlora", micro_batch=2, seq_len=64, grad_ckpt=True, trainer="unsloth", full_sim=True)
    offloaded = estimate_memory(EstimateRequest(**kw)).phase_peaks["forward"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(_profiles(), "unsloth", dataclasses.replace(get_profile("unsloth"), offload_ckpt=False))
        on_gpu = estimate_memory(EstimateRequest(**kw, lora_alpha=33)).phase_peaks["forward"]  # its own cache key
    block_input = 2 * 64 * tiny_cfg.hidden_size * 2  # [b, s, h] in bf16
    assert on_gpu - offloaded >= (layers - 2) * block_input


def test_litgpt_keeps_its_own_lm_head_where_hf_ties_it(tiny_cfg):
    """litgpt's checkpoint conversion copies a tied embedding into its own lm_head: one more [vocab, hidden]
    weight (bf16 for LoRA; 4-bit, and the largest dequantized weight, for QLoRA)."""
    cfg = {**tiny_cfg.to_dict(), "tie_word_embeddings": True}
    kw = dict(model=cfg, method="lora", micro_batch=1, seq_len=32, trainer="litgpt", lora_targets="qv")
    untied = estimate_memory(EstimateRequest(**kw)).breakdown["weights"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(_profiles(), "litgpt", dataclasses.replace(get_profile("litgpt"), untied_head=False))
        tied = estimate_memory(EstimateRequest(**kw, full_sim=True)).breakdown["weights"]
    assert untied - tied == tiny_cfg.vocab_size * tiny_cfg.hidden_size * 2


def test_fp16_quant_state_doubles_the_dequantized_weight(make_request, tiny_cfg):
    """Lightning quantizes from fp16, so bitsandbytes' dequantize_4bit gives fp16 and .to(A.dtype) a bf16 copy."""
    from cheaptune.estimate.memory.overheads import workspaces

    cfg = tiny_cfg.to_dict()
    big = 4096 * 4096
    lit = workspaces(make_request(tiny_cfg, method="qlora", trainer="litgpt"), cfg, big)
    hf = workspaces(make_request(tiny_cfg, method="qlora", trainer="hf"), cfg, big)
    assert lit["forward"] - hf["forward"] == 2 * big
