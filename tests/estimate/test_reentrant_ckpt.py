"""Reentrant gradient checkpointing (transformers before #43203 ran reentrant checkpointing): bitsandbytes < 0.43.2 kept
each 4-bit matmul's input outside save_for_backward, which non-reentrant checkpointing keeps for every block and the
reentrant one only for the block being recomputed (its first forward runs under no_grad)."""

from __future__ import annotations

from cheaptune.estimate.memory.memory import EstimateRequest, estimate_memory


def test_reentrant_checkpointing_drops_old_bitsandbytes_kept_inputs(tiny_cfg, make_request):
    from cheaptune.estimate.memory.simulate import simulate

    kw = dict(method="qlora", micro_batch=2, seq_len=128, lora_targets="qv", grad_ckpt=True, trainer="axolotl")
    pins = {(keep, re): ",".join(("bitsandbytes==" + ("0.41.1" if keep else "0.50.2"),
                                  "transformers==" + ("4.34.0" if re else "5.24.0")))
            for keep in (False, True) for re in (False, True)}
    acts = {k: simulate(make_request(tiny_cfg, versions=v, **kw), tiny_cfg).breakdown["activations"]
            for k, v in pins.items()}
    h, layers, tokens = tiny_cfg.hidden_size, tiny_cfg.num_hidden_layers, 2 * 128
    kept_per_block = tokens * h * 2  # q_proj and v_proj share one bf16 input per block
    # non-reentrant: every block's kept input outlives its block; reentrant: at most the recomputed block's
    assert acts[True, False] - acts[False, False] >= (layers - 1) * kept_per_block
    assert acts[True, True] - acts[False, True] <= kept_per_block


def test_versions_key_the_cache_only_where_set(tiny_cfg):
    base = dict(model=tiny_cfg.to_dict(), method="lora", micro_batch=1, seq_len=32, grad_ckpt=True, trainer="hf")
    plain = estimate_memory(EstimateRequest(**base))
    reentrant = estimate_memory(EstimateRequest(**base, versions="transformers==4.34.0"))
    assert "versions" not in plain.inputs and reentrant.inputs["versions"] == "transformers==4.34.0"
    assert reentrant.details["versions"]["mechanisms"]["reentrant_ckpt"] is True
    assert plain.details["versions"]["mechanisms"]["reentrant_ckpt"] is False
