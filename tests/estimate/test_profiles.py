"""Trainer profiles: every setting cited, and each quirk really simulated (it moves the peak)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from cheaptune.errors import BadInput
from cheaptune.estimate.memory import EstimateRequest, estimate_memory
from cheaptune.estimate.profiles import _profiles, get_profile, trainers

STOCK = Path(__file__).parent / "data" / "axolotl_llama2_qlora.yml"  # axolotl v0.18.0 examples/llama-2/qlora.yml


def test_every_profile_setting_names_its_source():
    assert set(trainers()) == {"cheaptune", "hf", "axolotl", "llama-factory", "litgpt", "torchtune"}
    for prof in _profiles().values():
        for name in (f.name for f in dataclasses.fields(prof)):
            if name in ("name", "about", "version", "sources"):
                continue
            if getattr(prof, name) != getattr(get_profile("cheaptune"), name):
                assert prof.sources.get(name), f"{prof.name}.{name} has no source"
    assert get_profile("LLaMA_Factory").name == "llama-factory"
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
    old_bnb, new_bnb = _peak(tiny_cfg, trainer="litgpt", bnb_keeps_input=True), _peak(tiny_cfg, trainer="litgpt")
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


def test_axolotl_casts_the_kbit_upcast_back_unless_a_row_keeps_it(tiny_cfg):
    """Axolotl since v0.3.0 casts norms and embeddings back to 16 bits after peft's fp32 upcast; a request
    for an older run keeps the upcast (kbit_prep=True), and the two are cached apart."""
    now, hf = _peak(tiny_cfg, trainer="axolotl"), _peak(tiny_cfg, trainer="hf")
    old = _peak(tiny_cfg, trainer="axolotl", kbit_prep=True)
    assert old["weights"] > 1.5 * now["weights"] and old["weights"] == hf["weights"]
    assert "kbit_prep" not in now["inputs"] and old["inputs"]["kbit_prep"] is True
    assert _peak(tiny_cfg, trainer="hf", kbit_prep=False)["weights"] == now["weights"]


def test_litgpt_bf16_mixed_keeps_every_weight_and_logits_chunk_in_fp32(tiny_cfg, make_request):
    """Lightning Fabric's bf16-mixed builds the model in fp32 (bench row R18); under either precision Fabric
    casts the outputs to fp32 (convert_output), so the logits chunks litgpt holds are fp32."""
    from cheaptune.estimate.simulate import simulate

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
    from cheaptune.estimate.build import instantiate_on_meta
    from cheaptune.estimate.profiles import apply_model_quirks
    from cheaptune.estimate.simulate import simulate

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

    from cheaptune.estimate.fused_qkv import apply_fused_qkv

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
    many kv heads as heads, and where the HF class has separate projections) and zero_pad's source (q and v updates),
    but one LoRA dropout where peft runs one per adapted projection."""
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

    from cheaptune.estimate.simulate import simulate

    cfg = FalconConfig(hidden_size=64, num_attention_heads=4, multi_query=True, new_decoder_architecture=False,
                       alibi=False, num_hidden_layers=2, vocab_size=128, max_position_embeddings=512)
    kw = dict(method="full", precision="bf16-true", micro_batch=1, seq_len=256, loss="hf")
    fp32 = simulate(make_request(cfg, **kw), cfg).breakdown["activations"]
    bf16 = simulate(make_request(cfg, math_sdpa_16bit=True, **kw), cfg).breakdown["activations"]
    probs = 2 * 4 * 256 * 256  # one block's probabilities in bf16, what the upcast adds at least
    assert fp32 - bf16 >= probs and not torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()


def test_torchtune_0_1_init_reserve_is_held_through_training():
    """torchtune 0.1 with torchao 0.1 leaves a fragmented cache after model init (estimate/torchao_init.py); the
    allocator never returns it, so the run's peak reserved and device total carry it, its peak allocated does not."""
    from cheaptune.demo.tiny import tiny_llama_config
    from cheaptune.estimate.torchao_init import init_peaks

    cfg = tiny_llama_config(512, hidden_size=1024, intermediate_size=4096, num_attention_heads=8)
    base = dict(model=cfg.to_dict(), method="qlora", micro_batch=1, seq_len=8, lora_targets="all-linear",
                trainer="torchtune")
    plain = estimate_memory(EstimateRequest(**base))
    torchao = estimate_memory(EstimateRequest(**base, torchao_nf4_unchunked=True))
    assert "load_time_peak" not in plain.breakdown and "torchao_nf4_unchunked" not in plain.inputs
    assert torchao.peak_allocated_bytes == plain.peak_allocated_bytes
    every_linear = frozenset(("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"))
    reserved, allocated = init_peaks(1024, 4096, cfg.vocab_size, cfg.num_hidden_layers, 8, cfg.num_key_value_heads,
                                     128, cfg.max_position_embeddings, every_linear, 16)
    assert torchao.details["load_peak_allocated"] == allocated
    assert torchao.peak_reserved_bytes == reserved > plain.peak_reserved_bytes
    assert torchao.breakdown["load_time_peak"] == reserved - plain.peak_reserved_bytes
    assert sum(torchao.breakdown.values()) == torchao.device_total_bytes
    lora = estimate_memory(EstimateRequest(**{**base, "method": "lora"}, torchao_nf4_unchunked=True))
    assert "load_time_peak" not in lora.breakdown  # only NF4 quantization runs that init


def test_any_peft_method_is_built_from_its_saved_config(tiny_cfg):
    """A saved PeftConfig (here VeRA, as in PEFT's method_comparison results) is what the simulation trains."""
    from cheaptune.estimate.build import peft_config_from_json

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


def _osf(version: str, rank: int = 6) -> str:
    return json.dumps({"peft_type": "OSF", "task_type": None, "target_modules": ["proj"], "effective_rank": rank,
                       "peft_version": f"{version}@UNKNOWN"})


def test_osf_before_peft_0_21_rebuilds_each_weight_from_its_high_rank_factors():
    """peft < 0.21 kept U_high/S_high/V_high as buffers and ran F.linear on the rebuilt weight; the swapped
    layer holds exactly those, trains (gradients reach the low-rank factors) and newer configs are left alone."""
    import peft

    from cheaptune.estimate.profiles import apply_peft_version_quirks

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 12)

        def forward(self, x):
            return self.proj(x)

    def built():
        return peft.get_peft_model(Net(), peft.OSFConfig(target_modules=["proj"], effective_rank=6))

    assert apply_peft_version_quirks(built(), _osf("0.21.2")) == 0
    model = built()
    assert apply_peft_version_quirks(model, _osf("0.19.2.dev0")) == 1
    layer = model.base_model.model.proj
    assert layer._osf_U_high["default"].shape == (12, 6) and layer._osf_V_high["default"].shape == (6, 8)
    assert layer._osf_S_high["default"].shape == (6,) and "default" not in layer._osf_U_low_init
    out = model(torch.randn(3, 8))
    out.sum().backward()
    params = layer.osf_svd_params["default"]
    assert out.shape == (3, 12) and params["U_low"].grad.shape == (12, 2) and params["V_low"].grad.shape == (2, 8)


def test_osf_config_from_an_old_peft_holds_the_rebuilt_weights(tiny_cfg):
    """An OSF config saved by peft < 0.21 keeps its rebuilt weights for backward, where peft 0.21's factored
    forward keeps only rank-2r pieces: with two trainable directions per matrix, the difference is most of the
    rebuilt weights (the rest: what each version saves besides), plus the larger high-rank buffers."""
    h, i, layers = tiny_cfg.hidden_size, tiny_cfg.intermediate_size, tiny_cfg.num_hidden_layers
    cfg = {**json.loads(_osf("0.19.2.dev0", rank=h - 2)), "target_modules": ["q_proj", "gate_proj"]}
    base = dict(model=tiny_cfg.to_dict(), method="lora", micro_batch=1, seq_len=16, precision="bf16-true", trainer="hf")
    old = estimate_memory(EstimateRequest(**base, peft_config=json.dumps(cfg)))
    new = estimate_memory(EstimateRequest(**base, peft_config=json.dumps({**cfg, "peft_version": "0.21.2"})))
    rebuilt = (h * h + i * h) * 2 * layers  # q_proj and gate_proj, bf16
    assert old.breakdown["activations"] - new.breakdown["activations"] > rebuilt / 2
    assert old.breakdown["weights"] > new.breakdown["weights"]
    assert old.peak_allocated_bytes > new.peak_allocated_bytes
